"""Two ranks in two processes (torch.distributed, gloo) dump into one root; it opens as one Dump."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from megadump_zarr import compare, open_dump

CHILD = textwrap.dedent("""
    import sys
    import torch.distributed as dist
    from megadump_zarr import TensorDumpConfig, tensor_dump
    from megadump_zarr.demo.model import DemoConfig, MoEBlock

    root, store, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    block = MoEBlock(DemoConfig(seed=rank))            # the kernels report torch.distributed's rank
    with tensor_dump(TensorDumpConfig(root, level="L0", kernel_names="moe_experts")):
        block(block.make_input())
    dist.barrier()
    dist.destroy_process_group()
""")


def test_two_gloo_ranks_open_as_one_dump(tmp_path):
    root, store = tmp_path / "dump", tmp_path / "rendezvous"
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(root), str(store), str(rank)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    for child in children:
        output, _ = child.communicate(timeout=180)
        assert child.returncode == 0, output
    dump = open_dump(root)
    records = dump.records()
    assert sorted(set(records["rank"])) == [0, 1]
    assert list(dump.windows()["status"]) == ["complete", "complete"]
    per_rank = records.groupby("rank")["name"].apply(sorted)
    assert per_rank[0] == per_rank[1]  # same kernel, same tensors on both ranks
    x0, x1 = (dump.tensor("x", rank=r).values for r in (0, 1))
    assert x0.shape == x1.shape and not (x0 == x1).all()  # different seeds: different data per rank
    result = compare(dump, open_dump(root))
    assert set(result["rank"]) == {0, 1} and (result["verdict"] == "pass").all()
