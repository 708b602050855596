"""Placed statistics staging (issue 26): records laid out when the device worker is built, staged by one
copy each, reduced in one pass per dtype. Every slot must be bit for bit the per-record slot
(:func:`statistics_slot`) and the written definition (``reference`` of test_statistics_segmented),
whatever subset of the records was staged, in whatever order, some twice; same machine, same run.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st
import pytest
import torch

from megadump_zarr.l1 import L1_DUMP_PAYLOAD_BASE, pack_l1_buffer
from megadump_zarr.l1.reader import read_l1_statistics
from megadump_zarr.runtime import reduction_rows
from megadump_zarr.runtime.executor import DeviceWorker
from megadump_zarr.runtime.placed_staging import PlacedStager
from megadump_zarr.runtime.reductions import BLOCK, dtype_code, segment_slots, statistics_slot
from tests.dump.test_statistics_segmented import _stats_entry, batch, exact, expected, make_values

DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.int8,
    torch.int32,
    torch.int64,
    torch.bool,
    torch.uint8,
]
SPECIAL = st.sampled_from(["plain", "mixed", "all-nan", "zeros", "tiny"])
LENGTH = st.one_of(st.sampled_from([0, 1, 255, 256, 257, 512, 513, 2048]), st.integers(0, 1300))
RECORD = st.tuples(st.sampled_from(DTYPES), LENGTH, st.integers(0, 2**20), SPECIAL)


def _slots(done: list[tuple[list[object], torch.Tensor]]) -> dict[object, torch.Tensor]:
    return {tag: slot for tags, slots in done for tag, slot in zip(tags, slots)}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(RECORD, min_size=1, max_size=8), data=st.data())
def test_placed_slots_equal_the_per_record_slot_and_the_definition(records, data):
    values = [make_values(dtype, n, seed, special) for dtype, n, seed, special in records]
    stager = PlacedStager(torch.device("cpu"), [(v.dtype, v.numel(), i) for i, v in enumerate(values)])
    order = data.draw(st.lists(st.integers(0, len(values) - 1), max_size=12), label="staging order")
    for i in order:  # any subset, any order, some twice (a record staged twice keeps its last bytes)
        stager.stage(stager.place(i), values[i].view(torch.uint8) if values[i].numel() else values[i])
    assert stager.pending() == len(set(order))
    slots = _slots(stager.flush())
    assert sorted(slots) == sorted(set(order))
    for i in slots:
        v = values[i]
        assert torch.equal(slots[i], statistics_slot(v)), f"record {i} ({v.dtype}, {v.numel()} elements)"
        assert exact(read_l1_statistics(slots[i].numpy())) == expected(v)
    assert stager.pending() == 0
    stager.release()


def test_stale_bytes_of_a_reused_buffer_never_reach_a_slot():
    # the first stager leaves NaNs in every byte of its buffer; the next, of the same size, laid out for
    # records with padding, must read its padded rows as zeros and its records as staged
    first = PlacedStager(torch.device("cpu"), [(torch.float32, 3 * BLOCK, "a")])
    nans = torch.full((3 * BLOCK,), float("nan"))
    first.stage(first.place(0), nans.view(torch.uint8))
    first.flush()
    first.release()
    records = [make_values(torch.float32, n, n, "plain") for n in (300, 5, 200)]  # 2 + 1 rows: 3 rows too
    second = PlacedStager(torch.device("cpu"), [(torch.float32, v.numel(), i) for i, v in enumerate(records)])
    for i, v in enumerate(records):
        second.stage(second.place(i), v.view(torch.uint8))
    slots = _slots(second.flush())
    for i, v in enumerate(records):
        assert exact(read_l1_statistics(slots[i].numpy())) == expected(v), i


def test_a_dtype_over_the_capacity_is_not_placed_and_release_unplaces_all():
    stager = PlacedStager(
        torch.device("cpu"),
        [(torch.float32, 3 * BLOCK, "big"), (torch.int8, 10, "small")],
        capacity=2 * BLOCK * 4,
    )
    assert stager.place(0) is None and stager.place(1) is not None
    stager.stage(stager.place(1), torch.arange(10, dtype=torch.int8).view(torch.uint8))
    with pytest.raises(RuntimeError, match="placed statistics staging released with 1 records not reduced"):
        stager.release()
    ((tags, _),) = stager.flush()
    assert tags == ["small"]
    stager.release()
    assert stager.place(1) is None


def test_passes_over_many_chunks_give_the_definition():
    # more staging rows than one CPU chunk, NaN/Inf rows in several chunks (the cheap path's redo)
    rows_per_chunk = reduction_rows._CPU_CHUNK // BLOCK
    values = [make_values(torch.float32, 700, seed, "plain") for seed in range(rows_per_chunk + 40)]
    for i in (0, rows_per_chunk // 3, rows_per_chunk + 7):
        values[i][i % 700] = float("nan") if i % 2 else float("inf")
    rows, counts = batch(values), [v.numel() for v in values]
    assert rows.shape[0] > 2 * rows_per_chunk
    slots = segment_slots(rows, counts)
    assert torch.equal(slots, segment_slots(rows, counts, masked=True))
    for i in sorted({0, 1, rows_per_chunk // 3, rows_per_chunk, rows_per_chunk + 7, len(values) - 1}):
        assert exact(read_l1_statistics(slots[i].numpy())) == expected(values[i]), i


def test_the_device_worker_stages_a_parameter_replaced_after_it_was_built_into_its_placed_rows():
    params = [make_values(torch.float32, 1000, 1, "plain"), make_values(torch.bfloat16, 1000, 2, "mixed")]
    entries = [
        _stats_entry(i, L1_DUMP_PAYLOAD_BASE + 128 * i, 300 * params[i % 2].element_size(), code, 0)
        for i, code in enumerate((dtype_code(torch.float32), dtype_code(torch.bfloat16)))
    ]
    buffer = torch.frombuffer(pack_l1_buffer(entries), dtype=torch.uint8).clone()
    worker = DeviceWorker(buffer, params)
    params[1] = make_values(torch.bfloat16, 1000, 3, "mixed")  # read (and checked) again at its boundary
    for i in (0, 1):
        worker.capture(i, 2, None)
    worker.flush()
    for i in (0, 1):
        at = L1_DUMP_PAYLOAD_BASE + 128 * i
        assert exact(read_l1_statistics(buffer[at : at + 128].numpy())) == expected(params[i][:300]), i
    # after the flush the worker's placed rows are handed back: a later boundary stages through the stager
    params[0][:300] = 7.0
    worker.capture(0, 2, None)
    worker.flush()
    at = L1_DUMP_PAYLOAD_BASE
    assert exact(read_l1_statistics(buffer[at : at + 128].numpy())) == expected(params[0][:300])
