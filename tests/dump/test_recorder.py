"""The flight recorder's config, ring bounds, triggers and failure handling (dump.recorder, dump.triggers)."""

from __future__ import annotations

import json
import logging
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
import torch

from megadump_zarr import TensorDumpConfig, open_dump, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.dump.recorder_config import RecorderConfig
from megadump_zarr.dump.triggers import StepRow, TriggerSet

STAGES = ["expert_up", "expert_down"]
DEMO = DemoConfig(tokens=16, d_model=8, n_experts=4, tile_rows=8, num_workers=4)


# ---------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"ring_steps": -1}, ValueError, "RecorderConfig.ring_steps must be >= 0, got -1"),
        ({"ring_bytes": 0}, ValueError, "RecorderConfig.ring_bytes must be >= 1, got 0"),
        ({"after_steps": 1.5}, TypeError, "RecorderConfig.after_steps must be an integer, got 1.5"),
        ({"cooldown_steps": True}, TypeError, "RecorderConfig.cooldown_steps must be an integer, got True"),
        ({"max_triggers": 0}, ValueError, "RecorderConfig.max_triggers must be >= 1, got 0"),
        ({"norm_k": -2.0}, ValueError, "RecorderConfig.norm_k must be a finite number > 0, got -2.0"),
        ({"norm_k": math.inf}, ValueError, "RecorderConfig.norm_k must be a finite number > 0, got inf"),
        ({"norm_floor": math.nan}, ValueError, "RecorderConfig.norm_floor must be a finite number >= 0, got nan"),
        ({"norm_history": 1}, ValueError, "RecorderConfig.norm_history must be >= 2, got 1"),
        ({"norm_min_history": 40}, ValueError, "RecorderConfig.norm_min_history must be <= norm_history (32), got 40"),
        ({"nonfinite": "yes"}, TypeError, "RecorderConfig.nonfinite must be a bool, got 'yes'"),
        ({"predicate": 3}, TypeError, "RecorderConfig.predicate must be callable or None, got 3"),
        (
            {"spill_dir": "s3://b/x"},
            ValueError,
            "RecorderConfig.spill_dir must be a local directory path, got 's3://b/x'",
        ),
        ({"replicas": ["w", ""]}, ValueError, "RecorderConfig.replicas must be non-empty name patterns, got ['w', '']"),
        ({"nonfinite": False, "norm_k": None}, ValueError, "RecorderConfig needs a trigger"),
    ],
)
def test_bad_recorder_fields_are_refused_by_name_and_value(fields, error, message):
    with pytest.raises(error) as raised:
        RecorderConfig(**fields)
    assert message in str(raised.value)


def test_the_recorder_requires_tensor_mode_and_a_recorder_config(tmp_path):
    with pytest.raises(ValueError, match="recorder .* requires mode='tensor', got mode='statistics'"):
        TensorDumpConfig(tmp_path, mode="statistics", recorder=RecorderConfig())
    with pytest.raises(TypeError, match="recorder must be a RecorderConfig or None, got dict"):
        TensorDumpConfig(tmp_path, recorder={"ring_steps": 2})
    assert RecorderConfig(replicas="w_*").replicas == ("w_*",)


# ---------------------------------------------------------------------------------------------- triggers
def _row(name, norm, nan=0, task=3):
    return StepRow(
        ("key", name), 0, "k", "forward", "s", task, 1, "AIV", 2, "output", 0, name, "float32", (4,), 4, nan, 0,
        0.0, 1.0, 0.5, norm,
    )  # fmt: skip


def _triggers(**fields):
    base = dict(nonfinite=True, norm_k=4.0, norm_history=8, norm_min_history=4, norm_floor=0.01, predicate=None)
    base.update(fields)
    return TriggerSet(**base)


def test_nonfinite_fires_when_a_record_turns_nonfinite_not_while_it_stays_so():
    triggers = _triggers(norm_k=None)
    fired = [triggers.evaluate(s, [_row("a", 1.0, nan=int(s in (2, 3, 6)))], armed=True) for s in range(8)]
    assert [s for s, f in enumerate(fired) if f is not None] == [2, 6]
    assert fired[2].kind == "nonfinite" and fired[2].value == 1.0 and fired[2].to_attrs()["core"] == "AIV2"


def test_norm_fires_outside_k_spreads_of_the_median_and_not_inside():
    triggers = _triggers()
    norms = [10.0, 10.0, 10.0, 10.0, 10.3, 10.0, 10.45, 10.0]  # the 1 % floor: spread 0.1, limit 0.4
    fired = [triggers.evaluate(s, [_row("a", n)], armed=True) for s, n in enumerate(norms)]
    assert [s for s, f in enumerate(fired) if f is not None] == [6]
    assert fired[6].kind == "norm" and fired[6].value == 10.45 and fired[6].threshold == pytest.approx(0.4)


def test_disarmed_steps_still_feed_the_baseline():
    triggers = _triggers()
    for step in range(4):
        assert triggers.evaluate(step, [_row("a", 10.0)], armed=False) is None
    assert triggers.evaluate(4, [_row("a", 20.0)], armed=True).kind == "norm"


def test_a_raising_predicate_is_reported_once_and_disabled(caplog):
    def predicate(row):
        raise KeyError("oops")

    triggers = _triggers(nonfinite=False, norm_k=None, predicate=predicate)
    with caplog.at_level(logging.WARNING, logger="megadump_zarr.recorder"):
        assert [triggers.evaluate(s, [_row("a", 1.0)], armed=True) for s in range(5)] == [None] * 5
    assert [r.getMessage() for r in caplog.records] == [
        "flight recorder: the predicate raised KeyError('oops') at step 0; it is disabled"
    ]


# ---------------------------------------------------------------------------------------------- dumper
def _run(root, steps=10, **recorder_fields):
    torch.set_num_threads(1)
    block = MoEBlock(DEMO)
    x0 = block.make_input()
    config = TensorDumpConfig(
        root, level="L1", kernel_names="moe_experts", stages=STAGES, recorder=RecorderConfig(**recorder_fields),
        durable=False,
    )  # fmt: skip
    with tensor_dump(config) as dumper:
        for step in range(steps):
            block(x0 * (1.0 + 0.01 * step))
            dumper.step()
    return dumper


def _steps(root):
    records = open_dump(root).records()
    return {int(w): sorted(set(records.loc[records["window"] == w, "step"])) for w in sorted(set(records["window"]))}


def _at_nine(row):
    return row["step"] == 9


def test_the_ring_keeps_at_most_ring_steps_and_ring_bytes(tmp_path):
    _run(tmp_path / "steps", ring_steps=3, nonfinite=False, norm_k=None, predicate=_at_nine)
    assert _steps(tmp_path / "steps") == {0: [6, 7, 8, 9]}
    records = open_dump(tmp_path / "steps").records()
    step_bytes = int(records.loc[records["step"] == 9, "stored_bytes"].sum())
    _run(tmp_path / "bytes", ring_steps=3, ring_bytes=step_bytes * 3 // 2, nonfinite=False, norm_k=None,
         predicate=_at_nine)  # fmt: skip
    assert _steps(tmp_path / "bytes") == {0: [8, 9]}


def test_nothing_is_written_until_a_trigger_fires(tmp_path):
    _run(tmp_path / "quiet", ring_steps=3)
    assert not list((tmp_path / "quiet").glob("rank_*/window_*"))
    assert not list((tmp_path / "quiet").glob(".plans*"))  # no L1 plan is saved for steps never exported


def test_spilled_steps_are_committed_with_the_same_bytes(tmp_path):
    _run(tmp_path / "memory", ring_steps=2, nonfinite=False, norm_k=None, predicate=_at_nine)
    scratch = tmp_path / "scratch"
    _run(tmp_path / "spilled", ring_steps=2, spill_dir=scratch, nonfinite=False, norm_k=None, predicate=_at_nine)
    a, b = open_dump(tmp_path / "memory"), open_dump(tmp_path / "spilled")
    ra, rb = a.records(), b.records()
    assert list(ra["path"]) == list(rb["path"]) and _steps(tmp_path / "spilled") == {0: [7, 8, 9]}
    for path in ra["path"]:
        np.testing.assert_array_equal(a.record_array(path).values, b.record_array(path).values)
    assert scratch.is_dir() and not any(scratch.iterdir())  # the scratch files are removed at exit


def test_a_store_that_fails_never_stops_the_steps_and_disarms_the_recorder(tmp_path, caplog):
    root = tmp_path / "root"
    root.mkdir()
    (root / "rank_0").write_text("a file where the rank's directory goes")
    with caplog.at_level(logging.ERROR, logger="megadump_zarr.recorder"):
        dumper = _run(root, steps=10, ring_steps=1, nonfinite=False, norm_k=None, max_triggers=None,
                      predicate=lambda row: True)  # fmt: skip
    assert dumper.step_num == 10  # every step ran
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3 and "its steps are dropped" in messages[0]
    assert "3 commits failed in a row" in messages[2] and "the recorder is disarmed" in messages[2]
    assert not dumper.is_capture_enabled()  # disarmed: the kernel runs without captures


def test_the_window_says_what_fired_with_replicas(tmp_path):
    _run(tmp_path, ring_steps=0, nonfinite=False, norm_k=None, predicate=_at_nine, replicas=["w_*"])
    attrs = json.loads((tmp_path / "rank_0" / "window_0000" / "zarr.json").read_text())["attributes"]
    assert attrs["recorderTrigger"]["kind"] == "predicate" and attrs["recorderTrigger"]["step"] == 9
    assert attrs["recorderSteps"] == [9] and attrs["recorderPart"] == "trigger"
    assert attrs["recorderReplicas"] == ["w_*"] and attrs["status"] == "complete"


def test_async_export_commits_the_same_windows_as_sync(tmp_path):
    fields = dict(ring_steps=2, after_steps=1, nonfinite=False, norm_k=None, predicate=_at_nine)
    torch.set_num_threads(1)
    for name, background in (("sync", False), ("async", True)):
        block = MoEBlock(DEMO)
        x0 = block.make_input()
        config = TensorDumpConfig(
            tmp_path / name, level="L1", kernel_names="moe_experts", stages=STAGES, durable=False,
            async_export=background, recorder=RecorderConfig(**fields),
        )  # fmt: skip
        with tensor_dump(config) as dumper:
            for step in range(12):
                block(x0 * (1.0 + 0.01 * step))
                dumper.step()
    assert _steps(tmp_path / "sync") == _steps(tmp_path / "async") == {0: [7, 8, 9], 1: [10]}
    a, b = open_dump(tmp_path / "sync").records(), open_dump(tmp_path / "async").records()
    assert list(a["path"]) == list(b["path"]) and list(a["l2norm"]) == list(b["l2norm"])


def test_triggers_that_raise_disarm_the_recorder_and_the_steps_go_on(tmp_path, caplog, monkeypatch):
    from megadump_zarr.dump import triggers

    def broken(*args, **kwargs):
        raise FloatingPointError("broken baseline")

    monkeypatch.setattr(triggers.TriggerSet, "evaluate", broken)
    with caplog.at_level(logging.ERROR, logger="megadump_zarr.recorder"):
        dumper = _run(tmp_path / "broken", steps=4, ring_steps=2)
    assert dumper.step_num == 4 and not dumper.is_capture_enabled()
    assert [r.getMessage() for r in caplog.records] == [
        "flight recorder: the triggers raised FloatingPointError('broken baseline') at step 0; the recorder is disarmed"
    ]


@settings(max_examples=60, deadline=None)
@given(
    norms=st.lists(st.lists(st.floats(0.5, 2.0, allow_nan=False), min_size=3, max_size=3), min_size=1, max_size=30),
    k=st.floats(0.5, 6.0),
)
def test_the_norm_baseline_matches_a_plain_median_and_mad_per_record(norms, k):
    """The vectorised ring (cursor wrap-around, several records per step) against ``statistics.median``
    over each record's own last N norms."""
    import statistics

    history, minimum, floor = 5, 3, 0.01
    triggers = _triggers(nonfinite=False, norm_k=k, norm_history=history, norm_min_history=minimum, norm_floor=floor)
    past = {name: [] for name in "abc"}
    for step, values in enumerate(norms):
        rows = [_row(name, value) for name, value in zip("abc", values)]
        fired = triggers.evaluate(step, rows, armed=True)
        expected = None
        for name, value in zip("abc", values):
            recent = past[name][-history:]
            if len(recent) >= minimum:
                median = statistics.median(recent)
                mad = statistics.median([abs(v - median) for v in recent])
                limit = k * max(1.4826 * mad, floor * abs(median))
                margin = abs(abs(value - median) - limit)
                assume(margin > 1e-9 * max(1.0, limit))  # a value on the boundary may go either way
                if expected is None and abs(value - median) > limit:
                    expected = (name, limit)
            past[name].append(value)
        if expected is None:
            assert fired is None
        else:
            assert fired is not None and fired.row.name == expected[0]
            assert fired.threshold == pytest.approx(expected[1], rel=1e-9)


def test_the_recorder_at_l0_keeps_tensors_and_fires_on_a_nan(tmp_path):
    torch.set_num_threads(1)
    block = MoEBlock(DEMO)
    x0 = block.make_input()
    recorder = RecorderConfig(ring_steps=2, norm_k=None, spill_dir=tmp_path / "scratch")
    config = TensorDumpConfig(tmp_path / "l0", level="L0", kernel_names="moe_experts", durable=False,
                              recorder=recorder)  # fmt: skip
    with tensor_dump(config) as dumper:
        for step in range(8):
            x = x0.clone()
            if step == 5:
                x[3, 1] = float("inf")
            block(x)
            dumper.step()
    dump = open_dump(tmp_path / "l0")
    attrs = json.loads((tmp_path / "l0" / "rank_0" / "window_0000" / "zarr.json").read_text())["attributes"]
    trigger = attrs["recorderTrigger"]
    assert (trigger["kind"], trigger["step"], trigger["record"], trigger["stage"], trigger["core"]) == (
        "nonfinite",
        5,
        "xs",
        None,
        None,
    )  # fmt: skip  (xs, the normalised tokens, is parameter 0: the first record holding the NaN the Inf made)
    records = dump.records()
    assert sorted(set(records["step"])) == [3, 4, 5]
    x_row = records[(records["name"] == "x") & (records["step"] == 5)].iloc[0]
    assert int(x_row["inf_count"]) == 1
    assert np.isinf(dump.record_array(x_row["path"]).values[3, 1])  # the tensor itself, read back from the spill
