"""compare, first_divergence and root_cause on statistics-only and mixed dumps (analyse.summary)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from hypothesis import given, settings, strategies as st
import pytest
import torch

from megadump_zarr import TensorDumpConfig, compare, first_divergence, open_dump, root_cause, tensor_dump
from megadump_zarr.analyse.summary import is_summary_pair, summary_row
from megadump_zarr.demo.model import MoEBlock

STAGES = ["expert_up", "expert_down", "unpermute", "combine"]


def run(out: Path, mode: str, *, poison=None, **fields):
    block = MoEBlock()
    if poison is not None:
        poison(block)
    cfg = TensorDumpConfig(out, level="L1", kernel_names="moe_experts", stages=STAGES, mode=mode, **fields)
    with tensor_dump(cfg) as dumper:
        for _ in range(2):
            block(block.make_input())
            dumper.step()
    return open_dump(out)


def bump_expert_1(block: MoEBlock) -> None:
    block.w_down[1, 0, 0] += 1.0


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("statistics_compare")
    return {
        "tensor": run(root / "tensor", "tensor"),
        "stats": run(root / "stats", "statistics"),
        "stats_again": run(root / "stats_again", "statistics"),
        "bumped": run(root / "bumped", "statistics", poison=bump_expert_1),
        "bumped_tensor": run(root / "bumped_tensor", "tensor", poison=bump_expert_1),
    }


def test_identical_statistics_dumps_pass_on_digests(dumps):
    result = compare(dumps["stats"], dumps["stats_again"])
    assert len(result) == len(dumps["stats"].records()) and (result["verdict"] == "pass").all()
    assert (result["note"] == "summary: statistics only in a and b; digests equal").all()
    assert first_divergence(result) is None and root_cause(result) is None


def test_a_perturbed_task_fails_first_and_is_the_root_cause(dumps):
    result = compare(dumps["stats"], dumps["bumped"])
    failing = result[result["verdict"] == "fail"]
    assert len(failing) > 0
    first = first_divergence(result)
    # the bumped weight is an input of expert 1's expert_down task: its output is where it starts
    assert (first["stage"], first["task_id"], first["owner_id"], first["io"]) == ("expert_down", 5, 1, "input")
    assert first["name"] == "w_down" and first["note"].startswith("summary: statistics only in a and b;")
    cause = root_cause(result)
    assert cause is not None and cause["stage"] == "expert_down" and cause["owner_id"] == 1
    # nothing upstream of it differs: every expert_up record passes
    assert (result.loc[result["stage"] == "expert_up", "verdict"] == "pass").all()


def test_mixed_dumps_compare_against_tensor_mode(dumps):
    same = compare(dumps["tensor"], dumps["stats"])
    assert (same["verdict"] == "pass").all()
    # the payload side is digested on the host: equal bits are proven, not inferred from statistics
    assert set(same["note"]) == {"summary: statistics only in b; digests equal"}
    mixed = compare(dumps["bumped_tensor"], dumps["stats"])
    # a record whose bits differ is never a pass, even within the statistics' tolerance (issue 23)
    differ = mixed[mixed["verdict"] != "pass"]
    assert set(differ["verdict"]) <= {"fail", "differs_within_stats"}
    assert set(differ["stage"]) == {"expert_down", "unpermute", "combine"}
    failing = mixed[mixed["verdict"] == "fail"]
    assert set(failing["stage"]) == {"expert_down", "unpermute", "combine"}  # downstream of the bumped weight only
    assert set(failing.loc[failing["stage"] == "expert_down", "owner_id"]) == {1}
    first = first_divergence(mixed)
    assert (first["stage"], first["task_id"], first["name"]) == ("expert_down", 5, "w_down")
    assert root_cause(mixed)["task_id"] == 5


def row(**values):
    base = {
        "payload": False,
        "dtype": "float32",
        "shape": (4, 2),
        "nan_count": 0,
        "inf_count": 0,
        "element_count": 8,
        "min": -1.0,
        "max": 2.0,
        "mean": 0.5,
        "l2norm": 3.0,
        "digest": 11,
    }
    return pd.Series({**base, **values})


@pytest.mark.parametrize(
    "a, b, verdict, note",
    [
        (row(), row(), "pass", "summary: statistics only in a and b; digests equal"),
        (
            row(digest=12, mean=0.5 + 1e-9),
            row(),
            "differs_within_stats",
            "summary: statistics only in a and b; digest differs (0x000000000000000c vs 0x000000000000000b), "
            "statistics within tolerance",
        ),
        (
            row(digest=12, max=2.1),
            row(),
            "fail",
            "summary: statistics only in a and b; digest differs (0x000000000000000c vs 0x000000000000000b), "
            "max beyond rtol=1.3e-06, atol=1e-05",
        ),
        (
            row(digest=12, nan_count=1),
            row(),
            "fail",
            "summary: statistics only in a and b; digest differs (0x000000000000000c vs 0x000000000000000b), "
            "NaN/Inf counts differ (1/0 vs 0/0)",
        ),
        (
            row(dtype="int32", digest=12),
            row(dtype="int32"),
            "fail",
            "summary: statistics only in a and b; digest differs (0x000000000000000c vs 0x000000000000000b)",
        ),
        (
            row(dtype="int32"),
            row(dtype="float32"),
            "dtype_mismatch",
            "summary: statistics only in a and b; dtype int32 vs float32",
        ),
        (row(shape=(8,)), row(), "shape_mismatch", "summary: statistics only in a and b; shape (8,) vs (4, 2)"),
        (row(payload=True, digest=None), row(), "pass", "summary: statistics only in b; statistics within tolerance"),
        (
            row(dtype="bfloat16", digest=1, max=2.01),
            row(dtype="bfloat16"),
            "differs_within_stats",
            "summary: statistics only in a and b; digest differs (0x0000000000000001 vs 0x000000000000000b), "
            "statistics within tolerance",
        ),
        (
            row(dtype="bool", digest=12),
            row(dtype="bool"),
            "fail",
            "summary: statistics only in a and b; digest differs (0x000000000000000c vs 0x000000000000000b)",
        ),
    ],
)
def test_summary_rules(a, b, verdict, note):
    assert is_summary_pair(a, b)
    result = summary_row({"name": "x"}, a, b)
    assert (result["verdict"], result["note"]) == (verdict, note)


def test_payload_on_both_sides_is_not_a_summary_pair():
    assert not is_summary_pair(row(payload=True), row(payload=True))
    assert not is_summary_pair(pd.Series({"dtype": "float32"}), pd.Series({"dtype": "float32"}))


INF_ONLY = dict(shape=(1,), element_count=1, inf_count=1, min=None, max=None, mean=None, l2norm=None)
NON_FINITE_NOTE = "statistics within tolerance, but the record holds NaN/Inf, which they do not describe"


@pytest.mark.parametrize(
    "a, b",
    [
        (row(**INF_ONLY, digest=12), row(**INF_ONLY)),  # [+inf] against [-inf]: no statistic tells them apart
        (row(inf_count=1, digest=12), row(inf_count=1)),  # [1, +inf, ...] against [1, -inf, ...]
        (row(nan_count=2, digest=12), row(nan_count=2)),  # NaNs moved, or other NaN payloads
    ],
)
def test_differing_digests_with_non_finite_elements_fail(a, b):
    result = summary_row({"name": "x"}, a, b)
    assert result["verdict"] == "fail"
    assert result["note"] == (
        "summary: statistics only in a and b; digest differs (0x000000000000000c vs 0x000000000000000b), "
        + NON_FINITE_NOTE
    )


def test_positive_against_negative_infinity_in_statistics_mode_fails(tmp_path):
    from megadump_zarr.cli.main import main
    from tests.dump._dump_helpers import MegaKernel, copy_rows_graph

    def dump(out, value):
        a = torch.ones(8, 4)
        a[2, 1] = value
        kernel = MegaKernel(copy_rows_graph(8, 4, 4), name="copy")
        with tensor_dump(TensorDumpConfig(out, level="L0", mode="statistics")) as dumper:
            kernel.launch([a, torch.zeros_like(a)])
            dumper.step()

    dump(tmp_path / "plus", float("inf"))
    dump(tmp_path / "minus", float("-inf"))
    result = compare(open_dump(tmp_path / "plus"), open_dump(tmp_path / "minus"))
    inputs = result[result["name"] == "a"]
    assert list(inputs["verdict"]) == ["fail"] and NON_FINITE_NOTE in inputs["note"].iloc[0]
    assert main(["compare", "--accept-within-stats", str(tmp_path / "plus"), str(tmp_path / "minus")]) == 1


statistic = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True, width=64))


@settings(max_examples=200, deadline=None)
@given(
    dtype=st.sampled_from(["float32", "bfloat16", "float8_e4m3fn", "int64", "uint8", "bool"]),
    stats_a=st.tuples(statistic, statistic, statistic, statistic),
    stats_b=st.tuples(statistic, statistic, statistic, statistic),
    counts=st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)),
    digests=st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)).filter(lambda d: d[0] != d[1]),
    tolerance=st.sampled_from([None, 1e30]),
)
def test_different_digests_never_pass(dtype, stats_a, stats_b, counts, digests, tolerance):
    names = ("min", "max", "mean", "l2norm")
    a = row(dtype=dtype, digest=digests[0], nan_count=counts[0], inf_count=counts[1], **dict(zip(names, stats_a)))
    b = row(dtype=dtype, digest=digests[1], nan_count=counts[2], inf_count=counts[3], **dict(zip(names, stats_b)))
    result = summary_row({"name": "x"}, a, b, tolerance, tolerance)
    assert result["verdict"] in ("fail", "differs_within_stats")
    assert result["note"].startswith(f"summary: statistics only in a and b; digest differs ({digests[0]:#018x}")
    if result["verdict"] == "differs_within_stats":
        assert dtype in ("float32", "bfloat16", "float8_e4m3fn") and not any(counts)
    same = summary_row({"name": "x"}, a, {**a, "payload": True, "digest": digests[0]})
    assert (same["verdict"], same["note"]) == ("pass", "summary: statistics only in a; digests equal")
