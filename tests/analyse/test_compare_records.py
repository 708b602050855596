"""compare_records: blocks of many records shared out to several threads give exactly the one-thread metrics."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from megadump_zarr.analyse import compare
from megadump_zarr.analyse.matching import KEY_COLUMNS
from megadump_zarr.analyse.metrics import compute_metrics
from megadump_zarr.analyse.record_pairs import RecordPair, compare_records
from megadump_zarr.layout.write_model import ArrayWrite, InvocationWrite, WindowWrite
from megadump_zarr.read import open_dump
from megadump_zarr.store.writer import WindowWriter

CHUNK_BYTES = 4096  # many chunks per record: every lane folds parts of every tensor


def arrays() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(7)
    a = {
        "f32": rng.standard_normal((300, 64), dtype=np.float32),
        "bf16": rng.standard_normal((200, 32)).astype(ml_dtypes.bfloat16),
        "ids": rng.integers(0, 1000, (500, 16), dtype=np.int64),
        "tiny": rng.standard_normal((3,), dtype=np.float32),
    }
    b = {k: v.copy() for k, v in a.items()}
    b["f32"][17, 5] += 0.5
    b["f32"][250, 63] -= 2.0  # the worst, in a late chunk
    b["f32"][120, :] *= 1 + 1e-7
    b["f32"][201, 7] = np.nan
    b["ids"][333, 2] += 1
    b["ids"][40, 9] -= 3
    b["bf16"][150, 1] = ml_dtypes.bfloat16(float(b["bf16"][150, 1]) + 1.0)
    return a, b


def write(root: Path, data: dict[str, np.ndarray]) -> None:
    items = [
        ArrayWrite(
            name,
            x,
            tuple(f"{name}_{i}" for i in range(x.ndim)),
            {
                "name": name,
                "role": "stage_output",
                "capturePhase": "after",
                "actualShape": list(x.shape),
                "declaredShape": list(x.shape),
            },
        )
        for name, x in data.items()
    ]
    invocation = InvocationWrite(
        "invocation_000000_forward",
        {"invocationId": 0, "step": 0, "direction": "forward", "kernelName": "k", "level": "L0"},
        [],
        items,
    )
    with WindowWriter(root, chunk_bytes=CHUNK_BYTES, durable=False) as writer:
        writer.write_window(
            WindowWrite(0, 0, {"level": "L0", "windowIndex": 0, "invocations": [invocation.name]}, [invocation])
        )


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> tuple[Path, Path, dict, dict]:
    base = tmp_path_factory.mktemp("records")
    a, b = arrays()
    write(base / "a", a)
    write(base / "b", b)
    return base / "a", base / "b", a, b


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_lanes_equal_one_pass_over_numpy(dumps, threads):
    root_a, root_b, a, b = dumps
    dump_a, dump_b = open_dump(root_a), open_dump(root_b)
    records = dump_a.records()
    pairs = [
        RecordPair(dump_a, dump_b, str(path), {**dict.fromkeys(KEY_COLUMNS), "name": name, "path": str(path)})
        for path, name in zip(records["path"], records["name"])
    ]
    assert open_dump(root_a).record_array(pairs[0].path).chunks[0][0] < 300  # several chunks per record
    rows = {row["name"]: row for row in compare_records(pairs, threads=threads)}
    for name in a:
        exact = a[name].dtype.kind == "i"
        rtol, atol = {"f32": (1.3e-6, 1e-5), "bf16": (1.6e-2, 1.6e-2), "tiny": (1.3e-6, 1e-5)}.get(name, (None, None))
        expected = compute_metrics(a[name], b[name], rtol=rtol, atol=atol, exact=exact)
        row = rows[name]
        assert (row["mismatches"], row["first_mismatch"]) == (expected.mismatches, expected.first_mismatch), name
        assert (row["nan_b"], row["nonfinite_mismatch"], row["elements"]) == (
            expected.nan_b,
            expected.nonfinite_mismatch,
            expected.elements,
        )
        # NaN where the NaN/Inf patterns differ (f32 holds a NaN at 201,7 on one side)
        assert row["max_abs"] == pytest.approx(expected.max_abs, rel=0, abs=0, nan_ok=True)
        assert row["max_rel"] == pytest.approx(expected.max_rel, rel=0, abs=0, nan_ok=True)
        assert row["cosine"] == pytest.approx(expected.cosine, rel=1e-12, nan_ok=True)
        assert row["rmse"] == pytest.approx(expected.rmse, rel=1e-12, nan_ok=True)
        assert row["within_0_1pct"] == pytest.approx(expected.within_0_1pct, rel=0, abs=0, nan_ok=True)
    f32 = rows["f32"]
    assert f32["verdict"] == "fail" and f32["worst_index"] == (250, 63) and f32["first_mismatch"] == (17, 5)
    assert f32["mismatches"] == 3 and f32["nonfinite_mismatch"] == 1  # 17,5 and 250,63 not close, 201,7 NaN
    assert rows["ids"]["note"] == "2 of 8000 elements differ, first at (40, 9)"
    assert rows["bf16"]["worst_index"] == (150, 1)
    assert rows["tiny"]["verdict"] == "pass" and rows["tiny"]["cosine"] == 1.0


def test_compare_of_the_dumps_uses_the_same_rows(dumps):
    root_a, root_b, _, _ = dumps
    result = compare(root_a, root_b).set_index("name")
    assert result.loc["f32", "worst_index"] == (250, 63) and result.loc["ids", "mismatches"] == 2
    assert result.verdict.to_dict() == {"f32": "fail", "bf16": "fail", "ids": "fail", "tiny": "pass"}
