"""The tasks writer computes the statistics of a batch's one-chunk arrays of one dtype and size block-wise; every
stored ``stats`` attribute equals that array's own ``compute_stats`` exactly, NaN, Inf, -0.0 and all."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
import ml_dtypes
import numpy as np

from megadump_zarr.layout.write_model import ArrayWrite, GroupWrite, InvocationWrite, WindowWrite
from megadump_zarr.store.tensor_stats import compute_stats
from megadump_zarr.store.writer import WindowWriter, _batch_stats

DTYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int32, np.uint8, np.bool_]


def _write(root: Path, tasks: list[list[np.ndarray]]) -> Path:
    groups = [GroupWrite("stages"), GroupWrite("stages/up", {"stage": "up"})]
    arrays = []
    for t, records in enumerate(tasks):
        path = f"stages/up/task_{t:06d}"
        groups.append(GroupWrite(path, {"taskId": t}, task=True))
        for i, data in enumerate(records):
            dims = tuple(f"d{k}" for k in range(data.ndim))
            arrays.append(ArrayWrite(f"{path}/input_{i:02d}_x", data, dims, {"index": i}))
    invocation = InvocationWrite("invocation_000000_forward", {"level": "L1"}, groups, arrays)
    with WindowWriter(root, durable=False) as writer:
        writer.write_window(WindowWrite(0, 0, {"level": "L1"}, [invocation]))
    return root / "rank_0" / "window_0000" / "invocation_000000_forward" / "stages" / "up"


@st.composite
def _tasks(draw):
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=2, max_side=6))
    if dtype.kind == "f" or dtype == ml_dtypes.bfloat16:
        elements = st.floats(width=16 if dtype.itemsize <= 2 else 32, allow_nan=True, allow_infinity=True)
        values = [draw(hnp.arrays(np.float32, shape, elements=elements)).astype(dtype) for _ in range(4)]
    else:
        values = [draw(hnp.arrays(dtype, shape)) for _ in range(4)]
    return [values[:2], values[2:]]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tasks=_tasks())
def test_stored_stats_equal_each_arrays_own(tmp_path_factory, tasks):
    stage = _write(tmp_path_factory.mktemp("batch"), tasks)
    for t, records in enumerate(tasks):
        for i, data in enumerate(records):
            document = json.loads((stage / f"task_{t:06d}" / f"input_{i:02d}_x" / "zarr.json").read_bytes())
            stored, own = document["attributes"]["stats"], compute_stats(data)
            assert json.dumps(stored) == json.dumps(own), (t, i, data)


def test_only_arrays_alike_are_computed_together(tmp_path):
    class Job:  # what _batch_stats reads of an ArrayJob
        def __init__(self, data, stats=True, count=1):
            self.data, self.stats = data, stats
            self.chunks = type("Plan", (), {"count": count})()

    a, b = np.arange(6, dtype=np.float32), np.arange(6, 12, dtype=np.float32)
    batch = [
        (Job(a), "a"),
        (Job(np.arange(6, dtype=np.int64)), "other dtype"),
        (Job(b), "b"),
        (Job(np.zeros(5, np.float32)), "other size"),
        (Job(a, stats=False), "no stats"),
    ]
    known = _batch_stats(batch)
    assert set(known) == {0, 2}
    assert known[0] == compute_stats(a) and known[2] == compute_stats(b)
