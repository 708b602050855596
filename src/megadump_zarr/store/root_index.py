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
would cost quadratic bytes. While a session writes, the root and its rank carry *no* consolidated
metadata (:func:`strip_index`, at the writer's first ``begin``): a plain-xarray reader then lists the
store (correct, with xarray's warning) rather than a stale snapshot. Only ``complete`` windows are
listed, so plain xarray shows exactly the committed windows. Concurrent writers (ranks of one job)
each index at their end; an index is rebuilt until the set of complete windows it lists equals the
store's after writing, so the last writer to finish leaves every window it saw committed listed.
Between one rank's end and a later rank's end the root shows the first one's view (windows the other
rank committed since are missing until it ends). Our own reader never reads this metadata (it lists
windows), so it is only ever about plain zarr/xarray.

Roots whose index would exceed :data:`INDEX_LIMIT` bytes are left without one (plain xarray warns and
lists the store). Object-store and other URL roots are indexed through fsspec when it can list them,
else left plain.
"""

from __future__ import annotations

import json
import os
from typing import Any

from megadump_zarr.store.backend import Backend
from megadump_zarr.layout.paths import RANK_DIR, WINDOW_DIR

__all__ = ["INDEX_LIMIT", "index_root", "plain_document", "strip_index"]

INDEX_LIMIT = 4 << 20
"""Largest root document (bytes) written with consolidated metadata. Every reader parses the root document
(``open_dump`` too: measured +0.22 s for an 8.4 MB index of 3 x 4096 records on the 2-core machine, against
8 ms for a plain root), so a larger index would tax every open; such roots stay plain."""

_ATTEMPTS = 5


def _plain(doc: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in doc.items() if key != "consolidated_metadata"}


def _dumps(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":"), allow_nan=True).encode()


def _consolidated(entries: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "inline", "must_understand": False, "metadata": entries}


def _group(attrs: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"attributes": attrs or {}, "zarr_format": 3, "node_type": "group"}


def _list_dir(root: str, storage_options: dict[str, Any] | None, prefix: str) -> list[str]:
    """Names directly below ``prefix`` of the root (local directory, or an fsspec listing)."""
    if "://" not in root or root.startswith("file://"):
        path = os.path.join(root.removeprefix("file://"), prefix)
        try:
            return sorted(entry.name for entry in os.scandir(path) if entry.is_dir(follow_symlinks=False))
        except OSError:
            return []
    import fsspec

    fs, path = fsspec.core.url_to_fs(root, **(storage_options or {}))
    try:
        found = fs.ls(f"{path.rstrip('/')}/{prefix}".rstrip("/"), detail=True, refresh=True)
    except FileNotFoundError:
        return []
    return sorted({str(p["name"]).rstrip("/").rpartition("/")[2] for p in found if p.get("type") == "directory"})


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
            raw = backend.get(key)
            try:
                doc = json.loads(raw) if raw is not None else None
            except (ValueError, UnicodeDecodeError):
                doc = None
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
            raw = backend.get(f"{rank}/{window}/zarr.json")
            if raw is None:
                continue
            try:
                doc = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                continue
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
    out = {"zarr.json": _dumps({**_plain(root_doc), "consolidated_metadata": _consolidated(root_entries)})}
    for rank, doc in rank_docs.items():
        out[f"{rank}/zarr.json"] = _dumps({**_plain(doc), "consolidated_metadata": _consolidated(rank_entries[rank])})
    return out


def _read(backend: Backend, key: str) -> dict[str, Any] | None:
    raw = backend.get(key)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, dict) and doc.get("node_type") == "group" else None


def index_root(backend: Backend, root: str, storage_options: dict[str, Any] | None = None) -> bool:
    """Give the root and every rank group consolidated metadata of the complete windows (see the module).

    Args:
        backend: The writer's backend for ``root``.
        root: The dump root (path or URL), for listing.
        storage_options: fsspec options of a URL root.

    Returns:
        Whether an index was written (False: nothing to index, too large, or the root cannot be listed).
    """
    root = os.fspath(root)
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
        rank_docs = {rank: _read(backend, f"{rank}/zarr.json") or _group() for rank in ranks}
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
            after = _complete_windows(backend, root, storage_options, known=windows)
        except Exception:  # noqa: BLE001
            return True
        if set(after) == set(windows):
            return True
        known = after
    return True


def strip_index(backend: Backend, ranks: list[str] | tuple[str, ...] = ()) -> None:
    """Drop consolidated metadata from the root and the given rank groups (a session is writing)."""
    for key in ("zarr.json", *(f"{rank}/zarr.json" for rank in ranks)):
        raw = backend.get(key)
        if raw is None or b'"consolidated_metadata"' not in raw:
            continue
        doc = _read(backend, key)
        if doc is not None and doc.get("consolidated_metadata") is not None:
            backend.put(key, _dumps(_plain(doc)), atomic=True)


def plain_document(raw: bytes) -> bytes | None:
    """A group document's bytes without its consolidated metadata (``None``: not a group document).

    Args:
        raw: The ``zarr.json`` bytes.
    """
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(doc, dict) or doc.get("node_type") != "group":
        return None
    return _dumps(_plain(doc))
