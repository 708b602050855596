"""The segmented statistics pass (issue 26): every record's slot, reduced with others, is bit for bit
the per-record slot and the written-out definition (same machine, same run: bit equality is the claim).

The definition is spelled out here in plain Python (``reference``): counts, min/max over finite values
(a zero extreme is +0.0), the pairwise block-sum order of ``runtime.statistics.reference_sum`` for the
sum and the sum of squares, and the record digest of ``layout.digest.digest_of_bytes``.
"""

from __future__ import annotations

import math
import struct

from hypothesis import HealthCheck, given, settings, strategies as st
import numpy as np
import pytest
import torch

from megadump_zarr.layout.digest import digest_of_bytes
from megadump_zarr.l1 import L1_DUMP_PAYLOAD_BASE, pack_l1_buffer
from megadump_zarr.l1.reader import read_l1_statistics
from megadump_zarr.runtime.executor import DeviceWorker
from megadump_zarr.runtime.reductions import (
    BLOCK,
    StatisticsStager,
    dtype_code,
    reference_sum,
    segment_slots,
    staged,
    statistics_slot,
)

FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.float8_e4m3fn, torch.float8_e5m2]
INTS = [
    torch.bool,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.uint16,
    torch.int32,
    torch.uint32,
    torch.int64,
    torch.uint64,
]
SPECIALS = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0]
LENGTHS = st.one_of(st.sampled_from([0, 1, 2, 3, 127, 255, 256, 257, 511, 512, 513]), st.integers(0, 1400))


def make_values(dtype: torch.dtype, length: int, seed: int, special: str) -> torch.Tensor:
    """A record: random values of ``dtype``, salted with ``special`` ones (NaN, Inf, -0.0, all-NaN...)."""
    generator = torch.Generator().manual_seed(seed)
    base = torch.randn(length, generator=generator, dtype=torch.float64) * 10.0 ** (seed % 7 - 2)
    if dtype == torch.bool:
        return base > 0
    if not dtype.is_floating_point:
        if dtype in (torch.int64, torch.uint64):  # uint64: any 64-bit pattern (its high values wrap as int64)
            wide = torch.randint(-(2**63), 2**63 - 1, (length,), generator=generator, dtype=torch.int64)
            values = wide.view(dtype)
        else:
            info = torch.iinfo(dtype)
            values = (base * 1000).clamp(info.min, info.max).to(dtype)
        if special == "mixed" and length:  # the integer extremes
            info = torch.iinfo(torch.int64 if dtype == torch.uint64 else dtype)
            picks = torch.randint(0, length, (max(1, length // 9),), generator=generator)
            for i, pick in enumerate(picks.tolist()):
                values.view(torch.int64 if dtype == torch.uint64 else dtype)[pick] = (info.min, info.max)[i % 2]
        return values
    if special == "all-nan":
        return torch.full((length,), float("nan"), dtype=dtype)
    if special == "zeros":
        return torch.where(base > 0, 0.0, -0.0).to(dtype)
    if special == "tiny":  # subnormals of the dtype (and zeros where they underflow)
        return (base * torch.finfo(dtype).smallest_normal / 8).to(dtype)
    values = base.to(dtype)
    if special == "mixed" and length:
        picks = torch.randint(0, length, (max(1, length // 9),), generator=generator)
        for i, pick in enumerate(picks.tolist()):
            values[pick] = SPECIALS[i % len(SPECIALS)]
    return values


def reference(values: torch.Tensor) -> tuple:
    """The statistics of one record by the written definition, in plain Python."""
    dtype = values.dtype
    raw = values.contiguous().view(torch.uint8).numpy().tobytes() if values.numel() else b""
    if dtype.is_floating_point:
        numbers = values.to(torch.float64).tolist()
        finite = [math.isfinite(v) for v in numbers]
        nan = sum(1 for v in numbers if v != v)
        kept = [v if ok else 0.0 for v, ok in zip(numbers, finite)]
    else:
        numbers = values.to(torch.int64).tolist()
        finite = [True] * len(numbers)
        nan = 0
        kept = [float(v) for v in numbers]
    n_finite = sum(finite)
    inf = len(numbers) - n_finite - nan
    if n_finite:
        chosen = [v for v, ok in zip(numbers, finite) if ok]
        lo, hi = min(chosen), max(chosen)
        if dtype.is_floating_point:
            lo, hi = lo + 0.0, hi + 0.0
        mean = reference_sum(kept) / n_finite
        # the device's sqrt (torch's float64 sqrt need not be correctly rounded: it is what the slot holds)
        l2 = torch.sqrt(torch.tensor(reference_sum([v * v for v in kept]), dtype=torch.float64)).item()
    else:
        lo = hi = mean = l2 = None
    return (
        len(numbers),
        nan,
        inf,
        lo,
        hi,
        mean,
        l2,
        digest_of_bytes(raw, str(dtype).removeprefix("torch."), len(numbers)),
        len(raw),
    )


def _bits(value):
    return struct.pack("<d", value) if isinstance(value, float) else value


def exact(stats) -> tuple:
    """A decoded slot as comparable values: floats by their bits (so -0.0 != 0.0)."""
    return tuple(
        _bits(v)
        for v in (
            stats.element_count,
            stats.nan_count,
            stats.inf_count,
            stats.min,
            stats.max,
            stats.mean,
            stats.l2norm,
            stats.digest,
            stats.byte_count,
        )
    )


def expected(values: torch.Tensor) -> tuple:
    """:func:`reference` in the form of :func:`exact`."""
    return tuple(_bits(v) for v in reference(values))


def batch(records: list[torch.Tensor]) -> torch.Tensor:
    """The records of one dtype laid out as the stager does, one after another in staging rows."""
    return torch.cat([staged(r) for r in records]) if records else torch.zeros(0, BLOCK)


RECORD = st.tuples(LENGTHS, st.integers(0, 2**20), st.sampled_from(["plain", "mixed", "all-nan", "zeros", "tiny"]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from(FLOATS + INTS), records=st.lists(RECORD, min_size=1, max_size=6))
def test_segmented_slots_equal_the_per_record_slot_and_the_definition(dtype, records):
    values = [make_values(dtype, n, seed, special) for n, seed, special in records]
    slots = segment_slots(batch(values), [v.numel() for v in values])
    for i, v in enumerate(values):
        alone = statistics_slot(v)
        assert torch.equal(slots[i], alone), f"record {i} of {len(values)} ({dtype}, {v.numel()} elements)"
        assert exact(read_l1_statistics(slots[i].numpy())) == expected(v)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from(FLOATS + INTS), records=st.lists(RECORD, min_size=1, max_size=6))
def test_the_masked_path_of_other_devices_gives_the_cpu_paths_bits(dtype, records):
    # CUDA/NPU take the masked path for every row (no host sync); the CPU takes amin/amax and redoes the
    # rows with NaN, Inf or padding: the two must agree bit for bit
    values = [make_values(dtype, n, seed, special) for n, seed, special in records]
    rows, counts = batch(values), [v.numel() for v in values]
    assert torch.equal(segment_slots(rows, counts, masked=True), segment_slots(rows, counts, masked=False))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int32, torch.uint64])
@pytest.mark.parametrize("length", [1, 256, 300, 2048])
@pytest.mark.parametrize("special", ["plain", "mixed"])
def test_records_of_one_size_fold_by_reshape_to_the_definition(dtype, length, special):
    # equal-size records combine their rows by a reshape (no scatter): the same bits as the definition
    values = [make_values(dtype, length, seed, special) for seed in range(5)]
    counts = [length] * len(values)
    for masked in (False, True):
        slots = segment_slots(batch(values), counts, masked=masked)
        for i, v in enumerate(values):
            assert exact(read_l1_statistics(slots[i].numpy())) == expected(v), (i, masked)


def test_many_chunks_of_rows_give_every_record_its_own_slot():
    # more rows than one chunk (127 rows of float32 on CPU), a NaN in the last chunk only
    values = [make_values(torch.float32, 700, seed, "plain") for seed in range(60)]
    values[-1][5] = float("nan")
    slots = segment_slots(batch(values), [v.numel() for v in values])
    for i, v in enumerate(values):
        assert exact(read_l1_statistics(slots[i].numpy())) == expected(v), i


@pytest.mark.parametrize("dtype", FLOATS)
def test_special_values_by_the_definition(dtype):
    nan, inf = float("nan"), float("inf")
    cases = [
        ([], (0, 0, 0, None, None, None, None)),
        ([nan, nan], (2, 2, 0, None, None, None, None)),
        ([inf, -inf, nan], (3, 1, 2, None, None, None, None)),
        ([-0.0, -0.0], (2, 0, 0, 0.0, 0.0, 0.0, 0.0)),  # a zero extreme and a zero mean are +0.0
        ([1.0, inf, -2.0, nan], (4, 1, 1, -2.0, 1.0, -0.5, torch.tensor(5.0, dtype=torch.float64).sqrt().item())),
    ]
    has_inf = math.isinf(torch.tensor(inf).to(dtype).item())  # float8_e4m3fn has no Inf (it saturates)
    for values, want in cases:
        tensor = torch.tensor(values, dtype=torch.float64).to(dtype)
        stats = read_l1_statistics(statistics_slot(tensor).numpy())
        got = (stats.element_count, stats.nan_count, stats.inf_count, stats.min, stats.max, stats.mean, stats.l2norm)
        assert exact(stats) == expected(tensor), values
        if has_inf or inf not in values:
            assert got == want, values
        for value in got[3:]:
            assert value is None or math.copysign(1.0, value) == 1.0 or value != 0.0


def test_the_sum_order_is_the_pairwise_block_rule_not_left_to_right():
    # 1 + 1e16 - 1e16 ... : left to right loses the 1s; the block rule pairs element j with j + 128 first
    values = [1.0] * 3 + [1e16, -1e16] * 2 + [0.5] * 300
    ordered = reference_sum(values)
    left_to_right = 0.0
    for v in values:
        left_to_right += v
    assert ordered != left_to_right
    stats = read_l1_statistics(statistics_slot(torch.tensor(values, dtype=torch.float64)).numpy())
    assert stats.mean == ordered / len(values)


def test_records_in_other_rows_and_dtypes_do_not_change_a_slot():
    target = make_values(torch.float32, 1000, 5, "mixed")
    alone = statistics_slot(target)
    for neighbours in ([0], [1, 600], [256, 3, 0, 2048]):
        others = [make_values(torch.float32, n, n + 1, "mixed") for n in neighbours]
        slots = segment_slots(batch(others + [target]), [v.numel() for v in others + [target]])
        assert torch.equal(slots[-1], alone)


def test_the_stager_flushes_when_full_and_reduces_a_huge_record_alone():
    stager = StatisticsStager(torch.device("cpu"), capacity=BLOCK * 4 * 4)  # four float32 rows
    records = [make_values(torch.float32, n, n, "mixed") for n in (300, 200, 600, 2000, 10)]
    done = []
    for i, values in enumerate(records):
        done += stager.stage(torch.float32, values.view(torch.uint8), i)
    assert stager.pending() == 2  # 600 after a flush, then 10 (2000 was reduced alone)
    done += stager.flush()
    assert stager.pending() == 0
    slots = {tag: slot for tags, group in done for tag, slot in zip(tags, group)}
    assert sorted(slots) == [0, 1, 2, 3, 4]
    for i, values in enumerate(records):
        assert torch.equal(slots[i], statistics_slot(values))


def test_the_stager_refuses_a_tiny_capacity():
    with pytest.raises(ValueError, match="statistics staging capacity must be at least 2048 bytes, got 16"):
        StatisticsStager(torch.device("cpu"), capacity=16)


def test_segment_slots_refuse_staging_of_the_wrong_shape():
    with pytest.raises(ValueError, match=r"statistics staging holds \(1, 256\) values, the records need \[2, 256\]"):
        segment_slots(torch.zeros(1, BLOCK), [300])


def _stats_entry(index: int, offset: int, nbytes: int, code: int, source: int):
    from megadump_zarr.l1 import L1RecordEntry

    return L1RecordEntry(
        task_id=index,
        phase=2,
        parameter_position=index % 3,
        source_offset_bytes=source,
        payload_offset=offset,
        payload_bytes=128,
        status=0,
        task_index=index,
        worker_id=0xFFFFFFFF,
        kind=1,
        dtype_code=code,
        source_bytes=nbytes,
        tensor_offset=0,
        tensor_bytes=0,
    )


def test_the_device_worker_writes_every_slot_of_a_mixed_dtype_launch():
    params = [
        make_values(torch.float32, 3000, 1, "mixed"),
        make_values(torch.bfloat16, 2000, 2, "mixed"),
        make_values(torch.int16, 1500, 3, "plain"),
    ]
    spans = [(0, 0, 1000), (1, 0, 700), (2, 0, 1500), (3, 1000, 2000), (4, 700, 1300), (5, 0, 0)]
    entries, pieces = [], []
    for index, start, stop in spans:
        param = params[index % 3]
        size = param.element_size()
        entries.append(
            _stats_entry(
                index, L1_DUMP_PAYLOAD_BASE + 128 * index, (stop - start) * size, dtype_code(param.dtype), start * size
            )
        )
        pieces.append(param[start:stop].clone())
    buffer = torch.frombuffer(pack_l1_buffer(entries), dtype=torch.uint8).clone()
    worker = DeviceWorker(buffer, params)
    for index, _, _ in spans:
        worker.capture(index, 2, None)
    for i in range(3):  # the boundary passed: the sources change, the staged copies do not
        params[i].zero_()
    worker.flush()
    for index, piece in enumerate(pieces):
        at = L1_DUMP_PAYLOAD_BASE + 128 * index
        assert torch.equal(buffer[at : at + 88], statistics_slot(piece)[:88]), index
        assert exact(read_l1_statistics(buffer[at : at + 128].numpy())) == expected(piece)
    status = np.frombuffer(bytes(buffer[64 : 64 + 64 * len(spans)].numpy()), dtype=np.uint8).reshape(-1, 64)[:, 28]
    assert status.tolist() == [1] * len(spans)


def test_the_device_worker_reads_a_parameter_replaced_or_resized_after_it_was_built():
    # a statistics record's source view is checked once; a parameter swapped in the list, or given new
    # memory in place, is read (and checked) again, never through the stale view
    params = [make_values(torch.float32, 1000, 1, "plain"), make_values(torch.float32, 1000, 2, "plain")]
    entries = [_stats_entry(i, L1_DUMP_PAYLOAD_BASE + 128 * i, 400 * 4, dtype_code(torch.float32), 0) for i in (0, 1)]
    buffer = torch.frombuffer(pack_l1_buffer(entries), dtype=torch.uint8).clone()
    worker = DeviceWorker(buffer, params)
    params[0] = make_values(torch.float32, 1000, 3, "mixed")  # another tensor in the list
    params[1].set_(make_values(torch.float32, 1000, 4, "plain"))  # the same tensor over new memory
    worker.capture(0, 2, None)
    worker.capture(1, 2, None)
    worker.flush()
    for i in (0, 1):
        at = L1_DUMP_PAYLOAD_BASE + 128 * i
        assert exact(read_l1_statistics(buffer[at : at + 128].numpy())) == expected(params[i][:400]), i


def test_the_device_worker_refuses_a_statistics_source_of_partial_elements_before_any_task():
    params = [torch.zeros(100, dtype=torch.float32)]
    entries = [_stats_entry(0, L1_DUMP_PAYLOAD_BASE, 10, dtype_code(torch.float32), 0)]
    buffer = torch.frombuffer(pack_l1_buffer(entries), dtype=torch.uint8).clone()
    with pytest.raises(RuntimeError, match=r"refused record 0 \(task 0\): 10 source bytes at offset 0 are not whole"):
        DeviceWorker(buffer, params)


def test_a_released_stager_hands_its_cpu_buffer_to_the_next_and_refuses_while_records_wait():
    values = make_values(torch.float32, 300, 1, "mixed")
    first = StatisticsStager(torch.device("cpu"), expected={torch.float32: [300, 5]})
    first.stage(torch.float32, values.view(torch.uint8), "a")
    with pytest.raises(RuntimeError, match="statistics stager released with 1 records not reduced"):
        first.release()
    ((tags, slots),) = first.flush()
    buffer = first._groups[torch.float32].buffer
    first.release()
    second = StatisticsStager(torch.device("cpu"), expected={torch.float32: [300, 5]})
    short = make_values(torch.float32, 5, 2, "plain")
    second.stage(torch.float32, short.view(torch.uint8), "b")  # reuses the buffer: stale bytes after it
    assert second._groups[torch.float32].buffer is buffer
    ((_, again),) = second.flush()
    assert torch.equal(slots[0], statistics_slot(values)) and torch.equal(again[0], statistics_slot(short))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dtype=st.sampled_from(FLOATS + INTS), records=st.lists(RECORD, min_size=1, max_size=6))
def test_every_cpu_op_size_gives_the_same_bits(dtype, records):
    # the process times its first large passes at each candidate op size and keeps the fastest: which one it
    # keeps must not change a bit (each staging row is reduced on its own); small sizes split the rows the most
    from megadump_zarr.runtime import reduction_rows

    values = [make_values(dtype, n, seed, special) for n, seed, special in records]
    rows, counts = batch(values), [v.numel() for v in values]
    saved = reduction_rows._CHOICE.chosen
    try:
        slots = []
        for size in (BLOCK, 4 * BLOCK, *reduction_rows._CPU_CHUNKS):
            reduction_rows._CHOICE.chosen = size
            slots.append(segment_slots(rows, counts))
    finally:
        reduction_rows._CHOICE.chosen = saved
    assert all(torch.equal(s, slots[0]) for s in slots[1:])
    for i, v in enumerate(values):
        assert exact(read_l1_statistics(slots[0][i].numpy())) == expected(v)


def test_the_op_size_is_chosen_by_timing_the_first_large_passes(monkeypatch):
    from megadump_zarr.runtime import reduction_rows

    choice = reduction_rows._ChunkChoice()
    monkeypatch.setattr(reduction_rows, "_CHOICE", choice)
    small = torch.zeros(8, BLOCK)
    segment_slots(small, [small.numel()])  # too small to time: the default size, nothing recorded
    assert choice.chosen is None and choice.size(small.numel()) == reduction_rows._CPU_CHUNK
    large = torch.randn(reduction_rows._TIMED_ELEMENTS // BLOCK, BLOCK)
    tried = []
    for _ in range(len(reduction_rows._CPU_CHUNKS) * reduction_rows._TRIES):
        tried.append(choice.size(large.numel()))
        segment_slots(large, [BLOCK] * large.shape[0])
    assert sorted(tried) == sorted(reduction_rows._CPU_CHUNKS * reduction_rows._TRIES)  # each tried, in turn
    assert choice.chosen in reduction_rows._CPU_CHUNKS and choice.size(1) == choice.chosen
    masked_only = reduction_rows._ChunkChoice()
    monkeypatch.setattr(reduction_rows, "_CHOICE", masked_only)
    segment_slots(large, [BLOCK] * large.shape[0], masked=True)  # the masked path does not time the cheap one's
    assert all(not times for times in masked_only._timed.values())
