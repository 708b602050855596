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
import pytest
import zarr

from megadump_zarr.cli.main import main
from megadump_zarr.read import open_dump

ALLOWED = (ValueError, FileNotFoundError, OSError)
FAST = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large])
SLOW = settings(max_examples=int(os.environ.get("MEGADUMP_FUZZ_EXAMPLES", "1500")), deadline=None,
                suppress_health_check=list(HealthCheck))

HOSTILE = [
    None, True, False, 0, -1, 1, 1.5, float("nan"), 2**31, 2**62, 2**63, 2**70, -2**70, "", "abc", "0", "\x00",
    "../../etc", "x" * 300, [], [None], [None, 16], [1.5, 16], [[1]], [2**62, 16], [2**40, 16], [0, 0], [-1, 4],
    [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30,
     31, 32, 33], {}, {"a": 1}, {"name": "bogus"}, {"name": "regular", "configuration": {"chunk_shape": [0]}},
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
        dump.verify()
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


VALUES = st.one_of(st.sampled_from(HOSTILE), st.just(_DELETE), st.integers(-2**80, 2**80),
                   st.builds(_deep, st.integers(10, 3000)),
                   st.lists(st.integers(-3, 2**41), max_size=4), st.text(max_size=20))


def _mutate_and_run(dumps: dict[str, Any], choice: tuple[Path, Path, tuple[Any, ...]], value: Any,
                    cli: bool) -> None:
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
        assert open_dump(dumps["work"] / level).verify(deep=True).ok
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
    for name, raw in (("nested", "[" * 100000 + "]" * 100000), ("garbage", "\x00\xff{"), ("empty", ""),
                      ("list", "[1, 2]"), ("string", '"plan"')):
        plan = base / f"{name}.json"
        plan.write_text(raw, encoding="latin-1")
        code, text = _run_cli("decode-buffer", salvage["inputs"].buffer, plan, "--out", base / f"o-{name}")
        assert code == 2 and (str(plan) in text or "plan" in text), text
        assert not (base / f"o-{name}").exists() or not any((base / f"o-{name}").rglob("window_*"))


# ---------------------------------------------------------------------------------------------- chunk bytes
def test_any_flipped_chunk_byte_is_detected(dumps: dict[str, Any]) -> None:
    """Every chunk carries crc32c: flipping any one bit of any chunk of a committed window is refused on read
    (DumpIntegrityError naming that chunk) and named by verify, never read as a different number."""
    from megadump_zarr.read.errors import DumpIntegrityError
    from megadump_zarr.verify import verify_dump

    from megadump_zarr.store.packs import index_nbytes
    from tests._layout import ChunkSpan, record_chunk

    # (root, record path, logical chunk key, stored bytes, the shard when the bytes are a pack shard's index)
    chunks: list[tuple[Path, str, str, ChunkSpan, str | None]] = []
    for level in ("l0", "l1"):
        root = dumps["work"] / level
        dump = open_dump(root)
        records = dump.records()
        for path in records["path"]:
            if (root / path / "zarr.json").is_file():  # a schema-6 array: every chunk file
                for chunk in sorted((root / path).iterdir()):
                    if chunk.name != "zarr.json":
                        span = ChunkSpan(chunk, 0, chunk.stat().st_size)
                        chunks.append((root, path, f"{path}/{chunk.name}", span, None))
            else:  # a packed record: its inner chunk of the pack's shard, served as the record's one chunk
                array = zarr.open_array(dump.store, path=path, mode="r")
                key = f"{path}/{array.metadata.encode_chunk_key((0,) * array.ndim)}"
                span = record_chunk(root, path)
                chunks.append((root, path, key, span, None))
                rows = json.loads((span.file.parent / "zarr.json").read_text())["chunk_grid"]["configuration"]["chunk_shape"][0]
                size, nbytes = span.file.stat().st_size, index_nbytes(rows)  # inner chunks of one row each
                index = ChunkSpan(span.file, size - nbytes, nbytes)
                chunks.append((root, path, key, index, span.file.relative_to(root).as_posix()))
    assert any(shard for *_, shard in chunks), "no packed record: schema 7 packs the demo's L1 records"

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
