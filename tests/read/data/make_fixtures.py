"""Write the stored fixture of the current format: one dump per layout of one forward step of the demo block.

``tests/read/data/format10/`` holds ``l0/`` (the L0 layout: the expert kernel's tensors), ``tasks/`` (an L1 dump
in the tasks layout: a Zarr group per task) and ``packs/`` (the same step in the packs layout), and
``SHA256SUMS`` (the sha256 of every stored file; ``tests/read/test_fixtures.py`` checks it, so the format
cannot drift silently). Regenerate only when the format itself changes (with a new format version)::

    rm -rf tests/read/data/format10
    PYTHONPATH=src .venv/bin/python tests/read/data/make_fixtures.py tests/read/data/format10

Only the public API and the demo block are used.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
import sys

import torch

from megadump_zarr import TensorDumpConfig, schedule, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock

LAYOUTS = ("l0", "tasks", "packs")
"""The fixture's dumps, one per layout."""
SUMS = "SHA256SUMS"


def config(out: Path, layout: str) -> TensorDumpConfig:
    """The dump configuration of one layout's fixture.

    Args:
        out: The fixture directory.
        layout: One of :data:`LAYOUTS`.
    """
    if layout == "l0":
        return TensorDumpConfig(out / layout, level="L0", kernel_names=("moe_experts",))
    return TensorDumpConfig(
        out / layout,
        level="L1",
        kernel_names=("moe_experts",),
        stages=("expert_up", "combine"),
        tensor_names=("xs", "ws", "out"),
        layout="packs" if layout == "packs" else "tasks",
    )


def write(out: Path, layouts: tuple[str, ...] = LAYOUTS) -> None:
    """Dump one forward step of the default demo block once per layout, then write ``out/SHA256SUMS``.

    Args:
        out: The fixture directory (created).
        layouts: Which of :data:`LAYOUTS` to write.
    """
    for layout in layouts:
        block = MoEBlock(DemoConfig())
        with tensor_dump(config(out, layout), schedule(wait=0, warmup=0, active=1, repeat=1)) as dumper:
            with torch.no_grad():
                block(block.make_input())
            dumper.step()
    write_sums(out, layouts)


def file_digests(root: Path) -> dict[str, str]:
    """The sha256 of every file below ``root``, by path relative to it.

    Args:
        root: A stored dump.
    """
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def write_sums(out: Path, layouts: tuple[str, ...] = LAYOUTS) -> None:
    """Write ``out/SHA256SUMS`` (``sha256sum`` format) for every file of the layouts' dumps.

    Args:
        out: The fixture directory.
        layouts: Its dumps.
    """
    lines = [f"{digest}  {layout}/{rel}" for layout in layouts for rel, digest in file_digests(out / layout).items()]
    (out / SUMS).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    write(Path(sys.argv[1]))
