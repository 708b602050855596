"""``claim_output``: new outputs claimed exclusively, written to a temporary file and renamed; nothing that
is not a regular file is ever replaced; ``export-hdf5`` races to one new file: exactly one wins."""

from __future__ import annotations

import os
from pathlib import Path
import stat
import subprocess
import sys
import threading
import time

import pytest

from megadump_zarr.cli.outputs import claim_output


def _write(temp: Path, data: bytes) -> None:
    temp.write_bytes(data)


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".tmp-" in p.name)


def test_new_file_is_written_through_a_temporary(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    with claim_output(target) as temp:
        assert temp.parent == tmp_path and temp != target and target.exists() and target.stat().st_size == 0
        assert temp.suffix == ".bin" and temp.name.startswith(".out.tmp-")
        _write(temp, b"payload")
    assert target.read_bytes() == b"payload" and _leftovers(tmp_path) == []


def test_existing_file_needs_overwrite(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(FileExistsError, match=r"already exists \(pass --overwrite to replace it\)"):
        with claim_output(target):
            raise AssertionError("never reached")
    assert target.read_bytes() == b"old"
    with claim_output(target, overwrite=True) as temp:
        _write(temp, b"new")
    assert target.read_bytes() == b"new" and _leftovers(tmp_path) == []


@pytest.mark.parametrize("kind", ["device", "directory", "symlink", "fifo"])
def test_not_a_regular_file_is_refused_even_with_overwrite(tmp_path: Path, kind: str) -> None:
    if kind == "device":
        target = Path("/dev/null")
    elif kind == "directory":
        target = tmp_path / "dir"
        target.mkdir()
    elif kind == "symlink":
        (tmp_path / "real").write_bytes(b"keep")
        target = tmp_path / "link"
        target.symlink_to(tmp_path / "real")
    else:
        target = tmp_path / "fifo"
        os.mkfifo(target)
    before = os.lstat(target)
    with pytest.raises(FileExistsError, match="only a regular file is ever replaced"):
        with claim_output(target, overwrite=True) as temp:
            _write(temp, b"x")
    after = os.lstat(target)
    assert stat.S_IFMT(after.st_mode) == stat.S_IFMT(before.st_mode) and after.st_ino == before.st_ino
    if kind == "symlink":
        assert (tmp_path / "real").read_bytes() == b"keep"


def test_failed_writer_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    with pytest.raises(RuntimeError, match="writer died"):
        with claim_output(target) as temp:
            _write(temp, b"half")
            raise RuntimeError("writer died")
    assert not target.exists() and _leftovers(tmp_path) == []
    with pytest.raises(ValueError, match="produced no file"):
        with claim_output(target):
            pass
    assert not target.exists()


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        with claim_output(tmp_path / "no" / "out.bin"):
            pass


def test_threads_racing_for_one_name_exactly_one_wins(tmp_path: Path) -> None:
    target = tmp_path / "race.bin"
    barrier = threading.Barrier(8)
    outcomes: list[str] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        barrier.wait()
        try:
            with claim_output(target) as temp:
                time.sleep(0.05)
                _write(temp, f"writer {i}".encode())
            result = f"won {i}"
        except FileExistsError:
            result = "refused"
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    winners = [o for o in outcomes if o.startswith("won")]
    assert len(winners) == 1 and outcomes.count("refused") == 7
    assert target.read_bytes() == f"writer {winners[0].split()[1]}".encode()
    assert _leftovers(tmp_path) == []


def test_two_export_hdf5_processes_to_one_new_file(demo, tmp_path: Path) -> None:
    h5py = pytest.importorskip("h5py")
    window = demo.window_paths[0]
    target = tmp_path / "one.h5"
    command = [sys.executable, "-m", "megadump_zarr.cli.main", "export-hdf5", str(window), str(target), "--quiet"]
    env = {**os.environ, "COLUMNS": "200"}
    procs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) for _ in range(2)]
    results = [(p.wait(timeout=120), p.stderr.read().decode()) for p in procs]
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2], results
    loser = next(err for code, err in results if code == 2)
    assert loser.strip().startswith("error: ") and str(target) in loser and "Traceback" not in loser
    with h5py.File(target, "r") as handle:
        assert len(handle.keys()) > 0
    assert _leftovers(tmp_path) == []


def test_export_hdf5_refuses_dev_null(demo, cli) -> None:
    result = cli("export-hdf5", demo.window_paths[0], "/dev/null", "--overwrite")
    assert result.code == 2 and "character device" in result.err
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
