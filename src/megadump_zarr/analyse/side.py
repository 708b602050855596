"""One side of a comparison, opened once: what :func:`open_side` accepts and the :class:`Side` it gives.

``compare(a, b)`` opens each argument once, at the start, and every later step asks the side (its
kind, its records, its tensors), never the object it was given:

* :class:`DumpSide`: a dump, that is an opened ``Dump``, a path or URL (opened with ``open_dump``, an
  msprobe dump directory included) or anything with the three dump methods ``records()``,
  ``record_array(path)`` and ``tensor(name, **select)`` (a records view, a test double). It gives the
  records table filtered by the one filter engine (:func:`megadump_zarr.read.select.select_records`) in
  execution order, whether a record holds its payload or statistics only, the payload's host digest,
  a record's lineage, and the source a record unit carries to a worker.
* :class:`ReferenceSide`: named tensors, a mapping name → tensor (a ``state_dict``, the tensors of an
  eager run) or an ``xarray.Dataset`` (its data variables).
* :class:`ArraySide`: one array-like (numpy, torch, a DataArray, a zarr array), compared with another
  as one row.
"""

from __future__ import annotations

from collections.abc import Mapping
import contextlib
from dataclasses import dataclass
import os
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeAlias

import pandas as pd

from megadump_zarr.analyse.matching import execution_order, holds_payload, scalar

if TYPE_CHECKING:
    import xarray as xr

__all__ = [
    "ArraySide",
    "DumpLike",
    "DumpSide",
    "ReferenceSide",
    "Side",
    "SideInput",
    "SideKind",
    "open_dump_side",
    "open_side",
]

SideKind: TypeAlias = Literal["dump", "reference", "array"]
"""What a side is: a dump (records matched by path), a reference (tensors by name), one array."""

_DUMP_METHODS = ("records", "record_array", "tensor")


class DumpLike(Protocol):
    """What the analysis layer reads of a dump (``megadump_zarr.read.Dump`` and its views have more)."""

    def records(self) -> pd.DataFrame:
        """One row per stored tensor (see :mod:`megadump_zarr.analyse.compare`)."""

    def record_array(self, path: str) -> Any:
        """One record as a lazy array in its logical shape."""

    def tensor(self, name: str, **select: Any) -> Any:
        """A named tensor (an L0 array or a stitched L1 view)."""


class Side(Protocol):
    """One side of a comparison: its kind and the object behind it (see the module docstring)."""

    @property
    def kind(self) -> SideKind:
        """``"dump"``, ``"reference"`` or ``"array"``."""

    @property
    def value(self) -> Any:
        """The dump, the reference collection or the array."""

    @property
    def type_name(self) -> str:
        """The type of :attr:`value`, for messages."""


SideInput: TypeAlias = "str | os.PathLike[str] | DumpLike | Mapping[str, Any] | xr.Dataset | Side | Any"
"""What :func:`open_side` accepts: a dump path/URL, a dump, a name → tensor mapping, a Dataset, a side
(returned as it is), or any other value, taken as one array-like."""


def _is_dump_like(x: Any) -> bool:
    return all(callable(getattr(x, m, None)) for m in _DUMP_METHODS)


# ---------------------------------------------------------------------------------------------------- dump
@dataclass(frozen=True, eq=False)
class DumpSide:
    """A dump as one side of a comparison.

    Args:
        value: The opened dump (anything with ``records``, ``record_array`` and ``tensor``).
    """

    value: Any
    kind: ClassVar[SideKind] = "dump"

    def __post_init__(self) -> None:
        if not _is_dump_like(self.value):
            missing = [m for m in _DUMP_METHODS if not callable(getattr(self.value, m, None))]
            raise TypeError(f"DumpSide.value must be a dump, {type(self.value).__name__} has no {', '.join(missing)}")

    @property
    def type_name(self) -> str:
        """The dump's type, for messages."""
        return type(self.value).__name__

    def records(self, select: Mapping[str, Any], names: list[str] | None = None) -> pd.DataFrame:
        """The dump's records that ``select`` and ``names`` keep, in execution order.

        The per-window tables are built on the active dask cluster first, if there is one
        (:func:`~megadump_zarr.analyse.records.prefetch_records`).

        Args:
            select: Record filters (:func:`megadump_zarr.read.select.filter_mask`) or any other
                ``records()`` column (equality, or membership for a list); None values are ignored.
            names: Only these tensor names (or shell-style patterns, as ``--name``); None: all.

        Raises:
            ValueError: An unknown filter (the message lists the filters and the columns).
        """
        from megadump_zarr.analyse.records import prefetch_records
        from megadump_zarr.read.select import filter_mask, select_records

        kept = select_records(prefetch_records(self.value).records(), select, columns=True)
        if names is not None:
            kept = kept[filter_mask(kept, "name", names)]
        return execution_order(kept)

    def tensor(self, name: str, **select: Any) -> Any:
        """Tensor ``name`` (``Dump.tensor``: an L0 array or a stitched L1 view).

        Args:
            name: The tensor name.
            **select: The dump's tensor selection (rank, window, invocation, stage, io, kernel, task, ...).
        """
        return self.value.tensor(name, **select)

    def unit_source(self) -> Any:
        """What a record unit carries for this dump: the dump itself locally, its ``DumpSource`` (URL and
        storage options, picklable) when a distributed cluster runs the units."""
        from megadump_zarr.analyse.parallel import active_client

        if active_client() is None or not hasattr(self.value, "location"):
            return self.value
        from megadump_zarr.read.source import DumpSource

        return DumpSource.of(self.value) or self.value

    @staticmethod
    def holds_payload(row: Mapping[str, Any]) -> bool:
        """Whether a ``records()`` row stored its payload (False: statistics only; a table without the
        ``payload`` column is a tensor-mode dump, every record has one).

        Args:
            row: A ``records()`` row.
        """
        return holds_payload(row)

    def lineage(self, path: str, row: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The lineage columns of a record (``role``, ``capture_phase``, ``producers``, ``consumers``, ``ports``).

        Read from the record's array attributes (metadata only); with ``row`` given, a statistics-only
        record's are taken from its ``records()`` row instead (it has no array document, and a 1000-step
        dump holds thousands of them). A record whose metadata cannot be read has none (all None).

        Args:
            path: The record path.
            row: Its ``records()`` row, or None to read the metadata whatever the record holds.
        """
        if row is not None and not self.holds_payload(row):
            return {
                "role": scalar(row.get("role")),
                "capture_phase": scalar(row.get("capture_phase")),
                "producers": None,
                "consumers": None,
                "ports": None,
            }
        attrs: dict[str, Any] = {}
        if hasattr(self.value, "_record"):
            with contextlib.suppress(Exception):
                attrs = self.value._record(path)[2].get("attributes") or {}
        producers, consumers, ports = attrs.get("producers"), attrs.get("consumers"), attrs.get("ports")
        port_pairs = None
        if isinstance(ports, list):
            port_pairs = tuple((str(p.get("stage")), str(p.get("io"))) for p in ports if isinstance(p, dict))
        return {
            "role": attrs.get("role"),
            "capture_phase": attrs.get("capturePhase"),
            "producers": tuple(producers) if isinstance(producers, list) else None,
            "consumers": tuple(consumers) if isinstance(consumers, list) else None,
            "ports": port_pairs,
        }

    def payload_digest(self, row: Mapping[str, Any]) -> int | None:
        """The record digest of a record's stored payload, computed on the host; None when the record has
        no payload, is truncated or already carries a digest
        (:func:`~megadump_zarr.analyse.bitwise.payload_digest`).

        Args:
            row: The record's ``records()`` row.

        Raises:
            Exception: The payload cannot be read (what the read layer raises).
        """
        from megadump_zarr.analyse.bitwise import payload_digest

        return payload_digest(self.value, row)


# ---------------------------------------------------------------------------------------------------- reference
@dataclass(frozen=True, eq=False)
class ReferenceSide:
    """Named tensors as one side of a comparison.

    Args:
        value: A mapping name → tensor/array, or an ``xarray.Dataset`` (its data variables).
    """

    value: Any
    kind: ClassVar[SideKind] = "reference"

    def __post_init__(self) -> None:
        if not _is_collection(self.value):
            raise TypeError(
                f"ReferenceSide.value must be a mapping or an xarray.Dataset, got {type(self.value).__name__}"
            )

    @property
    def type_name(self) -> str:
        """The collection's type, for messages."""
        return type(self.value).__name__

    def names(self) -> list[str]:
        """The tensor names, in the collection's order (a Dataset's data variables, a mapping's keys)."""
        import xarray as xr

        if isinstance(self.value, xr.Dataset):
            return [str(n) for n in self.value.data_vars]
        return [str(n) for n in self.value]

    def get(self, name: str) -> Any:
        """Tensor ``name``, or None when the collection has none.

        Args:
            name: The tensor name.
        """
        import xarray as xr

        if isinstance(self.value, xr.Dataset):
            return self.value.data_vars[name] if name in self.value.data_vars else None
        return self.value.get(name)


def _is_collection(x: Any) -> bool:
    import xarray as xr

    return isinstance(x, (Mapping, xr.Dataset))


# ---------------------------------------------------------------------------------------------------- array
@dataclass(frozen=True, eq=False)
class ArraySide:
    """One array-like as one side of a comparison (compared with another array-like as one row).

    Args:
        value: The array (numpy, torch, a DataArray, a zarr array, ...).
    """

    value: Any
    kind: ClassVar[SideKind] = "array"

    @property
    def type_name(self) -> str:
        """The array's type, for messages."""
        return type(self.value).__name__


# ---------------------------------------------------------------------------------------------------- opening
def open_side(x: SideInput) -> DumpSide | ReferenceSide | ArraySide:
    """The side ``x`` is, opened once: a path or URL is opened with ``open_dump`` here, and only here.

    Args:
        x: Either argument of ``compare`` (see :data:`SideInput`); a side is returned as it is.
    """
    if isinstance(x, (DumpSide, ReferenceSide, ArraySide)):
        return x
    if isinstance(x, (str, os.PathLike)):
        from megadump_zarr.read import open_dump

        return DumpSide(open_dump(x))
    if _is_dump_like(x):
        return DumpSide(x)
    if _is_collection(x):
        return ReferenceSide(x)
    return ArraySide(x)


def open_dump_side(x: SideInput, what: str) -> DumpSide:
    """:func:`open_side` for an argument that must be a dump.

    Args:
        x: A dump, or a path/URL of one.
        what: The argument, for the message (``"first_nonfinite's dump"``).

    Raises:
        TypeError: ``x`` is no dump (the message names its type).
    """
    side = open_side(x)
    if not isinstance(side, DumpSide):
        raise TypeError(f"{what} must be a dump (a Dump, or a path or URL of one), not {side.type_name}")
    return side
