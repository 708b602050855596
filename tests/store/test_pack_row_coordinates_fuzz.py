"""Packs over generated stages: whatever the tasks' row starts, coordinate dimensions and record names, each
pack's ``{dim}_start``/``{dim}_stop`` rows are the row coordinate its task stores in the tasks layout, plain
xarray shows them as coordinates along ``task``, the readers read the same records in both layouts, and
``verify`` is ok; a record named like a pack array or dimensioned ``statistic`` keeps its task group."""

from __future__ import annotations

from pathlib import Path
import shutil
import tempfile
import warnings

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
import numpy as np
import zarr

from megadump_zarr import open_dump
from megadump_zarr.layout.write_model import ArrayWrite, GroupWrite, InvocationWrite, WindowWrite
from megadump_zarr.store.writer import WindowWriter
from megadump_zarr.verify import verify_dump
from tests._packs import stored_rows

INV = "invocation_000000_forward"


@st.composite
def stages(draw: st.DrawFn) -> InvocationWrite:
    """One stage of 2-6 tasks of one signature: 1 or 2 row coordinate dims (any starts), 1-2 records."""
    tasks = draw(st.integers(2, 6))
    dims = draw(st.sampled_from([("token",), ("slot", "token")]))
    record_names = ("input_00_x", "output_00_y")[: max(len(dims), draw(st.integers(1, 2)))]  # every dim used
    reserved = draw(st.sampled_from([None, None, None, "name", "dim"]))  # a pack array's name or dimension
    if reserved == "name":
        record_names = ("task_id", *record_names[1:])
    elif reserved == "dim":
        dims = ("statistic", *dims[1:])
    lengths = {dim: draw(st.integers(1, 5)) for dim in dims}
    groups = [GroupWrite("stages/s", {"stage": "s"})]
    arrays = []
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    for t in range(tasks):
        path = f"stages/s/task_{t:06d}"
        groups.append(
            GroupWrite(path, {"taskId": t, "owner": {"label": "expert", "id": t % 3}, "coreId": t}, task=True)
        )
        starts = {dim: draw(st.integers(-3, 1000)) for dim in dims}
        coords = {dim: np.arange(starts[dim], starts[dim] + lengths[dim], dtype=np.int64) for dim in dims}
        for position, name in enumerate(record_names):  # the k-th record of every task along the same dim
            dim = dims[position % len(dims)]
            arrays.append(
                ArrayWrite(
                    f"{path}/{name}",
                    rng.standard_normal((lengths[dim], 3)).astype(np.float32),
                    (dim, "hidden"),
                    {"name": name},
                    {dim: coords[dim]},
                )
            )
    return InvocationWrite(INV, {"invocationId": 0}, groups, arrays)


def _write(root: Path, invocation: InvocationWrite, pack: bool) -> Path:
    with WindowWriter(root, pack=pack, durable=False) as writer:
        writer.write_window(WindowWrite(0, 0, {"level": "L1"}, [invocation]))
    return root / "rank_0" / "window_0000"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(invocation=stages())
def test_row_bounds_are_the_tasks_layouts_coordinates(invocation):
    import xarray as xr

    base = Path(tempfile.mkdtemp())
    try:
        packed, plain = _write(base / "packs", invocation, True), _write(base / "tasks", invocation, False)
        packs = sorted(p for p in (packed / INV / "stages" / "s").glob("pack_*"))
        reserved = any(a.path.rpartition("/")[2] == "task_id" for a in invocation.arrays) or any(
            d == "statistic" for a in invocation.arrays for d in a.dims
        )
        assert (packs == []) == reserved  # a clashing record or dimension is never packed; the rest always is
        for pack in packs:
            tasks = stored_rows(packed, pack.relative_to(packed).as_posix())[0]
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                dataset = xr.open_zarr(str(pack))
            assert dataset.attrs["taskCount"] == len(tasks)
            for dim in tasks[0]["coords"]:
                start, stop = f"{dim}_start", f"{dim}_stop"
                assert dataset[start].dims == dataset[stop].dims == ("task",) and {start, stop} <= set(dataset.coords)
                for row, entry in enumerate(tasks):
                    stored = zarr.open_array(str(plain / INV / "stages" / "s" / entry["group"] / dim), mode="r")[...]
                    bounds = range(int(dataset[start].values[row]), int(dataset[stop].values[row]))
                    assert list(bounds) == stored.tolist()
        a, b = open_dump(base / "packs"), open_dump(base / "tasks")
        ra, rb = a.records(), b.records()
        assert ra["path"].tolist() == rb["path"].tolist()
        for path in ra["path"]:
            assert a.record_array(path).values.tobytes() == b.record_array(path).values.tobytes()
        report = verify_dump(a)
        assert report.ok, report.problems
    finally:
        shutil.rmtree(base, ignore_errors=True)
