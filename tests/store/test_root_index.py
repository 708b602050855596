"""Root and rank groups carry consolidated metadata between sessions: plain zarr/xarray open them warning-free.

``xr.open_datatree(root, engine="zarr")`` and ``xr.open_datatree(root/rank_0, engine="zarr")`` run in
fresh ``python -W error`` interpreters (no megadump_zarr import), and must show exactly what opening
each complete window on its own shows.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import torch

from megadump_zarr import TensorDumpConfig, open_dump, schedule, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.layout.write_model import ArrayWrite, InvocationWrite, WindowWrite
from megadump_zarr.store import root_index
from megadump_zarr.store.writer import WindowWriter

TREE = textwrap.dedent("""
    import hashlib, json, sys
    import xarray as xr
    assert "megadump_zarr" not in sys.modules
    out = {}
    for path in sys.argv[1:]:
        tree = xr.open_datatree(path, engine="zarr")
        out[path] = {node.path: {name: hashlib.sha256(var.values.tobytes()).hexdigest()
                                 for name, var in node.to_dataset(inherit=False).variables.items()}
                     for node in tree.subtree}
    print(json.dumps(out))
""")


def _trees(*paths: Path) -> dict[str, dict[str, dict[str, str]]]:
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", TREE, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr == ""
    return json.loads(result.stdout)


def _doc(path: Path) -> dict:
    return json.loads((path / "zarr.json").read_text())


def _window(rank: int, index: int, value: float) -> WindowWrite:
    data = np.full((4, 3), value, dtype=np.float32)
    inv = InvocationWrite(
        "invocation_000000_forward",
        {"invocationId": 0, "step": index, "direction": "forward", "kernelName": "k", "level": "L0", "rank": rank},
        [],
        [ArrayWrite("x", data, ("row", "col"), {"name": "x"})],
    )
    return WindowWrite(rank, index, {"schemaVersion": 5, "level": "L0", "windowIndex": index, "rank": rank}, [inv])


def test_a_dump_session_leaves_root_and_rank_openable_by_plain_xarray(tmp_path):
    root = tmp_path / "dump"
    block = MoEBlock(DemoConfig(dtype=torch.bfloat16))
    config = TensorDumpConfig(root, level="L1", kernel_names=("moe_experts",), stages=("expert_up", "expert_down"))
    with tensor_dump(config, schedule(wait=0, warmup=0, active=1, repeat=2)) as dumper:
        for _ in range(2):
            with torch.no_grad():
                block(block.make_input())
            dumper.step()
    windows = sorted((root / "rank_0").glob("window_*"))
    assert len(windows) == 2
    trees = _trees(root, root / "rank_0", *windows)
    whole, rank = trees[str(root)], trees[str(root / "rank_0")]
    for window in windows:
        alone = trees[str(window)]
        for path, variables in alone.items():
            below = f"/{window.name}" + ("" if path == "/" else path)
            assert rank[below] == variables
            assert whole[f"/rank_0{below}"] == variables
    assert sum(len(v) for v in whole.values()) == sum(len(v) for w in windows for v in trees[str(w)].values())
    assert set(whole) == {"/", "/rank_0"} | {
        f"/rank_0/{w.name}" + ("" if p == "/" else p) for w in windows for p in trees[str(w)]
    }
    # our reader lists the store and is unaffected
    assert set(open_dump(root).records()["window"]) == {0, 1}


def test_index_dropped_while_writing_and_lists_only_complete_windows(tmp_path):
    root = tmp_path / "dump"
    with WindowWriter(root) as writer:
        writer.write_window(_window(0, 0, 1.0))
        assert writer.index_root()
        assert set(_doc(root)["consolidated_metadata"]["metadata"]) >= {
            "rank_0",
            "rank_0/window_0000",
            "rank_0/window_0000/invocation_000000_forward/x",
        }
    with WindowWriter(root) as writer:
        session = writer.begin(0, 1, {"schemaVersion": 5, "level": "L0", "windowIndex": 1, "rank": 0})
        # a session is writing: no snapshot that would hide its windows from plain readers
        assert "consolidated_metadata" not in _doc(root) and "consolidated_metadata" not in _doc(root / "rank_0")
        session.commit("aborted")
        writer.begin(0, 2, {"schemaVersion": 5, "level": "L0", "windowIndex": 2, "rank": 0})  # torn: never committed
        writer.write_window(_window(0, 3, 3.0))
        writer.write_window(_window(1, 0, 4.0))
        assert writer.index_root()
    listed = _doc(root)["consolidated_metadata"]["metadata"]
    assert {k for k in listed if k.count("/") == 1} == {
        "rank_0/window_0000",
        "rank_0/window_0003",
        "rank_1/window_0000",
    }
    assert set(_doc(root / "rank_1")["consolidated_metadata"]["metadata"]) == {
        "window_0000",
        "window_0000/invocation_000000_forward",
        "window_0000/invocation_000000_forward/x",
    }
    trees = _trees(root)
    assert set(trees[str(root)]) == {
        "/",
        "/rank_0",
        "/rank_1",
        "/rank_0/window_0000",
        "/rank_0/window_0003",
        "/rank_1/window_0000",
        "/rank_0/window_0000/invocation_000000_forward",
        "/rank_0/window_0003/invocation_000000_forward",
        "/rank_1/window_0000/invocation_000000_forward",
    }


def test_a_later_writer_of_another_rank_keeps_the_first_ranks_windows(tmp_path):
    root = tmp_path / "dump"
    first, second = WindowWriter(root), WindowWriter(root)
    first.write_window(_window(0, 0, 1.0))
    second.write_window(_window(1, 0, 2.0))
    assert not first.index_root()  # the second is still writing: no index that would miss its next windows
    assert "consolidated_metadata" not in _doc(root)
    second.write_window(_window(1, 1, 3.0))
    assert second.index_root()  # the last session to end indexes every committed window
    listed = {k for k in _doc(root)["consolidated_metadata"]["metadata"] if k.count("/") == 1}
    assert listed == {"rank_0/window_0000", "rank_1/window_0000", "rank_1/window_0001"}
    first.close()
    second.close()


def test_too_large_an_index_is_not_written(tmp_path, monkeypatch):
    root = tmp_path / "dump"
    with WindowWriter(root) as writer:
        writer.write_window(_window(0, 0, 1.0))
        monkeypatch.setattr(root_index, "INDEX_LIMIT", 100)
        assert not writer.index_root()
    assert "consolidated_metadata" not in _doc(root)
    assert _doc(root)["attributes"] == {"megadump_zarr": {"layoutVersion": 1}}


def test_a_writer_that_began_nothing_does_not_index(tmp_path):
    root = tmp_path / "dump"
    with WindowWriter(root) as writer:
        writer.write_window(_window(0, 0, 1.0))
    with WindowWriter(root) as idle:
        assert not idle.index_root()
    assert "consolidated_metadata" not in _doc(root)


def test_convert_indexes_the_root(tmp_path):
    from megadump_zarr.interop import convert_legacy
    from tests.interop._legacy_format import demo_tensors, l1_invocations, write_rank_window

    write_rank_window(tmp_path / "src", "L1", 0, 0, l1_invocations(demo_tensors(torch.float32)))
    convert_legacy(tmp_path / "src", tmp_path / "z")
    assert "consolidated_metadata" in _doc(tmp_path / "z")
    _trees(tmp_path / "z")


def test_an_index_written_while_a_session_registers_is_dropped(tmp_path, monkeypatch):
    root = tmp_path / "dump"
    first, second = WindowWriter(root), WindowWriter(root)
    first.write_window(_window(0, 0, 1.0))
    original = root_index._complete_windows
    calls = []

    def late_session(*args, **kwargs):  # a second session registers between the indexer's two checks
        found = original(*args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            second.begin(1, 0, {"schemaVersion": 5, "level": "L0", "windowIndex": 0, "rank": 1})
        return found

    monkeypatch.setattr(root_index, "_complete_windows", late_session)
    assert not first.index_root()
    assert "consolidated_metadata" not in _doc(root)
    monkeypatch.undo()
    second.close()  # ends the session without indexing: its marker goes
    assert not list(root.glob(".session-*"))


def test_a_dead_sessions_marker_on_this_host_is_removed_and_others_wait_for_force(tmp_path):
    root = tmp_path / "dump"
    with WindowWriter(root) as writer:
        writer.write_window(_window(0, 0, 1.0))
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        (root / ".session-dead.json").write_text(json.dumps({"host": socket.gethostname(), "pid": int(dead.stdout)}))
        (root / ".session-far.json").write_text(json.dumps({"host": "another-host", "pid": 1}))
        assert not writer.index_root()  # the other host's session may still write
        assert sorted(p.name for p in root.glob(".session-*")) == [".session-far.json"]
        assert root_index.index_root(writer.backend, str(root), force=True)
    assert not list(root.glob(".session-*"))
    assert "rank_0/window_0000" in _doc(root)["consolidated_metadata"]["metadata"]
