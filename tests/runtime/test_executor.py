"""runtime.executor: the L1 device worker against hand-built Device buffers."""

import struct

import pytest
import torch

from megadump_zarr.diagnostics import LaunchArguments
from megadump_zarr.l1 import (
    L1_ANY_WORKER,
    L1_DUMP_PHASE_AFTER,
    L1_DUMP_PHASE_BEFORE,
    L1_DUMP_RECORDS_OFFSET,
    L1_DUMP_RECORD_SIZE,
    L1_DUMP_STATUS_BYTE,
    L1RecordEntry,
    pack_l1_buffer,
    plan_slots,
    read_l1_buffer,
)
from megadump_zarr.runtime import (
    DeviceWorker,
    Graph,
    OperatorNode,
    SplitSpec,
    TensorSpec,
    Tile,
    compile_runtime,
    execute,
)
from megadump_zarr.runtime.abi import RuntimeConfigC

ROWS, COLS = 10, 3
ROW_BYTES = COLS * 4  # float32
X, Y = 0, 1  # parameter positions


def _inc_and_double(tile: Tile) -> None:
    """In place on x (read and written), then y = 2 * x over the tile's rows."""
    x, y = tile.params[X], tile.params[Y]
    x[tile.rows] += 1
    y[tile.rows] = x[tile.rows] * 2


def _graph(tile_fn=_inc_and_double):
    x = TensorSpec("x", (ROWS, COLS), torch.float32, X)
    y = TensorSpec("y", (ROWS, COLS), torch.float32, Y)
    split = SplitSpec(split_inputs=((0, 0),), split_output_dims=(0, 0))
    return Graph([OperatorNode("step", "vector", (x,), (x, y), tile_fn, split, tile_rows=4)])


def _params():
    x = torch.arange(ROWS * COLS, dtype=torch.float32).reshape(ROWS, COLS) * 0.5
    return [x, torch.full((ROWS, COLS), -7.0)]


def _runtime(mode="event_driven", workers=4, graph=None):
    return compile_runtime(graph or _graph(), _params(), kernel_name="exec", num_workers=workers, execution_mode=mode)


def _rows_bytes(tensor, start, stop):
    return tensor[start:stop].contiguous().view(torch.uint8).reshape(-1).numpy().tobytes()


def _entries(specs):
    """specs: (task_id, phase, position, start_row, stop_row, worker) → entries with planned slots."""
    sizes = [(stop - start) * ROW_BYTES for (_, _, _, start, stop, _) in specs]
    offsets = plan_slots(sizes, payload_base=L1_DUMP_RECORDS_OFFSET + len(specs) * L1_DUMP_RECORD_SIZE)
    return [
        L1RecordEntry(
            task_id=task,
            phase=phase,
            parameter_position=position,
            source_offset_bytes=start * ROW_BYTES,
            payload_offset=offset,
            payload_bytes=size,
            status=0,
            task_index=task,
            worker_id=worker,
        )
        for (task, phase, position, start, stop, worker), offset, size in zip(specs, offsets, sizes)
    ]


def _buffer(entries):
    payload_base = L1_DUMP_RECORDS_OFFSET + len(entries) * L1_DUMP_RECORD_SIZE
    return torch.frombuffer(pack_l1_buffer(entries, payload_base=payload_base), dtype=torch.uint8).clone()


def _l1_config(runtime, mode=2):
    config = runtime.normal_tensor.clone()
    config[RuntimeConfigC.diagnostic_mode.offset] = mode
    return config


def _run(runtime, params, buffer, *, mode=2, counters=None):
    counters = torch.zeros(len(runtime.tasks), dtype=torch.int32) if counters is None else counters
    execute(
        runtime,
        params,
        LaunchArguments(runtime_config=_l1_config(runtime, mode), event_counters=counters, diagnostic_buffer=buffer),
    )
    return counters


def _status_bytes(buffer, count):
    return [int(buffer[L1_DUMP_RECORDS_OFFSET + i * L1_DUMP_RECORD_SIZE + L1_DUMP_STATUS_BYTE]) for i in range(count)]


def _payloads(buffer):
    return [bytes(r.payload) for r in read_l1_buffer(buffer).records]


# --- event driven --------------------------------------------------------------------------------------------


def test_event_driven_before_and_after_payloads():
    runtime = _runtime()
    assert [(t.start, t.stop) for t in runtime.tasks] == [(0, 4), (4, 8), (8, 10)]
    before = _params()
    params = _params()
    specs = [
        (1, L1_DUMP_PHASE_BEFORE, X, 4, 8, L1_ANY_WORKER),  # input x of tile [4, 8)
        (1, L1_DUMP_PHASE_AFTER, X, 4, 8, L1_ANY_WORKER),  # x after the in-place update
        (1, L1_DUMP_PHASE_AFTER, Y, 4, 8, L1_ANY_WORKER),  # y after
        (2, L1_DUMP_PHASE_BEFORE, X, 8, 10, L1_ANY_WORKER),  # final partial tile
        (2, L1_DUMP_PHASE_AFTER, Y, 8, 10, L1_ANY_WORKER),
        (0, L1_DUMP_PHASE_AFTER, X, 0, 10, L1_ANY_WORKER),  # after task 0: only rows [0, 4) changed
    ]
    buffer = _buffer(_entries(specs))
    assert _status_bytes(buffer, len(specs)) == [0] * len(specs)
    counters = _run(runtime, params, buffer)

    expected_x = before[X] + 1
    assert torch.equal(params[X], expected_x)
    assert torch.equal(params[Y], expected_x * 2)
    after_task0 = before[X].clone()
    after_task0[0:4] += 1
    assert _payloads(buffer) == [
        _rows_bytes(before[X], 4, 8),
        _rows_bytes(expected_x, 4, 8),
        _rows_bytes(expected_x * 2, 4, 8),
        _rows_bytes(before[X], 8, 10),
        _rows_bytes(expected_x * 2, 8, 10),
        _rows_bytes(after_task0, 0, 10),
    ]
    assert _payloads(buffer)[0] != _payloads(buffer)[1]
    assert _status_bytes(buffer, len(specs)) == [1] * len(specs)
    assert [r.status for r in read_l1_buffer(buffer).records] == [1] * len(specs)
    assert counters.tolist() == [1, 1, 1]


def test_event_driven_ignores_worker_id():
    runtime = _runtime()
    params = _params()
    before = _params()
    buffer = _buffer(_entries([(0, L1_DUMP_PHASE_BEFORE, X, 0, 4, 3), (2, L1_DUMP_PHASE_AFTER, X, 8, 10, 99)]))
    _run(runtime, params, buffer)
    assert _status_bytes(buffer, 2) == [1, 1]
    assert _payloads(buffer) == [_rows_bytes(before[X], 0, 4), _rows_bytes(before[X] + 1, 8, 10)]


def test_header_fields_untouched_by_capture():
    runtime = _runtime()
    buffer = _buffer(_entries([(1, L1_DUMP_PHASE_BEFORE, X, 4, 8, L1_ANY_WORKER)]))
    reference = buffer.clone()
    _run(runtime, _params(), buffer)
    changed = torch.nonzero(buffer != reference).flatten().tolist()
    record_status = L1_DUMP_RECORDS_OFFSET + L1_DUMP_STATUS_BYTE
    payload = read_l1_buffer(reference).records[0].payload_offset
    assert set(changed) <= {record_status} | set(range(payload, payload + 4 * ROW_BYTES))
    assert record_status in changed


def test_diagnostic_mode_zero_copies_nothing():
    runtime = _runtime()
    params = _params()
    buffer = _buffer(
        _entries([(1, L1_DUMP_PHASE_BEFORE, X, 4, 8, L1_ANY_WORKER), (1, L1_DUMP_PHASE_AFTER, Y, 4, 8, L1_ANY_WORKER)])
    )
    reference = buffer.clone()
    counters = _run(runtime, params, buffer, mode=0)
    assert torch.equal(buffer, reference)
    assert _status_bytes(buffer, 2) == [0, 0]
    assert torch.equal(params[X], _params()[X] + 1)  # the kernel itself ran
    assert counters.tolist() == [1, 1, 1]


def test_diagnostic_mode_zero_never_reads_the_buffer():
    runtime = _runtime()
    params = _params()
    garbage = torch.zeros(16, dtype=torch.uint8)  # not an L1 buffer at all
    _run(runtime, params, garbage, mode=0)
    assert torch.equal(params[Y], (_params()[X] + 1) * 2)
    # the ordinary launch: the runtime's own config (mode 0) with the counters as diagnostic buffer
    counters = torch.zeros(3, dtype=torch.int32)
    execute(runtime, params, LaunchArguments(runtime.normal_tensor, counters, counters, counters))
    assert counters.tolist() == [1, 1, 1]


# --- aiv_pipeline (broadcast) ------------------------------------------------------------------------------------


def test_broadcast_worker_records_and_shards():
    # tile [8, 10) on 4 workers: shards (8, 9), (9, 10), (10, 10), (10, 10)
    calls = []

    def logging_fn(tile):
        calls.append((tile.task.task_id, tile.start, tile.stop))
        _inc_and_double(tile)

    runtime = _runtime("aiv_pipeline", workers=4, graph=_graph(logging_fn))
    before = _params()
    params = _params()
    specs = [
        (2, L1_DUMP_PHASE_BEFORE, X, 8, 10, 1),  # worker 1's boundary: worker 0 already ran row 8
        (2, L1_DUMP_PHASE_BEFORE, X, 9, 10, 1),  # worker 1's own shard, before it ran
        (2, L1_DUMP_PHASE_AFTER, X, 9, 10, 1),  # worker 1's shard after it ran
        (2, L1_DUMP_PHASE_AFTER, X, 8, 10, 0),  # worker 0's boundary: row 9 not yet updated
        (2, L1_DUMP_PHASE_BEFORE, X, 8, 10, L1_ANY_WORKER),  # any worker: copied once, at the first worker
        (2, L1_DUMP_PHASE_AFTER, X, 8, 10, L1_ANY_WORKER),  # any worker: copied once, after the last worker
        (2, L1_DUMP_PHASE_AFTER, Y, 8, 10, 3),  # worker 3: empty shard, runs nothing, reaches no boundary
        (2, L1_DUMP_PHASE_BEFORE, X, 8, 10, 7),  # worker 7 does not exist with 4 workers: never copied
    ]
    buffer = _buffer(_entries(specs))
    counters = _run(runtime, params, buffer)

    assert calls == [
        (0, 0, 1),
        (0, 1, 2),
        (0, 2, 3),
        (0, 3, 4),
        (1, 4, 5),
        (1, 5, 6),
        (1, 6, 7),
        (1, 7, 8),
        (2, 8, 9),
        (2, 9, 10),  # workers 2 and 3 have empty shards and do not run
    ]
    x0, x1 = before[X], before[X] + 1
    row8_done = x0.clone()
    row8_done[8] += 1
    assert _payloads(buffer)[:6] == [
        _rows_bytes(row8_done, 8, 10),
        _rows_bytes(x0, 9, 10),
        _rows_bytes(x1, 9, 10),
        _rows_bytes(row8_done, 8, 10),
        _rows_bytes(x0, 8, 10),
        _rows_bytes(x1, 8, 10),
    ]
    # A worker whose shard is empty runs nothing and reaches no task boundary, so a record addressed to it
    # stays PENDING (the L1 planner never emits one), as does one for a worker id outside range(num_workers).
    assert _status_bytes(buffer, len(specs)) == [1, 1, 1, 1, 1, 1, 0, 0]
    assert _payloads(buffer)[6:] == [bytes(2 * ROW_BYTES), bytes(2 * ROW_BYTES)]
    assert torch.equal(params[X], x1) and torch.equal(params[Y], x1 * 2)
    assert counters.tolist() == [1, 1, 1]  # once per task, not per worker


def test_broadcast_each_record_copied_exactly_once(monkeypatch):
    runtime = _runtime("aiv_pipeline", workers=4)
    specs = [
        (task, phase, X, start, stop, worker)
        for task, (start, stop) in enumerate([(0, 4), (4, 8), (8, 10)])
        for phase in (L1_DUMP_PHASE_BEFORE, L1_DUMP_PHASE_AFTER)
        for worker in (0, 1, 2, 3, L1_ANY_WORKER)
    ]
    buffer = _buffer(_entries(specs))
    copies = []
    original = DeviceWorker._copy

    def counting(self, record):
        copies.append(record.index)
        return original(self, record)

    monkeypatch.setattr(DeviceWorker, "_copy", counting)
    _run(runtime, _params(), buffer)
    # tile [8, 10) on 4 workers: workers 2 and 3 have empty shards, run nothing and copy nothing
    idle = [i for i, (task, _, _, _, _, worker) in enumerate(specs) if task == 2 and worker in (2, 3)]
    assert len(idle) == 4
    assert sorted(copies) == [i for i in range(len(specs)) if i not in idle]
    assert _status_bytes(buffer, len(specs)) == [0 if i in idle else 1 for i in range(len(specs))]


def test_broadcast_unsplit_task_runs_on_worker_zero_only():
    calls = []
    x = TensorSpec("x", (ROWS, COLS), torch.float32, X)
    y = TensorSpec("y", (ROWS, COLS), torch.float32, Y)

    def whole(tile):
        calls.append((tile.start, tile.stop, tile.rows))
        tile.params[Y][tile.rows] = tile.params[X][tile.rows] * 3

    runtime = compile_runtime(
        Graph([OperatorNode("all", "vector", (x,), (y,), whole)]),
        _params(),
        kernel_name="k",
        num_workers=4,
        execution_mode="aiv_pipeline",
    )
    params = _params()
    buffer = _buffer(
        _entries(
            [
                (0, L1_DUMP_PHASE_AFTER, Y, 0, 10, 0),
                (0, L1_DUMP_PHASE_AFTER, Y, 0, 10, 2),
                (0, L1_DUMP_PHASE_BEFORE, Y, 0, 10, 1),
            ]
        )
    )
    _run(runtime, params, buffer)
    assert calls == [(None, None, slice(None, None))]
    # only worker 0 runs a task without split rows; the others reach no boundary
    assert _payloads(buffer) == [_rows_bytes(_params()[X] * 3, 0, 10), bytes(10 * ROW_BYTES), bytes(10 * ROW_BYTES)]
    assert _status_bytes(buffer, 3) == [1, 0, 0]


# --- refusals --------------------------------------------------------------------------------------------------


def test_source_range_leaving_parameter_is_refused():
    runtime = _runtime()
    params = _params()
    entries = _entries(
        [(0, L1_DUMP_PHASE_BEFORE, X, 0, 4, L1_ANY_WORKER), (1, L1_DUMP_PHASE_BEFORE, X, 4, 8, L1_ANY_WORKER)]
    )
    # record 1: 64 bytes from byte 100 of a 120-byte parameter
    entries[1] = L1RecordEntry(**{**entries[1].__dict__, "source_offset_bytes": 100, "payload_bytes": 64})
    buffer = _buffer(entries)
    counters = torch.zeros(3, dtype=torch.int32)
    with pytest.raises(RuntimeError) as info:
        _run(runtime, params, buffer, counters=counters)
    assert str(info.value) == (
        "L1 device worker refused record 1 (task 1): source range [100, 164) leaves parameter 0 of 120 bytes"
    )
    assert _status_bytes(buffer, 2) == [0, 0]
    assert _payloads(buffer)[1] == bytes(64)
    # The device worker checks every record before any task runs: nothing ran, nothing was copied.
    assert torch.equal(params[X], _params()[X])
    assert counters.tolist() == [0, 0, 0]


def test_missing_parameter_is_refused():
    runtime = _runtime()
    entries = _entries([(0, L1_DUMP_PHASE_BEFORE, 5, 0, 1, L1_ANY_WORKER)])
    buffer = _buffer(entries)
    params = _params()
    with pytest.raises(RuntimeError, match=r"refused record 0 \(task 0\): parameter 5 does not exist \(2 parameters\)"):
        _run(runtime, params, buffer)
    assert _status_bytes(buffer, 1) == [0]
    assert torch.equal(params[X], _params()[X])


def _assert_untouched(params, counters):
    fresh = _params()
    assert torch.equal(params[X], fresh[X]) and torch.equal(params[Y], fresh[Y])
    assert counters.tolist() == [0, 0, 0]


def test_payload_slot_beyond_buffer_fails_before_any_task():
    runtime = _runtime()
    buffer = _buffer(_entries([(0, L1_DUMP_PHASE_BEFORE, X, 0, 4, L1_ANY_WORKER)]))
    total = buffer.numel()
    record = L1_DUMP_RECORDS_OFFSET
    offset = struct.unpack_from("<I", buffer.numpy(), record + 20)[0]
    struct.pack_into("<I", buffer.numpy(), record + 24, total - offset + 64)  # payload_bytes past total_bytes
    params, counters = _params(), torch.zeros(3, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"L1 dump record 0 \(task_id=0\) payload slot outside the payload area"):
        _run(runtime, params, buffer, counters=counters)
    _assert_untouched(params, counters)


def test_truncated_buffer_fails_before_any_task():
    runtime = _runtime()
    buffer = _buffer(_entries([(0, L1_DUMP_PHASE_BEFORE, X, 0, 4, L1_ANY_WORKER)]))
    params, counters = _params(), torch.zeros(3, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"L1 dump buffer shorter than total_bytes"):
        _run(runtime, params, buffer[:-64].clone(), counters=counters)
    _assert_untouched(params, counters)


def test_bad_magic_fails_before_any_task():
    runtime = _runtime()
    buffer = _buffer(_entries([(0, L1_DUMP_PHASE_BEFORE, X, 0, 4, L1_ANY_WORKER)]))
    buffer[0] ^= 0xFF
    reference = buffer.clone()
    params, counters = _params(), torch.zeros(3, dtype=torch.int32)
    with pytest.raises(ValueError) as info:
        _run(runtime, params, buffer, counters=counters)
    assert str(info.value) == "invalid L1 dump buffer header: magic=0x4c3144af, version=2"
    _assert_untouched(params, counters)
    assert torch.equal(buffer, reference)


@pytest.mark.parametrize(
    "buffer, message",
    [
        (torch.zeros(128, dtype=torch.int32), "L1 device worker needs a 1-D uint8 Device buffer tensor"),
        (torch.zeros(2, 64, dtype=torch.uint8), "L1 device worker needs a 1-D uint8 Device buffer tensor"),
        (torch.zeros(256, dtype=torch.uint8)[::2], "L1 device worker needs a contiguous Device buffer"),
    ],
)
def test_buffer_type_checks(buffer, message):
    params, counters = _params(), torch.zeros(3, dtype=torch.int32)
    with pytest.raises(ValueError) as info:
        _run(_runtime(), params, buffer, counters=counters)
    assert str(info.value) == message
    _assert_untouched(params, counters)


def test_event_counters_optional_and_short():
    runtime = _runtime()
    params = _params()
    execute(runtime, params, LaunchArguments(runtime.normal_tensor, None, runtime.normal_tensor))
    assert torch.equal(params[X], _params()[X] + 1)
    short = torch.zeros(2, dtype=torch.int32)  # fewer counters than tasks: the missing ones are skipped
    execute(runtime, _params(), LaunchArguments(runtime.normal_tensor, short, short))
    assert short.tolist() == [1, 1]


@pytest.mark.parametrize("mode", ["event_driven", "aiv_pipeline"])
def test_event_counters_incremented_once_per_task(mode):
    runtime = _runtime(mode, workers=4)
    counters = torch.tensor([5, 0, 7], dtype=torch.int32)
    buffer = _buffer(_entries([(0, L1_DUMP_PHASE_BEFORE, X, 0, 4, L1_ANY_WORKER)]))
    _run(runtime, _params(), buffer, counters=counters)
    assert counters.tolist() == [6, 1, 8]
    _run(runtime, _params(), buffer, counters=counters, mode=0)
    assert counters.tolist() == [7, 2, 9]


def test_zero_byte_record_is_marked_captured():
    runtime = _runtime()
    entries = _entries([(1, L1_DUMP_PHASE_AFTER, Y, 4, 8, L1_ANY_WORKER)])
    entries[0] = L1RecordEntry(**{**entries[0].__dict__, "payload_bytes": 0, "source_offset_bytes": 120})
    buffer = _buffer(entries)
    _run(runtime, _params(), buffer)
    assert _status_bytes(buffer, 1) == [1]
    assert _payloads(buffer) == [b""]


def test_workspace_reused_across_stages_is_seen_at_each_boundary():
    """A workspace written by one stage and overwritten by a later one: only the L1 record sees the first value."""
    x = TensorSpec("x", (ROWS, COLS), torch.float32, 0)
    ws = TensorSpec("ws", (ROWS, COLS), torch.float32, 1)
    y = TensorSpec("y", (ROWS, COLS), torch.float32, 2)
    split = SplitSpec(split_inputs=((0, 0),), split_output_dims=(0,))

    def produce(t):
        t.params[1][t.rows] = t.params[0][t.rows] * 10

    def consume(t):
        t.params[2][t.rows] = t.params[1][t.rows] + 1

    def overwrite(t):
        t.params[1][t.rows] = -1

    graph = Graph(
        [
            OperatorNode("produce", "cube", (x,), (ws,), produce, split, 5),
            OperatorNode("consume", "vector", (ws,), (y,), consume, split, 5),
            OperatorNode("overwrite", "vector", (x,), (ws,), overwrite, split, 5),
        ]
    )
    params = [torch.arange(30, dtype=torch.float32).reshape(10, 3), torch.zeros(10, 3), torch.zeros(10, 3)]
    runtime = compile_runtime(graph, params, kernel_name="ws", num_workers=4)
    assert [(t.stage, t.start) for t in runtime.tasks] == [
        ("produce", 0),
        ("produce", 5),
        ("consume", 0),
        ("consume", 5),
        ("overwrite", 0),
        ("overwrite", 5),
    ]
    buffer = _buffer(
        _entries(
            [
                (1, L1_DUMP_PHASE_AFTER, 1, 5, 10, L1_ANY_WORKER),  # ws after produce, tile [5, 10)
                (3, L1_DUMP_PHASE_BEFORE, 1, 5, 10, L1_ANY_WORKER),  # ws as consume reads it
                (5, L1_DUMP_PHASE_AFTER, 1, 5, 10, L1_ANY_WORKER),  # ws after overwrite
            ]
        )
    )
    _run(runtime, params, buffer, counters=torch.zeros(6, dtype=torch.int32))
    hidden = torch.arange(30, dtype=torch.float32).reshape(10, 3) * 10
    assert _payloads(buffer) == [
        _rows_bytes(hidden, 5, 10),
        _rows_bytes(hidden, 5, 10),
        _rows_bytes(torch.full((10, 3), -1.0), 5, 10),
    ]
    assert torch.equal(params[1], torch.full((10, 3), -1.0)) and torch.equal(params[2], hidden + 1)
