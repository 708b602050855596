"""error_map: verdict counts and worst errors per owner, core and task, on real dumps with one faulty task."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from megadump_zarr.analyse import compare, error_map
from megadump_zarr.analyse.errormap import error_map_columns
from megadump_zarr.analyse.verdict import VERDICTS
from tests._faults import dump_demo_step


@pytest.fixture(scope="module")
def faulty(tmp_path_factory) -> pd.DataFrame:
    base = tmp_path_factory.mktemp("errormap")
    dump_demo_step(base / "clean", "L1")
    fault = dump_demo_step(base / "bad", "L1", fault=dict(stage="expert_down", owner=2, delta=0.25))
    assert fault.calls == 1
    return compare(base / "bad", base / "clean")


def test_by_owner_points_at_the_faulty_expert(faulty):
    table = error_map(faulty, by="owner")
    assert list(table.columns) == list(error_map_columns("owner"))
    assert table.records.sum() == len(faulty)
    down = table[table.stage == "expert_down"].set_index("owner_id")
    assert list(down.index) == [0, 1, 2, 3]
    assert down.loc[2, "fail"] == 1 and down.loc[2, "failing"] == 1 and down.loc[2, "max_abs"] == pytest.approx(0.25)
    assert down.loc[2, "worst_name"] == "ys"
    assert (down.drop(2).fail == 0).all() and (down.drop(2).max_abs == 0).all()
    up = table[table.stage == "expert_up"]
    assert (up.failing == 0).all() and list(up.owner_id) == [0, 1, 2, 3]
    # groups in execution order: expert_up, expert_down, combine
    assert list(dict.fromkeys(table.stage)) == ["expert_up", "expert_down", "combine"]


def test_by_core_and_task(faulty):
    cores = error_map(faulty, by="core")
    assert list(cores.columns[:7]) == ["rank", "window", "invocation", "kernel", "stage", "core_type", "core_id"]
    assert set(cores.kernel) == {"moe_experts"}
    bad = cores[cores.fail > 0]
    assert set(bad.stage) == {"expert_down", "combine"}
    tasks = error_map(faulty, by="task")
    down = tasks[(tasks.stage == "expert_down") & (tasks.fail > 0)]
    assert down[["owner_id", "core_type"]].values.tolist() == [[2, "AIC"]]
    assert tasks.records.sum() == len(faulty)
    assert (tasks.records == tasks[list(VERDICTS)].sum(axis=1)).all()


def test_bad_by_and_empty_result():
    with pytest.raises(ValueError, match="by must be one of owner, core, task, got 'expert'"):
        error_map(pd.DataFrame({"verdict": []}), by="expert")
    empty = error_map(pd.DataFrame(columns=["verdict"]), by="core")
    assert empty.empty and list(empty.columns) == list(error_map_columns("core"))
    l0 = error_map(compare([1.0, 2.0], [1.0, 2.5]), by="owner")
    assert l0.records.tolist() == [1] and l0.fail.tolist() == [1] and math.isclose(l0.max_abs[0], 0.5)


def test_mapped_by_falls_back_to_cores_then_tasks():
    from megadump_zarr.analyse.errormap import mapped_by

    staged = pd.DataFrame(
        {
            "stage": ["s", "s"],
            "owner_id": [None, None],
            "core_type": ["AIV", "AIV"],
            "core_id": [0, 1],
            "task_id": [0, 1],
        }
    )
    assert mapped_by(staged, "owner") == "core" and mapped_by(staged, "core") == "core"
    no_cores = staged.assign(core_type=None, core_id=None)
    assert mapped_by(no_cores, "owner") == "task" and mapped_by(no_cores, "core") == "task"
    assert mapped_by(staged.assign(owner_id=[3, None]), "owner") == "owner"
    assert mapped_by(staged.assign(stage=None), "owner") == "owner"  # L0: nothing to fall back to
    with pytest.raises(ValueError, match="by must be one of owner, core, task, got 'expert'"):
        mapped_by(staged, "expert")
