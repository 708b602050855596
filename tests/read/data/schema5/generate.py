import sys, torch
from pathlib import Path

sys.path.insert(0, "tests/read")
from megadump_zarr import TensorDumpConfig, schedule, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock

out = Path(sys.argv[1])
demo = DemoConfig()
for level, cfg in (
    ("l0", TensorDumpConfig(out / "l0", level="L0")),
    (
        "l1",
        TensorDumpConfig(
            out / "l1",
            level="L1",
            kernel_names=("moe_experts",),
            stages=("expert_up", "combine"),
            tensor_names=("xs", "h", "out", "ws"),
        ),
    ),
):
    block = MoEBlock(demo)
    with tensor_dump(cfg, schedule(wait=0, warmup=0, active=1, repeat=1)) as d:
        with torch.no_grad():
            block(block.make_input())
        d.step()
