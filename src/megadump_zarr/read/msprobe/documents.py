"""The ``zarr.json`` documents of an msprobe dump read in place, assembled as the writer assembles them.

The same rules as :meth:`megadump_zarr.store.writer.WindowSession.commit` (data groups carry inline
consolidated metadata of what lies below them, other groups are plain, the window document carries every
node below it) and :mod:`megadump_zarr.store.root_index` (the root and each rank list the windows), built
with the writer's own encoders, so a reader sees the documents ``megadump convert`` would write, except for
the record arrays' codec chain (a plain ``bytes`` codec, see :mod:`.store`).
"""

from __future__ import annotations

from collections import defaultdict
import json
from typing import Any

import numpy as np

from megadump_zarr.read.msprobe.dump_json import Call, Tensor
from megadump_zarr.layout.paths import rank_dir, window_path
from megadump_zarr.store.metadata import (
    array_document_bytes,
    consolidated_group_bytes,
    dumps,
    flat_group_bytes,
    group_document,
    plain_group_bytes,
)

__all__ = ["rank_and_root_documents", "record_node", "statistics_node", "window_documents"]

Rows = tuple[int, int, int]
"""``(first row, one past the last row, rows of a full chunk)`` of one chunk (``(0, 0, 0)`` for a 0-d array)."""


def record_node(
    item: Tensor, component: str, attrs: dict[str, Any], chunk_bytes: int
) -> tuple[bytes, list[tuple[str, Rows]]]:
    """One tensor leaf's array document (raw ``bytes`` codec, no checksum) and its chunks.

    Args:
        item: The planned tensor leaf.
        component: Its array name in the invocation group.
        attrs: The record's attributes.
        chunk_bytes: Target bytes per chunk (the writer's ``chunk_bytes``).

    Returns:
        ``(document, [(chunk key relative to the array, rows)])``.
    """
    from megadump_zarr.store.chunking import plan_chunks
    from megadump_zarr.layout.dtypes import NUMPY_DTYPES
    from megadump_zarr.store.encoding import NO_COMPRESSION

    dtype = np.dtype(NUMPY_DTYPES[item.dtype])
    plan = plan_chunks(item.shape, dtype.itemsize, chunk_bytes)
    dims = tuple(f"{component}_dim_{d}" for d in range(len(item.shape)))
    doc = array_document_bytes(plan.shape, dtype, plan.chunks, NO_COMPRESSION, dumps(attrs), dims, checksum=False)
    if not plan.shape:
        return doc, [(plan.key(0), (0, 0, 0))]
    return doc, [(plan.key(i), (*plan.rows(i), plan.chunks[0])) for i in plan]


def statistics_node(call: Call, components: list[str]) -> tuple[list[tuple[str, bytes]], dict[str, tuple[str, bytes]]]:
    """The statistics table of a statistics-task call, as the writer stores it (its compressor, crc32c).

    Args:
        call: The planned call.
        components: Its records' names in the invocation group.

    Returns:
        :func:`megadump_zarr.store.statistics_table.statistics_nodes`'s ``(items, nodes)``.
    """
    from megadump_zarr.codecs import parse_compressor
    from megadump_zarr.read.msprobe.statistics_table import statistics_table
    from megadump_zarr.store.statistics_table import statistics_nodes

    return statistics_nodes(statistics_table(call.key, call.tensors, components), parse_compressor("default"), True)


def window_documents(key: str, attrs_json: bytes, nodes: dict[str, tuple[str, bytes]]) -> dict[str, bytes]:
    """Every group document of one window (its own last), as :meth:`WindowSession.commit` writes them.

    Args:
        key: The window's key (``rank_0/window_0000``).
        attrs_json: The window's attributes, encoded.
        nodes: Path relative to the window -> ``("group", attrs json)`` or ``("array", document)``.

    Returns:
        Store key -> document, array documents included.
    """
    data_groups = {path.rpartition("/")[0] for path, (kind, _) in nodes.items() if kind == "array"}
    entries: dict[str, list[tuple[str, bytes]]] = defaultdict(list)
    for path, (kind, payload) in nodes.items():
        flat = flat_group_bytes(payload) if kind == "group" else payload
        entries[""].append((path, flat))
        cut = path.rfind("/")
        while cut > 0:
            parent = path[:cut]
            if parent in data_groups:
                entries[parent].append((path[cut + 1 :], flat))
            cut = path.rfind("/", 0, cut)
    out: dict[str, bytes] = {}
    for path, (kind, payload) in nodes.items():
        if kind == "array":
            out[f"{key}/{path}/zarr.json"] = payload
        elif path in data_groups:
            out[f"{key}/{path}/zarr.json"] = consolidated_group_bytes(payload, entries[path])
        else:
            out[f"{key}/{path}/zarr.json"] = plain_group_bytes(payload)
    out[f"{key}/zarr.json"] = consolidated_group_bytes(attrs_json, entries[""])
    return out


def rank_and_root_documents(docs: dict[str, bytes], windows: list[tuple[int, int]]) -> dict[str, bytes]:
    """The root's and every rank's ``zarr.json``, indexed as :func:`~megadump_zarr.store.root_index.index_root`
    leaves them after ``convert`` (plain when the index would pass its size limit).

    Args:
        docs: The windows' documents so far (store key -> bytes).
        windows: ``(rank, window index)`` of every window.
    """
    from megadump_zarr.store.root_index import INDEX_LIMIT, index_documents
    from megadump_zarr.store.writer import LAYOUT_VERSION

    root_doc = group_document({"megadump_zarr": {"layoutVersion": LAYOUT_VERSION}})
    ranks = sorted({rank for rank, _ in windows})
    rank_docs = {rank_dir(rank): group_document({}) for rank in ranks}
    window_docs = {window_path(r, w): json.loads(docs[f"{window_path(r, w)}/zarr.json"]) for r, w in windows}
    out = index_documents(root_doc, rank_docs, window_docs, {})
    if len(out["zarr.json"]) > INDEX_LIMIT:
        out = {"zarr.json": dumps(root_doc), **{f"{rank}/zarr.json": dumps(doc) for rank, doc in rank_docs.items()}}
    return out
