"""Write the packs-4 fixture: an L1 dump in the packs layout of one forward step of the default demo block.

Run with the pack-format-4 writer (window schemaVersion 8, ``TensorDumpConfig(layout="packs")``, packs
``megadumpPack: 4`` with each row's varying attributes in ``row_fields``; commit bc9d41c), never with newer code::

    mkdir /tmp/p4 && git archive bc9d41c | tar -x -C /tmp/p4
    PYTHONPATH=/tmp/p4/src .venv/bin/python tests/read/data/packs4/generate.py OUT

and copy ``OUT/l1`` here. ``tests/read/test_pack_formats.py`` also runs this script with today's code (``write``,
both layouts) to make the fresh dumps the fixture is compared with.
"""

import sys
from pathlib import Path

import torch

from megadump_zarr import TensorDumpConfig, schedule, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock


def write(out: Path, layout: str = "packs") -> None:
    """Dump one forward step of the default demo block at L1 (``out/l1``) in ``layout``.

    The ``moe_experts`` stages ``expert_up`` (one ragged task per expert: task groups), ``unpermute`` and
    ``combine`` (four uniform row tiles each: one pack, rows with ``slot``/``token`` and ``token``
    coordinates; the clipped last tile: a task group).
    """
    cfg = TensorDumpConfig(
        out / "l1",
        level="L1",
        kernel_names=("moe_experts",),
        stages=("expert_up", "unpermute", "combine"),
        tensor_names=("xs", "ws", "ys", "inverse_order", "out"),
        layout=layout,
    )
    block = MoEBlock(DemoConfig())
    with tensor_dump(cfg, schedule(wait=0, warmup=0, active=1, repeat=1)) as d:
        with torch.no_grad():
            block(block.make_input())
        d.step()


if __name__ == "__main__":
    write(Path(sys.argv[1]))
