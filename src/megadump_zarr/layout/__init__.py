"""The on-disk layout vocabulary and the write model: a leaf every layer may import (stdlib, numpy, _version).

:mod:`.write_model` (the plain descriptions of a window the dumper builds and the store persists), :mod:`.paths`
(the path grammar), :mod:`.schema` (the format version and layouts), :mod:`.manifest` (the window manifest),
:mod:`.packs` (a task-record pack's arrays and attributes), :mod:`.names` (store-safe names), :mod:`.limits` (what
every writer refuses before it writes).
"""
