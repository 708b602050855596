"""The Device buffer ABI's statistics records (version 3) and statistics slot (layout 2), byte by byte."""

from __future__ import annotations

import re
import struct

import pytest
import torch

from megadump_zarr.l1 import L1_ANY_WORKER, L1_DUMP_PAYLOAD_BASE, L1RecordEntry, pack_l1_buffer, read_l1_buffer
from megadump_zarr.l1.format import (
    L1_DTYPE_CODES,
    L1_RECORD_KIND_STATISTICS,
    L1_RECORD_KIND_STATISTICS_AND_TENSOR,
    L1_STATISTICS_SLOT_SIZE,
    STATISTICS_STRUCT,
)
from megadump_zarr.layout.digest import digest_of_bytes
from megadump_zarr.l1.reader import read_l1_statistics
from megadump_zarr.runtime.executor import DeviceWorker
from megadump_zarr.runtime.reductions import dtype_code, statistics_slot

BASE = L1_DUMP_PAYLOAD_BASE


def tensor_entry(i: int, offset: int, size: int) -> L1RecordEntry:
    return L1RecordEntry(
        task_id=i,
        phase=2,
        parameter_position=0,
        source_offset_bytes=0,
        payload_offset=offset,
        payload_bytes=size,
        status=0,
        task_index=i,
        worker_id=L1_ANY_WORKER,
    )


def stats_entry(
    i: int,
    offset: int,
    *,
    source_bytes: int,
    code: int = 12,
    tensor: tuple[int, int] | None = None,
    source_offset: int = 0,
) -> L1RecordEntry:
    kind = L1_RECORD_KIND_STATISTICS if tensor is None else L1_RECORD_KIND_STATISTICS_AND_TENSOR
    t_off, t_bytes = tensor or (0, 0)
    return L1RecordEntry(
        task_id=i,
        phase=2,
        parameter_position=0,
        source_offset_bytes=source_offset,
        payload_offset=offset,
        payload_bytes=L1_STATISTICS_SLOT_SIZE,
        status=0,
        task_index=i,
        worker_id=L1_ANY_WORKER,
        kind=kind,
        dtype_code=code,
        source_bytes=source_bytes,
        tensor_offset=t_off,
        tensor_bytes=t_bytes,
    )


def test_tensor_only_buffer_stays_version_2_and_padding_zero():
    buffer = pack_l1_buffer([tensor_entry(0, BASE, 100), tensor_entry(1, BASE + 128, 8)])
    assert struct.unpack_from("<2I", buffer, 0) == (0x4C314450, 2)
    for record in range(2):
        assert bytes(buffer[64 + record * 64 + 40 : 64 + record * 64 + 64]) == bytes(24)


def test_statistics_record_bytes():
    source = (5 << 32) + 7
    entries = [
        stats_entry(3, BASE, source_bytes=source, code=11, tensor=(BASE + 256, 4096), source_offset=64),
        stats_entry(4, BASE + 128, source_bytes=96, code=8),
    ]
    buffer = pack_l1_buffer(entries)
    header = struct.unpack_from("<8I", buffer, 0)
    assert header == (0x4C314450, 3, 1, 2, 64, 64, BASE, BASE + 256 + 4096)
    first = bytes(buffer[64:128])
    assert struct.unpack("<10I", first[:40]) == (3, 2, 0, 64, 0, BASE, 128, 0, 3, 0xFFFFFFFF)
    # the extension words: kind, dtype_code, source bytes low/high, tensor offset, tensor bytes
    assert struct.unpack("<6I", first[40:]) == (2, 11, 7, 5, BASE + 256, 4096)
    second = bytes(buffer[128:192])
    assert struct.unpack("<6I", second[40:]) == (1, 8, 96, 0, 0, 0)
    decoded = read_l1_buffer(buffer)
    assert [r.entry for r in decoded.records] == entries
    assert decoded.records[0].copy_bytes == source and decoded.records[1].payload.nbytes == 128


@pytest.mark.parametrize(
    "change, message",
    [
        ({"kind": 5}, "invalid kind 5"),
        ({"dtype_code": 99}, "unknown dtype_code 99"),
        ({"payload_bytes": 64}, "statistics slot payload_bytes=64 must be 128"),
        ({"tensor_bytes": 8}, "without a tensor slot but sets tensor_offset/tensor_bytes"),
    ],
)
def test_packer_refuses_bad_statistics_entries(change, message):
    entry = stats_entry(0, BASE, source_bytes=16)
    bad = L1RecordEntry(**{**entry.__dict__, **change})
    with pytest.raises(ValueError, match=re.escape(message)):
        pack_l1_buffer([bad])


def test_packer_refuses_tensor_slot_overlapping_a_statistics_slot():
    entries = [
        stats_entry(0, BASE, source_bytes=256, tensor=(BASE + 128, 256)),
        stats_entry(1, BASE + 128, source_bytes=8),
    ]
    with pytest.raises(ValueError, match="overlapping payload slots"):
        pack_l1_buffer(entries)


def test_packer_refuses_statistics_fields_on_a_tensor_record():
    bad = L1RecordEntry(**{**tensor_entry(0, BASE, 8).__dict__, "dtype_code": 12})
    with pytest.raises(ValueError, match=re.escape("is a tensor record but sets statistics fields ['dtype_code']")):
        pack_l1_buffer([bad])


@pytest.mark.parametrize(
    "offset, value, message",
    [
        (40, 7, "has invalid kind 7"),
        (44, 0, "unknown dtype_code 0"),
        (56, 64, "tensor slot but kind 1"),
    ],
)
def test_reader_refuses_corrupt_extension(offset, value, message):
    buffer = pack_l1_buffer([stats_entry(0, BASE, source_bytes=16)])
    struct.pack_into("<I", buffer, 64 + offset, value)
    with pytest.raises(ValueError, match=re.escape(message)):
        read_l1_buffer(buffer)


def test_reader_refuses_version_3_without_statistics_record():
    buffer = pack_l1_buffer([tensor_entry(0, BASE, 8)])
    struct.pack_into("<I", buffer, 4, 3)
    with pytest.raises(ValueError, match="a version-3 buffer must hold a statistics record"):
        read_l1_buffer(buffer)


def test_partial_read_needs_only_the_statistics_prefix():
    buffer = pack_l1_buffer([stats_entry(0, BASE, source_bytes=4096, tensor=(BASE + 128, 4096))])
    prefix = bytes(buffer[: BASE + 128])
    with pytest.raises(ValueError, match="shorter than total_bytes"):
        read_l1_buffer(prefix)
    assert read_l1_buffer(prefix, partial=True).records[0].tensor_bytes == 4096


def digest_reference(values: torch.Tensor) -> int:
    raw = values.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    return digest_of_bytes(raw, str(values.dtype).removeprefix("torch."), values.numel())


def test_device_worker_writes_the_statistics_slot_field_by_field():
    values = torch.tensor([[1.5, -2.0, float("nan")], [float("inf"), 4.0, 0.25]], dtype=torch.float32)
    parameter = values.clone()
    source_offset = 0
    entries = [
        stats_entry(
            0,
            BASE,
            source_bytes=values.numel() * 4,
            code=dtype_code(torch.float32),
            tensor=(BASE + 128, 12),
            source_offset=source_offset,
        )
    ]
    buffer = torch.frombuffer(pack_l1_buffer(entries), dtype=torch.uint8).clone()
    worker = DeviceWorker(buffer, [parameter])
    worker.capture(0, 2, None)
    worker.flush()  # kind 1/2 slots are written by the segmented pass
    slot = bytes(buffer[BASE : BASE + 128].numpy())
    version, flags = struct.unpack_from("<II", slot, 0)
    assert (version, flags) == (2, 1 | 4 | 8)  # valid, has a finite element, tensor copied
    assert struct.unpack_from("<QQQ", slot, 8) == (6, 1, 1)
    assert struct.unpack_from("<dddd", slot, 32) == (
        -2.0,
        4.0,
        (1.5 - 2.0 + 4.0 + 0.25) / 4,
        (1.5**2 + 4.0 + 16.0 + 0.0625) ** 0.5,
    )
    assert struct.unpack_from("<QQ", slot, 64) == (digest_reference(values), 24)
    assert slot[80:] == bytes(48)
    assert (
        bytes(buffer[BASE + 128 : BASE + 140].numpy()) == values.numpy().tobytes()[:12]
    )  # prefix into the tensor slot
    assert buffer[64 + 28].item() == 1  # CAPTURED
    assert STATISTICS_STRUCT.unpack(slot)[9] == digest_reference(values)


@pytest.mark.parametrize(
    "dtype",
    [
        torch.bool,
        torch.int8,
        torch.uint8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.float8_e4m3fn,
    ],
)
def test_slot_statistics_and_digest_for_every_dtype(dtype):
    generator = torch.Generator().manual_seed(3)
    base = torch.randn(7, 5, generator=generator) * 20
    values = base > 0 if dtype == torch.bool else base.to(dtype)
    stats = read_l1_statistics(statistics_slot(values).numpy())
    reference = values.to(torch.float64) if values.dtype != torch.bool else values.to(torch.int64)
    assert stats.element_count == 35 and stats.nan_count == 0 and stats.inf_count == 0
    assert stats.min == reference.min().item() and stats.max == reference.max().item()
    assert stats.mean == pytest.approx(reference.double().mean().item(), rel=1e-12)
    assert stats.l2norm == pytest.approx(reference.double().norm().item(), rel=1e-12)
    raw = (
        values.contiguous().view(torch.uint8).numpy().tobytes()
        if values.element_size() == 1
        else values.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    )
    assert stats.digest == digest_reference(values) and stats.byte_count == len(raw)
    assert isinstance(stats.min, int) == (not dtype.is_floating_point)


def test_digest_sees_a_single_bit_and_an_empty_tensor():
    values = torch.arange(1000, dtype=torch.float32)
    flipped = values.clone()
    flipped.view(torch.int32)[999] ^= 1
    assert (
        read_l1_statistics(statistics_slot(values).numpy()).digest
        != read_l1_statistics(statistics_slot(flipped).numpy()).digest
    )
    empty = read_l1_statistics(statistics_slot(torch.empty(0)).numpy())
    assert (empty.element_count, empty.min, empty.mean) == (0, None, None)
    assert empty.digest == digest_of_bytes(b"", "float32", 0) != 0


def test_all_nan_has_no_finite_statistics():
    stats = read_l1_statistics(statistics_slot(torch.full((4,), float("nan"))).numpy())
    assert (stats.nan_count, stats.min, stats.max, stats.mean, stats.l2norm) == (4, None, None, None, None)


def test_dtype_codes_name_torch_dtypes():
    for code, name in L1_DTYPE_CODES.items():
        assert dtype_code(getattr(torch, name)) == code


def test_devices_without_float64_give_the_same_slot_layout(monkeypatch):
    import megadump_zarr.runtime.reductions as device_statistics

    values = torch.randn(64, 3, generator=torch.Generator().manual_seed(5))
    values[3, 1] = float("-inf")
    exact = read_l1_statistics(statistics_slot(values).numpy())
    monkeypatch.setattr(device_statistics, "_has_float64", lambda device: False)  # NPU/MPS: float32 reductions
    narrow = read_l1_statistics(statistics_slot(values).numpy())
    assert (narrow.min, narrow.max, narrow.inf_count, narrow.digest) == (exact.min, exact.max, 1, exact.digest)
    assert narrow.mean == pytest.approx(exact.mean, rel=1e-5) and narrow.l2norm == pytest.approx(exact.l2norm, rel=1e-6)
    ints = read_l1_statistics(statistics_slot(torch.arange(-5, 7, dtype=torch.int32)).numpy())
    assert (ints.min, ints.max, ints.mean) == (-5, 6, 0.5)


# --------------------------------------------------------------------------- conditional records and the pool
def pool_entry(i: int, offset: int, kind: int, tensor_bytes: int, source_offset: int = 0) -> L1RecordEntry:
    return L1RecordEntry(
        task_id=i,
        phase=2,
        parameter_position=0,
        source_offset_bytes=source_offset,
        payload_offset=offset,
        payload_bytes=128,
        status=0,
        task_index=i,
        worker_id=L1_ANY_WORKER,
        kind=kind,
        dtype_code=12,
        source_bytes=tensor_bytes,
        tensor_bytes=tensor_bytes,
    )


def test_pool_header_and_conditional_record_bytes():
    pool = (BASE + 256, 4096)
    buffer = pack_l1_buffer([pool_entry(0, BASE, 3, 64), pool_entry(1, BASE + 128, 4, 64, 64)], pool=pool)
    assert struct.unpack_from("<8I", buffer, 0)[1] == 3 and struct.unpack_from("<8I", buffer, 0)[7] == BASE + 256 + 4096
    assert struct.unpack_from("<4I", buffer, 32) == (BASE + 256, 4096, 0, 0)
    assert struct.unpack_from("<6I", buffer, 64 + 40) == (3, 12, 64, 0, 0, 64)
    assert struct.unpack_from("<6I", buffer, 128 + 40) == (4, 12, 64, 0, 0, 64)
    assert len(read_l1_buffer(buffer).records) == 2


@pytest.mark.parametrize(
    "entries, pool, message",
    [
        ([(3, 64)], None, "need a tensor pool"),
        ([(1, 0)], (BASE + 256, 64), "given but no entry has kind 3 or 4"),
        ([(3, 64)], (BASE + 64, 64), "must be 64-byte aligned and at or after the last slot's end"),
    ],
)
def test_packer_refuses_a_bad_pool(entries, pool, message):
    built = [
        pool_entry(i, BASE + 128 * i, kind, size) if kind != 1 else stats_entry(i, BASE + 128 * i, source_bytes=8)
        for i, (kind, size) in enumerate(entries)
    ]
    with pytest.raises(ValueError, match=re.escape(message)):
        pack_l1_buffer(built, pool=pool)


def test_reader_refuses_a_pool_outside_the_buffer():
    buffer = pack_l1_buffer([pool_entry(0, BASE, 3, 64)], pool=(BASE + 128, 64))
    struct.pack_into("<I", buffer, 36, 1 << 20)  # pool_bytes past total_bytes
    with pytest.raises(ValueError, match="tensor pool .* is misplaced"):
        read_l1_buffer(buffer)


def pooled_worker(values: list[torch.Tensor], kind: int, pool_bytes: int, expected: list[int | None] | None = None):
    """One record per tensor (task i, output), of ``kind``, over a parameter holding them all."""
    parameter = torch.cat([v.reshape(-1) for v in values])
    entries, offset = [], 0
    for i, v in enumerate(values):
        entries.append(pool_entry(i, BASE + 128 * i, kind, v.numel() * 4, offset * 4))
        offset += v.numel()
    pool_offset = BASE + 128 * len(values)
    buffer = torch.frombuffer(pack_l1_buffer(entries, pool=(pool_offset, pool_bytes)), dtype=torch.uint8).clone()
    for i, digest in enumerate(expected or []):
        if digest is not None:
            buffer[BASE + 128 * i + 88 : BASE + 128 * i + 96] = torch.tensor([digest], dtype=torch.int64).view(
                torch.uint8
            )
            buffer[BASE + 128 * i + 96] = 1
    worker = DeviceWorker(buffer, [parameter])
    for i in range(len(values)):
        worker.capture(i, 2, None)
    slots = [read_l1_statistics(buffer[BASE + 128 * i : BASE + 128 * (i + 1)].numpy()) for i in range(len(values))]
    return buffer, slots, pool_offset


def test_the_device_copies_only_non_finite_tensors_into_the_pool():
    values = [torch.ones(16), torch.full((16,), float("nan")), torch.zeros(16), torch.tensor([float("inf")] * 16)]
    buffer, slots, pool = pooled_worker(values, 3, 4096)
    assert [s.tensor_copied for s in slots] == [False, True, False, True]
    assert [s.tensor_offset for s in slots] == [0, pool, 0, pool + 64]
    assert struct.unpack_from("<I", bytes(buffer[40:44].numpy()))[0] == 128  # pool_used: two 64-byte tensors
    assert torch.isnan(buffer[pool : pool + 64].view(torch.float32)).all()
    assert torch.isinf(buffer[pool + 64 : pool + 128].view(torch.float32)).all()


def test_a_full_pool_keeps_statistics_and_says_so():
    values = [torch.full((16,), float("nan")), torch.full((16,), float("nan"))]
    buffer, slots, pool = pooled_worker(values, 3, 64)
    assert [s.tensor_copied for s in slots] == [True, False] and [s.pool_full for s in slots] == [False, True]
    assert slots[1].nan_count == 16  # the statistics are there all the same


def signed(digest: int) -> int:
    return digest - (1 << 64) if digest >= 1 << 63 else digest


def test_the_device_copies_only_tensors_whose_digest_changed():
    values = [torch.arange(16.0), torch.arange(16.0) + 1, torch.arange(16.0) + 2]
    reference = [read_l1_statistics(statistics_slot(v).numpy()).digest for v in values]
    expected = [signed(reference[0]), signed(reference[1] ^ 1), None]  # same, changed, no baseline
    buffer, slots, pool = pooled_worker(values, 4, 4096, expected)
    assert [s.tensor_copied for s in slots] == [False, True, True]
    assert [s.digest for s in slots] == reference
    assert bytes(buffer[BASE + 88 : BASE + 97].numpy()) == struct.pack(
        "<qB", expected[0], 1
    )  # the device left it alone
