"""Statistics-first modes end to end on the demo block: statistics, nonfinite, diff, on_budget."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from megadump_zarr import TensorDumpConfig, open_dump, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.diagnostics import active_session
from megadump_zarr.l1 import L1_DUMP_PAYLOAD_BASE, align_up
from megadump_zarr.layout.digest import digest_of_array

EXPERT_STAGES = ["expert_up", "expert_down", "unpermute", "combine"]


def digest_reference(values: np.ndarray, dtype: str) -> int:
    return digest_of_array(np.ascontiguousarray(values), dtype)


def run(out: Path, mode: str = "tensor", *, poison=None, steps: int = 2, level: str = "L1", config=None, **fields):
    block = MoEBlock(config or DemoConfig())
    if poison is not None:
        poison(block)
    selection = dict(stages=EXPERT_STAGES) if level == "L1" else {}
    cfg = TensorDumpConfig(out, level=level, kernel_names="moe_experts", mode=mode, **{**selection, **fields})
    with tensor_dump(cfg) as dumper:
        for _ in range(steps):
            block(block.make_input())
            dumper.step()
    return open_dump(out)


def finite_stats(values: np.ndarray) -> dict:
    x = values.astype(np.float64).reshape(-1)
    finite = x[np.isfinite(x)]
    return {
        "min": finite.min(),
        "max": finite.max(),
        "mean": finite.mean(),
        "l2norm": math.sqrt(float(finite @ finite)),
        "nan_count": int(np.isnan(x).sum()),
        "inf_count": int(np.isinf(x).sum()),
        "element_count": x.size,
    }


# --------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "fields, error, message",
    [
        (
            {"mode": "stats"},
            ValueError,
            "unsupported mode 'stats'; expected one of ['tensor', 'statistics', 'nonfinite', 'diff']",
        ),
        ({"mode": "diff"}, ValueError, "mode='diff' requires baseline=URL of the dump to compare against"),
        (
            {"mode": "statistics", "baseline": "b"},
            ValueError,
            "baseline is only used with mode='diff', got mode='statistics' and baseline='b'",
        ),
        ({"mode": "diff", "baseline": 3}, TypeError, "baseline must be a non-empty str or Path, got 3"),
        ({"on_budget": "drop"}, ValueError, "unsupported on_budget 'drop'; expected one of ['error', 'statistics']"),
        (
            {"mode": "diff", "baseline": "b", "baseline_storage_options": 1},
            TypeError,
            "baseline_storage_options must be a mapping or None, got int",
        ),
        (
            {"mode": "statistics", "baseline_storage_options": {"key": "secret"}},
            ValueError,
            "baseline_storage_options is only used with mode='diff', got mode='statistics'",
        ),
        (
            {"baseline_storage_options": {}},
            ValueError,
            "baseline_storage_options is only used with mode='diff', got mode='tensor'",
        ),
    ],
)
def test_bad_mode_fields_are_refused(tmp_path, fields, error, message):
    with pytest.raises(error, match=re.escape(message)):
        TensorDumpConfig(tmp_path, level="L1", stages="expert_up", **fields)


def test_missing_baseline_is_refused_before_any_launch(tmp_path):
    config = TensorDumpConfig(tmp_path / "out", level="L1", stages="expert_up", mode="diff", baseline=tmp_path / "nope")
    dumper = tensor_dump(config)
    with pytest.raises(ValueError, match=re.escape(f"mode='diff' baseline {tmp_path / 'nope'} cannot be read")):
        dumper.__enter__()
    assert active_session() is None  # no session: a launch now would run ordinarily
    assert not (tmp_path / "out").exists()


def test_empty_baseline_is_refused(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "zarr.json").write_text(
        '{"zarr_format":3,"node_type":"group","attributes":{"megadump_zarr":{"layoutVersion":1}}}'
    )
    config = TensorDumpConfig(tmp_path / "out", level="L1", stages="expert_up", mode="diff", baseline=base)
    with pytest.raises(ValueError, match=re.escape(f"mode='diff' baseline {base} holds no records")):
        with tensor_dump(config):
            pass


# --------------------------------------------------------------------------- statistics mode
def test_l1_statistics_equal_the_tensor_mode_dump(tmp_path):
    tensor = run(tmp_path / "tensor", io=("input", "output"))
    stats = run(tmp_path / "stats", "statistics", io=("input", "output"))
    rt, rs = tensor.records(), stats.records()
    assert len(rs) == len(rt) > 50 and not rs["payload"].any() and rt["payload"].all()
    assert list(rs["path"]) == list(rt["path"])  # statistics-only rows name where the payload would be
    for (_, a), (_, s) in zip(rt.iterrows(), rs.iterrows()):
        values = tensor.record_array(a["path"]).values
        expected = finite_stats(values)
        for key in ("min", "max", "nan_count", "inf_count", "element_count"):
            assert s[key] == expected[key], (a["path"], key)
        assert s["mean"] == pytest.approx(expected["mean"], rel=1e-9, abs=1e-12)
        assert s["l2norm"] == pytest.approx(expected["l2norm"], rel=1e-9)
        assert s["min"] == a["min"] and s["max"] == a["max"]  # the writer's host statistics agree exactly
        assert s["digest"] == digest_reference(values, s["dtype"])
        assert (s["dtype"], s["shape"], s["stage"], s["task_id"], s["owner_id"]) == (
            a["dtype"],
            a["shape"],
            a["stage"],
            a["task_id"],
            a["owner_id"],
        )


def test_statistics_mode_copies_no_payload(tmp_path):
    stats = run(tmp_path / "stats", "statistics", steps=1)
    window = tmp_path / "stats" / "rank_0" / "window_0000"
    invocation = next(window.glob("invocation_*"))
    assert sorted(p.name for p in invocation.iterdir()) == ["statistics", "zarr.json"]  # no stages/, no arrays
    records = stats.records()
    import json

    inv_attrs = json.loads((invocation / "zarr.json").read_text())["attributes"]
    # the Device buffer held the header, the record table and one 128-byte slot per record: nothing else
    assert inv_attrs["deviceBufferBytes"] == align_up(L1_DUMP_PAYLOAD_BASE + 128 * len(records))
    assert inv_attrs["statisticsCount"] == len(records) and inv_attrs["recordCount"] == 0


def test_l0_statistics_equal_the_tensor_mode_dump(tmp_path):
    tensor = run(tmp_path / "tensor", level="L0")
    stats = run(tmp_path / "stats", "statistics", level="L0")
    rt, rs = tensor.records(), stats.records()
    assert len(rs) == len(rt) > 5 and not rs["payload"].any()
    assert list(rs["name"]) == list(rt["name"]) and list(rs["role"]) == list(rt["role"])
    for (_, a), (_, s) in zip(rt.iterrows(), rs.iterrows()):
        values = tensor.record_array(a["path"]).values
        expected = finite_stats(values)
        for key in ("min", "max", "nan_count", "inf_count", "element_count"):
            assert s[key] == expected[key], (a["name"], key)
        assert s["mean"] == pytest.approx(expected["mean"], rel=1e-9, abs=1e-12)
        assert s["l2norm"] == pytest.approx(expected["l2norm"], rel=1e-9)
        assert s["digest"] == digest_reference(values, s["dtype"])
        assert s["path"] == a["path"]


# --------------------------------------------------------------------------- nonfinite and diff
def nan_in_expert_2(block: MoEBlock) -> None:
    block.w_up[2, 0, 0] = float("nan")


def test_nonfinite_keeps_only_the_task_holding_nan(tmp_path):
    dump = run(tmp_path / "nf", "nonfinite", poison=nan_in_expert_2, stages="expert_up", io="output")
    records = dump.records()
    kept = records[records["payload"]]
    assert len(records) == 8 and list(kept["owner_id"]) == [2, 2] and list(kept["step"]) == [0, 1]
    assert (records.loc[~records["payload"], "nan_count"] == 0).all() and (kept["nan_count"] > 0).all()
    for _, row in kept.iterrows():
        stored = dump.record_array(row["path"]).values
        assert int(np.isnan(stored).sum()) == row["nan_count"]
    arrays = [p for p in (tmp_path / "nf").rglob("output_00_ws") if p.is_dir()]
    assert len(arrays) == 2  # the only payloads on disk


def test_nonfinite_at_l0_keeps_only_nonfinite_tensors(tmp_path):
    dump = run(tmp_path / "nf0", "nonfinite", level="L0", poison=nan_in_expert_2, steps=1)
    records = dump.records()
    kept = records[records["payload"]]
    assert set(kept["name"]) == set(records.loc[records["nan_count"] > 0, "name"]) and len(kept) >= 1
    assert "w_up" in set(kept["name"])


def bump_expert_1(block: MoEBlock) -> None:
    block.w_up[1, 0, 0] += 1.0


@pytest.mark.parametrize("baseline_mode", ["statistics", "tensor"])
def test_diff_keeps_only_the_perturbed_task(tmp_path, baseline_mode):
    run(tmp_path / "base", baseline_mode, stages="expert_up", io="output")
    dump = run(
        tmp_path / "diff", "diff", poison=bump_expert_1, baseline=tmp_path / "base", stages="expert_up", io="output"
    )
    records = dump.records()
    kept = records[records["payload"]]
    assert len(records) == 8 and list(kept["owner_id"]) == [1, 1] and list(kept["task_id"]) == [1, 1]
    same = run(tmp_path / "same", "diff", baseline=tmp_path / "base", stages="expert_up", io="output")
    assert not same.records()["payload"].any()  # an identical run keeps nothing


@pytest.mark.parametrize("baseline_mode", ["statistics", "tensor"])
def test_diff_at_l0_keeps_only_the_tensors_that_changed(tmp_path, baseline_mode):
    # L0 records have no task id/stage/io (pandas NA in the baseline's records()): matching them used to
    # raise "boolean value of NA is ambiguous" when the dumper was entered
    base = run(tmp_path / "base", baseline_mode, level="L0", steps=1)
    dump = run(tmp_path / "diff", "diff", poison=bump_expert_1, baseline=tmp_path / "base", level="L0", steps=1)
    perturbed = run(tmp_path / "stats", "statistics", poison=bump_expert_1, level="L0", steps=1).records()
    rb, records = base.records(), dump.records()
    expected = [name for name, a, b in zip(rb["name"], perturbed["digest"], run_digests(base, rb)) if a != b]
    kept = records[records["payload"]]
    assert len(records) == len(rb) > 5 and "w_up" in expected and list(kept["name"]) == expected
    assert len(expected) < len(records)  # inputs the perturbation does not reach are statistics only


def run_digests(dump, records):
    if records["digest"].notna().all():
        return list(records["digest"])
    return [digest_reference(dump.record_array(p).values, d) for p, d in zip(records["path"], records["dtype"])]


# --------------------------------------------------------------------------- budget
BIG = DemoConfig(tokens=512, d_model=128)


def test_budget_fallback_stores_statistics_for_what_does_not_fit(tmp_path):
    fields = dict(stages="expert_up", io=("input", "output"), device_memory_budget_mb=1, steps=1, config=BIG)
    with pytest.raises(MemoryError, match=re.escape("exceeding device_memory_budget_mb=1 (1048576 bytes)")):
        run(tmp_path / "seed", **fields)
    dump = run(tmp_path / "fallback", on_budget="statistics", **fields)
    records = dump.records()
    assert records["payload"].any() and not records["payload"].all()
    assert records.loc[records["payload"], "stored_bytes"].sum() < 1 << 20
    full = run(tmp_path / "full", stages="expert_up", io=("input", "output"), steps=1, config=BIG).records()
    assert list(records["path"]) == list(full["path"])
    stats_only = records[~records["payload"]]
    ref = full.set_index("path").loc[stats_only["path"]]
    assert list(stats_only["max"]) == list(ref["max"]) and list(stats_only["min"]) == list(ref["min"])


def test_budget_fallback_keeps_the_seed_layout_when_everything_fits(tmp_path):
    a = run(tmp_path / "a", stages="expert_up", steps=1).records()
    b = run(tmp_path / "b", stages="expert_up", steps=1, on_budget="statistics").records()
    assert b["payload"].all() and b["digest"].isna().all() and list(a["path"]) == list(b["path"])


def test_max_bytes_per_tensor_caps_kept_payloads_not_statistics(tmp_path):
    dump = run(
        tmp_path / "cap", "nonfinite", poison=nan_in_expert_2, stages="expert_up", io="output", max_bytes_per_tensor=64
    )
    records = dump.records()
    kept = records[records["payload"]]
    assert list(kept["stored_bytes"]) == [64, 64] and kept["truncated"].all()
    assert (kept["element_count"] == [math.prod(s) for s in kept["shape"]]).all()  # statistics cover the whole tensor
    assert set(kept["stats_scope"]) == {"whole"}  # the device's statistics, not the stored prefix's
    assert (kept["nan_count"] > 0).all()  # the whole tensor's NaN (the prefix of 64 bytes may hold none)


def test_bfloat16_statistics(tmp_path):
    config = DemoConfig(dtype=torch.bfloat16)
    tensor = run(tmp_path / "t", stages="expert_up", io="output", steps=1, config=config)
    stats = run(tmp_path / "s", "statistics", stages="expert_up", io="output", steps=1, config=config)
    for (_, a), (_, s) in zip(tensor.records().iterrows(), stats.records().iterrows()):
        values = tensor.record_array(a["path"]).values
        assert s["dtype"] == "bfloat16" and s["max"] == float(values.astype(np.float64).max())
        assert s["digest"] == digest_reference(values, s["dtype"])


def test_statistics_mode_fits_a_budget_the_payloads_would_not(tmp_path):
    fields = dict(stages="expert_up", io=("input", "output"), device_memory_budget_mb=1, steps=1, config=BIG)
    records = run(tmp_path / "stats", "statistics", **fields).records()  # the seed's MemoryError in tensor mode
    assert len(records) == 16 and not records["payload"].any()
    assert L1_DUMP_PAYLOAD_BASE + records["bytes"].sum() > 1 << 20  # what tensor mode would need


def table_attrs(root: Path, invocation: str = "invocation_000000_forward") -> dict:
    import json

    path = root / "rank_0" / "window_0000" / invocation / "statistics" / "zarr.json"
    return json.loads(path.read_text())["attributes"]


def test_the_device_copies_only_what_is_kept(tmp_path):
    # nonfinite: the device copies only the tensors holding NaN into its tensor pool
    dump = run(tmp_path / "nf", "nonfinite", poison=nan_in_expert_2, stages="expert_up", io="output", steps=1)
    kept = dump.records()
    kept = kept[kept["payload"]]
    attrs = table_attrs(tmp_path / "nf")
    assert attrs["tensorPoolUsed"] == sum(align_up(b) for b in kept["bytes"]) and attrs["poolFull"] == 0
    # diff with a statistics baseline: the device compares digests, copying only the perturbed task's
    run(tmp_path / "base", "statistics", stages="expert_up", io="output", steps=1)
    diff = run(
        tmp_path / "diff",
        "diff",
        poison=bump_expert_1,
        baseline=tmp_path / "base",
        stages="expert_up",
        io="output",
        steps=1,
    ).records()
    attrs = table_attrs(tmp_path / "diff")
    assert attrs["tensorPoolUsed"] == align_up(int(diff.loc[diff["owner_id"] == 1, "bytes"].iloc[0]))


def test_a_pool_bounded_by_the_budget_keeps_statistics_for_the_rest(tmp_path):
    def nan_everywhere(block: MoEBlock) -> None:
        block.w_up[:, 0, 0] = float("nan")

    dump = run(
        tmp_path / "nf",
        "nonfinite",
        poison=nan_everywhere,
        stages="expert_up",
        io=("input", "output"),
        steps=1,
        config=DemoConfig(tokens=512, d_model=256),
        device_memory_budget_mb=1,
    )
    records = dump.records()
    nonfinite = records["nan_count"] > 0
    attrs = table_attrs(tmp_path / "nf")
    assert nonfinite.sum() == 8 and not records.loc[~nonfinite, "payload"].any()  # w_up in, ws out of each expert
    kept = records.loc[nonfinite, "payload"]
    assert kept.any() and not kept.all() and attrs["poolFull"] == int((~kept).sum())
    assert attrs["tensorPoolUsed"] <= attrs["tensorPoolBytes"]
    assert align_up(L1_DUMP_PAYLOAD_BASE + len(records) * 128) + attrs["tensorPoolBytes"] <= 1 << 20
