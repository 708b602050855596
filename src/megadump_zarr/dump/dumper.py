"""The schedule-driven L0/L1 tensor dumper: a diagnostic session around MegaKernel launches."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
import json
import warnings
from pathlib import Path
import threading
from typing import Any, Protocol

from megadump_zarr.diagnostics import (
    DiagnosticAction,
    DiagnosticCall,
    LaunchArguments,
    LaunchContext,
    activate_session,
    deactivate_session,
)
from megadump_zarr.dump.config import TensorDumpConfig
from megadump_zarr.layout.write_model import InvocationWrite, WindowWrite
from megadump_zarr.dump.exporter import BackgroundExporter, ExportError
from megadump_zarr.dump.l0 import L0Tensor, describe_graph_tensors
from megadump_zarr.dump.l1_plan import PreparedL1Dump, prepare_l1_dump
from megadump_zarr.dump.recorder import Commit, FlightRecorder
from megadump_zarr.layout.limits import check_index, check_inside_root
from megadump_zarr.dump.saved_plans import (
    new_run_id,
    plan_document,
    plan_group_bytes,
    plan_key,
    plan_prefix,
    run_prefix,
)
from megadump_zarr.dump.snapshots import decode_l1_dump, salvage_l1_dump, snapshot_tensor
from megadump_zarr.dump.statistics_mode import (
    Baseline,
    L0StatisticsCapture,
    PayloadPolicy,
    complete_l1_statistics,
    l0_key_function,
    payload_policy,
    prime_expected_digests,
    salvage_l1_statistics,
)
from megadump_zarr.dump.statistics_slots import has_statistics
from megadump_zarr.dump.window import DumpInvocation, build_window
from megadump_zarr.layout.paths import window_path

__all__ = ["TensorDumper", "WindowSink"]

_RECORDING = (DiagnosticAction.RECORD, DiagnosticAction.RECORD_AND_SAVE)


class WindowSession(Protocol):
    """One claimed window being written (the store's ``WindowSession``)."""

    url: str

    def write_all(self, invocations: Iterable[InvocationWrite], status: str = "complete", *, on_error: str) -> str:
        """Persist every invocation, then the window's final status last (on a failure: ``"aborted"`` with
        ``on_error="keep"``, removed with ``"discard"``; re-raising); return the window's path or URL."""


class WindowSink(Protocol):
    """Where finished windows go (the store's ``WindowWriter``)."""

    def begin(self, rank: int, window_index: int, attrs: dict[str, Any]) -> WindowSession:
        """Claim a window (status "writing"); raise FileExistsError if it already exists."""

    def probe(self) -> None:
        """Raise OSError when the output root cannot be written."""

    def put_sidecar(self, key: str, data: bytes) -> str:
        """Store a small file (an L1 plan) below the root."""

    def remove_sidecars(self, prefix: str) -> None:
        """Remove the sidecar files below ``prefix``."""


class _TensorDumpCall(DiagnosticCall):
    """The dumper's handle on one selected launch."""

    def __init__(
        self,
        arguments: LaunchArguments,
        dumper: TensorDumper,
        invocation: DumpInvocation,
        tensors: tuple[L0Tensor, ...] = (),
        parameters: Sequence[Any] = (),
        prepared_l1: PreparedL1Dump | None = None,
    ) -> None:
        super().__init__(arguments)
        self._dumper = dumper
        self._invocation = invocation
        self._tensors = tensors
        self._parameters = parameters
        self._prepared_l1 = prepared_l1
        self.finished = False

    def complete(self) -> None:
        """Take the after-launch values (L0) or decode the Device buffer (L1), then keep the invocation."""
        if self.finished:
            return
        if self._prepared_l1 is not None and has_statistics(self._prepared_l1.records):
            complete_l1_statistics(self._invocation, self._prepared_l1, self._dumper._policy)
        elif self._prepared_l1 is not None:
            self._invocation.l1_snapshots.extend(decode_l1_dump(self._prepared_l1))
        else:
            for tensor in self._tensors:
                if tensor.role != "external_input":
                    self._dumper._take_l0(self._invocation, tensor, self._parameters[tensor.param_position], "after")
            if self._invocation.l0_statistics is not None:
                self._invocation.statistics.extend(self._invocation.l0_statistics.finish())
        self._dumper._keep(self._invocation)
        self.finished = True

    def cancel(self) -> None:
        """The launch failed: drop its snapshots, or with ``on_error="keep"`` keep what an L1 buffer captured."""
        if self.finished:
            return
        if self._dumper.config.on_error == "keep" and self._prepared_l1 is not None:
            if has_statistics(self._prepared_l1.records):
                pending = salvage_l1_statistics(self._invocation, self._prepared_l1)
            else:
                captured, pending = salvage_l1_dump(self._prepared_l1)
                self._invocation.l1_snapshots[:] = list(captured)
            self._invocation.failed = True
            self._invocation.pending_records = pending
            self._dumper._keep(self._invocation)
        else:
            self._invocation.snapshots.clear()
            self._invocation.l1_snapshots.clear()
        self._prepared_l1 = None
        self.finished = True


class TensorDumper:
    """Standalone schedule-driven L0/L1 Tensor dumper for MegaKernels (use ``tensor_dump``).

    Args:
        config: What to capture and where to store it.
        schedule: ``step -> DiagnosticAction``; None records every step into one window.
        on_dump_ready: Called with the dumper after each window is exported.
        sink: Where windows are written.
    """

    def __init__(
        self,
        config: TensorDumpConfig,
        *,
        schedule: Callable[[int], DiagnosticAction] | None,
        on_dump_ready: Callable[[Any], None] | None,
        sink: WindowSink,
        baseline: Baseline | None = None,
    ) -> None:
        if not isinstance(config, TensorDumpConfig):
            raise TypeError(f"config must be TensorDumpConfig, got {type(config).__name__}")
        if schedule is not None and not callable(schedule):
            raise TypeError("schedule must be callable or None")
        if on_dump_ready is not None and not callable(on_dump_ready):
            raise TypeError("on_dump_ready must be callable or None")
        self.config = config
        self._baseline = baseline  # mode="diff": how to read the baseline (injected by api.py)
        self._policy: PayloadPolicy | None = None
        self._occurrences: dict[tuple[Any, ...], int] = {}
        self._schedule = schedule
        self._on_dump_ready = on_dump_ready
        self._sink = sink
        self._step = 0
        self._action = self._action_for_step(0)
        self._entered = False
        self._next_invocation_id = 0
        self._window_index = 0
        self._invocations: list[DumpInvocation] = []
        self._last_paths: tuple[str | Path, ...] = ()
        self._exporter: BackgroundExporter | None = None
        self._pending_reports: dict[int, list[str | Path]] = {}
        self.run_id = new_run_id()
        self._plan_lock = threading.Lock()  # the exporter thread removes plans while the step thread saves them
        self._saved_plans: set[str] = set()
        self._run_group_saved = False
        self._deferred: list[BaseException] = []  # dump failures before a launch: raised at step() or exit
        # the flight recorder decides which steps become windows (dump/recorder.py)
        self._recorder = None if config.recorder is None else FlightRecorder(config.recorder)
        self._plan_failures: list[tuple[str, OSError]] = []  # (window, error): warned at step() or exit

    @property
    def step_num(self) -> int:
        """The zero-based user step now running."""
        return self._step

    @property
    def current_action(self) -> DiagnosticAction:
        """The schedule's action for the current step."""
        return self._action

    @property
    def window_index(self) -> int:
        """Index the next finalised window gets."""
        return self._window_index

    @property
    def last_window_paths(self) -> tuple[str | Path, ...]:
        """Window groups (local paths or URLs) committed by the most recent finalisation."""
        return self._last_paths

    last_manifest_paths = last_window_paths

    @property
    def recorder(self) -> FlightRecorder | None:
        """The flight recorder (``config.recorder``; its ring's steps and bytes), or None."""
        return self._recorder

    def __enter__(self) -> TensorDumper:
        # A second session is refused before anything touches the output root (no directory created);
        # then an unwritable root is refused, before any launch is slowed by captures it cannot keep.
        # A diff baseline that cannot be read is refused first of all, before any launch.
        self._policy = payload_policy(self.config, self._baseline)
        activate_session("tensor_dump", self)
        try:
            self._sink.probe()
        except BaseException:
            deactivate_session(self)
            raise
        self._entered = True
        if self.config.async_export:
            self._exporter = BackgroundExporter(self.config.host_memory_budget_mb * 1024 * 1024)
        return self

    def __exit__(self, exc_type: Any, exc_value: Any, traceback: Any) -> None:
        pending: BaseException | None = exc_value
        try:
            if self._recorder is not None:
                self._close_recorder()
            elif exc_type is None:
                errors: list[BaseException] = []
                if self._invocations:
                    try:
                        self._finalize_window()
                    except BaseException as error:
                        errors.append(error)
                errors[:0] = self._take_deferred()
                self._settle_plan_failures(errors)
                if errors:
                    pending = errors[0]
                    _raise_all(errors)
            else:
                for error in self._take_deferred():
                    exc_value.add_note(f"also failed: {error!r}")
                self._settle_plan_failures([exc_value])
                if self.config.on_error == "keep" and self._invocations:
                    self._finalize_window(status="aborted")
                self._invocations.clear()
        finally:
            try:
                self._close_exporter(pending)
            finally:
                self._index_root()
                deactivate_session(self)
                self._entered = False

    def _index_root(self) -> None:
        """Let plain ``xr.open_datatree(root, engine="zarr")`` open the root once the session's windows are
        committed (the writer's ``index_root``; a convenience for plain xarray, never a reason to fail)."""
        index = getattr(self._sink, "index_root", None)
        if index is None:
            return
        try:
            index()
        except Exception:  # noqa: BLE001 - the root then keeps plain documents: xarray lists the store
            pass

    def _close_exporter(self, pending: BaseException | None) -> None:
        """Wait for background exports, report finished windows, stop the thread; then raise every
        failure (or, when ``pending`` is already propagating, add them to it as notes)."""
        exporter, self._exporter = self._exporter, None
        if exporter is None:
            return
        try:
            exporter.wait()
        finally:
            exporter.close()
            errors = self._collect(exporter)
        if pending is None:
            _raise_all(errors)
        else:
            for error in errors:
                pending.add_note(f"also failed: {error}")

    def _collect(self, exporter: BackgroundExporter) -> list[BaseException]:
        """Background failures (one ``ExportError`` naming every failed window), then the exceptions
        raised by ``on_dump_ready`` for the windows that finished meanwhile, all reported."""
        failures = exporter.take_failures()
        errors: list[BaseException] = []
        if failures:
            export_error = ExportError(failures)
            export_error.__cause__ = failures[0][1]
            errors.append(export_error)
        return errors + self._report_finished(exporter)

    def _report_finished(self, exporter: BackgroundExporter) -> list[BaseException]:
        """Call ``on_dump_ready`` once per finalisation whose windows have all been committed, with
        ``last_window_paths`` showing that finalisation's windows during the call; return the
        exceptions the calls raised (every finished window is reported, whatever an earlier call did)."""
        errors: list[BaseException] = []
        for (finalisation, expected), path in exporter.take_finished():
            done = self._pending_reports.setdefault(finalisation, [])
            done.append(self._as_path(path))
            if len(done) == expected:
                del self._pending_reports[finalisation]
                if self._on_dump_ready is not None:
                    current, self._last_paths = self._last_paths, tuple(done)
                    try:
                        self._on_dump_ready(self)
                    except Exception as error:  # noqa: BLE001 - surfaced on the step thread below
                        errors.append(error)
                    finally:
                        self._last_paths = current
        return errors

    def flush(self) -> None:
        """Wait until every window handed to the background exporter is committed (a no-op when
        exporting synchronously); raise the background failures (one ``ExportError`` naming every
        failed window) and any exception ``on_dump_ready`` raised meanwhile."""
        if self._exporter is not None:
            self._exporter.wait()
            _raise_all(self._collect(self._exporter))

    def step(self) -> None:
        """Finish the current user step and advance the schedule (a window closes on RECORD_AND_SAVE,
        or when a run of RECORD steps ends).

        The step always ends, whatever fails: with ``async_export`` a background failure or an
        ``on_dump_ready`` exception from an earlier window is raised only after this step's window is
        finalised and the step counted, so window indices, step labels and contents are exactly those
        of the synchronous export of the same run.
        """
        if not self._entered:
            raise RuntimeError("dumper.step() must be called inside its context")
        next_action = self._action_for_step(self._step + 1)
        errors: list[BaseException] = []
        try:
            if self._recorder is not None:
                self._record_step()
            elif self._action is DiagnosticAction.RECORD_AND_SAVE:
                self._finalize_window()
            elif self._action is DiagnosticAction.RECORD and next_action not in _RECORDING:
                self._finalize_window()
        except BaseException as error:
            errors.append(error)
        finally:  # a failed export still ends the step: the schedule goes on
            errors[:0] = self._take_deferred()
            self._step += 1
            self._action = next_action
            if self._exporter is not None:
                errors[:0] = self._collect(self._exporter)
            if self._recorder is not None:  # the recorder never stops the step: it logs its failures
                for error in errors:
                    if isinstance(error, Exception):
                        self._recorder.commit_failed(error)
                errors = [error for error in errors if not isinstance(error, Exception)]  # Ctrl-C still stops
            self._settle_plan_failures(errors)
        _raise_all(errors)

    def _record_step(self) -> None:
        """Flight recorder: hand the finished step to the recorder and commit the windows it asks for."""
        assert self._recorder is not None
        invocations, self._invocations = self._invocations, []
        for commit in self._recorder.end_step(self._step, invocations):
            self._commit_recorded(commit)

    def _commit_recorded(self, commit: Commit) -> None:
        """Commit one recorder window; a failure is logged by the recorder, never raised into the step."""
        assert self._recorder is not None
        self._invocations = list(commit.invocations)
        try:
            self._finalize_window(extra_attrs=commit.attrs)
        except Exception as error:  # noqa: BLE001 - a full disk or a store error never stops the kernel
            self._recorder.commit_failed(error)
        else:
            self._recorder.commit_succeeded()

    def _close_recorder(self) -> None:
        """The session ends: a step launched since the last ``step()`` is taken as a step, then the after-steps
        of a pending trigger are committed (the ring itself is dropped)."""
        assert self._recorder is not None
        if self._invocations:
            self._record_step()
        for commit in self._recorder.close():
            self._commit_recorded(commit)
        for error in self._take_deferred():
            self._recorder.commit_failed(error)

    def _action_for_step(self, step: int) -> DiagnosticAction:
        if self._schedule is None:
            return DiagnosticAction.RECORD
        action = self._schedule(step)
        if not isinstance(action, DiagnosticAction):
            raise TypeError(f"MegaKernel schedule must return DiagnosticAction, got {type(action).__name__}")
        return action

    def is_capture_enabled(self) -> bool:
        """Whether this step collects Tensor values (WARMUP copies nothing; nor a disarmed flight recorder)."""
        return self._action in _RECORDING and (self._recorder is None or self._recorder.capturing)

    def prepare_call(self, context: LaunchContext) -> DiagnosticCall:
        """Plan one launch: ordinary arguments when it is not selected, else a capturing call.

        Args:
            context: The launch.
        """
        runtime = context.runtime
        if not self.is_capture_enabled() or not self.config.selects_invocation(
            context.direction, runtime.rank, runtime.kernel_name
        ):
            return DiagnosticCall(context.ordinary_arguments())
        counters = context.fallback_event_counters
        arguments = LaunchArguments(
            runtime.normal_tensor, counters, runtime.normal_tensor if counters is None else counters, counters
        )
        device = runtime.normal_tensor.device
        if self.config.level == "L1":
            prepared = prepare_l1_dump(
                runtime, runtime.graph, context.parameters, self.config, rank=runtime.rank, device=device
            )
            invocation = self._new_invocation(runtime, context.direction, device)
            invocation.device_buffer_bytes = prepared.total_bytes
            prime_expected_digests(prepared, invocation, self._policy)  # mode="diff": the device compares
            # what `megadump_zarr.replay` needs to run a task again: its tile rows and the operators' source
            invocation.task_rows = {
                int(task.task_id): (task.start, task.stop) for task in getattr(runtime, "tasks", ())
            }
            invocation.operator_source = operator_source(runtime.graph)
            if (
                self.config.save_plans and self._recorder is None
            ):  # lets `megadump decode-buffer` salvage a buffer saved from a hung launch
                self._try_save_plan(prepared, invocation)
            arguments.runtime_config = prepared.runtime_config
            arguments.diagnostic_buffer = prepared.buffer
            return _TensorDumpCall(arguments, self, invocation, prepared_l1=prepared)
        tensors = tuple(t for t in describe_graph_tensors(runtime.graph) if self.config.selects_tensor(t.name, t.role))
        if not tensors:
            return DiagnosticCall(arguments)
        needed = max(t.param_position for t in tensors)
        if needed >= len(context.parameters):
            raise ValueError(
                f"MegaKernel dump requires param_position {needed}, but only {len(context.parameters)} parameters exist"
            )
        invocation = self._new_invocation(runtime, context.direction, device)
        for tensor in tensors:
            if tensor.role == "external_input":
                self._take_l0(invocation, tensor, context.parameters[tensor.param_position], "before")
        return _TensorDumpCall(arguments, self, invocation, tensors, context.parameters)

    def _new_invocation(self, runtime: Any, direction: str, device: Any) -> DumpInvocation:
        invocation = DumpInvocation(
            invocation_id=self._next_invocation_id,
            step=self._step,
            kernel_name=runtime.kernel_name,
            direction=direction,
            rank=runtime.rank,
            device=str(device),
            level=self.config.level,
            execution_mode=getattr(getattr(runtime, "spec", None), "execution_mode", ""),
        )
        self._next_invocation_id += 1
        seen = (runtime.rank, self._step, runtime.kernel_name, direction)
        if self._occurrences and next(iter(self._occurrences))[1] != self._step:
            self._occurrences.clear()  # occurrences count within one step
        invocation.occurrence = self._occurrences.get(seen, 0)
        self._occurrences[seen] = invocation.occurrence + 1
        return invocation

    def _take_l0(self, invocation: DumpInvocation, tensor: L0Tensor, parameter: Any, phase: str) -> None:
        """Snapshot one L0 tensor (tensor mode), or reduce it on its device and keep what the mode keeps."""
        if self._policy is None:
            invocation.snapshots.append((tensor, snapshot_tensor(parameter, tensor.graph_tensor, phase)))
            return
        if invocation.l0_statistics is None:
            invocation.l0_statistics = L0StatisticsCapture(self._policy, l0_key_function(invocation))
        snapshot = invocation.l0_statistics.add(
            tensor, parameter, lambda: snapshot_tensor(parameter, tensor.graph_tensor, phase)
        )
        if snapshot is not None:
            invocation.snapshots.append((tensor, snapshot))

    def _try_save_plan(self, prepared: PreparedL1Dump, invocation: DumpInvocation) -> None:
        """Save the launch's plan; a storage failure (a full disk) never stops or skips the user's kernel:
        the launch runs without a saved plan (its plan stays in memory for the window) and the error is
        raised at ``step()`` or at exit, as for L0 and an unsaved window."""
        try:
            self._save_plan(prepared, invocation)
        except OSError as error:
            error.add_note(
                f"while saving the L1 plan of {invocation.name} (rank {invocation.rank}, window "
                f"{self._window_index}) under {self.config.output_dir}; the kernel ran without it"
            )
            self._plan_failures.append((window_path(invocation.rank, self._window_index), error))

    def _settle_plan_failures(self, errors: list[BaseException]) -> None:
        """Report the plans that could not be saved: as notes on the first error when one is raised anyway,
        else as one ``RuntimeWarning`` each, never as an error of their own. A plan only lets
        ``megadump decode-buffer`` salvage a hung launch; the launch ran and its window is written as usual,
        so a window that committed stays committed and ``step()`` does not fail for it.

        Args:
            errors: The errors about to be raised (the first one gets the notes).
        """
        failures, self._plan_failures = self._plan_failures, []
        for window, error in failures:
            text = f"{error!r}" + "".join(f"; {note}" for note in getattr(error, "__notes__", ()))
            if errors:
                errors[0].add_note(f"also failed: {text}")
            else:
                fate = (
                    "is written as usual and its commit stands"
                    if self._exporter is None
                    else "is exported as usual in the background (a failure of that export is raised on its own)"
                )
                warnings.warn(
                    f"saving an L1 plan failed: {text}. The window {window} under {self.config.output_dir} {fate}; "
                    "a saved plan only serves `megadump decode-buffer` for a hung launch",
                    RuntimeWarning,
                    stacklevel=4,
                )

    def _take_deferred(self) -> list[BaseException]:
        errors, self._deferred = self._deferred, []
        return errors

    def _save_plan(self, prepared: PreparedL1Dump, invocation: DumpInvocation) -> None:
        """Save one launch's plan below this run's own plan group (never another run's)."""
        document = plan_document(prepared, invocation, self._window_index, self.run_id)
        prefix = plan_prefix(invocation.rank, self._window_index, invocation.name, self.run_id)
        with self._plan_lock:
            if not self._run_group_saved:
                self._sink.put_sidecar(
                    f"{run_prefix(self.run_id)}/zarr.json",
                    plan_group_bytes({"megadump_zarr": "saved L1 launch plans", "runId": self.run_id}),
                )
                self._run_group_saved = True
            self._sink.put_sidecar(
                plan_key(invocation.rank, self._window_index, invocation.name, self.run_id), plan_group_bytes(document)
            )
            self._saved_plans.add(prefix)
        invocation.plan_prefix = prefix

    def _remove_plans(self, prefixes: list[str]) -> None:
        """Remove the plans of committed launches; the run's plan group too once it holds no plan."""
        with self._plan_lock:
            for prefix in prefixes:
                self._sink.remove_sidecars(prefix)
                self._saved_plans.discard(prefix)
            if prefixes and not self._saved_plans and self._run_group_saved:
                self._sink.remove_sidecars(run_prefix(self.run_id))
                self._run_group_saved = False

    def _window_job(
        self, session: WindowSession, window: WindowWrite, status: str, plans: list[str]
    ) -> Callable[[], str]:
        """Write and commit one window, then drop its launches' saved L1 plans (no longer needed)."""

        def job() -> str:
            url = session.write_all(window.invocations, status, on_error=self.config.on_error)
            self._remove_plans(plans)
            return url

        return job

    def _as_path(self, url: str) -> str | Path:
        return url if self.config.is_remote else Path(url)

    def _keep(self, invocation: DumpInvocation) -> None:
        self._invocations.append(invocation)

    def _finalize_window(self, status: str = "complete", extra_attrs: dict[str, Any] | None = None) -> None:
        """Export the window's invocations per rank, release them, and advance the window index.

        Args:
            status: The window's final status.
            extra_attrs: More window attributes (the flight recorder's ``recorderTrigger``, ...).
        """
        if not self._invocations:
            self._last_paths = ()
            self._window_index += 1
            return
        paths = []
        ranks = sorted({invocation.rank for invocation in self._invocations})
        failure: BaseException | None = None
        try:
            for rank in ranks:  # one rank's failure never keeps the others' windows from being written
                mine = [invocation for invocation in self._invocations if invocation.rank == rank]
                try:
                    check_index(rank, "rank")
                    check_index(self._window_index, "window index")
                    window = build_window(self.config.level, rank, self._window_index, mine)
                    window.attrs.update(extra_attrs or {})
                    if not self.config.is_remote:  # a planted rank_R or window link is refused, nothing written
                        check_inside_root(self.config.output_dir, window.path)
                    # The claim is synchronous, so an existing window fails here, on the step thread.
                    session = self._sink.begin(window.rank, window.window_index, window.attrs)
                    paths.append(self._as_path(session.url))
                    job = self._window_job(session, window, status, [i.plan_prefix for i in mine if i.plan_prefix])
                    if self._exporter is None:
                        job()
                    else:
                        nbytes = sum(invocation.payload_bytes for invocation in mine)
                        self._exporter.submit(job, nbytes, session.url, (self._window_index, len(ranks)))
                except BaseException as error:
                    where = f"Tensor dump window {window_path(rank, self._window_index)}"
                    if not any(
                        where in note or "Tensor dump window" in note for note in getattr(error, "__notes__", ())
                    ):
                        error.add_note(f"while exporting {where} under {self.config.output_dir}")
                    failure = failure or error
        finally:
            # Whatever happened, this window's host copies are released and the next window gets the
            # next index: a transient failure (a full disk for a moment) must not wedge later steps.
            self._last_paths = tuple(paths)
            self._invocations.clear()
            self._window_index += 1
        if failure is not None:
            raise failure
        if self._on_dump_ready is not None and self._exporter is None:
            self._on_dump_ready(self)


def operator_source(graph: Any) -> dict[str, Any] | None:
    """The graph's ``diagnostic_source`` (where a replay finds its operators, e.g. the demo model and its
    config), when it is a JSON-serialisable mapping; else None.

    Args:
        graph: The kernel's graph.
    """
    source = getattr(graph, "diagnostic_source", None)
    if not isinstance(source, dict):
        return None
    try:
        return json.loads(json.dumps(source))
    except (TypeError, ValueError):
        return None


def _raise_all(errors: list[BaseException]) -> None:
    """Raise the first error with the others attached as notes (none is dropped); no-op when empty."""
    if not errors:
        return
    first = errors[0]
    for other in errors[1:]:
        if other is not first:
            first.add_note(f"also failed: {other!r}")
    raise first
