"""Codec choice: compression ratio and two-thread throughput of candidate codecs on realistic activations.

    python -m benchmarks.codecs [--quick] [--json OUT]

Activations come from the demo MoE block (normalised hidden states ``h``, expert hidden activations
``ws`` after SiLU, router logits) in float32 and bfloat16, cut into 4 MiB chunks as the writer does and
encoded on two threads (numcodecs releases the GIL), as the store's thread pool does.
"""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
import time
from typing import Any

import numcodecs
import numpy as np
import torch

from benchmarks._common import machine, print_table, start_run, write_json
from megadump_zarr.codecs import DEFAULT_COMPRESSOR
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.tensor_arrays import tensor_to_numpy

CANDIDATES = {
    "zstd-1": lambda size: numcodecs.Zstd(level=1),
    "zstd-3": lambda size: numcodecs.Zstd(level=3),
    "blosc-lz4-shuffle": lambda size: numcodecs.Blosc("lz4", 5, numcodecs.Blosc.SHUFFLE, typesize=size),
    "blosc-lz4-bitshuffle": lambda size: numcodecs.Blosc("lz4", 5, numcodecs.Blosc.BITSHUFFLE, typesize=size),
    "blosc-zstd-1-shuffle": lambda size: numcodecs.Blosc("zstd", 1, numcodecs.Blosc.SHUFFLE, typesize=size),
    "blosc-zstd-1-bitshuffle": lambda size: numcodecs.Blosc("zstd", 1, numcodecs.Blosc.BITSHUFFLE, typesize=size),
}


def activations(tokens: int, d_model: int, dtype: torch.dtype) -> dict[str, np.ndarray]:
    """Intermediate tensors of one demo block step."""
    block = MoEBlock(DemoConfig(tokens=tokens, d_model=d_model, n_experts=8, tile_rows=1024, dtype=dtype))
    x = block.make_input()
    routing = block.route(x)
    out = block(x)
    ws = torch.nn.functional.silu(routing["xs"] @ block.w_up[0])
    return {
        "h": tensor_to_numpy(routing["h"]),
        "ws(silu)": tensor_to_numpy(ws.contiguous()),
        "logits": tensor_to_numpy(routing["logits"]),
        "out": tensor_to_numpy(out.detach()),
    }


def measure(codec_factory: Any, data: np.ndarray, chunk_bytes: int = 4 << 20) -> tuple[float, float]:
    """(ratio, MB/s) of encoding ``data`` in chunks on two threads."""
    raw = data.reshape(-1).view(np.uint8)
    chunks = [raw[i : i + chunk_bytes] for i in range(0, raw.size, chunk_bytes)]
    codec = codec_factory(data.dtype.itemsize)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(codec.encode, chunks[:2]))  # warm up
        start = time.perf_counter()
        encoded = list(pool.map(codec.encode, chunks))
        elapsed = time.perf_counter() - start
    return raw.size / sum(len(e) for e in encoded), raw.size / elapsed / 1e6


def main(argv: list[str] | None = None) -> int:
    """Print ratio and throughput per codec, tensor and dtype."""
    start_run()  # the JSON's run record (load average, CPU and wall seconds) counts from here
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    tokens, d_model = (4096, 256) if args.quick else (32768, 1024)
    print(f"machine: {machine()}; default compressor: {DEFAULT_COMPRESSOR}")
    rows = []
    for dtype in (torch.bfloat16, torch.float32):
        tensors = activations(tokens, d_model, dtype)
        for codec_name, factory in CANDIDATES.items():
            ratios, speeds = [], []
            for name, data in tensors.items():
                ratio, speed = measure(factory, data)
                ratios.append(ratio)
                speeds.append(speed)
                rows.append(
                    {"workload": f"{str(dtype)[6:]} {name}", "codec": codec_name, "ratio": ratio, "mb_s": speed}
                )
            rows.append(
                {
                    "workload": f"{str(dtype)[6:]} ALL (harmonic)",
                    "codec": codec_name,
                    "ratio": len(ratios) / sum(1 / r for r in ratios),
                    "mb_s": len(speeds) / sum(1 / s for s in speeds),
                }
            )
    print_table(
        [r for r in rows if "ALL" in r["workload"]],
        [("workload", "workload"), ("codec", "codec"), ("ratio", "ratio"), ("mb_s", "MB/s (2 threads)")],
    )
    write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
