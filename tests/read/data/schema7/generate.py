"""Write the schema-7 fixture: an L0 and an L1 dump of one forward step of the default demo block.

Run with the schema-7 writer (task-record packs, `WindowWriter` default `pack=True`; commit 4722b6d),
never with newer code::

    mkdir /tmp/s7 && git archive 4722b6d | tar -x -C /tmp/s7
    PYTHONPATH=/tmp/s7/src .venv/bin/python tests/read/data/schema7/generate.py OUT

and copy ``OUT/l0`` and ``OUT/l1`` here. ``tests/read/test_schema7.py`` also runs this script with
today's code (``write``) to make the fresh dump the fixture is compared with.
"""

import sys
from pathlib import Path

import torch

from megadump_zarr import TensorDumpConfig, schedule, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock


def write(out: Path) -> None:
    """Dump one forward step of the default demo block at L0 (``out/l0``) and at L1 (``out/l1``)."""
    demo = DemoConfig()
    for cfg in (
        TensorDumpConfig(out / "l0", level="L0"),
        TensorDumpConfig(
            out / "l1",
            level="L1",
            kernel_names=("moe_experts",),
            stages=("expert_up", "combine"),
            tensor_names=("xs", "h", "out", "ws"),
        ),
    ):
        block = MoEBlock(demo)
        with tensor_dump(cfg, schedule(wait=0, warmup=0, active=1, repeat=1)) as d:
            with torch.no_grad():
                block(block.make_input())
            d.step()


if __name__ == "__main__":
    write(Path(sys.argv[1]))
