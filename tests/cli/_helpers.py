"""Helpers of the ``megadump`` command-line tests; imported as ``tests.cli._helpers``."""

from __future__ import annotations

from dataclasses import dataclass
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest


@dataclass
class Result:
    """One in-process run of ``megadump``."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def cli_runner(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *, columns: int = 200) -> Any:
    """A function running ``megadump`` in-process (``main([...])``) on a plain console of ``columns``
    columns, returning a :class:`Result`."""
    from megadump_zarr.cli.main import main

    monkeypatch.setenv("COLUMNS", str(columns))
    for name in ("FORCE_COLOR", "MEGADUMP_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_COLOR", "1")

    def run(*args: Any) -> Result:
        capsys.readouterr()
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def assert_input_error(result: Result, *fragments: str) -> None:
    """Exit status 2, one ``error: ...`` line on stderr naming ``fragments``, no traceback."""
    assert result.code == 2, (result.code, result.out, result.err)
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("error: "), result.err
    assert "Traceback" not in result.err + result.out
    for fragment in fragments:
        assert fragment in result.err, (fragment, result.err)


@dataclass
class SalvageInputs:
    """A saved L1 Device buffer with some PENDING records, its plan, and what the captured ones hold."""

    buffer: Path
    plan: Path
    captured: dict[tuple[int, str, int], np.ndarray]  # (task id, io, index) -> payload
    pending: list[tuple[int, str, int, str]]  # (task id, io, index, name)


def make_salvage_inputs(directory: Path, monkeypatch: pytest.MonkeyPatch, *, pending: int = 3) -> SalvageInputs:
    """Run one L1 launch of the demo expert kernel, keep its plan and buffer, set the last ``pending``
    records back to PENDING (status byte at record offset + 28), save both files."""
    import megadump_zarr.dump.dumper as dumper_module
    from megadump_zarr import TensorDumpConfig, tensor_dump
    from megadump_zarr.demo.model import MoEBlock
    from megadump_zarr.dump.saved_plans import plan_document
    from megadump_zarr.dump.window import DumpInvocation
    from megadump_zarr.l1 import L1_DUMP_STATUS_BYTE

    prepared_calls: list[Any] = []
    original = dumper_module.prepare_l1_dump

    def spy(*args: Any, **kwargs: Any) -> Any:
        prepared = original(*args, **kwargs)
        prepared_calls.append(prepared)
        return prepared

    monkeypatch.setattr(dumper_module, "prepare_l1_dump", spy)
    block = MoEBlock()
    config = TensorDumpConfig(
        directory / "live",
        level="L1",
        kernel_names="moe_experts",
        stages=("expert_up", "expert_down"),
        owner_ids=(0, 1),
    )
    with tensor_dump(config) as dumper:
        block(block.make_input())
        dumper.step()
    monkeypatch.setattr(dumper_module, "prepare_l1_dump", original)
    prepared = prepared_calls[0]
    invocation = DumpInvocation(
        invocation_id=0,
        step=0,
        kernel_name="moe_experts",
        direction="forward",
        rank=0,
        device="cpu",
        level="L1",
        execution_mode="event_driven",
    )
    document = plan_document(prepared, invocation, 0)
    buffer = prepared.buffer.cpu().numpy().copy()
    records = list(prepared.records)
    assert len(records) > pending
    captured: dict[tuple[int, str, int], np.ndarray] = {}
    lost = []
    for record in records[:-pending]:
        assert not record.truncated
        payload = buffer[record.payload_offset : record.payload_offset + record.payload_bytes].copy()
        dtype = {"torch.float32": np.float32, "torch.int64": np.int64}[str(record.dtype)]
        captured[(record.task_id, record.io, record.index)] = payload.view(dtype).reshape(record.actual_shape)
    for record in records[-pending:]:
        buffer[record.record_offset + L1_DUMP_STATUS_BYTE] = 0  # byte 28 of the record: back to PENDING
        lost.append((record.task_id, record.io, record.index, record.tensor_name))
    plan_path = directory / "invocation_000000_forward.json"
    plan_path.write_text(json.dumps(document), encoding="utf-8")
    buffer_path = directory / "buffer.bin"
    buffer_path.write_bytes(buffer.tobytes())
    return SalvageInputs(buffer_path, plan_path, captured, lost)


def write_named_l0(root: Path, data: dict[str, np.ndarray]) -> None:
    """One L0 window of one invocation whose records carry the given names (array keys stay plain: t0, t1, ...).

    Args:
        root: The dump root to write.
        data: Record name -> values, in record order.
    """
    from megadump_zarr.layout.write_model import ArrayWrite, InvocationWrite, WindowWrite
    from megadump_zarr.store.writer import WindowWriter

    items = [
        ArrayWrite(
            f"t{k}",
            x,
            (f"t{k}_0", f"t{k}_1"),
            {
                "name": name,
                "role": "stage_output",
                "capturePhase": "after",
                "actualShape": list(x.shape),
                "declaredShape": list(x.shape),
            },
        )
        for k, (name, x) in enumerate(data.items())
    ]
    invocation = InvocationWrite(
        "invocation_000000_forward",
        {"invocationId": 0, "step": 0, "direction": "forward", "kernelName": "k", "level": "L0"},
        [],
        items,
    )
    with WindowWriter(root, durable=False) as writer:
        writer.write_window(
            WindowWrite(0, 0, {"level": "L0", "windowIndex": 0, "invocations": [invocation.name]}, [invocation])
        )
