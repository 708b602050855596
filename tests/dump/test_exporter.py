"""The background exporter: back-pressure under a memory budget, order, failures surfacing."""

from __future__ import annotations

import threading
import time

import pytest

from megadump_zarr.dump.exporter import BackgroundExporter, ExportError


def test_back_pressure_blocks_rather_than_drops():
    exporter = BackgroundExporter(budget_bytes=100)
    release = threading.Event()
    done = []

    def slow():
        release.wait(5)
        done.append("a")
        return "a"

    exporter.submit(slow, 80, "a", tag=1)
    returned = threading.Event()

    def second():
        exporter.submit(lambda: done.append("b") or "b", 80, "b", tag=2)
        returned.set()

    thread = threading.Thread(target=second)
    thread.start()
    time.sleep(0.2)
    assert not returned.is_set(), "the second submit must wait: 80 + 80 bytes exceed the 100-byte budget"
    assert exporter.held_bytes == 80
    release.set()
    thread.join(5)
    assert returned.is_set()
    exporter.flush()
    assert done == ["a", "b"]  # nothing dropped, submission order kept
    assert exporter.take_finished() == [(1, "a"), (2, "b")]
    assert exporter.held_bytes == 0 and exporter.waited_seconds >= 0.15  # the blocked submit waited, and it is counted
    exporter.close()


def test_a_job_larger_than_the_budget_still_runs_alone():
    exporter = BackgroundExporter(budget_bytes=10)
    exporter.submit(lambda: "big", 1000, "big")
    exporter.flush()
    assert exporter.take_finished() == [(None, "big")]
    exporter.close()


def test_failure_surfaces_once_on_the_caller_thread_and_later_jobs_still_run():
    exporter = BackgroundExporter(budget_bytes=1 << 20)

    def broken():
        raise OSError("disk full")

    exporter.submit(broken, 1, "window_0000")
    exporter.submit(lambda: "next", 1, "window_0001", tag="w1")
    with pytest.raises(ExportError, match=r"background export of window_0000 failed: OSError\('disk full'\)") as info:
        exporter.flush()
    assert isinstance(info.value.__cause__, OSError)
    exporter.raise_if_failed()  # reported once
    assert exporter.take_finished() == [("w1", "next")]
    exporter.close()
    with pytest.raises(RuntimeError, match="closed"):
        exporter.submit(lambda: None, 1, "late")


def test_budget_must_be_positive():
    with pytest.raises(ValueError, match="budget_bytes must be positive, got 0"):
        BackgroundExporter(0)


def test_every_failure_is_kept_and_named_in_one_export_error():
    exporter = BackgroundExporter(budget_bytes=1 << 20)
    for index in range(3):

        def job(index=index):
            if index != 1:
                raise OSError(f"disk full {index}")
            return index

        exporter.submit(job, 1, f"window_{index:04d}", tag=index)
    with pytest.raises(ExportError) as info:
        exporter.flush()
    error = info.value
    assert error.windows == ("window_0000", "window_0002")
    assert str(error) == (
        "background export of 2 windows failed: window_0000: OSError('disk full 0'); "
        "window_0002: OSError('disk full 2')"
    )
    assert [str(e) for e in error.errors] == ["disk full 0", "disk full 2"] and error.__cause__ is error.errors[0]
    assert exporter.take_failures() == [] and exporter.take_finished() == [(1, 1)]
    exporter.close()


def test_submit_never_raises_an_earlier_failure_so_the_job_still_runs():
    exporter = BackgroundExporter(budget_bytes=1 << 20)
    exporter.submit(lambda: (_ for _ in ()).throw(OSError("boom")), 1, "w0")
    exporter.wait()
    exporter.submit(lambda: "ran", 1, "w1", tag="w1")  # the old exporter raised w0's failure here, dropping w1
    exporter.wait()
    assert exporter.take_finished() == [("w1", "ran")]
    assert [label for label, _ in exporter.take_failures()] == ["w0"]
    exporter.close()
