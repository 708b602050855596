"""Read the per-invocation statistics tables (``invocation_*/statistics``) into the records table.

A statistics-first dump (``mode="statistics" | "nonfinite" | "diff"``) stores one statistics table per
invocation (see :mod:`megadump_zarr.store.statistics_table`). The records table then shows every record:
records whose payload is stored keep their array row (``payload`` True) and gain the device
``digest`` (:mod:`megadump_zarr.layout.digest`) and ``element_count``; statistics-only records get a row of their own with ``payload``
False, the device statistics, and as ``path`` the array path the payload would have had (which is
what matches them with the other side of a comparison).

Reading a table costs one small chunk per column; committed windows are read once and cached by the
caller with the rest of the window's rows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
import json
import math
import os
from typing import Any

import numpy as np
from zarr.abc.store import Store
from zarr.core.sync import sync

from megadump_zarr.layout.dtypes import itemsize
from megadump_zarr.layout.statistics import (
    DIGEST_COLUMN,
    DIGESTS_ATTRIBUTE,
    MD5_COLUMN,
    MSPROBE_MD5,
    STATISTICS_COORDINATES,
    STATISTICS_GROUP,
    STATISTICS_LAYOUT_ATTRIBUTE,
    STATISTICS_LAYOUT_VERSIONS,
    STATISTICS_VARIABLES,
)
from megadump_zarr.read.location import get_many

__all__ = ["STATISTICS_COLUMNS", "load_tables", "merge_statistics"]

STATISTICS_COLUMNS = ("payload", DIGEST_COLUMN, "element_count", MD5_COLUMN)
"""Columns the records table gains (after the other extra columns)."""
_COLUMNS = (*STATISTICS_COORDINATES, *STATISTICS_VARIABLES)


def _table_groups(nodes: Mapping[str, dict[str, Any]]) -> list[str]:
    """Relative paths of the statistics groups of one window (``invocation_x/statistics``)."""
    found = []
    for path, doc in nodes.items():
        parts = path.split("/")
        if len(parts) == 2 and parts[1] == STATISTICS_GROUP and doc.get("node_type") == "group":
            attrs = doc.get("attributes") or {}
            if isinstance(attrs, dict) and STATISTICS_LAYOUT_ATTRIBUTE in attrs:
                found.append(path)
    return sorted(found)


def load_tables(
    store: Store, window_key: str, nodes: Mapping[str, dict[str, Any]]
) -> list[tuple[str, dict[str, list[Any]]]]:
    """Every statistics table of one window, as ``(invocation group name, {column: values})``.

    Args:
        store: The dump store.
        window_key: The window's key (``rank_0/window_0000``).
        nodes: The window's nodes (see ``read.catalog.window_nodes``).

    Raises:
        ValueError: A table of an unknown layout, missing a column, or whose columns differ in length (naming
            the group).
    """
    groups = _table_groups(nodes)
    wanted = []
    for path in groups:
        layout = (nodes[path].get("attributes") or {}).get(STATISTICS_LAYOUT_ATTRIBUTE)
        if isinstance(layout, bool) or layout not in STATISTICS_LAYOUT_VERSIONS:
            known = ", ".join(str(v) for v in sorted(STATISTICS_LAYOUT_VERSIONS))
            raise ValueError(
                f"statistics table {window_key}/{path} has {STATISTICS_LAYOUT_ATTRIBUTE} {layout!r}; this reader "
                f"reads {known}"
            )
        for name in _COLUMNS:
            doc = nodes.get(f"{path}/{name}")
            if not isinstance(doc, dict) or doc.get("node_type") != "array":
                raise ValueError(f"statistics table {window_key}/{path} has no column {name!r}")
            wanted.append((f"{window_key}/{path}/{name}", doc))
    values = iter(_read_columns(store, wanted))
    tables = []
    for path in groups:
        attrs = nodes[path].get("attributes") or {}
        columns: dict[str, list[Any]] = {name: next(values) for name in _COLUMNS}
        lengths = {len(v) for v in columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"statistics table {window_key}/{path} has columns of different lengths")
        if not _has_digests(attrs):  # placeholders (msprobe statistics)
            columns[DIGEST_COLUMN] = [None] * len(columns["name"])
        columns[MD5_COLUMN] = _digests(attrs.get(MSPROBE_MD5), len(columns["name"]))
        invocation_name = path.split("/")[0]
        # a launch that failed and was kept (on_error="keep"): every record it holds is salvaged, like its arrays
        columns["partial"] = [_launch_failed(nodes, invocation_name)] * len(columns["name"])
        tables.append((invocation_name, columns))
    return tables


def _read_columns(store: Store, wanted: list[tuple[str, dict[str, Any]]]) -> list[list[Any]]:
    """The values of every column array in ``wanted`` (``(key, zarr.json document)``), read concurrently in
    one event-loop call: a window of a 1000-step statistics dump holds thousands of one-chunk columns, and
    one blocking zarr read each cost milliseconds. Columns as the writer makes them (one chunk, ``bytes``
    or ``vlen-utf8``, then blosc/zstd and ``crc32c``) are decoded here from their chunk bytes; any other
    column is read through zarr."""
    if not wanted:
        return []
    plans = [_plain_plan(doc) for _, doc in wanted]
    keys = [f"{key}/{plan[0]}" for (key, _), plan in zip(wanted, plans) if plan is not None]
    from megadump_zarr.read.integrity import IntegrityStore

    chunks = _local_chunks(store, keys)
    if chunks is not None and isinstance(store, IntegrityStore):  # read below it: checked as its get would
        for key, raw in zip(keys, chunks):
            if raw is not None:
                store.check_read(key, raw)
    fetched = iter(chunks or get_many(store, keys))
    values: list[list[Any] | None] = []
    for (key, doc), plan in zip(wanted, plans):
        raw = next(fetched) if plan is not None else None
        values.append(None if raw is None else _decode_plain(raw, doc, plan, key))
    slow = [i for i, v in enumerate(values) if v is None]
    for i, column in zip(slow, _read_with_zarr(store, [wanted[i] for i in slow])):
        values[i] = column
    return values  # type: ignore[return-value]


def _local_chunks(store: Store, keys: list[str]) -> list[bytes | None] | None:
    """The chunks at ``keys`` of a local directory store, read with plain file reads (a ``LocalStore`` read
    through the event loop costs a thread hand-off per key), or None for any other store."""
    from zarr.storage import LocalStore, WrapperStore

    while isinstance(store, WrapperStore):  # the IntegrityStore of a Dump: what it checks is checked here too
        store = store._store
    if not isinstance(store, LocalStore) or not keys:
        return None
    root = str(store.root)
    chunks: list[bytes | None] = []
    for key in keys:
        try:
            with open(os.path.join(root, key), "rb") as handle:
                chunks.append(handle.read())
        except FileNotFoundError:
            chunks.append(None)  # read through the store: a fill value, or the integrity error of a missing chunk
    return chunks


def _plain_plan(doc: dict[str, Any]) -> tuple[str, list[str]] | None:
    """``(chunk key, byte codec names)`` of a one-chunk 1-D column the writer made, else None (use zarr)."""
    shape = doc.get("shape")
    grid = ((doc.get("chunk_grid") or {}).get("configuration") or {}).get("chunk_shape")
    encoding = doc.get("chunk_key_encoding") or {}
    if not (isinstance(shape, list) and len(shape) == 1 and grid == shape and shape[0] > 0):
        return None
    if encoding.get("name") != "default" or doc.get("storage_transformers"):
        return None
    codecs = doc.get("codecs") or []
    names = [c.get("name") for c in codecs if isinstance(c, dict)]
    if len(names) != len(codecs) or not names or names[0] not in ("bytes", "vlen-utf8"):
        return None
    if names[0] == "bytes" and (codecs[0].get("configuration") or {}).get("endian", "little") != "little":
        return None
    if any(n not in ("blosc", "zstd", "crc32c") for n in names[1:]) or "crc32c" in names[1:-1]:
        return None
    separator = (encoding.get("configuration") or {}).get("separator", "/")
    return f"c{separator}0", names


def _decode_plain(raw: bytes, doc: dict[str, Any], plan: tuple[str, list[str]], key: str) -> list[Any] | None:
    """One column's values from its chunk bytes (see :func:`_plain_plan`); None when its checksum does not
    match (the caller reads it through the store, whose error names the chunk)."""
    names = plan[1]
    data = raw
    if names[-1] == "crc32c":
        import google_crc32c

        data, stored = raw[:-4], raw[-4:]
        if len(raw) < 4 or int(google_crc32c.value(data)).to_bytes(4, "little") != stored:
            return None  # read through the dump's store, which names the corrupt chunk
    for name in reversed([n for n in names[1:] if n != "crc32c"]):
        if name == "blosc":
            from numcodecs import Blosc

            data = bytes(Blosc().decode(data))
        else:
            from numcodecs import Zstd

            data = bytes(Zstd().decode(data))
    count = int(doc["shape"][0])
    if names[0] == "vlen-utf8":
        from numcodecs import VLenUTF8

        values = VLenUTF8().decode(data).tolist()
    else:
        dtype = np.dtype(str(doc.get("data_type"))).newbyteorder("<")
        values = np.frombuffer(data, dtype=dtype).tolist()
    if len(values) != count:
        raise ValueError(f"statistics column {key}: {len(values)} values where its shape says {count}")
    return values


def _read_with_zarr(store: Store, wanted: list[tuple[str, dict[str, Any]]]) -> list[list[Any]]:
    """Columns read through zarr (a missing chunk gives the fill value), concurrently."""
    if not wanted:
        return []
    from megadump_zarr.read.documents import open_array_checked

    arrays = [open_array_checked(store, key, doc) for key, doc in wanted]

    async def run() -> list[Any]:
        return list(await asyncio.gather(*(a._async_array.getitem(()) for a in arrays)))

    return [np.asarray(v).tolist() for v in sync(run())]


def _has_digests(attrs: Mapping[str, Any]) -> bool:
    """Whether a table's ``digest`` column holds record digests: not where ``"digests": false`` says so
    (msprobe statistics, which are also known by their ``source``)."""
    return attrs.get(DIGESTS_ATTRIBUTE) is not False and attrs.get("source") != "msprobe statistics task"


def _digests(value: Any, rows: int) -> list[str | None]:
    """msprobe's digests of a table's rows (:data:`MSPROBE_MD5`); all None unless one string or null per row."""
    if not isinstance(value, list) or len(value) != rows:
        return [None] * rows
    return [v if isinstance(v, str) and v else None for v in value]


def _launch_failed(nodes: Mapping[str, dict[str, Any]], invocation_name: str) -> bool:
    """Whether the invocation's group says its launch failed (``launchFailed: true``)."""
    attrs = (nodes.get(invocation_name) or {}).get("attributes")
    return isinstance(attrs, dict) and attrs.get("launchFailed") is True


def _digest(value: Any) -> int | None:
    return None if value is None else int(value)


def _none(value: int) -> int | None:
    return None if value == -1 else value


def _float(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def merge_statistics(
    window_key: str,
    status: str,
    invocations: Mapping[str, dict[str, Any]],
    tables: list[tuple[str, dict[str, list[Any]]]],
    columns: dict[str, list[Any]],
) -> None:
    """Fold a window's statistics tables into the records table's columns.

    Args:
        window_key: The window's key.
        status: The window's status.
        invocations: Invocation group name -> the invocation's columns (invocation, step, direction,
            kernel, level) and ``rank``/``window``.
        tables: From :func:`load_tables`.
        columns: The records table's column lists (appended to and updated in place).
    """
    by_path = {path: i for i, path in enumerate(columns["path"])}
    for invocation_name, table in tables:
        inv = invocations[invocation_name]
        for i in range(len(table["name"])):
            path = f"{window_key}/{invocation_name}/{table['path'][i]}"
            row = by_path.get(path)
            if table["payload"][i] and row is not None:
                columns[DIGEST_COLUMN][row] = _digest(table[DIGEST_COLUMN][i])
                columns["element_count"][row] = int(table["element_count"][i])
                if columns["truncated"][row]:  # the payload is a prefix; the device's statistics cover it whole
                    _whole_statistics(columns, row, table, i)
                continue
            _append(columns, inv, table, i, path, status, invocation_name)


def _whole_statistics(columns: dict[str, list[Any]], row: int, table: dict[str, list[Any]], i: int) -> None:
    """A truncated payload's statistics replaced by the device's statistics of the whole tensor."""
    for name in ("min", "max", "mean", "l2norm"):
        columns[name][row] = _float(table[name][i])
    columns["nan_count"][row] = int(table["nan_count"][i])
    columns["inf_count"][row] = int(table["inf_count"][i])
    columns["stats_scope"][row] = "whole"


def _append(
    columns: dict[str, list[Any]],
    inv: dict[str, Any],
    table: dict[str, list[Any]],
    i: int,
    path: str,
    status: str,
    invocation_name: str,
) -> None:
    """One statistics-only row."""
    is_l1 = bool(table["stage"][i])
    shape = tuple(int(d) for d in json.loads(table["shape"][i]))
    dtype = table["dtype"][i]
    values: dict[str, Any] = dict.fromkeys(columns)
    values.update(
        rank=inv["rank"],
        window=inv["window"],
        invocation=inv["invocation"],
        step=inv["step"],
        direction=inv["direction"],
        kernel=inv["kernel"],
        level=inv["level"] or ("L1" if is_l1 else "L0"),
        stage=table["stage"][i] or None,
        task_id=_none(table["task_id"][i]) if is_l1 else None,
        owner_id=_none(table["owner_id"][i]),
        core_type=table["core_type"][i] or None,
        core_id=_none(table["core_id"][i]) if is_l1 else None,
        worker=_none(table["worker"][i]),
        io=table["io"][i] if is_l1 else None,
        index=table["index"][i] if is_l1 else None,
        name=table["name"][i],
        dtype=dtype,
        shape=shape,
        stored_shape=(),
        truncated=False,
        bytes=math.prod(shape) * itemsize(dtype),
        stored_bytes=0,
        min=_float(table["min"][i]),
        max=_float(table["max"][i]),
        mean=_float(table["mean"][i]),
        l2norm=_float(table["l2norm"][i]),
        nan_count=int(table["nan_count"][i]),
        inf_count=int(table["inf_count"][i]),
        path=path,
        role=None if is_l1 else table["io"][i],
        capture_phase=("before" if table["io"][i] == "input" else "after") if is_l1 else None,
        status=status,
        invocation_name=invocation_name,
        param_position=_none(table["param_position"][i]),
        group=path.rsplit("/", 1)[0],
        payload=False,
        digest=_digest(table[DIGEST_COLUMN][i]),
        element_count=int(table["element_count"][i]),
        md5=table["md5"][i] if "md5" in table else None,
        partial=bool(table.get("partial", [False] * (i + 1))[i]),
        stats_scope="whole",  # the device's statistics of every element
    )
    for name, value in values.items():
        columns[name].append(value)
