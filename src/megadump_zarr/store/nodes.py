"""Validate one ``InvocationWrite`` and turn it into the groups and arrays to write.

Everything here is checked before a single byte of the invocation is written, so a bad description
never leaves a half-written invocation behind:

- path components: not empty, ``.``, ``..``, ``zarr.json``; no ``\\`` or NUL; not starting with the
  reserved ``__`` (the caller sanitises names; the store defends);
- collisions: two arrays (or two groups) with one path, an array or coordinate whose path is a group's
  path or lies below an array;
- dimensions: one name per axis, no repeated name in one array, and one length per name per group;
- coordinates: one 1-D array per (group, dimension); two arrays giving different values for it clash.

With ``pack``, packable L1 task groups become task-record packs (see :mod:`.pack_groups`): their groups,
records and coordinates are validated like any other, then listed in ``InvocationNodes.packs`` instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from megadump_zarr.layout.write_model import InvocationWrite
from megadump_zarr.store.chunking import ChunkPlan, plan_chunks
from megadump_zarr.store.metadata import data_type_name, dumps
from megadump_zarr.store.pack_groups import PackGroup, pack_groups_of

__all__ = ["ArrayJob", "InvocationNodes", "check_component", "invocation_nodes"]


@dataclass
class ArrayJob:
    """One array to write.

    Args:
        path: Path relative to the invocation group.
        data: C-contiguous little-endian data.
        dims: Dimension names.
        attrs: Attributes to store (``stats`` is added by the writer when enabled).
        attrs_json: ``attrs`` encoded, which also proves they are JSON-serialisable.
        chunks: Chunk plan.
        stats: Whether to compute statistics.
    """

    path: str
    data: np.ndarray
    dims: tuple[str, ...]
    attrs: dict[str, Any]
    attrs_json: bytes
    chunks: ChunkPlan
    stats: bool
    document: bytes | None = field(default=None, repr=False)  # set by the writer
    written: bool = False  # set by the writer once chunks and zarr.json are stored


@dataclass
class InvocationNodes:
    """What to write for one invocation.

    Args:
        name: Invocation group name.
        groups: Group path (``""`` = the invocation group) to encoded attributes, parents before children.
        arrays: Arrays (data arrays first, then coordinate arrays).
        packs: Task-record packs (their groups are in ``groups``, their arrays in :class:`PackGroup`, not in
            ``arrays``).
    """

    name: str
    groups: dict[str, bytes]
    arrays: list[ArrayJob]
    packs: list[PackGroup] = field(default_factory=list)


def check_component(part: str, what: str, path: str) -> None:
    """Reject a path component that is unsafe or reserved.

    Args:
        part: One ``/``-separated component.
        what: What the path names, for the message (``"array"``, ``"group"``, ...).
        path: The whole path, for the message.

    Raises:
        ValueError: Naming the path and the offending component.
    """
    if part in ("", ".", "..", "zarr.json") or "\\" in part or "\x00" in part or part.startswith("__"):
        raise ValueError(
            f"{what} path {path!r} has an invalid component {part!r}: components must not be empty, '.', "
            f"'..' or 'zarr.json', contain '\\\\' or NUL, or start with the reserved '__'"
        )


def _split(path: str, what: str, good: set[str] | None = None) -> list[str]:
    """Check every component of ``path``; ``good`` remembers components already checked (one plan's set)."""
    if not isinstance(path, str):
        raise TypeError(f"{what} path must be a string, got {type(path).__name__}")
    parts = path.split("/")
    for part in parts:
        if good is None or part not in good:
            check_component(part, what, path)
            if good is not None:
                good.add(part)
    return parts


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


def _join(group: str, name: str) -> str:
    return f"{group}/{name}" if group else name


def _normalise(data: Any, path: str, label: Any = None) -> np.ndarray:
    array = data if type(data) is np.ndarray else np.asarray(data)
    try:
        data_type_name(array.dtype)
    except TypeError as exc:
        raise TypeError(f"array {label(path) if label else path!r}: {exc}") from None
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    return array


def invocation_nodes(
    invocation: InvocationWrite, *, chunk_bytes: int, stats: bool, pack: bool = False
) -> InvocationNodes:
    """Validate an invocation and list its groups and arrays.

    Args:
        invocation: The invocation to persist.
        chunk_bytes: Chunk size target for :func:`plan_chunks`.
        stats: Whether data arrays get statistics.
        pack: Store packable task groups as task-record packs.

    Raises:
        ValueError: Bad path component, collision, dimension-length clash or coordinate clash.
        TypeError: Unsupported dtype or attributes that are not JSON-serialisable.
    """
    name = invocation.name
    _split(name, "invocation")

    def label(path: str) -> str:  # a path as users see it: relative to the window
        return f"{name}/{path}" if path else name

    groups: dict[str, Mapping[str, Any]] = {"": invocation.attrs}
    explicit: set[str] = set()
    good: set[str] = set()  # components already checked
    for group in invocation.groups:
        _split(group.path, "group", good)
        if group.path in explicit:
            raise ValueError(f"group {label(group.path)!r} is declared twice and would collide with itself")
        explicit.add(group.path)
        groups[group.path] = group.attrs

    arrays: dict[str, Any] = {}
    for item in invocation.arrays:
        _split(item.path, "array", good)
        if item.path in arrays:
            raise ValueError(f"array {label(item.path)!r} would collide with array {label(item.path)!r}")
        arrays[item.path] = item

    # implicit parent groups (empty attributes)
    for path in [*groups, *arrays]:
        parent = _parent(path)
        while parent and parent not in groups:
            groups[parent] = {}
            parent = _parent(parent)
        if path in arrays:
            ancestor = _parent(path)
            while ancestor:
                if ancestor in arrays:
                    raise ValueError(f"array {label(path)!r} would collide with array {label(ancestor)!r}")
                ancestor = _parent(ancestor)
    for path in arrays:
        if path in groups:
            raise ValueError(f"array {label(path)!r} would collide with group {label(path)!r}")

    lengths: dict[tuple[str, str], int] = {}
    coords: dict[tuple[str, str], tuple[np.ndarray, str]] = {}
    jobs: list[ArrayJob] = []
    pending: list[tuple[str, np.ndarray, tuple[str, ...], dict[str, Any]]] = []

    def use_dim(group: str, dim: str, length: int) -> None:
        known = lengths.setdefault((group, dim), length)
        if known != length:
            raise ValueError(f"dimension {dim!r} has lengths {known} and {length} in group {label(group)!r}")

    for path, item in arrays.items():
        data = _normalise(item.data, path, label)
        dims = tuple(item.dims)
        if len(dims) != data.ndim or not all(isinstance(d, str) and d for d in dims):
            raise ValueError(
                f"array {label(path)!r} has shape {data.shape} but dims {dims!r}: need one non-empty name per axis"
            )
        if len(set(dims)) != len(dims):
            raise ValueError(f"array {label(path)!r} repeats a dimension name in {dims!r}")
        group = _parent(path)
        for dim, size in zip(dims, data.shape, strict=True):
            use_dim(group, dim, int(size))
        attrs = item.attrs if type(item.attrs) is dict and not (stats and "stats" in item.attrs) else dict(item.attrs)
        if stats:
            attrs.pop("stats", None)
        pending.append((path, data, dims, attrs))
        for dim, values in item.coords.items():
            known = coords.get((group, dim))
            if known is not None and known[0] is values:  # one coordinate object shared by a group's arrays
                continue
            coord_path = _join(group, dim)
            _split(coord_path, "coordinate", good)
            values = _normalise(values, coord_path, label)
            if values.ndim != 1:
                raise ValueError(f"coordinate {dim!r} of array {label(path)!r} must be 1-D, got shape {values.shape}")
            if known is not None:
                if known[0].shape != values.shape or not np.array_equal(known[0], values, equal_nan=_is_float(values)):
                    raise ValueError(
                        f"coordinate {dim!r} in group {label(group)!r} differs between arrays "
                        f"{label(known[1])!r} and {label(path)!r}"
                    )
                continue
            if coord_path in arrays:
                raise ValueError(f"coordinate {label(coord_path)!r} would collide with array {label(coord_path)!r}")
            if coord_path in groups:
                raise ValueError(f"coordinate {label(coord_path)!r} would collide with group {label(coord_path)!r}")
            use_dim(group, dim, int(values.shape[0]))
            coords[(group, dim)] = (values, path)

    ordered = sorted(groups, key=lambda p: (p.count("/") if p else -1, p))
    encoded = {}
    for path in ordered:
        encoded[path] = _encode_attrs(groups[path], lambda: f"group {label(path)!r}")
    packs: list[PackGroup] = []
    packed: set[str] = set()
    if pack:
        packs, packed = pack_groups_of(
            invocation.groups,
            groups,
            pending,
            coords,
            chunk_bytes=chunk_bytes,
            label=label,
            encode=lambda attrs, path: _encode_attrs(attrs, lambda: f"array {label(path)!r}"),
        )
        for path in packed:
            del encoded[path]
        for item in packs:
            encoded[item.path] = item.attrs_json
    for path, data, dims, attrs in pending:
        if not packed or _parent(path) not in packed:
            jobs.append(_job(path, data, dims, attrs, chunk_bytes, stats, label))
    for (group, dim), (values, _) in coords.items():
        if group not in packed:
            jobs.append(_job(_join(group, dim), values, (dim,), {}, chunk_bytes, False, label))
    return InvocationNodes(name, encoded, jobs, packs)


def _is_float(values: np.ndarray) -> bool:
    return values.dtype.kind == "f"


def _encode_attrs(attrs: Mapping[str, Any], what: str | Any) -> bytes:
    """Encode attributes; ``what`` (a string, or a callable giving it) names the node in the error."""
    try:
        return dumps(attrs if type(attrs) is dict else dict(attrs))
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"attributes of {what if isinstance(what, str) else what()} are not JSON-serialisable: {exc}"
        ) from None


def _job(path, data, dims, attrs, chunk_bytes, stats, label) -> ArrayJob:
    return ArrayJob(
        path=path,
        data=data,
        dims=dims,
        attrs=attrs,
        attrs_json=_encode_attrs(attrs, lambda: f"array {label(path)!r}"),
        chunks=plan_chunks(data.shape, data.dtype.itemsize, chunk_bytes),
        stats=stats,
    )
