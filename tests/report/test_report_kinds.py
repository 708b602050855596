"""Reports of every kind of dump: L0, statistics-only, mixed, and a dump in an object store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests._faults import dump_demo_step, inject_fault
from tests._moto import KEY, SECRET, moto_s3
from tests.report.test_report_file import _embedded


def _statistics_dump(root: Path, fault: bool) -> None:
    """One forward step of the demo block at L1 in statistics mode, optionally with expert 1's
    expert_down task wrong (+0.5 on what it writes)."""
    from megadump_zarr import TensorDumpConfig, tensor_dump
    from megadump_zarr.demo.model import DemoConfig, MoEBlock

    block = MoEBlock(DemoConfig())
    config = TensorDumpConfig(
        root, level="L1", kernel_names="moe_experts", stages=("expert_up", "expert_down"), mode="statistics"
    )
    with tensor_dump(config) as dumper:
        if fault:
            with inject_fault(block.expert_kernel, "expert_down", owner=1, delta=0.5):
                block(block.make_input())
        else:
            block(block.make_input())
        dumper.step()


def test_l0_report(cli: Any, tmp_path: Path) -> None:
    from megadump_zarr import analyse

    dump_demo_step(tmp_path / "faulty", "L0", fault={"stage": "expert_down", "owner": 1, "delta": 0.5})
    dump_demo_step(tmp_path / "clean", "L0")
    out = tmp_path / "l0.html"
    result = cli("report", tmp_path / "faulty", tmp_path / "clean", "-o", out, "--json")
    assert result.code == 1, result.err
    expected = analyse.root_cause(analyse.compare(tmp_path / "faulty", tmp_path / "clean"))
    assert result.json()["root_cause"]["path"] == expected["path"]
    page = out.read_text(encoding="utf-8")
    assert "No stage grid: these records have no L1 stage" in page  # L0 records: said, not drawn empty
    assert _embedded(page)["worst"], "failing L0 tensors get a difference heatmap"


def test_statistics_only_report(cli: Any, tmp_path: Path) -> None:
    pytest.importorskip("megadump_zarr.analyse.summary")
    _statistics_dump(tmp_path / "faulty", fault=True)
    _statistics_dump(tmp_path / "clean", fault=False)
    out = tmp_path / "stats.html"
    result = cli("report", tmp_path / "faulty", tmp_path / "clean", "-o", out, "--json")
    assert result.code == 1, result.err
    root = result.json()["root_cause"]
    assert (root["stage"], root["owner_id"], root["io"]) == ("expert_down", 1, "output")
    assert root["replay"] is None and root["replay_note"].startswith("replay not run: input 'ws' of task ")
    assert "statistics only" in root["replay_note"]
    page = out.read_text(encoding="utf-8")
    assert "replay not run: input &#x27;ws&#x27; of task" in page  # said in the root-cause box, in one line
    data = _embedded(page)
    assert data["worst"] == [], "statistics-only records have no tensor data to draw"
    assert data["rows"] and data["rows"][0]["verdict"] == "fail"


def test_single_dump_report_of_statistics_only_dump(cli: Any, tmp_path: Path) -> None:
    _statistics_dump(tmp_path / "stats", fault=False)
    out = tmp_path / "one.html"
    assert cli("report", tmp_path / "stats", "-o", out).code == 0
    data = _embedded(out.read_text(encoding="utf-8"))
    assert data["rows"] and all(r.get("min") is not None for r in data["rows"])


def test_report_of_dumps_in_s3(fault_pair: Any, cli: Any, tmp_path: Path) -> None:
    pytest.importorskip("s3fs")
    import s3fs

    faulty, clean, _ = fault_pair
    with moto_s3("dumps") as endpoint:
        fs = s3fs.S3FileSystem(key=KEY, secret=SECRET, client_kwargs={"endpoint_url": endpoint})
        for name, local in (("faulty", faulty), ("clean", clean)):
            for file in Path(local).rglob("*"):
                if file.is_file():
                    fs.pipe(f"dumps/{name}/{file.relative_to(local).as_posix()}", file.read_bytes())
        options = ["-S", f"endpoint_url={endpoint}", "-S", f"key={KEY}", "-S", f"secret={SECRET}"]
        out = tmp_path / "s3.html"
        result = cli("report", "s3://dumps/faulty", "s3://dumps/clean", "-o", out, "--json", *options)
        local = cli("report", faulty, clean, "-o", tmp_path / "local.html", "--json")
    assert result.code == local.code == 1, result.err
    assert result.json()["root_cause"]["path"] == local.json()["root_cause"]["path"]
    page = out.read_text(encoding="utf-8")
    assert "s3://dumps/faulty" in page
    assert "secret" not in page.lower() and endpoint not in page, "storage options never reach the report"
    s3_rows = [(r["path"], r["verdict"]) for r in _embedded(page)["rows"]]
    local_rows = [(r["path"], r["verdict"]) for r in _embedded((tmp_path / "local.html").read_text())["rows"]]
    assert s3_rows == local_rows


def test_single_report_says_what_truncated_statistics_cover(tmp_path):
    from megadump_zarr.report import collect_single
    from tests._truncated import write

    data = collect_single(write(tmp_path / "t"))
    assert "stats_scope" in data.columns and {row["stats_scope"] for row in data.rows} == {"prefix"}
