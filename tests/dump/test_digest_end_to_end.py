"""Two rows of an int64 one-hot routing tensor swapped (4 elements differ, every statistic equal): statistics
against statistics, ``compare --bitwise`` of a payload against statistics, and ``mode="diff"`` all see it,
by the record digest."""

from __future__ import annotations

from pathlib import Path

import torch

from megadump_zarr import TensorDumpConfig, compare, open_dump, tensor_dump
from megadump_zarr.cli.main import main
from tests.dump._dump_helpers import MegaKernel, copy_rows_graph


def routing(swap: bool) -> torch.Tensor:
    """8 tokens routed to 4 experts (one-hot int64); ``swap``: tokens 0 and 1 exchange their experts."""
    experts = torch.tensor([1, 2, 0, 3, 3, 1, 0, 2])
    if swap:
        experts[[0, 1]] = experts[[1, 0]]
    return torch.nn.functional.one_hot(experts, 4).to(torch.int64)


def dump(out: Path, a: torch.Tensor, mode: str, **fields) -> None:
    kernel = MegaKernel(copy_rows_graph(8, 4, 4, dtype=torch.int64), name="copy")
    with tensor_dump(TensorDumpConfig(out, level="L0", mode=mode, **fields)) as dumper:
        kernel.launch([a.clone(), torch.zeros_like(a)])
        dumper.step()


def test_swapped_routing_rows_are_not_equal_anywhere(tmp_path, capsys):
    dump(tmp_path / "base", routing(False), "statistics")
    dump(tmp_path / "stats", routing(True), "statistics")
    dump(tmp_path / "tensor", routing(True), "tensor")
    base, stats = open_dump(tmp_path / "base").records(), open_dump(tmp_path / "stats").records()
    for name in ("min", "max", "mean", "l2norm", "nan_count", "inf_count"):  # the statistics are equal ...
        assert list(base[name]) == list(stats[name])
    assert list(base["digest"]) != list(stats["digest"])  # ... the digests are not

    result = compare(tmp_path / "stats", tmp_path / "base")
    verdicts = dict(zip(result["name"], result["verdict"]))
    assert verdicts["a"] == "fail" and verdicts["b"] == "fail"
    assert result["note"].str.contains("digest differs").all()

    bitwise = compare(tmp_path / "tensor", tmp_path / "base", bitwise=True)
    assert set(bitwise["verdict"]) == {"fail"}
    assert bitwise["note"].str.startswith("bitwise: statistics only in b; digest differs (0x").all()
    capsys.readouterr()
    assert main(["compare", "--bitwise", str(tmp_path / "tensor"), str(tmp_path / "base")]) == 1

    dump(tmp_path / "diff", routing(True), "diff", baseline=tmp_path / "base")
    kept = open_dump(tmp_path / "diff").records()
    assert kept["payload"].all()  # the differing payloads are kept, not dropped as "equal"
    stored = open_dump(tmp_path / "diff").record_array(kept[kept["name"] == "a"].iloc[0]["path"]).values
    assert (stored == routing(True).numpy()).all()
    assert set(compare(tmp_path / "diff", tmp_path / "base")["verdict"]) == {"fail"}
    dump(tmp_path / "same", routing(False), "diff", baseline=tmp_path / "base")
    assert not open_dump(tmp_path / "same").records()["payload"].any()  # equal digests: nothing kept
