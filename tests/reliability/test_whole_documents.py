"""A ``zarr.json`` replaced whole by JSON that is not an object (a list, a string, a number, null): every command
ends in one clear outcome naming the file, never zarr's "pop expected at most 1 argument, got 2" (issue 23.6).

The document-mutation fuzz (``test_fuzz_documents.py``) replaces values inside documents, never a whole one.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
import shutil
from typing import Any

import numpy as np
import pytest

from megadump_zarr.cli.main import main
from megadump_zarr.store.writer import WindowWriter
from tests.read.conftest import HandRecord, hand_window

WINDOW = "rank_0/window_0000"
RECORD = f"{WINDOW}/invocation_000000_forward/stages/stage/task_000001/output_00_a"
DOCUMENTS = {
    "root": "zarr.json",
    "rank": "rank_0/zarr.json",
    "window": f"{WINDOW}/zarr.json",
    "invocation": f"{WINDOW}/invocation_000000_forward/zarr.json",
    "task": f"{WINDOW}/invocation_000000_forward/stages/stage/task_000001/zarr.json",
    "record": f"{RECORD}/zarr.json",
}
VALUES = {"list": [1, 2], "string": "x", "number": 5, "null": None}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("whole") / "dump"
    records = [HandRecord("a", np.arange(32, dtype=np.float32).reshape(8, 4), 0)]
    with WindowWriter(root) as writer:
        writer.write_window(hand_window({1: records, 2: [HandRecord("a", np.ones((8, 4), np.float32), 8)]}))
    assert all((root / doc).is_file() for doc in DOCUMENTS.values())
    return root


def _run(*args: Any) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    text = out.getvalue() + err.getvalue()
    assert code in (0, 1, 2), (args, code, text)
    assert "Traceback" not in text and "internal error" not in text and "pop expected" not in text, (args, text)
    if code == 2:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, text)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("value", list(VALUES), ids=list(VALUES))
@pytest.mark.parametrize("document", list(DOCUMENTS), ids=list(DOCUMENTS))
def test_a_document_that_is_not_an_object(pristine: Path, tmp_path: Path, document: str, value: str) -> None:
    root = tmp_path / "dump"
    shutil.copytree(pristine, root)
    (root / DOCUMENTS[document]).write_text(json.dumps(VALUES[value]))
    named = f"{DOCUMENTS[document]} is not a JSON object"
    results = {
        command: _run(*args)
        for command, args in {
            "ls": ("ls", root),
            "info": ("info", root),
            "stats": ("stats", root),
            "compare": ("compare", root, pristine),
            "verify": ("verify", root),
            "export-hdf5": ("export-hdf5", root / WINDOW, tmp_path / "out.h5", "--overwrite"),
        }.items()
    }
    if document == "root":  # not a dump root: bad input for every command given the root, naming its document
        for command, (code, _, err) in results.items():
            assert command == "export-hdf5" or (code == 2 and "zarr.json is not a JSON object" in err), (command, err)
        return
    code, out, _ = results["verify"]
    assert code == 1 and DOCUMENTS[document] in out, out  # verify names the document every copy disagrees with
    code, _, err = results["export-hdf5"]
    if document == "window":  # export opens the window group itself (zarr said "pop expected at most 1 argument")
        assert code == 2 and f"{root / WINDOW}/zarr.json is not a JSON object" in err, err
    if document == "window":  # readers read the window document: each names it
        for command in ("ls", "info", "stats", "compare"):
            code, _, err = results[command]
            assert code == 2 and named in err, (command, err)
