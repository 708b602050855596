"""The on-disk layout vocabulary and the write model: a leaf every layer may import (stdlib and numpy only).

:mod:`.write_model` (the plain descriptions of a window the dumper builds and the store persists),
:mod:`.names` (store-safe names), :mod:`.limits` (what every writer refuses before it writes).
"""
