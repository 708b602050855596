"""Issue 23.5: a torn window whose status was edited to ``complete`` is not read as committed.

A commit writes ``committedAt`` and the consolidated metadata of every node with the window document; a
torn window's ``"writing"`` document has neither. Readers (``info``, ``export-hdf5``) require that evidence.
"""

from __future__ import annotations

import json
from pathlib import Path
import subprocess
import sys

import numpy as np
import pytest

from megadump_zarr.layout.write_model import ArrayWrite, GroupWrite, InvocationWrite
from megadump_zarr.interop import export_hdf5
from megadump_zarr.read import open_dump
from megadump_zarr.store.writer import WindowWriter


def _torn_edited_complete(root: Path, records: int = 48) -> Path:
    """A window killed while written (``"writing"``, no group documents), its status then edited to complete."""
    with WindowWriter(root) as writer:
        session = writer.begin(0, 0, {"schemaVersion": 5, "level": "L0", "windowIndex": 0, "rank": 0})
        arrays = [ArrayWrite(f"g/x{i}", np.full(4, i, np.float32), ("n",), {"name": f"x{i}"}) for i in range(records)]
        session.write_invocation(
            InvocationWrite("invocation_000000_forward", {"invocationId": 0}, [GroupWrite("g", {})], arrays)
        )
    window = Path(session.url)
    doc = json.loads((window / "zarr.json").read_text())
    assert doc["attributes"]["status"] == "writing" and "consolidated_metadata" not in doc
    doc["attributes"]["status"] = "complete"
    (window / "zarr.json").write_text(json.dumps(doc))
    return window


def _cli(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "megadump_zarr.cli.main", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_info_does_not_show_it_complete(tmp_path: Path) -> None:
    _torn_edited_complete(tmp_path / "dump")
    assert list(open_dump(tmp_path / "dump").windows()["status"]) == ["writing"]
    result = _cli("--json", "info", tmp_path / "dump")
    assert result.returncode in (0, 1), result.stderr
    assert '"complete"' not in result.stdout, result.stdout[:2000]


def test_export_hdf5_refuses_it(tmp_path: Path) -> None:
    window = _torn_edited_complete(tmp_path / "dump")
    target = tmp_path / "w.h5"
    with pytest.raises(ValueError, match=r"says status 'complete' but was never committed: it has no committedAt"):
        export_hdf5(window, target)
    assert not target.exists()
    result = _cli("export-hdf5", window, target)
    assert result.returncode == 2, (result.stdout, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "never committed" in errors[0] and "Traceback" not in result.stderr
    assert not target.exists()


def test_a_committed_window_still_exports(tmp_path: Path) -> None:
    with WindowWriter(tmp_path / "dump") as writer:
        session = writer.begin(0, 0, {"schemaVersion": 5, "level": "L0", "windowIndex": 0, "rank": 0})
        session.write_invocation(
            InvocationWrite(
                "invocation_000000_forward",
                {"invocationId": 0},
                [GroupWrite("g", {})],
                [ArrayWrite("g/x", np.ones(4, np.float32), ("n",), {"name": "x"})],
            )
        )
        url = session.commit("complete")
    assert export_hdf5(url, tmp_path / "w.h5").exists()
    assert list(open_dump(tmp_path / "dump").windows()["status"]) == ["complete"]
