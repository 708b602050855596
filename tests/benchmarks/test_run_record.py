"""Every benchmark's JSON carries its run record (date, nproc, load average before/after, CPU and wall
seconds), and the compare benchmark reports its floor, its CPU seconds and its serial twin."""

from __future__ import annotations

from datetime import datetime, timezone
import json
import os
from pathlib import Path
import time

from benchmarks import _common, compare

BENCHMARKS = Path(_common.__file__).parent


def test_write_json_carries_the_run_record(tmp_path):
    _common.start_run()
    before = datetime.now(timezone.utc).replace(microsecond=0)
    spin = time.process_time() + 0.2
    while time.process_time() < spin:  # 0.2 CPU seconds of this process
        pass
    out = tmp_path / "figures.json"
    _common.write_json(str(out), [{"workload": "w", "seconds": 1.5}])
    doc = json.loads(out.read_text())
    assert doc["entries"] == [{"workload": "w", "seconds": 1.5}]
    run = doc["run"]
    assert set(run) == {
        "date",
        "nproc",
        "cpu_count",
        "load_average_before",
        "load_average_after",
        "wall_s",
        "cpu_s",
        "cpu_self_s",
        "cpu_children_s",
        "max_rss_mib",
    }
    assert abs((datetime.fromisoformat(run["date"]) - before).total_seconds()) <= 2
    assert run["nproc"] == len(os.sched_getaffinity(0)) and run["cpu_count"] == os.cpu_count()
    assert len(run["load_average_before"]) == len(run["load_average_after"]) == 3
    assert all(x >= 0 for x in run["load_average_before"] + run["load_average_after"])
    assert run["cpu_s"] >= 0.19 and run["cpu_s"] == run["cpu_self_s"] + run["cpu_children_s"]
    assert run["wall_s"] >= 0.19 and run["max_rss_mib"] > 10


def test_no_json_path_writes_nothing(tmp_path):
    _common.write_json(None, [{"workload": "w"}])
    _common.write_json("", [{"workload": "w"}])
    assert list(tmp_path.iterdir()) == []


def test_every_benchmark_that_writes_json_starts_its_run_record():
    writers = [
        p
        for p in BENCHMARKS.glob("*.py")
        if p.name != "_common.py" and "json" in p.read_text() and "--json" in p.read_text()
    ]
    started = {
        "codecs",
        "compare",
        "device_check",
        "distributed",
        "export",
        "peer_compare",
        "read",
        "report",
        "statistics",
        "upload",
    }
    assert {p.stem for p in writers} >= started
    for path in writers:  # write_json adds the run record (measured from import time unless main starts it)
        text = path.read_text()
        assert "write_json(" in text, f"{path.name} writes its JSON without benchmarks._common.write_json"
        if path.stem in started:
            assert "start_run()" in text.split("def main(", 1)[1], f"{path.name}: main() does not call start_run()"


def test_compare_quick_reports_floor_cpu_serial_and_memory(tmp_path, capsys):
    out = tmp_path / "compare.json"
    row = compare.main(["--quick", "--repeat", "1", "--json", str(out), "--root", str(tmp_path)])
    doc = json.loads(out.read_text())
    assert doc["entries"] == [json.loads(json.dumps(row))]
    assert doc["run"]["cpu_s"] > 0 and len(doc["run"]["load_average_after"]) == 3
    assert row["workload"] == "compare 2 x 32 MiB float32 L0 (20 records)"
    for key in ("read_both_s", "compare_s", "compare_serial_s", "read_cpu_s", "compare_cpu_s", "compare_serial_cpu_s"):
        assert row[key] > 0, key
    assert row["ratio"] == row["compare_s"] / row["read_both_s"]
    assert row["compare_mib_s_per_side"] == 32 / row["compare_s"]
    assert 0 < row["peak_traced_chunks"] < 8 * row["threads"]  # a few chunks per lane, never whole tensors
    assert len(row["load_average_before"]) == 3 and row["cores"] == os.cpu_count()
    text = capsys.readouterr().out
    assert "read both s (floor)" in text and "compare CPU s" in text and "load before" in text
    assert list(tmp_path.glob("megadump-bench-*")) == []  # the dumps are removed
