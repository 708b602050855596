"""Verify one window: its documents parse and agree, every chunk is there and its checksum holds.

:func:`verify_window` is a plain function of ``(dump URL, storage options, window key)`` that opens its
own store, so a scheduler can run windows anywhere (``megadump_zarr.analyse.parallel.map_ordered``).

Checks of a committed (``complete`` or ``aborted``) window, each failure one :class:`Problem` naming the
window, the store key and what is wrong:

- documents: the window's ``zarr.json`` parses, its status is known, it carries consolidated metadata of
  every node; the manifest agrees with itself (``windowIndex``/``rank`` with the path, ``invocations``
  with the invocation groups present, ``invocationCount``); every node's own ``zarr.json`` exists, parses
  and equals its consolidated entry; every array document is a valid Zarr v3 array document; record
  attributes agree with the array (``storedShape`` and ``storedBytes`` with ``shape`` × itemsize,
  ``fullBytes`` with ``actualShape``, a truncated record stores a flat prefix no longer than its logical
  size); the records-table fields parse (types, int64 ranges);
- chunks: every chunk the grid implies exists; a chunk whose codec chain ends with ``crc32c`` has that
  checksum verified over its stored bytes; a chunk without a checksum must decode; a chunk is bound to
  its place: its crc32c equals the one its array's ``chunkCrc32c`` attribute records for that grid
  position (see :mod:`megadump_zarr.store.chunk_digests`), so a chunk copied from another window, step
  or array, or two swapped chunk files, are named; arrays without the attribute (older dumps, packs,
  no checksum) are counted in a *not bound* note, not as problems;
- ``deep``: the statistics stored in each record (``stats``: min, max, mean, l2norm, nanCount, infCount,
  see :mod:`megadump_zarr.store.tensor_stats`) are recomputed from the data and compared (counts, min and max
  exactly; mean and l2norm to a relative 1e-9, the float64 rounding of merging per-chunk sums).

Kept partial launches (``on_error="keep"``): the window attribute ``partialLaunches`` and records with
``partial: true`` are reported (``partial_launches``, ``partial_records``), not counted as problems;
a record flagged partial in a window that lists no partial launch is a problem.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
import itertools
import json
import math
import re
from typing import Any

import numpy as np

from megadump_zarr.layout.paths import WINDOW_PATH

__all__ = ["Problem", "WindowCheck", "verify_window"]

_BATCH = 64  # chunks fetched concurrently
_MAX_LISTED = 20  # missing chunks listed per array before "and N more"
_MAX_CHUNKS = 10_000_000
_REL = 1e-9


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a window.

    Args:
        window: The window key (``rank_0/window_0000``).
        key: The store key at fault (a ``zarr.json`` or a chunk), relative to the root.
        what: What is wrong.
    """

    window: str
    key: str
    what: str

    def __str__(self) -> str:
        return f"{self.key}: {self.what}"


@dataclass(frozen=True)
class WindowCheck:
    """The verification of one window.

    Args:
        window: The window key.
        status: Its status (``complete``, ``aborted``, ``writing``; ``unknown`` when unreadable).
        checked: Whether it was verified (torn ``writing`` windows are listed, not verified).
        arrays: Arrays checked.
        chunks: Chunks checked.
        stored_bytes: Bytes of the chunks read.
        problems: What is wrong (empty: the window is whole).
        partial_launches: The window's ``partialLaunches`` attribute (salvaged failed launches).
        partial_records: Records flagged ``partial: true``.
        deep: Whether statistics were recomputed.
        notes: What was not checked and why (``N array(s) not bound: ...``); never a problem.
    """

    window: str
    status: str
    checked: bool
    arrays: int = 0
    chunks: int = 0
    stored_bytes: int = 0
    problems: tuple[Problem, ...] = ()
    partial_launches: tuple[Any, ...] = ()
    partial_records: int = 0
    deep: bool = False
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """No problem found."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "window": self.window,
            "status": self.status,
            "checked": self.checked,
            "ok": self.ok,
            "arrays": self.arrays,
            "chunks": self.chunks,
            "stored_bytes": self.stored_bytes,
            "deep": self.deep,
            "partial_launches": list(self.partial_launches),
            "partial_records": self.partial_records,
            "notes": list(self.notes),
            "problems": [{"key": p.key, "what": p.what} for p in self.problems],
        }


@dataclass
class _State:
    window: str
    problems: list[Problem] = field(default_factory=list)
    arrays: int = 0
    chunks: int = 0
    stored_bytes: int = 0
    partial_records: int = 0
    unbound: int = 0

    def add(self, key: str, what: str) -> None:
        self.problems.append(Problem(self.window, key, what))


def _short(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def verify_window(
    url: Any,
    storage_options: Mapping[str, Any] | None,
    window: str,
    *,
    deep: bool = False,
    tick: Callable[[int], None] | None = None,
) -> WindowCheck:
    """Verify one window of a dump (see the module docstring).

    Args:
        url: The dump root (path or URL, or a zarr ``Store`` rooted at it).
        storage_options: fsspec options for a URL root.
        window: The window key, ``rank_{r}/window_{wwww}``.
        deep: Also recompute the stored statistics from the data.
        tick: Called with the number of chunk bytes checked, as they are (progress bars).
    """
    from megadump_zarr.read.errors import DumpIntegrityError
    from megadump_zarr.read.location import get_bytes, open_location, parse_json

    from megadump_zarr.read.documents import INT64_MAX

    store = open_location(url, dict(storage_options or {})).store
    state = _State(window)
    doc_key = f"{window}/zarr.json"
    match = WINDOW_PATH.match(window)
    if match is None or int(match.group(1)) > INT64_MAX or int(match.group(2)) > INT64_MAX:
        state.add(window, "not a window key with rank and window indices within int64 (no writer makes one)")
        return _result(state, "unknown", deep, ())
    try:
        raw = get_bytes(store, doc_key)
    except DumpIntegrityError as error:  # a malformed task-record pack: the reader's view cannot be built
        state.add(error.key or doc_key, str(error))
        return _result(state, "unknown", deep, ())
    if raw is None:
        return WindowCheck(window, "writing", False)
    try:
        doc = parse_json(raw, doc_key)
    except ValueError as error:
        state.add(doc_key, f"the window document does not parse: {error}")
        return _result(state, "unknown", deep, ())
    attrs = doc.get("attributes")
    if not isinstance(attrs, dict):
        state.add(doc_key, f"attributes {_short(attrs)} is not a JSON object")
        return _result(state, "unknown", deep, ())
    status = attrs.get("status")
    if status == "writing":
        return WindowCheck(window, "writing", False)
    if status not in ("complete", "aborted"):
        state.add(doc_key, f"status {_short(status)} is not one of complete, aborted, writing")
        return _result(state, "unknown", deep, ())
    partial = attrs.get("partialLaunches")
    partial_launches: tuple[Any, ...] = ()
    if partial is not None:
        if isinstance(partial, list):
            partial_launches = tuple(partial)
        else:
            state.add(doc_key, f"attributes.partialLaunches {_short(partial)} is not a list")
    consolidated = doc.get("consolidated_metadata")
    nodes = consolidated.get("metadata") if isinstance(consolidated, dict) else None
    if not isinstance(nodes, dict):
        state.add(doc_key, "a committed window has no consolidated metadata (consolidated_metadata.metadata)")
        return _result(state, status, deep, partial_launches)
    _check_manifest(state, window, attrs, nodes)
    check_schema(state, store, window, doc, nodes)
    good = _check_node_documents(state, store, window, nodes)
    _check_pack_documents(state, store, window)
    _check_records_table(state, window, status, attrs, {k: v for k, v in nodes.items() if k in good})
    arrays = {path: nodes[path] for path in good if nodes[path].get("node_type") == "array"}
    _check_chunks(state, store, window, arrays, deep, tick)
    _check_partial(
        state,
        window,
        attrs,
        arrays,
        partial_launches,
        {path: nodes[path] for path in good if nodes[path].get("node_type") == "group"},
    )
    return _result(state, status, deep, partial_launches)


from megadump_zarr.verify.schema import check_schema  # noqa: E402  (schema checks of every document)
from megadump_zarr.verify.placement import check_place as _check_place, placement as _placement  # noqa: E402


def _check_partial(
    state: _State,
    window: str,
    attrs: dict[str, Any],
    arrays: dict[str, dict[str, Any]],
    partial_launches: tuple[Any, ...],
    groups: dict[str, dict[str, Any]] | None = None,
) -> None:
    """``partialLaunches`` names listed invocations; every record flagged ``partial`` belongs to one of them.

    Statistics-only records of a partial launch (statistics-first modes) have no array: they are counted
    from the launch's statistics table (``recordCount - payloadCount``), its payload arrays as arrays.
    """
    doc_key = f"{window}/zarr.json"
    listed = attrs.get("invocations") if isinstance(attrs.get("invocations"), list) else []
    for name in partial_launches:
        if not isinstance(name, str) or name not in listed:
            state.add(doc_key, f"attributes.partialLaunches names {_short(name)}, which is not a listed invocation")
    flagged = [p for p, d in arrays.items() if isinstance(d.get("attributes"), dict) and d["attributes"].get("partial")]
    state.partial_records = len(flagged) + _statistics_only_records(groups or {}, partial_launches)
    stray = [p for p in flagged if p.split("/")[0] not in partial_launches]
    if stray:
        state.add(
            f"{window}/{stray[0]}/zarr.json",
            f"{len(stray)} record(s) are flagged partial outside the window's partialLaunches {list(partial_launches)}",
        )


def _statistics_only_records(groups: dict[str, dict[str, Any]], partial_launches: tuple[Any, ...]) -> int:
    """Statistics-only records in the statistics tables (``INVOCATION/statistics``) of the partial launches."""
    count = 0
    for path, doc in groups.items():
        parts = path.split("/")
        attrs = doc.get("attributes")
        if (
            len(parts) != 2
            or parts[1] != "statistics"
            or parts[0] not in partial_launches
            or not isinstance(attrs, dict)
        ):
            continue
        records, payloads = attrs.get("recordCount"), attrs.get("payloadCount")
        if "statisticsLayout" in attrs and all(
            isinstance(v, int) and not isinstance(v, bool) for v in (records, payloads)
        ):
            count += max(records - payloads, 0)
    return count


def _result(state: _State, status: str, deep: bool, partial: tuple[Any, ...]) -> WindowCheck:
    notes = (
        (
            f"{state.unbound} array(s) not bound: they record no chunkCrc32c (written before it existed, in a "
            f"pack, or without checksums), so a chunk valid elsewhere cannot be told from theirs",
        )
        if state.unbound
        else ()
    )
    return WindowCheck(
        state.window,
        status,
        True,
        state.arrays,
        state.chunks,
        state.stored_bytes,
        tuple(state.problems),
        partial,
        state.partial_records,
        deep,
        notes,
    )


def _check_manifest(state: _State, window: str, attrs: dict[str, Any], nodes: dict[str, Any]) -> None:
    doc_key = f"{window}/zarr.json"
    match = WINDOW_PATH.match(window)
    if match:
        rank, index = int(match.group(1)), int(match.group(2))
        if "windowIndex" in attrs and attrs["windowIndex"] != index:
            state.add(
                doc_key, f"attributes.windowIndex {_short(attrs['windowIndex'])} disagrees with the path ({index})"
            )
        if "rank" in attrs and attrs["rank"] != rank:
            state.add(doc_key, f"attributes.rank {_short(attrs['rank'])} disagrees with the path ({rank})")
    if attrs.get("level") not in (None, "L0", "L1"):
        state.add(doc_key, f"attributes.level {_short(attrs.get('level'))} is not L0 or L1")
    listed = attrs.get("invocations")
    if listed is not None:
        if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
            state.add(doc_key, f"attributes.invocations {_short(listed)} is not a list of group names")
        else:
            present = {p.split("/")[0] for p in nodes if p.startswith("invocation_")}
            for name in sorted(set(listed) - present):
                state.add(doc_key, f"attributes.invocations lists {name}, which the window does not hold")
            for name in sorted(present - set(listed)):
                state.add(doc_key, f"invocation group {name} is not listed in attributes.invocations")
            count = attrs.get("invocationCount")
            if count is not None and count != len(listed):
                state.add(
                    doc_key,
                    f"attributes.invocationCount {_short(count)} disagrees with the {len(listed)} listed invocations",
                )


def _strip(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "consolidated_metadata"}


def _check_node_documents(state: _State, store: Any, window: str, nodes: dict[str, Any]) -> list[str]:
    """Each node's own document exists, parses and equals its consolidated entry; returns the good paths."""
    from megadump_zarr.read.documents import open_array_checked
    from megadump_zarr.read.location import get_many

    good: list[str] = []
    paths = sorted(nodes)
    for start in range(0, len(paths), 256):
        batch = paths[start : start + 256]
        raws = get_many(store, [f"{window}/{p}/zarr.json" for p in batch])
        for path, raw in zip(batch, raws):
            key = f"{window}/{path}/zarr.json"
            entry = nodes[path]
            if not isinstance(entry, dict) or entry.get("node_type") not in ("group", "array"):
                state.add(f"{window}/zarr.json", f"consolidated entry {path!r} is not a group or array document")
                continue
            own = _stored_agrees(state, key, raw, entry, "node")
            if own is None:
                continue
            if entry["node_type"] == "group" and not _group_consolidated_agrees(state, key, path, own, nodes):
                continue
            if entry["node_type"] == "array":
                try:
                    open_array_checked(store, f"{window}/{path}", entry)
                except ValueError as error:
                    state.add(key, str(error).removeprefix(key).lstrip(": ") or str(error))
                    continue
                _check_record_attributes(state, key, entry)
            good.append(path)
    return good


def _stored_agrees(state: _State, key: str, raw: bytes | None, entry: Any, what: str) -> dict[str, Any] | None:
    """A stored ``zarr.json`` parsed, when it equals its window consolidated entry (else the problem is added).

    Args:
        state: The window's check state.
        key: The document's key.
        raw: Its stored bytes (``None``: missing).
        entry: Its entry in the window document's consolidated metadata.
        what: ``"node"`` or ``"pack"``, for the missing-document message.
    """
    from megadump_zarr.read.location import parse_json

    if raw is None:
        state.add(key, f"the {what}'s document is missing (the window's consolidated metadata lists it)")
        return None
    try:
        own = parse_json(raw, key)
    except ValueError as error:
        state.add(key, f"does not parse: {error}")
        return None
    if not isinstance(entry, dict) or _strip(own) != _strip(entry):
        theirs = entry if isinstance(entry, dict) else {}
        fields = sorted(k for k in set(_strip(own)) | set(_strip(theirs)) if own.get(k) != theirs.get(k))
        state.add(key, f"differs from the window's consolidated metadata in {', '.join(fields) or 'its type'}")
        return None
    return own


def _check_pack_documents(state: _State, store: Any, window: str) -> None:
    """Schema 7: the stored documents of a window's task-record packs (what plain zarr reads) equal the window
    document's entries the reader's view is built from (the view serves the window's schema-6 form, which the
    checks above compare with itself)."""
    from megadump_zarr.read.location import get_bytes, get_many, parse_json
    from megadump_zarr.read.packs import base_store, stored_pack_nodes

    base = base_store(store)
    if base is store:
        return
    doc_key = f"{window}/zarr.json"
    try:
        stored = parse_json(get_bytes(base, doc_key) or b"{}", doc_key)
    except ValueError:
        return  # reported above
    nodes = stored_pack_nodes(((stored.get("consolidated_metadata") or {}).get("metadata")) or {})
    paths = sorted(nodes)
    for path, raw in zip(paths, get_many(base, [f"{window}/{p}/zarr.json" for p in paths])):
        key = f"{window}/{path}/zarr.json"
        entry = nodes[path]
        own = _stored_agrees(state, key, raw, entry, "pack")
        if own is not None and own.get("node_type") == "group":
            _group_consolidated_agrees(state, key, path, own, nodes)
    _check_pack_rows(state, base, window, nodes)


_PACK_LEAF = re.compile(r"^pack_\d+$")
# The pack arrays whose values name each row's task, and the task attribute each must equal (-1: none).
_ROW_IDS = (
    (None, lambda attrs: attrs.get("taskId")),  # None: the pack's task id array (task_id, or schema 7's task)
    ("owner_id", lambda attrs: attrs["owner"].get("id") if isinstance(attrs.get("owner"), dict) else None),
    ("core_id", lambda attrs: attrs.get("coreId")),
)


def _check_pack_rows(state: _State, base: Any, window: str, nodes: dict[str, Any]) -> None:
    """Each pack row is the task its ``attributes.tasks`` entry names: the ids stored (checksummed) in the pack's
    ``task_id`` (schema 7: ``task``), ``owner_id`` and ``core_id`` arrays equal the entry's ``taskId``, ``owner.id`` and ``coreId``.

    The reader's view checks rows against their records' attributes without reading data; two swapped rows of
    a pack whose records carry no row coordinate agree with those, and only these ids tell them apart (schema
    6 kept the task id in the group's directory name).
    """
    from megadump_zarr.read.location import get_bytes
    from megadump_zarr.store.packs import TASK_ARRAYS

    for task_path, task_doc in sorted(nodes.items()):
        pack, _, leaf = task_path.rpartition("/")
        attributes = task_doc.get("attributes") if isinstance(task_doc, dict) else None
        tasks = attributes.get("tasks") if isinstance(attributes, dict) else None
        if leaf not in TASK_ARRAYS or not isinstance(tasks, list) or not _PACK_LEAF.match(pack.rpartition("/")[2]):
            continue  # a malformed pack is named by the view
        for name, wanted in _ROW_IDS:
            name = name or leaf
            doc = nodes.get(f"{pack}/{name}")
            key = f"{window}/{pack}/{name}"
            if not isinstance(doc, dict):
                state.add(f"{key}/zarr.json", "the pack has no such array (its rows' ids cannot be checked)")
                continue
            expected = _expected_chunks(doc)
            if expected is None:
                continue  # reported by the chunk check
            try:
                zarray = _open(base, key, doc)
                missing = [f"{key}/{zarray.metadata.encode_chunk_key(c)}" for c in expected]
                missing = [k for k in missing if get_bytes(base, k) is None]
                if missing:  # not in the schema-6 view the chunk check walks; absent reads as fill_value
                    named = [
                        wanted(t.get("attrs")) if isinstance(t, dict) and isinstance(t.get("attrs"), dict) else None
                        for t in tasks
                    ]
                    if any((-1 if n is None else n) != doc.get("fill_value", 0) for n in named):
                        for k in missing:
                            state.add(k, "chunk is missing")
                    continue
                stored = np.asarray(zarray[...]).reshape(-1).tolist()
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


def _group_consolidated_agrees(state: _State, key: str, path: str, own: dict[str, Any], nodes: dict[str, Any]) -> bool:
    """A group's own consolidated metadata (what ``xr.open_zarr(group)`` reads) agrees with the window's."""
    consolidated = own.get("consolidated_metadata")
    inner = consolidated.get("metadata") if isinstance(consolidated, dict) else None
    if not isinstance(inner, dict):
        return True
    for sub, entry in inner.items():
        theirs = nodes.get(f"{path}/{sub}")
        if not isinstance(entry, dict) or not isinstance(theirs, dict) or _strip(entry) != _strip(theirs):
            state.add(key, f"its consolidated entry {sub!r} differs from the window's consolidated metadata")
            return False
    return True


def _check_record_attributes(state: _State, key: str, doc: dict[str, Any]) -> None:
    from megadump_zarr.read.catalog import itemsize

    attrs = doc.get("attributes")
    if not isinstance(attrs, dict) or "name" not in attrs:
        return
    shape = list(doc["shape"])
    size = itemsize(doc.get("data_type"))
    stored_shape = attrs.get("storedShape")
    if stored_shape is not None and stored_shape != shape:
        state.add(key, f"attributes.storedShape {_short(stored_shape)} disagrees with shape {shape}")
    stored = attrs.get("storedBytes")
    if stored is not None and size and stored != math.prod(shape) * size:
        state.add(
            key,
            f"attributes.storedBytes {_short(stored)} disagrees with shape {shape} x {size} bytes "
            f"({math.prod(shape) * size})",
        )
    stored_dtype = attrs.get("storedDtype")
    if stored_dtype is not None and stored_dtype != doc.get("data_type"):
        state.add(
            key, f"attributes.storedDtype {_short(stored_dtype)} disagrees with data_type {doc.get('data_type')!r}"
        )
    actual = attrs.get("actualShape")
    if actual is None:
        return
    if not isinstance(actual, list) or not all(type(d) is int and d >= 0 for d in actual):
        state.add(key, f"attributes.actualShape {_short(actual)} is not a list of non-negative integers")
        return
    full = attrs.get("fullBytes")
    original = itemsize(attrs.get("originalDtype")) or size
    if full is not None and original and full != math.prod(actual) * original:
        state.add(key, f"attributes.fullBytes {_short(full)} disagrees with actualShape {actual} x {original} bytes")
    if attrs.get("truncated"):
        if len(shape) != 1 or shape[0] > math.prod(actual):
            state.add(key, f"a truncated record stores a flat prefix of its actualShape {actual}, not shape {shape}")
        _check_truncated_rows(state, key, attrs, actual, size)
    elif actual != shape:
        state.add(key, f"attributes.actualShape {actual} disagrees with shape {shape} (the record is not truncated)")


def _check_truncated_rows(state: _State, key: str, attrs: dict[str, Any], actual: list[int], size: int) -> None:
    """A truncated whole-row slice lies inside its declared tensor: ``sourceOffsetBytes`` / row bytes +
    ``actualShape[0]`` <= ``declaredShape[0]`` (the rows a reader derives for it; ``actualShape`` and
    ``fullBytes`` edited together pass the checks above, and would describe rows the tensor never had)."""
    declared, offset = attrs.get("declaredShape"), attrs.get("sourceOffsetBytes")
    if not (
        isinstance(declared, list)
        and actual
        and len(declared) == len(actual)
        and declared[1:] == actual[1:]
        and all(type(d) is int for d in declared)
        and type(offset) is int
        and offset >= 0
    ):
        return
    row_bytes = math.prod(actual[1:]) * size
    if row_bytes <= 0 or offset % row_bytes:
        return
    start = offset // row_bytes
    if start + actual[0] > declared[0]:
        state.add(
            key,
            f"attributes.actualShape {actual} at attributes.sourceOffsetBytes {offset} (row {start}) reaches "
            f"past attributes.declaredShape {declared}: the record describes rows its tensor does not have",
        )


def _check_records_table(state: _State, window: str, status: str, attrs: dict[str, Any], nodes: dict[str, Any]) -> None:
    """The fields the records table reads parse (types, int64 ranges)."""
    from megadump_zarr.read.catalog import WindowInfo, records_frame

    match = WINDOW_PATH.match(window)
    rank, index = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    try:
        records_frame([(WindowInfo(rank, index, window, status, attrs, nodes), nodes)])
    except ValueError as error:
        text = str(error)
        key, _, what = text.partition(": ")
        state.add(key if what else f"{window}/zarr.json", what or text)
    except (TypeError, OverflowError) as error:  # a field no check above anticipated: still one named problem
        state.add(f"{window}/zarr.json", f"the records table cannot be built: {type(error).__name__}: {error}")


def _expected_chunks(doc: dict[str, Any]) -> list[tuple[int, ...]] | None:
    from megadump_zarr.read.integrity import chunk_grid

    grid = chunk_grid(doc)
    if grid is None:
        return None
    shape, chunks = grid
    if 0 in shape:
        return []
    counts = [-(-s // c) for s, c in zip(shape, chunks)]
    if math.prod(counts) > _MAX_CHUNKS:
        return None
    return list(itertools.product(*(range(n) for n in counts)))


def _check_chunks(
    state: _State,
    store: Any,
    window: str,
    arrays: dict[str, dict[str, Any]],
    deep: bool,
    tick: Callable[[int], None] | None,
) -> None:
    from megadump_zarr.read.integrity import has_crc32c, verify_crc32c
    from megadump_zarr.read.errors import DumpIntegrityError
    from megadump_zarr.read.location import get_many, list_prefix

    present = set(list_prefix(store, f"{window}/"))
    for path in sorted(arrays):
        doc = arrays[path]
        array_key = f"{window}/{path}"
        state.arrays += 1
        expected = _expected_chunks(doc)
        if expected is None:
            state.add(f"{array_key}/zarr.json", "its chunk grid is not a regular grid this verifier can enumerate")
            continue
        zarray = _open(store, array_key, doc)
        keys = [f"{array_key}/{zarray.metadata.encode_chunk_key(c)}" for c in expected]
        place = _placement(state, array_key, doc, keys)
        missing = [k for k in keys if k not in present]
        for k in missing[:_MAX_LISTED]:
            state.add(k, "chunk is missing")
        if len(missing) > _MAX_LISTED:
            state.add(array_key, f"and {len(missing) - _MAX_LISTED} more chunks are missing")
        keys = [k for k in keys if k in present]
        checksum = has_crc32c(doc)
        bad = False
        for start in range(0, len(keys), _BATCH):
            batch = keys[start : start + _BATCH]
            try:
                raws: list[Any] = get_many(store, batch)
            except DumpIntegrityError:  # a pack's shard index is corrupt (read.packs): name each chunk it fails
                raws = [_get_or_problem(store, key) for key in batch]
            for key, raw in zip(batch, raws):
                state.chunks += 1
                if isinstance(raw, DumpIntegrityError):
                    state.add(key, str(raw).removeprefix(f"chunk {key} is ").strip())
                    bad = True
                    continue
                if raw is None:
                    state.add(key, "chunk is missing")
                    bad = True
                    continue
                state.stored_bytes += len(raw)
                if tick is not None:
                    tick(len(raw))
                if checksum:
                    try:
                        verify_crc32c(key, np.frombuffer(raw, dtype=np.uint8))
                    except DumpIntegrityError as error:
                        state.add(key, str(error).removeprefix(f"chunk {key} is ").strip())
                        bad = True
                        continue
                    bad = _check_place(state, key, raw, place) or bad
        if bad or missing:
            continue
        if not checksum or deep:
            _check_decode(state, zarray, array_key, doc, deep)


def _get_or_problem(store: Any, key: str) -> Any:
    """The chunk's bytes, ``None`` when absent, or the integrity error reading it raised."""
    from megadump_zarr.read.errors import DumpIntegrityError
    from megadump_zarr.read.location import get_bytes

    try:
        return get_bytes(store, key)
    except DumpIntegrityError as error:
        return error


def _open(store: Any, key: str, doc: dict[str, Any]) -> Any:
    import zarr

    from megadump_zarr.read.location import store_path

    return zarr.Array.from_dict(store_path(store, key), doc)


def _check_decode(state: _State, zarray: Any, array_key: str, doc: dict[str, Any], deep: bool) -> None:
    """Decode every chunk (row block by row block); with ``deep`` recompute the statistics."""
    from megadump_zarr.store.tensor_stats import StatsAccumulator

    shape = tuple(zarray.shape)
    attrs = doc.get("attributes") if isinstance(doc.get("attributes"), dict) else {}
    stored = attrs.get("stats") if deep else None
    try:
        acc = StatsAccumulator(zarray.dtype) if isinstance(stored, dict) else None
    except TypeError:
        acc = None
    step = zarray.chunks[0] if shape else 1
    for start in range(0, shape[0] if shape else 1, step):
        try:
            block = zarray[start : start + step] if shape else zarray[...]
        except Exception as error:  # a codec failure of a chunk without a checksum
            chunk = zarray.metadata.encode_chunk_key((start // step,) + (0,) * (len(shape) - 1)) if shape else "c"
            state.add(
                f"{array_key}/{chunk}",
                f"chunk does not decode ({type(error).__name__}: {' '.join(str(error).split())[:120]})",
            )
            return
        if acc is not None:
            acc.update(np.asarray(block))
    if acc is not None:
        _compare_stats(state, f"{array_key}/zarr.json", stored, acc.result())


def _compare_stats(state: _State, key: str, stored: dict[str, Any], computed: dict[str, Any]) -> None:
    for name, value in computed.items():
        if name not in stored:
            continue
        have = stored[name]
        if name in ("nanCount", "infCount", "min", "max"):
            same = have == value or (have is None and value is None)
        elif have is None or value is None:
            same = have is None and value is None
        else:
            try:
                same = math.isclose(float(have), float(value), rel_tol=_REL, abs_tol=1e-300)
            except (TypeError, ValueError):
                same = False
        if not same:
            state.add(key, f"attributes.stats.{name} is {_short(have)} but the data give {_short(value)}")
