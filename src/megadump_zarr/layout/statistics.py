"""The statistics table's vocabulary: its group, layout version, column names and attributes.

One table per invocation of a statistics-first dump (``invocation_*/statistics``, written by
:mod:`megadump_zarr.store.statistics_table`, read by :mod:`megadump_zarr.read.statistics_table`). The
``digest`` column holds each record's digest (:mod:`megadump_zarr.layout.digest`).
"""

from __future__ import annotations

__all__ = [
    "DIGESTS_ATTRIBUTE",
    "DIGEST_ALGORITHM_ATTRIBUTE",
    "DIGEST_COLUMN",
    "MD5_COLUMN",
    "MSPROBE_MD5",
    "STATISTICS_COORDINATES",
    "STATISTICS_GROUP",
    "STATISTICS_LAYOUT_ATTRIBUTE",
    "STATISTICS_LAYOUT_VERSION",
    "STATISTICS_LAYOUT_VERSIONS",
    "STATISTICS_VARIABLES",
]

STATISTICS_GROUP = "statistics"
"""Name of the statistics table's group inside an invocation group."""
STATISTICS_LAYOUT_ATTRIBUTE = "statisticsLayout"
"""Group attribute naming the table's layout version."""
STATISTICS_LAYOUT_VERSION = 2
"""The layout every writer stamps: the ``digest`` column."""
STATISTICS_LAYOUT_VERSIONS = frozenset({STATISTICS_LAYOUT_VERSION})
"""Layouts the readers read: the one every writer stamps."""
DIGEST_COLUMN = "digest"
"""The record digest column (uint64) of a layout-2 table, and the records table's column of it."""
DIGESTS_ATTRIBUTE = "digests"
"""Group attribute: ``false`` when the digest column holds placeholders (a source that has no digests)."""
DIGEST_ALGORITHM_ATTRIBUTE = "digestAlgorithm"
"""Group attribute naming the digest's construction (:data:`megadump_zarr.layout.digest.DIGEST_ALGORITHM`)."""
STATISTICS_COORDINATES = (
    "stage",
    "task_id",
    "owner_id",
    "core_type",
    "core_id",
    "worker",
    "io",
    "index",
    "name",
    "param_position",
    "shape",
    "dtype",
    "path",
    "payload",
)
"""The coordinate columns of a table (one value per row: where the record lies and what it is), in order."""
STATISTICS_VARIABLES = ("element_count", "nan_count", "inf_count", "min", "max", "mean", "l2norm", DIGEST_COLUMN)
"""The statistics columns of a layout-2 table, in order."""
MD5_COLUMN = "md5"
"""The records table's column of msprobe's per-tensor digest (``summary_mode: "md5"``; despite the name, the
CRC32 of the tensor's bytes as 8 hex digits), None elsewhere."""
MSPROBE_MD5 = "msprobeMd5"
"""A statistics table's attribute: msprobe's ``md5`` digest of each row (a string, or null), in row order."""
