"""One side of a comparison (analyse.side): each implementation of the Side protocol, each side opened once
per comparison (open_dump counted), and compare's record filters being read.select's (the one engine)."""

from __future__ import annotations

from pathlib import Path
import typing

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from megadump_zarr import TensorDumpConfig, tensor_dump
import megadump_zarr.read as read
from megadump_zarr.analyse import compare, first_nonfinite
from megadump_zarr.analyse.matching import execution_order
from megadump_zarr.analyse.side import (
    ArraySide,
    DumpSide,
    ReferenceSide,
    SideKind,
    open_dump_side,
    open_side,
)
from megadump_zarr.read.select import filter_mask, no_match_message, select_records
from tests._faults import dump_demo_step

STAGES = ["expert_up", "expert_down", "combine"]


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("side")
    dump_demo_step(base / "l0", "L0")
    dump_demo_step(base / "l1", "L1")
    dump_demo_step(base / "bad", "L1", fault=dict(stage="expert_down", owner=1, delta=0.5))
    from megadump_zarr.demo.model import MoEBlock

    block = MoEBlock()
    cfg = TensorDumpConfig(base / "stats", level="L1", kernel_names="moe_experts", stages=STAGES, mode="statistics")
    with tensor_dump(cfg) as dumper:
        block(block.make_input())
        dumper.step()
    return {"l0": base / "l0", "l1": base / "l1", "bad": base / "bad", "stats": base / "stats"}


# ---------------------------------------------------------------------------------------------------- open once
@pytest.fixture
def opened(monkeypatch) -> list[str]:
    """Every ``open_dump`` call (the root it opened), and every ``records()`` call (``records:<root>``)."""
    calls: list[str] = []
    real_open, real_records = read.open_dump, read.Dump.records

    def counting_open(url, *args, **kwargs):
        calls.append(str(url))
        return real_open(url, *args, **kwargs)

    def counting_records(self, *args, **kwargs):
        calls.append(f"records:{self.root}")
        return real_records(self, *args, **kwargs)

    monkeypatch.setattr(read, "open_dump", counting_open)
    monkeypatch.setattr(read.Dump, "records", counting_records)
    return calls


@pytest.mark.parametrize("options", [{}, {"fail_fast": True}, {"bitwise": True}, {"owner": 1, "stage": "expert_down"}])
def test_compare_opens_each_side_once_and_reads_its_records_once(roots, opened, options):
    result = compare(roots["bad"], roots["l1"], **options)
    assert len(result) and (result["verdict"] == "fail").any()
    a, b = str(roots["bad"]), str(roots["l1"])
    assert sorted(c for c in opened if not c.startswith("records:")) == sorted([a, b])
    assert opened.count(f"records:{a}") == 1 and opened.count(f"records:{b}") == 1


def test_dump_against_reference_and_first_nonfinite_open_the_dump_once(roots, opened):
    ys = read.open_dump(roots["l1"]).tensor("ys", stage="expert_down", io="output")
    opened.clear()
    result = compare(roots["bad"], {"ys": ys}, stage="expert_down", io="output")
    assert result["verdict"].tolist() == ["fail"]
    assert opened == [str(roots["bad"]), f"records:{roots['bad']}"]
    opened.clear()
    assert first_nonfinite(roots["bad"]) is None
    assert opened == [str(roots["bad"]), f"records:{roots['bad']}"]


def test_the_report_opens_each_side_once(roots, opened):
    from megadump_zarr.report import collect_comparison

    data = collect_comparison(roots["bad"], roots["l1"])
    assert data.summary["verdict"] == "fail"
    assert sorted(c for c in opened if not c.startswith("records:")) == sorted([str(roots["bad"]), str(roots["l1"])])


def test_a_side_is_opened_by_open_side_only(roots, opened):
    side = open_side(roots["l1"])
    assert opened == [str(roots["l1"])]
    assert open_side(side) is side and open_side(side.value).value is side.value
    assert compare(side, side.value)["verdict"].eq("pass").all()
    assert opened.count(str(roots["l1"])) == 1  # the side and its dump are reused, never reopened


# ---------------------------------------------------------------------------------------------------- the protocol
def test_each_implementation_has_the_protocol_members():
    kinds = set(typing.get_args(SideKind))
    sides = [DumpSide(_Fake()), ReferenceSide({"x": np.zeros(1)}), ArraySide(np.zeros(1))]
    assert [s.kind for s in sides] == ["dump", "reference", "array"] and {s.kind for s in sides} == kinds
    assert [s.type_name for s in sides] == ["_Fake", "dict", "ndarray"]
    with pytest.raises(TypeError, match="DumpSide.value must be a dump, dict has no records, record_array, tensor"):
        DumpSide({"records": 1})
    with pytest.raises(TypeError, match="ReferenceSide.value must be a mapping or an xarray.Dataset, got int"):
        ReferenceSide(3)


def test_open_side_chooses_the_side():
    assert isinstance(open_side(_Fake()), DumpSide)
    assert isinstance(open_side({"x": 1}), ReferenceSide)
    assert isinstance(open_side(xr.Dataset({"x": ("i", np.zeros(2))})), ReferenceSide)
    assert isinstance(open_side(np.zeros(3)), ArraySide) and isinstance(open_side([1, 2]), ArraySide)
    with pytest.raises(TypeError, match="first_nonfinite's dump must be a dump .* not dict"):
        open_dump_side({"x": 1}, "first_nonfinite's dump")
    with pytest.raises(TypeError, match="must be a dump .* not dict"):
        first_nonfinite({"x": 1})


def test_reference_side_names_and_tensors():
    mapping = ReferenceSide({"b": np.ones(2), "a": np.zeros(1)})
    assert mapping.names() == ["b", "a"] and mapping.get("a").tolist() == [0.0] and mapping.get("z") is None
    dataset = ReferenceSide(xr.Dataset({"q": ("i", np.zeros(2)), "p": ("j", np.ones(3))}, coords={"i": [5, 6]}))
    assert dataset.names() == ["q", "p"]  # data variables only, not the coordinate
    assert dataset.get("p").values.tolist() == [1.0, 1.0, 1.0] and dataset.get("i") is None


def test_dump_side_records_filters_and_orders(roots):
    side = open_side(roots["bad"])
    everything = side.records({})
    assert everything["path"].tolist() == execution_order(side.value.records())["path"].tolist()
    down = side.records({"stage": "expert_down", "io": "output", "owner": 1, "window": None})
    assert down[["stage", "io", "owner_id", "name"]].values.tolist() == [["expert_down", "output", 1, "ys"]]
    assert set(side.records({}, ["y*"])["name"]) == {"ys"}  # names= are --name patterns
    assert set(side.records({"task_id": [0, 1]})["task_id"]) == {0, 1}  # any records() column
    with pytest.raises(ValueError, match="unknown record filter 'colour'.*or a records\\(\\) column: rank"):
        side.records({"colour": "red"})


def test_dump_side_payload_lineage_and_digest(roots):
    tensor_side, stats_side = open_side(roots["l1"]), open_side(roots["stats"])
    stats_row = stats_side.records({"stage": "expert_down", "io": "output"}).iloc[0].to_dict()
    tensor_row = tensor_side.records({"stage": "expert_down", "io": "output"}).iloc[0].to_dict()
    assert not DumpSide.holds_payload(stats_row) and DumpSide.holds_payload(tensor_row)
    assert DumpSide.holds_payload({"name": "x"})  # no payload column: a tensor-mode table
    # a statistics-only record: its lineage from its row (no array document), or none from metadata
    from_row = stats_side.lineage(stats_row["path"], stats_row)
    assert from_row["capture_phase"] == stats_row["capture_phase"] is not None and from_row["ports"] is None
    assert stats_side.lineage(stats_row["path"]) == dict.fromkeys(from_row)
    # a record with a payload: its array attributes, whether the row is given or not
    lineage = tensor_side.lineage(tensor_row["path"], tensor_row)
    assert lineage == tensor_side.lineage(tensor_row["path"]) and lineage["capture_phase"] == "after"
    l0 = open_side(roots["l0"])
    last = l0.records({}).iloc[-1].to_dict()
    assert l0.lineage(last["path"], last) == {
        "role": "final_output",
        "capture_phase": "after",
        "producers": ("combine",),
        "consumers": (),
        "ports": (("combine", "output"),),
    }
    assert l0.lineage("rank_0/window_0000/not_a_record") == dict.fromkeys(lineage)  # unreadable: none
    # the host digest of the payload equals the device digest the statistics run stored
    assert tensor_side.payload_digest(tensor_row) == int(stats_row["digest"])
    assert stats_side.payload_digest(stats_row) is None  # no payload to digest
    assert tensor_side.unit_source() is tensor_side.value  # no dask cluster: the dump itself


# ---------------------------------------------------------------------------------------------------- one filter engine
def test_compare_selects_what_dump_tensor_and_the_cli_select(roots):
    """compare's record selection is read.select's: the same records as select_records for every filter
    (a stage path component and a task group name included: the task name was ignored before)."""
    frame = read.open_dump(roots["bad"]).records()
    for select in (
        {"owner": 1},
        {"core": "AIC1"},
        {"stage": "expert_down", "io": "input"},
        {"task": "task_000005"},
        {"task": 5},
        {"core_type": "aic", "name": ["ys", "w*"]},
        {"invocation": "0", "kernel": "moe_experts"},
    ):
        result = compare(roots["bad"], roots["l1"], **select)
        assert sorted(result["path"]) == sorted(select_records(frame, select)["path"]), select
        assert len(result) > 0, select
    assert compare(roots["bad"], roots["l1"], owner=99).empty
    assert no_match_message(frame, {"owner": 99}) == "no records with owner 99; owners: 0, 1, 2, 3"


@pytest.mark.parametrize(
    "patterns", [["ws"], ["w[0]"], ["x*"], ["a/b", "layer.?/up"], ["w[0]", "ws"], [], ["nothing"], ["[!w]*"]]
)
def test_name_filter_equals_fnmatch_row_by_row(patterns):
    import fnmatch

    names = pd.Series(["ws", "w[0]", "w0", "x*", "xs", "a/b", "layer.0/up", None, np.nan], dtype=object)
    frame = pd.DataFrame({"name": names})
    expected = [isinstance(n, str) and any(n == p or fnmatch.fnmatchcase(n, p) for p in patterns) for n in names]
    assert filter_mask(frame, "name", patterns).tolist() == expected


def test_plain_column_filters_need_columns_mode():
    frame = pd.DataFrame(
        {"name": ["a", "b", "c"], "payload": [True, False, True], "task_id": pd.array([1, None, 3], dtype="Int64")}
    )
    assert select_records(frame, {"payload": False}, columns=True)["name"].tolist() == ["b"]
    assert select_records(frame, {"task_id": [3, 7]}, columns=True)["name"].tolist() == ["c"]
    assert select_records(frame, {"task_id": None}, columns=True)["name"].tolist() == ["a", "b", "c"]
    with pytest.raises(ValueError, match="^unknown record filter 'payload'; filters: rank, .*, name$"):
        select_records(frame, {"payload": False})
    assert no_match_message(frame, {"task_id": 9}, columns=True) == "no records with task_id 9; task_id values: 1, 3"


class _Fake:
    """The three dump methods, nothing else."""

    def records(self) -> pd.DataFrame:
        return pd.DataFrame({"name": ["x"], "path": ["rank_0/window_0000/x"]})

    def record_array(self, path: str) -> np.ndarray:
        return np.zeros(1)

    def tensor(self, name: str, **select) -> np.ndarray:
        return np.zeros(1)
