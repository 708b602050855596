"""Reliability checks: decode fuzzing and SIGKILL mid-export, with counts.

    python -m benchmarks.reliability [--cases N] [--kills N] [--seed S] [--max-delay SECONDS]

Two parts, both seeded (same seed, same inputs):

* **Decode fuzz** (``--cases``, default 10000): random buffers (the raw-reader generators of
  ``benchmarks.fuzz_l1``) and mutated copies of a real Device buffer — the demo MoE block's expert kernel
  launched under an L1 plan (``prepare_l1_dump`` + the reference executor, so every record is CAPTURED) —
  are fed to ``read_l1_buffer`` and to the dumper's ``decode_l1_dump``. Allowed outcomes: the buffer
  decodes (and then every payload view holds exactly the bytes of its slot), or ``ValueError`` /
  ``RuntimeError`` with a clear message (non-empty, about the L1 dump, naming a header field or a record).
  Anything else, an unclear message, a wrong payload or a case slower than ``CASE_SECONDS`` is a failure.
* **Kills** (``--kills``, default 20): a child process (forked from a ``forkserver`` that has already
  imported torch and megadump_zarr, so a trial costs milliseconds, not an interpreter start) runs a dump
  loop of the demo block — alternating L0 and L1 roots, sync and async export, tiny chunks so that export
  writes many small files — and prints ``COMMITTED <window path> <sha256>`` (flushed) right after each
  window's commit returns, the hash taken over the arrays it handed to the store. The parent SIGKILLs it
  after a seeded random delay, reopens every root with ``open_dump`` and checks: every window listed
  ``complete`` has every array readable and statistics equal to numpy's on the data read back; every
  window printed as committed is ``complete`` and its values hash to the printed digest.

Prints the counts and exits 1 on any failure (an exception other than ValueError/RuntimeError, an unclear
message, a wrong payload, a slow case, or a kill-trial problem).
"""

from __future__ import annotations

import argparse
from collections import Counter
from dataclasses import dataclass, field
import hashlib
import json
import math
import multiprocessing
import os
from pathlib import Path
import random
import re
import signal
import struct
import sys
import tempfile
import time
from typing import Any

import numpy as np

from benchmarks.fuzz_l1 import make_case as make_raw_case

__all__ = [
    "CASE_SECONDS",
    "FUZZ_STAGES",
    "KILL_L1_STAGES",
    "DecodeFuzzResult",
    "DemoLaunch",
    "KillResult",
    "array_digest",
    "clear_message",
    "combine_digests",
    "demo_expert_launch",
    "kill_child",
    "kill_context",
    "main",
    "mutate_device_buffer",
    "run_decode_fuzz",
    "run_kill_trial",
    "run_kills",
    "verify_root",
]

CASE_SECONDS = 2.0
"""Most seconds one fuzz case may take (decoding a ~300 KB buffer takes about a millisecond)."""

FUZZ_STAGES = ("expert_up", "expert_down", "unpermute", "combine")
"""Stages of the demo expert kernel planned for the fuzzed Device buffer."""

KILL_L1_STAGES = ("expert_up", "unpermute")
"""Stages of the L1 windows in the kill loop (tens of small records per window)."""

_FIELD_WORDS = re.compile(
    r"record|magic|version|record_size|records_offset|record_count|payload_offset|payload_bytes|total_bytes|"
    r"header|task_id|status|phase|worker_id|parameter_position|source_offset"
)
_INTERESTING_U32 = (
    0,
    1,
    2,
    3,
    31,
    32,
    63,
    64,
    65,
    4095,
    4096,
    4097,
    262207,
    262208,
    262209,
    0x7FFFFFFF,
    0x80000000,
    0xFFFFFFFE,
    0xFFFFFFFF,
)


# ======================================================================================= decode fuzz
def clear_message(message: str) -> bool:
    """Whether an error message is clear: non-empty, about the L1 dump, naming a field or a record.

    Args:
        message: ``str(error)``.
    """
    return bool(message.strip()) and "L1 dump" in message and _FIELD_WORDS.search(message) is not None


@dataclass
class DemoLaunch:
    """One real L1 launch of the demo expert kernel.

    Args:
        prepared: The ``PreparedL1Dump`` (its buffer holds the launch's captured payloads).
        pristine: The buffer's bytes right after the launch.
        record_count: Records in the table.
        payload_base: Where the payload area starts.
    """

    prepared: Any
    pristine: bytes
    record_count: int
    payload_base: int


def demo_expert_launch(tokens: int = 37, d_model: int = 16, stages: tuple[str, ...] = FUZZ_STAGES) -> DemoLaunch:
    """Plan and run one L1 launch of the demo block's expert kernel; return the filled buffer.

    Args:
        tokens: Tokens per step.
        d_model: Model width.
        stages: L1 stages to plan.
    """
    import torch

    from megadump_zarr import TensorDumpConfig
    from megadump_zarr.demo.model import DemoConfig, MoEBlock
    from megadump_zarr.diagnostics import LaunchArguments
    from megadump_zarr.dump.l1_plan import prepare_l1_dump
    from megadump_zarr.dump.snapshots import decode_l1_dump
    from megadump_zarr.l1 import L1_DUMP_PAYLOAD_BASE
    from megadump_zarr.runtime import execute

    block = MoEBlock(DemoConfig(tokens=tokens, d_model=d_model))
    x = block.make_input()
    routing = block.route(x)
    zeros = [torch.zeros(tokens, d_model) for _ in range(3)]
    params = [
        routing["xs"],
        routing["expert_counts"],
        block.w_up,
        block.w_down,
        zeros[0],
        zeros[1],
        routing["inverse_order"],
        x,
        routing["gate"],
        zeros[2],
    ]
    runtime = block.expert_kernel.prepare(params)
    # output_dir is never touched: planning and decoding write nothing
    config = TensorDumpConfig(tempfile.gettempdir(), level="L1", stages=stages)
    prepared = prepare_l1_dump(runtime, runtime.graph, params, config, rank=0, device="cpu")
    execute(runtime, params, LaunchArguments(prepared.runtime_config, None, prepared.buffer))
    decode_l1_dump(prepared)  # the pristine buffer decodes
    return DemoLaunch(prepared, bytes(prepared.buffer.numpy()), len(prepared.records), L1_DUMP_PAYLOAD_BASE)


def mutate_device_buffer(
    rng: random.Random, buffer: bytearray, *, payload_base: int, table_only: bool = False
) -> bytearray:
    """Apply one to four mutations to a (real) Device buffer: header, record table, status, payload, size.

    Args:
        rng: The seeded generator.
        buffer: The buffer bytes (changed in place and returned, maybe resized).
        payload_base: Start of the payload area.
        table_only: Only mutate the header and the record table (what a device worker reads before a launch).
    """
    count = max(1, min(struct.unpack_from("<I", buffer, 12)[0], 4096)) if len(buffer) >= 16 else 1
    kinds = 12 if not table_only else 6
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(kinds)
        record = 64 + 64 * rng.randrange(count)
        if len(buffer) < record + 64 and kind in (1, 2, 3, 4, 5):
            kind = 0
        if kind == 0 and len(buffer) >= 32:  # a header field: interesting value or a bit flip
            offset = 4 * rng.randrange(8)
            if rng.random() < 0.5:
                struct.pack_into("<I", buffer, offset, rng.choice(_INTERESTING_U32))
            else:
                buffer[offset + rng.randrange(4)] ^= 1 << rng.randrange(8)
        elif kind == 1:  # a record field: interesting, nearby or random value
            offset = record + 4 * rng.randrange(10)
            current = struct.unpack_from("<I", buffer, offset)[0]
            value = rng.choice(
                (
                    rng.choice(_INTERESTING_U32),
                    (current + rng.choice((-64, -1, 1, 64))) & 0xFFFFFFFF,
                    rng.randrange(1 << 32),
                    rng.randrange(len(buffer) + 1),
                )
            )
            struct.pack_into("<I", buffer, offset, value)
        elif kind == 2:  # the status word (byte 28) of a record
            struct.pack_into("<I", buffer, record + 28, rng.choice((0, 1, 2, 3, 0xFF, 0x100, 0xFFFFFFFF)))
        elif kind == 3:  # a bit anywhere in a record, padding included
            buffer[record + rng.randrange(64)] ^= 1 << rng.randrange(8)
        elif kind == 4:  # swap two records, or copy one over another
            other = 64 + 64 * rng.randrange(count)
            a, b = bytes(buffer[record : record + 64]), bytes(buffer[other : other + 64])
            buffer[other : other + 64] = a
            if rng.random() < 0.5:
                buffer[record : record + 64] = b
        elif kind == 5:  # claim another record count
            struct.pack_into(
                "<I", buffer, 12, rng.choice((0, count - 1, count + 1, count * 2, 4096, 4097)) & 0xFFFFFFFF
            )
        elif kind in (6, 7) and len(buffer) > payload_base:  # payload bytes: random garbage, NaN/Inf patterns
            start = rng.randrange(payload_base, len(buffer))
            size = min(rng.randrange(1, 512), len(buffer) - start)
            fill = rng.choice((rng.randbytes(size), b"\xff" * size, (b"\x00\x00\x80\x7f" * size)[:size]))
            buffer[start : start + size] = fill
        elif kind == 8:  # truncate: inside the header, the table, or the payload area
            cut = rng.choice((rng.randrange(64), rng.randrange(64, payload_base), rng.randrange(len(buffer) + 1)))
            del buffer[cut:]
        elif kind == 9:  # trailing bytes
            buffer.extend(rng.randbytes(rng.randrange(1, 300)))
        elif kind == 10:  # zero a whole region
            start = rng.choice((0, record, payload_base))
            end = min(start + rng.choice((32, 64, 4096)), len(buffer))
            if end > start:
                buffer[start:end] = bytes(end - start)
        elif kind == 11:  # a record's slot moved onto another's
            other = 64 + 64 * rng.randrange(count)
            if len(buffer) >= other + 64:
                slot = struct.unpack_from("<I", buffer, other + 20)[0]
                struct.pack_into("<I", buffer, record + 20, (slot + rng.choice((0, 0, 1, 64))) & 0xFFFFFFFF)
        if len(buffer) < 16:
            break
        count = max(1, min(struct.unpack_from("<I", buffer, 12)[0], 4096))
    return buffer


@dataclass
class DecodeFuzzResult:
    """Outcome counts of one decode fuzz run.

    Args:
        cases: Buffers tried (each fed to both targets).
        outcomes: ``{target: Counter(ok=, ValueError=, RuntimeError=, other=)}``.
        failures: ``(case, target, repr(error))`` of other exceptions.
        unclear: ``(case, target, message)`` of errors whose message is not clear.
        wrong_payload: ``(case, detail)`` where a decoded payload differs from its slot's bytes.
        slow: ``(case, seconds)`` of cases over ``CASE_SECONDS``.
        messages: ValueError/RuntimeError counts by message shape.
        seconds: Wall time.
        max_case_seconds: The slowest case.
    """

    cases: int = 0
    outcomes: dict[str, Counter] = field(
        default_factory=lambda: {"read_l1_buffer": Counter(), "decode_l1_dump": Counter()}
    )
    failures: list = field(default_factory=list)
    unclear: list = field(default_factory=list)
    wrong_payload: list = field(default_factory=list)
    slow: list = field(default_factory=list)
    messages: Counter = field(default_factory=Counter)
    seconds: float = 0.0
    max_case_seconds: float = 0.0

    @property
    def passed(self) -> bool:
        """No other exception, unclear message, wrong payload or slow case."""
        return not (self.failures or self.unclear or self.wrong_payload or self.slow)

    def count(self, outcome: str) -> int:
        """Total of one outcome over both targets.

        Args:
            outcome: ``ok``, ``ValueError``, ``RuntimeError`` or ``other``.
        """
        return sum(counter[outcome] for counter in self.outcomes.values())


def _message_shape(error: BaseException) -> str:
    words = [w for w in re.split(r"[\s:,=()\[\]]+", str(error)) if w and not any(c.isdigit() for c in w)]
    return f"{type(error).__name__}: " + " ".join(words[:7])


def _as_tensor(data: bytes | bytearray) -> Any:
    import torch

    return torch.from_numpy(np.frombuffer(bytearray(data), dtype=np.uint8))  # writable copy; empty is fine


def _check_payloads(snapshots: Any, prepared: Any, data: bytes | bytearray) -> str | None:
    if len(snapshots) != len(prepared.records):
        return f"{len(snapshots)} snapshots for {len(prepared.records)} records"
    for snapshot, plan in zip(snapshots, prepared.records):
        expected = bytes(data[plan.payload_offset : plan.payload_offset + plan.payload_bytes])
        got = np.ascontiguousarray(snapshot.data).tobytes()
        if got != expected:
            return f"record {plan.record_offset}: decoded payload differs from its slot"
    return None


def run_decode_fuzz(cases: int = 10_000, seed: int = 0, launch: DemoLaunch | None = None) -> DecodeFuzzResult:
    """Feed ``cases`` buffers to ``read_l1_buffer`` and to ``decode_l1_dump`` (with a real plan).

    Cases: 15% random buffers (``benchmarks.fuzz_l1``), 80% mutated copies of the real demo buffer,
    5% the real buffer unchanged. ``decode_l1_dump`` gets the buffer as its ``host_buffer`` on even
    cases and as the plan's Device buffer (``prepared.buffer``) on odd ones.

    Args:
        cases: How many buffers.
        seed: Seed of the generator.
        launch: A prepared demo launch (made here when not given).
    """
    from megadump_zarr.dump.snapshots import decode_l1_dump
    from megadump_zarr.l1 import read_l1_buffer

    launch = launch or demo_expert_launch()
    prepared = launch.prepared
    device_buffer = prepared.buffer
    rng = random.Random(seed)
    result = DecodeFuzzResult()
    start = time.perf_counter()
    try:
        for case in range(cases):
            roll = rng.random()
            if roll < 0.15:
                data = bytearray(make_raw_case(rng))
            elif roll < 0.95:
                data = mutate_device_buffer(rng, bytearray(launch.pristine), payload_base=launch.payload_base)
            else:
                data = bytearray(launch.pristine)
            began = time.perf_counter()
            result.cases += 1
            for target in ("read_l1_buffer", "decode_l1_dump"):
                try:
                    if target == "read_l1_buffer":
                        read_l1_buffer(bytes(data))
                    else:
                        tensor = _as_tensor(data)
                        if case % 2:
                            prepared.buffer = tensor
                            snapshots = decode_l1_dump(prepared)
                        else:
                            snapshots = decode_l1_dump(prepared, host_buffer=tensor)
                        wrong = _check_payloads(snapshots, prepared, data)
                        if wrong:
                            result.wrong_payload.append((case, wrong))
                except (ValueError, RuntimeError) as error:
                    kind = "ValueError" if isinstance(error, ValueError) else "RuntimeError"
                    result.outcomes[target][kind] += 1
                    result.messages[_message_shape(error)] += 1
                    if not clear_message(str(error)):
                        result.unclear.append((case, target, str(error)))
                except Exception as error:  # noqa: BLE001 - counting exactly these is the point
                    result.outcomes[target]["other"] += 1
                    result.failures.append((case, target, repr(error)))
                else:
                    result.outcomes[target]["ok"] += 1
                finally:
                    prepared.buffer = device_buffer
            took = time.perf_counter() - began
            result.max_case_seconds = max(result.max_case_seconds, took)
            if took > CASE_SECONDS:
                result.slow.append((case, took))
    finally:
        prepared.buffer = device_buffer
    result.seconds = time.perf_counter() - start
    return result


# ============================================================================================= kills
def array_digest(data: np.ndarray) -> str:
    """sha256 of one array's dtype, shape and bytes.

    Args:
        data: The array.
    """
    data = np.ascontiguousarray(data)
    digest = hashlib.sha256(f"{data.dtype.name}|{data.shape}|".encode())
    digest.update(data.view(np.uint8).reshape(-1).data if data.size else b"")
    return digest.hexdigest()


def combine_digests(per_array: dict[str, str]) -> str:
    """One digest of a window from ``{array path relative to the window: array digest}``.

    Args:
        per_array: The window's data arrays.
    """
    digest = hashlib.sha256()
    for key in sorted(per_array):
        digest.update(f"{key}\0{per_array[key]}\n".encode())
    return digest.hexdigest()


def _train_step(block: Any) -> None:
    x = block.make_input().requires_grad_()
    out = block(x)
    out.float().pow(2).mean().backward()


def kill_child(
    base: str, seed: int, log_path: str, tokens: int = 24, steps_per_phase: int = 2, chunk_bytes: int = 128
) -> None:
    """The dump loop a kill trial SIGKILLs: forever, phases of ``steps_per_phase`` one-step windows.

    Phase ``p`` writes below ``{base}/phase_{p:03d}_{level}``: L0 on even phases, L1 (the expert kernel's
    ``KILL_L1_STAGES``) on odd ones; phases 2-3, 6-7, ... export on the background thread. stdout goes to
    ``log_path``: ``READY`` once, then ``COMMITTED <window path> <sha256>`` after each commit returns.

    Args:
        base: Directory of the phase roots.
        seed: Demo block seed.
        log_path: File that receives stdout.
        tokens: Tokens per step.
        steps_per_phase: Windows per phase.
        chunk_bytes: Chunk size (small: many files per window).
    """
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - line-buffered stdout for the log

    import torch

    from megadump_zarr import TensorDumpConfig, schedule, tensor_dump
    from megadump_zarr.demo.model import DemoConfig, MoEBlock
    from megadump_zarr.store.writer import WindowSession

    torch.set_num_threads(1)
    digests: dict[str, dict[str, str]] = {}
    write_invocation = WindowSession.write_invocation

    def spy(self: Any, invocation: Any) -> None:  # hash exactly what the store is handed
        mine = digests.setdefault(self.url, {})
        for array in invocation.arrays:
            mine[f"{invocation.name}/{array.path}"] = array_digest(array.data)
        write_invocation(self, invocation)

    WindowSession.write_invocation = spy
    block = MoEBlock(DemoConfig(tokens=tokens, d_model=16, seed=seed))

    def report(dumper: Any) -> None:
        for path in dumper.last_window_paths:
            print(f"COMMITTED {path} {combine_digests(digests.pop(str(path), {}))}", flush=True)

    print("READY", flush=True)
    phase = 0
    while True:
        level = "L0" if phase % 2 == 0 else "L1"
        extra: dict[str, Any] = {} if level == "L0" else {"kernel_names": ("moe_experts",), "stages": KILL_L1_STAGES}
        config = TensorDumpConfig(
            os.path.join(base, f"phase_{phase:03d}_{level}"),
            level=level,
            chunk_bytes=chunk_bytes,
            async_export=(phase // 2) % 2 == 1,
            **extra,
        )
        with tensor_dump(config, schedule(wait=0, warmup=0, active=1), on_dump_ready=report) as dumper:
            for _ in range(steps_per_phase):
                _train_step(block)
                dumper.step()
        phase += 1


def kill_context() -> Any:
    """A ``forkserver`` multiprocessing context whose server has torch and megadump_zarr imported."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(
        [
            "torch",
            "numpy",
            "megadump_zarr.api",
            "megadump_zarr.demo.model",
            "megadump_zarr.store.writer",
            "megadump_zarr.read",
        ]
    )
    return context


@dataclass
class KillResult:
    """Outcome of kill trials.

    Args:
        trials: Children killed.
        committed: Windows the children reported committed (all verified against their hashes).
        complete: Windows found ``complete`` (each fully read and its statistics checked).
        torn: Windows found ``writing`` (killed mid-export or before commit).
        aborted: Windows found ``aborted``.
        arrays: Arrays read back.
        problems: Guarantee violations (a failure).
        delays: Kill delays used.
        seconds: Wall time.
    """

    trials: int = 0
    committed: int = 0
    complete: int = 0
    torn: int = 0
    aborted: int = 0
    arrays: int = 0
    problems: list = field(default_factory=list)
    delays: list = field(default_factory=list)
    seconds: float = 0.0

    def add(self, other: KillResult) -> None:
        """Fold one trial's result in.

        Args:
            other: The trial's result.
        """
        for name in ("trials", "committed", "complete", "torn", "aborted", "arrays"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.problems.extend(other.problems)
        self.delays.extend(other.delays)


def _close(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(float(a), float(b), rel_tol=1e-6, abs_tol=1e-9)


def _stats_problem(values: np.ndarray, stats: dict[str, Any]) -> str | None:
    """Compare stored statistics with numpy's on the data read back (finite elements only)."""
    data = np.asarray(values)
    if data.dtype.kind == "f" or data.dtype.name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        wide = data.astype(np.float64).reshape(-1)
        finite = wide[np.isfinite(wide)]
        nan, inf = int(np.isnan(wide).sum()), int(np.isinf(wide).sum())
    else:
        finite = data.astype(np.float64).reshape(-1)
        nan = inf = 0
    expected = {"nanCount": nan, "infCount": inf}
    if finite.size:
        expected.update(
            min=float(finite.min()),
            max=float(finite.max()),
            mean=float(finite.mean()),
            l2norm=float(np.sqrt(np.sum(finite * finite))),
        )
    else:
        expected.update(min=None, max=None, mean=None, l2norm=None)
    for key, value in expected.items():
        if key in ("nanCount", "infCount"):
            if stats.get(key) != value:
                return f"stats {key}={stats.get(key)!r}, numpy says {value!r}"
        elif not _close(stats.get(key), value):
            return f"stats {key}={stats.get(key)!r}, numpy says {value!r}"
    return None


def verify_root(root: str | os.PathLike[str], committed: dict[str, str]) -> KillResult:
    """Check one dump root after a kill (see the module docstring).

    Args:
        root: The dump root (may be missing, or hold only a claimed window).
        committed: ``{window path: digest}`` the child printed for windows below this root.
    """
    import zarr
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    from megadump_zarr.read import open_dump

    def stored(key: str) -> bytes:  # a stored key, read through the dump's integrity checks
        buffer = sync(dump.store.get(key, default_buffer_prototype()))
        if buffer is None:
            raise FileNotFoundError(f"no {key} below {root}")
        return buffer.to_bytes()

    result = KillResult()
    root = os.path.abspath(os.fspath(root))
    window_files = sorted(Path(root).glob("rank_*/window_*/zarr.json"))
    try:
        dump = open_dump(root)
    except ValueError as error:
        finished = [p for p in window_files if '"status":"complete"' in p.read_text().replace(" ", "")]
        if finished or committed:
            result.problems.append(
                f"{root}: open_dump failed ({error}) but windows were committed: {finished or list(committed)}"
            )
        return result
    windows = dump.windows()
    statuses = {
        os.path.join(root, *path.split("/")): status for path, status in zip(windows["path"], windows["status"])
    }
    result.torn += int((windows["status"] == "writing").sum())
    result.aborted += int((windows["status"] == "aborted").sum())
    for path in committed:
        if statuses.get(path) != "complete":
            result.problems.append(f"{path}: reported committed, but open_dump lists it as {statuses.get(path)!r}")
    records = dump.records()
    record_paths = set(records["path"])
    for key, status in zip(windows["path"], windows["status"]):
        if status != "complete":
            continue
        result.complete += 1
        window_path = os.path.join(root, *key.split("/"))
        try:  # the committed window document, and its nodes as the readers describe them (packs: their task groups)
            window_doc = json.loads(stored(f"{key}/zarr.json"))
            info = dump._info(key)
            # a packed window's task groups, records and row coordinates, each described from its pack's row
            nodes = info.task_nodes() if hasattr(info, "task_nodes") else dump._nodes(info)  # noqa: SLF001
            invocations = window_doc["attributes"]["invocations"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            result.problems.append(f"{window_path}: complete, but its window document is unusable: {error!r}")
            continue
        missing = [name for name in invocations if nodes.get(name, {}).get("node_type") != "group"]
        if missing:
            result.problems.append(f"{window_path}: complete, but invocations {missing} have no group")
        for name in invocations:  # every record the invocation declares is there
            attrs = nodes.get(name, {}).get("attributes") or {}
            declared = attrs.get("recordCount", attrs.get("tensorCount"))
            found = sum(
                1
                for rel, doc in nodes.items()
                if rel.startswith(name + "/")
                and doc.get("node_type") == "array"
                and "name" in (doc.get("attributes") or {})
            )
            if declared != found:
                result.problems.append(
                    f"{window_path}: complete, but {name} declares {declared} records and holds {found}"
                )
        per_array: dict[str, str] = {}
        sampled = 0
        try:  # what plain zarr sees on disk (packs are plain sharded arrays); packed records are read by row
            zarr.open_group(window_path, mode="r").members(max_depth=None)
            members = dict(zarr.open_group(dump.store, path=key, mode="r").members(max_depth=None))
        except Exception as error:  # noqa: BLE001 - any failure to open is the finding
            result.problems.append(f"{window_path}: complete, but zarr cannot open it: {error!r}")
            continue
        for rel, doc in nodes.items():
            if doc.get("node_type") != "array":
                continue
            array_key = f"{key}/{rel}"
            try:  # each stored array's own document (what zarr.open_array(path) reads) must exist and agree
                if info.packed(rel) is not None:  # a packed record (its pack row) or a packed task's row coordinate
                    values = np.asarray(dump._array(info, rel, doc)[...])  # noqa: SLF001 - the readers' own route
                else:
                    own_doc = json.loads(stored(f"{array_key}/zarr.json"))
                    if own_doc.get("shape") != doc.get("shape") or own_doc.get("data_type") != doc.get("data_type"):
                        raise ValueError(f"its zarr.json disagrees with the consolidated metadata: {own_doc} vs {doc}")
                    values = members[rel][...]
            except Exception as error:  # noqa: BLE001 - any failure to read is the finding
                result.problems.append(f"{window_path}: array {rel} of a complete window is unreadable: {error!r}")
                continue
            result.arrays += 1
            attrs = doc.get("attributes") or {}
            if array_key not in record_paths:
                continue  # a coordinate array
            per_array[rel] = array_digest(values)
            if "stats" in attrs:
                problem = _stats_problem(values, attrs["stats"])
                if problem:
                    result.problems.append(f"{window_path}: {rel}: {problem}")
            if sampled < 2:  # the reader's own path (open_dump -> record_array) on a sample
                sampled += 1
                try:
                    through_reader = np.asarray(dump.record_array(array_key).values)
                except Exception as error:  # noqa: BLE001
                    result.problems.append(f"{window_path}: record_array({array_key!r}) failed: {error!r}")
                    continue
                if through_reader.tobytes() != values.tobytes():
                    result.problems.append(f"{window_path}: record_array({array_key!r}) differs from the stored array")
        expected = committed.get(window_path)
        if expected is not None:
            result.committed += 1
            if combine_digests(per_array) != expected:
                result.problems.append(f"{window_path}: values differ from the hash printed at commit")
    return result


def _read_log(path: Path) -> tuple[bool, dict[str, str]]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return False, {}
    committed = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "COMMITTED":
            committed[parts[1]] = parts[2]
    return "READY" in text.split(), committed


def run_kill_trial(
    context: Any, directory: str | os.PathLike[str], seed: int, delay: float, ready_timeout: float = 120.0
) -> KillResult:
    """Start the dump loop, SIGKILL it ``delay`` seconds after it is ready, verify every root.

    Args:
        context: From ``kill_context()``.
        directory: An empty directory for this trial.
        seed: Demo block seed.
        delay: Seconds between READY and SIGKILL.
        ready_timeout: Most seconds to wait for READY.
    """
    directory = Path(directory)
    log = directory / "child.log"
    base = directory / "dump"
    base.mkdir(parents=True, exist_ok=True)
    from benchmarks import reliability  # by its module name, also when this file runs as __main__

    process = context.Process(target=reliability.kill_child, args=(str(base), seed, str(log)), daemon=True)
    process.start()
    result = KillResult(trials=1, delays=[delay])
    deadline = time.monotonic() + ready_timeout
    try:
        while not _read_log(log)[0]:
            if not process.is_alive():
                result.problems.append(f"trial {directory}: the child died before READY (exit {process.exitcode})")
                return result
            if time.monotonic() > deadline:
                result.problems.append(f"trial {directory}: no READY within {ready_timeout} s")
                return result
            time.sleep(0.002)
        time.sleep(delay)
        if not process.is_alive():
            result.problems.append(f"trial {directory}: the child exited on its own (exit {process.exitcode})")
    finally:
        if process.is_alive():
            os.kill(process.pid, signal.SIGKILL)
        process.join(30)
    _, committed = _read_log(log)
    for root in sorted(p for p in base.iterdir() if p.is_dir()):
        mine = {path: digest for path, digest in committed.items() if path.startswith(str(root) + os.sep)}
        result.add(verify_root(root, mine))
    result.trials = 1
    known = {os.path.join(str(base), *p.relative_to(base).parts) for p in base.glob("*/rank_*/window_*")}
    for path in committed:
        if path not in known:
            result.problems.append(f"{path}: reported committed, but the window directory is missing")
    return result


def run_kills(trials: int = 20, seed: int = 0, max_delay: float = 1.2, directory: str | None = None) -> KillResult:
    """``trials`` kill trials with seeded delays in ``[0, max_delay)`` seconds.

    Args:
        trials: How many.
        seed: Seed of the delays and of the demo blocks.
        max_delay: Longest delay after READY.
        directory: Where the trials write (a temporary directory, removed afterwards, when None).
    """
    import shutil

    rng = random.Random(seed)
    context = kill_context()
    total = KillResult()
    start = time.perf_counter()
    scratch = tempfile.mkdtemp(prefix="megadump-kill-") if directory is None else directory
    try:
        for trial in range(trials):
            delay = rng.uniform(0.0, max_delay)
            trial_result = run_kill_trial(context, Path(scratch) / f"trial_{trial:03d}", seed + trial, delay)
            total.add(trial_result)
    finally:
        if directory is None:
            shutil.rmtree(scratch, ignore_errors=True)
    total.seconds = time.perf_counter() - start
    return total


# ============================================================================================== main
def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status.

    Args:
        argv: Arguments (``sys.argv[1:]`` when None).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000, help="decode fuzz cases (default 10000)")
    parser.add_argument("--kills", type=int, default=20, help="SIGKILL trials (default 20)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--max-delay", type=float, default=1.2, help="longest kill delay in seconds (default 1.2)")
    args = parser.parse_args(argv)
    ok = True
    if args.cases:
        fuzz = run_decode_fuzz(args.cases, args.seed)
        print(
            f"decode fuzz: cases: {fuzz.cases}  time: {fuzz.seconds:.2f} s  slowest case: {fuzz.max_case_seconds * 1e3:.1f} ms"
        )
        for target, counter in fuzz.outcomes.items():
            print(
                f"  {target:15s} ok: {counter['ok']}  ValueError: {counter['ValueError']}  "
                f"RuntimeError: {counter['RuntimeError']}  other=failure: {counter['other']}"
            )
        print(
            f"  unclear messages: {len(fuzz.unclear)}  wrong payloads: {len(fuzz.wrong_payload)}  slow cases: {len(fuzz.slow)}"
        )
        for shape, n in fuzz.messages.most_common(12):
            print(f"  {n:7d}  {shape}")
        for item in (fuzz.failures + fuzz.unclear + fuzz.wrong_payload + fuzz.slow)[:20]:
            print(f"  FAILURE {item}")
        ok &= fuzz.passed
    if args.kills:
        kills = run_kills(args.kills, args.seed, args.max_delay)
        print(
            f"kills: trials: {kills.trials}  committed windows verified: {kills.committed}  complete windows: "
            f"{kills.complete}  torn (writing): {kills.torn}  aborted: {kills.aborted}  arrays read: {kills.arrays}  "
            f"problems: {len(kills.problems)}  time: {kills.seconds:.1f} s"
        )
        for problem in kills.problems[:20]:
            print(f"  FAILURE {problem}")
        ok &= not kills.problems
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
