"""The catalogue of a dump: ranks, windows, invocations, data groups and the records table.

Everything here comes from metadata only, never from chunks:

- a window's ``zarr.json`` carries its manifest (``status``, ``level``, ``invocations``, ...) and, once
  committed (``complete`` or ``aborted``), inline consolidated metadata of every group and array below
  it. One ``get`` and one ``json.loads`` of that document describe the whole window, however many
  records it holds.
- a *torn* window (status ``writing``: the writer was killed, or is still writing) has no consolidated
  metadata and no group documents below it; its arrays' own ``zarr.json`` files are found by listing
  the window's keys, and task/stage information is recovered from the path names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
import math
from typing import Any

import numpy as np
import pandas as pd
from zarr.abc.store import Store

from megadump_zarr.layout.dtypes import itemsize
from megadump_zarr.read.documents import (
    INT64_MAX,
    check_attributes,
    count_field,
    int_field,
    optional_str,
    shape_field,
)
from megadump_zarr.read.statistics_table import STATISTICS_COLUMNS, merge_statistics
from megadump_zarr.read.errors import DumpIntegrityError
from megadump_zarr.read.integrity import below_checks
from megadump_zarr.read.windows import window_dirs
from megadump_zarr.read.location import get_json, get_many, list_dir, list_prefix, parse_json
from megadump_zarr.read.errors import FormatVersionError
from megadump_zarr.read.pack_nodes import Fetch, is_packed, stored_pack_nodes, window_column_keys
from megadump_zarr.read.pack_record import PackedCoordinate, PackedRecord, PackedTasks
from megadump_zarr.read.pack_checks import PackTable, pack_tables, rest_nodes, window_packs
from megadump_zarr.read.pack_records import pack_columns
from megadump_zarr.read.pack_rows import PackedWindow, expand_torn, expand_window
from megadump_zarr.read.truncated import stats_scope
from megadump_zarr.layout.paths import INVOCATION_DIR, RANK_DIR, TASK_DIR, WINDOW_DIR
from megadump_zarr.layout.schema import PACK_STORAGE, STORAGE_ATTR, format_problem
from megadump_zarr.layout.statistics import DIGEST_COLUMN, MD5_COLUMN

__all__ = [
    "EXTRA_COLUMNS",
    "RECORD_COLUMNS",
    "DataGroup",
    "WindowInfo",
    "window_info",
    "check_root",
    "data_groups",
    "is_packed",
    "itemsize",
    "records_frame",
    "scan_windows",
    "window_nodes",
]

RECORD_COLUMNS = (
    "rank",
    "window",
    "invocation",
    "step",
    "direction",
    "kernel",
    "level",
    "stage",
    "task_id",
    "stage_task_index",
    "owner_label",
    "owner_id",
    "core_type",
    "core_id",
    "worker",
    "io",
    "index",
    "name",
    "dtype",
    "shape",
    "stored_shape",
    "truncated",
    "bytes",
    "stored_bytes",
    "min",
    "max",
    "mean",
    "l2norm",
    "nan_count",
    "inf_count",
    "path",
)
"""The records table's required columns, in order."""

EXTRA_COLUMNS = (
    "role",
    "capture_phase",
    "status",
    "param_position",
    "note",
    "invocation_name",
    "group",
    "partial",
    "pack_array",
    "pack_row",
    "stats_scope",
    "zarr_group",
    "variable",
)
"""Columns that follow the required ones: L0 role, capture phase, window status, ABI parameter position,
the record's note, the invocation group's name, the data group's path (relative to the root),
``partial`` (True for a record salvaged from a launch that failed, kept with ``on_error="keep"``) and, for a
record stored in a task-record pack (``layout="packs"``), the pack's record array (``pack_array``, relative
to the root) and the record's row in it (``pack_row``); missing (``None``, NaN once frames are joined) and -1
for every other record; ``stats_scope``: what ``min``/``max``/``mean``/``l2norm``/``nan_count``/``inf_count``
cover, ``"whole"`` (every element of the tensor), ``"prefix"`` (a truncated record without device statistics:
its stored elements only) or None (no statistics). Where its stored values open with plain xarray: ``zarr_group``, the group (relative to
the root) that ``xr.open_zarr`` opens, and ``variable``, the variable in it
(``xr.open_zarr(f"{root}/{zarr_group}")[variable]``, then ``.isel(task=pack_row)`` for a packed record); missing
for a record that stores no payload (statistics-first modes)."""

EXTRA_COLUMNS = (*EXTRA_COLUMNS, *STATISTICS_COLUMNS)  # payload, digest, element_count (read.statistics)

_FINAL = frozenset(("complete", "aborted"))
_INT_COLUMNS = (
    "step",
    "task_id",
    "stage_task_index",
    "owner_id",
    "core_id",
    "worker",
    "index",
    "nan_count",
    "inf_count",
    "param_position",
    "bytes",
    "stored_bytes",
)
_FLOAT_COLUMNS = ("min", "max", "mean", "l2norm")


@dataclass
class WindowInfo:
    """One window of one rank, as its ``zarr.json`` describes it.

    Args:
        rank: The rank.
        window: The window index.
        key: Path of the window group relative to the root (``rank_0/window_0000``).
        status: ``complete``, ``aborted`` or ``writing`` (torn, or a window without ``zarr.json`` yet).
        attrs: The window manifest (empty when the window has no ``zarr.json``).
        nodes: Consolidated metadata (flat relative path -> document), or ``None`` for a torn window.
        damaged: Keys of a torn window's documents that were cut short (skipped when listing).
        pack_rows: Record path (relative to the root) -> ``(pack array path, row)`` of its packed records.
        packs: Where its packed records are stored (``None``: it holds no task-record pack); ``nodes`` then
            describe them as task groups, record arrays and row coordinates (:mod:`megadump_zarr.read.pack_rows`).
        tables: A committed window's packs, decoded and checked (:mod:`megadump_zarr.read.pack_checks`: its
            records table is built from them); ``None`` for a window without packs.
        stored: The consolidated nodes as stored (its packs as packs), where ``tables`` are given.
    """

    rank: int
    window: int
    key: str
    status: str
    attrs: dict[str, Any] = field(default_factory=dict)
    nodes: dict[str, dict[str, Any]] | None = None
    damaged: list[str] = field(default_factory=list)
    pack_rows: dict[str, tuple[str, int]] = field(default_factory=dict)
    packs: PackedWindow | None = None
    tables: list[PackTable] | None = None
    stored: dict[str, dict[str, Any]] | None = None

    @property
    def level(self) -> str | None:
        """``L0`` or ``L1`` from the manifest (``None`` when unknown)."""
        level = self.attrs.get("level")
        return level if isinstance(level, str) else None

    @property
    def invocation_names(self) -> list[str]:
        """Invocation group names listed in the manifest."""
        names = self.attrs.get("invocations")
        return [n for n in names if isinstance(n, str)] if isinstance(names, list) else []

    @property
    def final(self) -> bool:
        """Whether the window was committed (its documents never change again)."""
        return self.status in _FINAL and self.nodes is not None

    def packed(self, rel: str) -> PackedRecord | PackedCoordinate | None:
        """The packed record or row coordinate at ``rel`` (relative to the window) of a committed packed window,
        found from its checked packs; ``None``: not one (or a window read otherwise).

        Args:
            rel: A path relative to the window.
        """
        return None


class _PackedWindowInfo(WindowInfo):
    """A committed packed window: ``nodes`` are its consolidated nodes as stored (its packs as packs), ``packs``
    where its packed records are, found by task path from its checked ``tables`` when a reader opens one
    (:meth:`packed`). Its packs are described as task groups, record arrays and row coordinates only for the
    views that list groups (:meth:`task_nodes`).

    Args:
        expand: Gives ``(nodes, packs)`` (:func:`~megadump_zarr.read.pack_rows.expand_window`).
        args, kwargs: :class:`WindowInfo`'s.
    """

    def __init__(self, *args: Any, expand: Any, **kwargs: Any) -> None:
        self._expand = None
        self._task_nodes: dict[str, dict[str, Any]] | None = None
        super().__init__(*args, **kwargs)
        self._expand = expand
        self._tasks = PackedTasks(self.tables or [])
        stored = stored_pack_nodes(self.stored or {})
        arrays = {path: doc for path, doc in stored.items() if doc.get("node_type") == "array"}
        self.packs = PackedWindow(self.key, True, {}, arrays, {})

    def packed(self, rel: str) -> PackedRecord | PackedCoordinate | None:
        return self._tasks.find(rel)

    def task_nodes(self) -> dict[str, dict[str, Any]]:
        """Its nodes with every pack described as the task groups, record arrays and row coordinates it holds."""
        if self._task_nodes is None:
            expanded = self._expand()  # a DumpIntegrityError leaves it to expand (and raise) again
            self._task_nodes, self._pack_rows = (
                (self.nodes or {}, {})
                if expanded is None
                else (
                    expanded[0],
                    expanded[1].pack_rows(),
                )
            )
        return self._task_nodes

    @property  # type: ignore[override]
    def pack_rows(self) -> dict[str, tuple[str, int]]:
        self.task_nodes()
        return self._pack_rows

    @pack_rows.setter
    def pack_rows(self, value: dict[str, tuple[str, int]]) -> None:
        self._pack_rows = value

    def __getstate__(self) -> dict[str, Any]:  # shipped to dask workers: expanded first (a closure stays behind)
        self.task_nodes()
        return {**self.__dict__, "_expand": None}


def check_root(store: Store, url: str) -> dict[str, Any]:
    """Check that the store's root is a megadump_zarr dump root; return its attributes.

    Args:
        store: The dump store.
        url: The root as given, for messages.

    Raises:
        ValueError: Naming ``url`` and what is missing (no root ``zarr.json``, not a group, no
            ``megadump_zarr`` attribute), with a hint when ``url`` is a rank, window or data group.
    """
    doc = get_json(store, "zarr.json")
    hint = " (the dump root is the directory that holds rank_*/ groups)"
    if doc is None:
        if any(RANK_DIR.match(name) for name in list_dir(store, "")):
            return {}
        raise ValueError(f"{url} is not a megadump_zarr dump root: zarr.json is missing{hint}")
    if doc.get("node_type") != "group" or doc.get("zarr_format") != 3:
        raise ValueError(f"{url} is not a megadump_zarr dump root: its zarr.json is not a Zarr v3 group{hint}")
    attrs = check_attributes(doc, f"{url}/zarr.json")
    if "megadump_zarr" not in attrs:
        if "schemaVersion" in attrs and "windowIndex" in attrs:
            what = "a window group"
        elif "invocationId" in attrs or "taskId" in attrs or "stage" in attrs:
            what = "a data group inside a window"
        elif any(WINDOW_DIR.match(name) for name in list_dir(store, "")):
            what = "a rank group"
        else:
            what = None
        found = f"; it looks like {what}, open the dump root two or more levels up" if what else ""
        raise ValueError(
            f"{url} is not a megadump_zarr dump root: its zarr.json has no 'megadump_zarr' attribute{found}{hint}"
        )
    return attrs


def scan_windows(store: Store, cache: dict[str, WindowInfo] | None = None) -> list[WindowInfo]:
    """List every window of every rank, ordered by (rank, window).

    Committed windows found in ``cache`` are reused (their documents never change); other window
    documents are fetched concurrently, one ``get`` each.

    Args:
        store: The dump store.
        cache: Window key -> info of windows seen before; updated in place.
    """
    cache = {} if cache is None else cache
    keys = window_dirs(store)
    for rank, window, key in keys:
        if rank > INT64_MAX or window > INT64_MAX:
            raise ValueError(
                f"{key}: a rank or window index beyond int64 (no writer makes one; remove or rename the directory)"
            )
    missing = [key for _, _, key in keys if key not in cache or not cache[key].final]
    raws = get_many(store, [f"{key}/zarr.json" for key in missing])
    docs = {key: _parsed(key, raw) for key, raw in zip(missing, raws) if raw is not None}
    # every packed window's per-task arrays in one concurrent batch (an object store: one round trip, not one
    # per window); a key not prefetched (a document that does not parse is named by window_info) is read then
    wanted = [k for key, doc in docs.items() if is_packed(doc) for k in window_column_keys(key, doc)]
    read = store_fetch(store)
    held = dict(zip(wanted, read(wanted)))

    def fetch(keys: list[str]) -> list[bytes | None]:
        rest = [k for k in keys if k not in held]
        held.update(zip(rest, read(rest)))
        return [held[k] for k in keys]

    for key, raw in zip(missing, raws):
        cache[key] = window_info(key, raw, docs.get(key), fetch=fetch)
    for rank, window, key in keys:
        cache[key].rank, cache[key].window = rank, window
    return [cache[key] for _, _, key in keys]


def _parsed(key: str, raw: bytes) -> dict[str, Any] | None:
    """A window document parsed once, for the prefetch of its packs' arrays and ``window_info`` (``None``: it does not
    parse, which ``window_info`` then names)."""
    try:
        return parse_json(raw, f"{key}/zarr.json")
    except ValueError:
        return None


def store_fetch(store: Store) -> Fetch:
    """Reads keys of ``store`` concurrently, below its integrity checks (what a packed window's expansion reads:
    per-task arrays, which it checks itself against the window inventory read in the same batch). Through the checks, each chunk would first make the store expand its window again to look it up."""
    inner = below_checks(store)
    return lambda keys: get_many(inner, keys)


def window_info(key: str, raw: bytes | None, doc: dict[str, Any] | None = None, *, fetch: Fetch) -> WindowInfo:
    """What a window's ``zarr.json`` says (status, groups), read from its raw bytes.

    Args:
        key: The window key (``rank_0/window_0003``).
        raw: The window document's bytes (``None``: not written yet, so the window is ``writing``).
        doc: The document already parsed from ``raw``, if it was.
        fetch: Reads keys of the dump (its packs' per-task arrays, :func:`store_fetch`).
    """
    rank_name, window_name = key.split("/")
    rank, window = int(rank_name[5:]), int(window_name[7:])
    if raw is None:
        return WindowInfo(rank, window, key, "writing")
    where = f"{key}/zarr.json"
    doc = parse_json(raw, where) if doc is None else doc
    attrs = check_attributes(doc, where)
    problem = format_problem(attrs, key)
    if problem is not None:
        raise FormatVersionError(problem)
    status = attrs.get("status")
    if status not in ("complete", "aborted", "writing"):
        status = "writing"
    consolidated = doc.get("consolidated_metadata")
    nodes = consolidated.get("metadata") if isinstance(consolidated, dict) else None
    if status != "writing" and isinstance(nodes, dict):
        for path, node in nodes.items():
            if not isinstance(node, dict):
                raise ValueError(
                    f"{where}: consolidated_metadata.metadata[{path!r}] {str(node)[:60]!r} is not a JSON object"
                )
    if status in ("complete", "aborted") and commit_evidence_problem(attrs, nodes) is not None:
        status = "writing"  # a torn window whose status was edited: not committed, whatever it says
    if status == "writing" or not isinstance(nodes, dict):
        nodes = None
    if nodes is None or attrs.get(STORAGE_ATTR) != PACK_STORAGE:
        return WindowInfo(rank, window, key, status, attrs, nodes)
    packs, kept = window_packs(nodes)
    if not packs:
        return WindowInfo(rank, window, key, status, attrs, nodes)
    tables = pack_tables(key, packs, fetch, stored=kept)  # a malformed pack raises here, naming it
    stored = nodes
    return _PackedWindowInfo(
        rank,
        window,
        key,
        status,
        attrs,
        nodes,
        tables=tables,
        stored=stored,
        expand=lambda: expand_window(key, stored, fetch, tables=tables),
    )


def _take_packs(
    info: WindowInfo, nodes: dict[str, dict[str, Any]], expanded: tuple[dict[str, Any], PackedWindow] | None
) -> dict[str, dict[str, Any]]:
    """A window's nodes with its packed records described as task groups, record arrays and row coordinates
    (``nodes`` when it holds no pack); where they are stored goes to ``info.packs`` and ``info.pack_rows``."""
    if expanded is None:
        return nodes
    nodes, info.packs = expanded
    info.pack_rows = info.packs.pack_rows()
    return nodes


def commit_evidence_problem(attrs: Mapping[str, Any], nodes: Any) -> str | None:
    """Why a window saying ``complete``/``aborted`` was never committed (``None`` when it was).

    A commit writes ``committedAt`` and the consolidated metadata of every node with the window document,
    last; a torn window's ``"writing"`` document has neither, so an edited status alone is not a commit.
    A complete window's consolidated metadata holds every invocation it lists; an aborted one's may lack
    those its failure kept from being written.

    Args:
        attrs: The window's attributes.
        nodes: Its ``consolidated_metadata.metadata`` (``None`` when absent).
    """
    if not isinstance(attrs.get("committedAt"), str):
        return "it has no committedAt"
    if not isinstance(nodes, dict):
        return "it has no consolidated metadata (consolidated_metadata.metadata)"
    listed = attrs.get("invocations")
    # an aborted window lists what it meant to write; what a failure kept it from writing is absent
    if isinstance(listed, list) and attrs.get("status") != "aborted":
        missing = [n for n in listed if not (isinstance(n, str) and isinstance(nodes.get(n), dict))]
        if missing:
            return f"its consolidated metadata lacks the listed invocation {str(missing[0])[:80]!r}"
        count = attrs.get("invocationCount")
        if count is not None and count != len(listed):
            return f"its invocationCount {str(count)[:40]} disagrees with the {len(listed)} listed invocations"
    return None


def window_nodes(store: Store, info: WindowInfo) -> dict[str, dict[str, Any]]:
    """Every node below a window (flat relative path -> ``zarr.json`` document).

    Committed windows answer from their consolidated metadata. A torn window is listed: every
    ``*/zarr.json`` key below it is fetched (metadata only, never chunks); a document cut short by the
    kill that tore the window is skipped, and its key is listed in ``info.damaged``.

    Args:
        store: The dump store.
        info: The window.
    """
    if isinstance(info, _PackedWindowInfo):
        return info.task_nodes()
    if info.nodes is not None:
        return info.nodes
    prefix = f"{info.key}/"
    keys = [k for k in list_prefix(store, prefix) if k.endswith("/zarr.json") and k != f"{prefix}zarr.json"]
    nodes: dict[str, dict[str, Any]] = {}
    for key, raw in zip(keys, get_many(store, keys)):
        if raw is None:
            continue
        try:
            nodes[key[len(prefix) : -len("/zarr.json")]] = parse_json(raw, key)
        except ValueError:
            info.damaged.append(key)  # torn mid-write: the node never finished, so it is not part of the window
    if info.attrs.get(STORAGE_ATTR) != PACK_STORAGE:
        return nodes
    return _take_packs(info, nodes, expand_torn(info.key, nodes, store_fetch(store)))


@dataclass(frozen=True)
class DataGroup:
    """One data group: an L0 invocation group, or an L1 task group.

    Args:
        rank: The rank.
        window: The window index.
        key: Path relative to the root.
        level: ``L0`` or ``L1``.
        invocation: Invocation id.
        invocation_name: Invocation group name.
        kernel: Kernel name (``None`` when unknown).
        direction: ``forward`` or ``backward``.
        stage: Original stage name (L1).
        stage_component: Stage path component (L1).
        task_id: Task id (L1).
        task_name: Task group name, e.g. ``task_000003_worker_001`` (L1).
        status: The window's status.
    """

    rank: int
    window: int
    key: str
    level: str
    invocation: int
    invocation_name: str
    kernel: str | None
    direction: str | None
    stage: str | None = None
    stage_component: str | None = None
    task_id: int | None = None
    task_name: str | None = None
    status: str = "complete"


def _group_attrs(nodes: Mapping[str, dict[str, Any]], path: str, window_key: str = "") -> dict[str, Any]:
    """A group's checked attributes (``{}`` when it has no document)."""
    where = f"{window_key}/{path}/zarr.json" if window_key else f"{path}/zarr.json"
    return check_attributes(nodes.get(path) or {}, where)


def _invocation_info(name: str, nodes: Mapping[str, dict[str, Any]], window_key: str = "") -> dict[str, Any]:
    attrs = _group_attrs(nodes, name, window_key)
    where = f"{window_key}/{name}/zarr.json" if window_key else f"{name}/zarr.json"
    match = INVOCATION_DIR.match(name)
    fallback = int(match.group(1)) if match else None
    invocation_id = int_field(attrs.get("invocationId", fallback), where, "attributes.invocationId")
    if invocation_id is None and fallback is not None:
        invocation_id = fallback
    direction = optional_str(attrs.get("direction", match.group(2) if match else None), where, "attributes.direction")
    return {
        "invocation": invocation_id,
        "step": int_field(attrs.get("step"), where, "attributes.step"),
        "direction": direction,
        "kernel": optional_str(attrs.get("kernelName"), where, "attributes.kernelName"),
        "level": optional_str(attrs.get("level"), where, "attributes.level"),
    }


def _task_info(nodes: Mapping[str, dict[str, Any]], group: str, window_key: str) -> dict[str, Any]:
    """The checked task columns of an L1 task group ``invocation/stages/stage/task``."""
    parts = group.split("/")
    task_attrs = _group_attrs(nodes, group, window_key)
    stage_attrs = _group_attrs(nodes, "/".join(parts[:3]), window_key)
    where = f"{window_key}/{group}/zarr.json"
    match = TASK_DIR.match(parts[3])
    owner = task_attrs.get("owner")
    if owner is not None and not isinstance(owner, dict):
        raise ValueError(f"{where}: attributes.owner {str(owner)[:60]!r} is not a JSON object")
    owner = owner or {}
    stage = task_attrs.get("stage", stage_attrs.get("stage", parts[2]))
    stored_id = task_attrs.get("taskId")
    if match is not None and stored_id is not None and stored_id != int(match.group(1)):
        raise DumpIntegrityError(  # the name is the task's place; an id edited in every copy must not move it
            f"{where}: attributes.taskId {str(stored_id)[:40]} disagrees with its group's name {parts[3]!r}",
            key=where,
        )
    return {
        "stage": optional_str(stage, where, "attributes.stage"),
        "task_id": int_field(
            task_attrs.get("taskId", int(match.group(1)) if match else None), where, "attributes.taskId"
        ),
        "stage_task_index": int_field(task_attrs.get("stageTaskIndex"), where, "attributes.stageTaskIndex"),
        "owner_label": optional_str(owner.get("label"), where, "attributes.owner.label"),
        "owner_id": int_field(owner.get("id"), where, "attributes.owner.id"),
        "core_type": optional_str(task_attrs.get("coreType"), where, "attributes.coreType"),
        "core_id": int_field(task_attrs.get("coreId"), where, "attributes.coreId"),
        "worker": int_field(
            task_attrs.get("workerId", int(match.group(2)) if match and match.group(2) is not None else None),
            where,
            "attributes.workerId",
        ),
    }


def data_groups(info: WindowInfo, nodes: Mapping[str, dict[str, Any]]) -> list[DataGroup]:
    """The data groups of one window, ordered by path.

    An L0 invocation group counts when it holds arrays; an L1 task group is any ``stages/*/task_*``.

    Args:
        info: The window.
        nodes: Its nodes (see :func:`window_nodes`).
    """
    found: dict[str, DataGroup] = {}
    invocations: dict[str, dict[str, Any]] = {}
    for path, doc in nodes.items():
        parts = path.split("/")
        if not INVOCATION_DIR.match(parts[0]):
            continue
        inv = invocations.get(parts[0])
        if inv is None:
            inv = invocations[parts[0]] = _invocation_info(parts[0], nodes, info.key)
        common = dict(
            rank=info.rank,
            window=info.window,
            invocation=inv["invocation"],
            invocation_name=parts[0],
            kernel=inv["kernel"],
            direction=inv["direction"],
            status=info.status,
        )
        if len(parts) >= 4 and parts[1] == "stages" and TASK_DIR.match(parts[3]):
            group = "/".join(parts[:4])
            if group not in found:
                stage = _task_info(nodes, group, info.key)["stage"]
                found[group] = DataGroup(
                    level="L1",
                    key=f"{info.key}/{group}",
                    stage=stage,
                    stage_component=parts[2],
                    task_id=int(TASK_DIR.match(parts[3]).group(1)),
                    task_name=parts[3],
                    **common,
                )
        elif len(parts) == 2 and doc.get("node_type") == "array" and parts[0] not in found:
            found[parts[0]] = DataGroup(level="L0", key=f"{info.key}/{parts[0]}", **common)
    return [found[k] for k in sorted(found)]


def _stats_value(stats: Mapping[str, Any], key: str) -> float | None:
    value = stats.get(key)
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _window_rows(
    info: WindowInfo,
    nodes: Mapping[str, dict[str, Any]],
    columns: dict[str, list[Any]],
    pack_rows: Mapping[str, tuple[str, int]] | None = None,
) -> None:
    """Append one row per stored tensor of a window to ``columns`` (``pack_rows``: where its packed records are,
    ``info.pack_rows`` when not given)."""
    pack_rows = info.pack_rows if pack_rows is None else pack_rows
    invocations: dict[str, dict[str, Any]] = {}
    tasks: dict[str, dict[str, Any]] = {}
    window_level = info.level
    for path, doc in nodes.items():
        if doc.get("node_type") != "array":
            continue
        where = f"{info.key}/{path}/zarr.json"
        attrs = check_attributes(doc, where)
        if not attrs or "name" not in attrs:
            continue  # coordinate arrays carry no record attributes
        parts = path.split("/")
        inv = invocations.get(parts[0])
        if inv is None:
            inv = invocations[parts[0]] = _invocation_info(parts[0], nodes, info.key)
        is_l1 = len(parts) >= 5 and parts[1] == "stages"
        data_type = optional_str(attrs.get("originalDtype"), where, "attributes.originalDtype") or optional_str(
            doc.get("data_type"), where, "data_type"
        )
        size = itemsize(doc.get("data_type"))
        stored_shape = shape_field(doc.get("shape"), where, "shape", size)  # the rest is checked when opened
        actual = attrs.get("actualShape")
        shape = shape_field(actual, where, "attributes.actualShape", size) if actual is not None else stored_shape
        full = count_field(attrs.get("fullBytes"), where, "attributes.fullBytes")
        stored = count_field(attrs.get("storedBytes"), where, "attributes.storedBytes")
        stats = attrs.get("stats") or {}
        if not isinstance(stats, dict):
            raise ValueError(f"{where}: attributes.stats {str(stats)[:60]!r} is not a JSON object")
        columns["stats_scope"].append(stats_scope(attrs, bool(stats)))
        nan_count = count_field(stats.get("nanCount"), where, "attributes.stats.nanCount")
        inf_count = count_field(stats.get("infCount"), where, "attributes.stats.infCount")
        name = attrs["name"]
        if not isinstance(name, str):
            raise ValueError(f"{where}: attributes.name {str(name)[:60]!r} is not a string")
        group = "/".join(parts[:-1])
        if is_l1:
            task = tasks.get(group)
            if task is None:
                task = tasks[group] = _task_info(nodes, "/".join(parts[:4]), info.key)
        else:
            task = _NO_TASK
        row = columns
        row["rank"].append(info.rank)
        row["window"].append(info.window)
        row["invocation"].append(inv["invocation"])
        row["step"].append(inv["step"])
        row["direction"].append(inv["direction"])
        row["kernel"].append(inv["kernel"])
        row["level"].append(inv["level"] or window_level or ("L1" if is_l1 else "L0"))
        for key in (
            "stage",
            "task_id",
            "stage_task_index",
            "owner_label",
            "owner_id",
            "core_type",
            "core_id",
            "worker",
        ):
            row[key].append(task[key])
        row["io"].append(optional_str(attrs.get("io"), where, "attributes.io") if is_l1 else None)
        row["index"].append(int_field(attrs.get("index"), where, "attributes.index") if is_l1 else None)
        row["name"].append(name)
        row["dtype"].append(data_type)
        row["shape"].append(shape)
        row["stored_shape"].append(stored_shape)
        row["truncated"].append(bool(attrs.get("truncated", False)))
        row["bytes"].append(int(full) if full is not None else math.prod(shape) * size)
        row["stored_bytes"].append(int(stored) if stored is not None else math.prod(stored_shape) * size)
        for key in _FLOAT_COLUMNS:
            row[key].append(_stats_value(stats, key))
        row["nan_count"].append(nan_count)
        row["inf_count"].append(inf_count)
        row["path"].append(f"{info.key}/{path}")
        row["role"].append(attrs.get("role"))
        row["capture_phase"].append(attrs.get("capturePhase"))
        row["status"].append(info.status)
        row["param_position"].append(int_field(attrs.get("paramPosition"), where, "attributes.paramPosition"))
        row["note"].append(attrs.get("note") if is_l1 else None)
        row["invocation_name"].append(parts[0])
        row["group"].append(f"{info.key}/{group}")
        row["payload"].append(True)
        row[DIGEST_COLUMN].append(None)  # the device digest comes from a statistics table, when there is one
        row[MD5_COLUMN].append(None)  # msprobe's digest: statistics-only rows of its statistics tables only
        row["element_count"].append(math.prod(shape))
        row["partial"].append(attrs.get("partial") is True)  # salvaged from a failed launch (on_error="keep")
        stored_at = pack_rows.get(row["path"][-1]) if pack_rows else None
        row["pack_array"].append(None if stored_at is None else stored_at[0])
        row["pack_row"].append(-1 if stored_at is None else stored_at[1])
        opened = row["path"][-1] if stored_at is None else stored_at[0]  # the array plain xarray shows
        row["zarr_group"].append(opened.rpartition("/")[0])
        row["variable"].append(opened.rpartition("/")[2])


_NO_TASK = dict.fromkeys(
    ("stage", "task_id", "stage_task_index", "owner_label", "owner_id", "core_type", "core_id", "worker")
)


def _packed_rows(info: WindowInfo, nodes: Mapping[str, dict[str, Any]], columns: dict[str, list[Any]]) -> bool:
    """Append the rows of a committed packed window to ``columns``: its stored records one by one, its packs'
    records one block per record array (:func:`~megadump_zarr.read.pack_records.pack_columns`); ``False`` (nothing
    appended) where a value does not fit the table."""
    found: dict[str, list[Any]] = {name: [] for name in columns}
    try:
        _window_rows(info, rest_nodes(nodes), found, {})
        invocations: dict[str, dict[str, Any]] = {}
        for table in info.tables or ():
            name, _, stage = table.pack.split("/")[:3]
            if name not in invocations:
                invocations[name] = _invocation_info(name, nodes, info.key)
            stage_attrs = _group_attrs(nodes, f"{name}/stages/{stage}", info.key)
            block = pack_columns(
                (info.rank, info.window, info.key), table, invocations[name], info.level, info.status, stage_attrs
            )
            for key, values in block.items():
                found[key].extend(values)
    except ValueError:
        return False
    for key, values in found.items():
        columns[key].extend(values)
    return True


def _execution_order(columns: Mapping[str, list[Any]]) -> list[int]:
    """The rows' order by rank, window, invocation, task id, worker, inputs before outputs, port index, ABI
    parameter position, then path (a missing number counts as -1): one stable sort over whole columns."""

    def number(name: str) -> np.ndarray:
        return np.array([-1 if value is None else int(value) for value in columns[name]], dtype=np.int64)

    paths = np.array(columns["path"], dtype=str) if columns["path"] else np.zeros(0, dtype=str)
    outputs = np.array([io == "output" for io in columns["io"]], dtype=bool)
    keys = (paths, number("param_position"), number("index"), outputs, number("worker"), number("task_id"))
    return np.lexsort((*keys, number("invocation"), number("window"), number("rank"))).tolist()


def records_frame(
    windows: Iterable[tuple[WindowInfo, Mapping[str, dict[str, Any]]]], tables: Mapping[str, list[Any]] | None = None
) -> pd.DataFrame:
    """The records table of some windows: one row per stored tensor (coordinate arrays excluded).

    Rows are in execution order: rank, window, invocation, task id (the compiler numbers tasks in
    topological stage order and the executor runs them in that order), worker, inputs (captured before
    the task) before outputs, port index; L0 tensors by parameter position. Integer columns that can be missing use pandas' nullable
    ``Int64``; ``min``/``max``/``mean``/``l2norm`` are float64 (NaN when the writer stored no value);
    ``shape``/``stored_shape`` are tuples; ``path`` and ``group`` are relative to the dump root.

    Statistics-first dumps: ``payload`` is False for a statistics-only record (its row comes from the
    invocation's statistics table), ``digest`` is the device record digest (``UInt64``, :mod:`megadump_zarr.layout.digest`; missing
    for tensor-mode records), ``element_count`` the logical element count, ``md5`` msprobe's digest of a
    statistics-only record (``summary_mode: "md5"``; None elsewhere).

    Args:
        windows: ``(window, nodes)`` pairs (see :func:`window_nodes`).
        tables: Window key -> its statistics tables (``read.statistics.load_tables``), when read.
    """
    columns: dict[str, list[Any]] = {name: [] for name in (*RECORD_COLUMNS, *EXTRA_COLUMNS)}
    for info, nodes in windows:
        if info.tables is not None and info.stored is not None:
            nodes = info.stored
            if not _packed_rows(info, nodes, columns):
                _window_rows(
                    info, info.task_nodes() if isinstance(info, _PackedWindowInfo) else info.nodes or {}, columns
                )  # a value the table cannot hold: named there
        else:
            _window_rows(info, nodes, columns)
        if tables and tables.get(info.key):
            invocations = {
                name: {**_invocation_info(name, nodes), "rank": info.rank, "window": info.window}
                for name, _ in tables[info.key]
            }
            merge_statistics(info.key, info.status, invocations, tables[info.key], columns)
    order = _execution_order(columns)
    data: dict[str, Any] = {}
    for name, values in columns.items():
        values = list(map(values.__getitem__, order))
        if name in ("rank", "window"):
            data[name] = np.array(values, dtype=np.int64)
        elif name == "invocation":
            data[name] = pd.array(values, dtype="Int64")
        elif name == DIGEST_COLUMN:
            data[name] = pd.array(values, dtype="UInt64")
        elif name == "element_count":
            data[name] = pd.array(values, dtype="Int64")
        elif name in _INT_COLUMNS:
            data[name] = pd.array([None if v is None else int(v) for v in values], dtype="Int64")
        elif name in _FLOAT_COLUMNS:
            data[name] = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
        elif name == "pack_row":
            data[name] = np.array([-1 if v is None else int(v) for v in values], dtype=np.int64)
        elif name in ("truncated", "partial", "payload"):
            data[name] = np.array(values, dtype=bool)
        elif name in ("shape", "stored_shape"):
            array = np.empty(len(values), dtype=object)
            array[:] = values
            data[name] = array
        else:
            data[name] = pd.array(values, dtype=object)
    return pd.DataFrame(data, columns=[*RECORD_COLUMNS, *EXTRA_COLUMNS])
