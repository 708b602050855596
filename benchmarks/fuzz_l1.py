"""Fuzz the L1 dump reader: random and mutated buffers must read or raise ValueError, nothing else.

Run ``python -m benchmarks.fuzz_l1 [--cases N] [--seed S]``. Prints the outcome
counts (ok / ValueError grouped by the first words of its message / failures)
and the total time; exits 1 when any other exception escaped.
"""

from __future__ import annotations

import argparse
import random
import struct
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

from megadump_zarr.l1 import (
    L1_ANY_WORKER,
    L1_DUMP_HEADER_SIZE,
    L1_DUMP_MAGIC,
    L1_DUMP_MAX_RECORDS,
    L1_DUMP_PAYLOAD_BASE,
    L1_DUMP_RECORD_SIZE,
    L1_DUMP_RECORDS_OFFSET,
    L1_DUMP_STATUS_BYTE,
    L1_DUMP_VERSION,
    L1RecordEntry,
    pack_l1_buffer,
    plan_slots,
    read_l1_buffer,
)

_INTERESTING_U32 = (0, 1, 2, 31, 32, 63, 64, 65, 4095, 4096, 4097, 262208, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF)


@dataclass
class FuzzResult:
    """Outcome counts of one fuzz run.

    Args:
        cases: buffers tried.
        ok: buffers that read back.
        rejected: ValueError counts keyed by the first words of the message.
        failures: ``(case, repr(exception))`` for every other exception (a bug).
        records_outside: cases whose returned records did not lie inside total_bytes (a bug).
        seconds: wall time of the run.
    """

    cases: int = 0
    ok: int = 0
    rejected: Counter = field(default_factory=Counter)
    failures: list = field(default_factory=list)
    records_outside: list = field(default_factory=list)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        """True when only ok and ValueError outcomes were seen."""
        return not self.failures and not self.records_outside


def _valid_buffer(rng: random.Random) -> bytearray:
    """Pack a small random valid buffer (sometimes with the planner's full-size table).

    Args:
        rng: the seeded generator.
    """
    count = rng.choice((1, 1, 2, 3, 5, 8, 17))
    sizes = [rng.choice((0, 1, 7, 63, 64, 65, 200)) for _ in range(count)]
    if rng.random() < 0.05:
        base = L1_DUMP_PAYLOAD_BASE
    else:
        base = L1_DUMP_RECORDS_OFFSET + count * L1_DUMP_RECORD_SIZE + 64 * rng.randrange(3)
    offsets = plan_slots(sizes, payload_base=base)
    entries = [
        L1RecordEntry(
            task_id=rng.randrange(1 << 32),
            phase=rng.choice((1, 2)),
            parameter_position=rng.randrange(16),
            source_offset_bytes=rng.randrange(1 << 64),
            payload_offset=offset,
            payload_bytes=size,
            status=0,
            task_index=rng.randrange(1 << 16),
            worker_id=rng.choice((L1_ANY_WORKER, rng.randrange(64))),
        )
        for offset, size in zip(offsets, sizes)
    ]
    buffer = pack_l1_buffer(entries, payload_base=base)
    for i in range(count):  # some records already captured, payload bytes filled
        if rng.random() < 0.5:
            struct.pack_into("<I", buffer, L1_DUMP_RECORDS_OFFSET + i * L1_DUMP_RECORD_SIZE + L1_DUMP_STATUS_BYTE, 1)
    return buffer


def _random_bytes(rng: random.Random) -> bytes:
    """Arbitrary bytes, sometimes behind a correct magic and version.

    Args:
        rng: the seeded generator.
    """
    length = rng.choice((0, 1, 31, 32, 33, 64, 100, 128, 256, rng.randrange(1024)))
    data = bytearray(rng.randbytes(length))
    if length >= 8 and rng.random() < 0.7:
        struct.pack_into("<2I", data, 0, L1_DUMP_MAGIC, L1_DUMP_VERSION)
    if length >= 24 and rng.random() < 0.5:
        struct.pack_into("<3I", data, 12, rng.randrange(6), L1_DUMP_RECORD_SIZE, L1_DUMP_RECORDS_OFFSET)
    return bytes(data)


def _mutate(rng: random.Random, buffer: bytearray) -> bytearray:
    """Apply one to four random mutations to a valid buffer.

    Args:
        rng: the seeded generator.
        buffer: a valid packed buffer (changed in place and returned, maybe resized).
    """
    count = struct.unpack_from("<I", buffer, 12)[0]
    table_end = L1_DUMP_RECORDS_OFFSET + count * L1_DUMP_RECORD_SIZE
    for _ in range(rng.randint(1, 4)):
        kind = rng.randrange(8)
        if kind == 0:  # flip bits of a header byte
            buffer[rng.randrange(L1_DUMP_HEADER_SIZE)] ^= 1 << rng.randrange(8)
        elif kind == 1:  # flip bits of a table byte
            buffer[rng.randrange(L1_DUMP_RECORDS_OFFSET, table_end)] ^= 1 << rng.randrange(8)
        elif kind == 2:  # set a header field to an interesting value
            struct.pack_into("<I", buffer, 4 * rng.randrange(8), rng.choice(_INTERESTING_U32))
        elif kind == 3:  # set a record field to an interesting value
            offset = L1_DUMP_RECORDS_OFFSET + rng.randrange(count) * L1_DUMP_RECORD_SIZE + 4 * rng.randrange(10)
            struct.pack_into("<I", buffer, offset, rng.choice(_INTERESTING_U32 + (rng.randrange(len(buffer) + 128),)))
        elif kind == 4:  # truncate
            del buffer[rng.randrange(len(buffer) + 1) :]
        elif kind == 5:  # extend with trailing bytes
            buffer.extend(rng.randbytes(rng.randrange(1, 200)))
        elif kind == 6:  # move one record's slot onto another's (overlap, or shared zero-byte position)
            src, dst = rng.randrange(count), rng.randrange(count)
            base = L1_DUMP_RECORDS_OFFSET + 20  # payload_offset field of record 0
            slot = struct.unpack_from("<I", buffer, base + src * L1_DUMP_RECORD_SIZE)[0]
            moved = (slot + rng.choice((0, 0, 1, 32))) & 0xFFFFFFFF
            struct.pack_into("<I", buffer, base + dst * L1_DUMP_RECORD_SIZE, moved)
        else:  # claim a different record count, sometimes past the maximum
            struct.pack_into("<I", buffer, 12, rng.choice((0, count + 1, count * 2, L1_DUMP_MAX_RECORDS + 1)))
        if len(buffer) < L1_DUMP_RECORDS_OFFSET + count * L1_DUMP_RECORD_SIZE:
            break  # later table mutations would index past the end
    return buffer


def make_case(rng: random.Random) -> bytes | bytearray:
    """One fuzz input: random bytes (30%), a mutated valid buffer (60%) or a valid one (10%).

    Args:
        rng: the seeded generator.
    """
    roll = rng.random()
    if roll < 0.3:
        return _random_bytes(rng)
    if roll < 0.9:
        return _mutate(rng, _valid_buffer(rng))
    return _valid_buffer(rng)


def _message_key(error: ValueError) -> str:
    """The first words of an error message, without the numbers, for grouping.

    Args:
        error: the raised ValueError.
    """
    words = [w for w in str(error).replace(":", " ").split() if w == "L1" or not any(c.isdigit() for c in w)]
    return " ".join(words[:6])


def run_fuzz(cases: int = 10_000, seed: int = 0) -> FuzzResult:
    """Read ``cases`` generated buffers and count the outcomes.

    Args:
        cases: how many buffers to try.
        seed: seed of the ``random.Random`` generator (same seed, same buffers).

    Returns:
        The :class:`FuzzResult`.
    """
    rng = random.Random(seed)
    result = FuzzResult()
    start = time.perf_counter()
    for case in range(cases):
        data = make_case(rng)
        result.cases += 1
        try:
            buffer = read_l1_buffer(data)
        except ValueError as error:
            result.rejected[_message_key(error)] += 1
            continue
        except Exception as error:  # noqa: BLE001 - counting exactly these is the point
            result.failures.append((case, repr(error)))
            continue
        result.ok += 1
        total = buffer.header.total_bytes
        if any(r.payload_offset + r.payload_bytes > total or r.payload.size != r.payload_bytes for r in buffer.records):
            result.records_outside.append(case)
    result.seconds = time.perf_counter() - start
    return result


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status.

    Args:
        argv: arguments (``sys.argv[1:]`` when None).
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000, help="buffers to try (default 10000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = parser.parse_args(argv)
    result = run_fuzz(args.cases, args.seed)
    print(
        f"cases: {result.cases}  ok: {result.ok}  ValueError: {sum(result.rejected.values())}"
        f"  failures: {len(result.failures) + len(result.records_outside)}  time: {result.seconds:.2f} s"
    )
    for key, n in result.rejected.most_common():
        print(f"  {n:6d}  {key}")
    for case, error in result.failures[:20]:
        print(f"  FAILURE case {case}: {error}")
    for case in result.records_outside[:20]:
        print(f"  FAILURE case {case}: a returned record lies outside total_bytes")
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
