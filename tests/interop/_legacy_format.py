"""Writes the predecessor's (hyper_multicore) schema-version-4 dump format, as its dumper did.

Mirrors ``_write_rank_window`` / ``_write_l1_invocation`` / ``_write_l0_invocation`` of the seed: one
``torch.save`` file per tensor, ``task.json`` per L1 task, ``manifest.json`` per rank window, and at L0
one primary file per logical tensor (its first stage port) with hard links for its other ports.
Imported by the interop tests as ``tests.interop._legacy_format``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import json
import os
from pathlib import Path
import re
from typing import Any

import torch

from megadump_zarr.demo.model import DemoConfig, MoEBlock

SAFE_FILE_NAME = re.compile(r"[^A-Za-z0-9._-]")
ANY_WORKER = 0xFFFFFFFF


@dataclass
class Record:
    """One L1 task operand."""

    name: str
    param: int
    io: str
    index: int
    tensor: torch.Tensor  # what torch.save stores (may be a view into a larger storage, like the seed's)
    source_offset: int = 0
    actual_shape: tuple[int, ...] | None = None
    truncated: bool = False
    note: str = ""

    @property
    def phase(self) -> str:
        return "before" if self.io == "input" else "after"


@dataclass
class Task:
    task_id: int
    task_index: int
    stage: str
    core_type: str
    core_id: int
    records: list[Record]
    owner_label: str = "expert"
    owner_id: int = 0
    worker_id: int = ANY_WORKER


@dataclass
class L0Tensor:
    name: str
    param: int
    role: str
    tensor: torch.Tensor
    ports: list[tuple[str, str, int]] = field(default_factory=list)  # (stage, io, index)
    producers: list[str] = field(default_factory=list)
    consumers: list[str] = field(default_factory=list)

    @property
    def phase(self) -> str:
        return "before" if self.role == "external_input" else "after"


@dataclass
class Invocation:
    invocation_id: int
    step: int
    direction: str
    kernel_name: str
    level: str
    tasks: list[Task] = field(default_factory=list)
    tensors: list[L0Tensor] = field(default_factory=list)
    device: str = "cpu"
    device_buffer_bytes: int = 4096


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _write_l1_invocation(invocation: Invocation, invocation_dir: Path, window_dir: Path) -> dict[str, Any]:
    by_task: dict[tuple[int, str, int], Task] = {(t.task_id, t.core_type, t.core_id): t for t in invocation.tasks}
    task_metadata = []
    for key in sorted(by_task):
        task = by_task[key]
        task_dir = invocation_dir / "stages" / SAFE_FILE_NAME.sub("_", task.stage) / f"task_{task.task_id:06d}"
        if task.worker_id != ANY_WORKER:
            task_dir = task_dir.with_name(f"{task_dir.name}_worker_{task.core_id:03d}")
        task_dir.mkdir(parents=True, exist_ok=True)
        tensors = []
        for record in task.records:
            output_path = task_dir / f"{record.io}_{record.index:02d}_{SAFE_FILE_NAME.sub('_', record.name)}.pt"
            torch.save(record.tensor, output_path)
            actual = record.actual_shape if record.actual_shape is not None else tuple(record.tensor.shape)
            nbytes = record.tensor.numel() * record.tensor.element_size()
            full = nbytes
            if record.truncated:
                full = int(torch.Size(actual).numel()) * record.tensor.element_size()
            tensors.append(
                {
                    "name": record.name,
                    "paramPosition": record.param,
                    "io": record.io,
                    "index": record.index,
                    "capturePhase": record.phase,
                    "sourceOffsetBytes": record.source_offset,
                    "actualShape": list(actual),
                    "storedShape": list(record.tensor.shape),
                    "originalDtype": dtype_name(record.tensor.dtype),
                    "storedDtype": dtype_name(record.tensor.dtype),
                    "fullBytes": full,
                    "storedBytes": nbytes,
                    "truncated": record.truncated,
                    "note": record.note,
                    "file": output_path.relative_to(window_dir).as_posix(),
                }
            )
        metadata_path = task_dir / "task.json"
        metadata: dict[str, Any] = {
            "taskId": task.task_id,
            "stageTaskIndex": task.task_index,
            "stage": task.stage,
            "owner": {"label": task.owner_label, "id": task.owner_id},
            "coreType": task.core_type,
            "coreId": task.core_id,
            "tensorCount": len(tensors),
            "tensors": tensors,
        }
        metadata_path.write_text(json.dumps(metadata, ensure_ascii=False, indent=2), encoding="utf-8")
        metadata["metadataFile"] = metadata_path.relative_to(window_dir).as_posix()
        task_metadata.append(metadata)
    return {
        "invocationId": invocation.invocation_id,
        "step": invocation.step,
        "direction": invocation.direction,
        "kernelName": invocation.kernel_name,
        "device": invocation.device,
        "deviceBufferBytes": invocation.device_buffer_bytes,
        "taskCount": len(task_metadata),
        "tasks": task_metadata,
    }


def _write_l0_stage_files(
    tensor: L0Tensor, invocation_dir: Path, window_dir: Path, safe_name: str
) -> tuple[Path, list[dict[str, Any]]]:
    """The primary file at the first port, hard links at the others (``primary_file_with_hard_links``)."""
    ports = []
    primary: Path | None = None
    for stage, io, index in tensor.ports:
        stage_dir = invocation_dir / "stages" / SAFE_FILE_NAME.sub("_", stage)
        stage_dir.mkdir(parents=True, exist_ok=True)
        path = stage_dir / f"{io}_{index:02d}_{safe_name}.pt"
        if primary is None:
            torch.save(tensor.tensor, path)
            primary = path
        else:
            os.link(primary, path)
        ports.append({"stage": stage, "io": io, "index": index, "file": path.relative_to(window_dir).as_posix()})
    if primary is None:
        invocation_dir.mkdir(parents=True, exist_ok=True)
        primary = invocation_dir / f"{safe_name}.pt"
        torch.save(tensor.tensor, primary)
    return primary, ports


def _write_l0_invocation(invocation: Invocation, invocation_dir: Path, window_dir: Path) -> dict[str, Any]:
    tensor_metadata = []
    for tensor in invocation.tensors:
        safe_name = SAFE_FILE_NAME.sub("_", tensor.name)
        output_path, port_metadata = _write_l0_stage_files(tensor, invocation_dir, window_dir, safe_name)
        tensor_metadata.append(
            {
                "name": tensor.name,
                "paramPosition": tensor.param,
                "role": tensor.role,
                "capturePhase": tensor.phase,
                "producers": list(tensor.producers),
                "consumers": list(tensor.consumers),
                "ports": port_metadata,
                "declaredShape": list(tensor.tensor.shape),
                "actualShape": list(tensor.tensor.shape),
                "originalDtype": dtype_name(tensor.tensor.dtype),
                "storedDtype": dtype_name(tensor.tensor.dtype),
                "file": output_path.relative_to(window_dir).as_posix(),
            }
        )
    return {
        "invocationId": invocation.invocation_id,
        "step": invocation.step,
        "direction": invocation.direction,
        "kernelName": invocation.kernel_name,
        "device": invocation.device,
        "tensorCount": len(tensor_metadata),
        "tensors": tensor_metadata,
    }


def write_rank_window(
    output_dir: Path, level: str, rank: int, window_index: int, invocations: list[Invocation]
) -> Path:
    """One rank's window in the legacy layout; returns the manifest path."""
    window_dir = output_dir / f"rank_{rank}" / f"window_{window_index:04d}"
    if window_dir.exists():
        raise FileExistsError(f"Tensor dump window already exists: {window_dir}")
    window_dir.mkdir(parents=True)
    metadata = []
    for invocation in invocations:
        invocation_dir = window_dir / f"invocation_{invocation.invocation_id:06d}_{invocation.direction}"
        writer = _write_l1_invocation if invocation.level == "L1" else _write_l0_invocation
        metadata.append(writer(invocation, invocation_dir, window_dir))
    is_l1 = level == "L1"
    manifest = {
        "schemaVersion": 4,
        "level": level,
        "tensorSerialization": "torch.save",
        "tensorFileLayout": "stage_only",
        "windowIndex": window_index,
        "capturePhaseSemantics": "task_boundary" if is_l1 else "mega_kernel_boundary",
        "stageViewStorage": "per_task_files" if is_l1 else "primary_file_with_hard_links",
        "rank": rank,
        "invocationCount": len(metadata),
        "invocations": metadata,
    }
    manifest_path = window_dir / "manifest.json"
    manifest_path.write_text(json.dumps(manifest, ensure_ascii=False, indent=2), encoding="utf-8")
    return manifest_path


# --------------------------------------------------------------------------- demo content
def demo_tensors(dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Real tensors of the demo MoE block: input, RMS-normed activations, router logits, weights."""
    block = MoEBlock(DemoConfig(dtype=dtype, tokens=37, d_model=16, n_experts=4))
    x = block.make_input().detach()
    xf = x.float()
    h = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * block.g.float()).to(dtype)
    logits = (h.float() @ block.w_router.float()).to(dtype)
    expert = logits.float().argmax(-1)
    counts = torch.bincount(expert, minlength=4).to(torch.int64)
    return {
        "x": x,
        "g": block.g.detach(),
        "h": h,
        "w_router": block.w_router.detach(),
        "logits": logits,
        "w_up": block.w_up.detach(),
        "counts": counts,
    }


def l1_invocations(t: dict[str, torch.Tensor]) -> list[Invocation]:
    """Two invocations of task records: row slices (views of the full tensors, as the seed saved them),
    per-worker tasks, an int64 operand and a truncated record."""
    x, h, w_up, counts = t["x"], t["h"], t["w_up"], t["counts"]
    row_bytes = x.shape[1] * x.element_size()
    forward = Invocation(
        0,
        3,
        "forward",
        "moe_experts",
        "L1",
        tasks=[
            Task(
                0,
                0,
                "expert_up",
                "MIX",
                0,
                [
                    Record("x", 0, "input", 0, x[0:10], source_offset=0, note="expert 0 rows [0, 10)"),
                    Record("expert_counts", 1, "input", 1, counts),
                    Record("w_up", 2, "input", 2, w_up[0], note="expert 0 weights"),
                    Record("h", 3, "output", 0, h[0:10]),
                ],
            ),
            Task(
                1,
                1,
                "expert_up",
                "MIX",
                1,
                [
                    Record("x", 0, "input", 0, x[10:20], source_offset=10 * row_bytes),
                    Record("w_up", 2, "input", 2, w_up[1]),
                    Record("h", 3, "output", 0, h[10:20], source_offset=10 * row_bytes),
                ],
                owner_id=1,
            ),
            # per-worker task (broadcast mode): directory task_000004_worker_002
            Task(
                4,
                0,
                "gather stage",
                "AIV",
                2,
                [
                    Record("x", 0, "input", 0, x[20:30], source_offset=20 * row_bytes),
                    # truncated: only the first 24 elements of a (37, 16) operand were captured
                    Record(
                        "h",
                        1,
                        "output",
                        0,
                        h.reshape(-1)[:24],
                        actual_shape=tuple(h.shape),
                        truncated=True,
                        note="truncated to 24 of 592 elements",
                    ),
                ],
                owner_label="none",
                owner_id=-1,
                worker_id=2,
            ),
        ],
    )
    backward = Invocation(
        1,
        3,
        "backward",
        "moe_experts_backward",
        "L1",
        tasks=[
            Task(
                7,
                0,
                "expert_up_bwd",
                "AIC",
                3,
                [
                    Record("grad_h", 0, "input", 0, (h[0:10].float() * 2).to(h.dtype)),
                    Record("grad_w_up", 1, "output", 0, (w_up[0].float() - 1).to(w_up.dtype)),
                ],
            ),
        ],
    )
    return [forward, backward]


def l0_invocations(t: dict[str, torch.Tensor]) -> list[Invocation]:
    """A router kernel: external inputs, a stage output consumed by a second stage (two ports: one primary
    file plus a hard link), a final output; and a tensor bound to no port."""
    router = Invocation(
        0,
        1,
        "forward",
        "moe_router",
        "L0",
        tensors=[
            L0Tensor("x", 0, "external_input", t["x"], [("norm", "input", 0)], consumers=["norm"]),
            L0Tensor("norm_weight", 1, "external_input", t["g"], [("norm", "input", 1)], consumers=["norm"]),
            L0Tensor(
                "h",
                2,
                "stage_output",
                t["h"],
                [("norm", "output", 0), ("router", "input", 0)],
                producers=["norm"],
                consumers=["router"],
            ),
            L0Tensor("w_router", 3, "external_input", t["w_router"], [("router", "input", 1)], consumers=["router"]),
            L0Tensor("logits", 4, "final_output", t["logits"], [("router", "output", 0)], producers=["router"]),
            L0Tensor("expert counts", 5, "final_output", t["counts"]),
        ],
    )
    second = Invocation(
        1,
        1,
        "forward",
        "moe_norm_only",
        "L0",
        tensors=[
            L0Tensor("x", 0, "external_input", t["x"], [("norm", "input", 0)], consumers=["norm"]),
            L0Tensor("h", 1, "final_output", t["h"], [("norm", "output", 0)], producers=["norm"]),
        ],
    )
    return [router, second]
