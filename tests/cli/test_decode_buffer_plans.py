"""``megadump decode-buffer`` finds the right saved plan below a dump root, and refuses what readers
cannot represent (issue 12.6 and 12.7 writer side)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from megadump_zarr import TensorDumpConfig, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.l1 import L1_DUMP_RECORDS_OFFSET
from megadump_zarr.store.writer import window_status
from tests.cli._helpers import assert_input_error


def _hung_run(root: Path, monkeypatch: pytest.MonkeyPatch, buffer_file: Path, *, tokens: int = 37) -> str:
    """One L1 launch that fails in expert_down (as a hang would); save its Device buffer; return the run id."""
    import megadump_zarr.dump.dumper as dumper_module

    block = MoEBlock(DemoConfig(tokens=tokens))
    down = block.expert_kernel.graph.operators[1]

    def hang(tile):
        raise RuntimeError("simulated hang")

    down.tile_fn = hang
    real_cancel = dumper_module._TensorDumpCall.cancel

    def keep_buffer(self):
        buffer_file.write_bytes(self._prepared_l1.buffer.cpu().numpy().tobytes())
        real_cancel(self)

    monkeypatch.setattr(dumper_module._TensorDumpCall, "cancel", keep_buffer)
    config = TensorDumpConfig(root, level="L1", kernel_names="moe_experts", stages=("expert_up", "expert_down"))
    with pytest.raises(RuntimeError, match="simulated hang"):
        with tensor_dump(config) as dumper:
            block(block.make_input())
    monkeypatch.setattr(dumper_module._TensorDumpCall, "cancel", real_cancel)
    return dumper.run_id


def test_decode_buffer_finds_the_plan_below_the_root(cli, tmp_path, monkeypatch):
    root = tmp_path / "dump"
    run_a = _hung_run(root, monkeypatch, tmp_path / "a.bin")
    run_b = _hung_run(root, monkeypatch, tmp_path / "b.bin", tokens=40)  # another table: other row counts
    out = tmp_path / "salvaged"
    report = cli("decode-buffer", tmp_path / "b.bin", root, "--out", out, "--json").json()
    assert report["plan"] == str(root / f".plans_{run_b}" / "rank_0_window_0000_invocation_000000_forward")
    assert window_status(out, 0, 0) == "aborted" and report["captured"] > 0
    report = cli("decode-buffer", tmp_path / "a.bin", root, "--out", out, "--window", "0", "--json")
    assert_input_error(report, "already exists")  # found run a's plan, then met the window written above
    report = cli("decode-buffer", tmp_path / "a.bin", root, "--out", tmp_path / "other", "--json").json()
    assert run_a in report["plan"]


def test_decode_buffer_ambiguous_plans_are_listed(cli, tmp_path, monkeypatch):
    root = tmp_path / "dump"
    run_a = _hung_run(root, monkeypatch, tmp_path / "a.bin")
    run_b = _hung_run(root, monkeypatch, tmp_path / "b.bin")  # the same launch twice: identical tables
    out = tmp_path / "salvaged"
    result = cli("decode-buffer", tmp_path / "a.bin", root, "--out", out)
    assert_input_error(
        result,
        "matches 2 saved plans",
        f"run {run_a} rank 0 window 0 invocation_000000_forward",
        f"run {run_b} rank 0 window 0 invocation_000000_forward",
        "--run",
    )
    assert not out.exists()
    assert cli("decode-buffer", tmp_path / "a.bin", root, "--out", out, "--run", run_a[:-2]).code == 0
    result = cli("decode-buffer", tmp_path / "a.bin", root, "--out", out, "--rank", "3")
    assert_input_error(result, "no saved L1 plan below", "matches the selection", f"run {run_a} rank 0 window 0")


def test_decode_buffer_refuses_indices_readers_cannot_represent(cli, tmp_path, monkeypatch):
    root = tmp_path / "dump"
    run = _hung_run(root, monkeypatch, tmp_path / "a.bin")
    plan = root / f".plans_{run}" / "rank_0_window_0000_invocation_000000_forward"
    out = tmp_path / "salvaged"
    assert_input_error(
        cli("decode-buffer", tmp_path / "a.bin", plan, "--out", out, "--window", str(10**6)),
        "--window must be in [0, 1000000) so that readers can represent it, got 1000000",
    )
    assert_input_error(
        cli("decode-buffer", tmp_path / "a.bin", plan, "--out", out, "--window", str(10**20)), "--window"
    )  # refused (by the argument parser's int64 check or by ours)
    assert_input_error(cli("decode-buffer", tmp_path / "a.bin", plan, "--out", out, "--window", "1.5"), "invalid int")
    assert not out.exists()


def test_decode_buffer_checks_the_buffers_task_index_against_the_plan(cli, tmp_path, monkeypatch):
    root = tmp_path / "dump"
    run = _hung_run(root, monkeypatch, tmp_path / "a.bin")
    plan = root / f".plans_{run}" / "rank_0_window_0000_invocation_000000_forward"
    raw = bytearray((tmp_path / "a.bin").read_bytes())
    task_index_byte = L1_DUMP_RECORDS_OFFSET + 32  # record 0: u32 task_index is the 9th field
    raw[task_index_byte] ^= 0x7
    (tmp_path / "bad.bin").write_bytes(bytes(raw))
    result = cli("decode-buffer", tmp_path / "bad.bin", plan, "--out", tmp_path / "salvaged")
    assert_input_error(result, "cannot decode the buffer against", "record 0 task_index")


def test_decode_buffer_refuses_a_planted_rank_link(cli, tmp_path, monkeypatch):
    root = tmp_path / "dump"
    run = _hung_run(root, monkeypatch, tmp_path / "a.bin")
    plan = root / f".plans_{run}" / "rank_0_window_0000_invocation_000000_forward"
    out, elsewhere = tmp_path / "salvaged", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, out / "rank_0")
    result = cli("decode-buffer", tmp_path / "a.bin", plan, "--out", out)
    assert_input_error(result, f"refusing to write {out}/rank_0/window_0000", f"is a link to {elsewhere}")
    assert list(elsewhere.iterdir()) == []


def test_a_salvaged_demo_window_replays_without_a_reference(cli, tmp_path, monkeypatch):
    """The plan keeps the operators' source and the tiles' rows, so the window decode-buffer writes replays
    like a committed one (the hung launch is exactly when a replay is wanted)."""
    root, out = tmp_path / "dump", tmp_path / "salvaged"
    _hung_run(root, monkeypatch, tmp_path / "a.bin")
    assert cli("decode-buffer", tmp_path / "a.bin", root, "--out", out, "-q").code == 0
    invocation = out / "rank_0" / "window_0000" / "invocation_000000_forward"
    import json

    source = json.loads((invocation / "zarr.json").read_text())["attributes"]["operatorSource"]
    assert source == {"name": "megadump_zarr.demo.MoEBlock", "config": DemoConfig().to_document()}
    result = cli("replay", out, "--stage", "expert_up", "--owner", "1", "--json")
    assert result.code == 0, result.err
    assert result.json()["verdict"] == "correct on its inputs"
    assert result.json()["reference"].startswith("megadump_zarr.demo.MoEBlock(tokens=37")
    assert_input_error(
        cli("replay", out, "--stage", "expert_down", "--owner", "0"),
        "the launch of invocation_000000_forward failed before task 4 of stage 'expert_down' wrote its "
        "outputs (a salvaged partial launch: they are pending, never captured)",
    )


def test_plan_rows_and_source_fields_are_checked(tmp_path, monkeypatch):
    import re

    import megadump_zarr.dump.dumper as dumper_module
    from megadump_zarr.dump.saved_plans import salvage_window

    documents = []
    real = dumper_module.plan_document
    monkeypatch.setattr(
        dumper_module, "plan_document", lambda *a, **k: documents.append(real(*a, **k)) or documents[-1]
    )
    block = MoEBlock(DemoConfig())
    with tensor_dump(TensorDumpConfig(tmp_path, level="L1", kernel_names="moe_experts", stages="combine")):
        block(block.make_input())
    (document,) = documents
    assert document["taskRows"]["13"] == [0, 8] and document["taskRows"]["17"] == [32, 37]  # combine's row tiles
    buffer = bytes(document["totalBytes"])  # nothing captured: every record pending
    window, _ = salvage_window(buffer, document)
    (invocation,) = window.invocations
    assert invocation.attrs["operatorSource"] == {
        "name": "megadump_zarr.demo.MoEBlock",
        "config": DemoConfig().to_document(),
    }
    for field, value, message in [
        ("operatorSource", "megadump_zarr.demo.MoEBlock", "L1 plan field 'operatorSource' must be a mapping, got str"),
        ("taskRows", [[13, 0, 8]], "L1 plan field 'taskRows' must be a mapping, got list"),
        ("taskRows", {"13": [0, 1.5]}, "L1 plan field 'taskRows' entry '13' must be an integer, got 1.5"),
        ("taskRows", {"x": [0, 8]}, "L1 plan field 'taskRows' entry 'x': [0, 8] is not a task id -> [start, stop]"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            salvage_window(buffer, {**document, field: value})


def test_a_plan_directory_with_a_wrong_schema_is_named_not_searched(cli, tmp_path, monkeypatch):
    import json

    root = tmp_path / "dump"
    _hung_run(root, monkeypatch, tmp_path / "a.bin")
    (plan,) = root.glob(".plans_*/rank_*")
    document = json.loads((plan / "zarr.json").read_text())
    document["attributes"]["schema"] = "megadump_zarr.l1-plan/9"
    (plan / "zarr.json").write_text(json.dumps(document))
    assert_input_error(
        cli("decode-buffer", tmp_path / "a.bin", plan, "--out", tmp_path / "out"),
        f"not an L1 plan (schema 'megadump_zarr.l1-plan/1' expected): {plan}",
    )
