"""Fuzzing the documents a reader trusts: every field of every ``zarr.json`` of a real dump, and of a saved
L1 plan, replaced by hostile values; ``open_dump``, ``records()``, ``record_array()``, ``tensor()``,
``verify()`` and the ``megadump`` CLI must end in a documented exception or exit status, never anything else.

Documented outcomes:

* library: success, ``ValueError`` (including ``DumpIntegrityError``), ``FileNotFoundError``/``OSError``;
* CLI (in-process ``megadump_zarr.cli.main.main``): exit 0, 1 (a failed check, e.g. ``verify`` finding a
  problem, or a damaged chunk) or 2 (bad input), never a traceback and never the catch-all
  ``internal error`` line (which would mean an exception no check anticipated).

The fast run uses a bounded number of examples (``make test``); ``pytest -m slow`` runs many more.
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
import io
import os
import json
from pathlib import Path
import shutil
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
import numpy as np
import torch
import pytest

from megadump_zarr.cli.main import main
from megadump_zarr.read import open_dump
from megadump_zarr.verify import verify_dump
from tests._packs import stored_rows

ALLOWED = (ValueError, FileNotFoundError, OSError)
FAST = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
SLOW = settings(
    max_examples=int(os.environ.get("MEGADUMP_FUZZ_EXAMPLES", "1500")),
    deadline=None,
    suppress_health_check=list(HealthCheck),
)

HOSTILE = [
    None,
    True,
    False,
    0,
    -1,
    1,
    1.5,
    float("nan"),
    2**31,
    2**62,
    2**63,
    2**70,
    -(2**70),
    "",
    "abc",
    "0",
    "\x00",
    "../../etc",
    "x" * 300,
    [],
    [None],
    [None, 16],
    [1.5, 16],
    [[1]],
    [2**62, 16],
    [2**40, 16],
    [0, 0],
    [-1, 4],
    [2**24, 16],
    [2**20 + 1, 4],  # issue 23.4: logical rows far beyond a stored prefix (bounded reads, or refused)
    [
        1,
        2,
        3,
        4,
        5,
        6,
        7,
        8,
        9,
        10,
        11,
        12,
        13,
        14,
        15,
        16,
        17,
        18,
        19,
        20,
        21,
        22,
        23,
        24,
        25,
        26,
        27,
        28,
        29,
        30,
        31,
        32,
        33,
    ],
    {},
    {"a": 1},
    {"name": "bogus"},
    {"name": "regular", "configuration": {"chunk_shape": [0]}},
]
_DELETE = object()


def _deep(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _paths(value: Any, prefix: tuple[Any, ...] = (), limit: int = 6) -> Iterator[tuple[Any, ...]]:
    """Every path to a value inside a JSON document (dict keys and list indices), up to ``limit`` deep."""
    if len(prefix) >= limit:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*prefix, key)
            yield from _paths(item, (*prefix, key), limit)
    elif isinstance(value, list):
        for index, item in enumerate(value[:4]):
            yield (*prefix, index)
            yield from _paths(item, (*prefix, index), limit)


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    target = doc
    for part in path[:-1]:
        target = target[part]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value


def _run_cli(*args: Any) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    text = err.getvalue()
    assert code in (0, 1, 2), (args, code, text)
    assert "Traceback" not in text and "internal error" not in text, (args, text)
    if code == 2:
        lines = [line for line in text.splitlines() if line.strip()]
        assert lines and lines[-1].startswith("error: "), (args, text)
    return code, text


def _library(root: Path) -> None:
    """Drive the read API over a (possibly damaged) dump; only documented exceptions may escape."""
    try:
        dump = open_dump(root)
        records = dump.records(include_incomplete=True)
        dump.windows()
        for path in list(records["path"])[:3]:
            try:
                dump.record_array(path).values
            except ALLOWED:
                pass
        names = [n for n in records["name"] if isinstance(n, str)][:2]
        for name in names:
            try:
                dump.tensor(name).values
            except ALLOWED:
                pass
        verify_dump(dump)
    except ALLOWED:
        pass


@pytest.fixture(scope="module")
def dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A demo run (L0 and L1 roots) and a working copy of it whose files each example mutates and restores."""
    from megadump_zarr.demo.run import run_demo

    base = tmp_path_factory.mktemp("fuzz-docs")
    summary = run_demo(base / "pristine", steps=2)
    work = base / "work"
    shutil.copytree(summary.root, work)
    documents = []
    for level in ("l0", "l1"):
        root = work / level
        for doc_path in sorted(root.rglob("zarr.json")):
            if any(part.startswith(".") for part in doc_path.relative_to(root).parts):
                continue
            doc = json.loads(doc_path.read_text())
            paths = list(_paths(doc))
            if paths:
                documents.append((root, doc_path, paths))
    names = {level: str(open_dump(work / level).records()["name"].iloc[0]) for level in ("l0", "l1")}
    return {"work": work, "documents": documents, "names": names}


def _document_choice(dumps: dict[str, Any]) -> st.SearchStrategy[tuple[Path, Path, tuple[Any, ...]]]:
    # the window documents (which carry every consolidated entry) are picked as often as all others together
    windows = [d for d in dumps["documents"] if d[1].parent.name.startswith("window_")]
    others = [d for d in dumps["documents"] if d not in windows]

    def pick(entry: tuple[Path, Path, list[tuple[Any, ...]]]) -> st.SearchStrategy[Any]:
        root, doc_path, paths = entry
        return st.tuples(st.just(root), st.just(doc_path), st.sampled_from(paths))

    return st.one_of(st.sampled_from(windows).flatmap(pick), st.sampled_from(others).flatmap(pick))


VALUES = st.one_of(
    st.sampled_from(HOSTILE),
    st.just(_DELETE),
    st.integers(-(2**80), 2**80),
    st.builds(_deep, st.integers(10, 3000)),
    st.lists(st.integers(-3, 2**41), max_size=4),
    st.text(max_size=20),
)


def _mutate_and_run(dumps: dict[str, Any], choice: tuple[Path, Path, tuple[Any, ...]], value: Any, cli: bool) -> None:
    root, doc_path, path = choice
    original = doc_path.read_bytes()
    try:
        doc = json.loads(original)
        _set(doc, path, value)
        try:
            doc_path.write_text(json.dumps(doc))
        except (ValueError, RecursionError):  # the value cannot be written as JSON at all: write it raw
            doc_path.write_bytes(original[: len(original) // 2])
        _library(root)
        if cli:
            name = dumps["names"][root.name]
            for args in (("ls", root), ("stats", root), ("show", root, name), ("verify", root)):
                _run_cli(*args)
    finally:
        doc_path.write_bytes(original)


def test_document_mutations(dumps: dict[str, Any]) -> None:
    @FAST
    @given(st.data())
    def run(data: st.DataObject) -> None:
        choice = data.draw(_document_choice(dumps))
        value = data.draw(VALUES)
        _mutate_and_run(dumps, choice, value, cli=data.draw(st.booleans()))

    run()


@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_document_mutations_many(dumps: dict[str, Any]) -> None:
    @SLOW
    @given(st.data())
    def run(data: st.DataObject) -> None:
        _mutate_and_run(dumps, data.draw(_document_choice(dumps)), data.draw(VALUES), cli=data.draw(st.booleans()))

    run()


def test_pristine_work_copy_is_whole(dumps: dict[str, Any]) -> None:
    """The fuzz restores every file: the working copy still verifies clean and reads like the pristine run."""
    for level in ("l0", "l1"):
        assert verify_dump(open_dump(dumps["work"] / level), deep=True).ok
    assert _run_cli("verify", dumps["work"] / "l1")[0] == 0


# ---------------------------------------------------------------------------------------------- saved plans
@pytest.fixture(scope="module")
def salvage(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tests.cli._helpers import make_salvage_inputs

    base = tmp_path_factory.mktemp("fuzz-plans")
    with pytest.MonkeyPatch.context() as monkeypatch:
        inputs = make_salvage_inputs(base, monkeypatch)
    doc = json.loads(inputs.plan.read_text())
    return {"inputs": inputs, "doc": doc, "paths": list(_paths(doc, limit=5)), "base": base}


def _plan_run(salvage: dict[str, Any], path: tuple[Any, ...], value: Any, counter: list[int]) -> None:
    doc = json.loads(json.dumps(salvage["doc"]))
    _set(doc, path, value)
    plan = salvage["base"] / "mutated.json"
    try:
        plan.write_text(json.dumps(doc))
    except (ValueError, RecursionError):
        return
    counter[0] += 1
    out = salvage["base"] / f"out-{counter[0]}"
    try:
        _run_cli("decode-buffer", salvage["inputs"].buffer, plan, "--out", out, "--quiet")
    finally:
        shutil.rmtree(out, ignore_errors=True)
        plan.unlink(missing_ok=True)


def test_plan_mutations(salvage: dict[str, Any]) -> None:
    counter = [0]

    @settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(salvage["paths"]), VALUES)
    def run(path: tuple[Any, ...], value: Any) -> None:
        _plan_run(salvage, path, value, counter)

    run()


def test_plan_deeply_nested_and_garbage(salvage: dict[str, Any]) -> None:
    base = salvage["base"]
    for name, raw in (
        ("nested", "[" * 100000 + "]" * 100000),
        ("garbage", "\x00\xff{"),
        ("empty", ""),
        ("list", "[1, 2]"),
        ("string", '"plan"'),
    ):
        plan = base / f"{name}.json"
        plan.write_text(raw, encoding="latin-1")
        code, text = _run_cli("decode-buffer", salvage["inputs"].buffer, plan, "--out", base / f"o-{name}")
        assert code == 2 and (str(plan) in text or "plan" in text), text
        assert not (base / f"o-{name}").exists() or not any((base / f"o-{name}").rglob("window_*"))


# ---------------------------------------------------------------------------------------------- chunk bytes
def test_any_flipped_chunk_byte_is_detected(dumps: dict[str, Any], packed: dict[str, Any]) -> None:
    """Every chunk carries crc32c: flipping any one bit of any chunk of a committed window is refused on read
    (DumpIntegrityError naming that chunk) and named by verify, never read as a different number."""
    from megadump_zarr.read.errors import DumpIntegrityError
    from megadump_zarr.verify import verify_dump

    from megadump_zarr.store.packs import index_nbytes
    from tests._layout import ChunkSpan, record_chunk

    # (root, record path, logical chunk key, stored bytes, the shard when the bytes are a pack shard's index)
    chunks: list[tuple[Path, str, str, ChunkSpan, str | None]] = []
    for root in (dumps["work"] / "l0", dumps["work"] / "l1", packed["root"]):  # the demo (tasks layout), and packs
        dump = open_dump(root)
        records = dump.records()
        for path in records["path"]:
            if (root / path / "zarr.json").is_file():  # a schema-6 array: every chunk file
                for chunk in sorted((root / path).iterdir()):
                    if chunk.name != "zarr.json":
                        span = ChunkSpan(chunk, 0, chunk.stat().st_size)
                        chunks.append((root, path, f"{path}/{chunk.name}", span, None))
            else:  # a packed record: its row's inner chunk of the pack's shard, named as the record's one chunk
                ndim = len(records.loc[records["path"] == path, "stored_shape"].iloc[0])
                key = f"{path}/c{'.0' * ndim}"
                span = record_chunk(root, path)
                chunks.append((root, path, key, span, None))
                rows = json.loads((span.file.parent / "zarr.json").read_text())["chunk_grid"]["configuration"][
                    "chunk_shape"
                ][0]
                size, nbytes = span.file.stat().st_size, index_nbytes(rows)  # inner chunks of one row each
                index = ChunkSpan(span.file, size - nbytes, nbytes)
                chunks.append((root, path, key, index, span.file.relative_to(root).as_posix()))
    assert any(shard for *_, shard in chunks), "no packed record: layout='packs' packs the L1 records"

    @settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from(chunks), st.integers(0, 2**31), st.integers(0, 7))
    def run(choice: tuple[Path, str, str, ChunkSpan, str | None], where: int, bit: int) -> None:
        root, path, key, span, shard = choice
        original = span.read()
        span.flip(where % len(original), 1 << bit)
        try:
            with pytest.raises(DumpIntegrityError) as info:
                open_dump(root).record_array(path).values
            assert info.value.key == key
            problems = verify_dump(root).problems
            if shard is None:
                assert [p.key for p in problems] == [key]
            else:  # a damaged shard index: every row of the shard is refused, each naming the shard
                assert key in [p.key for p in problems] and all(f"shard {shard} " in p.what for p in problems)
                assert "shard index checksum mismatch" in str(info.value) and f"shard {shard} " in str(info.value)
        finally:
            span.write(original)

    run()


# ---------------------------------------------------------------------------------------- pack documents
# Schema 7 keeps what schema 6 spread over task groups, row-coordinate chunks and record documents in the
# documents of a task-record pack (store/packs.py): the ``task`` array's ``attributes.tasks`` (group name,
# task attributes, row-coordinate ranges of every row), each record array's ``attributes.records``, shape and
# codecs. A mutation of them must end as one clear error (a documented exception naming the window, or a
# ``verify`` problem) or a correct read (every logical array, record and row coordinate, byte for byte the
# pristine one, and the same records); never a traceback, never a silent wrong answer.
PACK_WINDOW = "rank_0/window_0000"


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An L1 window whose packs hold several rows (unpermute: 4 tasks of one signature)."""
    from megadump_zarr import TensorDumpConfig, schedule, tensor_dump
    from megadump_zarr.demo.model import DemoConfig, MoEBlock
    from tests.reliability._helpers import train_step

    root = tmp_path_factory.mktemp("fuzz-packs") / "l1"
    # the routing (which tiles share a shape, so which tasks are packed) follows torch's global generator: seed it,
    # so the fuzz sees the same packs whatever ran before it (seed 1 found a pack array whose deleted node_type
    # dropped its records silently)
    torch.manual_seed(1)
    block = MoEBlock(DemoConfig(tokens=32, d_model=8))
    config = TensorDumpConfig(
        root, level="L1", kernel_names="moe_experts", stages=("expert_up", "unpermute"), layout="packs"
    )
    with tensor_dump(config, schedule(wait=0, warmup=0, active=1)) as dumper:
        train_step(block)
        dumper.step()
    window = root / PACK_WINDOW
    packs = sorted(p.relative_to(window).as_posix() for p in window.glob("*/stages/*/pack_*"))
    assert all(len(stored_rows(window, p)[0]) > 1 for p in packs)  # never a one-row pack (pack_groups.MIN_PACK_TASKS)
    documents = []  # (node path relative to the window, paths of values inside its document)
    for pack in packs:
        for doc_path in sorted((window / pack).rglob("zarr.json")):
            rel = doc_path.parent.relative_to(window).as_posix()
            documents.append((rel, list(_paths(json.loads(doc_path.read_text()), limit=7))))
    return {"root": root, "documents": documents, "pristine": _logical_read(root), "packs": packs}


def _logical_read(root: Path) -> tuple[dict[str, tuple[str, tuple[int, ...], bytes]], list[list[str]]]:
    """Every record of the window through the reader (``record_array``: values and row coordinates), and the
    records table's identity columns."""
    dump = open_dump(root)
    records = dump.records()
    arrays = {}
    for path in records["path"]:
        record = dump.record_array(path)
        for name, values in [("", record.values), *((dim, record[dim].values) for dim in record.coords)]:
            values = np.asarray(values)
            arrays[f"{path}:{name}"] = (str(values.dtype), values.shape, values.tobytes())
    identity = records[["path", "name", "io", "stage", "task_id"]].astype(str).values.tolist()
    return arrays, identity


def _copies(window: Path, rel: str, where: str) -> list[tuple[Path, tuple[str, ...]]]:
    """The stored copies of node ``rel``'s document: (file, path of the copy inside it). ``where``: ``"every"``
    copy, the ``"window"`` document's consolidated entry only, or the pack's ``"own"`` documents only (the
    node's zarr.json and the pack group's consolidated entry)."""
    copies = [(window / rel / "zarr.json", ())]
    parts = rel.split("/")
    for depth in range(len(parts)):
        holder = window.joinpath(*parts[:depth]) / "zarr.json"
        if holder.is_file() and "/".join(parts[depth:]) in (
            (json.loads(holder.read_text()).get("consolidated_metadata") or {}).get("metadata") or {}
        ):
            copies.append((holder, ("consolidated_metadata", "metadata", "/".join(parts[depth:]))))
    if where == "window":
        return [c for c in copies if c[0] == window / "zarr.json"]
    if where == "own":
        return [c for c in copies if c[0] != window / "zarr.json"]
    return copies


def _mutate_pack(root: Path, rel: str, field: tuple[Any, ...], value: Any, where: str) -> dict[Path, bytes]:
    """Set ``field`` of node ``rel``'s document to ``value`` (a callable edits the holder in place) in the chosen
    copies; returns the original bytes of every file changed. A value JSON cannot hold truncates the file."""
    window = root / PACK_WINDOW
    originals: dict[Path, bytes] = {}
    for holder, inside in _copies(window, rel, where):
        raw = originals.setdefault(holder, holder.read_bytes())
        doc = json.loads(holder.read_bytes())
        node = doc
        for part in inside:
            node = node[part]
        with contextlib.suppress(KeyError, IndexError, TypeError):
            if callable(value):
                target = node
                for part in field[:-1]:
                    target = target[part]
                value(target, field[-1])
            else:
                _set(node, field, value)
        try:
            holder.write_text(json.dumps(doc))
        except (ValueError, RecursionError):
            holder.write_bytes(raw[: len(raw) // 2])
    return originals


def _pack_outcome(root: Path, pristine: Any, *, values_checked: bool = True, cli: bool = False) -> str:
    """Read everything; returns ``"error"``, ``"verify"`` or ``"read"`` and asserts the outcome is clear/correct."""
    try:
        read = _logical_read(root)
        report = verify_dump(open_dump(root))
    except ALLOWED as error:
        message = str(error)
        assert message and ("window_0000" in message or str(root) in message), repr(error)
        outcome = "error"
    else:
        if not report.ok:
            assert all(p.key and p.what for p in report.problems), report.problems
            outcome = "verify"
        else:
            outcome = "read"
            if values_checked:
                arrays, identity = read
                changed = sorted(k for k in set(arrays) | set(pristine[0]) if arrays.get(k) != pristine[0].get(k))
                assert not changed, f"silent wrong answer: {changed[:4]} read differently and verify is ok"
                assert identity == pristine[1], "silent wrong answer: the records table changed and verify is ok"
    if cli:
        code = _run_cli("verify", root)[0]
        assert code == {"read": 0, "verify": 1}.get(outcome, code)
        _run_cli("ls", root)
    return outcome


def _swap_rows(holder: Any, key: Any) -> None:
    holder[key][0], holder[key][1] = holder[key][1], holder[key][0]


def _unpermute(packed: dict[str, Any]) -> str:
    return next(p for p in packed["packs"] if "/unpermute/" in p)


def _pack_case(packed: dict[str, Any], rel: str, field: tuple[Any, ...], value: Any, where: str) -> str:
    originals = _mutate_pack(packed["root"], rel, field, value, where)
    try:
        return _pack_outcome(packed["root"], packed["pristine"], cli=True)
    finally:
        for holder, raw in originals.items():
            holder.write_bytes(raw)


_R = ("attributes", "recordAttributes")  # what every row of a record array holds alike


@pytest.mark.parametrize("where", ["every", "window", "own"])
@pytest.mark.parametrize(
    ("node", "field", "value", "expected"),
    [
        ("task_id", ("shape",), [3], "error"),
        ("task_id", ("attributes", "note"), "edited", "error"),  # its document digest in the window inventory
        ("token_start", ("shape",), [3], "error"),
        ("token_stop", ("chunk_grid", "configuration", "chunk_shape"), [2], "error"),
        ("input_00_ys_offset", ("data_type",), "float64", "error"),
        ("input_00_ys_stats", ("shape",), [4, 5], "error"),
        ("statistic", ("data_type", "configuration", "length_bytes"), 16, "error"),
        ("core_type", ("codecs",), [], "error"),
        ("", ("attributes", "taskCount"), 7, "error"),
        ("", ("attributes", "taskAttributes"), lambda h, k: h.pop(k), "error"),
        ("input_00_ys", ("shape",), [5, 8, 8], "error"),
        ("input_00_ys", ("codecs", 0, "configuration", "chunk_shape", 0), 2, "error"),
        ("input_00_ys", ("codecs", 0, "configuration", "index_location"), "start", "error"),
        ("input_00_ys", ("data_type",), "int32", "error"),  # same itemsize, decodes: the inventory's digest refuses it
        # the record array's document digest in the window inventory: readers and verify refuse any edit of it
        ("input_00_ys", (*_R, "storedShape"), [1], "error"),
        ("input_00_ys", (*_R, "storedDtype"), "int32", "error"),
        ("input_00_ys", (*_R, "note"), "edited", "error"),
        ("input_00_ys", _R, lambda h, k: h.pop(k), "error"),  # a record array without it is no array of a pack
    ],
)
def test_pack_document_mutations(
    packed: dict[str, Any], node: str, field: tuple[Any, ...], value: Any, expected: str, where: str
) -> None:
    """Mutations of a multi-row pack's documents the reader must refuse (or verify name), or read correctly. The
    reader serves a committed window from the window document alone: a pack's own documents edited behind its
    back read as the pristine window, and verify names them (they disagree with the window's copy)."""
    rel = f"{_unpermute(packed)}/{node}" if node else _unpermute(packed)
    outcome = _pack_case(packed, rel, field, value, where)
    # verify compares the stored pack documents with the window's copy: an edit of one side only is named
    assert outcome == ("verify" if where == "own" or (where == "window" and expected == "read") else expected)


def _row_edit(name: str, edit: Any) -> Any:
    """An edit of the pack array ``name``'s values (a list along ``task``), written back consistently."""
    return name, edit


def _first(change: Any) -> Any:
    return lambda values: [change(values[0]), *values[1:]]


@pytest.mark.parametrize(
    ("name", "edit"),
    [
        _row_edit("task_id", lambda v: [v[1], *v[1:]]),  # another row's task: its group twice
        _row_edit("task_id", _first(lambda _: -1)),  # no task
        _row_edit("core_id", _first(lambda _: -7)),  # no core
        _row_edit("token_stop", _first(lambda _: 0)),  # reversed bounds
        _row_edit("token_stop", _first(lambda x: x + 1)),  # 9 rows for a record of 8
        _row_edit("token_stop", _first(lambda _: 10**12)),  # unbounded rows: never allocated
        _row_edit("token_start", lambda v: [v[1], v[0], *v[2:]]),  # swapped starts: lengths and offsets disagree
        _row_edit("output_00_ws_offset", lambda v: [v[1], *v[1:]]),  # the rows sourceOffsetBytes says: another's
    ],
    ids=["twice", "no-task", "no-core", "reversed", "longer", "unbounded", "swapped", "offset"],
)
def test_pack_row_edits(packed: dict[str, Any], name: str, edit: Any) -> None:
    """Row values edited consistently (the array's chunk, its crc32c and every copy of its document): what the
    readers check of each row (ids naming one task group each, row bounds against the records' length and
    ``sourceOffsetBytes``) refuses them."""
    from tests._packs import stored_columns, write_column

    window = packed["root"] / PACK_WINDOW
    pack = _unpermute(packed)
    files = [*window.rglob("zarr.json"), window / "inventory.json", *(window / pack).rglob("c*")]
    originals = {p: p.read_bytes() for p in files if p.is_file()}
    try:
        write_column(window, pack, name, edit(stored_columns(window, pack)[name].tolist()))
        assert _pack_outcome(packed["root"], packed["pristine"], cli=True) == "error"
    finally:
        for holder, raw in originals.items():
            holder.write_bytes(raw)


# Not checked: what every row holds alike (taskAttributes, recordAttributes: the tasks layout kept those in
# unchecksummed group and array documents too) may read as a different records table.
_UNCHECKED = ("taskAttributes", "recordAttributes")


def _pack_choice(packed: dict[str, Any]) -> st.SearchStrategy[tuple[str, tuple[Any, ...]]]:
    def pick(entry: tuple[str, list[tuple[Any, ...]]]) -> st.SearchStrategy[Any]:
        return st.tuples(st.just(entry[0]), st.sampled_from(entry[1]))

    return st.sampled_from([d for d in packed["documents"] if d[1]]).flatmap(pick)


def test_pack_document_fuzz(packed: dict[str, Any]) -> None:
    """Hostile values anywhere in a pack's documents (every copy, the window's only or the pack's own only)."""
    root = packed["root"]

    @settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(
        _pack_choice(packed),
        st.one_of(VALUES, st.just(_swap_rows)),
        st.sampled_from(["every", "window", "own"]),
        st.booleans(),
    )
    def run(choice: tuple[str, tuple[Any, ...]], value: Any, where: str, cli: bool) -> None:
        rel, field = choice
        gap = len(field) > 1 and field[0] == "attributes" and field[1] in _UNCHECKED
        originals = _mutate_pack(root, rel, field, value, where)
        try:
            _pack_outcome(root, packed["pristine"], values_checked=not gap, cli=cli)
        finally:
            for holder, raw in originals.items():
                holder.write_bytes(raw)

    run()
    assert _pack_outcome(root, packed["pristine"]) == "read"  # every file restored


@pytest.mark.parametrize("where", ["window", "own"])
def test_stored_pack_documents_that_disagree_with_the_window_are_named(packed: dict[str, Any], where: str) -> None:
    """verify compares the stored pack documents (what plain zarr reads) with the window document the reader's view
    is built from, as schema 6 compared every node's document with its consolidated entry."""
    root = packed["root"]
    rel = f"{_unpermute(packed)}/input_00_ys"
    field = (*_R, "note")
    originals = _mutate_pack(root, rel, field, "edited behind the window's back", where)
    try:
        problems = verify_dump(open_dump(root)).problems
        assert problems and all("pack_" in p.key or "differs" in p.what for p in problems), problems
    finally:
        for holder, raw in originals.items():
            holder.write_bytes(raw)


# Issue 23.4: document mutations verify used to call ok; each is a verify problem naming the document and
# field, and no reader fails with an internal error on it.
SCHEMA_MUTATIONS = [
    ("window", ("node_type",), "array", "node_type 'array' is not 'group'"),
    ("window", ("zarr_format",), 2, "zarr_format 2 is not 3"),
    ("invocation", ("attributes", "direction"), "sideways", "attributes.direction 'sideways' is not one of"),
    ("invocation", ("attributes", "level"), "L0", "attributes.level 'L0' disagrees with the window's 'L1'"),
    ("invocation", ("attributes", "taskCount"), 99, "attributes.taskCount 99 disagrees with the"),
]


@pytest.mark.parametrize(("node", "field", "value", "expected"), SCHEMA_MUTATIONS)
def test_schema_mutations_are_verify_problems(
    dumps: dict[str, Any], node: str, field: tuple[str, ...], value: Any, expected: str
) -> None:
    root = dumps["work"] / "l1"
    window = root / "rank_0" / "window_0000"
    invocation = sorted(p for p in window.iterdir() if p.name.startswith("invocation_"))[0]
    targets = [window / "zarr.json"] if node == "window" else [window / "zarr.json", invocation / "zarr.json"]
    originals = {path: path.read_bytes() for path in targets}
    try:
        for path in targets:
            doc = json.loads(originals[path])
            if node == "invocation" and path.parent == window:  # the consolidated copy in the window document
                doc = doc["consolidated_metadata"]["metadata"][invocation.name]
                full = json.loads(originals[path])
                _set(full["consolidated_metadata"]["metadata"][invocation.name], field, value)
                path.write_text(json.dumps(full))
                continue
            _set(doc, field, value)
            path.write_text(json.dumps(doc))
        report = verify_dump(open_dump(root))
        assert any(expected in p.what for p in report.problems), [p.what for p in report.problems]
        code, text = _run_cli("verify", root)
        assert code == 1, text  # its table (stdout) names the problem, as report.problems does
        for args in (("ls", root), ("info", root), ("stats", root)):
            _run_cli(*args)
    finally:
        for path, data in originals.items():
            path.write_bytes(data)
