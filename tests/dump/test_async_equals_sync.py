"""Issue 12.5: with ``async_export=True`` a background failure or an ``on_dump_ready`` exception never
shifts windows or step labels: the dump is exactly the synchronous export of the same run, and every
failed window is reported."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import zarr

from megadump_zarr import DiagnosticAction, TensorDumpConfig, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.dump.exporter import ExportError
from megadump_zarr.store.writer import WindowSession

# steps 0-1 one window, step 2 skipped, steps 3..6 one window each
_ACTIONS = [
    DiagnosticAction.RECORD,
    DiagnosticAction.RECORD_AND_SAVE,
    DiagnosticAction.NONE,
    DiagnosticAction.RECORD_AND_SAVE,
    DiagnosticAction.RECORD_AND_SAVE,
    DiagnosticAction.RECORD_AND_SAVE,
    DiagnosticAction.RECORD_AND_SAVE,
]
_STEPS = len(_ACTIONS)


def _schedule(step: int) -> DiagnosticAction:
    return _ACTIONS[step] if step < _STEPS else DiagnosticAction.NONE


def _contents(root: Path) -> list[dict]:
    """Every window: index, status, invocations with their step and id, every array's bytes."""
    out = []
    for window in sorted((root / "rank_0").glob("window_*")):
        attrs = json.loads((window / "zarr.json").read_text())["attributes"]
        entry = {
            "window": window.name,
            "status": attrs["status"],
            "windowIndex": attrs["windowIndex"],
            "invocations": [],
        }
        if attrs["status"] == "complete":
            group = zarr.open_group(str(window), mode="r")
            for name in attrs["invocations"]:
                invocation = group[name]
                arrays = {path: np.asarray(array[...]).tobytes() for path, array in invocation.arrays()}
                entry["invocations"].append((name, invocation.attrs["step"], invocation.attrs["invocationId"], arrays))
        out.append(entry)
    return out


def _run(root: Path, *, async_export: bool, callback_raises_on=(), settle: bool = True) -> tuple[list, list, list]:
    """Run the schedule; catch (and keep) whatever step/flush/exit raise, like a user who logs and trains on.

    ``settle`` waits for the background exporter before each step, so every background failure and
    callback surfaces in the next ``step()`` (the case that used to shift windows), deterministically.
    """
    block = MoEBlock(DemoConfig(tokens=16, d_model=8))
    reports: list[tuple[str, ...]] = []
    errors: list[BaseException] = []

    def on_ready(dumper) -> None:
        paths = tuple(Path(p).name for p in dumper.last_window_paths)
        reports.append(paths)
        if any(p in callback_raises_on for p in paths):
            raise RuntimeError(f"callback refused {paths}")

    # on_error="keep": a failed window stays, as "aborted", so both exports' statuses can be compared
    config = TensorDumpConfig(root, kernel_names="moe_router", async_export=async_export, on_error="keep")
    try:
        with tensor_dump(config, schedule=_schedule, on_dump_ready=on_ready) as dumper:
            for _ in range(_STEPS):
                block(block.make_input())
                if settle and dumper._exporter is not None:  # noqa: SLF001 - test-only synchronisation
                    dumper._exporter.wait()  # noqa: SLF001
                try:
                    dumper.step()
                except Exception as error:  # noqa: BLE001
                    errors.append(error)
            try:
                dumper.flush()
            except Exception as error:  # noqa: BLE001
                errors.append(error)
    except Exception as error:  # noqa: BLE001
        errors.append(error)
    return _contents(root), reports, errors


@pytest.fixture
def failing_windows(monkeypatch):
    """Make the writer fail every invocation of the named windows (a full disk, say)."""
    names: set[str] = set()
    real = WindowSession.write_invocation

    def write_invocation(self, invocation):
        if self.key.rpartition("/")[2] in names:
            raise OSError(f"disk full at {self.key}")
        return real(self, invocation)

    monkeypatch.setattr(WindowSession, "write_invocation", write_invocation)
    return names


def _named_windows(errors: list[BaseException]) -> list[str]:
    """The window names each raised error reports (an ExportError names its windows; a sync OSError its note)."""
    named = []
    for error in errors:
        text = str(error) + " ".join(getattr(error, "__notes__", ()))
        named.extend(sorted(set(re.findall(r"window_\d{4}", text))))
    return named


@pytest.mark.parametrize("settle", [True, False], ids=["failure-seen-at-next-step", "free-running"])
def test_a_failed_background_window_keeps_indices_labels_and_contents(tmp_path, failing_windows, settle):
    failing_windows.add("window_0001")
    sync, sync_reports, sync_errors = _run(tmp_path / "sync", async_export=False)
    async_, async_reports, async_errors = _run(tmp_path / "async", async_export=True, settle=settle)
    assert [w["window"] for w in sync] == [f"window_{i:04d}" for i in range(5)]
    assert [w["status"] for w in sync] == ["complete", "aborted", "complete", "complete", "complete"]
    steps = [[inv[1] for inv in w["invocations"]] for w in sync]
    assert steps == [[0, 1], [], [4], [5], [6]]  # window 1 (step 3) failed; step 2 records nothing
    assert async_ == sync  # same windows, statuses, invocation ids, step labels and bytes
    assert async_reports == sync_reports == [(f"window_{i:04d}",) for i in (0, 2, 3, 4)]
    assert len(sync_errors) == 1 and isinstance(sync_errors[0], OSError)
    assert len(async_errors) == 1 and isinstance(async_errors[0], ExportError)
    assert async_errors[0].windows == (str(tmp_path / "async" / "rank_0" / "window_0001"),)
    assert isinstance(async_errors[0].__cause__, OSError)


def test_every_failed_background_window_is_reported(tmp_path, failing_windows):
    failing_windows.update({"window_0001", "window_0003", "window_0004"})
    sync, _, sync_errors = _run(tmp_path / "sync", async_export=False)
    async_, _, async_errors = _run(tmp_path / "async", async_export=True)
    assert async_ == sync
    assert [w["status"] for w in async_] == ["complete", "aborted", "complete", "aborted", "aborted"]
    assert _named_windows(sync_errors) == ["window_0001", "window_0003", "window_0004"]
    # however the failures fall between steps, each window is named exactly once
    assert sorted(_named_windows(async_errors)) == ["window_0001", "window_0003", "window_0004"]
    assert all(isinstance(error, ExportError) for error in async_errors)


def test_an_on_dump_ready_exception_shifts_nothing(tmp_path):
    sync, sync_reports, sync_errors = _run(tmp_path / "sync", async_export=False, callback_raises_on={"window_0000"})
    async_, async_reports, async_errors = _run(
        tmp_path / "async", async_export=True, callback_raises_on={"window_0000"}
    )
    assert [[inv[1] for inv in w["invocations"]] for w in sync] == [[0, 1], [3], [4], [5], [6]]
    assert [w["status"] for w in sync] == ["complete"] * 5
    assert async_ == sync
    assert async_reports == sync_reports and len(sync_reports) == 5  # the later windows are still reported
    assert [str(e) for e in async_errors] == [str(e) for e in sync_errors] == ["callback refused ('window_0000',)"]


def test_failures_pending_at_exit_are_all_raised_in_one_export_error(tmp_path, monkeypatch):
    """Every window is queued before any fails; exit then names both failed windows and the callback's error."""
    import threading

    gate = threading.Event()
    real = WindowSession.write_invocation

    def write_invocation(self, invocation):
        gate.wait(30)
        if self.key.endswith(("window_0001", "window_0002")):
            raise OSError(f"disk full at {self.key}")
        return real(self, invocation)

    monkeypatch.setattr(WindowSession, "write_invocation", write_invocation)
    block = MoEBlock(DemoConfig(tokens=16, d_model=8))
    config = TensorDumpConfig(tmp_path, kernel_names="moe_router", async_export=True)

    def on_ready(dumper):
        raise ValueError(f"callback {Path(dumper.last_window_paths[0]).name}")

    with pytest.raises(ExportError) as info:
        with tensor_dump(config, schedule=lambda s: DiagnosticAction.RECORD_AND_SAVE, on_dump_ready=on_ready) as dumper:
            for _ in range(4):
                block(block.make_input())
                dumper.step()  # nothing has finished yet: nothing to raise
            gate.set()
    error = info.value
    root = tmp_path / "rank_0"
    assert error.windows == (str(root / "window_0001"), str(root / "window_0002"))
    assert str(error) == (
        f"background export of 2 windows failed: {root / 'window_0001'}: "
        f"OSError('disk full at rank_0/window_0001'); {root / 'window_0002'}: "
        f"OSError('disk full at rank_0/window_0002')"
    )
    assert error.__notes__ == [
        "also failed: ValueError('callback window_0000')",
        "also failed: ValueError('callback window_0003')",
    ]


def test_a_failure_pending_when_the_body_raises_is_noted_on_that_exception(tmp_path, failing_windows):
    failing_windows.add("window_0000")
    block = MoEBlock(DemoConfig(tokens=16, d_model=8))
    config = TensorDumpConfig(tmp_path, kernel_names="moe_router", async_export=True)

    class Boom(Exception):
        pass

    with pytest.raises(Boom) as info:
        with tensor_dump(config, schedule=lambda s: DiagnosticAction.RECORD_AND_SAVE) as dumper:
            block(block.make_input())
            dumper.step()  # window 0 goes to the exporter, which fails it
            dumper._exporter.wait()  # noqa: SLF001 - make sure the failure is pending
            raise Boom("user code failed")
    (note,) = info.value.__notes__
    assert note.startswith(f"also failed: background export of {tmp_path / 'rank_0' / 'window_0000'} failed: OSError(")
