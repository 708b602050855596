"""The embedded demo model: a small MoE transformer FFN block compiled into MegaKernels.

Per step it launches three forward kernels and, under autograd, one backward kernel:

* ``moe_router`` (event_driven): ``norm`` (vector, row tiles) and ``router`` (cube, row tiles).
* host routing (top-1 expert per token, stable sort by expert, as a framework's dispatch would do).
* ``moe_dispatch`` (aiv_pipeline): ``gather`` (vector), every worker a row shard of each tile.
* ``moe_experts`` (event_driven, owner "expert"): ``expert_up`` (mix, one task per expert, data-dependent
  rows resolved through ``owner_context``), ``expert_down`` (cube, per expert), ``unpermute`` (vector)
  and ``combine`` (vector). The workspace ``ws`` holds the expert hidden activations after
  ``expert_up`` and is overwritten by ``unpermute``: only an L1 dump sees the hidden activations.
* ``moe_experts_backward`` (direction "backward"): ``combine_bwd``, ``permute_bwd``,
  ``expert_down_bwd`` and ``expert_up_bwd``; workspace ``bws`` is reused by two stages too.

The router and dispatch kernels are inference-style (no autograd); the expert kernel's backward gives
gradients for ``x``, ``xs``, ``gate``, ``w_up`` and ``w_down``.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any

import torch
import torch.nn.functional as F

from megadump_zarr.runtime import (
    AccumulationOrder,
    Graph,
    MegaKernel,
    OperatorNode,
    SplitSpec,
    TensorSpec,
    megakernel_apply,
    shard_view_resolver,
    split_k_matmul,
)

__all__ = [
    "DEMO_SOURCE",
    "DemoConfig",
    "ExpertLayout",
    "MoEBlock",
    "describe_config",
    "expert_rows_resolver",
    "register_replay_source",
    "replay_kernel",
]

DEMO_SOURCE = "megadump_zarr.demo.MoEBlock"
"""The ``diagnostic_source`` name the demo block's graphs carry (L1 dumps keep it as ``operatorSource``,
so ``megadump_zarr.replay`` rebuilds the same operators with the same config)."""

_EPS = 1e-6


@dataclass(frozen=True)
class DemoConfig:
    """Size, dtype and device of the demo block.

    Args:
        tokens: Tokens per step (rows); not a multiple of ``tile_rows`` gives a clipped final tile.
        d_model: Model width (the experts' hidden width too).
        n_experts: Number of experts.
        tile_rows: Rows per task tile.
        dtype: ``torch.float32`` or ``torch.bfloat16``.
        device: Where the parameters and kernels live.
        num_workers: Workers per kernel.
        seed: Weight and input seed.
    """

    tokens: int = 37
    d_model: int = 16
    n_experts: int = 4
    tile_rows: int = 8
    dtype: torch.dtype = torch.float32
    device: str = "cpu"
    num_workers: int = 8
    seed: int = 0

    def to_document(self) -> dict[str, Any]:
        """The config as JSON (``dtype`` by name, e.g. ``"bfloat16"``)."""
        return {
            "tokens": self.tokens,
            "d_model": self.d_model,
            "n_experts": self.n_experts,
            "tile_rows": self.tile_rows,
            "dtype": str(self.dtype).removeprefix("torch."),
            "device": str(self.device),
            "num_workers": self.num_workers,
            "seed": self.seed,
        }

    @classmethod
    def from_document(cls, document: Any) -> DemoConfig:
        """The config a ``to_document`` mapping describes (unknown keys refused).

        Args:
            document: The mapping.

        Raises:
            ValueError: Not a mapping, an unknown key, a wrong type or an unknown dtype.
        """
        if not isinstance(document, dict):
            raise ValueError(f"demo config must be a mapping, got {type(document).__name__}")
        fields = {"tokens", "d_model", "n_experts", "tile_rows", "dtype", "device", "num_workers", "seed"}
        unknown = sorted(set(document) - fields)
        if unknown:
            raise ValueError(f"demo config has unknown keys {unknown}")
        values = dict(document)
        for name in fields - {"dtype", "device"}:
            if name in values and (
                isinstance(values[name], bool) or not isinstance(values[name], int) or values[name] < 0
            ):
                raise ValueError(f"demo config {name!r} must be a non-negative integer, got {values[name]!r}")
        if "dtype" in values:
            dtype = getattr(torch, str(values["dtype"]), None) if isinstance(values["dtype"], str) else None
            if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
                raise ValueError(f"demo config 'dtype' must name a torch floating dtype, got {values['dtype']!r}")
            values["dtype"] = dtype
        if "device" in values and not isinstance(values["device"], str):
            raise ValueError(f"demo config 'device' must be a string, got {values['device']!r}")
        return cls(**values)


@dataclass(frozen=True)
class ExpertLayout:
    """The ``owner_context`` of the expert kernels: where the per-expert token counts live.

    Args:
        counts_position: ABI parameter position of the int64 per-expert token counts.
    """

    counts_position: int


def expert_rows_resolver(context: Any) -> Any:
    """L1 view of an expert task's operand: its expert's rows, or its expert's weight matrix.

    Token counts per expert vary per step, so the task-local extent is read from the counts
    parameter (via ``owner_context``), which is known before the launch.

    Args:
        context: The dumper's ``L1TensorViewContext``.
    """
    spec = context.tensor_spec
    expert = context.owner_id
    if expert is None:
        return context.default_view
    row_bytes = prod(spec.shape[1:]) * spec.dtype_size
    if spec.dynamic:
        counts = context.parameter_cpu(context.owner_context.counts_position)
        start = int(counts[:expert].sum())
        rows = int(counts[expert])
        return context.make_view(
            (rows, *spec.shape[1:]),
            source_offset_bytes=start * row_bytes,
            note=f"expert {expert} rows [{start}, {start + rows})",
        )
    if spec.name.startswith(("w_up", "w_down", "grad_w_")):
        return context.make_view(
            spec.shape[1:], source_offset_bytes=expert * row_bytes, note=f"expert {expert} weights"
        )
    return context.default_view


def _expert_rows(params: Any, counts_position: int, expert: int) -> slice:
    counts = params[counts_position]
    start = int(counts[:expert].sum())
    return slice(start, start + int(counts[expert]))


class MoEBlock:
    """The demo block: weights, compiled kernels, and an eager reference.

    Args:
        config: Sizes, dtype, device.
        rank: Rank reported by the kernels when torch.distributed is not initialised.
        accumulation_order: The expert kernel's worker-dependent reduction order (a determinism-check
            fixture): e.g. ``AccumulationOrder(("expert_down",), seed=1)`` makes ``expert_down`` a split-K
            matmul whose partial sums are added in an order permuted by the seed, task and core, so two
            blocks with different seeds differ in the last bits from ``expert_down`` on. None (default):
            plain matmuls, runs are bitwise identical.
    """

    def __init__(
        self,
        config: DemoConfig = DemoConfig(),
        *,
        rank: int | None = None,
        accumulation_order: AccumulationOrder | None = None,
    ) -> None:
        self.config = config
        c = config
        generator = torch.Generator().manual_seed(c.seed)

        def weight(*shape: int, scale: float) -> torch.Tensor:
            return (torch.randn(*shape, generator=generator) * scale).to(c.dtype).to(c.device)

        self.g = (1.0 + 0.1 * torch.randn(c.d_model, generator=generator)).to(c.dtype).to(c.device)
        self.w_router = weight(c.d_model, c.n_experts, scale=c.d_model**-0.5)
        self.w_up = weight(c.n_experts, c.d_model, c.d_model, scale=c.d_model**-0.5)
        self.w_down = weight(c.n_experts, c.d_model, c.d_model, scale=c.d_model**-0.5)
        self._input_generator = generator
        kernel_options = dict(num_workers=c.num_workers, rank=rank)
        self.router_kernel = MegaKernel(self._router_graph(), name="moe_router", **kernel_options)
        self.dispatch_kernel = MegaKernel(
            self._dispatch_graph(), name="moe_dispatch", execution_mode="aiv_pipeline", **kernel_options
        )
        layout = ExpertLayout(counts_position=1)
        self.expert_kernel = MegaKernel(
            self._expert_graph(),
            name="moe_experts",
            owner_label="expert",
            owner_context=layout,
            accumulation_order=accumulation_order,
            **kernel_options,
        )
        self.expert_backward_kernel = MegaKernel(
            self._expert_backward_graph(),
            name="moe_experts_backward",
            owner_label="expert",
            owner_context=ExpertLayout(counts_position=3),
            **kernel_options,
        )
        source = {"name": DEMO_SOURCE, "config": c.to_document()}
        for kernel in self.kernels:  # L1 dumps record it: `megadump replay` rebuilds these operators from it
            kernel.graph.diagnostic_source = source

    @property
    def kernels(self) -> tuple[MegaKernel, ...]:
        """The block's four kernels: router, dispatch, experts, experts backward."""
        return (self.router_kernel, self.dispatch_kernel, self.expert_kernel, self.expert_backward_kernel)

    # ------------------------------------------------------------------ graphs
    def _spec(
        self,
        name: str,
        shape: tuple[int, ...],
        position: int,
        dims: tuple[str, ...],
        dtype: Any = None,
        dynamic: bool = False,
    ) -> TensorSpec:
        return TensorSpec(name, shape, self.config.dtype if dtype is None else dtype, position, dims, dynamic)

    def _router_graph(self) -> Graph:
        c = self.config
        x = self._spec("x", (c.tokens, c.d_model), 0, ("token", "hidden"))
        g = self._spec("norm_weight", (c.d_model,), 1, ("hidden",))
        h = self._spec("h", (c.tokens, c.d_model), 2, ("token", "hidden"))
        w = self._spec("w_router", (c.d_model, c.n_experts), 3, ("hidden", "expert"))
        logits = self._spec("logits", (c.tokens, c.n_experts), 4, ("token", "expert"))

        def norm(t: Any) -> None:
            rows = t.params[0][t.rows].float()
            scale = torch.rsqrt(rows.pow(2).mean(-1, keepdim=True) + _EPS)
            t.params[2][t.rows] = (rows * scale * t.params[1].float()).to(c.dtype)

        def router(t: Any) -> None:
            t.params[4][t.rows] = t.params[2][t.rows] @ t.params[3]

        split = SplitSpec(split_inputs=((0, 0),), split_output_dims=(0,))
        return Graph(
            [
                OperatorNode("norm", "vector", (x, g), (h,), norm, split, c.tile_rows),
                OperatorNode("router", "cube", (h, w), (logits,), router, split, c.tile_rows),
            ]
        )

    def _dispatch_graph(self) -> Graph:
        c = self.config
        h = self._spec("h", (c.tokens, c.d_model), 0, ("token", "hidden"))
        order = self._spec("order", (c.tokens,), 1, ("slot",), torch.int64)
        xs = self._spec("xs", (c.tokens, c.d_model), 2, ("slot", "hidden"))

        def gather(t: Any) -> None:
            t.params[2][t.rows] = t.params[0][t.params[1][t.rows]]

        split = SplitSpec(split_inputs=((1, 0),), split_output_dims=(0,))
        return Graph(
            [
                OperatorNode(
                    "gather",
                    "vector",
                    (h, order),
                    (xs,),
                    gather,
                    split,
                    c.tile_rows,
                    diagnostic_view_resolver=shard_view_resolver,
                )
            ]
        )

    def _expert_graph(self) -> Graph:
        c = self.config
        T, D, E = c.tokens, c.d_model, c.n_experts
        xs = self._spec("xs", (T, D), 0, ("slot", "hidden"), dynamic=True)
        counts = self._spec("expert_counts", (E,), 1, ("expert",), torch.int64)
        w_up = self._spec("w_up", (E, D, D), 2, ("expert", "hidden", "ffn"))
        w_down = self._spec("w_down", (E, D, D), 3, ("expert", "ffn", "hidden"))
        ws_hidden = self._spec("ws", (T, D), 4, ("slot", "ffn"), dynamic=True)
        ys = self._spec("ys", (T, D), 5, ("slot", "hidden"), dynamic=True)
        inv = self._spec("inverse_order", (T,), 6, ("token",), torch.int64)
        x = self._spec("x", (T, D), 7, ("token", "hidden"))
        gate = self._spec("gate", (T,), 8, ("token",))
        out = self._spec("out", (T, D), 9, ("token", "hidden"))
        ws_tokens = TensorSpec("ws", (T, D), c.dtype, 4, ("token", "ffn"))
        ys_all = TensorSpec("ys", (T, D), c.dtype, 5, ("slot", "hidden"))  # unpermute reads every row
        experts = tuple(range(E))

        def expert_up(t: Any) -> None:
            rows = _expert_rows(t.params, 1, t.owner_id)
            t.params[4][rows] = F.silu(t.params[0][rows] @ t.params[2][t.owner_id])

        def expert_down(t: Any) -> None:
            rows = _expert_rows(t.params, 1, t.owner_id)
            t.params[5][rows] = split_k_matmul(t, t.params[4][rows], t.params[3][t.owner_id])

        def unpermute(t: Any) -> None:
            t.params[4][t.rows] = t.params[5][t.params[6][t.rows]]

        def combine(t: Any) -> None:
            t.params[9][t.rows] = t.params[7][t.rows] + t.params[8][t.rows, None] * t.params[4][t.rows]

        resolver = expert_rows_resolver
        return Graph(
            [
                OperatorNode(
                    "expert_up",
                    "mix",
                    (xs, counts, w_up),
                    (ws_hidden,),
                    expert_up,
                    owners=experts,
                    diagnostic_view_resolver=resolver,
                ),
                OperatorNode(
                    "expert_down",
                    "cube",
                    (ws_hidden, counts, w_down),
                    (ys,),
                    expert_down,
                    owners=experts,
                    diagnostic_view_resolver=resolver,
                ),
                OperatorNode(
                    "unpermute",
                    "vector",
                    (ys_all, inv),
                    (ws_tokens,),
                    unpermute,
                    SplitSpec(((1, 0),), (0,)),
                    c.tile_rows,
                ),
                OperatorNode(
                    "combine",
                    "vector",
                    (x, ws_tokens, gate),
                    (out,),
                    combine,
                    SplitSpec(((0, 0), (1, 0), (2, 0)), (0,)),
                    c.tile_rows,
                ),
            ]
        )

    def _expert_backward_graph(self) -> Graph:
        c = self.config
        T, D, E = c.tokens, c.d_model, c.n_experts
        spec = self._spec
        grad_out = spec("grad_out", (T, D), 0, ("token", "hidden"))
        yu = spec("expert_out", (T, D), 1, ("token", "hidden"))
        gate = spec("gate", (T,), 2, ("token",))
        counts = spec("expert_counts", (E,), 3, ("expert",), torch.int64)
        order = spec("order", (T,), 4, ("slot",), torch.int64)
        xs = spec("xs", (T, D), 5, ("slot", "hidden"), dynamic=True)
        w_up = spec("w_up", (E, D, D), 6, ("expert", "hidden", "ffn"))
        w_down = spec("w_down", (E, D, D), 7, ("expert", "ffn", "hidden"))
        bws_tokens = spec("bws", (T, D), 8, ("token", "hidden"))
        bws_slots = spec("bws", (T, D), 8, ("slot", "ffn"), dynamic=True)
        grad_x = spec("grad_x", (T, D), 9, ("token", "hidden"))
        grad_gate = spec("grad_gate", (T,), 10, ("token",))
        grad_ys = spec("grad_ys", (T, D), 11, ("slot", "hidden"), dynamic=True)
        grad_ys_tiles = spec("grad_ys", (T, D), 11, ("slot", "hidden"))  # permute_bwd writes row tiles
        grad_w_down = spec("grad_w_down", (E, D, D), 12, ("expert", "ffn", "hidden"))
        grad_xs = spec("grad_xs", (T, D), 13, ("slot", "hidden"), dynamic=True)
        grad_w_up = spec("grad_w_up", (E, D, D), 14, ("expert", "hidden", "ffn"))
        experts = tuple(range(E))

        def combine_bwd(t: Any) -> None:
            p, r = t.params, t.rows
            p[9][r] = p[0][r]
            p[10][r] = (p[0][r].float() * p[1][r].float()).sum(-1).to(c.dtype)
            p[8][r] = p[2][r, None] * p[0][r]

        def permute_bwd(t: Any) -> None:
            p, r = t.params, t.rows
            p[11][r] = p[8][p[4][r]]

        def expert_down_bwd(t: Any) -> None:
            p, e = t.params, t.owner_id
            rows = _expert_rows(p, 3, e)
            hidden = F.silu(p[5][rows] @ p[6][e])
            p[12][e] = hidden.transpose(0, 1) @ p[11][rows]
            p[8][rows] = p[11][rows] @ p[7][e].transpose(0, 1)

        def expert_up_bwd(t: Any) -> None:
            p, e = t.params, t.owner_id
            rows = _expert_rows(p, 3, e)
            pre = (p[5][rows] @ p[6][e]).float()
            sig = torch.sigmoid(pre)
            grad_pre = (p[8][rows].float() * sig * (1 + pre * (1 - sig))).to(c.dtype)
            p[13][rows] = grad_pre @ p[6][e].transpose(0, 1)
            p[14][e] = p[5][rows].transpose(0, 1) @ grad_pre

        rows_split = SplitSpec(((0, 0), (1, 0), (2, 0)), (0, 0, 0))
        resolver = expert_rows_resolver
        return Graph(
            [
                OperatorNode(
                    "combine_bwd",
                    "vector",
                    (grad_out, yu, gate),
                    (grad_x, grad_gate, bws_tokens),
                    combine_bwd,
                    rows_split,
                    c.tile_rows,
                ),
                OperatorNode(
                    "permute_bwd",
                    "vector",
                    (bws_tokens, order),
                    (grad_ys_tiles,),
                    permute_bwd,
                    SplitSpec(((1, 0),), (0,)),
                    c.tile_rows,
                ),
                OperatorNode(
                    "expert_down_bwd",
                    "cube",
                    (xs, counts, w_up, w_down, grad_ys),
                    (grad_w_down, bws_slots),
                    expert_down_bwd,
                    owners=experts,
                    diagnostic_view_resolver=resolver,
                ),
                OperatorNode(
                    "expert_up_bwd",
                    "mix",
                    (xs, counts, w_up, bws_slots),
                    (grad_xs, grad_w_up),
                    expert_up_bwd,
                    owners=experts,
                    diagnostic_view_resolver=resolver,
                ),
            ]
        )

    # ------------------------------------------------------------------ running
    def make_input(self) -> torch.Tensor:
        """A fresh random input batch (tokens × d_model) from the block's seeded generator."""
        c = self.config
        return torch.randn(c.tokens, c.d_model, generator=self._input_generator).to(c.dtype).to(c.device)

    def _empty(self, *shape: int, dtype: Any = None) -> torch.Tensor:
        return torch.zeros(*shape, dtype=self.config.dtype if dtype is None else dtype, device=self.config.device)

    def route(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Run the router and dispatch kernels; return the routing tensors and the permuted tokens.

        Args:
            x: Input tokens.
        """
        c = self.config
        T, D, E = c.tokens, c.d_model, c.n_experts
        h, logits = self._empty(T, D), self._empty(T, E)
        self.router_kernel.launch([x, self.g, h, self.w_router, logits])
        probs = torch.softmax(logits.float(), dim=-1)
        gate, expert = probs.max(dim=-1)
        order = torch.sort(expert, stable=True).indices
        counts = torch.bincount(expert, minlength=E).to(torch.int64)
        xs = self._empty(T, D)
        self.dispatch_kernel.launch([h, order, xs])
        return {
            "h": h,
            "logits": logits,
            "gate": gate.to(c.dtype),
            "order": order,
            "inverse_order": torch.argsort(order),
            "expert_counts": counts,
            "xs": xs,
        }

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One block step through the kernels; differentiable through the expert kernel.

        Args:
            x: Input tokens.
        """
        routing = self.route(x.detach())
        call = _ExpertCall(self, routing)
        return megakernel_apply(call, x, routing["xs"], routing["gate"], self.w_up, self.w_down)

    __call__ = forward

    def reference(
        self,
        x: torch.Tensor,
        *,
        xs: torch.Tensor | None = None,
        gate: torch.Tensor | None = None,
        w_up: torch.Tensor | None = None,
        w_down: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The same block in eager PyTorch, same dtype (routing recomputed eagerly).

        Args:
            x: Input tokens.
            xs: Optional permuted tokens to use instead of recomputing them (for gradient checks).
            gate: Optional gate values likewise.
            w_up: Optional expert up weights likewise.
            w_down: Optional expert down weights likewise.
        """
        c = self.config
        xf = x.float()
        h = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + _EPS) * self.g.float()).to(c.dtype)
        probs = torch.softmax((h @ self.w_router).float(), dim=-1)
        gate_ref, expert = probs.max(dim=-1)
        order = torch.sort(expert, stable=True).indices
        counts = torch.bincount(expert, minlength=c.n_experts)
        xs = h[order] if xs is None else xs
        gate = gate_ref.to(c.dtype) if gate is None else gate
        w_up = self.w_up if w_up is None else w_up
        w_down = self.w_down if w_down is None else w_down
        pieces, start = [], 0
        for e in range(c.n_experts):
            rows = slice(start, start + int(counts[e]))
            pieces.append(F.silu(xs[rows] @ w_up[e]) @ w_down[e])
            start = rows.stop
        ys = torch.cat(pieces)
        return x + gate[:, None] * ys[torch.argsort(order)]


class _ExpertCall:
    """One expert-kernel call under autograd (routing tensors are constants)."""

    def __init__(self, block: MoEBlock, routing: dict[str, torch.Tensor]) -> None:
        self.block = block
        self.routing = routing

    def run_forward(self, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        x, xs, gate, w_up, w_down = (t.detach() for t in inputs)
        b = self.block
        T, D = b.config.tokens, b.config.d_model
        ws, ys, out = b._empty(T, D), b._empty(T, D), b._empty(T, D)
        r = self.routing
        b.expert_kernel.launch([xs, r["expert_counts"], w_up, w_down, ws, ys, r["inverse_order"], x, gate, out])
        return out, (ws, gate, xs, w_up, w_down)

    def run_backward(
        self, saved: tuple[torch.Tensor, ...], grads: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, ...]:
        expert_out, gate, xs, w_up, w_down = saved
        b = self.block
        c = b.config
        T, D, E = c.tokens, c.d_model, c.n_experts
        grad_out = grads[0].contiguous().to(c.dtype)
        outputs = dict(
            bws=b._empty(T, D),
            grad_x=b._empty(T, D),
            grad_gate=b._empty(T),
            grad_ys=b._empty(T, D),
            grad_w_down=b._empty(E, D, D),
            grad_xs=b._empty(T, D),
            grad_w_up=b._empty(E, D, D),
        )
        r = self.routing
        b.expert_backward_kernel.launch(
            [grad_out, expert_out, gate, r["expert_counts"], r["order"], xs, w_up, w_down, *outputs.values()],
            direction="backward",
        )
        return outputs["grad_x"], outputs["grad_xs"], outputs["grad_gate"], outputs["grad_w_up"], outputs["grad_w_down"]


def replay_kernel(config: Any, kernel: str, dtype: torch.dtype) -> MegaKernel:
    """The demo kernel named ``kernel``, rebuilt on the CPU in ``dtype`` from a dump's recorded config.

    Args:
        config: The ``operatorSource["config"]`` document a demo dump records.
        kernel: The kernel's diagnostic name.
        dtype: The dtype to rebuild it in.

    Raises:
        ValueError: The demo has no such kernel (the message lists its kernels).
    """
    from dataclasses import replace

    block = MoEBlock(replace(DemoConfig.from_document(config), dtype=dtype, device="cpu"))
    for candidate in block.kernels:
        if candidate.kernel_name == kernel:
            return candidate
    raise ValueError(
        f"the demo model has no kernel {kernel!r}; its kernels: {', '.join(k.kernel_name for k in block.kernels)}"
    )


def describe_config(config: Any) -> str:
    """A demo config in a few words (``tokens=64, d_model=32, ...``) for a replay reference's origin.

    Args:
        config: The recorded config document (a dict; other keys are left out).
    """
    keys = ("tokens", "d_model", "n_experts", "tile_rows", "dtype")
    return ", ".join(f"{key}={config[key]}" for key in keys if key in config)


def register_replay_source() -> None:
    """Register the demo model as a replay source (``megadump_zarr.replay.references.register_source``):
    a demo dump replays against the model its ``operatorSource`` config rebuilds."""
    from megadump_zarr.replay.references import register_source

    register_source(DEMO_SOURCE, replay_kernel, describe_config)
