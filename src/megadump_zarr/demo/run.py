"""``megadump demo``: run the demo block under L0 and L1 dumps and summarise what was written."""

from __future__ import annotations

from dataclasses import dataclass, field
import os
from pathlib import Path

import torch

from megadump_zarr.api import tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.diagnostics import schedule
from megadump_zarr.dump.config import TensorDumpConfig

__all__ = ["DemoSummary", "DEFAULT_DEMO_DIR", "choose_output_dir", "run_demo"]

DEFAULT_DEMO_DIR = Path("megadump-demo")
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@dataclass
class DemoSummary:
    """What one demo run wrote."""

    root: Path
    roots: dict[str, Path]
    windows: int = 0
    invocations: int = 0
    tasks: int = 0
    tensors: int = 0
    raw_bytes: int = 0
    stored_bytes: int = 0
    window_paths: list[str] = field(default_factory=list)
    example_group: str = ""


def choose_output_dir(out: str | os.PathLike | None) -> Path:
    """The directory a run writes to: ``out`` if given (it must not hold a dump yet), else the first
    free one of ``megadump-demo``, ``megadump-demo-2``, ... so repeated runs never collide.

    Args:
        out: The user's choice, or None.
    """
    if out is not None:
        path = Path(out).expanduser()
        if path.exists() and any(path.iterdir()):
            raise FileExistsError(
                f"{path} already exists and is not empty; pass --out with a new directory or remove it first"
            )
        return path
    candidate, n = DEFAULT_DEMO_DIR, 1
    while candidate.exists():
        n += 1
        candidate = DEFAULT_DEMO_DIR.with_name(f"{DEFAULT_DEMO_DIR.name}-{n}")
    return candidate


def _train_step(block: MoEBlock) -> None:
    x = block.make_input().requires_grad_()
    out = block(x)
    loss = out.float().pow(2).mean()
    loss.backward()


def run_demo(
    out: str | os.PathLike | None = None,
    *,
    steps: int = 4,
    dtype: str = "float32",
    device: str = "cpu",
    tokens: int = 37,
    d_model: int = 16,
    n_experts: int = 4,
) -> DemoSummary:
    """Run the demo block for ``steps`` steps with an L0 dump (every tensor, every other step), then two
    steps with an L1 dump of the expert stages for experts 0 and 1.

    Args:
        out: Output directory (see ``choose_output_dir``).
        steps: Steps of the L0 phase.
        dtype: ``float32`` or ``bfloat16``.
        device: ``cpu`` or ``cuda`` (or any torch device string).
        tokens: Tokens per step.
        d_model: Model width.
        n_experts: Experts.
    """
    if dtype not in _DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r}; expected one of {sorted(_DTYPES)}")
    root = choose_output_dir(out)
    block = MoEBlock(
        DemoConfig(tokens=tokens, d_model=d_model, n_experts=n_experts, dtype=_DTYPES[dtype], device=device)
    )
    roots = {"L0": root / "l0", "L1": root / "l1"}
    summary = DemoSummary(root=root, roots=roots)
    l0 = TensorDumpConfig(roots["L0"], level="L0")
    with tensor_dump(l0, schedule(wait=0, warmup=1, active=1)) as dumper:
        for _ in range(steps):
            _train_step(block)
            summary.window_paths.extend(str(p) for p in dumper.last_window_paths)
            dumper.step()
            summary.window_paths.extend(str(p) for p in dumper.last_window_paths if str(p) not in summary.window_paths)
    l1 = TensorDumpConfig(
        roots["L1"],
        level="L1",
        kernel_names=("moe_experts", "moe_experts_backward"),
        stages=("expert_up", "expert_down", "expert_up_bwd"),
        owner_ids=(0, 1),
    )
    with tensor_dump(l1) as dumper:
        for _ in range(2):
            _train_step(block)
            dumper.step()
    summary.window_paths.extend(str(p) for p in dumper.last_window_paths)
    _fill_counts(summary)
    return summary


def _fill_counts(summary: DemoSummary) -> None:
    """Count windows, invocations, L1 tasks, tensors and bytes through the reader (whatever the layout), and
    pick an L1 task group that plain ``xr.open_zarr`` opens."""
    from megadump_zarr.read import open_dump

    for level_root in summary.roots.values():
        if not (level_root / "zarr.json").is_file():  # no window of this level was written (too few steps)
            continue
        records = open_dump(level_root).records()
        tensors = records[records["payload"]]
        summary.windows += len(records[["rank", "window"]].drop_duplicates())
        summary.invocations += len(records[["rank", "window", "invocation"]].drop_duplicates())
        summary.tasks += int(tensors["group"][tensors["level"] == "L1"].nunique())
        summary.tensors += len(tensors)
        summary.raw_bytes += int(tensors["stored_bytes"].sum())
        for window in sorted(level_root.glob("rank_*/window_*")):
            summary.stored_bytes += sum(f.stat().st_size for f in window.rglob("*") if f.is_file())
            if not summary.example_group:
                summary.example_group = _data_group(window)


def _data_group(window: Path) -> str:
    """An L1 task group of ``window`` (the first of its first stage), else "" (an L0 window, or packs)."""
    for pattern in ("*/stages/expert_up/task_*", "*/stages/*/task_*"):
        found = sorted(p for p in window.glob(pattern) if (p / "zarr.json").is_file())
        if found:
            return str(found[0])
    return ""
