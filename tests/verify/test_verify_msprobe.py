"""``megadump verify`` on a raw msprobe directory (read in place): it says msprobe stores no checksums, checks
what it can (tensor files present and safe, sizes and headers against ``dump.json``, every tensor decoding), names
a refused tensor file as a problem (exit 1, not an input error), and ``--deep`` compares the data with msprobe's
own statistics to the rounding msprobe computed them with (issue 23).

The directories are hand-made (no msprobe run): one call with one float32 input, its statistics computed the
way msprobe computes them (in the tensor's dtype).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from megadump_zarr import open_dump
from megadump_zarr.verify import MSPROBE_NOTE, verify_dump

SHAPE = (40, 25)


def _data() -> np.ndarray:
    return np.random.default_rng(1).normal(0.3, 1.0, SHAPE).astype(np.float32)


def _msprobe(root: Path, **leaf: object) -> Path:
    """An msprobe dump ``root/step0/rank0``: one input tensor ``x.npy`` with msprobe-style float32 statistics."""
    directory = root / "step0" / "rank0"
    (directory / "dump_tensor_data").mkdir(parents=True)
    data = _data()
    np.save(directory / "dump_tensor_data" / "x.npy", data)
    stats = {
        "Max": float(data.max()),
        "Min": float(data.min()),
        "Mean": float(np.mean(data, dtype=np.float32)),  # torch.mean of a float32 tensor: float32
        "Norm": float(np.linalg.norm(data)),  # float32 as well
    }
    entry = {"type": "torch.Tensor", "dtype": "torch.float32", "shape": list(SHAPE), "data_name": "x.npy"}
    document = {
        "task": "tensor",
        "level": "L1",
        "framework": "pytorch",
        "data": {"Functional.linear.0.forward": {"input_args": [{**entry, **stats, **leaf}]}},
    }
    (directory / "dump.json").write_text(json.dumps(document))
    return root


def test_a_whole_msprobe_dump_is_ok_without_checksums_and_says_so(tmp_path: Path, cli) -> None:
    root = _msprobe(tmp_path / "ms")
    result = cli("verify", root)
    assert result.code == 0, result.out + result.err
    lines = result.out.splitlines()
    assert f"note: {MSPROBE_NOTE}" in lines
    assert lines[-1].startswith("ok (msprobe dump: no checksums): 1 window(s) checked")
    assert "1 array(s) carry no checksum (no crc32c codec)" in result.out  # the window's own note
    assert (
        "stores no checksums" in MSPROBE_NOTE and "a changed byte inside a tensor file cannot be found" in MSPROBE_NOTE
    )
    document = cli("--json", "verify", root).json()
    assert (document["source"], document["checksums"], document["notes"]) == ("msprobe", False, [MSPROBE_NOTE])
    assert document["ok"] and document["chunks"] == 1 and document["dump_problems"] == []


def test_an_open_dump_of_an_msprobe_directory_is_still_msprobe(tmp_path: Path) -> None:
    report = verify_dump(open_dump(_msprobe(tmp_path / "ms")))
    assert report.ok and report.source == "msprobe" and report.notes == (MSPROBE_NOTE,)


def test_a_zarr_dump_is_not_reported_as_msprobe(tmp_path: Path, cli) -> None:
    out = tmp_path / "zarr"
    assert cli("convert", _msprobe(tmp_path / "ms"), out).code == 0
    document = cli("--json", "verify", out).json()
    assert (document["source"], document["checksums"], document["notes"]) == ("zarr", True, [])
    assert "no checksums" not in cli("verify", out).out


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda f: f.write_bytes(f.read_bytes()[:-100]), "holds only 3900 bytes of data"),
        (lambda f: f.unlink(), "does not exist"),
    ],
    ids=["truncated", "missing"],
)
def test_a_refused_tensor_file_is_a_problem_naming_it(tmp_path: Path, cli, damage, message) -> None:
    root = _msprobe(tmp_path / "ms")
    tensor = root / "step0" / "rank0" / "dump_tensor_data" / "x.npy"
    damage(tensor)
    result = cli("verify", root)
    assert result.code == 1, result.out + result.err  # a check failed, not bad input (exit 2)
    assert "error:" not in result.err and "Traceback" not in result.out + result.err
    lines = result.out.splitlines()
    assert lines[0] == f"{root}: 1 problem(s) (msprobe directory)"
    assert str(tensor) in lines[1] and message in lines[1]
    assert lines[-1].startswith("1 problem(s) (msprobe dump: no checksums): 0 window(s) checked")
    document = cli("--json", "verify", root).json()
    [problem] = document["dump_problems"]
    assert not document["ok"] and document["problems"] == 1 and message in problem["what"]


def test_deep_compares_msprobe_statistics_to_their_float32_rounding(tmp_path: Path, cli) -> None:
    data = _data()
    mean, norm = float(np.mean(data, dtype=np.float64)), float(np.sqrt(np.sum(data.astype(np.float64) ** 2)))
    assert abs(float(np.mean(data, dtype=np.float32)) - mean) > 1e-8 * abs(mean)  # beyond verify's own 1e-9
    assert abs(float(np.linalg.norm(data)) - norm) > 1e-8 * norm
    root = _msprobe(tmp_path / "ms")
    result = cli("verify", "--deep", root)
    assert result.code == 0, result.out
    assert "statistics recomputed" in result.out


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [("Max", 99.0, "stats.max"), ("Mean", 0.5, "stats.mean"), ("Norm", 1.0, "stats.l2norm")],
)
def test_deep_names_msprobe_statistics_the_data_do_not_give(tmp_path: Path, cli, field, value, named) -> None:
    root = _msprobe(tmp_path / "ms", **{field: value})
    result = cli("verify", "--deep", root)
    assert result.code == 1, result.out
    [line] = [line for line in result.out.splitlines() if named in line]
    assert line.startswith("  rank_0/window_0000/") and f"attributes.{named} is {value}" in line
    assert cli("verify", root).code == 0  # plain verify reads no statistics


def test_help_documents_msprobe_and_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    from megadump_zarr.cli.main import main

    try:
        code = main(["verify", "--help"])
    except SystemExit as exited:
        code = exited.code
    text = " ".join(capsys.readouterr().out.split())
    assert code == 0
    assert "A raw msprobe directory (read in place) stores no checksums" in text
    assert "Exit 0 all that could be checked is good (for msprobe: without checksums), 1 a problem" in text
    assert "2 not a dump root" in text
