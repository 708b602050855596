"""The catalogue of a dump: ranks, windows, invocations and data groups.

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

from collections import ChainMap
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zarr.abc.store import Store

from megadump_zarr.read.documents import INT64_MAX, check_attributes
from megadump_zarr.read.group_attrs import invocation_info as _invocation_info
from megadump_zarr.read.group_attrs import task_info as _task_info
from megadump_zarr.read.integrity import below_checks
from megadump_zarr.read.windows import window_dirs
from megadump_zarr.read.location import get_json, get_many, list_dir, list_prefix, parse_json
from megadump_zarr.read.errors import FormatVersionError
from megadump_zarr.read.pack_record import PackedCoordinate, PackedRecord, PackedTasks
from megadump_zarr.read.pack_checks import (
    Fetch,
    PackTable,
    is_packed,
    pack_tables,
    rest_nodes,
    window_column_keys,
    window_packs,
)
from megadump_zarr.read.pack_rows import PackedWindow
from megadump_zarr.store.metadata import consolidated_sort_key
from megadump_zarr.layout.paths import INVOCATION_DIR, RANK_DIR, TASK_DIR, WINDOW_DIR
from megadump_zarr.layout.schema import PACK_STORAGE, STORAGE_ATTR, format_problem

__all__ = [
    "DataGroup",
    "WindowInfo",
    "window_info",
    "check_root",
    "data_groups",
    "is_packed",
    "scan_windows",
    "window_nodes",
]

_FINAL = frozenset(("complete", "aborted"))


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
        pack_rows: Record path (relative to the root) -> ``(pack array path, row)`` of its packed records, where
            they are described as task groups (:meth:`_PackedWindowInfo.task_nodes`).
        packs: Reads its packed records by row (``None``: it holds no task-record pack,
            :mod:`megadump_zarr.read.pack_rows`).
        tables: Its packs, decoded and checked (:mod:`megadump_zarr.read.pack_checks`: its records table and its
            packed task groups are built from them); ``None`` for a window without packs (or a torn one not listed
            yet).
        stored: Its nodes as stored (its packs as packs), where ``tables`` are given.
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

    @property
    def tasks(self) -> PackedTasks | None:
        """The task groups of its checked packs (``None``: it holds none, or a torn window not listed yet)."""
        return None

    def packed(self, rel: str) -> PackedRecord | PackedCoordinate | None:
        """The packed record or row coordinate at ``rel`` (relative to the window), found from its checked packs;
        ``None``: not one (or a window read otherwise).

        Args:
            rel: A path relative to the window.
        """
        return None


class _PackedWindowInfo(WindowInfo):
    """A window of the packs layout: ``stored`` are its nodes as stored (its packs as packs), ``tables`` its
    checked packs (a committed window's from its scan, a torn window's once it is listed, :func:`window_nodes`),
    from which its packed task groups, records and row coordinates are found by path (:attr:`tasks`) and read
    by row (``packs``).

    Args:
        args, kwargs: :class:`WindowInfo`'s.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tasks: PackedTasks | None = None
        if self.tables is not None:
            self.take_packs(self.tables, self.stored or {})

    def take_packs(self, tables: list[PackTable], stored: dict[str, dict[str, Any]]) -> None:
        """Hold its checked packs and its nodes as stored (a torn window's, once listed).

        Args:
            tables: Its packs, read and checked (:func:`~megadump_zarr.read.pack_checks.pack_tables`).
            stored: Its nodes (path relative to the window -> document), its packs as packs.
        """
        self.tables, self.stored = tables, stored
        self._tasks = PackedTasks(tables)
        self.packs = PackedWindow(self.key, self.final)  # each row opened with its pack's document

    @property
    def tasks(self) -> PackedTasks | None:
        return self._tasks

    def packed(self, rel: str) -> PackedRecord | PackedCoordinate | None:
        return None if self._tasks is None else self._tasks.find(rel)

    def task_nodes(self) -> dict[str, dict[str, Any]]:
        """Its nodes with its packs left out and each packed task group and record described one by one, from its
        checked packs (what the records table reads record by record to name a value of a pack it cannot hold);
        where each packed record is goes to ``pack_rows``."""
        stored = rest_nodes(self.stored or {})
        tasks = self._tasks or PackedTasks([])
        found: dict[str, dict[str, Any]] = {}
        pack_rows: dict[str, tuple[str, int]] = {}
        root = f"{self.key}/" if self.key else ""
        for group in tasks.groups():
            found[group] = {"node_type": "group", "attributes": tasks.task_attributes(group) or {}}
            for name in tasks.members(group):
                member = tasks.find(f"{group}/{name}")
                if member is not None:
                    found[f"{group}/{name}"] = member.doc
                if isinstance(member, PackedRecord):
                    pack_rows[f"{root}{group}/{name}"] = (f"{root}{member.array}", member.row)
        self.pack_rows = pack_rows
        merged = {**stored, **found}
        return {path: merged[path] for path in sorted(merged, key=consolidated_sort_key)}


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
    """Reads keys of ``store`` concurrently, below its integrity checks (what a packed window's pack checks read:
    per-task arrays, which they check themselves against the window inventory read in the same batch). Through the
    checks, each chunk would first make the store look its window up again."""
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
    if attrs.get(STORAGE_ATTR) != PACK_STORAGE:
        return WindowInfo(rank, window, key, status, attrs, nodes)
    if nodes is None:  # torn: its packs are read when it is listed (window_nodes)
        return _PackedWindowInfo(rank, window, key, status, attrs)
    packs, kept = window_packs(nodes)
    if not packs:
        return WindowInfo(rank, window, key, status, attrs, nodes)
    tables = pack_tables(key, packs, fetch, stored=kept)  # a malformed pack raises here, naming it
    return _PackedWindowInfo(rank, window, key, status, attrs, nodes, tables=tables, stored=nodes)


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
    """Every node below a window as stored (flat relative path -> ``zarr.json`` document); a window's
    task-record packs are packs here, its packed task groups are ``info.tasks``.

    Committed windows answer from their consolidated metadata. A torn window is listed: every
    ``*/zarr.json`` key below it is fetched (metadata only, never chunks); a document cut short by the
    kill that tore the window is skipped, and its key is listed in ``info.damaged``. A torn packed window's
    packs are read and checked then (``info.tables``), a pack cut short by the kill left out.

    Args:
        store: The dump store.
        info: The window.
    """
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
    if isinstance(info, _PackedWindowInfo):
        packs, _ = window_packs(nodes)
        info.take_packs(pack_tables(info.key, packs, store_fetch(store), strict=False), nodes)
    return nodes


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


def data_groups(info: WindowInfo, nodes: Mapping[str, dict[str, Any]]) -> list[DataGroup]:
    """The data groups of one window, ordered by path.

    An L0 invocation group counts when it holds arrays; an L1 task group is any ``stages/*/task_*``, stored or
    packed (``info.tasks``).

    Args:
        info: The window.
        nodes: Its nodes (see :func:`window_nodes`).
    """
    found: dict[str, DataGroup] = {}
    invocations: dict[str, dict[str, Any]] = {}

    def invocation(name: str) -> dict[str, Any]:
        inv = invocations.get(name)
        if inv is None:
            inv = invocations[name] = _invocation_info(name, nodes, info.key)
        return inv

    def common(name: str) -> dict[str, Any]:
        inv = invocation(name)
        return dict(
            rank=info.rank,
            window=info.window,
            invocation=inv["invocation"],
            invocation_name=name,
            kernel=inv["kernel"],
            direction=inv["direction"],
            status=info.status,
        )

    def task_group(group: str, task_nodes: Mapping[str, dict[str, Any]]) -> DataGroup:
        parts = group.split("/")
        shared = common(parts[0])  # its invocation checked first
        return DataGroup(
            level="L1",
            key=f"{info.key}/{group}",
            stage=_task_info(task_nodes, group, info.key)["stage"],
            stage_component=parts[2],
            task_id=int(TASK_DIR.match(parts[3]).group(1)),
            task_name=parts[3],
            **shared,
        )

    for path, doc in nodes.items():
        parts = path.split("/")
        if not INVOCATION_DIR.match(parts[0]):
            continue
        if len(parts) >= 4 and parts[1] == "stages" and TASK_DIR.match(parts[3]):
            group = "/".join(parts[:4])
            if group not in found:
                found[group] = task_group(group, nodes)
        elif len(parts) == 2 and doc.get("node_type") == "array" and parts[0] not in found:
            found[parts[0]] = DataGroup(level="L0", key=f"{info.key}/{parts[0]}", **common(parts[0]))
        else:
            invocation(parts[0])  # checked as every invocation holding a node
    tasks = info.tasks
    for group in tasks.groups() if tasks is not None else ():
        if INVOCATION_DIR.match(group.split("/")[0]) and group not in found:
            found[group] = task_group(group, ChainMap({group: {"attributes": tasks.task_attributes(group)}}, nodes))
    return [found[k] for k in sorted(found)]
