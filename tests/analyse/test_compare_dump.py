"""Dump-level comparisons on real dumps of the demo MoE block, read with megadump_zarr.read."""

from __future__ import annotations

from pathlib import Path
import shutil

import numpy as np
import pytest
import torch

try:
    from megadump_zarr.read import open_dump
except ImportError as exc:  # the read layer is written concurrently
    pytest.skip(
        f"megadump_zarr.read.open_dump cannot be imported yet ({exc}); real-dump tests need it", allow_module_level=True
    )

from megadump_zarr import TensorDumpConfig, tensor_dump
from megadump_zarr.analyse import compare, first_divergence, first_nonfinite
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.store.packs import encode_index
from tests._layout import record_chunk, stored_record

L1_KERNELS = ("moe_experts", "moe_experts_backward")
L1_STAGES = ("expert_up", "expert_down", "combine", "combine_bwd", "expert_up_bwd")


def train_step(block: MoEBlock, x: torch.Tensor) -> torch.Tensor:
    x = x.clone().requires_grad_()
    out = block(x)
    out.float().pow(2).mean().backward()
    return out.detach()


def l1_dump(root: Path) -> Path:
    block = MoEBlock(DemoConfig())
    with tensor_dump(TensorDumpConfig(root, level="L1", kernel_names=L1_KERNELS, stages=L1_STAGES)) as dumper:
        train_step(block, block.make_input())
        dumper.step()
    return root


@pytest.fixture(scope="module")
def l1_pair(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("l1")
    return l1_dump(base / "a"), l1_dump(base / "b")


def perturb(root: Path, path: str, fn) -> None:
    """Rewrite one stored record in place, wherever it is stored (its stats attributes are left as they were)."""
    array, index = stored_record(root, path)
    array[index] = fn(array[index])


def record_path(root: Path, **match) -> str:
    records = open_dump(root).records()
    for key, value in match.items():
        records = records[records[key] == value]
    assert len(records) == 1, match
    return records["path"].iloc[0]


def add_to_one(delta: float):
    def fn(a: np.ndarray) -> np.ndarray:
        a = a.copy()
        a.flat[3] += delta
        return a

    return fn


def test_identical_l1_dumps_pass(l1_pair):
    a, b = l1_pair
    result = compare(str(a), str(b))
    assert len(result) == len(open_dump(a).records()) > 50
    assert (result.verdict == "pass").all(), result[result.verdict != "pass"]
    assert (result.cosine == 1.0).all() and (result.max_abs == 0.0).all()
    assert first_divergence(result) is None
    # execution order: the expert_up stage (tasks 0-3) before combine (tasks 13-17), though "combine" sorts first
    forward = result[result.invocation == 0]
    stages = list(dict.fromkeys(forward.stage))
    assert stages == ["expert_up", "expert_down", "combine"]
    assert list(dict.fromkeys(result[result.invocation == 1].stage)) == ["combine_bwd", "expert_up_bwd"]


def test_perturbed_records_fail_and_first_divergence_is_earliest(l1_pair, tmp_path):
    a, b = l1_pair
    c = tmp_path / "c"
    shutil.copytree(b, c)
    late = record_path(c, stage="combine", task_id=14, io="output", name="out")  # path sorts first
    early = record_path(c, stage="expert_up", task_id=1, io="output", name="ws")  # runs first
    backward = record_path(c, stage="expert_up_bwd", task_id=16, io="output", name="grad_xs")
    perturb(c, late, add_to_one(2.0))  # max_abs 2 > 1
    perturb(c, early, lambda x: x * 1.5)
    perturb(c, backward, add_to_one(0.5))  # gradients are small: the cosine drops
    result = compare(open_dump(a), open_dump(c))
    failing = result[result.verdict == "fail"]
    assert list(failing.path) == [early, late, backward]
    assert (result.drop(failing.index).verdict == "pass").all()
    first = first_divergence(result)
    assert (first.path, first["name"], first.stage, first.task_id) == (early, "ws", "expert_up", 1)
    late_row = result[result.path == late].iloc[0]
    assert late_row.max_abs == pytest.approx(2.0, abs=1e-6) and "max_abs" in late_row.note
    assert "cosine" in result[result.path == backward].iloc[0].note
    # the same comparison restricted to one stage, and to the backward invocation
    only_combine = compare(a, c, stage="combine")
    assert list(only_combine[only_combine.verdict == "fail"].path) == [late]
    assert first_divergence(compare(a, c, direction="backward")).path == backward


def test_missing_records_between_dumps(l1_pair, tmp_path):
    a, _ = l1_pair
    block = MoEBlock(DemoConfig())
    small = tmp_path / "small"
    config = TensorDumpConfig(small, level="L1", kernel_names=("moe_experts",), stages=("expert_up",))
    with tensor_dump(config) as dumper:
        train_step(block, block.make_input())
        dumper.step()
    result = compare(a, small, invocation=0)
    assert set(result[result.verdict == "pass"].stage) == {"expert_up"}
    assert set(result[result.verdict == "missing"].note) == {"only in dump a"}
    assert first_divergence(result) is None
    assert first_divergence(result, include_missing=True).stage == "expert_down"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_dump_against_eager_reference(tmp_path, dtype):
    block = MoEBlock(DemoConfig(dtype=dtype))
    x = block.make_input()
    with tensor_dump(TensorDumpConfig(tmp_path / "l0", level="L0")) as dumper:
        block(x)
        dumper.step()
    reference = block.reference(x)
    dump = open_dump(tmp_path / "l0")
    result = compare(dump, {"out": reference, "x": x}, kernel="moe_experts")
    assert result["name"].tolist() == ["x", "out"]  # x is captured before the kernel ran, out after
    assert (result.verdict == "pass").all(), result.note.tolist()
    assert result.dtype_a.tolist() == [str(dtype).removeprefix("torch.")] * 2
    assert (result.kernel == "moe_experts").all() and result.invocation.nunique() == 1
    # "x" is also an input of the router kernel: without a choice the read layer reports the ambiguity
    ambiguous = compare(dump, {"x": x})
    assert ambiguous.verdict.tolist() == ["error"] and "invocation" in ambiguous.note.iloc[0]
    # a wrong reference fails
    wrong = compare(dump, {"out": reference * 1.5}, kernel="moe_experts")
    assert wrong.verdict.tolist() == ["fail"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_stitched_l1_against_eager_reference(tmp_path, dtype):
    """Tasks 0 and 2 of ``combine`` capture rows 0-7 and 16-23: the reference is compared at those rows."""
    block = MoEBlock(DemoConfig(dtype=dtype))
    x = block.make_input()
    config = TensorDumpConfig(
        tmp_path / "l1", level="L1", kernel_names=("moe_experts",), stages=("combine",), stage_task_indices=(0, 2)
    )
    with tensor_dump(config) as dumper:
        block(x)
        dumper.step()
    reference = block.reference(x)
    result = compare(tmp_path / "l1", {"out": reference, "x": x}, stage="combine", io="output")
    row = result.set_index("name").loc["out"]
    assert row.verdict == "pass" and row.shape_a == (16, 16) and "16 captured rows of 37" in row.note
    assert result.set_index("name").loc["x", "verdict"] == "missing"  # x is an input, io="output" was asked
    bad = reference.clone()
    bad[20, 3] += 2.0  # a captured row
    assert compare(tmp_path / "l1", {"out": bad}, stage="combine", io="output").verdict.tolist() == ["fail"]
    bad = reference.clone()
    bad[30, 3] += 2.0  # a row no selected task captured
    assert compare(tmp_path / "l1", {"out": bad}, stage="combine", io="output").verdict.tolist() == ["pass"]


def test_first_nonfinite_finds_planted_nan(tmp_path):
    block = MoEBlock(DemoConfig())
    x = block.make_input()
    x[3, 5] = float("nan")
    with tensor_dump(TensorDumpConfig(tmp_path / "nan", level="L0")) as dumper:
        block(x)
        dumper.step()
    dump = open_dump(tmp_path / "nan")
    hit = first_nonfinite(dump)
    assert (hit["name"], hit.kernel, hit.invocation, hit.nan_count) == ("x", "moe_router", 0, 1)
    later = first_nonfinite(tmp_path / "nan", kernel="moe_dispatch")
    assert later is not None and later.kernel == "moe_dispatch" and later.nan_count > 0
    # a clean run has none; comparing it with the NaN run diverges first at x
    clean_block = MoEBlock(DemoConfig())
    with tensor_dump(TensorDumpConfig(tmp_path / "clean", level="L0")) as dumper:
        clean_block(clean_block.make_input())
        dumper.step()
    assert first_nonfinite(tmp_path / "clean") is None
    first = first_divergence(compare(tmp_path / "nan", tmp_path / "clean"))
    assert (first["name"], first.invocation, first.nan_a, first.nan_b) == ("x", 0, 1, 0)
    assert "NaN/Inf" in first.note


def test_nan_planted_in_weights_is_found_in_the_expert_kernel(tmp_path):
    block = MoEBlock(DemoConfig())
    block.w_down[1, 2, 3] = float("inf")
    with tensor_dump(TensorDumpConfig(tmp_path / "inf", level="L0")) as dumper:
        block(block.make_input())
        dumper.step()
    hit = first_nonfinite(tmp_path / "inf")
    assert (hit["name"], hit.kernel, hit.inf_count) == ("w_down", "moe_experts", 1)


def test_missing_chunk_is_missing_data_naming_the_key(l1_pair, tmp_path):
    a, b = l1_pair
    c = tmp_path / "c"
    shutil.copytree(b, c)
    victim = record_path(c, stage="expert_down", task_id=5, io="output", name="ys")
    key = drop_first_chunk(c, victim)
    result = compare(a, c)
    row = result[result.path == victim].iloc[0]
    assert row.verdict == "missing_data" and key in row.note, row.note
    assert (result.drop(row.name).verdict == "pass").all()
    assert first_divergence(result).path == victim


def test_stitched_worst_element_names_its_task_owner_and_core(tmp_path):
    block = MoEBlock(DemoConfig())
    x = block.make_input()
    config = TensorDumpConfig(tmp_path / "l1", level="L1", kernel_names=("moe_experts",), stages=("combine",))
    with tensor_dump(config) as dumper:
        block(x)
        dumper.step()
    reference = block.reference(x).clone()
    reference[20, 3] += 2.0
    row = compare(tmp_path / "l1", {"out": reference}, stage="combine", io="output").iloc[0]
    records = open_dump(tmp_path / "l1").records()
    owner = records[(records.stage == "combine") & (records["name"] == "out")]
    producer = next(r for r in owner.itertuples() if 20 in range(*_rows_of(tmp_path / "l1", r.path)))
    assert row.verdict == "fail" and row.worst_index == (20, 3)
    assert (row.worst_task_id, row.worst_core_type, row.worst_core_id) == (
        producer.task_id,
        producer.core_type,
        producer.core_id,
    )
    assert row.worst_b == pytest.approx(float(reference[20, 3]))


def drop_first_chunk(root: Path, path: str) -> str:
    """Remove the stored first chunk of the record at logical ``path``; return its logical chunk key.

    A schema-6 record loses its chunk file; a packed record loses its inner chunk from the shard index
    (entry set absent, index checksum rewritten), the other rows of the shard staying readable.
    """
    span = record_chunk(root, path)
    if span.whole_file:
        span.file.unlink()
        return f"{path}/{span.file.name}"
    array, index = stored_record(root, path)
    record_ndim = array.ndim - 1  # the pack's first axis is the task row
    name = "c" if record_ndim == 0 else "c." + ".".join(["0"] * record_ndim)
    rows = array.shards[0]
    raw = span.file.read_bytes()
    table = np.frombuffer(raw[-(16 * rows + 4) : -4], dtype="<u8").reshape(rows, 2)
    entries = [tuple(int(v) for v in entry) for entry in table]
    assert entries[index % rows] == (span.offset, span.nbytes)
    entries[index % rows] = None
    span.file.write_bytes(raw[: -(16 * rows + 4)] + encode_index(entries))
    return f"{path}/{name}"


def _rows_of(root: Path, path: str) -> tuple[int, int]:
    rows = np.asarray(open_dump(root).record_array(path).coords["token"].values)
    return int(rows.min()), int(rows.max()) + 1
