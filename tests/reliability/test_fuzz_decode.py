"""Fuzzing the L1 decode: random and mutated Device buffers, through the reader, the dumper's decode and
the whole dump path. Only ValueError/RuntimeError with clear messages, no hang, nothing outside the root."""

from __future__ import annotations

from collections import Counter
import random
import struct
import time
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
import numpy as np
import pytest
import torch

from tests.reliability._helpers import assert_confined, tree_snapshot  # noqa: I001 - puts the repo root on sys.path

from benchmarks.reliability import (
    CASE_SECONDS,
    FUZZ_STAGES,
    clear_message,
    demo_expert_launch,
    main,
    mutate_device_buffer,
    run_decode_fuzz,
)
from megadump_zarr import TensorDumpConfig, schedule, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
import megadump_zarr.dump.dumper as dumper_module
from megadump_zarr.dump.snapshots import decode_l1_dump
from megadump_zarr.l1 import read_l1_buffer
from megadump_zarr.read import open_dump

HEADER_FIELDS = (
    "magic",
    "version",
    "enabled",
    "record_count",
    "record_size",
    "records_offset",
    "payload_offset",
    "total_bytes",
)
RECORD_FIELDS = (
    "task_id",
    "phase",
    "parameter_position",
    "source_offset_low",
    "source_offset_high",
    "payload_offset",
    "payload_bytes",
    "status",
    "task_index",
    "worker_id",
)
CHECKED_AGAINST_PLAN = {
    "task_id",
    "phase",
    "parameter_position",
    "source_offset_low",
    "source_offset_high",
    "payload_offset",
    "payload_bytes",
    "worker_id",
}
FUZZ_SETTINGS = settings(
    max_examples=150,
    deadline=int(CASE_SECONDS * 1000),
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def launch():
    """One real L1 launch of the demo expert kernel (every record CAPTURED)."""
    return demo_expert_launch()


def _tensor(data: bytes | bytearray) -> torch.Tensor:
    return torch.from_numpy(np.frombuffer(bytearray(data), dtype=np.uint8))


def _decode(launch: Any, data: bytes | bytearray) -> tuple[str, str]:
    """Feed ``data`` to the dumper's decode; return (outcome, message) and check the contract."""
    started = time.perf_counter()
    try:
        snapshots = decode_l1_dump(launch.prepared, host_buffer=_tensor(data))
    except (ValueError, RuntimeError) as error:
        message = str(error)
        assert clear_message(message), f"unclear {type(error).__name__}: {message!r}"
        return type(error).__name__, message
    finally:
        assert time.perf_counter() - started < CASE_SECONDS
    for snapshot, plan in zip(snapshots, launch.prepared.records, strict=True):
        assert snapshot.record is plan  # metadata always comes from the host's plan, never from the buffer
        expected = bytes(data[plan.payload_offset : plan.payload_offset + plan.payload_bytes])
        assert np.ascontiguousarray(snapshot.data).tobytes() == expected
    return "ok", ""


def _read(data: bytes | bytearray) -> str:
    try:
        read_l1_buffer(bytes(data))
    except ValueError as error:
        assert clear_message(str(error)), f"unclear ValueError: {str(error)!r}"
        return "ValueError"
    return "ok"


# --------------------------------------------------------------------------- seeded runs
def _assert_clean(result: Any, cases: int) -> None:
    assert result.cases == cases
    assert result.failures == [], result.failures[:5]
    assert result.unclear == [], result.unclear[:5]
    assert result.wrong_payload == [], result.wrong_payload[:5]
    assert result.slow == [], result.slow[:5]
    for target in ("read_l1_buffer", "decode_l1_dump"):
        counts = result.outcomes[target]
        assert counts["other"] == 0
        assert counts["ok"] + counts["ValueError"] + counts["RuntimeError"] == cases
        assert counts["ok"] > 0 and counts["ValueError"] > 0, (target, counts)
    assert result.outcomes["read_l1_buffer"]["RuntimeError"] == 0  # the reader's contract: ValueError only


@pytest.mark.timeout(120)
def test_decode_fuzz_300_cases(launch):
    _assert_clean(run_decode_fuzz(300, seed=1, launch=launch), 300)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_decode_fuzz_10000_cases(launch):
    result = run_decode_fuzz(10_000, seed=0, launch=launch)
    _assert_clean(result, 10_000)
    assert result.outcomes["decode_l1_dump"]["RuntimeError"] > 0  # uncaptured records were exercised too


def test_benchmark_cli_counts(capsys):
    assert main(["--cases", "40", "--kills", "0", "--seed", "5"]) == 0
    out = capsys.readouterr().out
    assert "cases: 40" in out and "other=failure: 0" in out


# --------------------------------------------------------------------------- hypothesis properties
@FUZZ_SETTINGS
@given(data=st.binary(max_size=4096))
def test_random_bytes_read_or_valueerror(launch, data):
    _read(data)
    assert _decode(launch, data)[0] in ("ok", "ValueError", "RuntimeError")


@FUZZ_SETTINGS
@given(edits=st.lists(st.tuples(st.integers(0, 64 + 64 * 80), st.integers(0, 255)), min_size=1, max_size=12))
def test_header_and_table_byte_edits(launch, edits):
    data = bytearray(launch.pristine)
    for offset, value in edits:
        data[offset] = value
    _read(data)
    _decode(launch, data)


@FUZZ_SETTINGS
@given(field=st.sampled_from(RECORD_FIELDS), which=st.integers(0, 10_000), value=st.integers(0, 2**32 - 1))
def test_one_record_field_changed(launch, field, which, value):
    """A changed table field is refused naming a record (task_index included: issue 12 asks the
    buffer's task index to be checked against the plan) — or, for a status set back to CAPTURED,
    decodes with the plan's metadata and the slot's bytes."""
    record = which % launch.record_count
    offset = 64 + 64 * record + 4 * RECORD_FIELDS.index(field)
    data = bytearray(launch.pristine)
    original = struct.unpack_from("<I", data, offset)[0]
    struct.pack_into("<I", data, offset, value)
    outcome, message = _decode(launch, data)
    if value == original or (field == "status" and value == 1):
        assert outcome == "ok", message
        return
    assert outcome in ("ValueError", "RuntimeError"), (field, value)
    if field == "status" and value == 0:
        plan = launch.prepared.records[record]
        assert outcome == "RuntimeError"
        assert f"task_id={plan.task_id}, stage={plan.stage!r}, io={plan.io}, index={plan.index}, status=0" in message
    else:
        assert outcome == "ValueError" and "record" in message, message


@FUZZ_SETTINGS
@given(field=st.sampled_from(HEADER_FIELDS), value=st.integers(0, 2**32 - 1))
def test_one_header_field_changed(launch, field, value):
    data = bytearray(launch.pristine)
    offset = 4 * HEADER_FIELDS.index(field)
    original = struct.unpack_from("<I", data, offset)[0]
    struct.pack_into("<I", data, offset, value)
    outcome, message = _decode(launch, data)
    if value == original:
        assert outcome == "ok", message
    elif field in ("magic", "version"):
        assert (
            outcome == "ValueError" and f"magic={data[0] | data[1] << 8 | data[2] << 16 | data[3] << 24:#x}" in message
        )
    elif field in ("record_size", "records_offset"):
        assert outcome == "ValueError" and field in message, message
    elif field == "record_count":
        assert outcome == "ValueError" and "record" in message, message
    elif field == "total_bytes" and value > len(data):
        assert outcome == "ValueError" and "total_bytes" in message, message


@FUZZ_SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_mutated_real_buffer(launch, seed):
    rng = random.Random(seed)
    data = mutate_device_buffer(rng, bytearray(launch.pristine), payload_base=launch.payload_base)
    _read(data)
    _decode(launch, data)


@FUZZ_SETTINGS
@given(cut=st.integers(0, 300_000))
def test_truncated_real_buffer(launch, cut):
    data = bytearray(launch.pristine[:cut])
    outcome, message = _decode(launch, data)
    if cut < len(launch.pristine):
        assert outcome == "ValueError", message
        assert "shorter than" in message


# --------------------------------------------------------------------------- the whole dump path
def _run_dump_path_fuzz(tmp_path, monkeypatch, cases: int, seed: int, on_error: str) -> Counter:
    """The real dumper (tensor_dump around the demo block's expert kernel) with its Device buffer mutated
    before the launch (table only: what the device worker reads) or after it (anything); every outcome
    checked, then the root read back and the file system compared."""
    root = tmp_path / "root"
    watched = tmp_path.parent
    before = tree_snapshot(watched, exclude=root)
    rng = random.Random(seed)
    outcomes: Counter = Counter()
    expected: dict[int, tuple[Any, bytes]] = {}
    state: dict[str, Any] = {}
    real_prepare, real_decode = dumper_module.prepare_l1_dump, dumper_module.decode_l1_dump

    def mutating_prepare(*args: Any, **kwargs: Any) -> Any:
        prepared = real_prepare(*args, **kwargs)
        state["when"] = rng.choice(("before", "after", "after", "payload", "none"))
        if state["when"] == "before":
            data = mutate_device_buffer(
                rng, bytearray(prepared.buffer.numpy().tobytes()), payload_base=64 + 64 * 4096, table_only=True
            )
            prepared.buffer = _tensor(data)
        return prepared

    def mutating_decode(prepared: Any, host_buffer: Any = None) -> Any:
        data = bytearray(prepared.buffer.numpy().tobytes())
        if state["when"] == "after":
            data = mutate_device_buffer(rng, data, payload_base=64 + 64 * 4096)
            prepared.buffer = _tensor(data)
        elif state["when"] == "payload":  # garbage, NaN and Inf in the payload area: decodes, stored as found
            for _ in range(rng.randint(1, 8)):
                start = rng.randrange(64 + 64 * 4096, len(data))
                size = min(rng.randrange(1, 256), len(data) - start)
                data[start : start + size] = rng.choice(
                    (rng.randbytes(size), (b"\x00\x00\xc0\x7f" * size)[:size], (b"\x00\x00\x80\xff" * size)[:size])
                )
            prepared.buffer = _tensor(data)
        state["prepared"], state["data"] = prepared, bytes(data)
        return real_decode(prepared, host_buffer)

    monkeypatch.setattr(dumper_module, "prepare_l1_dump", mutating_prepare)
    monkeypatch.setattr(dumper_module, "decode_l1_dump", mutating_decode)
    block = MoEBlock(DemoConfig(tokens=21, d_model=8))
    config = TensorDumpConfig(
        root, level="L1", kernel_names="moe_experts", stages=FUZZ_STAGES, chunk_bytes=256, on_error=on_error
    )
    with tensor_dump(config, schedule(wait=0, warmup=0, active=1)) as dumper:
        for _ in range(cases):
            state.clear()
            window = dumper.window_index
            started = time.perf_counter()
            try:
                block(block.make_input())
            except (ValueError, RuntimeError) as error:
                message = str(error)  # the reference device worker refuses a bad table before any task runs
                assert clear_message(message) or (message.startswith("L1 device worker refused record")), repr(error)
                outcomes[f"{state.get('when')}: {type(error).__name__}"] += 1
            else:
                outcomes[f"{state.get('when')}: ok"] += 1
                expected[window] = (state["prepared"], state["data"])
            assert time.perf_counter() - started < 10 * CASE_SECONDS
            dumper.step()

    dump = open_dump(root)
    windows = dump.windows()
    assert set(windows["status"]) <= {"complete"}, windows
    records = dump.records()
    for window, (prepared, data) in expected.items():
        mine = records[records["window"] == window].sort_values(
            ["task_id", "io", "index"], ascending=[True, False, True]
        )
        assert len(mine) == len(prepared.records)
        by_key = {(r.task_id, r.io, r.index): r.path for r in mine.itertuples()}
        for plan in prepared.records:
            stored = dump.record_array(by_key[(plan.task_id, plan.io, plan.index)]).values
            assert (
                np.ascontiguousarray(stored).tobytes()
                == data[plan.payload_offset : plan.payload_offset + plan.payload_bytes]
            )
    assert tree_snapshot(watched, exclude=root) == before  # nothing written, changed or removed outside the root
    assert assert_confined(root) > 0
    return outcomes


@pytest.mark.timeout(180)
@pytest.mark.parametrize("on_error", ["discard", "keep"])
def test_whole_dump_path_with_mutated_buffers(tmp_path, monkeypatch, on_error):
    outcomes = _run_dump_path_fuzz(
        tmp_path, monkeypatch, cases=24, seed=11 if on_error == "discard" else 12, on_error=on_error
    )
    assert sum(outcomes.values()) == 24
    assert outcomes["payload: ok"] > 0 and any(k.endswith("Error") for k in outcomes), outcomes


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_whole_dump_path_with_mutated_buffers_long(tmp_path, monkeypatch):
    outcomes = _run_dump_path_fuzz(tmp_path, monkeypatch, cases=400, seed=99, on_error="keep")
    assert sum(outcomes.values()) == 400
