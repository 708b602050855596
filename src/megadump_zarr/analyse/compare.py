"""Compare dumps with dumps or with eager references; find the first divergence or NaN.

The dump-level functions use only three methods of a dump (``megadump_zarr.read.Dump``):

* ``records()``: a DataFrame, one row per stored tensor, with the key columns (``rank``,
  ``window``, ``invocation``, ``direction``, ``kernel``, ``stage``, ``task_id``, ``worker``, ``io``,
  ``index``, ``name``, ``path`` relative to the dump root, ``capture_phase``) and the stored
  statistics (``nan_count``, ``inf_count``); its row order does not matter: :func:`execution_order`
  sorts it;
* ``record_array(path)``: one record as a lazy DataArray in its logical shape;
* ``tensor(name, **select)``: a named tensor, L0 array or stitched L1 view, as a lazy DataArray.

:func:`compare` runs one way: each argument opened once as a side (:func:`megadump_zarr.analyse.side.open_side`:
a dump, named tensors or one array), then the records matched (:mod:`megadump_zarr.analyse.matching`), each
match made a row or a record pair (:mod:`megadump_zarr.analyse.record_pairs`, :mod:`megadump_zarr.analyse.summary`,
:mod:`megadump_zarr.analyse.bitwise`), the pairs' metrics and verdicts computed, and the rows framed.

A ``Dump`` from :func:`megadump_zarr.read.open_dump` is read faster: each record's zarr array
directly, chunk-aligned, both sides decoded in parallel threads (:mod:`megadump_zarr.analyse.record_pairs`,
:mod:`megadump_zarr.analyse.lanes`).
Arrays are never loaded whole: :mod:`megadump_zarr.analyse.metrics` reads them block by block.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
import contextlib
from typing import Any

import pandas as pd

from megadump_zarr.layout.statistics import DIGEST_COLUMN
from megadump_zarr.analyse.matching import (
    KEY_COLUMNS,
    PAIR_COLUMNS,
    RecordMatch,
    StepPairing,
    check_pair,
    execution_order,
    match_by_identity,
    name_filter,
    record_keys,
    scalar,
)
from megadump_zarr.analyse.metrics import DEFAULT_BLOCK_BYTES
from megadump_zarr.analyse.lanes import ArrayPair, compare_arrays, single_threaded_blas
from megadump_zarr.analyse.pairs import METRIC_COLUMNS, compare_pair, empty_row
from megadump_zarr.analyse.record_pairs import RecordPair, compare_record, compare_records
from megadump_zarr.analyse.reference import reference_pairs
from megadump_zarr.analyse.side import DumpSide, ReferenceSide, Side, open_dump_side, open_side
from megadump_zarr.analyse.summary import is_summary_pair, summary_row
from megadump_zarr.analyse.verdict import FAILING, PARTIAL, check_tolerance

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

RESULT_COLUMNS = KEY_COLUMNS + PAIR_COLUMNS + METRIC_COLUMNS + LINEAGE_COLUMNS
"""Columns of :func:`compare`'s DataFrame, in order."""

_INT_COLUMNS = (
    "rank",
    "window",
    "invocation",
    "step",
    "step_b",
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
    pair: Mapping[int, int] | Iterable[tuple[int, int]] | None = None,
    accept_partial: bool = False,
    **select: Any,
) -> pd.DataFrame:
    """Compare tensors of ``a`` (under test) with ``b`` (reference); one row per tensor pair.

    Accepted pairs:

    * two dumps (``Dump`` objects, or paths/URLs opened with ``open_dump``): records are matched by
      identity (:func:`~megadump_zarr.analyse.matching.match_by_identity`): rank, step, kernel, direction,
      the invocation's order within its step, then stage, task, io, index and name; never by the position
      of a window. A record on one side only gives a ``"missing"`` row; a step present on one side only
      gives ``"missing"`` rows whose note names it (``result.attrs["pairing"]`` lists the steps paired and
      those on one side only). ``pair={1: 0}`` compares A's step 1 with B's step 0 explicitly. ``select`` filters
      ``records()`` with the record filters of ``Dump.tensor`` and the CLI
      (:func:`megadump_zarr.read.select.filter_mask`: ``owner=1``, ``core="MIX5"``, ``task="task_000003"``,
      ...) or by any other column (equality; a list/tuple/set value means "any of"). Each record pair is one
      picklable unit (:func:`megadump_zarr.analyse.record_pairs.compare_record`) run through
      :func:`megadump_zarr.analyse.parallel.map_ordered`: on a ``distributed`` cluster when a client
      is active, else in local threads.
    * a dump and a reference: a mapping name → tensor/array (e.g. a ``state_dict``, tensors of an eager run) or
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
          statistics only        digests equal: pass; digests differ: fail (integer, bool; floats holding
                                 NaN/Inf), or for finite floats differs_within_stats when every statistic
                                 is within tolerance (exit 1 unless --accept-within-stats), else fail;
                                 msprobe md5 on both sides: equal pass, differing fail; no digest on a
                                 side (msprobe without md5): judged by the statistics alone
          truncated record       compared on the elements both sides stored (max_bytes_per_tensor):
                                 pass_partial (note: compared N of M rows; exit 1 unless
                                 --accept-partial), or fail
        default tolerances (two float dtypes: the looser one's; --rtol/--atol replace them):
          dtype            rtol      atol
          float64          1e-07     1e-07
          float32          1.3e-06   1e-05
          float16          0.001     0.001
          bfloat16         0.016     0.016
          float8_e4m3fn    0.125     0.125
          float8_e5m2      0.25      0.25

    ``verdict`` is one of ``pass``, ``pass_partial``, ``fail``, ``differs_within_stats``, ``shape_mismatch``, ``dtype_mismatch``, ``missing_data``,
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
        names: Only these tensor names (default: all records, or every name of the reference); for the
            records of two dumps a name may be a shell-style pattern, as ``--name``.
        progress: Show a rich progress bar (True), or a callable run after each compared pair.
        fail_fast: Dumps: compare one record at a time in execution order and stop after the first
            that does not pass (``missing`` included); the rest are left out of the result.
        bitwise: Two dumps only: a determinism check, any differing bit fails (no tolerance; see
            :mod:`megadump_zarr.analyse.bitwise`): the stored bytes where both sides hold a payload, else
            the record digests; a pair that cannot be proven equal (no payload, no digest) is an
            ``error`` row. :func:`~megadump_zarr.analyse.bitwise.bitwise_map` names the tasks and cores
            whose records differ at which steps.
        pair: Two dumps: ``{step of A: step of B}`` to compare different steps (default: each step with
            the same step of B; a step on one side only is ``missing``).
        accept_partial: A pair compared on the stored part of a truncated record only
            (``max_bytes_per_tensor``) is ``pass_partial`` (its note says how much was compared; not a
            pass); True makes it ``pass``, its note still saying how much was compared.
        **select: Record selection, e.g. ``rank=0, invocation=2, stage="expert_up", io="output"``
            (None values are ignored).

    Returns:
        A DataFrame with columns :data:`RESULT_COLUMNS`.

    Raises:
        ValueError: ``rtol`` or ``atol`` is NaN, infinite or negative (the message names it and the value),
            or given with ``bitwise``; an unknown selection key (the message lists the filters and columns).
        TypeError: ``bitwise`` with something else than two dumps; a dump as the reference of something
            else than a dump; a selection without a dump.
    """
    rtol, atol = check_tolerance("rtol", rtol), check_tolerance("atol", atol)
    side_a, side_b = open_side(a), open_side(b)  # each side opened once; later steps ask the side
    name_list = name_filter(names)
    select = {k: v for k, v in select.items() if v is not None}
    tol = dict(rtol=rtol, atol=atol)
    steps = check_pair(pair)
    if steps and (side_a.kind != "dump" or side_b.kind != "dump"):
        raise TypeError(f"pair= pairs the steps of two dumps, not of {side_a.type_name} and {side_b.type_name}")
    if bitwise:
        return _compare_bitwise(side_a, side_b, name_list, select, progress, tol, fail_fast, steps)
    if side_a.kind == "dump" and side_b.kind == "dump":
        return _accepted(
            _compare_dumps(side_a, side_b, name_list, select, progress, tol, fail_fast, steps), accept_partial
        )
    if side_a.kind == "dump":
        if side_b.kind != "reference":
            raise TypeError(
                f"a dump can be compared with a dump, a mapping or an xarray.Dataset, not {side_b.type_name}"
            )
        return _compare_dump_reference(side_a, side_b, name_list, select, progress, tol)
    if side_b.kind == "dump":
        raise TypeError("pass the dump under test first and the reference second: compare(dump, reference)")
    if select:
        raise TypeError(f"selection {sorted(select)} only applies to dumps")
    if side_a.kind == "reference" and side_b.kind == "reference":
        return _compare_collections(side_a, side_b, name_list, progress, tol)
    label = name_list[0] if name_list and len(name_list) == 1 else None
    return _frame([compare_pair({**dict.fromkeys(KEY_COLUMNS), "name": label}, side_a.value, side_b.value, **tol)])


def _advancer(progress: bool | Callable[[], None], total: int, description: str) -> Any:
    if callable(progress):
        return contextlib.nullcontext(progress)
    return _progress(bool(progress), total, description)


def _run_units(units: list[RecordPair], advance: Callable[[], None]) -> list[dict[str, Any]]:
    """Rows of the record units: on the active ``distributed`` cluster, one task per record
    (:func:`~megadump_zarr.analyse.parallel.map_ordered`), else here with every block of every record in
    one queue for this process's threads (:func:`~megadump_zarr.analyse.record_pairs.compare_records`)."""
    from megadump_zarr._parallel import active_client, map_ordered

    if active_client() is None or len(units) <= 1:
        return compare_records(units, advance)
    return map_ordered(compare_record, units, progress=lambda done, total: advance())


def _accepted(result: pd.DataFrame, accept_partial: bool) -> pd.DataFrame:
    """``accept_partial``: ``pass_partial`` rows become ``pass`` (their note keeps how much was compared)."""
    if accept_partial and len(result):
        partial = result["verdict"] == PARTIAL
        if partial.any():
            result.loc[partial, "note"] = [f"partial comparison accepted; {n}" for n in result.loc[partial, "note"]]
            result.loc[partial, "verdict"] = "pass"
    return result


def _noted(rows: list[dict[str, Any]], matches: list[RecordMatch]) -> list[dict[str, Any]]:
    """Each row with its match's pairing notes appended (rows come in match order, maybe fewer)."""
    for row, match in zip(rows, matches):
        if match.notes:
            row["note"] = "; ".join([n for n in (row.get("note") or "",) if n] + list(match.notes))
    return rows


def _with_pairing(frame: pd.DataFrame, pairing: StepPairing) -> pd.DataFrame:
    frame.attrs["pairing"] = pairing.to_dict()
    line = pairing.line()
    if line:
        frame.attrs["pairing"]["line"] = line
    return frame


def _match_keys(match: RecordMatch, lineage: dict[str, Any]) -> dict[str, Any]:
    """The key columns of a match's row: its present record's and its lineage, plus B's step and path."""
    keys = {**record_keys(match.present), **lineage}
    row_b = match.row_b
    keys["step_b"] = None if row_b is None else scalar(row_b.get("step"))
    keys["path_b"] = match.path_b
    return keys


def _compare_dumps(
    a: DumpSide,
    b: DumpSide,
    names: list[str] | None,
    select: dict[str, Any],
    progress: bool | Callable[[], None],
    tol: dict[str, Any],
    fail_fast: bool = False,
    steps: dict[int, int] | None = None,
) -> pd.DataFrame:
    """Two dumps, one way: match the records by identity (step, kernel, direction, order in the step, path
    in the invocation), make each match a row or a record pair, compare the pairs (metrics and verdict),
    in execution order."""
    matches, pairing = match_by_identity(a.records(select, names), b.records(select, names), steps)
    slots = [_record_slot(a, b, match, tol) for match in matches]
    with _advancer(progress, len(slots), "comparing records") as advance, single_threaded_blas():
        rows = _stopping_rows(slots, advance) if fail_fast else _all_rows(slots, advance)
    return _with_pairing(_frame(_noted(rows, matches)), pairing)


def _record_slot(a: DumpSide, b: DumpSide, match: RecordMatch, tol: dict[str, Any]) -> dict[str, Any] | RecordPair:
    """A matched record's result row when it needs no element-wise comparison (one side only, statistics
    only), else its :class:`~megadump_zarr.analyse.record_pairs.RecordPair`."""
    present = match.present
    keys = _match_keys(match, (a if match.row_a is not None else b).lineage(match.path))
    if match.only is not None:
        extra = {}
        if scalar(present.get("shape")) is not None:
            extra[f"shape_{match.only}"] = tuple(int(s) for s in present["shape"])
        if "dtype" in present:
            extra[f"dtype_{match.only}"] = scalar(present["dtype"])
        return empty_row(keys, "missing", f"only in dump {match.only}", **extra)
    row_a, row_b = match.row_a, match.row_b
    if is_summary_pair(row_a, row_b) and any(scalar(r.get("stats_scope")) == "prefix" for r in (row_a, row_b)):
        return empty_row(
            keys,
            "error",
            "one side stored statistics only, the other a truncated payload whose statistics cover its stored "
            "prefix only (max_bytes_per_tensor): nothing both sides know can be compared",
        )
    if is_summary_pair(row_a, row_b):  # a side stored statistics only: compare what both know
        row_a, row_b = _with_payload_digests(a, b, row_a, row_b)
        return summary_row(keys, row_a, row_b, tol["rtol"], tol["atol"])
    truncated = any(bool(scalar(r.get("truncated"))) for r in (row_a, row_b))
    return RecordPair(
        a.unit_source(),
        b.unit_source(),
        match.path,
        keys,
        tol["rtol"],
        tol["atol"],
        truncated,
        DEFAULT_BLOCK_BYTES,
        path_b=match.path_b,
    )


def _stopping_rows(slots: list[dict[str, Any] | RecordPair], advance: Callable[[], None]) -> list[dict[str, Any]]:
    """``fail_fast``: one record at a time, up to the first that does not pass."""
    rows: list[dict[str, Any]] = []
    for slot in slots:
        row = compare_record(slot) if isinstance(slot, RecordPair) else slot
        rows.append(row)
        advance()
        if row["verdict"] in _STOPPING:
            break
    return rows


def _all_rows(slots: list[dict[str, Any] | RecordPair], advance: Callable[[], None]) -> list[dict[str, Any]]:
    """Every slot's row, the record pairs compared together (:func:`_run_units`)."""
    done = iter(_run_units([s for s in slots if isinstance(s, RecordPair)], advance))
    rows: list[dict[str, Any]] = []
    for slot in slots:
        if isinstance(slot, RecordPair):
            rows.append(next(done))
        else:
            rows.append(slot)
            advance()
    return rows


def _compare_bitwise(
    a: Side,
    b: Side,
    names: list[str] | None,
    select: dict[str, Any],
    progress: bool | Callable[[], None],
    tol: dict[str, Any],
    fail_fast: bool,
    steps: dict[int, int] | None = None,
) -> pd.DataFrame:
    """``compare(a, b, bitwise=True)``: every record pair of two dumps by its bits, in execution order."""
    from megadump_zarr.analyse.bitwise import bitwise_row

    if a.kind != "dump" or b.kind != "dump":
        raise TypeError(f"bitwise=True compares two dumps, not {a.type_name} and {b.type_name}")
    given = [name for name, value in tol.items() if value is not None]
    if given:
        raise ValueError(f"bitwise=True compares bits, {' and '.join(given)} do not apply; leave them out")
    matches, pairing = match_by_identity(a.records(select, names), b.records(select, names), steps)
    rows: list[dict[str, Any]] = []
    with _advancer(progress, len(matches), "comparing bits") as advance:
        for match in matches:
            present = match.present
            keys = _match_keys(match, (a if match.row_a is not None else b).lineage(match.path, present))
            if match.only is not None:
                dtype = {f"dtype_{match.only}": scalar(present.get("dtype"))}
                row = empty_row(keys, "missing", f"only in dump {match.only}", **dtype)
            else:
                row = bitwise_row(keys, a.value, b.value, match.row_a, match.row_b)
            rows.append(row)
            advance()
            if fail_fast and row["verdict"] in _STOPPING:
                break
    return _with_pairing(_frame(_noted(rows, matches)), pairing)


def _with_payload_digests(
    a: DumpSide, b: DumpSide, ra_row: dict[str, Any], rb_row: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A mixed pair (one side statistics only, with its device digest; the other a payload without one):
    the payload side's digest computed on the host, so equal bits are proven and differing bits are never
    a pass. A payload that cannot be read keeps no digest (its damage is ``verify``'s to name)."""
    if (scalar(ra_row.get(DIGEST_COLUMN)) is None) == (scalar(rb_row.get(DIGEST_COLUMN)) is None):
        return ra_row, rb_row  # both known (compared as they are) or neither (statistics only)
    rows = []
    for side, row in ((a, ra_row), (b, rb_row)):
        try:
            digest = side.payload_digest(row)
        except Exception:  # noqa: BLE001 - unreadable payload: compared by statistics as before
            digest = None
        rows.append(row if digest is None else {**row, DIGEST_COLUMN: digest})
    return rows[0], rows[1]


def _compare_dump_reference(
    dump: DumpSide,
    reference: ReferenceSide,
    names: list[str] | None,
    select: dict[str, Any],
    progress: bool | Callable[[], None],
    tol: dict[str, Any],
) -> pd.DataFrame:
    """A dump and named tensors (:func:`megadump_zarr.analyse.reference.reference_pairs`), in the dump's order,
    every block of every name in the lanes of :func:`~megadump_zarr.analyse.lanes.compare_arrays`."""
    slots = reference_pairs(dump, reference, names, select, tol)
    with _advancer(progress, len(slots), "comparing tensors") as advance:
        rows = compare_arrays(slots, advance)
    return _frame(rows)


def _compare_collections(
    a: ReferenceSide,
    b: ReferenceSide,
    names: list[str] | None,
    progress: bool | Callable[[], None],
    tol: dict[str, Any],
) -> pd.DataFrame:
    """Two collections of named tensors, name by name (A's names first, then B's others), every block of
    every name in the lanes of :func:`~megadump_zarr.analyse.lanes.compare_arrays`."""
    if names is None:
        names_a, names_b = a.names(), b.names()
        names = names_a + [n for n in names_b if n not in set(names_a)]
    slots: list[dict[str, Any] | ArrayPair] = []
    for name in names:
        keys = {**dict.fromkeys(KEY_COLUMNS), "name": name}
        xa, xb = a.get(name), b.get(name)
        if xa is None or xb is None:
            where = "in neither" if xa is None and xb is None else f"only in {'a' if xb is None else 'b'}"
            slots.append(empty_row(keys, "missing", where))
        else:
            slots.append(ArrayPair(keys, xa, xb, tol["rtol"], tol["atol"]))
    with _advancer(progress, len(slots), "comparing tensors") as advance:
        rows = compare_arrays(slots, advance)
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
    side = open_dump_side(dump, "first_nonfinite's dump")
    records = side.records({k: v for k, v in select.items() if v is not None})
    if records.empty:
        return None
    nan = pd.to_numeric(records["nan_count"], errors="coerce")
    inf = pd.to_numeric(records["inf_count"], errors="coerce")
    if nan.isna().all() and inf.isna().all():
        raise ValueError("the selected records have no NaN/Inf statistics (dump written with stats=False?)")
    hits = records[(nan.fillna(0) > 0) | (inf.fillna(0) > 0)]
    return None if hits.empty else hits.iloc[0]
