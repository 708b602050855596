"""Pack format 4: each row's varying task and record attributes live in ``row_fields`` (float64 along ``task``),
not in JSON lists copied into three documents (issue 21). The rows read back exactly as the writer had them,
the documents hold no per-row list, and a damaged, missing or foreign ``row_fields`` chunk is named."""

from __future__ import annotations

import json
import math
from pathlib import Path
import shutil
import struct

from hypothesis import given, settings
from hypothesis import strategies as st
import numpy as np
import pytest

from megadump_zarr import open_dump
from megadump_zarr.layout.write_model import WindowWrite
from megadump_zarr.read.errors import DumpIntegrityError
from megadump_zarr.store.pack_fields import (
    FIELDS_ARRAY,
    FieldsChunkError,
    decode_rows,
    decode_table,
    encode_rows,
    encode_table,
)
from megadump_zarr.store.writer import WindowWriter
from megadump_zarr.verify import verify_dump
from tests._packs import edit_document, edit_rows, stored_rows
from tests.store.test_packs_writer import INV, _write, mixed_invocation

WINDOW = "rank_0/window_0000"
PACK = f"{INV}/stages/up/pack_0000"


def _roundtrip(rows: list) -> list:
    columns: list[list[float]] = []
    spec = json.loads(json.dumps(encode_rows(rows, columns)))  # as stored: through JSON
    raw = encode_table(columns, len(rows))
    table = decode_table(raw, len(rows), len(columns), "k", f"{struct.unpack('<I', raw[-4:])[0]:08x}")
    return decode_rows(spec, table, len(rows), "spec")


_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63),  # past 2**53: kept as JSON, never rounded
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.from_regex(r"task_0{0,3}[0-9]{1,7}(_worker_00[0-9])?", fullmatch=True),
)
_VALUES = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from("abcd"), inner, max_size=3)),
    max_leaves=8,
)


@st.composite
def _rows(draw):
    """Rows that share a shape and vary in some leaves (what the writer's tasks and records look like), or not."""
    count = draw(st.integers(1, 6))
    base = draw(st.dictionaries(st.sampled_from(["group", "attrs", "stats", "coords", "n"]), _VALUES, max_size=5))
    rows = []
    for _ in range(count):
        row = json.loads(json.dumps(base))
        for key in list(row):
            if draw(st.booleans()):
                row[key] = draw(_VALUES)
        rows.append(row)
    return rows


def _text(rows: list) -> str:
    return json.dumps(rows)  # NaN as NaN, -0.0 as -0.0, key order kept: text equality is exact equality


@settings(max_examples=300, deadline=None)
@given(rows=_rows())
def test_rows_read_back_exactly_as_written(rows):
    assert _text(_roundtrip(rows)) == _text(rows)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.one_of(st.none(), st.integers(-(2**60), 2**60), st.floats()), min_size=1, max_size=8))
def test_a_column_of_mixed_numbers_reads_back_exactly(values):
    rows = [{"v": v} for v in values]
    assert _text(_roundtrip(rows)) == _text(rows)


def test_varying_numbers_are_columns_and_the_shared_part_is_stored_once():
    rows = [
        {"group": f"task_{t:06d}", "attrs": {"taskId": t, "stage": "up", "w": None if t % 2 else t}, "m": -0.5 * t}
        for t in range(4)
    ]
    columns: list[list[float]] = []
    spec = encode_rows(rows, columns)
    assert spec["template"] == {"group": None, "attrs": {"taskId": None, "stage": "up", "w": None}, "m": None}
    assert spec["columns"] == [
        {"path": ["group"], "column": 0, "kind": "int", "format": ["task_", 6, ""]},
        {"path": ["attrs", "taskId"], "column": 1, "kind": "int"},
        {"path": ["attrs", "w"], "column": 2, "kind": "int", "nullable": True},
        {"path": ["m"], "column": 3, "kind": "float"},
    ]
    assert columns[2][1] != columns[2][1] and columns[2][2] == 2.0  # null as NaN


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"template": {}, "columns": [{"path": ["x"], "column": 0, "kind": "int"}]}, "is not a place in the template"),
        ({"template": {"x": None}, "columns": [{"path": ["x"], "column": 5, "kind": "int"}]}, "is not one of"),
        ({"template": {"x": None}, "columns": [{"path": ["x"], "column": 0, "kind": "str"}]}, "kind 'str'"),
        ({"template": {"x": None}, "columns": [{"path": ["x"], "values": [1]}]}, "a list of 2 entries"),
        ({"template": {"x": None}, "columns": [{"path": "x", "column": 0, "kind": "int"}]}, "not a list of keys"),
        (
            {
                "template": {"x": None},
                "columns": [{"path": ["x"], "column": 0, "kind": "int", "format": ["t", -1, ""]}],
            },
            "is not \\[prefix, width, suffix\\]",
        ),
        (
            {
                "template": {"x": {"y": 0}},
                "columns": [{"path": ["x"], "values": [1, 2]}, {"path": ["x", "y"], "column": 0, "kind": "int"}],
            },
            "lies below a value another column sets",
        ),
        ({"columns": []}, "must be an object with 'template'"),
        ([], "must be an object with 'template'"),
    ],
)
def test_a_malformed_spec_is_named(spec, message):
    with pytest.raises(ValueError, match=message):
        decode_rows(spec, np.array([[1.0], [2.0]]), 2, "row_fields/zarr.json: attributes.megadumpRowFields.tasks")


@settings(max_examples=200, deadline=None)
@given(spec=_VALUES, table=st.lists(st.floats(), min_size=2, max_size=2))
def test_any_spec_decodes_or_is_named(spec, table):
    """A document mutation never escapes as anything but ValueError."""
    for candidate in (spec, {"template": spec, "columns": spec}, {"template": {"a": None}, "columns": [spec]}):
        try:
            decode_rows(candidate, np.array(table).reshape(2, 1), 2, "where")
        except ValueError:
            pass


# --------------------------------------------------------------------------- the writer's documents


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    return _write(tmp_path_factory.mktemp("fields") / "packed", True).parents[1]


def test_documents_hold_no_per_row_list(packed):
    window = packed / WINDOW
    task = json.loads((window / PACK / "task_id" / "zarr.json").read_bytes())
    assert task["attributes"] == {}
    record = json.loads((window / PACK / "input_00_x" / "zarr.json").read_bytes())
    assert set(record["attributes"]) == {"coordinates", "shardCrc32c"}
    assert record["attributes"]["coordinates"].split() == [
        "task_id",
        "owner_id",
        "core_id",
        "global_token",
        FIELDS_ARRAY,
    ]
    fields = json.loads((window / PACK / FIELDS_ARRAY / "zarr.json").read_bytes())
    assert fields["data_type"] == "float64" and fields["dimension_names"] == ["task", "field"]
    assert fields["shape"][0] == 5 and fields["shape"][1] == len(fields["attributes"]["fields"])
    assert "tasks.attrs.taskId" in fields["attributes"]["fields"]
    assert "input_00_x.stats.max" in fields["attributes"]["fields"]
    window_doc = (window / "zarr.json").read_text()
    assert '"tasks":[' not in window_doc.replace(" ", "") and '"records":[' not in window_doc.replace(" ", "")


def test_rows_are_the_tasks_layouts_attributes(packed, tmp_path):
    plain = _write(tmp_path / "plain", False)
    tasks, records = stored_rows(packed / WINDOW, PACK)
    for row, entry in enumerate(tasks):
        group = json.loads((plain / "invocation_000000_forward/stages/up" / entry["group"] / "zarr.json").read_bytes())
        assert entry["attrs"] == group["attributes"]
        for name, rows in records.items():
            doc = json.loads((plain / INV / "stages/up" / entry["group"] / name / "zarr.json").read_bytes())
            wanted = {k: v for k, v in doc["attributes"].items() if k != "chunkCrc32c"}
            assert json.dumps(rows[row]) == json.dumps(wanted)  # stats included: stored values, exact


def _copy(packed: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(packed, tmp_path / "copy"))


def test_a_damaged_row_fields_chunk_is_named(packed, tmp_path):
    root = _copy(packed, tmp_path)
    chunk = root / WINDOW / PACK / FIELDS_ARRAY / "c.0.0"
    raw = bytearray(chunk.read_bytes())
    raw[3] ^= 0x10
    chunk.write_bytes(bytes(raw))
    key = f"{WINDOW}/{PACK}/{FIELDS_ARRAY}/c.0.0"
    with pytest.raises(DumpIntegrityError, match=f"^malformed task-record pack: {key}: checksum mismatch") as info:
        open_dump(root).records()
    assert info.value.key == key
    problems = verify_dump(open_dump(root)).problems
    assert [p.key for p in problems] == [key] and "checksum mismatch" in problems[0].what


def test_a_missing_row_fields_chunk_is_named(packed, tmp_path):
    root = _copy(packed, tmp_path)
    (root / WINDOW / PACK / FIELDS_ARRAY / "c.0.0").unlink()
    with pytest.raises(DumpIntegrityError, match="row_fields/c.0.0: the pack's row_fields chunk is missing"):
        open_dump(root).records()


def test_a_row_fields_chunk_from_another_pack_is_named(packed, tmp_path):
    """Rows swapped consistently elsewhere (valid crc32c, right size): the document's tableCrc32c tells."""
    root = _copy(packed, tmp_path)
    other = _copy(packed, tmp_path / "other")

    def swap(tasks, records):
        tasks[0], tasks[1] = tasks[1], tasks[0]

    edit_rows(other / WINDOW, PACK, swap)
    chunk = f"{WINDOW}/{PACK}/{FIELDS_ARRAY}/c.0.0"
    (root / chunk).write_bytes((other / chunk).read_bytes())
    with pytest.raises(DumpIntegrityError, match="a chunk written for another pack"):
        open_dump(root).records()


def test_no_silent_number_loss_in_a_big_integer(tmp_path):
    with pytest.raises(FieldsChunkError):
        decode_table(b"", 1, 1, "k", "00000000")
    rows = [{"offset": 2**53 + 1}, {"offset": 3}]
    assert _roundtrip(rows) == rows and isinstance(_roundtrip(rows)[0]["offset"], int)
    assert math.isnan(_roundtrip([{"v": math.nan}, {"v": 1.0}])[0]["v"])


def test_an_aborted_window_keeps_the_rows_of_the_record_arrays_written(tmp_path):
    """A shard fails: the record arrays written before it stay readable, rows and statistics included."""
    writer = WindowWriter(tmp_path, durable=False, pack=True)
    real = writer.backend.put

    def put(key, data, **kwargs):
        if "/pack_0000/input_00_x/c." in key:
            raise OSError(28, "No space left on device")
        return real(key, data, **kwargs)

    writer.backend.put = put
    with pytest.raises(OSError, match="No space left"):
        writer.write_window(WindowWrite(0, 0, {"schemaVersion": 8}, [mixed_invocation()]))
    writer.close()
    dump = open_dump(tmp_path)
    assert list(dump.windows()["status"]) == ["aborted"]
    records = dump.records(include_incomplete=True)
    packed = records[records["pack_array"].fillna("").str.contains("/stages/up/pack_0000/")]
    assert sorted(set(packed["name"])) == ["y"] and len(packed) == 5
    assert packed["max"].notna().all()


def test_records_read_each_row_fields_chunk_once_and_the_window_document_once(packed):
    """records() reads a pack's row_fields chunk below the integrity checks, itself checking it: through them,
    each chunk made the store read and expand its window again (P5: 0.53 s instead of 0.14 s)."""
    from zarr.storage import LocalStore

    from tests.verify.test_pack_reads import Counting

    store = Counting(LocalStore(str(packed), read_only=True))
    records = open_dump(store).records()
    chunks = {key: n for key, n in store.reads.items() if f"/{FIELDS_ARRAY}/" in key}
    packs = {a.rpartition("/")[0] for a in records["pack_array"].dropna()}
    assert chunks == {f"{pack}/{FIELDS_ARRAY}/c.0.0": 1 for pack in packs} and len(packs) >= 2
    assert store.reads[f"{WINDOW}/zarr.json"] == 1
    assert not [key for key in store.reads if "/c." in key and f"/{FIELDS_ARRAY}/" not in key]  # no other chunk


def test_a_row_fields_shape_that_disagrees_with_the_task_ids_is_named(packed, tmp_path):
    root = _copy(packed, tmp_path)
    edit_document(root / WINDOW, PACK, FIELDS_ARRAY, lambda node: node["shape"].__setitem__(0, 4))
    with pytest.raises(
        DumpIntegrityError, match=r"row_fields/zarr\.json: shape \[4, \d+\] does not hold the rows of task_id"
    ):
        open_dump(root).records()


def test_a_row_fields_without_columns_is_refused_not_expanded(packed, tmp_path):
    """With no column, no stored byte would bound the row count a document claims (never a hang or an OOM)."""
    root = _copy(packed, tmp_path)
    edit_document(root / WINDOW, PACK, FIELDS_ARRAY, lambda node: node["shape"].__setitem__(1, 0))
    with pytest.raises(
        DumpIntegrityError, match=r"row_fields/zarr\.json: shape \[5, 0\] holds no column for its 5 rows"
    ):
        open_dump(root).records()


def test_a_row_coordinate_of_no_record_is_refused_not_computed(packed, tmp_path):
    """A row bound naming a dimension none of the records has: nothing stored bounds its length, so it is refused
    before any reader (verify computes every row coordinate) would build ``arange`` of it."""
    root = _copy(packed, tmp_path)

    def bogus(tasks, records):
        tasks[0]["coords"]["bogus"] = [0, 10**12]

    edit_rows(root / WINDOW, PACK, bogus)
    with pytest.raises(DumpIntegrityError, match=r"coords\.bogus is the first dimension of none of its records"):
        open_dump(root).records()
    problems = verify_dump(open_dump(root)).problems
    assert problems and all("first dimension of none" in p.what for p in problems)


@settings(max_examples=300, deadline=None)
@given(rows=_rows())
def test_the_text_built_rows_are_the_set_ones(rows):
    """decode_rows builds the rows as one JSON text where it can (fast) and by setting each value otherwise: the
    two give the same rows, value for value and key order included."""
    from megadump_zarr.store.pack_fields import _column_values, _rows_by_setting, _rows_by_text

    columns: list[list[float]] = []
    spec = json.loads(json.dumps(encode_rows(rows, columns)))
    table = np.array(columns, dtype="<f8").reshape(len(columns), len(rows)).T if columns else np.zeros((len(rows), 0))
    parts = [(c["path"], _column_values(c, table, len(rows), "w")) for c in spec["columns"]]
    fast = _rows_by_text(spec["template"], parts, len(rows))
    slow = _rows_by_setting(spec["template"], parts, len(rows), "w")
    assert _text(slow) == _text(rows)
    assert fast is None or _text(fast) == _text(slow)


def test_a_truncated_records_row_bounds_are_held_to_its_length(packed, tmp_path):
    """A row marked truncated skips the sourceOffsetBytes check, never the length: nothing else bounds it."""
    root = _copy(packed, tmp_path)

    def hostile(tasks, records):
        for rows in records.values():
            rows[0]["truncated"] = True
        dim = next(iter(tasks[0]["coords"]))
        tasks[0]["coords"][dim] = [0, 10**12]

    edit_rows(root / WINDOW, PACK, hostile)
    with pytest.raises(DumpIntegrityError, match=r"\[0, 1000000000000\] holds 1000000000000 rows, its record"):
        open_dump(root).records()
