"""The record digest (``layout.digest``): torch on the device and numpy on the host give the same 64 bits,
and structured changes of a tensor (swaps, permutations, sign flips, +0/-0, NaN payloads, one flipped bit,
rows swapped in a one-hot routing tensor) never keep it."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings, strategies as st
import ml_dtypes
import numpy as np
import pytest
import torch

from megadump_zarr.l1.reader import read_l1_statistics
from megadump_zarr.layout.digest import DIGEST_DTYPE_CODES, digest_of_array, digest_of_bytes, fmix64
from megadump_zarr.runtime.digest import fmix64_, signed
from megadump_zarr.runtime.reductions import segment_slots, staged, statistics_slot

DTYPES = {
    "float32": (torch.float32, np.float32),
    "float16": (torch.float16, np.float16),
    "bfloat16": (torch.bfloat16, ml_dtypes.bfloat16),
    "float8_e4m3fn": (torch.float8_e4m3fn, ml_dtypes.float8_e4m3fn),
    "float8_e5m2": (torch.float8_e5m2, ml_dtypes.float8_e5m2),
    "float64": (torch.float64, np.float64),
    "int8": (torch.int8, np.int8),
    "uint8": (torch.uint8, np.uint8),
    "int16": (torch.int16, np.int16),
    "int32": (torch.int32, np.int32),
    "int64": (torch.int64, np.int64),
    "bool": (torch.bool, np.bool_),
}
"""Every dtype megadump stores, torch and numpy spellings."""
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def device_digest(values: torch.Tensor) -> int:
    """The digest the device writes into the record's statistics slot (u64)."""
    return read_l1_statistics(statistics_slot(values).numpy()).digest


def host_digest(values: torch.Tensor) -> int:
    """The digest of the same bytes by the numpy definition."""
    raw = values.contiguous().reshape(-1).view(torch.uint8).numpy()
    return digest_of_bytes(raw, str(values.dtype).removeprefix("torch."), values.numel())


def random_bits(name: str, count: int, seed: int) -> torch.Tensor:
    """``count`` elements of ``name`` with random bits (NaNs with any payload included)."""
    dtype, np_dtype = DTYPES[name]
    rng = np.random.default_rng(seed)
    if count == 0:
        return torch.empty(0, dtype=dtype)
    if name == "bool":
        return torch.from_numpy(rng.integers(0, 2, count).astype(bool))
    size = np.dtype(np_dtype).itemsize
    raw = rng.integers(0, 256, count * size, dtype=np.uint8)
    return torch.from_numpy(raw.copy()).view(dtype)


@pytest.mark.parametrize("name", list(DTYPES))
@pytest.mark.parametrize("count", [0, 1, 3, 7, 255, 256, 257, 1000, 4099])
def test_torch_and_numpy_agree_bit_for_bit(name, count):
    values = random_bits(name, count, seed=count)
    assert device_digest(values) == host_digest(values)
    _, np_dtype = DTYPES[name]
    array = values.view(torch.uint8).numpy().view(np_dtype) if name != "bool" else values.numpy()
    assert digest_of_array(array, name) == host_digest(values)


@SETTINGS
@given(
    name=st.sampled_from(list(DTYPES)),
    counts=st.lists(st.integers(0, 700), min_size=1, max_size=6),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_record_reduced_with_others_has_its_own_digest(name, counts, seed):
    records = [random_bits(name, n, seed + i) for i, n in enumerate(counts)]
    rows = torch.cat([staged(r) for r in records])
    for masked in (False, True):
        slots = segment_slots(rows, counts, masked=masked).numpy()
        assert [read_l1_statistics(s).digest for s in slots] == [host_digest(r) for r in records]


def test_fmix64_in_torch_is_the_numpy_definition():
    words = np.random.default_rng(0).integers(0, 2**64, 4096, dtype=np.uint64)
    words[:4] = [0, 1, 2**63, 2**64 - 1]
    mixed = fmix64_(torch.from_numpy(words.view(np.int64).copy()))
    assert (mixed.numpy().view(np.uint64) == fmix64(words)).all()
    assert signed(2**64 - 1) == -1 and signed(5) == 5


# ---------------------------------------------------------------------------------------------- no collisions
def digests_differ(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors of different bits have different digests, on the device and on the host."""
    assert not torch.equal(a.view(torch.uint8), b.view(torch.uint8)) or a.dtype != b.dtype or a.shape != b.shape
    return device_digest(a) != device_digest(b) and host_digest(a) != host_digest(b)


@SETTINGS
@given(name=st.sampled_from(list(DTYPES)), count=st.integers(2, 2000), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_a_swap_of_two_different_elements_changes_the_digest(name, count, seed, data):
    values = random_bits(name, count, seed)
    i = data.draw(st.integers(0, count - 1))
    j = data.draw(st.integers(0, count - 1).filter(lambda k: k != i))
    bits = values.view(torch.uint8).reshape(count, -1)
    if torch.equal(bits[i], bits[j]):
        bits[j] = bits[j] ^ 1
    swapped = values.clone()
    swapped[[i, j]] = values[[j, i]]
    assert digests_differ(values, swapped)


@SETTINGS
@given(name=st.sampled_from(list(DTYPES)), count=st.integers(2, 1500), seed=st.integers(0, 2**32 - 1))
def test_a_permutation_changes_the_digest(name, count, seed):
    values = random_bits(name, count, seed)
    order = torch.from_numpy(np.random.default_rng(seed).permutation(count))
    permuted = values[order]
    if torch.equal(permuted.view(torch.uint8), values.view(torch.uint8)):
        return  # the permutation moved only equal elements
    assert digests_differ(values, permuted)


@SETTINGS
@given(
    name=st.sampled_from(list(DTYPES)),
    count=st.integers(1, 3000),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_one_flipped_bit_anywhere_changes_the_digest(name, count, seed, data):
    values = random_bits(name, count, seed)
    flipped = values.clone()
    raw = flipped.view(torch.uint8).reshape(-1)
    bits_per_element = 1 if name == "bool" else 8 * values.element_size()
    bit = data.draw(st.integers(0, count * bits_per_element - 1))
    if name == "bool":
        flipped[bit] = ~flipped[bit]
    else:
        raw[bit // 8] ^= 1 << (bit % 8)
    assert digests_differ(values, flipped)


FLOATS = ["float32", "float16", "bfloat16", "float64", "float8_e4m3fn", "float8_e5m2"]


@SETTINGS
@given(name=st.sampled_from(FLOATS), count=st.integers(1, 2000), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_sign_flips_zeros_and_nan_payloads_change_the_digest(name, count, seed, data):
    dtype, _ = DTYPES[name]
    values = torch.randn(count, generator=torch.Generator().manual_seed(seed)).to(dtype)
    at = data.draw(st.integers(0, count - 1))

    def element(t: torch.Tensor) -> torch.Tensor:
        return t.view(torch.uint8).reshape(count, -1)[at]  # its bytes, little-endian: the sign in the last

    negated = values.clone()
    element(negated)[-1] ^= 0x80
    assert digests_differ(values, negated)  # a sign flip
    zeros = torch.zeros(count).to(dtype)
    minus = zeros.clone()
    element(minus)[-1] ^= 0x80
    assert float(minus[at].float()) == 0.0 and digests_differ(zeros, minus)  # -0.0 against +0.0
    nan = values.clone()
    element(nan)[:] = torch.tensor([float("nan")]).to(dtype).view(torch.uint8)
    other = nan.clone()
    element(other)[0] ^= 1  # the lowest mantissa bit: another NaN payload
    if torch.isnan(other[at].float()):  # (e4m3fn has one NaN per sign: there it is a number now)
        assert digests_differ(nan, other)


@SETTINGS
@given(
    tokens=st.integers(2, 300),
    experts=st.sampled_from([4, 8, 16, 64]),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_rows_swapped_in_a_one_hot_routing_tensor_change_the_digest(tokens, experts, seed, data):
    choice = torch.from_numpy(np.random.default_rng(seed).integers(0, experts, tokens))
    routing = torch.nn.functional.one_hot(choice, experts).to(torch.int64)
    i = data.draw(st.integers(0, tokens - 1))
    others = [k for k in range(tokens) if choice[k] != choice[i]]
    if not others:
        return  # every token picked the same expert: no swap changes the bits
    j = data.draw(st.sampled_from(others))
    swapped = routing.clone()
    swapped[[i, j]] = routing[[j, i]]
    assert digests_differ(routing, swapped)  # min, max, mean, L2 and the old weighted sum all stay


def test_the_linear_checksum_collision_is_gone():
    """The case found: two int64 one-hot rows swapped keep a position-weighted word sum and every statistic."""
    routing = torch.zeros(4, 8, dtype=torch.int64)
    routing[0, 1] = routing[1, 2] = routing[2, 0] = routing[3, 3] = 1
    swapped = routing.clone()
    swapped[[0, 1]] = routing[[1, 0]]
    words = lambda t: t.view(torch.int32).reshape(-1).to(torch.int64)  # noqa: E731
    weighted = lambda t: int((words(t) * (2 * torch.arange(words(t).numel()) + 1)).sum())  # noqa: E731
    assert weighted(routing) == weighted(swapped)  # the old checksum could not tell them apart
    assert digests_differ(routing, swapped)


@pytest.mark.parametrize(
    "a, b",
    [
        (torch.zeros(8, dtype=torch.float32), torch.zeros(8, dtype=torch.int32)),  # same bytes, other dtype
        (torch.zeros(8, dtype=torch.float16), torch.zeros(8, dtype=torch.bfloat16)),  # same width too
        (torch.zeros(8, dtype=torch.uint8), torch.zeros(1, dtype=torch.int64)),  # same 8 bytes
        (torch.zeros(3, dtype=torch.float16), torch.zeros(4, dtype=torch.float16)),  # the padding is not data
        (torch.zeros(0, dtype=torch.float32), torch.zeros(0, dtype=torch.int32)),  # empty tensors too
    ],
)
def test_dtype_and_element_count_are_in_the_digest(a, b):
    assert digests_differ(a, b)


def test_every_stored_dtype_has_a_code():
    assert set(DTYPES) <= set(DIGEST_DTYPE_CODES)
    with pytest.raises(ValueError, match="no dtype code for 'complex64'"):
        digest_of_bytes(b"", "complex64", 0)
    with pytest.raises(ValueError, match="3 bytes are not 1 float32 elements"):
        digest_of_bytes(b"abc", "float32", 1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("name", list(DTYPES))
def test_cuda_gives_the_cpu_digest(name):
    counts = [0, 1, 255, 256, 257, 5000]
    records = [random_bits(name, n, seed=n + 7) for n in counts]
    rows = torch.cat([staged(r) for r in records])
    cpu = [read_l1_statistics(s).digest for s in segment_slots(rows, counts).numpy()]
    cuda = [read_l1_statistics(s).digest for s in segment_slots(rows.cuda(), counts).cpu().numpy()]
    assert cuda == cpu == [host_digest(r) for r in records]
