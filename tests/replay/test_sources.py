"""Replay's known operator sources (issue 25): replay knows no model; the demo registers its own source
(``register_replay_source``), found through the fixed ``TRUSTED_SOURCES`` table when a dump names it."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from megadump_zarr.demo.model import DEMO_SOURCE, DemoConfig, describe_config, replay_kernel
from megadump_zarr.replay.references import TRUSTED_SOURCES, register_source, resolve_reference


def _source(name: str = DEMO_SOURCE) -> dict:
    return {"name": name, "config": DemoConfig().to_document()}


def test_the_demo_registers_itself_when_a_dump_names_it() -> None:
    code = (
        "import sys, torch\n"
        "from megadump_zarr.replay.references import resolve_reference\n"
        "assert 'megadump_zarr.demo.model' not in sys.modules\n"
        "from megadump_zarr.demo.model import DemoConfig\n"  # only to write the config a dump records
        f"ref = resolve_reference(None, kernel='moe_experts', stage='expert_up', source={{'name': {DEMO_SOURCE!r}, "
        "'config': DemoConfig().to_document()}, dtype=torch.float32)\n"
        "print(ref.origin, ref.operator.name, ref.kernel.kernel_name)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    config = DemoConfig().to_document()
    assert done.stdout.strip() == f"{DEMO_SOURCE}({describe_config(config)}) expert_up moe_experts"
    assert TRUSTED_SOURCES == {DEMO_SOURCE: "megadump_zarr.demo.model:register_replay_source"}


def test_a_registered_source_is_used_and_removed() -> None:
    built = []

    def build(config, kernel, dtype):
        built.append((kernel, dtype))
        return replay_kernel(config, kernel, dtype)

    register_source("mylab.Block", build, lambda config: "tiny")
    try:
        ref = resolve_reference(
            None, kernel="moe_experts", stage="expert_down", source=_source("mylab.Block"), dtype=torch.float64
        )
        assert ref.origin == "mylab.Block(tiny)" and ref.operator.name == "expert_down"
        assert built == [("moe_experts", torch.float64)]
    finally:
        register_source("mylab.Block", None)
    with pytest.raises(ValueError, match="names operator source 'mylab.Block', which is not a known one"):
        resolve_reference(
            None, kernel="moe_experts", stage="expert_down", source=_source("mylab.Block"), dtype=torch.float32
        )


def test_an_unknown_demo_kernel_is_named() -> None:
    with pytest.raises(ValueError, match="the demo model has no kernel 'nope'; its kernels: moe_router"):
        resolve_reference(None, kernel="nope", stage="expert_up", source=_source(), dtype=torch.float32)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("", replay_kernel), "register_source: name must be a non-empty string, got ''"),
        (("x", 42), "register_source: build must be callable, got int"),
        (("x", replay_kernel, "words"), "register_source: describe must be callable, got str"),
    ],
)
def test_a_bad_registration_is_refused(args, message) -> None:
    with pytest.raises(TypeError, match=message):
        register_source(*args)
