"""Consolidated metadata at the dump root and rank groups: plain ``xr.open_datatree(root, engine="zarr")``.

xarray opens a Zarr hierarchy through consolidated metadata and warns (``RuntimeWarning``, an error
under ``-W error``) when the group it opens has none. zarr 3.1 reads consolidated metadata only at the
group it opens and then resolves every path below through it, so a root that lists only its ranks, or
windows without their contents, raises ``KeyError`` deeper down: the root must carry every node of the
hierarchy it shows. Window documents already carry everything below them (``store.writer``), so the
root's consolidated metadata is the ``complete`` windows' entries under their keys, plus the rank and
window groups themselves and the nodes of any other top-level group (saved L1 plans of hung launches);
each rank group likewise carries its own windows.

When: :func:`index_root` runs when a writer's session ends (the dumper's exit, ``convert``), not at every
commit: the root document is as large as all window documents together, so rewriting it per commit
would cost quadratic bytes. Only ``complete`` windows are listed, so plain xarray shows exactly the
committed windows.

Never a silently partial index. Every writing session registers itself with a marker
(``.session-<host>-<pid>-<id>.json`` at the root, :func:`open_session`) *before* it drops the index from the root and its rank
(:func:`strip_index`, at the writer's first ``begin``), and removes it when it ends
(:func:`close_session`, just before indexing). :func:`index_root` writes an index only when no other
session is registered, and checks again after writing: if a session registered meanwhile, the index is
dropped again. Either the late session sees the index when it strips (its marker came after the
indexer's second check) or the indexer sees its marker (it came before): no interleaving leaves an index
that misses a window committed by a live session. A session that crashes or is killed leaves its
marker, so the root stays without an index (plain xarray lists the store, every committed window, and
warns that the root has no consolidated metadata) until a later session on the same root ends and finds
the marker stale: one written on this host by a process that no longer runs. Markers of other hosts
are never presumed dead; :func:`index_root` with ``force=True`` removes them once the job is known to be
over. Our own reader never reads this metadata (it lists
windows), so it is only ever about plain zarr/xarray.

Roots whose index would exceed :data:`INDEX_LIMIT` bytes are left without one (plain xarray warns and
lists the store). Object-store and other URL roots are indexed through fsspec when it can list them,
else left plain.
"""

from __future__ import annotations

from datetime import UTC, datetime
import json
import os
import socket
from typing import Any
import uuid

from megadump_zarr.store.backend import Backend
from megadump_zarr.store.metadata import dumps, group_document
from megadump_zarr.layout.paths import RANK_DIR, SESSION_MARKER, WINDOW_DIR

__all__ = [
    "INDEX_LIMIT",
    "close_session",
    "index_root",
    "live_sessions",
    "open_session",
    "plain_document",
    "strip_index",
]

INDEX_LIMIT = 4 << 20
"""Largest root document (bytes) written with consolidated metadata. Every reader parses the root document
(``open_dump`` too: measured +0.22 s for an 8.4 MB index of 3 x 4096 records on the 2-core machine, against
8 ms for a plain root), so a larger index would tax every open; such roots stay plain."""

_ATTEMPTS = 5


def _loads(raw: bytes | None) -> Any:
    """The JSON value of ``raw``; None when absent or not JSON."""
    try:
        return json.loads(raw) if raw is not None else None
    except (ValueError, UnicodeDecodeError):
        return None


def _plain(doc: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in doc.items() if key != "consolidated_metadata"}


def _consolidated(entries: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "inline", "must_understand": False, "metadata": entries}


def _list(root: str, storage_options: dict[str, Any] | None, prefix: str, directories: bool) -> list[str]:
    """Names directly below ``prefix`` of the root (local directory, or an fsspec listing): its directories, or
    its files."""
    if "://" not in root or root.startswith("file://"):
        path = os.path.join(root.removeprefix("file://"), prefix)
        try:
            return sorted(
                entry.name
                for entry in os.scandir(path)
                if (entry.is_dir if directories else entry.is_file)(follow_symlinks=False)
            )
        except OSError:
            return []
    import fsspec

    fs, path = fsspec.core.url_to_fs(root, **(storage_options or {}))
    try:
        found = fs.ls(f"{path.rstrip('/')}/{prefix}".rstrip("/"), detail=True, refresh=True)
    except FileNotFoundError:
        return []
    names = (
        str(p["name"]).rstrip("/").rpartition("/")[2] for p in found if (p.get("type") == "directory") == directories
    )
    return sorted(set(names))


def _list_dir(root: str, storage_options: dict[str, Any] | None, prefix: str) -> list[str]:
    """Directory names directly below ``prefix`` of the root."""
    return _list(root, storage_options, prefix, directories=True)


def _list_files(root: str, storage_options: dict[str, Any] | None, prefix: str) -> list[str]:
    """File names directly below ``prefix`` of the root."""
    return _list(root, storage_options, prefix, directories=False)


def _other_nodes(backend: Backend, root: str, storage_options: dict[str, Any] | None) -> dict[str, Any]:
    """Every node below the root's other top-level groups (saved L1 plans, ``.plans_*``), so that zarr lists
    them under the index as it does without one: ``{relative path: zarr.json document}``."""
    out: dict[str, Any] = {}
    for name in _list_dir(root, storage_options, ""):
        if RANK_DIR.match(name):
            continue
        if "://" not in root or root.startswith("file://"):
            base = os.path.join(root.removeprefix("file://"), name)
            found = [
                os.path.relpath(os.path.join(d, "zarr.json"), root.removeprefix("file://"))
                for d, _, files in os.walk(base)
                if "zarr.json" in files
            ]
        else:
            import fsspec

            fs, path = fsspec.core.url_to_fs(root, **(storage_options or {}))
            prefix = path.rstrip("/") + "/"
            found = [p[len(prefix) :] for p in fs.find(prefix + name) if p.endswith("/zarr.json")]
        for key in sorted(found):
            key = key.replace(os.sep, "/")
            doc = _loads(backend.get(key))
            if isinstance(doc, dict) and doc.get("node_type") in ("group", "array"):
                out[key[: -len("/zarr.json")]] = _plain(doc) if doc.get("node_type") == "group" else doc
    return out


def _complete_windows(
    backend: Backend, root: str, storage_options: dict[str, Any] | None, known: dict[str, dict[str, Any]] | None = None
) -> dict[str, dict[str, Any]]:
    """``{"rank_r/window_wwww": window document}`` of every complete window, in (rank, window) order.

    ``known`` windows are complete already (a committed window never changes): not read again.
    """
    out: dict[str, dict[str, Any]] = {}
    ranks = sorted((n for n in _list_dir(root, storage_options, "") if RANK_DIR.match(n)), key=lambda n: int(n[5:]))
    for rank in ranks:
        windows = sorted(
            (n for n in _list_dir(root, storage_options, rank) if WINDOW_DIR.match(n)), key=lambda n: int(n[7:])
        )
        for window in windows:
            if known is not None and f"{rank}/{window}" in known:
                out[f"{rank}/{window}"] = known[f"{rank}/{window}"]
                continue
            doc = _loads(backend.get(f"{rank}/{window}/zarr.json"))
            attrs = doc.get("attributes") if isinstance(doc, dict) else None
            if isinstance(attrs, dict) and attrs.get("status") == "complete":
                out[f"{rank}/{window}"] = doc
    return out


def index_documents(
    root_doc: dict[str, Any],
    rank_docs: dict[str, dict[str, Any]],
    windows: dict[str, dict[str, Any]],
    others: dict[str, Any],
) -> dict[str, bytes]:
    """The root's and every rank's ``zarr.json`` with consolidated metadata of the complete windows."""
    root_entries: dict[str, Any] = dict(others)
    rank_entries: dict[str, dict[str, Any]] = {rank: {} for rank in rank_docs}
    for rank, doc in rank_docs.items():
        root_entries[rank] = _plain(doc)
    for key, doc in windows.items():
        rank, window = key.split("/")
        inner = (doc.get("consolidated_metadata") or {}).get("metadata") or {}
        plain = _plain(doc)
        root_entries[key] = plain
        rank_entries.setdefault(rank, {})[window] = plain
        for path, node in inner.items():
            root_entries[f"{key}/{path}"] = node
            rank_entries[rank][f"{window}/{path}"] = node
    out = {"zarr.json": dumps({**_plain(root_doc), "consolidated_metadata": _consolidated(root_entries)})}
    for rank, doc in rank_docs.items():
        out[f"{rank}/zarr.json"] = dumps({**_plain(doc), "consolidated_metadata": _consolidated(rank_entries[rank])})
    return out


def _read(backend: Backend, key: str) -> dict[str, Any] | None:
    doc = _loads(backend.get(key))
    return doc if isinstance(doc, dict) and doc.get("node_type") == "group" else None


def open_session(backend: Backend) -> str:
    """Register a writing session at the root (a hidden ``.session-*.json`` marker); returns its key.

    Args:
        backend: The writer's backend.
    """
    host = "".join(c if c.isalnum() or c in "._-" else "_" for c in socket.gethostname())
    key = f".session-{host}-{os.getpid()}-{uuid.uuid4().hex[:12]}.json"
    marker = {"host": socket.gethostname(), "pid": os.getpid(), "startedAt": datetime.now(UTC).isoformat()}
    backend.put(key, json.dumps(marker).encode(), atomic=True)
    return key


def close_session(backend: Backend, key: str) -> None:
    """Remove a session's marker (the session has ended).

    Args:
        backend: The writer's backend.
        key: What :func:`open_session` returned.
    """
    backend.delete_prefix(key)


def _dead_here(raw: bytes | None) -> bool:
    """Whether a marker was written on this host by a process that no longer runs."""
    marker = _loads(raw)
    if not isinstance(marker, dict) or marker.get("host") != socket.gethostname():
        return False
    pid = marker.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, not ours to signal
        return False
    return False


def live_sessions(
    backend: Backend, root: str, storage_options: dict[str, Any] | None = None, *, force: bool = False
) -> list[str]:
    """The keys of the sessions registered at the root, after removing the ones known to be dead.

    Args:
        backend: The root's backend.
        root: The dump root (path or URL), for listing.
        storage_options: fsspec options of a URL root.
        force: Remove every marker (the caller knows that no session writes any more).
    """
    live = []
    for key in _list_files(os.fspath(root), storage_options, ""):
        if not SESSION_MARKER.match(key):
            continue
        if force or _dead_here(backend.get(key)):
            backend.delete_prefix(key)
        else:
            live.append(key)
    return live


def _ranks_below(root: str, storage_options: dict[str, Any] | None) -> list[str]:
    return [n for n in _list_dir(root, storage_options, "") if RANK_DIR.match(n)]


def index_root(
    backend: Backend, root: str, storage_options: dict[str, Any] | None = None, *, force: bool = False
) -> bool:
    """Give the root and every rank group consolidated metadata of the complete windows (see the module).

    No index is written while another session is registered at the root (the root and rank groups are
    left plain instead); an index written while a session registered is dropped again.

    Args:
        backend: The writer's backend for ``root``.
        root: The dump root (path or URL), for listing.
        storage_options: fsspec options of a URL root.
        force: Remove every session marker first (the job is over; markers of killed sessions on other
            hosts are never removed otherwise).

    Returns:
        Whether an index was written (False: a session is writing, nothing to index, too large, or the root
        cannot be listed).
    """
    root = os.fspath(root)
    try:
        if live_sessions(backend, root, storage_options, force=force):
            strip_index(backend, _ranks_below(root, storage_options))
            return False
    except Exception:  # noqa: BLE001 - an unlistable root keeps its plain documents
        return False
    known: dict[str, dict[str, Any]] = {}
    for _ in range(_ATTEMPTS):
        try:
            windows = _complete_windows(backend, root, storage_options, known=known)
        except Exception:  # noqa: BLE001 - an unlistable root keeps its plain documents
            return False
        root_doc = _read(backend, "zarr.json")
        if root_doc is None:
            return False
        ranks = sorted({key.split("/")[0] for key in windows}, key=lambda n: int(n[5:]))
        rank_docs = {rank: _read(backend, f"{rank}/zarr.json") or group_document({}) for rank in ranks}
        try:
            others = _other_nodes(backend, root, storage_options)
        except Exception:  # noqa: BLE001
            return False
        documents = index_documents(root_doc, rank_docs, windows, others)
        if len(documents["zarr.json"]) > INDEX_LIMIT:
            strip_index(backend, ranks)
            return False
        for key, data in documents.items():
            if key != "zarr.json":
                backend.put(key, data, atomic=True)
        backend.put("zarr.json", documents["zarr.json"], atomic=True)  # the root last: it lists the ranks
        try:
            if live_sessions(backend, root, storage_options):  # one registered while this index was built
                strip_index(backend, _ranks_below(root, storage_options))
                return False
            after = _complete_windows(backend, root, storage_options, known=windows)
        except Exception:  # noqa: BLE001 - cannot tell whether the index is whole: drop it
            strip_index(backend, ranks)
            return False
        if set(after) == set(windows):
            return True
        known = after
    strip_index(backend, ranks)  # the windows kept changing: no index rather than a stale one
    return False


def strip_index(backend: Backend, ranks: list[str] | tuple[str, ...] = ()) -> None:
    """Drop consolidated metadata from the root and the given rank groups (a session is writing)."""
    for key in ("zarr.json", *(f"{rank}/zarr.json" for rank in ranks)):
        raw = backend.get(key)
        if raw is None or b'"consolidated_metadata"' not in raw:
            continue
        doc = _read(backend, key)
        if doc is not None and doc.get("consolidated_metadata") is not None:
            backend.put(key, dumps(_plain(doc)), atomic=True)


def plain_document(raw: bytes) -> bytes | None:
    """A group document's bytes without its consolidated metadata (``None``: not a group document).

    Args:
        raw: The ``zarr.json`` bytes.
    """
    doc = _loads(raw)
    if not isinstance(doc, dict) or doc.get("node_type") != "group":
        return None
    return dumps(_plain(doc))
