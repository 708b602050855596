"""``mode="diff"`` keeps a payload whenever its bits differ from the baseline's, even when every statistic
is equal (two swapped elements), the baseline is tensor-mode (no stored digest), or the same bytes are
another tensor (reshaped, or int32 read as float32)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from megadump_zarr import TensorDumpConfig, open_dump, tensor_dump
from megadump_zarr.cli.main import main
from tests.dump._dump_helpers import MegaKernel, copy_rows_graph


def dump_copy(out: Path, a: torch.Tensor, mode: str, level: str = "L0", **fields) -> None:
    """One launch of ``b = a * 2`` (8x4 split in two tiles) dumped into ``out``."""
    graph = copy_rows_graph(a.shape[0], a.shape[1], 4, dtype=a.dtype)
    kernel = MegaKernel(graph, name="copy")
    selection = {"stages": "copy"} if level == "L1" else {}
    with tensor_dump(TensorDumpConfig(out, level=level, mode=mode, **selection, **fields)) as dumper:
        kernel.launch([a.clone(), torch.zeros_like(a)])
        dumper.step()


def base_tensor(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.arange(1, 33, dtype=dtype).reshape(8, 4)


def swapped(a: torch.Tensor) -> torch.Tensor:
    b = a.clone()
    b[0, 0], b[3, 3] = a[3, 3].clone(), a[0, 0].clone()  # within one tile: same min/max/mean/L2, other bits
    return b


def kept(out: Path) -> dict[str, bool]:
    records = open_dump(out).records()
    return {f"{row['name']}:{row['task_id']}": bool(row["payload"]) for _, row in records.iterrows()}


@pytest.mark.parametrize("level", ["L0", "L1"])
@pytest.mark.parametrize(
    "dtype, baseline_mode",
    [(torch.float32, "statistics"), (torch.float32, "tensor"), (torch.int64, "tensor"), (torch.int64, "statistics")],
)
def test_swapped_elements_keep_their_payload(tmp_path, capsys, level, dtype, baseline_mode):
    dump_copy(tmp_path / "base", base_tensor(dtype), baseline_mode, level)
    dump_copy(tmp_path / "diff", swapped(base_tensor(dtype)), "diff", level, baseline=tmp_path / "base")
    records = open_dump(tmp_path / "diff").records()
    stats = open_dump(tmp_path / "base").records()
    for name in ("min", "max", "mean", "l2norm"):  # the statistics cannot tell the runs apart ...
        assert sorted(records[name].tolist()) == sorted(stats[name].tolist())
    assert records["payload"].any()  # ... the bits do: some payload is kept
    first = records[records["payload"]].iloc[0]
    stored = open_dump(tmp_path / "diff").record_array(first["path"]).values
    assert stored.reshape(-1)[0] in (16, 32)  # the swapped element itself is on disk
    # an identical run keeps nothing: the digests prove every record equal
    dump_copy(tmp_path / "same", base_tensor(dtype), "diff", level, baseline=tmp_path / "base")
    assert not any(kept(tmp_path / "same").values())
    capsys.readouterr()  # compare sees the swap: a payload against a payload, or digests against statistics
    assert main(["compare", str(tmp_path / "diff"), str(tmp_path / "base")]) == 1
    assert "FAIL" in capsys.readouterr().out


@pytest.mark.parametrize("level", ["L0", "L1"])
def test_reshaped_baseline_keeps_the_payload(tmp_path, level):
    flat = base_tensor()
    dump_copy(tmp_path / "base", flat.reshape(4, 8).contiguous(), "statistics", level)
    dump_copy(tmp_path / "diff", flat, "diff", level, baseline=tmp_path / "base")
    records = open_dump(tmp_path / "diff").records()
    assert len(records) > 0 and records["payload"].all()  # same bytes, another shape: every payload kept


@pytest.mark.parametrize("level", ["L0", "L1"])
def test_reinterpreted_bytes_keep_the_payload(tmp_path, level):
    ints = base_tensor(torch.int32)
    dump_copy(tmp_path / "base", ints, "statistics", level)
    dump_copy(tmp_path / "diff", ints.view(torch.float32), "diff", level, baseline=tmp_path / "base")
    records = open_dump(tmp_path / "diff").records()
    inputs = records[records["name"] == "a"]
    assert len(inputs) > 0 and inputs["payload"].all()  # same input bytes as int32: kept as float32
    stored = open_dump(tmp_path / "diff").record_array(inputs.iloc[0]["path"]).values
    assert np.asarray(stored).dtype == np.float32
    assert np.asarray(stored).view(np.int32).reshape(-1)[0] == 1


# --------------------------------------------------------------------------- compare: statistics-only pairs
@pytest.mark.parametrize(
    "dtype, verdict", [(torch.float32, "differs_within_stats"), (torch.int64, "fail"), (torch.bool, "fail")]
)
def test_statistics_only_pair_with_other_digests_never_passes(tmp_path, capsys, dtype, verdict):
    a = base_tensor(dtype) if dtype != torch.bool else (base_tensor() % 2 == 0)
    dump_copy(tmp_path / "base", a, "statistics")
    dump_copy(tmp_path / "test", swapped(a), "statistics")
    capsys.readouterr()
    assert main(["compare", "--json", str(tmp_path / "test"), str(tmp_path / "base")]) == 1
    import json

    document = json.loads(capsys.readouterr().out)
    verdicts = {row["name"]: row["verdict"] for row in document["results"]}
    assert verdicts["a"] == verdict and document["verdict"] == "fail"
    assert "digest differs" in next(r["note"] for r in document["results"] if r["name"] == "a")
    accepted = main(["compare", "--accept-within-stats", str(tmp_path / "test"), str(tmp_path / "base")])
    out = capsys.readouterr().out
    if verdict == "differs_within_stats":
        assert accepted == 0 and "differs_within_stats accepted" in out
    else:
        assert accepted == 1 and "FAIL" in out  # an exact dtype's differing digest is a failure
    same = main(["compare", str(tmp_path / "base"), str(tmp_path / "base")])
    assert same == 0 and "PASS: all" in capsys.readouterr().out


def test_compare_help_names_the_flag(capsys):
    try:
        assert main(["compare", "--help"]) in (0, None)
    except SystemExit as exit_:
        assert exit_.code in (0, None)
    text = " ".join(capsys.readouterr().out.split())
    assert "--accept-within-stats exit 0 on differs_within_stats" in text
    assert "finite floats differs_within_stats when every statistic is within tolerance" in text
