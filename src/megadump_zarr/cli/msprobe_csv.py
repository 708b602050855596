"""``megadump compare --format msprobe-csv [-o OUT.csv]`` (alias ``--csv-msprobe OUT.csv``): a compare result in
msprobe's compare CSV columns.

msprobe (PyPI ``mindstudio-probe``) ``compare`` writes ``compare_result_*.csv`` with the columns of its
``CompareConst.COMPARE_RESULT_HEADER`` (tensor mode): ``NPU Name`` ... ``Err_message``. This writes the same
columns, in the same order, for A as "NPU" (under test) and B as "Bench" (reference), so what reads
msprobe's CSV (``pd.read_csv`` and the column names) reads this one, followed by our own columns:
``megadump verdict``, ``megadump note``, ``megadump worst index``/``worst a``/``worst b`` (the worst
element) and ``megadump root cause`` (``True`` on the record :func:`~megadump_zarr.analyse.root_cause`
names). Conventions kept from msprobe: dtypes as ``torch.float32``, shapes as ``[2, 3]``, ``N/A`` for a
value that was not computed (a statistics-only pair, msprobe's statistics task, has no cosine, EucDist,
MaxAbsErr, ... : they are ``N/A``, its statistics are in the max/min/mean/l2norm columns; pandas reads
``N/A`` as NaN).
``Result`` is our verdict in msprobe's words (``pass``, else ``error``); ``Err_message`` is our note.
msprobe's ``Requires_grad`` columns are ``N/A`` (records do not carry it).
"""

from __future__ import annotations

import csv
import math
import os
import re
from typing import Any, TextIO

import pandas as pd

__all__ = ["MEGADUMP_COLUMNS", "MSPROBE_COLUMNS", "msprobe_frame", "neutral_cell", "write_msprobe_csv"]

MSPROBE_COLUMNS = (
    "NPU Name",
    "Bench Name",
    "NPU Dtype",
    "Bench Dtype",
    "NPU Tensor Shape",
    "Bench Tensor Shape",
    "NPU Requires_grad",
    "Bench Requires_grad",
    "Cosine",
    "EucDist",
    "MaxAbsErr",
    "MaxRelativeErr",
    "One Thousandth Err Ratio",
    "Five Thousandths Err Ratio",
    "NPU max",
    "NPU min",
    "NPU mean",
    "NPU l2norm",
    "Bench max",
    "Bench min",
    "Bench mean",
    "Bench l2norm",
    "Requires_grad Consistent",
    "Result",
    "Err_message",
)
"""msprobe 26.2's tensor-mode compare header (``CompareConst.COMPARE_RESULT_HEADER``), in its order."""
MEGADUMP_COLUMNS = (
    "megadump verdict",
    "megadump note",
    "megadump worst index",
    "megadump worst a",
    "megadump worst b",
    "megadump root cause",
)
_METRICS = {
    "Cosine": "cosine",
    "EucDist": "euc_dist",
    "MaxAbsErr": "max_abs",
    "MaxRelativeErr": "max_rel_eps",
    "One Thousandth Err Ratio": "one_thousandth_ratio",
    "Five Thousandths Err Ratio": "five_thousandths_ratio",
}
_STATS = (("max", "max"), ("min", "min"), ("mean", "mean"), ("l2norm", "l2norm"))
N_A = "N/A"


def _known(value: Any) -> bool:
    if value is None:
        return False
    try:
        return not (isinstance(value, float) and math.isnan(value)) and value is not pd.NA
    except TypeError:
        return True


def _number(value: Any) -> Any:
    return float(value) if _known(value) else N_A


def _dtype(value: Any) -> str:
    return f"torch.{value}" if _known(value) and str(value) not in ("", "None") else N_A


def _shape(value: Any) -> str:
    return str([int(d) for d in value]) if _known(value) and not isinstance(value, str) else N_A


def _stats(records: pd.DataFrame) -> dict[str, dict[str, Any]]:
    return {
        str(r["path"]): {**{k: r.get(k) for k, _ in _STATS}, "payload": r.get("payload")} for _, r in records.iterrows()
    }


def _has_payload(stats: dict[str, Any]) -> bool:
    value = stats.get("payload")
    return bool(value) if _known(value) else bool(stats)


def _worst_index(value: Any) -> str:
    if isinstance(value, list | tuple):
        return str([int(i) for i in value])
    return str(int(value)) if _known(value) else N_A


def msprobe_frame(
    result: pd.DataFrame, records_a: pd.DataFrame, records_b: pd.DataFrame, root_path: str | None
) -> pd.DataFrame:
    """The compare result as msprobe's compare columns plus ours, one row per compared record.

    Args:
        result: A :func:`~megadump_zarr.analyse.compare` result.
        records_a: The compared records of A (``records()`` rows: their statistics fill the ``NPU`` columns).
        records_b: Those of B (the ``Bench`` columns).
        root_path: The path of the root-cause record (None: nothing fails).
    """
    stats_a, stats_b = _stats(records_a), _stats(records_b)
    rows = []
    for _, r in result.iterrows():
        path = str(r["path"])
        path_b = str(r["path_b"]) if _known(r.get("path_b")) else path  # B's record of the pair (paired by step)
        a, b = stats_a.get(path, {}), stats_b.get(path_b, {})
        present_a, present_b = (
            _known(r.get("dtype_a")) and path in stats_a,
            _known(r.get("dtype_b")) and path_b in stats_b,
        )
        row: dict[str, Any] = {
            "NPU Name": r["name"] if present_a else N_A,
            "Bench Name": r["name"] if present_b else N_A,
            "NPU Dtype": _dtype(r.get("dtype_a")),
            "Bench Dtype": _dtype(r.get("dtype_b")),
            "NPU Tensor Shape": _shape(r.get("shape_a")),
            "Bench Tensor Shape": _shape(r.get("shape_b")),
            "NPU Requires_grad": N_A,
            "Bench Requires_grad": N_A,
        }
        # a statistics-only pair has no element-wise metric (its max_abs is the statistics' difference)
        tensors = _has_payload(a) and _has_payload(b)
        row.update({column: _number(r.get(ours)) if tensors else N_A for column, ours in _METRICS.items()})
        row.update({f"NPU {k}": _number(a.get(k)) for k, _ in _STATS})
        row.update({f"Bench {k}": _number(b.get(k)) for k, _ in _STATS})
        row.update(
            {
                "Requires_grad Consistent": N_A,
                "Result": "pass" if r["verdict"] == "pass" else "error",
                "Err_message": str(r.get("note") or ""),
                "megadump verdict": r["verdict"],
                "megadump note": str(r.get("note") or ""),
                "megadump worst index": _worst_index(r.get("worst_index")),
                "megadump worst a": _number(r.get("worst_a")),
                "megadump worst b": _number(r.get("worst_b")),
                "megadump root cause": root_path is not None and path == root_path,
            }
        )
        rows.append(row)
    return pd.DataFrame(rows, columns=[*MSPROBE_COLUMNS, *MEGADUMP_COLUMNS])


_FORMULA = re.compile(r"^[\t\r＋－＝％＠+\-=%@]")
"""A cell a spreadsheet would run as a formula: msprobe's ``CSV_BLACK_LIST`` first characters (``+ - = % @``
and their full-width forms) plus tab and CR (OWASP's list)."""
_FORMULA_AFTER_SEMICOLON = re.compile(r";(?=[＋－＝％＠+\-=%@])")
"""msprobe's second pattern: a formula character right after ``;`` (a cell split at ``;`` by a locale)."""


def neutral_cell(value: Any) -> Any:
    """A CSV cell no spreadsheet runs as a formula: a text cell starting like one gets a leading ``'``
    (and one after each ``;`` that precedes a formula character). Numbers, and text that is a number
    (``-1.5``, ``+2``, ``-inf``), stay as they are.

    msprobe's own writer (``msprobe.core.common.file_utils.write_csv(malicious_check=True)``) uses the same
    patterns to refuse such a value; a compare result is still worth reading, so it is neutralised instead.

    Args:
        value: A cell of :func:`msprobe_frame`.
    """
    if not isinstance(value, str):
        return value
    try:
        float(value)
    except ValueError:
        pass
    else:
        return value
    if _FORMULA.match(value):
        value = "'" + value
    return _FORMULA_AFTER_SEMICOLON.sub(";'", value)


def _safe_frame(frame: pd.DataFrame, terminal: bool) -> pd.DataFrame:
    """Every text cell neutralised (:func:`neutral_cell`) and, for a terminal, its control characters escaped."""
    from megadump_zarr.cli.render import safe_text

    def cell(value: Any) -> Any:
        value = neutral_cell(value)
        return safe_text(value) if terminal and isinstance(value, str) else value

    out = frame.copy()
    for column in out.columns:
        if not pd.api.types.is_numeric_dtype(out[column]) and not pd.api.types.is_bool_dtype(out[column]):
            out[column] = out[column].map(cell)
    return out


def write_msprobe_csv(
    path: str | os.PathLike[str] | TextIO, frame: pd.DataFrame, *, flag: str = "--csv-msprobe"
) -> None:
    """Write ``frame`` (:func:`msprobe_frame`) as CSV (floats at full precision, ``N/A`` as msprobe writes it).

    Text cells that would start a spreadsheet formula are neutralised (:func:`neutral_cell`); written to a
    terminal, control characters of names (ESC, CR, bidi overrides) are shown escaped (``\\x1b``), as every
    table is. A file or a pipe gets the names exactly.

    Args:
        path: The CSV file to write (an existing file is refused, never overwritten), or an open text
            stream (``--format msprobe-csv`` without ``--output``: stdout).
        flag: The option that named the file, for the message.
    """
    if hasattr(path, "write"):
        isatty = getattr(path, "isatty", None)
        frame = _safe_frame(frame, terminal=bool(isatty and isatty()))
        frame.to_csv(path, index=False, quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
        return
    frame = _safe_frame(frame, terminal=False)
    try:
        with open(path, "x", newline="", encoding="utf-8") as handle:  # type: ignore[arg-type]
            frame.to_csv(handle, index=False, quoting=csv.QUOTE_MINIMAL)
    except FileExistsError:
        raise FileExistsError(f"{flag}: {os.fspath(path)} already exists (refusing to overwrite it)") from None
