"""A window is planned, written and committed with the cyclic garbage collector paused (a collection in between
would scan every node of the window, none of which is garbage yet), and the collector is left as it was found."""

from __future__ import annotations

import gc

import pytest

from megadump_zarr.store import writer as writer_module
from megadump_zarr.store.writer import WindowSession, WindowWriter
from tests.store.conftest import l1_window


@pytest.fixture
def collector_seen(monkeypatch):
    """Whether the collector was enabled each time the commit's inventory and window documents were built."""
    seen: list[tuple[str, bool]] = []
    inventory, consolidated = WindowSession._write_inventory, writer_module.consolidated_group_bytes

    def write_inventory(self):
        seen.append(("inventory", gc.isenabled()))
        return inventory(self)

    def consolidated_group_bytes(*args, **kwargs):
        seen.append(("consolidated", gc.isenabled()))
        return consolidated(*args, **kwargs)

    monkeypatch.setattr(WindowSession, "_write_inventory", write_inventory)
    monkeypatch.setattr(writer_module, "consolidated_group_bytes", consolidated_group_bytes)
    assert gc.isenabled()
    return seen


@pytest.mark.parametrize("durable", [False, "syncfs"])
def test_write_all_pauses_the_collector_through_the_commit(tmp_path, collector_seen, durable):
    window = l1_window()
    with WindowWriter(tmp_path / "dump", durable=durable) as writer:
        session = writer.begin(window.rank, window.window_index, window.attrs)
        session.write_all(window.invocations)
    assert ("inventory", False) in collector_seen and ("consolidated", False) in collector_seen
    assert {enabled for _, enabled in collector_seen} == {False}
    assert gc.isenabled() and session.status == "complete"


def test_commit_alone_pauses_the_collector_and_a_caller_s_pause_is_kept(tmp_path, collector_seen):
    window = l1_window()
    with WindowWriter(tmp_path / "dump", durable=False) as writer:
        session = writer.begin(window.rank, window.window_index, window.attrs)
        for invocation in window.invocations:
            session.write_invocation(invocation)
        assert gc.isenabled()
        session.commit()
        assert ("inventory", False) in collector_seen and gc.isenabled()
        gc.disable()  # a caller that paused the collector itself finds it paused afterwards
        try:
            second = writer.begin(window.rank, window.window_index + 1, window.attrs)
            second.write_all(window.invocations)
            assert not gc.isenabled()
        finally:
            gc.enable()
    assert {enabled for _, enabled in collector_seen} == {False}
