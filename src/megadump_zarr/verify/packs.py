"""Checks of a window's task-record packs (schema 7+): the stored pack documents, each row's task ids and
(format 3) each row's global row coordinates.

The readers describe a packed window's records as task groups, record arrays and row coordinates built from
the window document (:mod:`megadump_zarr.read.pack_rows`), which the document checks check; these compare the
packs' own documents (what plain zarr reads) with the window document, the checksummed id arrays of each pack
with the tasks its rows claim to be, and each record shard's bytes with the crc32c its array records for that
place (``shardCrc32c``, ``store.packs``). Each record shard is read once, whole: the chunk check takes each
record's chunk (its row's inner chunk) from those same bytes (``CheckState.read_chunks``).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from megadump_zarr.verify.chunks import ChunkRead, expected_chunks, open_array
from megadump_zarr.verify.documents import group_consolidated_agrees, stored_agrees
from megadump_zarr.verify.placement import check_shard, shard_digests
from megadump_zarr.verify.report import CheckState

__all__ = ["check_pack_documents"]


def check_pack_documents(state: CheckState, base: Any, window: str, stored: dict[str, Any], packs: Any) -> None:
    """Schema 7+: the stored documents of a window's task-record packs (what plain zarr reads) equal the window
    document's entries the readers are built from; each row's ids and row coordinates; each shard, read once.

    Args:
        state: The window's check state.
        base: The dump's store.
        window: The window key.
        stored: The window document's consolidated nodes, as stored.
        packs: The window's :class:`~megadump_zarr.read.pack_rows.PackedWindow`.
    """
    from megadump_zarr.read.location import get_many
    from megadump_zarr.read.pack_nodes import stored_pack_nodes

    nodes = stored_pack_nodes(stored)
    paths = sorted(nodes)
    for path, raw in zip(paths, get_many(base, [f"{window}/{p}/zarr.json" for p in paths])):
        key = f"{window}/{path}/zarr.json"
        entry = nodes[path]
        own = stored_agrees(state, key, raw, entry, "pack")
        if own is not None and own.get("node_type") == "group":
            group_consolidated_agrees(state, key, path, own, nodes)
    nodes = {**nodes, **packs.rows}  # format 4: each row's attributes rebuilt from row_fields (checked there)
    _check_pack_rows(state, base, window, nodes)
    _check_row_coordinates(state, base, window, nodes)
    _check_shards(state, packs, base, window, nodes)


_PACK_LEAF = re.compile(r"^pack_\d+$")
_BATCH = 16  # shards (up to PACK_SHARD_BYTES each, uncompressed) fetched at once


def _check_shards(state: CheckState, packs: Any, base: Any, window: str, nodes: dict[str, Any]) -> None:
    """Each record shard of each pack is the one its array recorded for that place (``shardCrc32c``): a shard
    with valid inner checksums copied from another window, or swapped with a same-shaped one, is named. The
    record arrays of a pack that records digests are then bound (``state.shard_bound``).

    Each shard is read once, whole: its digest is checked from those bytes, and the record chunks it holds are
    taken from them too (:meth:`~megadump_zarr.read.pack_rows.PackedWindow.split_shard`: the readers' own
    index checks and messages) and kept for the chunk check as what it needs of each (``state.read_chunks``,
    :class:`~megadump_zarr.verify.chunks.ChunkRead`), so it reads no shard again. A row coordinate's chunk is
    computed (:func:`~megadump_zarr.store.packs.range_chunk`), as the readers compute it.
    """
    from megadump_zarr.layout.inventory import chunk_digest
    from megadump_zarr.read.location import get_many
    from megadump_zarr.read.pack_rows import sized_store
    from megadump_zarr.store.packs import INDEX_ARRAYS, TASK_ARRAYS, RangeSource, range_chunk

    held = packs.shard_chunks()  # shard -> the record chunks it holds
    sized = sized_store(base) is not None
    for rel, source in packs.sources.items():
        if isinstance(source, RangeSource):
            key = f"{window}/{rel}"
            state.read_chunks[key] = ChunkRead.of(key, range_chunk(source))
            state.shard_bound.add(key.rpartition("/")[0])  # computed from its row's bounds: no chunk to misplace

    def read(shards: list[str], recorded: list[int] | None = None, per_shard: int = 0) -> None:
        """Read each shard once: check its digest, keep what the chunk check needs of its chunks."""
        for start in range(0, len(shards), _BATCH):
            batch = shards[start : start + _BATCH]
            for i, (shard, raw) in enumerate(zip(batch, get_many(base, batch))):
                if raw is not None:  # its window-inventory digest, from the same bytes (``verify.inventory``)
                    state.digested[shard] = chunk_digest(raw)[0]
                if raw is not None and recorded is not None and state.inventory is None:  # else: the inventory binds it
                    check_shard(state, shard, raw, per_shard, recorded[start + i])
                if shard not in held:
                    continue
                for key, chunk in packs.split_shard(held.pop(shard), shard, raw, sized):
                    summary = ChunkRead.of(key, chunk) if isinstance(chunk, bytes) else chunk
                    state.read_chunks[key] = summary
                    if not isinstance(summary, ChunkRead) or summary.error is not None:
                        state.damaged.add(shard)  # named by its rows, as the readers name it: not also as moved

    for path, doc in sorted(nodes.items()):
        pack, _, name = path.rpartition("/")
        if name in INDEX_ARRAYS or not _PACK_LEAF.match(pack.rpartition("/")[2]) or not isinstance(doc, dict):
            continue
        expected = expected_chunks(doc) if doc.get("node_type") == "array" else None
        if expected is None:
            continue  # a group, or a grid the chunk check names
        key = f"{window}/{path}"
        digests = shard_digests(state, key, doc, len(expected))
        if digests is None:
            continue
        try:
            zarray = open_array(base, key, doc)
        except Exception:  # a malformed document is named by the document checks
            continue
        keys = [f"{key}/{zarray.metadata.encode_chunk_key(c)}" for c in expected]
        read(keys, digests, math.prod(zarray.shards) // math.prod(zarray.chunks))  # inner chunks per shard
        task_doc = next(
            (nodes.get(f"{pack}/{t}") for t in TASK_ARRAYS if isinstance(nodes.get(f"{pack}/{t}"), dict)), {}
        )
        tasks = (task_doc.get("attributes") or {}).get("tasks")
        stage = pack.rpartition("/")[0]
        for entry in tasks if isinstance(tasks, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("group"), str):
                state.shard_bound.add(f"{window}/{stage}/{entry['group']}/{name}")
    read(sorted(held))  # shards of packs that record no digest (written before shardCrc32c)


# The pack arrays whose values name each row's task, and the task attribute each must equal (-1: none).
_ROW_IDS = (
    (None, lambda attrs: attrs.get("taskId")),  # None: the pack's task id array (task_id, or schema 7's task)
    ("owner_id", lambda attrs: attrs["owner"].get("id") if isinstance(attrs.get("owner"), dict) else None),
    ("core_id", lambda attrs: attrs.get("coreId")),
)


def _packs_with_tasks(nodes: dict[str, Any]) -> list[tuple[str, str, list[Any]]]:
    """``(pack, task id array name, attributes.tasks)`` of each pack among ``nodes`` whose task id array lists its
    rows (a malformed pack is named by the readers' expansion), in path order."""
    from megadump_zarr.store.packs import TASK_ARRAYS

    found = []
    for task_path, task_doc in sorted(nodes.items()):
        pack, _, leaf = task_path.rpartition("/")
        attributes = task_doc.get("attributes") if isinstance(task_doc, dict) else None
        tasks = attributes.get("tasks") if isinstance(attributes, dict) else None
        if leaf in TASK_ARRAYS and isinstance(tasks, list) and _PACK_LEAF.match(pack.rpartition("/")[2]):
            found.append((pack, leaf, tasks))
    return found


def _read_whole(
    base: Any, key: str, doc: dict[str, Any], expected: list[tuple[int, ...]], digested: dict[str, int] | None = None
) -> tuple[list[str], Any]:
    """A small pack array (row ids, row coordinates) read once: ``(missing chunk keys, None)``, or ``([], values)``
    decoded from the bytes just read (crc32c checked by zarr; raises on a damaged chunk); each chunk's inventory
    digest is kept in ``digested`` (``CheckState.digested``)."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.storage import MemoryStore

    from megadump_zarr.read.location import get_many

    zarray = open_array(base, key, doc)
    chunks = [f"{key}/{zarray.metadata.encode_chunk_key(c)}" for c in expected]
    raws = get_many(base, chunks)
    if digested is not None:
        from megadump_zarr.layout.inventory import chunk_digest

        digested.update((k, chunk_digest(raw)[0]) for k, raw in zip(chunks, raws) if raw is not None)
    missing = [k for k, raw in zip(chunks, raws) if raw is None]
    if missing:
        return missing, None
    held = MemoryStore({k: default_buffer_prototype().buffer.from_bytes(raw) for k, raw in zip(chunks, raws)})
    return [], np.asarray(open_array(held, key, doc)[...])


def _check_pack_rows(state: CheckState, base: Any, window: str, nodes: dict[str, Any]) -> None:
    """Each pack row is the task its ``attributes.tasks`` entry names: the ids stored (checksummed) in the pack's
    ``task_id`` (schema 7: ``task``), ``owner_id`` and ``core_id`` arrays equal the entry's ``taskId``, ``owner.id`` and ``coreId``.

    The readers' expansion checks rows against their records' attributes without reading data; two swapped rows of
    a pack whose records carry no row coordinate agree with those, and only these ids tell them apart (schema
    6 kept the task id in the group's directory name).
    """
    for pack, leaf, tasks in _packs_with_tasks(nodes):
        for name, wanted in _ROW_IDS:
            name = name or leaf
            doc = nodes.get(f"{pack}/{name}")
            key = f"{window}/{pack}/{name}"
            if not isinstance(doc, dict):
                state.add(f"{key}/zarr.json", "the pack has no such array (its rows' ids cannot be checked)")
                continue
            expected = expected_chunks(doc)
            if expected is None:
                continue  # reported by the chunk check
            try:
                missing, values = _read_whole(base, key, doc, expected, state.digested)
                if missing:  # not among the records the chunk check walks; absent reads as fill_value
                    named = [
                        wanted(t.get("attrs")) if isinstance(t, dict) and isinstance(t.get("attrs"), dict) else None
                        for t in tasks
                    ]
                    if any((-1 if n is None else n) != doc.get("fill_value", 0) for n in named):
                        for k in missing:
                            state.add(k, "chunk is missing")
                    continue
                stored = values.reshape(-1).tolist()
            except Exception as error:  # a damaged chunk is reported by the chunk check; this names the ids
                state.add(key, f"the row ids cannot be read: {type(error).__name__}: {error}")
                continue
            if len(stored) != len(tasks):
                state.add(key, f"holds {len(stored)} ids for {len(tasks)} rows of attributes.tasks")
                continue
            for row, (entry, value) in enumerate(zip(tasks, stored)):
                attrs = entry.get("attrs") if isinstance(entry, dict) else None
                named = wanted(attrs) if isinstance(attrs, dict) else None
                named = -1 if named is None else named
                if named != value:
                    state.add(
                        key,
                        f"row {row} holds {name} {value} but attributes.tasks[{row}] names {named}: the "
                        f"row's records are not the task its entry names",
                    )
                    break


def _check_row_coordinates(state: CheckState, base: Any, window: str, nodes: dict[str, Any]) -> None:
    """Format 3: each pack's ``global_{dim}`` array (what plain xarray shows as the rows' place in the stitched
    tensor) holds, row by row, ``arange(start, stop)`` of the row's ``attributes.tasks[row].coords.{dim}`` (what
    the readers place the rows by); a format-3 pack without one of its row coordinate arrays is named.
    """
    from megadump_zarr.store.packs import PACK_ATTR, row_coordinate_name, row_coordinate_names

    for pack, _, tasks in _packs_with_tasks(nodes):
        bounds = [entry.get("coords") if isinstance(entry, dict) else None for entry in tasks]
        if not all(isinstance(b, dict) for b in bounds):
            continue  # named by the readers' expansion
        group = nodes.get(pack)
        version = ((group.get("attributes") or {}) if isinstance(group, dict) else {}).get(PACK_ATTR)
        found = row_coordinate_names(pack, nodes, tasks)
        for dim in sorted({dim for b in bounds for dim in b}):
            name = row_coordinate_name(dim)
            key = f"{window}/{pack}/{name}"
            doc = nodes.get(f"{pack}/{name}")
            if name not in found:
                if doc is None and type(version) is int and version >= 3:
                    state.add(
                        f"{key}/zarr.json", f"the pack has no such array (format {version} stores each row coordinate)"
                    )
                continue  # an unmarked array is a record to the readers, named there if malformed
            expected = expected_chunks(doc)
            if expected is None:
                continue  # reported by the chunk check
            try:
                missing, stored = _read_whole(base, key, doc, expected, state.digested)
                if missing:  # absent reads as fill_value: never compared as if stored
                    for k in missing:
                        state.add(k, "chunk is missing")
                    continue
            except Exception as error:  # a damaged chunk is reported by the chunk check; this names the array
                state.add(key, f"the row coordinates cannot be read: {type(error).__name__}: {error}")
                continue
            _compare_row_coordinates(state, key, dim, stored, bounds)


def _compare_row_coordinates(
    state: CheckState, key: str, dim: str, stored: np.ndarray, bounds: list[dict[str, Any]]
) -> None:
    """Name the first row of ``stored`` (a pack's ``global_{dim}``) that is not ``arange(start, stop)`` of its
    ``coords`` entry."""
    for row, entry in enumerate(bounds):
        span = entry.get(dim)
        if not isinstance(span, list) or len(span) != 2 or not all(type(v) is int for v in span):
            state.add(key, f"attributes.tasks[{row}].coords.{dim} {span!r} is not [start, stop] (row {row} unchecked)")
            return
        width = span[1] - span[0]
        if stored.ndim != 2 or stored.shape != (len(bounds), width):
            state.add(key, f"shape {list(stored.shape)} is not [{len(bounds)}, {width}] (rows, {dim} per row)")
            return
        values = stored[row]
        if not np.array_equal(values, np.arange(span[0], span[1], dtype=np.int64)):
            shown = f"{int(values[0])}..{int(values[-1])}" if values.size else "nothing"
            state.add(
                key,
                f"row {row} holds {dim} {shown} but attributes.tasks[{row}].coords.{dim} names {span!r}: plain "
                "xarray would place the task's rows elsewhere than the readers do",
            )
            return
