"""One format per dump: a window of another format version is refused when the dump is opened.

The window manifest names the layout (``stageViewStorage``) and the format version (``schemaVersion``); a window
of a pre-release format (or a newer one) is refused with one error naming the window, the version found and the
one this version reads, and the command line exits 2 with one ``error:`` line.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from megadump_zarr import open_dump
from megadump_zarr.cli.main import main
from megadump_zarr.layout.schema import FORMAT_VERSION
from megadump_zarr.layout.write_model import ArrayWrite, InvocationWrite, WindowWrite
from megadump_zarr.read.errors import FormatVersionError
from megadump_zarr.store.writer import WindowWriter

WINDOW = "rank_0/window_0000"


def _dump(root: Path) -> Path:
    invocation = InvocationWrite(
        "invocation_000000_forward",
        {"invocationId": 0, "step": 0, "direction": "forward", "kernelName": "k"},
        [],
        [ArrayWrite("x", np.arange(4, dtype=np.float32), ("n",), {"name": "x"})],
    )
    attrs = {
        "schemaVersion": FORMAT_VERSION,
        "level": "L0",
        "windowIndex": 0,
        "rank": 0,
        "capturePhaseSemantics": "mega_kernel_boundary",
        "stageViewStorage": "array_per_tensor_with_ports",
        "invocations": [invocation.name],
    }
    WindowWriter(root).write_window(WindowWrite(rank=0, window_index=0, attrs=attrs, invocations=[invocation]))
    return root


def _set_version(root: Path, version: object) -> None:
    path = root / WINDOW / "zarr.json"
    doc = json.loads(path.read_text())
    doc["attributes"]["schemaVersion"] = version
    path.write_text(json.dumps(doc))


def test_the_current_format_opens(tmp_path):
    assert len(open_dump(_dump(tmp_path / "d")).records()) == 1


@pytest.mark.parametrize(
    ("version", "says"),
    [
        (
            9,
            "format 9 was written by an earlier megadump_zarr; this version reads format 10 only "
            "(convert the dump in place: megadump migrate ROOT)",
        ),
        (8, "format 8 was written by a pre-release of megadump_zarr; this version reads format 10 only (re-dump it)"),
        (5, "format 5 was written by a pre-release of megadump_zarr; this version reads format 10 only (re-dump it)"),
        (
            11,
            "format 11 was written by a newer megadump_zarr; this version reads format 10 only (upgrade megadump_zarr)",
        ),
        (None, "the window has no format version; this version reads format 10 only"),
    ],
)
def test_another_format_is_refused_at_open_naming_both_versions(tmp_path, capsys, version, says):
    root = _dump(tmp_path / "d")
    _set_version(root, version)
    with pytest.raises(FormatVersionError) as raised:
        open_dump(root)
    assert str(raised.value) == f"{WINDOW}: {says}"
    assert main(["ls", str(root)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {WINDOW}: {says}"]


def test_verify_refuses_a_window_of_another_format(tmp_path, capsys):
    from megadump_zarr.verify import verify_dump

    root = _dump(tmp_path / "d")
    _set_version(root, 8)
    with pytest.raises(FormatVersionError, match="format 8 was written by a pre-release"):
        verify_dump(root)
    assert main(["verify", str(root)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "this version reads format 10 only" in err[0]


def test_a_window_claimed_and_not_yet_written_is_torn_not_another_format(tmp_path):
    """An object store's claim placeholder (``status: writing``, a claim token, no manifest yet) is a window being
    written: readers and ``verify`` list it as ``writing``; a watcher polling a live run must not stop on it."""
    from megadump_zarr.verify import verify_dump

    root = _dump(tmp_path / "d")
    claimed = root / "rank_0" / "window_0001"
    claimed.mkdir()
    placeholder = {"zarr_format": 3, "node_type": "group", "attributes": {"status": "writing", "claimToken": "t"}}
    (claimed / "zarr.json").write_text(json.dumps(placeholder))
    dump = open_dump(root)
    assert dict(zip(dump.windows()["path"], dump.windows()["status"])) == {
        WINDOW: "complete",
        "rank_0/window_0001": "writing",
    }
    assert len(dump.records()) == 1
    assert [w.status for w in verify_dump(root).windows] == ["complete", "writing"]
