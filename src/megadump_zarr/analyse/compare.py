"""Compare dumps with dumps or with eager references; find the first divergence or NaN.

The dump-level functions use only three methods of a dump (``megadump_zarr.read.Dump``):

* ``records()``: a DataFrame, one row per stored tensor, with the key columns (``rank``,
  ``window``, ``invocation``, ``direction``, ``kernel``, ``stage``, ``task_id``, ``worker``, ``io``,
  ``index``, ``name``, ``path`` relative to the dump root, ``capture_phase``) and the stored
  statistics (``nan_count``, ``inf_count``); its row order does not matter: :func:`execution_order`
  sorts it;
* ``record_array(path)``: one record as a lazy DataArray in its logical shape;
* ``tensor(name, **select)``: a named tensor, L0 array or stitched L1 view, as a lazy DataArray.

A ``Dump`` from :func:`megadump_zarr.read.open_dump` is read faster: each record's zarr array
directly, chunk-aligned, both sides decoded in parallel threads (:mod:`megadump_zarr.analyse.pairs`).
Arrays are never loaded whole: :mod:`megadump_zarr.analyse.metrics` reads them block by block.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
import contextlib
import math
from typing import Any

import pandas as pd

from megadump_zarr.analyse.matching import (
    KEY_COLUMNS,
    align_reference,
    clean_select,
    common_keys,
    execution_order,
    filter_records,
    is_dump,
    is_reference_collection,
    merged_order,
    name_filter,
    open_side,
    record_keys,
    record_select,
    reference_get,
    reference_names,
    scalar,
)
from megadump_zarr.analyse.metrics import DEFAULT_BLOCK_BYTES, dtype_name, shape_of
from megadump_zarr.analyse.summary import is_summary_pair, summary_row
from megadump_zarr.analyse.pairs import (
    METRIC_COLUMNS,
    RecordPair,
    compare_pair,
    compare_record,
    compare_records,
    empty_row,
    single_threaded_blas,
)
from megadump_zarr.analyse.verdict import FAILING, check_tolerance

__all__ = [
    "KEY_COLUMNS",
    "LINEAGE_COLUMNS",
    "RESULT_COLUMNS",
    "compare",
    "execution_order",
    "first_divergence",
    "first_nonfinite",
]

LINEAGE_COLUMNS = ("role", "capture_phase", "producers", "consumers", "ports")
"""Where a record sits in its kernel's data flow (L0: its role, the stages that write and read it and
its ports ``((stage, io), ...)`` in graph order; L1: the capture phase);
:func:`megadump_zarr.analyse.rootcause.root_cause` reads them."""

RESULT_COLUMNS = KEY_COLUMNS + METRIC_COLUMNS + LINEAGE_COLUMNS
"""Columns of :func:`compare`'s DataFrame, in order."""

_INT_COLUMNS = (
    "rank",
    "window",
    "invocation",
    "step",
    "task_id",
    "worker",
    "owner_id",
    "core_id",
    "index",
    "elements",
    "nan_a",
    "inf_a",
    "nan_b",
    "inf_b",
    "nonfinite_mismatch",
    "mismatches",
    "worst_task_id",
    "worst_owner_id",
    "worst_core_id",
)
_FLOAT_COLUMNS = (
    "cosine",
    "max_abs",
    "max_rel",
    "rmse",
    "within_0_1pct",
    "within_0_5pct",
    "euc_dist",
    "max_rel_eps",
    "one_thousandth_ratio",
    "five_thousandths_ratio",
    "worst_a",
    "worst_b",
    "rtol",
    "atol",
)
_STOPPING = FAILING + ("missing",)


# ---------------------------------------------------------------------------------------------------- helpers
def _truncation_note(x: Any) -> str:
    attrs = getattr(x, "attrs", None) or {}
    if attrs.get("truncated") or attrs.get("truncatedRecords"):
        return "truncated record(s): NaN where not captured"
    return ""


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(RESULT_COLUMNS))
    for col in _INT_COLUMNS:
        df[col] = pd.array([None if scalar(v) is None else int(v) for v in df[col]], dtype="Int64")
    for col in _FLOAT_COLUMNS:
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    df["allclose"] = pd.array([None if scalar(v) is None else bool(v) for v in df["allclose"]], dtype="boolean")
    return df.reset_index(drop=True)


@contextlib.contextmanager
def _progress(enabled: bool, total: int, description: str) -> Any:
    """Yields an ``advance()`` callable; a rich progress bar when enabled."""
    if not enabled:
        yield lambda: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as bar:
        task = bar.add_task(description, total=total)
        yield lambda: bar.advance(task)


# ---------------------------------------------------------------------------------------------------- compare
def compare(
    a: Any,
    b: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    names: str | Iterable[str] | None = None,
    progress: bool | Callable[[], None] = False,
    fail_fast: bool = False,
    bitwise: bool = False,
    **select: Any,
) -> pd.DataFrame:
    """Compare tensors of ``a`` (under test) with ``b`` (reference); one row per tensor pair.

    Accepted pairs:

    * two dumps (``Dump`` objects, or paths/URLs opened with ``open_dump``): records are matched by
      their path relative to the dump root (that is, by rank, window, invocation, stage, task,
      io, index and name); a record on one side only gives a ``"missing"`` row. ``select`` filters
      ``records()`` (any column; a list/tuple/set value means "any of"). Each record pair is one
      picklable unit (:func:`megadump_zarr.analyse.pairs.compare_record`) run through
      :func:`megadump_zarr.analyse.parallel.map_ordered`: on a ``distributed`` cluster when a client
      is active, else in local threads.
    * a dump and a reference: a mapping name → tensor/array (e.g. tensors of an eager PyTorch run) or
      an ``xarray.Dataset`` (its data variables). Each name is compared with
      ``dump.tensor(name, **select)`` (``select``: rank, window, invocation, stage, io, kernel, task;
      one value each). A stitched L1 tensor holds only the rows its records captured: the reference
      is compared at those global rows (the tensor's first-dimension coordinate).
    * two mappings / Datasets (compared name by name), or two array-likes (one row).

    Rows come in execution order (see :func:`execution_order`: rank, window, invocation, stage groups
    as executed, task, inputs before outputs); named tensors by their first record. The index is that
    order, so :func:`first_divergence` and :func:`~megadump_zarr.analyse.rootcause.root_cause` still
    work after the frame is re-sorted.

    Verdicts (one per row; the rules are :mod:`megadump_zarr.analyse.verdict`)::

        verdict rules (A under test, B reference):
          integer, bool, index   exact: one differing element fails (mismatches, first_mismatch)
          floating               fail if |a-b| > atol + rtol*|b| at a finite pair, NaN/Inf positions
                                 differ, cosine < 0.9, or cosine < 0.99 with max_abs > 0.001
          kinds differ           dtype_mismatch (int vs float, bool vs int); not compared
          shapes differ          shape_mismatch; not compared
          one side only          missing;   unreadable chunk: missing_data (note names the key)
          statistics only        checksums equal: pass; checksums differ: fail (integer, bool), or for
                                 floats differs_within_stats when every statistic is within tolerance
                                 (exit 1 unless --accept-within-stats), else fail
        default tolerances (two float dtypes: the looser one's; --rtol/--atol replace them):
          dtype            rtol      atol
          float64          1e-07     1e-07
          float32          1.3e-06   1e-05
          float16          0.001     0.001
          bfloat16         0.016     0.016
          float8_e4m3fn    0.125     0.125
          float8_e5m2      0.25      0.25

    ``verdict`` is one of ``pass``, ``fail``, ``differs_within_stats``, ``shape_mismatch``, ``dtype_mismatch``, ``missing_data``,
    ``error`` and ``missing``; ``note`` says why. Failing rows carry ``worst_index`` (logical index of
    the largest ``|a - b|``), ``worst_a``/``worst_b`` and, for L1 records and stitched L1 tensors, the
    task, owner and core that produced that element (``worst_task_id``, ``worst_owner_id``,
    ``worst_core_type``, ``worst_core_id``). Metrics (msprobe's cosine, max abs/rel error, RMSE, shares
    within 0.1 % / 0.5 %; see :mod:`megadump_zarr.analyse.metrics`) are computed block by block.

    Args:
        a: The dump (or tensors) under test; a path or URL is opened with ``open_dump``.
        b: The reference dump, mapping, Dataset or array.
        rtol: Relative tolerance of floating comparisons, replacing the dtype default (finite, >= 0).
        atol: Absolute tolerance of floating comparisons, replacing the dtype default (finite, >= 0).
        names: Only these tensor names (default: all records, or every name of the reference).
        progress: Show a rich progress bar (True), or a callable run after each compared pair.
        fail_fast: Dumps: compare one record at a time in execution order and stop after the first
            that does not pass (``missing`` included); the rest are left out of the result.
        bitwise: Two dumps only: a determinism check, any differing bit fails (no tolerance; see
            :mod:`megadump_zarr.analyse.bitwise`): the stored bytes where both sides hold a payload, else
            the device checksum; a pair that cannot be proven equal (no payload, no checksum) is an
            ``error`` row. :func:`~megadump_zarr.analyse.bitwise.bitwise_map` names the tasks and cores
            whose records differ at which steps.
        **select: Record selection, e.g. ``rank=0, invocation=2, stage="expert_up", io="output"``.

    Returns:
        A DataFrame with columns :data:`RESULT_COLUMNS`.

    Raises:
        ValueError: ``rtol`` or ``atol`` is NaN, infinite or negative (the message names it and the value),
            or given with ``bitwise``.
        TypeError: ``bitwise`` with something else than two dumps.
    """
    rtol, atol = check_tolerance("rtol", rtol), check_tolerance("atol", atol)
    a, b = open_side(a), open_side(b)
    name_list = name_filter(names)
    select = clean_select(select)
    tol = dict(rtol=rtol, atol=atol)
    if bitwise:
        return _compare_bitwise(a, b, name_list, select, progress, tol, fail_fast)
    if is_dump(a) and is_dump(b):
        return _compare_dumps(a, b, name_list, select, progress, tol, fail_fast)
    if is_dump(a):
        if not is_reference_collection(b):
            raise TypeError(
                f"a dump can be compared with a dump, a mapping or an xarray.Dataset, not {type(b).__name__}"
            )
        return _compare_dump_reference(a, b, name_list, select, progress, tol)
    if is_dump(b):
        raise TypeError("pass the dump under test first and the reference second: compare(dump, reference)")
    if select:
        raise TypeError(f"selection {sorted(select)} only applies to dumps")
    if is_reference_collection(a) and is_reference_collection(b):
        return _compare_collections(a, b, name_list, progress, tol)
    label = name_list[0] if name_list and len(name_list) == 1 else None
    return _frame([compare_pair({**dict.fromkeys(KEY_COLUMNS), "name": label}, a, b, **tol)])


def _advancer(progress: bool | Callable[[], None], total: int, description: str) -> Any:
    if callable(progress):
        return contextlib.nullcontext(progress)
    return _progress(bool(progress), total, description)


def _source(dump: Any) -> Any:
    """What a record unit carries for ``dump``: the dump itself locally, its ``DumpSource`` (URL +
    storage options) when a distributed cluster runs the units."""
    try:
        from megadump_zarr.analyse.parallel import active_client
    except ImportError:  # pragma: no cover - parallel is part of the package
        return dump
    if active_client() is None or not hasattr(dump, "location"):
        return dump
    from megadump_zarr.read.source import DumpSource

    return DumpSource.of(dump) or dump


def lineage(dump: Any, path: str) -> dict[str, Any]:
    """The :data:`LINEAGE_COLUMNS` of a record, from its attributes (metadata only)."""
    attrs: dict[str, Any] = {}
    if hasattr(dump, "_record"):
        with contextlib.suppress(Exception):
            attrs = dump._record(path)[2].get("attributes") or {}
    producers, consumers, ports = attrs.get("producers"), attrs.get("consumers"), attrs.get("ports")
    port_pairs = None
    if isinstance(ports, list):
        port_pairs = tuple((str(p.get("stage")), str(p.get("io"))) for p in ports if isinstance(p, dict))
    return {
        "role": attrs.get("role"),
        "capture_phase": attrs.get("capturePhase"),
        "producers": tuple(producers) if isinstance(producers, list) else None,
        "consumers": tuple(consumers) if isinstance(consumers, list) else None,
        "ports": port_pairs,
    }


def _run_units(units: list[RecordPair], advance: Callable[[], None]) -> list[dict[str, Any]]:
    """Rows of the record units: on the active ``distributed`` cluster, one task per record
    (:func:`~megadump_zarr.analyse.parallel.map_ordered`), else here with every block of every record in
    one queue for this process's threads (:func:`~megadump_zarr.analyse.pairs.compare_records`)."""
    try:
        from megadump_zarr.analyse.parallel import active_client, map_ordered
    except ImportError:  # pragma: no cover - parallel is part of the package
        return compare_records(units, advance)
    if active_client() is None or len(units) <= 1:
        return compare_records(units, advance)
    return map_ordered(compare_record, units, progress=lambda done, total: advance())


def _compare_dumps(
    a: Any,
    b: Any,
    names: list[str] | None,
    select: dict[str, Any],
    progress: bool | Callable[[], None],
    tol: dict[str, Any],
    fail_fast: bool = False,
) -> pd.DataFrame:
    from megadump_zarr.analyse.records import prefetch_records  # per-window tables on a dask cluster, if active

    prefetch_records(a), prefetch_records(b)
    ra = execution_order(filter_records(a.records(), record_select(select), names))
    rb = execution_order(filter_records(b.records(), record_select(select), names))
    rows_a = {str(row["path"]): row for row in ra.to_dict("records")}
    rows_b = {str(row["path"]): row for row in rb.to_dict("records")}
    order = merged_order(list(rows_a), list(rows_b))
    source_a, source_b = _source(a), _source(b)
    slots: list[dict[str, Any] | RecordPair] = []
    for path in order:
        ra_row, rb_row = rows_a.get(path), rows_b.get(path)
        present = ra_row if ra_row is not None else rb_row
        keys = {**record_keys(present), **lineage(a if ra_row is not None else b, path)}
        if ra_row is None or rb_row is None:
            side = "a" if ra_row is not None else "b"
            extra = {}
            if scalar(present.get("shape")) is not None:
                extra[f"shape_{side}"] = tuple(int(s) for s in present["shape"])
            if "dtype" in present:
                extra[f"dtype_{side}"] = scalar(present["dtype"])
            slots.append(empty_row(keys, "missing", f"only in dump {side}", **extra))
        elif is_summary_pair(ra_row, rb_row):  # a side stored statistics only: compare what both know
            ra_row, rb_row = _with_payload_checksums(a, b, ra_row, rb_row)
            slots.append(summary_row(keys, ra_row, rb_row, tol["rtol"], tol["atol"]))
        else:
            truncated = any(bool(scalar(r.get("truncated"))) for r in (ra_row, rb_row))
            slots.append(
                RecordPair(source_a, source_b, path, keys, tol["rtol"], tol["atol"], truncated, DEFAULT_BLOCK_BYTES)
            )
    rows: list[dict[str, Any]] = []
    with _advancer(progress, len(order), "comparing records") as advance, single_threaded_blas():
        if fail_fast:
            for slot in slots:
                if isinstance(slot, RecordPair):
                    row = compare_record(slot)
                else:
                    row = slot
                rows.append(row)
                advance()
                if row["verdict"] in _STOPPING:
                    break
        else:
            units = [s for s in slots if isinstance(s, RecordPair)]
            done = iter(_run_units(units, advance))
            for slot in slots:
                if isinstance(slot, RecordPair):
                    rows.append(next(done))
                else:
                    rows.append(slot)
                    advance()
    return _frame(rows)


def _row_lineage(dump: Any, path: str, row: dict[str, Any]) -> dict[str, Any]:
    """:func:`lineage` of a record, without a metadata look-up for a statistics-only one (it has no array
    document: its role and capture phase are in its ``records()`` row, a 1000-step dump holds thousands)."""
    if scalar(row.get("payload")) is False:
        return {
            "role": scalar(row.get("role")),
            "capture_phase": scalar(row.get("capture_phase")),
            "producers": None,
            "consumers": None,
            "ports": None,
        }
    return lineage(dump, path)


def _compare_bitwise(
    a: Any,
    b: Any,
    names: list[str] | None,
    select: dict[str, Any],
    progress: bool | Callable[[], None],
    tol: dict[str, Any],
    fail_fast: bool,
) -> pd.DataFrame:
    """``compare(a, b, bitwise=True)``: every record pair of two dumps by its bits, in execution order."""
    from megadump_zarr.analyse.bitwise import bitwise_row

    if not (is_dump(a) and is_dump(b)):
        raise TypeError(f"bitwise=True compares two dumps, not {type(a).__name__} and {type(b).__name__}")
    given = [name for name, value in tol.items() if value is not None]
    if given:
        raise ValueError(f"bitwise=True compares bits, {' and '.join(given)} do not apply; leave them out")
    ra = execution_order(filter_records(a.records(), record_select(select), names))
    rb = execution_order(filter_records(b.records(), record_select(select), names))
    rows_a = {str(row["path"]): row for row in ra.to_dict("records")}
    rows_b = {str(row["path"]): row for row in rb.to_dict("records")}
    order = merged_order(list(rows_a), list(rows_b))
    rows: list[dict[str, Any]] = []
    with _advancer(progress, len(order), "comparing bits") as advance:
        for path in order:
            ra_row, rb_row = rows_a.get(path), rows_b.get(path)
            present = ra_row if ra_row is not None else rb_row
            keys = {**record_keys(present), **_row_lineage(a if ra_row is not None else b, path, present)}
            if ra_row is None or rb_row is None:
                side = "a" if ra_row is not None else "b"
                row = empty_row(
                    keys, "missing", f"only in dump {side}", **{f"dtype_{side}": scalar(present.get("dtype"))}
                )
            else:
                row = bitwise_row(keys, a, b, ra_row, rb_row)
            rows.append(row)
            advance()
            if fail_fast and row["verdict"] in _STOPPING:
                break
    return _frame(rows)


def _with_payload_checksums(a: Any, b: Any, ra_row: dict[str, Any], rb_row: dict[str, Any]) -> tuple[Any, Any]:
    """A mixed pair (one side statistics only, with its device checksum; the other a payload without one):
    the payload side's checksum computed on the host, so equal bits are proven and differing bits are never
    a pass. A payload that cannot be read keeps no checksum (its damage is ``verify``'s to name)."""
    if (scalar(ra_row.get("checksum")) is None) == (scalar(rb_row.get("checksum")) is None):
        return ra_row, rb_row  # both known (compared as they are) or neither (statistics only)
    from megadump_zarr.analyse.bitwise import payload_checksum

    rows = []
    for dump, row in ((a, ra_row), (b, rb_row)):
        try:
            checksum = payload_checksum(dump, row)
        except Exception:  # noqa: BLE001 - unreadable payload: compared by statistics as before
            checksum = None
        rows.append(row if checksum is None else {**row, "checksum": checksum})
    return rows[0], rows[1]


def _stitched_locator(tensor: Any, records: pd.DataFrame) -> Callable[[tuple[int, ...]], dict[str, Any]] | None:
    """Worst element → producing task/owner/core, from a stitched L1 tensor's per-row coordinates."""
    import numpy as np

    if getattr(tensor, "attrs", {}).get("level") != "L1" or not getattr(tensor, "dims", ()):
        return None
    dim = tensor.dims[0]
    coords = {}
    for name in ("task_id", "owner_id", "core_id"):
        if name in tensor.coords and tensor.coords[name].dims == (dim,):
            coords[name] = np.asarray(tensor.coords[name].values)
    core_types = {}
    if "task_id" in records.columns and "core_type" in records.columns:
        for task, core_type in zip(records["task_id"], records["core_type"]):
            if scalar(task) is not None:
                core_types[int(task)] = scalar(core_type)

    def locate(index: tuple[int, ...]) -> dict[str, Any]:
        row = int(index[0])
        out: dict[str, Any] = {}
        for name, values in coords.items():
            value = int(values[row])
            out[f"worst_{name}"] = value if value >= 0 else None
        task = out.get("worst_task_id")
        if task is not None:
            out["worst_core_type"] = core_types.get(task)
        return out

    return locate


def _compare_dump_reference(
    dump: Any,
    reference: Any,
    names: list[str] | None,
    select: dict[str, Any],
    progress: bool | Callable[[], None],
    tol: dict[str, Any],
) -> pd.DataFrame:
    records = execution_order(filter_records(dump.records(), record_select(select)))
    wanted = names if names is not None else reference_names(reference)
    record_names = list(records["name"])
    first_seen = {}
    for position, name in enumerate(record_names):
        first_seen.setdefault(str(name), position)
    ordered = sorted(wanted, key=lambda n: (first_seen.get(n, math.inf), wanted.index(n)))
    rows: list[dict[str, Any]] = []
    with _advancer(progress, len(ordered), "comparing tensors") as advance:
        for name in ordered:
            mine = records[records["name"] == name]
            keys = common_keys(mine, name)
            for k, v in record_select(select).items():
                if k in keys and keys[k] is None and not isinstance(v, (list, tuple, set, frozenset, range)):
                    keys[k] = v
            ref = reference_get(reference, name)
            if ref is None:
                rows.append(empty_row(keys, "missing", "not in the reference"))
            elif name not in first_seen:
                rows.append(
                    empty_row(keys, "missing", "not in the dump", shape_b=shape_of(ref), dtype_b=dtype_name(ref))
                )
            else:
                try:
                    tensor = dump.tensor(name, **select)
                except Exception as exc:
                    rows.append(compare_pair(keys, _Raising(exc), ref))
                else:
                    ref, aligned = align_reference(tensor, ref)
                    rows.append(
                        compare_pair(
                            keys,
                            tensor,
                            ref,
                            notes=[aligned, _truncation_note(tensor)],
                            locate=_stitched_locator(tensor, mine),
                            **tol,
                        )
                    )
            advance()
    return _frame(rows)


class _Raising:
    """An array-like whose reading raises ``exc`` (so :func:`compare_pair` classifies the failure)."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    @property
    def shape(self) -> Any:
        raise self.exc


def _compare_collections(
    a: Any, b: Any, names: list[str] | None, progress: bool | Callable[[], None], tol: dict[str, Any]
) -> pd.DataFrame:
    if names is None:
        names_a, names_b = reference_names(a), reference_names(b)
        names = names_a + [n for n in names_b if n not in set(names_a)]
    rows: list[dict[str, Any]] = []
    with _advancer(progress, len(names), "comparing tensors") as advance:
        for name in names:
            keys = {**dict.fromkeys(KEY_COLUMNS), "name": name}
            xa, xb = reference_get(a, name), reference_get(b, name)
            if xa is None or xb is None:
                where = "in neither" if xa is None and xb is None else f"only in {'a' if xb is None else 'b'}"
                rows.append(empty_row(keys, "missing", where))
            else:
                rows.append(compare_pair(keys, xa, xb, **tol))
            advance()
    return _frame(rows)


# ---------------------------------------------------------------------------------------------------- searches
def first_divergence(result: pd.DataFrame, *, include_missing: bool = False) -> pd.Series | None:
    """The first row of a :func:`compare` result, in execution order, that does not pass.

    "Not passing" means verdict ``"fail"`` or ``"error"`` (and ``"missing"`` when
    ``include_missing``). Execution order is the frame's index as :func:`compare` made it, so a
    re-sorted result gives the same answer.

    Args:
        result: A :func:`compare` result.
        include_missing: Count records present on one side only as divergences.

    Returns:
        The row (a Series whose ``name`` is its index), or None when everything passes.
    """
    bad = FAILING + (("missing",) if include_missing else ())
    ordered = result.sort_index(kind="stable")
    hits = ordered[ordered["verdict"].isin(bad)]
    return None if hits.empty else hits.iloc[0]


def first_nonfinite(dump: Any, **select: Any) -> pd.Series | None:
    """The first record, in execution order, whose stored statistics count a NaN or an Inf.

    Only ``records()`` is read (the ``nan_count``/``inf_count`` statistics written with the dump); no
    tensor data is loaded.

    Args:
        dump: A dump, or a path/URL opened with ``open_dump``.
        **select: Record selection as in :func:`compare` (e.g. ``rank=0, direction="forward"``).

    Returns:
        The row of ``records()`` (a Series), or None when no selected record holds a NaN or Inf.

    Raises:
        ValueError: The selected records carry no statistics (the dump was written with ``stats=False``).
    """
    from megadump_zarr.analyse.records import prefetch_records  # per-window tables on a dask cluster, if active

    records = execution_order(
        filter_records(prefetch_records(open_side(dump)).records(), record_select(clean_select(select)))
    )
    if records.empty:
        return None
    nan = pd.to_numeric(records["nan_count"], errors="coerce")
    inf = pd.to_numeric(records["inf_count"], errors="coerce")
    if nan.isna().all() and inf.isna().all():
        raise ValueError("the selected records have no NaN/Inf statistics (dump written with stats=False?)")
    hits = records[(nan.fillna(0) > 0) | (inf.fillna(0) > 0)]
    return None if hits.empty else hits.iloc[0]
