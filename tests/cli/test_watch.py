"""``megadump watch`` in a second process while the writer runs: it names both anomalies of the flight
recorder scenario (tests/dump/_recorder_run.py) with their exact step, task and core, locally and on a moto S3
server, and it names the NaN while the writer is still running."""

from __future__ import annotations

import json
import os
from pathlib import Path
import subprocess
import sys
import threading
import time

import pytest

from megadump_zarr import open_dump
from tests._moto import KEY, SECRET, moto_s3
from tests.dump import _recorder_run as scenario

REPO = Path(__file__).resolve().parents[2]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO), env.get("PYTHONPATH", "")])
    env.update(NO_COLOR="1", COLUMNS="200", OMP_NUM_THREADS="1")
    return env


class _Watcher:
    """``megadump watch ROOT --json`` in a subprocess; its lines read by a thread as they come."""

    def __init__(self, root, *extra):
        command = [sys.executable, "-m", "megadump_zarr.cli.main", "watch", str(root), "--json", "--interval", "0.2"]
        command += ["--anomalies", "2", "--timeout", "400", *extra]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
        self.events = []
        self.nan_named = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.process.stdout:
            event = json.loads(line)
            self.events.append(event)
            if event["event"] == "anomaly" and event["kind"] == "nonfinite":
                self.nan_named.set()

    def pause_until_named(self, step):
        """The writer waits after the NaN's after-steps were committed until the watcher named the NaN: the
        watcher reads windows while the writer is still running."""
        if step == scenario.NAN_STEP + scenario.AFTER:
            if not self.nan_named.wait(240):
                self.process.kill()  # no watcher left behind; what it said goes into the failure
                named = sorted({(e.get("window"), e["event"]) for e in self.events})
                raise AssertionError(
                    f"the watcher did not name the NaN while the writer ran (exit {self.process.wait()}; events by "
                    f"window {named}); its stderr: {self.process.stderr.read()[-3000:]}"
                )

    def finish(self):
        code = self.process.wait(timeout=400)
        self.reader.join(timeout=30)
        return code, self.process.stderr.read()


def _expected(records):
    def where(stage, owner):
        rows = records[(records["stage"] == stage) & (records["owner_id"] == owner)]
        (task, core_type, core_id), *rest = set(zip(rows["task_id"], rows["core_type"], rows["core_id"]))
        assert not rest
        return int(task), f"{core_type}{int(core_id)}"

    nan_task, nan_core = where("expert_up", scenario.NAN_EXPERT)
    blow_task, blow_core = where("expert_down", scenario.BLOW_EXPERT)
    return [
        ("nonfinite", "recorder", 0, scenario.NAN_STEP, "expert_up", nan_task, scenario.NAN_EXPERT, nan_core, "w_up"),
        ("norm", "recorder", 0, scenario.FIRST_BLOW_STEP, "expert_down", blow_task, scenario.BLOW_EXPERT, blow_core,
         "w_down"),
    ]  # fmt: skip


def _anomalies(events):
    return [
        (e["kind"], e["source"], e["rank"], e["step"], e["stage"], e["task"], e["owner"], e["core"], e["record"])
        for e in events
        if e["event"] == "anomaly"
    ]


def _check(watcher, code, err, records):
    assert code == 1, err
    assert _anomalies(watcher.events) == _expected(records)
    windows = [(e["window"], e["trigger"], e["part"], e["steps"]) for e in watcher.events if e["event"] == "window"]
    assert windows == [(w, k, p, s) for w, (k, p, s) in sorted(scenario.EXPECTED_WINDOWS.items())][: len(windows)]
    assert len(windows) >= 3  # the second anomaly is in window 2; the watcher stops after naming it
    steps = [e for e in watcher.events if e["event"] == "step" and e["stage"] == "expert_up" and e["owner"] == 1]
    assert {e["step"]: e["nan_count"] for e in steps if e["window"] == 0}[scenario.NAN_STEP] > 0


def test_watch_names_both_anomalies_while_a_local_dump_is_written(tmp_path):
    root = tmp_path / "run"
    watcher = _Watcher(root)
    try:
        scenario.run(root, on_step=watcher.pause_until_named)
    finally:
        code, err = watcher.finish()
    _check(watcher, code, err, open_dump(root).records())


def test_watch_names_both_anomalies_on_s3(tmp_path):
    pytest.importorskip("s3fs")
    with moto_s3("dumps") as endpoint:
        url = "s3://dumps/watched-run"  # moto keeps its buckets for the whole process: a name no other test writes
        options = {"key": KEY, "secret": SECRET, "endpoint_url": endpoint}
        watcher = _Watcher(url, "-S", f"endpoint_url={endpoint}", "-S", f"key={KEY}", "-S", f"secret={SECRET}")
        try:
            scenario.run(url, storage_options=options, on_step=watcher.pause_until_named)
        finally:
            code, err = watcher.finish()
        _check(watcher, code, err, open_dump(url, storage_options=options).records())


def test_once_reads_what_is_there_and_exits_1_on_an_anomaly(tmp_path, capsys, monkeypatch):
    from tests.cli._helpers import cli_runner

    run = cli_runner(capsys, monkeypatch)
    root = tmp_path / "short"
    scenario.run(root, steps=scenario.NAN_STEP + 1)  # the NaN window, then the session ends (1 after-step)
    result = run("watch", root, "--once")
    assert result.code == 1
    assert "anomaly nonfinite: rank 0, step 60, stage expert_up" in result.out
    clean = tmp_path / "clean"
    scenario.run(clean, steps=20, poison=False)
    result = run("watch", clean, "--once", "--json")
    assert result.code == 0 and result.out == ""  # nothing fired: no window, no event
    assert run("watch", tmp_path / "missing", "--once").code == 2
    assert run("watch", clean, "--interval", "0").code == 2
    time.sleep(0)
