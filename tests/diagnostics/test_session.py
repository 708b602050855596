"""diagnostics.session and diagnostics.call: the one-active-session registry and the launch protocol types."""

import contextlib

import pytest
import torch

from megadump_zarr.diagnostics import (
    DiagnosticCall,
    LaunchArguments,
    LaunchContext,
    activate_session,
    active_session,
    deactivate_session,
)


class SessionA:
    def prepare_call(self, context):
        return DiagnosticCall(context.ordinary_arguments())


class SessionB(SessionA):
    pass


@contextlib.contextmanager
def _active(kind, session):
    activate_session(kind, session)
    try:
        yield session
    finally:
        deactivate_session(session)


def test_no_session_by_default():
    assert active_session() is None


def test_activate_and_deactivate():
    a = SessionA()
    with _active("tensor_dump", a):
        assert active_session() is a
    assert active_session() is None


def test_second_session_refused_with_names():
    a, b = SessionA(), SessionB()
    with _active("tensor_dump", a):
        with pytest.raises(RuntimeError) as info:
            activate_session("profiler", b)
        message = str(info.value)
        assert message == (
            "a diagnostic session is already active: tensor_dump (SessionA); exit it before entering profiler"
        )
        assert active_session() is a  # the refused one did not replace it
        # activating the same object again is refused too
        with pytest.raises(RuntimeError, match=r"already active: tensor_dump \(SessionA\)"):
            activate_session("tensor_dump", a)
    assert active_session() is None


def test_deactivate_non_active_is_noop():
    a, b = SessionA(), SessionB()
    deactivate_session(b)  # nothing active: no error
    assert active_session() is None
    with _active("tensor_dump", a):
        deactivate_session(b)
        assert active_session() is a
        deactivate_session(SessionA())  # same type, different object
        assert active_session() is a


def test_new_session_after_deactivation():
    a, b = SessionA(), SessionB()
    with _active("tensor_dump", a):
        pass
    with _active("profiler", b):
        assert active_session() is b
        with pytest.raises(RuntimeError, match=r"already active: profiler \(SessionB\); exit it before entering x"):
            activate_session("x", a)
    assert active_session() is None


class _Runtime:
    def __init__(self):
        self.normal_tensor = torch.arange(8, dtype=torch.uint8)


def test_ordinary_arguments_with_counters():
    runtime = _Runtime()
    counters = torch.zeros(3, dtype=torch.int32)
    context = LaunchContext(runtime, "forward", (torch.ones(2),), counters)
    args = context.ordinary_arguments()
    assert isinstance(args, LaunchArguments)
    assert args.runtime_config is runtime.normal_tensor
    assert args.event_counters is counters
    assert args.diagnostic_buffer is counters  # any valid tensor: the counters stand in
    assert args.profile_buffer is counters


def test_ordinary_arguments_without_counters():
    runtime = _Runtime()
    context = LaunchContext(runtime, "backward", (), None)
    args = context.ordinary_arguments()
    assert args.runtime_config is runtime.normal_tensor
    assert args.event_counters is None
    assert args.diagnostic_buffer is runtime.normal_tensor
    assert args.profile_buffer is None


def test_launch_arguments_default_profile_buffer():
    args = LaunchArguments("cfg", "counters", "buffer")
    assert (args.runtime_config, args.event_counters, args.diagnostic_buffer, args.profile_buffer) == (
        "cfg",
        "counters",
        "buffer",
        None,
    )


def test_diagnostic_call_complete_and_cancel_are_noops():
    runtime = _Runtime()
    counters = torch.zeros(2, dtype=torch.int32)
    args = LaunchContext(runtime, "forward", (), counters).ordinary_arguments()
    call = DiagnosticCall(args)
    assert call.arguments is args
    assert call.complete() is None
    assert call.cancel() is None
    assert call.arguments is args
    assert torch.equal(counters, torch.zeros(2, dtype=torch.int32))
    assert torch.equal(runtime.normal_tensor, torch.arange(8, dtype=torch.uint8))
