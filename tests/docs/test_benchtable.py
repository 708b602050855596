"""The benchmark tables of the documentation render what a benchmark's ``--json`` writes
(``benchmarks._common.write_json``), and a result without its date or load average is refused, naming the key."""

from __future__ import annotations

import json
from pathlib import Path
import sys

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

import benchtable  # noqa: E402

from benchmarks._common import write_json  # noqa: E402


def test_a_benchmark_json_renders(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    write_json(str(path), [{"workload": "P2", "ratio": 1.2345678, "files": {"tasks": 3}}, {"workload": "P5", "s": 0.1}])
    document = benchtable.load_result(path)
    assert benchtable.columns_of(document) == ["workload", "ratio", "files", "s"]
    assert benchtable.cell_text(1.2345678) == "1.235" and benchtable.cell_text({"tasks": 3}) == '{"tasks": 3}'
    caption = benchtable.caption(document)
    assert document["run"]["date"] in caption and document["machine"] in caption and "load average" in caption


def test_every_committed_result_loads() -> None:
    results = sorted((DOCS / "benchmarks").glob("*.json"))
    assert len(results) >= 5
    for path in results:
        document = benchtable.load_result(path)
        assert document["entries"], path.name


@pytest.mark.parametrize("key", ["machine", "run", "entries"])
def test_a_result_without_its_record_is_refused(tmp_path: Path, key: str) -> None:
    document = {
        "machine": "m",
        "run": {"date": "2026-12-06", "load_average_before": [1.0], "load_average_after": [1.0]},
    }
    document["entries"] = []
    del document[key]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(document))
    with pytest.raises(ValueError, match=repr(key)):
        benchtable.load_result(path)


def test_a_result_without_a_load_average_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"machine": "m", "run": {"date": "2026-12-06"}, "entries": []}))
    with pytest.raises(ValueError, match="load_average_before"):
        benchtable.load_result(path)
