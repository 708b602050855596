"""``megadump verify``'s lines: a verification's notes are printed (one line each, and in ``--json``), and every
line is escaped like the other commands' (a value read from the dump can neither forge a line nor be taken for
rich markup) (issue 23)."""

from __future__ import annotations

import json
from pathlib import Path
import shutil

import numpy as np

from megadump_zarr.store.writer import WindowWriter
from tests.read.conftest import HandRecord, hand_window

WINDOW = "rank_0/window_0000"
UNCHECKED = (
    "array(s) carry no checksum (no crc32c codec): their chunks were decoded, so damage that still decodes "
    "cannot be found"
)


def _dump(root: Path, *, checksum: bool = True) -> Path:
    records = [HandRecord("a", np.arange(8, dtype=np.float32).reshape(4, 2), 0)]
    with WindowWriter(root, checksum=checksum) as writer:
        writer.write_window(hand_window({1: records}))
    return root


def test_a_fresh_window_prints_no_note(tmp_path: Path, cli) -> None:
    """The window inventory binds every array (the row coordinate too): nothing is left unbound to note."""
    root = _dump(tmp_path / "dump")
    result = cli("verify", root)
    assert result.code == 0, result.out
    lines = result.out.splitlines()
    assert lines[0].startswith(f"{WINDOW}: ok (complete;")
    assert lines[1].startswith("ok: 1 window(s) checked") and len(lines) == 2
    assert "not bound" not in result.out
    [window] = cli("--json", "verify", root).json()["windows"]
    assert window["notes"] == []


def test_arrays_without_a_checksum_are_bound_by_the_inventory(tmp_path: Path, cli) -> None:
    """Chunks without a crc32c codec are digested whole in the inventory: no *no checksum* note, and a changed
    byte that still decodes is a problem."""
    root = _dump(tmp_path / "dump", checksum=False)
    result = cli("verify", root)
    assert result.code == 0 and UNCHECKED not in result.out, result.out
    chunk = next(p for p in (root / WINDOW).rglob("c.0.0") if p.is_file())
    data = bytearray(chunk.read_bytes())
    data[-1] ^= 1  # raw float32 bytes: still decodes
    chunk.write_bytes(bytes(data))
    result = cli("verify", root)
    assert result.code == 1 and "the window inventory records" in result.out, result.out


def test_a_value_from_the_dump_is_printed_escaped_not_as_markup(tmp_path: Path, cli) -> None:
    """Before: rich read ``[/bold]`` as a closing tag (an internal MarkupError, exit 2), and a raw ESC or
    newline in a problem would have reached the terminal."""
    root = _dump(tmp_path / "dump")
    document = root / WINDOW / "zarr.json"
    doc = json.loads(document.read_text())
    doc["attributes"]["status"] = "[/bold]\x1b[2J\nforged: ok"
    document.write_text(json.dumps(doc))
    result = cli("verify", root)
    assert result.code == 1, result.out + result.err
    assert "internal error" not in result.err and "\x1b" not in result.out
    assert result.out.splitlines() == [
        f"{WINDOW}: 1 problem(s) (unknown)",
        f"  {WINDOW}/zarr.json: status '[/bold]\\x1b[2J\\nforged: ok' is not one of complete, aborted, writing",
        "1 problem(s): 1 window(s) checked, 0 not committed, 0 chunks, 0 B",
    ]


def test_a_window_directory_with_a_trailing_newline_is_not_a_window(tmp_path: Path, cli) -> None:
    """``^window_(\\d+)$`` matches ``window_0001\\n`` (``$`` before a trailing newline), so such a directory
    was taken for window 1. The layout grammar (``layout.paths``, ``\\Z``, ASCII digits) refuses it: verify,
    ``ls`` and ``records()`` see window 0 only, and nothing prints the name raw."""
    from megadump_zarr import open_dump

    root = _dump(tmp_path / "dump")
    shutil.copytree(root / WINDOW, root / "rank_0" / "window_0001\n")
    result = cli("verify", root)
    assert result.code == 0, result.out
    assert "ok: 1 window(s) checked" in result.out
    assert "window_0001" not in result.out
    assert sorted(set(open_dump(root).records()["window"])) == [0]
    listed = cli("ls", root, "-q")
    assert listed.code == 0 and "window_0001" not in listed.out
