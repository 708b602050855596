"""Plain readers of a root written by several ranks never see a silently partial root.

Two real writer processes: rank 1 starts, commits windows, then rank 0 writes its windows and ends while
rank 1 goes on; rank 1 commits more and is SIGKILLed inside a window. Plain ``xr.open_datatree`` of the
root (a fresh interpreter, no megadump_zarr import) must list every committed window, or warn that the
root has no consolidated metadata; once a later session on the same host ends, the root is indexed again
with every committed window and opens warning-free.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
import signal
import subprocess
import sys
import textwrap

import pytest

from megadump_zarr.store.writer import WindowWriter

WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from megadump_zarr.layout.write_model import ArrayWrite, InvocationWrite, WindowWrite
    from megadump_zarr.store.writer import WindowWriter

    root, rank = sys.argv[1], int(sys.argv[2])

    def window(index):
        inv = InvocationWrite(
            "invocation_000000_forward",
            {"invocationId": 0, "step": index, "direction": "forward", "kernelName": "k", "level": "L0",
             "rank": rank},
            [],
            [ArrayWrite("x", np.full((4, 3), rank * 100 + index, dtype=np.float32), ("row", "col"), {"name": "x"})],
        )
        return WindowWrite(rank, index, {"schemaVersion": 5, "level": "L0", "windowIndex": index, "rank": rank}, [inv])

    writer = WindowWriter(root, durable=False)
    index = 0
    for line in sys.stdin:  # one window per line; "begin" starts one and never commits it; "end" ends
        word = line.strip()
        if word == "end":
            break
        if word == "begin":
            writer.begin(rank, index, {"schemaVersion": 5, "level": "L0", "windowIndex": index, "rank": rank})
            print("BEGUN", flush=True)
            continue
        writer.write_window(window(index))
        print(f"COMMITTED rank_{rank}/window_{index:04d}", flush=True)
        index += 1
    print("INDEXED", writer.index_root(), flush=True)
    writer.close()
""")

TREE = textwrap.dedent("""
    import json, sys, warnings
    import xarray as xr
    assert "megadump_zarr" not in sys.modules
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tree = xr.open_datatree(sys.argv[1], engine="zarr")
    windows = sorted(node.path for node in tree.subtree if node.path.count("/") == 2)
    print(json.dumps({"windows": windows, "warnings": [str(w.message) for w in caught]}))
""")


class _Writer:
    def __init__(self, root: Path, rank: int) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        self.process = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(root), str(rank)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.committed: list[str] = []

    def tell(self, word: str) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(word + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline().strip()
        if answer.startswith("COMMITTED "):
            self.committed.append("/" + answer.split()[1])
        return answer

    def windows(self, count: int) -> None:
        for _ in range(count):
            assert self.tell("window").startswith("COMMITTED")


def _plain_tree(root: Path) -> dict:
    result = subprocess.run([sys.executable, "-c", TREE, str(root)], capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def _says_no_index(warnings: list[str]) -> bool:
    return any("consolidated" in text.lower() for text in warnings)


@pytest.mark.timeout(240)
def test_rank_0_ends_rank_1_goes_on_and_is_killed_plain_xarray_is_never_silently_partial(tmp_path):
    root = tmp_path / "dump"
    rank1 = _Writer(root, 1)
    rank1.windows(5)
    rank0 = _Writer(root, 0)
    rank0.windows(2)
    assert rank0.tell("end") == "INDEXED False"  # rank 1 is still writing: no index that would go stale
    rank0.process.wait(timeout=60)
    rank1.windows(4)
    assert rank1.tell("begin") == "BEGUN"
    rank1.process.send_signal(signal.SIGKILL)
    rank1.process.wait(timeout=60)
    committed = set(rank0.committed) | set(rank1.committed)
    assert len(committed) == 11

    seen = _plain_tree(root)
    assert committed <= set(seen["windows"])  # every committed window, rank 1's 9 included
    assert _says_no_index(seen["warnings"]), seen  # and told that the root has no index
    assert "consolidated_metadata" not in json.loads((root / "zarr.json").read_text())

    # a later session on this host ends: the killed session's marker is stale, the root is indexed whole
    with WindowWriter(root) as later:
        later.begin(2, 0, {"schemaVersion": 5, "level": "L0", "windowIndex": 0, "rank": 2}).commit("aborted")
        assert later.index_root()
    seen = _plain_tree(root)
    assert set(seen["windows"]) == committed and not _says_no_index(seen["warnings"]), seen
