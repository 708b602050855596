"""diagnostics.schedule: torch.profiler.schedule semantics and argument validation."""

import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from megadump_zarr.diagnostics import DiagnosticAction, schedule

STEPS = range(51)


def _torch_actions(**kwargs):
    with warnings.catch_warnings():
        # torch warns "Profiler won't be using warmup" when warmup == 0.
        warnings.filterwarnings("ignore", message="Profiler won't be using warmup")
        fn = torch.profiler.schedule(**kwargs)
    return [DiagnosticAction[fn(step).name] for step in STEPS]


def test_action_names_mirror_profiler_actions():
    assert [a.name for a in DiagnosticAction] == ["NONE", "WARMUP", "RECORD", "RECORD_AND_SAVE"]
    # every diagnostic action exists in torch's ProfilerAction (which has extras, e.g. DEVICE_STOPPED)
    assert {a.name for a in DiagnosticAction} <= {a.name for a in torch.profiler.ProfilerAction}


@settings(max_examples=300, deadline=None)
@given(
    wait=st.integers(0, 5),
    warmup=st.integers(0, 5),
    active=st.integers(1, 5),
    repeat=st.integers(0, 4),
    skip_first=st.integers(0, 6),
)
def test_matches_torch_profiler_schedule(wait, warmup, active, repeat, skip_first):
    kwargs = dict(wait=wait, warmup=warmup, active=active, repeat=repeat, skip_first=skip_first)
    ours = schedule(**kwargs)
    assert [ours(step) for step in STEPS] == _torch_actions(**kwargs)


def test_literal_sequence():
    fn = schedule(wait=1, warmup=1, active=2, repeat=2, skip_first=1)
    N, W, R, S = (
        DiagnosticAction.NONE,
        DiagnosticAction.WARMUP,
        DiagnosticAction.RECORD,
        DiagnosticAction.RECORD_AND_SAVE,
    )
    assert [fn(step) for step in range(12)] == [N, N, W, R, S, N, W, R, S, N, N, N]


def test_active_one_saves_every_active_step_forever():
    fn = schedule(wait=0, warmup=0, active=1)
    assert {fn(step) for step in range(100)} == {DiagnosticAction.RECORD_AND_SAVE}


@pytest.mark.parametrize("name", ["wait", "warmup", "active", "repeat", "skip_first"])
def test_negative_values_rejected(name):
    kwargs = dict(wait=0, warmup=0, active=1, repeat=0, skip_first=0)
    kwargs[name] = -1
    with pytest.raises(ValueError) as info:
        schedule(**kwargs)
    assert str(info.value) == f"schedule {name} must be non-negative, got -1"


@pytest.mark.parametrize("name", ["wait", "warmup", "active", "repeat", "skip_first"])
@pytest.mark.parametrize("bad, type_name", [(True, "bool"), (False, "bool"), (1.0, "float"), ("1", "str")])
def test_non_int_values_rejected(name, bad, type_name):
    kwargs = dict(wait=0, warmup=0, active=1, repeat=0, skip_first=0)
    kwargs[name] = bad
    with pytest.raises(TypeError) as info:
        schedule(**kwargs)
    assert str(info.value) == f"schedule {name} must be an int, got {type_name}"


def test_active_zero_rejected():
    with pytest.raises(ValueError) as info:
        schedule(wait=1, warmup=1, active=0)
    assert str(info.value) == "schedule active must be positive, got 0"


def test_arguments_are_keyword_only():
    with pytest.raises(TypeError):
        schedule(1, 1, 1)  # type: ignore[misc]


@pytest.mark.parametrize("step", [-1, True, 1.0, "0"])
def test_bad_step_rejected(step):
    fn = schedule(wait=0, warmup=0, active=1)
    with pytest.raises(ValueError) as info:
        fn(step)
    assert str(info.value) == f"schedule step must be a non-negative int, got {step!r}"
