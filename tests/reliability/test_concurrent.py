"""Several processes exporting into one root at once: four ranks side by side, and two processes racing
for the same window (exactly one wins, the other gets FileExistsError, the winner's data is intact)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import xarray as xr

from tests.reliability._helpers import assert_confined  # noqa: I001

from benchmarks.reliability import kill_context, verify_root
from megadump_zarr.read import open_dump
from tests.reliability._children import rank_child


def _run(processes: list, timeout: float = 180) -> None:
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout)
    hung = [p for p in processes if p.is_alive()]
    for process in hung:
        process.kill()
        process.join()
    assert not hung, "a process did not finish"
    assert [p.exitcode for p in processes] == [0] * len(processes)


def _log(path: Path) -> tuple[dict[str, str], list[str], list[str]]:
    committed, lost, other = {}, [], []
    for line in path.read_text().splitlines():
        kind, _, rest = line.partition(" ")
        if kind == "COMMITTED":
            window, digest = rest.split()
            committed[window] = digest
        elif kind == "LOST":
            lost.append(json.loads(rest))
        else:
            other.append(line)
    return committed, lost, other


@pytest.mark.timeout(240)
@pytest.mark.parametrize("level", ["L0", "L1"])
def test_four_ranks_export_into_one_root_at_once(tmp_path, level):
    root = tmp_path / "dump"
    context = kill_context()
    ranks, windows = 4, 3
    barrier = context.Barrier(ranks)
    logs = [tmp_path / f"rank_{r}.log" for r in range(ranks)]
    _run(
        [
            context.Process(target=rank_child, args=(str(root), str(logs[r]), r, windows, level, barrier))
            for r in range(ranks)
        ]
    )
    committed: dict[str, str] = {}
    for log in logs:
        mine, lost, other = _log(log)
        assert lost == [] and "DONE" in other
        assert len(mine) == windows
        committed.update(mine)
    result = verify_root(root, committed)
    assert result.problems == [], result.problems[:5]
    assert result.complete == result.committed == ranks * windows
    dump = open_dump(root)
    table = dump.windows()
    assert set(table["status"]) == {"complete"} and len(table) == ranks * windows
    assert sorted(set(table["rank"])) == list(range(ranks))
    records = dump.records()
    assert sorted(set(records["rank"])) == list(range(ranks))
    assert all(set(records[records["rank"] == r]["window"]) == set(range(windows)) for r in range(ranks))
    for r in range(ranks):  # every rank's data reads back through the public reader
        first = records[records["rank"] == r]["path"].iloc[0]
        assert dump.record_array(first).values.size > 0
        group = records[records["rank"] == r]["group"].iloc[-1]
        xr.open_zarr(str(root / group)).load()
    assert assert_confined(root) > 0


@pytest.mark.timeout(240)
@pytest.mark.parametrize("trial, level", [(0, "L0"), (1, "L1"), (2, "L0")])
def test_two_processes_race_for_the_same_window(tmp_path, trial, level):
    root = tmp_path / "dump"
    context = kill_context()
    barrier = context.Barrier(2)
    logs = [tmp_path / f"racer_{i}.log" for i in range(2)]
    # both claim rank 0, window 0 right after the barrier
    _run(
        [
            context.Process(target=rank_child, args=(str(root), str(logs[i]), 0, 1, level, barrier, 100 * (i + 1)))
            for i in range(2)
        ]
    )
    outcomes = [_log(log) for log in logs]
    winners = [i for i, (committed, _, _) in enumerate(outcomes) if committed]
    losers = [i for i, (_, lost, _) in enumerate(outcomes) if lost]
    assert len(winners) == 1 and len(losers) == 1 and winners != losers, outcomes
    message = outcomes[losers[0]][1][0]
    window = root / "rank_0" / "window_0000"
    assert message == f"Tensor dump window already exists: {window}"
    committed = outcomes[winners[0]][0]
    assert list(committed) == [str(window)]
    result = verify_root(root, committed)  # the winner's data, exactly as it handed it to the store
    assert result.problems == [] and result.committed == 1 and result.complete == 1
    assert list(open_dump(root).windows()["status"]) == ["complete"]
