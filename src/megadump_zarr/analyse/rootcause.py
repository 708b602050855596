"""Where a divergence is born: :func:`root_cause` of a :func:`~megadump_zarr.analyse.compare` result.

:func:`~megadump_zarr.analyse.compare.first_divergence` gives the first failing record in execution
order, which is often a symptom: a wrong routing table fails as an input of the first expert task, a
wrong workspace fails at the end of the kernel before the stage output that broke it. :func:`root_cause`
gives the first failing record whose own inputs all pass:

* an **output** of an L1 task (``io == "output"``) is born in its task when every input record of the
  same task (same rank, window, invocation, stage, task id and worker) passes;
* an **output** of an L0 kernel (captured after the kernel ran) is born in the stage that wrote its
  captured value, the last stage among its ports that writes it, when every input of that stage passes.
  The stage's inputs are the records whose ports read in that stage; the value it read is the one
  captured only when no later stage overwrote it (the ports, in graph order, tell). When an input's read
  value was overwritten later (a reused workspace) the record is *undetermined*: it is chosen like a
  root cause (its other inputs pass) and its ``root_reason`` says which input L0 could not see;
* an **input** (an L1 task input, an L0 input captured before the kernel ran: a weight, an external
  input) is born where it is when no earlier failing output carries the same tensor name (on the same
  rank): nothing inside the compared records produced it wrong. So when an input is the first record to
  fail, it is the root cause.

Records are tried in execution order (L0 outputs of one invocation in the order of the stages that
wrote them). The row returned is the result's own row plus ``root_reason`` (one sentence) and
``root_stage``: the stage the value comes from (an L1 record's stage; for an L0 output, which has no
stage of its own, the stage that wrote its captured value; None for an L0 input).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from megadump_zarr.analyse.matching import scalar
from megadump_zarr.analyse.verdict import FAILING

__all__ = ["root_cause", "stage_order"]


def _value(row: pd.Series, key: str) -> Any:
    return scalar(row.get(key)) if key in row.index else None


def _is_input(row: pd.Series) -> bool:
    phase = _value(row, "capture_phase")
    if phase is not None:
        return phase == "before"
    io = _value(row, "io")
    if io is not None:
        return io == "input"
    role = _value(row, "role")
    return role == "external_input"


def _ports(row: pd.Series) -> list[tuple[str, str]]:
    ports = _value(row, "ports")
    if ports is None:
        return []
    return [(str(s), str(io)) for s, io in ports]


def stage_order(rows: pd.DataFrame) -> list[str]:
    """The stages of one L0 invocation in graph order, merged from its records' port lists.

    Every record's ports are listed in graph order; the order of two stages is taken from any list that
    holds both (a topological merge, ties broken by first appearance).

    Args:
        rows: Result rows of one invocation (with a ``ports`` column).
    """
    first_seen: dict[str, int] = {}
    after: dict[str, set[str]] = {}
    for _, row in rows.iterrows():
        previous = None
        for stage, _io in _ports(row):
            first_seen.setdefault(stage, len(first_seen))
            after.setdefault(stage, set())
            if previous is not None and previous != stage:
                after[previous].add(stage)
            previous = stage
    indegree = {s: 0 for s in first_seen}
    for s, nexts in after.items():
        for n in nexts:
            indegree[n] += 1
    ready = sorted((s for s, d in indegree.items() if d == 0), key=first_seen.get)
    order: list[str] = []
    while ready:
        s = ready.pop(0)
        order.append(s)
        for n in sorted(after.get(s, ()), key=first_seen.get):
            indegree[n] -= 1
            if indegree[n] == 0:
                ready.append(n)
                ready.sort(key=first_seen.get)
    if len(order) < len(first_seen):  # inconsistent lists: first appearance
        return sorted(first_seen, key=first_seen.get)
    return order


def _task_key(row: pd.Series) -> tuple[Any, ...]:
    return tuple(_value(row, k) for k in ("rank", "window", "invocation", "stage", "task_id", "worker"))


def _l1_verdict(row: pd.Series, task_inputs: dict[tuple[Any, ...], list[pd.Series]]) -> tuple[str, str]:
    """``("root" | "not", reason)`` of a failing L1 output."""
    inputs = task_inputs.get(_task_key(row), [])
    where = f"task {_value(row, 'task_id')} of stage {_value(row, 'stage')}"
    if not inputs:
        return "root", f"no input of {where} was compared; its output is the first to fail"
    bad = [str(_value(r, "name")) for r in inputs if r["verdict"] != "pass"]
    if bad:
        return "not", f"inputs of {where} fail: {', '.join(bad)}"
    return (
        "root",
        f"every input of {where} passes ({', '.join(str(_value(r, 'name')) for r in inputs)}): "
        "the divergence is born in this task",
    )


def _l0_verdict(row: pd.Series, frame: pd.DataFrame, order: list[str]) -> tuple[str, str, int]:
    """``(verdict, reason, stage position)`` of a failing L0 output, from its ports (see the module docstring)."""
    ports = _ports(row)
    writers = [i for i, (_, io) in enumerate(ports) if io == "output"]
    if not writers:
        return "root", "no stage of its kernel writes it", len(order)
    stage = ports[writers[-1]][0]
    position = order.index(stage) if stage in order else len(order)
    inputs = []
    for _, other in frame.iterrows():
        if other.name == row.name:
            continue
        other_ports = _ports(other)
        reads = [i for i, p in enumerate(other_ports) if p == (stage, "input")]
        if reads:
            inputs.append((other, other_ports, reads[0]))
    bad, unseen = [], []
    for other, other_ports, read_at in inputs:
        writes = [i for i, (_, io) in enumerate(other_ports) if io == "output"]
        before = [i for i in writes if i < read_at]
        if _is_input(other):  # captured before the kernel ran: the value a stage read only if nothing wrote it first
            seen = not before
        else:  # captured after: the value read only if its last write came before the read
            seen = bool(before) and before[-1] == writes[-1]
        name = str(_value(other, "name"))
        if not seen:
            unseen.append(name)
        elif other["verdict"] != "pass":
            bad.append(name)
    if bad:
        return "not", f"inputs of stage {stage} fail: {', '.join(bad)}", position
    if unseen:
        return (
            "undetermined",
            f"the other inputs of stage {stage} pass, but the value it read of "
            f"{', '.join(unseen)} was overwritten later in the kernel, so L0 cannot tell "
            "(an L1 dump of that stage can)",
            position,
        )
    names = ", ".join(str(_value(o, "name")) for o, _, _ in inputs) or "none"
    return "root", f"every input of stage {stage} passes ({names}): the divergence is born in stage {stage}", position


def root_cause(result: pd.DataFrame) -> pd.Series | None:
    """The record where the divergence is born: the first failing record whose own inputs pass.

    See the module docstring for the rules. ``first_divergence`` keeps its meaning (the first failing
    record in execution order); the two agree when the first failure is itself born where it is.

    Args:
        result: A :func:`~megadump_zarr.analyse.compare` result (the index is the execution order).

    Returns:
        That record's row (a Series with ``stage``, ``task_id``, ``owner_id``, ``core_type``,
        ``core_id``, ``io``, ``name``, ``path``, ...) plus ``root_reason`` and ``root_stage``; None when
        nothing fails.
    """
    if result is None or len(result) == 0:
        return None
    ordered = result.sort_index(kind="stable")
    failing = ordered[ordered["verdict"].isin(FAILING)]
    if failing.empty:
        return None
    frames: dict[tuple[Any, ...], pd.DataFrame] = {}

    def group(row: pd.Series) -> pd.DataFrame:
        key = tuple(_value(row, k) for k in ("rank", "window", "invocation"))
        if key not in frames:
            mask = pd.Series(True, index=ordered.index)
            for column, value in zip(("rank", "window", "invocation"), key):
                if column in ordered.columns:
                    mask &= ordered[column].isna() if value is None else (ordered[column] == value).fillna(False)
            frames[key] = ordered[mask.astype(bool)]
        return frames[key]

    task_inputs: dict[tuple[Any, ...], list[pd.Series]] = {}
    if (failing["level"] == "L1").any() if "level" in failing.columns else failing["task_id"].notna().any():
        for _, r in ordered[ordered["task_id"].notna()].iterrows():
            if _is_input(r):
                task_inputs.setdefault(_task_key(r), []).append(r)
    first_output: dict[tuple[Any, ...], int] = {}
    for position, (_, r) in enumerate(failing.iterrows()):
        if not _is_input(r):
            first_output.setdefault(tuple(_value(r, k) for k in ("rank", "window", "invocation")), position)
    failing_outputs_seen: set[tuple[Any, str]] = set()
    candidates: list[tuple[tuple[int, int], pd.Series, str, str]] = []
    orders: dict[tuple[Any, ...], list[str]] = {}
    for position, (_, row) in enumerate(failing.iterrows()):
        name = str(_value(row, "name"))
        rank = _value(row, "rank")
        if _is_input(row):
            if (rank, name) in failing_outputs_seen:
                kind, reason = "not", f"an earlier output named {name} already fails"
            else:
                kind, reason = "root", (f"{name} is an input and nothing compared before it that produces {name} fails")
            candidates.append(((position, 0), row, kind, reason))
        elif _value(row, "level") == "L1" or _value(row, "task_id") is not None:
            kind, reason = _l1_verdict(row, task_inputs)
            candidates.append(((position, 0), row, kind, reason))
        else:
            frame = group(row)
            key = tuple(_value(row, k) for k in ("rank", "window", "invocation"))
            if key not in orders:
                orders[key] = stage_order(frame)
            kind, reason, stage_position = _l0_verdict(row, frame, orders[key])
            # L0 outputs of one invocation in the order of the stages that wrote them
            candidates.append(((first_output[key], stage_position), row, kind, reason))
        if not _is_input(row):
            failing_outputs_seen.add((rank, name))
    candidates.sort(key=lambda c: c[0])
    for _, row, kind, reason in candidates:
        if kind in ("root", "undetermined"):
            return _with_reason(row, reason)
    first = failing.iloc[0]
    return _with_reason(first, "every failing record has a failing input; the first failure is shown")


def _born_in(row: pd.Series) -> str | None:
    """The stage a record's value comes from: an L1 record's own stage; for an L0 output (no stage of its
    own) the last stage among its ports that writes it; None for an L0 input."""
    stage = _value(row, "stage")
    if stage is not None:
        return str(stage)
    if _is_input(row):
        return None
    writers = [s for s, io in _ports(row) if io == "output"]
    return writers[-1] if writers else None


def _with_reason(row: pd.Series, reason: str) -> pd.Series:
    out = row.copy()
    out["root_reason"] = reason
    out["root_stage"] = _born_in(row)
    return out
