"""Diagnostics shared by every session kind: actions, schedule, session registry, launch protocol."""

from megadump_zarr.diagnostics.call import DiagnosticCall, LaunchArguments, LaunchContext
from megadump_zarr.diagnostics.schedule import DiagnosticAction, schedule
from megadump_zarr.diagnostics.session import activate_session, active_session, deactivate_session

__all__ = [
    "DiagnosticAction",
    "DiagnosticCall",
    "LaunchArguments",
    "LaunchContext",
    "activate_session",
    "active_session",
    "deactivate_session",
    "schedule",
]
