"""Schedule and window semantics of the dumper, end to end with the demo block and the store."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from megadump_zarr import DiagnosticAction, TensorDumpConfig, schedule, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.diagnostics import active_session
from tests.dump._dump_helpers import file_hashes, node_attrs, read_array, read_json

KERNELS = ["moe_router", "moe_dispatch", "moe_experts"]


def forward(block: MoEBlock, x: torch.Tensor | None = None) -> torch.Tensor:
    return block(block.make_input() if x is None else x)


def train_step(block: MoEBlock) -> None:
    x = block.make_input().requires_grad_()
    out = block(x)
    out.float().pow(2).mean().backward()


def paths(dumper) -> tuple[str, ...]:
    """``last_window_paths`` as strings (local windows may be reported as Path objects)."""
    out = dumper.last_window_paths
    assert all(isinstance(p, (str, Path)) for p in out)
    return tuple(str(p) for p in out)


def windows(root: Path, rank: int = 0) -> list[str]:
    base = root / f"rank_{rank}"
    return sorted(p.name for p in base.iterdir() if p.is_dir()) if base.exists() else []


def window_manifest(path: Path) -> dict:
    return node_attrs(path)


def invocation_attrs(window: Path) -> list[dict]:
    manifest = window_manifest(window)
    return [node_attrs(window / name) for name in manifest["invocations"]]


# --------------------------------------------------------------------------- no schedule
def test_no_schedule_one_window_at_exit(tmp_path):
    block = MoEBlock()
    seen = []
    with tensor_dump(TensorDumpConfig(tmp_path), on_dump_ready=seen.append) as dumper:
        assert dumper.current_action is DiagnosticAction.RECORD
        assert active_session() is dumper
        forward(block)
        dumper.step()
        assert paths(dumper) == ()  # RECORD followed by RECORD: the window stays open
        assert not (tmp_path / "rank_0").exists()
        forward(block)
        dumper.step()
        assert dumper.step_num == 2
        assert seen == []
    assert active_session() is None
    assert windows(tmp_path) == ["window_0000"]
    window = tmp_path / "rank_0" / "window_0000"
    assert paths(dumper) == (str(window),)
    assert dumper.last_manifest_paths == dumper.last_window_paths
    assert seen == [dumper]
    manifest = window_manifest(window)
    assert manifest["status"] == "complete"
    assert manifest["windowIndex"] == 0
    assert manifest["rank"] == 0
    assert manifest["level"] == "L0"
    assert manifest["invocationCount"] == 6
    assert manifest["capturePhaseSemantics"] == "mega_kernel_boundary"
    invs = invocation_attrs(window)
    assert [i["kernelName"] for i in invs] == KERNELS * 2
    assert [i["step"] for i in invs] == [0, 0, 0, 1, 1, 1]
    assert [i["invocationId"] for i in invs] == list(range(6))
    assert manifest["invocations"] == [f"invocation_{i:06d}_forward" for i in range(6)]


def test_no_launch_no_window(tmp_path):
    with tensor_dump(TensorDumpConfig(tmp_path)) as dumper:
        dumper.step()
    assert paths(dumper) == ()
    assert not (tmp_path / "rank_0").exists()


# --------------------------------------------------------------------------- profiler-style schedule
def test_schedule_wait_warmup_active(tmp_path):
    sched = schedule(wait=1, warmup=1, active=2)
    expected_actions = [
        DiagnosticAction.NONE,
        DiagnosticAction.WARMUP,
        DiagnosticAction.RECORD,
        DiagnosticAction.RECORD_AND_SAVE,
    ] * 2
    assert [sched(s) for s in range(8)] == expected_actions
    block = MoEBlock()
    ready = []
    paths_after_step = []
    with tensor_dump(
        TensorDumpConfig(tmp_path), schedule=sched, on_dump_ready=lambda d: ready.append(d.window_index)
    ) as dumper:
        for step in range(8):
            assert dumper.step_num == step
            assert dumper.current_action is expected_actions[step]
            assert dumper.is_capture_enabled() == (
                expected_actions[step] in (DiagnosticAction.RECORD, DiagnosticAction.RECORD_AND_SAVE)
            )
            forward(block)
            dumper.step()
            paths_after_step.append(paths(dumper))
            present = windows(tmp_path)
            if step < 3:
                assert present == []
            elif step < 7:
                assert present == ["window_0000"]
            else:
                assert present == ["window_0000", "window_0001"]
        forward(block)  # step 8 is NONE: nothing captured, nothing left at exit
    w0, w1 = (str(tmp_path / "rank_0" / f"window_{i:04d}") for i in range(2))
    assert paths_after_step == [(), (), (), (w0,), (w0,), (w0,), (w0,), (w1,)]
    assert paths(dumper) == (w1,)
    assert ready == [1, 2]  # called after each export, once the index has advanced
    assert windows(tmp_path) == ["window_0000", "window_0001"]
    for index, steps in ((0, [2, 3]), (1, [6, 7])):
        window = tmp_path / "rank_0" / f"window_{index:04d}"
        manifest = window_manifest(window)
        assert manifest["windowIndex"] == index
        invs = invocation_attrs(window)
        assert [i["step"] for i in invs] == [steps[0]] * 3 + [steps[1]] * 3
        assert [i["kernelName"] for i in invs] == KERNELS * 2
    # WARMUP and NONE steps consumed no invocation ids: ids are contiguous across windows
    ids = [i["invocationId"] for w in ("window_0000", "window_0001") for i in invocation_attrs(tmp_path / "rank_0" / w)]
    assert ids == list(range(12))


def test_warmup_copies_nothing(tmp_path, monkeypatch):
    import megadump_zarr.dump.dumper as dumper_module

    copies = []
    real = dumper_module.snapshot_tensor
    monkeypatch.setattr(dumper_module, "snapshot_tensor", lambda *a: copies.append(a[2]) or real(*a))
    block = MoEBlock()
    warm = lambda step: DiagnosticAction.WARMUP  # noqa: E731
    with tensor_dump(TensorDumpConfig(tmp_path), schedule=warm) as dumper:
        forward(block)
        dumper.step()
        forward(block)
    assert copies == []
    assert not (tmp_path / "rank_0").exists()
    assert paths(dumper) == ()


def test_record_and_save_every_step(tmp_path):
    block = MoEBlock()
    with tensor_dump(
        TensorDumpConfig(tmp_path, kernel_names="moe_router"), schedule=lambda s: DiagnosticAction.RECORD_AND_SAVE
    ) as dumper:
        for step in range(3):
            forward(block)
            dumper.step()
            assert paths(dumper) == (str(tmp_path / "rank_0" / f"window_{step:04d}"),)
    assert windows(tmp_path) == ["window_0000", "window_0001", "window_0002"]
    for step in range(3):
        (inv,) = invocation_attrs(tmp_path / "rank_0" / f"window_{step:04d}")
        assert (inv["step"], inv["invocationId"], inv["kernelName"]) == (step, step, "moe_router")


def test_empty_window_still_advances_index(tmp_path):
    """Window 0 records steps whose launches are all filtered out: no directory, but window 1 gets index 1."""
    block = MoEBlock()
    ready = []
    sched = lambda step: DiagnosticAction.RECORD_AND_SAVE  # noqa: E731
    with tensor_dump(
        TensorDumpConfig(tmp_path, kernel_names="moe_experts"),
        schedule=sched,
        on_dump_ready=lambda d: ready.append(paths(d)),
    ) as dumper:
        block.route(block.make_input())  # router + dispatch only: not selected
        dumper.step()
        assert paths(dumper) == ()
        assert dumper.window_index == 1
        assert not (tmp_path / "rank_0").exists()
        forward(block)
        dumper.step()
    assert windows(tmp_path) == ["window_0001"]
    window = tmp_path / "rank_0" / "window_0001"
    assert paths(dumper) == (str(window),)
    assert ready == [(str(window),)]  # not called for the empty window
    assert window_manifest(window)["windowIndex"] == 1
    (inv,) = invocation_attrs(window)
    assert (inv["kernelName"], inv["step"], inv["invocationId"]) == ("moe_experts", 1, 0)


def test_empty_window_with_nothing_selected_by_filter(tmp_path):
    block = MoEBlock()
    with tensor_dump(
        TensorDumpConfig(tmp_path, kernel_names="no_such_kernel"), schedule=lambda s: DiagnosticAction.RECORD_AND_SAVE
    ) as dumper:
        forward(block)
        dumper.step()
        forward(block)
        dumper.step()
        assert dumper.window_index == 2
    assert not (tmp_path / "rank_0").exists()


# --------------------------------------------------------------------------- misuse
def test_step_outside_context(tmp_path):
    dumper = tensor_dump(TensorDumpConfig(tmp_path))
    with pytest.raises(RuntimeError, match=re.escape("dumper.step() must be called inside its context")):
        dumper.step()
    with dumper:
        dumper.step()
    with pytest.raises(RuntimeError, match=re.escape("dumper.step() must be called inside its context")):
        dumper.step()


@pytest.mark.parametrize("value, tname", [(2, "int"), ("RECORD", "str"), (None, "NoneType")])
def test_schedule_returns_non_action(tmp_path, value, tname):
    message = f"MegaKernel schedule must return DiagnosticAction, got {tname}"
    with pytest.raises(TypeError, match=re.escape(message)):
        tensor_dump(TensorDumpConfig(tmp_path), schedule=lambda step: value)
    late = lambda step: DiagnosticAction.RECORD if step == 0 else value  # noqa: E731
    with tensor_dump(TensorDumpConfig(tmp_path), schedule=late) as dumper:
        with pytest.raises(TypeError, match=re.escape(message)):
            dumper.step()
        assert dumper.step_num == 0


def test_constructor_type_checks(tmp_path):
    with pytest.raises(TypeError, match=re.escape("config must be TensorDumpConfig, got dict")):
        tensor_dump({"output_dir": tmp_path})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=re.escape("schedule must be callable or None")):
        tensor_dump(TensorDumpConfig(tmp_path), schedule=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=re.escape("on_dump_ready must be callable or None")):
        tensor_dump(TensorDumpConfig(tmp_path), on_dump_ready="x")  # type: ignore[arg-type]


def test_second_active_session_refused(tmp_path):
    first = tensor_dump(TensorDumpConfig(tmp_path / "a"))
    second = tensor_dump(TensorDumpConfig(tmp_path / "b"))
    with first:
        with pytest.raises(
            RuntimeError,
            match=re.escape(
                "a diagnostic session is already active: tensor_dump (TensorDumper); exit it before entering tensor_dump"
            ),
        ):
            with second:
                pass  # pragma: no cover
        assert active_session() is first
        with pytest.raises(RuntimeError, match="already active"):
            first.__enter__()
    assert active_session() is None
    with second:
        assert active_session() is second


# --------------------------------------------------------------------------- errors inside the context
class Boom(Exception):
    pass


def test_exception_discards_unfinished_window(tmp_path):
    block = MoEBlock()
    ready = []
    with pytest.raises(Boom):
        with tensor_dump(TensorDumpConfig(tmp_path), on_dump_ready=ready.append) as dumper:
            forward(block)
            raise Boom
    assert not (tmp_path / "rank_0").exists()
    assert ready == []
    assert paths(dumper) == ()
    assert active_session() is None


def test_exception_keeps_committed_windows_discards_open_one(tmp_path):
    block = MoEBlock()
    with pytest.raises(Boom):
        with tensor_dump(TensorDumpConfig(tmp_path), schedule=lambda s: DiagnosticAction.RECORD_AND_SAVE) as dumper:
            forward(block)
            dumper.step()
            forward(block)
            raise Boom
    assert windows(tmp_path) == ["window_0000"]
    assert window_manifest(tmp_path / "rank_0" / "window_0000")["status"] == "complete"


def test_exception_with_on_error_keep_commits_aborted(tmp_path):
    block = MoEBlock()
    ready = []
    with pytest.raises(Boom):
        with tensor_dump(TensorDumpConfig(tmp_path, on_error="keep"), on_dump_ready=ready.append) as dumper:
            x = block.make_input()
            forward(block, x)
            raise Boom
    window = tmp_path / "rank_0" / "window_0000"
    manifest = read_json(window / "zarr.json")["attributes"]
    assert manifest["status"] == "aborted"
    assert manifest["invocationCount"] == 3
    assert paths(dumper) == (str(window),)
    assert ready == [dumper]
    stored = read_array(window / "invocation_000000_forward" / "x")
    assert stored.tobytes() == x.numpy().tobytes()
    assert active_session() is None


def test_exception_with_on_error_keep_and_nothing_captured(tmp_path):
    with pytest.raises(Boom):
        with tensor_dump(TensorDumpConfig(tmp_path, on_error="keep")):
            raise Boom
    assert not (tmp_path / "rank_0").exists()


# --------------------------------------------------------------------------- existing windows
def test_existing_window_never_overwritten(tmp_path):
    block = MoEBlock()
    with tensor_dump(TensorDumpConfig(tmp_path)):
        forward(block)
    before = file_hashes(tmp_path)
    assert any(name.endswith("zarr.json") for name in before) and len(before) > 10
    window = tmp_path / "rank_0" / "window_0000"
    other = MoEBlock(DemoConfig(seed=1))
    with pytest.raises(FileExistsError, match=re.escape(f"Tensor dump window already exists: {window}")):
        with tensor_dump(TensorDumpConfig(tmp_path)):
            forward(other)
    assert file_hashes(tmp_path) == before
    assert active_session() is None


# --------------------------------------------------------------------------- ranks and directions
def test_per_rank_windows(tmp_path):
    blocks = [MoEBlock(rank=0), MoEBlock(rank=1)]
    with tensor_dump(TensorDumpConfig(tmp_path)) as dumper:
        for block in blocks:
            forward(block)
    expected = tuple(str(tmp_path / f"rank_{r}" / "window_0000") for r in (0, 1))
    assert paths(dumper) == expected
    for rank in (0, 1):
        window = tmp_path / f"rank_{rank}" / "window_0000"
        manifest = window_manifest(window)
        assert (manifest["rank"], manifest["windowIndex"], manifest["invocationCount"]) == (rank, 0, 3)
        invs = invocation_attrs(window)
        assert {i["rank"] for i in invs} == {rank}
        assert [i["kernelName"] for i in invs] == KERNELS
    # invocation ids are per dumper, shared by the ranks
    assert [i["invocationId"] for i in invocation_attrs(tmp_path / "rank_0" / "window_0000")] == [0, 1, 2]
    assert [i["invocationId"] for i in invocation_attrs(tmp_path / "rank_1" / "window_0000")] == [3, 4, 5]


def test_rank_filter(tmp_path):
    blocks = [MoEBlock(rank=0), MoEBlock(rank=1)]
    with tensor_dump(TensorDumpConfig(tmp_path, ranks=(1,))) as dumper:
        for block in blocks:
            forward(block)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["rank_1"]
    assert paths(dumper) == (str(tmp_path / "rank_1" / "window_0000"),)
    invs = invocation_attrs(tmp_path / "rank_1" / "window_0000")
    assert [i["invocationId"] for i in invs] == [0, 1, 2]
    assert {i["rank"] for i in invs} == {1}


def test_directions_filter_backward_only(tmp_path):
    block = MoEBlock()
    with tensor_dump(TensorDumpConfig(tmp_path, directions="backward")):
        train_step(block)
    window = tmp_path / "rank_0" / "window_0000"
    manifest = window_manifest(window)
    assert manifest["invocations"] == ["invocation_000000_backward"]
    (inv,) = invocation_attrs(window)
    assert (inv["direction"], inv["kernelName"]) == ("backward", "moe_experts_backward")


def test_both_directions_in_one_window(tmp_path):
    block = MoEBlock()
    with tensor_dump(TensorDumpConfig(tmp_path)):
        train_step(block)
    manifest = window_manifest(tmp_path / "rank_0" / "window_0000")
    assert manifest["invocations"] == [
        "invocation_000000_forward",
        "invocation_000001_forward",
        "invocation_000002_forward",
        "invocation_000003_backward",
    ]


# --------------------------------------------------------------------------- background export
def test_async_export_same_windows_and_callbacks(tmp_path):
    sync_block, async_block = MoEBlock(), MoEBlock()
    save = lambda step: DiagnosticAction.RECORD_AND_SAVE  # noqa: E731
    with tensor_dump(TensorDumpConfig(tmp_path / "sync", kernel_names="moe_experts"), schedule=save) as sync:
        for _ in range(3):
            forward(sync_block)
            sync.step()
    reports = []
    with tensor_dump(
        TensorDumpConfig(tmp_path / "async", kernel_names="moe_experts", async_export=True),
        schedule=save,
        on_dump_ready=lambda d: reports.append(paths(d)),
    ) as dumper:
        for step in range(3):
            forward(async_block)
            dumper.step()
        dumper.flush()
        assert len(reports) == 3
    expected = [(str(tmp_path / "async" / "rank_0" / f"window_{i:04d}"),) for i in range(3)]
    assert reports == expected
    for index in range(3):
        a = tmp_path / "sync" / "rank_0" / f"window_{index:04d}" / "invocation_00000{}_forward".format(index)
        b = tmp_path / "async" / "rank_0" / f"window_{index:04d}" / "invocation_00000{}_forward".format(index)
        assert window_manifest(b.parent)["status"] == "complete"
        for name in ("x", "out", "ws"):
            assert read_array(a / name).tobytes() == read_array(b / name).tobytes()


def test_async_export_existing_window_fails_on_step_thread(tmp_path):
    block = MoEBlock()
    with tensor_dump(TensorDumpConfig(tmp_path, kernel_names="moe_router")):
        forward(block)
    before = file_hashes(tmp_path)
    with pytest.raises(FileExistsError, match=re.escape("Tensor dump window already exists: ")):
        with tensor_dump(
            TensorDumpConfig(tmp_path, kernel_names="moe_router", async_export=True),
            schedule=lambda s: DiagnosticAction.RECORD_AND_SAVE,
        ) as dumper:
            forward(block)
            dumper.step()
    assert file_hashes(tmp_path) == before


def test_async_export_failure_surfaces(tmp_path, monkeypatch):
    from megadump_zarr.dump.exporter import ExportError
    from megadump_zarr.store.writer import WindowSession

    def broken(self, invocation):
        raise OSError("disk full")

    monkeypatch.setattr(WindowSession, "write_invocation", broken)
    block = MoEBlock()
    window = tmp_path / "rank_0" / "window_0000"
    with pytest.raises(ExportError, match=re.escape(f"background export of {window} failed: OSError('disk full')")):
        with tensor_dump(TensorDumpConfig(tmp_path, kernel_names="moe_router", async_export=True)):
            forward(block)
    assert not window.exists()  # on_error="discard" (the default): nothing of the failed window stays
    assert active_session() is None
