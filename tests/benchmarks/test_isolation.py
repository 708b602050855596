"""The export benchmark's isolation: a fresh process per timed run, outputs kept until timing ends (or removed
only past the keep budget), a fresh directory per run, CPU seconds of the run's own process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from benchmarks import _isolation, export


def test_timed_run_refuses_an_existing_output_and_reports_its_own_cpu(tmp_path):
    (tmp_path / "taken").mkdir()
    with pytest.raises(FileExistsError, match="taken"):
        _isolation.timed_run(lambda root: None, tmp_path / "taken")

    def spin(root: Path) -> None:
        root.mkdir()
        total = 0
        for i in range(2_000_000):
            total += i
        (root / "out").write_text(str(total))

    result = _isolation.timed_run(spin, tmp_path / "fresh", settle_timeout=0.5)
    assert set(result) == {"wall_s", "cpu_s", "peak_extra_rss", "settle_s", "settled", "pid"}
    assert 0 < result["cpu_s"] <= result["wall_s"] * 2 + 0.05
    assert (tmp_path / "fresh" / "out").read_text() == str(sum(range(2_000_000)))


def test_outputs_stay_until_the_budget_is_passed(tmp_path):
    keeper = _isolation.Retained(tmp_path, budget=100, settle_timeout=0.5)
    first = keeper.fresh("run")
    first.mkdir()
    keeper.keep(first, 60)
    assert keeper.fresh("run") == tmp_path / "run.1"  # never a directory written before
    keeper.make_room(40)  # 100 fits: nothing removed
    assert first.exists() and keeper.early_clears == 0
    protected = keeper.fresh("template")
    protected.mkdir()
    keeper.keep(protected, 10)
    keeper.make_room(40, protect=(protected,))  # 110 > 100: removed, synced, settled
    assert not first.exists() and protected.exists() and keeper.early_clears == 1
    keeper.clear()
    assert not protected.exists()


def test_each_contender_runs_in_its_own_process(tmp_path):
    spec = {"count": 8, "payload_bytes": 4096, "dtype": "float32", "launches": 1, "settle_timeout": 0.5}
    pids = set()
    for key in ("seed", "ours"):
        root = tmp_path / key
        result = _isolation.run_isolated("benchmarks.export", {**spec, "contender": key, "root": str(root)})
        assert result["wall_s"] > 0 and result["cpu_s"] > 0
        pids.add(result["pid"])
    assert len(pids) == 2 and os.getpid() not in pids
    assert (tmp_path / "seed" / "rank_0" / "window_0000" / "manifest.json").is_file()
    assert (tmp_path / "ours" / "rank_0" / "window_0000" / "zarr.json").is_file()


def test_the_benchmark_keeps_every_run_until_its_timing_ends(tmp_path, monkeypatch):
    roots: list[str] = []
    real = export.run_isolated

    def watch(module, spec):
        assert all(Path(r).exists() for r in roots), "an earlier run's output was deleted during timing"
        roots.append(spec["root"])
        return real(module, spec)

    monkeypatch.setattr(export, "run_isolated", watch)
    with _isolation.retained(str(tmp_path), budget=1 << 30) as keeper:
        row = export.run_workload("P2 tiny", 8, 4096, "float32", 1, keeper, variants=False, settle_timeout=0.5)
    assert [Path(r).name for r in roots] == ["P2_tiny_seed_0", "P2_tiny_ours_0", "P2_tiny_ours_packs_0"]
    assert row["unsettled_runs"] >= 0 and row["packs_vs_seed"] > 0
    assert list(tmp_path.iterdir()) == []  # all removed at the end
