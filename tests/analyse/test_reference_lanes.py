"""compare(dump, reference) and compare(mapping, mapping) in the block lanes of the dump-vs-dump compare
(:func:`megadump_zarr.analyse.lanes.compare_arrays`): 1, 2 and 4 lanes give the same frame, and every row
has the bits :func:`~megadump_zarr.analyse.pairs.compare_pair` gives for its name on one thread (the serial
path these compares took before)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
import threading
from typing import Any

import ml_dtypes
import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr

from megadump_zarr import TensorDumpConfig, compare, tensor_dump
from megadump_zarr.analyse import lanes as lane_module
from megadump_zarr.analyse.matching import KEY_COLUMNS
from megadump_zarr.analyse.lanes import ArrayPair, compare_arrays
from megadump_zarr.analyse.pairs import compare_pair, empty_row
from megadump_zarr.analyse.reference import reference_pairs
from megadump_zarr.analyse.side import DumpSide, ReferenceSide
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.layout.write_model import ArrayWrite, InvocationWrite, WindowWrite
from megadump_zarr.read import open_dump
from megadump_zarr.store.writer import WindowWriter
from tests._faults import dump_demo_step

LANES = (1, 2, 4)
FLOAT_COLUMNS = ("cosine", "max_abs", "max_rel", "rmse", "euc_dist", "max_rel_eps", "worst_a", "worst_b")


# ---------------------------------------------------------------------------------------------------- dumps
def _demo_l0(root: Path, *, dtype: torch.dtype = torch.float32, nan: bool = False) -> Path:
    block = MoEBlock(DemoConfig(dtype=dtype))
    x = block.make_input()
    if nan:
        x[3, 5] = float("nan")
    with tensor_dump(TensorDumpConfig(root, level="L0")) as dumper:
        block(x)
        dumper.step()
    return root


def _big_arrays() -> dict[str, np.ndarray]:
    """Tensors over one 8 MiB block (the default budget): each is read as several chunk-aligned blocks."""
    rng = np.random.default_rng(3)
    return {
        "f32": rng.standard_normal((1500, 1024), dtype=np.float32),
        "f64": rng.standard_normal((600, 2048)) * 10.0 ** rng.uniform(-4, 4, (600, 2048)),
        "i32": rng.integers(-1000, 1000, (700, 2048), dtype=np.int32),
        "bf16": rng.standard_normal((300, 64)).astype(ml_dtypes.bfloat16),
    }


def _write_big(root: Path, arrays: dict[str, np.ndarray]) -> Path:
    writes = []
    for name, data in arrays.items():
        attrs = {
            "name": name,
            "role": "stage_output",
            "capturePhase": "after",
            "actualShape": list(data.shape),
            "declaredShape": list(data.shape),
        }
        writes.append(ArrayWrite(name, data, tuple(f"{name}_{i}" for i in range(data.ndim)), attrs))
    invocation = InvocationWrite(
        "invocation_000000_forward",
        {"invocationId": 0, "step": 0, "direction": "forward", "kernelName": "k", "level": "L0"},
        [],
        writes,
    )
    window = WindowWrite(0, 0, {"level": "L0", "windowIndex": 0, "invocations": [invocation.name]}, [invocation])
    with WindowWriter(root, chunk_bytes=256 << 10, durable=False) as writer:
        writer.write_window(window)
    return root


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("reference-lanes")
    dump_demo_step(base / "l0", "L0")
    dump_demo_step(base / "l1", "L1")
    dump_demo_step(base / "l1_fault", "L1", fault={"stage": "expert_down", "owner": 1, "delta": 0.5})
    return {
        "l0": base / "l0",
        "l1": base / "l1",
        "l1_fault": base / "l1_fault",
        "l0_nan": _demo_l0(base / "l0_nan", nan=True),
        "l0_bf16": _demo_l0(base / "l0_bf16", dtype=torch.bfloat16),
        "big": _write_big(base / "big", _big_arrays()),
    }


# ---------------------------------------------------------------------------------------------------- references
def _eager(root: Path, select: dict[str, Any]) -> dict[str, Any]:
    """The whole tensors of an L0 dump (the eager run's values): torch, or ml_dtypes numpy for bfloat16."""
    dump = open_dump(root)
    records = dump.records()
    if "kernel" in select:
        records = records[records["kernel"] == select["kernel"]]
    out: dict[str, Any] = {}
    for name in dict.fromkeys(records["name"]):
        try:
            values = np.asarray(dump.tensor(name, **select).values)
        except Exception:  # noqa: BLE001 - a name the selection leaves ambiguous: not part of the reference
            continue
        out[name] = values if values.dtype == ml_dtypes.bfloat16 else torch.from_numpy(values.copy())
    return out


def _perturbed(ref: dict[str, Any]) -> dict[str, Any]:
    rng = np.random.default_rng(11)
    out: dict[str, Any] = {}
    for name, x in ref.items():
        values = x.numpy() if isinstance(x, torch.Tensor) else x
        if values.dtype.kind in "iub":
            y = values.copy()
            if y.size:
                y.reshape(-1)[y.size // 2] += 1
        else:
            noise = 1 + 1e-3 * rng.standard_normal(values.shape)
            y = (values.astype(np.float64) * noise).astype(values.dtype)
        out[name] = torch.from_numpy(y) if isinstance(x, torch.Tensor) else y
    return out


_SELECT = {
    "l0": {"kernel": "moe_experts"},
    "l0_nan": {"kernel": "moe_experts"},
    "l0_bf16": {"kernel": "moe_experts"},
    "l1": {"stage": "combine"},
    "l1_fault": {"stage": "expert_down"},
    "big": {},
}


def _case(roots: dict[str, Path], dump: str, kind: str) -> tuple[dict[str, Any], list[str] | None, dict[str, Any]]:
    """(reference, names, select) of one case: the reference is the clean eager run's tensors (the big dump's
    own arrays), as they are, perturbed, with names left out (asked for anyway), or with names the dump lacks."""
    select = dict(_SELECT[dump])
    if dump == "big":
        ref: dict[str, Any] = dict(_big_arrays())
    elif dump == "l0_bf16":
        ref = _eager(roots["l0_bf16"], select)
    else:
        ref = _eager(roots["l0"], {"kernel": "moe_experts"})
    if dump in ("l1", "l1_fault") and kind == "aligned":  # two tasks of the stage: rows aligned to the captured ones
        records = open_dump(roots[dump]).records()
        tasks = sorted(set(records[records["stage"] == select["stage"]]["task_id"]))
        select["task"] = [int(tasks[0]), int(tasks[2])]
    names = None
    if kind == "perturbed":
        ref = _perturbed(ref)
    elif kind == "missing":
        names = list(ref)
        for name in names[::2]:
            del ref[name]
    elif kind == "extra":
        ref["not_captured"] = torch.ones(5, 3)
        ref["also_not_captured"] = np.zeros((2, 2), np.int64)
    return ref, names, select


CASES = [
    (dump, kind)
    for dump in ("l0", "l1", "l1_fault", "l0_nan", "l0_bf16", "big")
    for kind in ("exact", "perturbed", "missing", "extra")
] + [("l1", "aligned"), ("l1_fault", "aligned")]


# ---------------------------------------------------------------------------------------------------- checks
@pytest.fixture
def lanes(monkeypatch):
    """``run(n, fn)``: ``fn()`` with ``n`` lanes (the module setting test_parallel_compare patches) and a lane
    pool of that width; the pools made are shut down afterwards."""
    made: list[Any] = []

    def run(n: int, fn: Any) -> Any:
        monkeypatch.setattr(lane_module, "_THREADS", n)
        monkeypatch.setattr(lane_module, "_POOL", None)
        try:
            return fn()
        finally:
            made.append(lane_module._POOL)

    yield run
    for pool in made:
        if pool is not None:
            pool.shutdown(wait=True)


def _bits(value: Any) -> Any:
    """A cell as comparable bits: floats by their bytes (NaN included), missing values as None."""
    if value is None or value is pd.NA:
        return None
    if isinstance(value, (float, np.floating)):
        return ("float", np.float64(value).tobytes())
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    return value


def _missing(value: Any) -> bool:
    return value is None or value is pd.NA or (isinstance(value, (float, np.floating)) and np.isnan(value))


def _cell(frame: pd.DataFrame, i: int, column: str) -> Any:
    value = frame[column].iloc[i]
    return None if _missing(value) else _bits(value)  # the frame holds NaN or NA where a row has None


def _expected_cell(row: dict[str, Any], column: str) -> Any:
    value = row.get(column)
    return None if _missing(value) else _bits(value)


def _assert_rows(frame: pd.DataFrame, rows: list[dict[str, Any]]) -> None:
    assert len(frame) == len(rows)
    for i, row in enumerate(rows):
        for column in frame.columns:
            if column not in row:
                continue
            got, want = _cell(frame, i, column), _expected_cell(row, column)
            assert got == want, (row.get("name"), column, frame[column].iloc[i], row.get(column))


def _serial_rows(slots: list[dict[str, Any] | ArrayPair], **block: Any) -> list[dict[str, Any]]:
    """Each pair through compare_pair on this thread: the serial path, block by block in block order."""
    rows = []
    for slot in slots:
        if isinstance(slot, dict):
            rows.append(slot)
            continue
        options = {"block_bytes": slot.block_bytes, **block}
        rows.append(
            compare_pair(
                slot.keys,
                slot.a,
                slot.b,
                rtol=slot.rtol,
                atol=slot.atol,
                notes=slot.notes,
                locate=slot.locate,
                **options,
            )
        )
    return rows


def _assert_same_frames(frames: dict[int, pd.DataFrame]) -> None:
    first = frames[LANES[0]]
    for n in LANES[1:]:
        pd.testing.assert_frame_equal(frames[n], first, check_exact=True)
        for column in FLOAT_COLUMNS:
            assert frames[n][column].to_numpy().tobytes() == first[column].to_numpy().tobytes(), (n, column)


@pytest.mark.parametrize(("dump", "kind"), CASES, ids=[f"{d}-{k}" for d, k in CASES])
def test_dump_reference_frames_are_the_same_in_any_lanes(roots, lanes, dump, kind):
    ref, names, select = _case(roots, dump, kind)
    frames = {n: lanes(n, lambda: compare(roots[dump], ref, names=names, **select)) for n in LANES}
    _assert_same_frames(frames)
    slots = reference_pairs(
        DumpSide(open_dump(roots[dump])), ReferenceSide(ref), names, select, {"rtol": None, "atol": None}
    )
    _assert_rows(frames[1], _serial_rows(slots))
    verdicts = set(frames[1]["verdict"])
    if kind == "exact" and dump not in ("l1_fault", "l0_nan", "l0_bf16"):
        assert verdicts <= {"pass", "error", "missing"}, frames[1][["name", "verdict", "note"]]
        assert "pass" in verdicts
    if kind == "perturbed" or dump == "l1_fault":
        assert "fail" in verdicts
    if kind == "missing":
        assert "not in the reference" in set(frames[1]["note"])
    if kind == "extra":
        assert "not in the dump" in set(frames[1]["note"])
    if kind == "aligned":
        assert frames[1]["note"].str.contains("captured rows").any()


def test_a_fault_is_traced_to_its_task_whatever_the_lanes(roots, lanes):
    ref, names, select = _case(roots, "l1_fault", "exact")
    frames = {n: lanes(n, lambda: compare(roots["l1_fault"], ref, names=["ys"], **select)) for n in LANES}
    _assert_same_frames(frames)
    row = frames[1].iloc[0]
    records = open_dump(roots["l1_fault"]).records()
    faulty = records[(records["stage"] == "expert_down") & (records["owner_id"] == 1) & (records["name"] == "ys")]
    assert len(faulty) == 1
    assert row.verdict == "fail" and row.worst_owner_id == 1
    assert (row.worst_task_id, row.worst_core_type, row.worst_core_id) == tuple(
        faulty.iloc[0][["task_id", "core_type", "core_id"]]
    )


def test_nan_pattern_and_bf16_rows_keep_their_verdicts(roots, lanes):
    ref, names, select = _case(roots, "l0_nan", "exact")
    frames = {n: lanes(n, lambda: compare(roots["l0_nan"], ref, **select)) for n in LANES}
    _assert_same_frames(frames)
    x = frames[1].set_index("name").loc["x"]
    assert x.verdict == "fail" and x.nan_a == 1 and x.nan_b == 0 and np.isnan(x.cosine)


def test_a_dataset_reference_gives_the_mapping_frame(roots, lanes):
    ref, names, select = _case(roots, "big", "perturbed")
    dataset = xr.Dataset({name: (tuple(f"{name}_{i}" for i in range(x.ndim)), x) for name, x in ref.items()})
    frames = {n: lanes(n, lambda: compare(roots["big"], dataset, **select)) for n in LANES}
    _assert_same_frames(frames)
    pd.testing.assert_frame_equal(frames[1], lanes(2, lambda: compare(roots["big"], ref, **select)), check_exact=True)


@pytest.mark.parametrize("threads", LANES)
def test_many_blocks_per_name_fold_to_the_serial_bits(roots, threads):
    """Small blocks (a few rows each, chunk boundaries of the stitched L1 tensors split): every name is many
    blocks shared out to the lanes, and each row still has compare_pair's bits."""
    ref, names, select = _case(roots, "l1_fault", "perturbed")
    slots = reference_pairs(
        DumpSide(open_dump(roots["l1_fault"])), ReferenceSide(ref), names, select, {"rtol": None, "atol": None}
    )
    small = [dataclasses.replace(s, block_bytes=256) if isinstance(s, ArrayPair) else s for s in slots]
    rows = compare_arrays(small, threads=threads)
    serial = _serial_rows(small)
    assert [[_bits(v) for v in r.values()] for r in rows] == [[_bits(v) for v in r.values()] for r in serial]
    assert {r["verdict"] for r in rows} >= {"fail"}


class _Breaks:
    """A (40, 4) float32 array whose blocks from row ``start`` on raise, naming their first row."""

    shape = (40, 4)
    dtype = np.dtype(np.float32)

    def __init__(self, start: int) -> None:
        self.start = start
        self.values = np.arange(160, dtype=np.float32).reshape(40, 4)

    def __getitem__(self, index: Any) -> np.ndarray:
        first = index[0].start or 0 if isinstance(index, tuple) and index else 0
        if first >= self.start:
            raise RuntimeError(f"block at row {first} unreadable")
        return self.values[index]


@pytest.mark.parametrize("threads", LANES)
def test_a_failing_pair_reports_its_first_failing_block(threads):
    """Blocks 2, 3, ... of a pair raise: any lanes give the first one's error, as compare_pair does."""
    good = np.arange(160, dtype=np.float32).reshape(40, 4)
    slots: list[dict[str, Any] | ArrayPair] = [
        ArrayPair({**dict.fromkeys(KEY_COLUMNS), "name": f"t{k}"}, _Breaks(8), good, block_bytes=4 * 4 * 8)
        for k in range(3)
    ]
    slots.insert(1, ArrayPair({**dict.fromkeys(KEY_COLUMNS), "name": "fine"}, good, good, block_bytes=4 * 4 * 8))
    for _ in range(3):
        rows = compare_arrays(slots, threads=threads)
        assert rows == _serial_rows(slots)
        assert [r["verdict"] for r in rows] == ["error", "pass", "error", "error"]
        assert rows[0]["note"] == "RuntimeError: block at row 8 unreadable"


def test_two_collections_in_any_lanes(lanes):
    a = dict(_big_arrays())
    b = _perturbed(a)
    del b["i32"]
    b["extra"] = np.ones(3)
    frames = {n: lanes(n, lambda: compare(a, b)) for n in LANES}
    _assert_same_frames(frames)
    names = [*a, "extra"]
    assert frames[1]["name"].tolist() == names
    rows = []
    for name in names:
        keys = {**dict.fromkeys(KEY_COLUMNS), "name": name}
        if name in a and name in b:
            rows.append(compare_pair(keys, a[name], b[name]))
        else:
            rows.append(empty_row(keys, "missing", f"only in {'a' if name in a else 'b'}"))
    _assert_rows(frames[1], rows)
    assert frames[1]["verdict"].tolist()[:3] == ["fail", "fail", "missing"]


def test_the_reference_compare_runs_in_the_lane_pool(roots, lanes, monkeypatch):
    """With several lanes the blocks are folded on the compare pool's threads, not on the caller's."""
    seen: set[str] = set()
    fold = lane_module.block_metrics

    def spy(job: Any, i: int, stored: Any = None) -> Any:
        seen.add(threading.current_thread().name)
        return fold(job, i, stored)

    monkeypatch.setattr(lane_module, "block_metrics", spy)
    ref, names, select = _case(roots, "big", "perturbed")
    lanes(4, lambda: compare(roots["big"], ref, names=names, **select))
    assert seen and all(name.startswith("megadump-compare") for name in seen), seen
    seen.clear()
    lanes(1, lambda: compare(roots["big"], ref, names=names, **select))
    assert seen == {threading.current_thread().name}
