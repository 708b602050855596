"""Verify one window: its documents parse and agree, every chunk is there and its checksum holds.

:func:`verify_window` is a plain function of ``(dump URL, storage options, window key)`` that opens its
own store, so a scheduler can run windows anywhere (``megadump_zarr.analyse.parallel.map_ordered``).

Checks of a committed (``complete`` or ``aborted``) window, each failure one :class:`Problem` naming the
window, the store key and what is wrong:

- the window's ``zarr.json`` parses, its status is known, it carries consolidated metadata of every node;
- packs (:mod:`~megadump_zarr.verify.packs`), a packed window's as stored: their arrays along ``task`` checked with
  the readers' rule (a malformed pack is one problem, and the window is not checked further), each packed record
  found at its (pack array, row) as the readers find it;
- documents (:mod:`~megadump_zarr.verify.documents`): the manifest agrees with itself, the schema (kinds,
  versions, level, direction), every node's own document equals its consolidated entry (a pack's stored documents
  the window document's), record attributes (a packed record's: its row's) agree with their arrays, the
  records-table fields parse;
- inventory (:mod:`~megadump_zarr.read.inventory`, the readers' rule): every array the window holds is listed in
  its inventory and every listed array is held, each document and chunk has the digest listed there;
- chunks (:mod:`~megadump_zarr.verify.chunks`): every chunk present, read once (a pack's shards whole, each row's
  inner chunk split from them with the readers' index checks), its crc32c holds and it has its inventory digest;
- bindings (:mod:`~megadump_zarr.verify.bindings`): a task group's ``taskId`` equals its name, a pack's
  ``taskCount`` its rows, a row coordinate holds the rows its records' ``sourceOffsetBytes`` give;
- ``deep``: the statistics stored in each record are recomputed from the data and compared.

Kept partial launches (``on_error="keep"``): the window attribute ``partialLaunches`` and records with
``partial: true`` are reported (``partial_launches``, ``partial_records``), not counted as problems;
a record flagged partial in a window that lists no partial launch is a problem.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from megadump_zarr.verify.chunks import check_chunks
from megadump_zarr.verify.bindings import check_bindings, check_coordinate_values
from megadump_zarr.verify.documents import (
    check_manifest,
    check_node_documents,
    check_pack_documents,
    check_packed_records,
    check_records_table,
)
from megadump_zarr.verify.packs import load_packs, packed_records, read_shards
from megadump_zarr.layout.paths import WINDOW_PATH
from megadump_zarr.layout.schema import format_problem
from megadump_zarr.verify.report import CheckState, Problem, WindowCheck, short

__all__ = ["Problem", "WindowCheck", "verify_window"]


def verify_window(
    url: Any,
    storage_options: Mapping[str, Any] | None,
    window: str,
    *,
    deep: bool = False,
    tick: Callable[[int], None] | None = None,
    msprobe: bool = False,
) -> WindowCheck:
    """Verify one window of a dump (see the module docstring).

    Args:
        url: The dump root (path or URL, or a zarr ``Store`` rooted at it).
        storage_options: fsspec options for a URL root.
        window: The window key, ``rank_{r}/window_{wwww}``.
        deep: Also recompute the stored statistics from the data.
        tick: Called with the number of chunk bytes checked, as they are (progress bars).
        msprobe: ``url`` is an msprobe dump read in place (its statistics are msprobe's, see
            :func:`megadump_zarr.verify.chunks.stats_tolerance`).
    """
    from megadump_zarr.read.errors import DumpIntegrityError
    from megadump_zarr.read.location import get_bytes, open_location, parse_json
    from megadump_zarr.layout.schema import PACK_STORAGE, STORAGE_ATTR

    from megadump_zarr.read.documents import INT64_MAX

    store = open_location(url, dict(storage_options or {})).store
    state = CheckState(window)
    doc_key = f"{window}/zarr.json"
    match = WINDOW_PATH.fullmatch(window)
    if match is None or int(match.group(1)) > INT64_MAX or int(match.group(2)) > INT64_MAX:
        state.add(window, "not a window key with rank and window indices within int64 (no writer makes one)")
        return _result(state, "unknown", deep, ())
    raw = get_bytes(store, doc_key)
    if raw is None:
        return WindowCheck(window, "writing", False)
    try:
        doc = parse_json(raw, doc_key)
    except ValueError as error:
        state.add(doc_key, f"the window document does not parse: {error}")
        return _result(state, "unknown", deep, ())
    attrs = doc.get("attributes")
    if not isinstance(attrs, dict):
        state.add(doc_key, f"attributes {short(attrs)} is not a JSON object")
        return _result(state, "unknown", deep, ())
    problem = format_problem(attrs, window)
    if problem is not None:  # another format: refused, as open_dump refuses it (the command line exits 2)
        from megadump_zarr.read.errors import FormatVersionError

        raise FormatVersionError(problem)
    status = attrs.get("status")
    if status == "writing":
        return WindowCheck(window, "writing", False)
    if status not in ("complete", "aborted"):
        state.add(doc_key, f"status {short(status)} is not one of complete, aborted, writing")
        return _result(state, "unknown", deep, ())
    partial = attrs.get("partialLaunches")
    partial_launches: tuple[Any, ...] = ()
    if partial is not None:
        if isinstance(partial, list):
            partial_launches = tuple(partial)
        else:
            state.add(doc_key, f"attributes.partialLaunches {short(partial)} is not a list")
    consolidated = doc.get("consolidated_metadata")
    nodes = consolidated.get("metadata") if isinstance(consolidated, dict) else None
    if not isinstance(nodes, dict):
        state.add(doc_key, "a committed window has no consolidated metadata (consolidated_metadata.metadata)")
        return _result(state, status, deep, partial_launches)
    stored, rest, records, tables, kept = nodes, nodes, {}, None, {}
    try:  # the packs as stored: their arrays along task read once and checked with the readers' rule
        loaded = load_packs(state, store, window, nodes, kept) if attrs.get(STORAGE_ATTR) == PACK_STORAGE else None
    except DumpIntegrityError as error:  # a malformed task-record pack: the readers cannot place its rows
        state.add(error.key or doc_key, str(error))
        return _result(state, "unknown", deep, ())
    if loaded is not None:
        tables, rest = loaded
        records = packed_records(tables)
    if not msprobe:  # first: what the inventory binds, the pack checks leave to it
        _load_inventory(state, store, window, attrs, kept)
    check_manifest(state, store, window, doc, stored)
    good = check_node_documents(state, store, window, rest)
    if tables is not None:
        check_pack_documents(state, store, window, stored)
        check_packed_records(state, window, records)
        read_shards(state, store, window, records)
    check_records_table(state, window, status, attrs, {k: v for k, v in rest.items() if k in good}, tables)
    arrays = {path: (rest[path], metadata) for path, metadata in good.items() if metadata is not None}
    if not msprobe:
        _check_listed_arrays(state, window, stored)
    wanted = [] if msprobe else check_bindings(state, window, stored, rest)
    check_chunks(state, store, window, arrays, deep, tick, msprobe, stored, records)
    check_coordinate_values(state, store, window, rest, wanted)
    _check_partial(state, window, attrs, rest, good, partial_launches, records)
    return _result(state, status, deep, partial_launches)


def _load_inventory(state: CheckState, store: Any, window: str, attrs: dict[str, Any], kept: dict[str, Any]) -> None:
    """Read the window inventory into ``state.inventory`` (``{}`` when it cannot be used), its problem added (its bytes
    from ``kept`` when the pack checks read them)."""
    from megadump_zarr.layout.inventory import INVENTORY_DIGEST_ATTR, INVENTORY_FILE
    from megadump_zarr.read.inventory import read_inventory
    from megadump_zarr.read.location import get_bytes

    key = f"{window}/{INVENTORY_FILE}"
    raw = kept[key] if key in kept else get_bytes(store, key)
    state.inventory, problem = read_inventory(raw, key, attrs.get(INVENTORY_DIGEST_ATTR), True)
    state.extend([] if problem is None else [problem])


def _check_listed_arrays(state: CheckState, window: str, stored: dict[str, Any]) -> None:
    """Every stored array is in the inventory with its document's digest, and every inventoried array is stored."""
    from megadump_zarr.read.inventory import inventory_problems

    inventory = state.inventory or {}
    arrays = {p: d for p, d in stored.items() if isinstance(d, dict) and d.get("node_type") == "array"}
    for path in sorted(arrays):
        state.extend(inventory_problems(f"{window}/{path}", inventory.get(path), arrays[path]))
    for path in sorted(set(inventory) - set(arrays)):
        state.add(f"{window}/{path}", "array is in the window inventory but the window does not hold it")


def _check_partial(
    state: CheckState,
    window: str,
    attrs: dict[str, Any],
    nodes: dict[str, Any],
    good: dict[str, Any],
    partial: tuple,
    packed: Mapping[str, Any],
) -> None:
    """``partialLaunches`` names listed invocations; every record flagged ``partial`` belongs to one of them.

    Statistics-only records of a partial launch (statistics-first modes) have no array: they are counted
    from the launch's statistics table (``recordCount - payloadCount``), its payload arrays as arrays.

    Args:
        state: The window's check state.
        window: The window key.
        attrs: Its attributes.
        nodes: Its nodes, but a task-record pack's.
        good: The good ones (:func:`~megadump_zarr.verify.documents.check_node_documents`).
        partial: Its ``partialLaunches``.
        packed: Its packed records by path (:class:`~megadump_zarr.read.pack_record.PackedRecord`).
    """
    doc_key = f"{window}/zarr.json"
    listed = attrs.get("invocations") if isinstance(attrs.get("invocations"), list) else []
    for name in partial:
        if not isinstance(name, str) or name not in listed:
            state.add(doc_key, f"attributes.partialLaunches names {short(name)}, which is not a listed invocation")
    documents = {p: nodes[p].get("attributes") for p in good}
    flagged = [p for p, a in documents.items() if good[p] is not None and isinstance(a, dict) and a.get("partial")]
    flagged = sorted(flagged + [p for p, record in packed.items() if record.doc["attributes"].get("partial")])
    state.partial_records = len(flagged)
    for launch in partial:  # its statistics table, a group
        table = documents.get(f"{launch}/statistics") if good.get(f"{launch}/statistics", 0) is None else None
        counts = [table.get(k) for k in ("recordCount", "payloadCount")] if isinstance(table, dict) else []
        if counts and "statisticsLayout" in table and all(type(v) is int for v in counts):
            state.partial_records += max(counts[0] - counts[1], 0)
    stray = [p for p in flagged if p.split("/")[0] not in partial]
    if stray:
        state.add(
            f"{window}/{stray[0]}/zarr.json",
            f"{len(stray)} record(s) are flagged partial outside the window's partialLaunches {list(partial)}",
        )


def _result(state: CheckState, status: str, deep: bool, partial: tuple[Any, ...]) -> WindowCheck:
    notes = []
    if state.unchecked:
        notes.append(
            f"{state.unchecked} array(s) carry no checksum (no crc32c codec): their chunks were decoded, so damage "
            f"that still decodes cannot be found"
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
        tuple(notes),
    )
