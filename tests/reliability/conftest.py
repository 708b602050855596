"""Fixtures shared by the reliability tests."""

from __future__ import annotations

import pytest

from megadump_zarr.diagnostics import active_session, deactivate_session


@pytest.fixture(autouse=True)
def _no_leaked_session():
    """A failing test must not leave its dumper registered as the process's active session."""
    yield
    session = active_session()
    if session is not None:
        deactivate_session(session)
