"""Migrate a dump of an earlier format to this one, in place (``megadump migrate ROOT``).

:func:`~megadump_zarr.migrate.format9.migrate_dump` rewrites a format-9 dump as format 10: metadata only, every
window checked against its inventory first.
"""

from __future__ import annotations

from megadump_zarr.migrate.format9 import MigrationError, MigrationReport, WindowMigration, migrate_dump

__all__ = ["MigrationError", "MigrationReport", "WindowMigration", "migrate_dump"]
