"""The flight recorder's end-to-end scenario: the demo block run forward for many steps with the recorder armed,
a NaN injected into one expert's task at one step and a slow blow-up of another expert's weights.

Also run as a script (``python tests/dump/_recorder_run.py ROOT [--s3 ENDPOINT]``) by the watch tests, so a
second process can follow the dump while it is written.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
import math
from typing import Any

import torch

from megadump_zarr import TensorDumpConfig, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.dump.recorder_config import RecorderConfig

STAGES = ["expert_up", "expert_down", "unpermute", "combine"]
STEPS = 200
NAN_STEP = 60
NAN_EXPERT = 1
BLOW_START = 120
BLOW_EXPERT = 2
GROWTH = 1.05  # per step from BLOW_START: +5 % (inside the 8 % floor), then +10.25 % (outside) at BLOW_START + 1
FIRST_BLOW_STEP = BLOW_START + 1
RING = 4
AFTER = 2
DEMO = DemoConfig(tokens=16, d_model=8, n_experts=4, tile_rows=8, num_workers=4)

EXPECTED_WINDOWS = {
    0: ("nonfinite", "trigger", list(range(NAN_STEP - RING, NAN_STEP + 1))),
    1: ("nonfinite", "after", list(range(NAN_STEP + 1, NAN_STEP + 1 + AFTER))),
    2: ("norm", "trigger", list(range(FIRST_BLOW_STEP - RING, FIRST_BLOW_STEP + 1))),
    3: ("norm", "after", list(range(FIRST_BLOW_STEP + 1, FIRST_BLOW_STEP + 1 + AFTER))),
}
"""window index -> (trigger kind, recorder part, user steps)."""


def recorder(**fields: Any) -> RecorderConfig:
    """The scenario's recorder: a ring of 4 steps, 2 after-steps, a cooldown longer than the after-steps."""
    base: dict[str, Any] = dict(
        ring_steps=RING,
        after_steps=AFTER,
        cooldown_steps=30,
        max_triggers=2,
        norm_k=8.0,
        norm_history=32,
        norm_min_history=8,
        norm_floor=0.01,
    )
    base.update(fields)
    return RecorderConfig(**base)


def run(
    root: Any,
    *,
    steps: int = STEPS,
    poison: bool = True,
    storage_options: Any = None,
    on_step: Callable[[int], None] | None = None,
    **fields: Any,
) -> None:
    """Run the scenario into ``root``.

    Args:
        root: Output directory or URL.
        steps: Steps to run.
        poison: Inject the NaN and the blow-up (False: the clean run, same inputs).
        storage_options: Object-store options.
        on_step: Called after each finished step with its number (a test pauses the writer there).
        fields: ``RecorderConfig`` fields replacing the scenario's.
    """
    torch.set_num_threads(1)
    block = MoEBlock(DEMO)
    x0 = block.make_input()
    config = TensorDumpConfig(
        root,
        level="L1",
        kernel_names="moe_experts",
        stages=STAGES,
        recorder=recorder(**fields),
        durable=False,
        storage_options=storage_options,
    )
    clean = block.w_up[NAN_EXPERT, 0, 0].item()
    with tensor_dump(config) as dumper:
        for step in range(steps):
            if poison and step == NAN_STEP:
                block.w_up[NAN_EXPERT, 0, 0] = float("nan")
            if poison and step == NAN_STEP + 1:
                block.w_up[NAN_EXPERT, 0, 0] = clean
            if poison and step >= BLOW_START:
                block.w_down[BLOW_EXPERT] *= GROWTH
            block(x0 * (1.0 + 0.05 * math.sin(0.7 * step)))  # inputs change every step; the routing does not
            dumper.step()
            if on_step is not None:
                on_step(step)


def main() -> None:
    """``python tests/dump/_recorder_run.py ROOT [--s3 ENDPOINT]``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--s3", default=None, help="moto endpoint URL")
    args = parser.parse_args()
    options = None
    if args.s3:
        options = {"key": "testing", "secret": "testing", "endpoint_url": args.s3}
    run(args.root, storage_options=options)


if __name__ == "__main__":
    main()
