"""Export one committed window to a single HDF5 file that netCDF4 readers (h5netcdf, xarray) open.

The file mirrors the window group: its root carries the window's attributes, and every group below
(invocations, ``stages/{stage}``, task groups) and every array keeps its path. Each data group (an L0
invocation group or an L1 task group) is a netCDF4 group: dimensions are HDF5 dimension scales written
through h5netcdf, coordinate arrays become coordinate variables, so::

    xr.open_dataset(h5_path, engine="h5netcdf", group="invocation_000000_forward/stages/expert_up/task_000000")

has the variables, dimensions, coordinates and values of ``xr.open_zarr`` on the same Zarr group.

The files are netCDF-4 files: netCDF4-python (the netCDF-C library) opens every one of them, as
h5netcdf does. Type mapping (netCDF-4 has no half-precision, bfloat16, float8 or boolean type; an HDF5
float16 dataset, which plain HDF5 allows, crashes netCDF-C):

* ``float16``, ``bfloat16``, ``float8_e4m3fn``, ``float8_e5m2`` → ``float32`` (exact: every value, NaN
  payload sign and signed zero included, is representable); such variables get ``storedDtypeHdf5 =
  "float32"`` and ``zarrDataType`` (the Zarr data type) attributes, next to the record's own
  ``originalDtype``, so ``values.astype(attrs["zarrDataType"])`` gives the stored bits back;
* ``bool`` → ``int8`` with attribute ``dtype = "bool"`` (xarray's convention: it decodes back to bool);
* every other numeric type as it is.

Attribute mapping: strings, integers (int64 range) and floats are stored natively; anything else
(lists, objects, booleans, ``null``, and strings holding a NUL character, which HDF5 strings cannot
hold but dumped names may) is JSON-encoded into a string, and the names of those attributes are
listed in the JSON string attribute ``_json_attrs`` of the same object. :func:`decode_hdf5_attrs` turns
either an xarray ``attrs`` mapping or an h5py ``attrs`` object back into the Zarr attributes. The file
root also carries ``hdf5Export`` (JSON: source, producer, time).

Arrays are copied block by block (each block at most 64 MiB, aligned to the Zarr chunks), so memory
stays bounded whatever the window size. HDF5 datasets are chunked like their Zarr arrays (chunks
capped at 16 MiB) and compressed with gzip + shuffle (or lzf, or nothing).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
import itertools
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["decode_hdf5_attrs", "export_hdf5"]

JSON_ATTRS = "_json_attrs"
_BLOCK_BYTES = 64 << 20  # most bytes of one copied block (source or converted, whichever is larger)
_CHUNK_BYTES = 16 << 20  # most bytes of one HDF5 chunk
_WIDENED = {
    "float16": np.dtype(np.float32),
    "bfloat16": np.dtype(np.float32),
    "float8_e4m3fn": np.dtype(np.float32),
    "float8_e5m2": np.dtype(np.float32),
}
_NETCDF_INTERNAL = frozenset(
    (
        "REFERENCE_LIST",
        "CLASS",
        "DIMENSION_LIST",
        "NAME",
        "_Netcdf4Dimid",
        "_Netcdf4Coordinates",
        "_nc3_strict",
        "_NCProperties",
    )
)
_RESERVED = _NETCDF_INTERNAL | {"_FillValue", JSON_ATTRS}
_COMPRESSIONS = ("gzip", "lzf", None)
_INT64 = (-(1 << 63), (1 << 63) - 1)


# --------------------------------------------------------------------------- attributes
def _encode_attrs(attrs: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Attributes HDF5 can hold: str/int/float natively, the rest as JSON strings listed in ``_json_attrs``."""
    out: dict[str, Any] = {}
    encoded: list[str] = []
    for key, value in attrs.items():
        if key in _RESERVED:
            raise ValueError(f"{where}: attribute name {key!r} is reserved in HDF5/netCDF4 and cannot be exported")
        if isinstance(value, str) and "\x00" not in value:
            out[key] = value
        elif (
            isinstance(value, (int, np.integer))
            and not isinstance(value, (bool, np.bool_))
            and _INT64[0] <= value <= _INT64[1]
        ):
            out[key] = np.int64(value)
        elif isinstance(value, (float, np.floating)):
            out[key] = np.float64(value)
        else:
            out[key] = json.dumps(value, ensure_ascii=False, allow_nan=True)
            encoded.append(key)
    if encoded:
        out[JSON_ATTRS] = json.dumps(encoded)
    return out


def decode_hdf5_attrs(attrs: Mapping[str, Any], *, keep_export_attrs: bool = False) -> dict[str, Any]:
    """The original (Zarr) attributes of an exported object.

    Args:
        attrs: ``Dataset.attrs``/``DataArray.attrs`` from xarray, or an h5py/h5netcdf attributes mapping
            (netCDF4's own bookkeeping attributes, which plain h5py shows, are skipped).
        keep_export_attrs: Keep what the export added (``storedDtypeHdf5``, ``zarrDataType``, ``dtype`` of
            booleans, ``hdf5Export``); dropped by default so the result equals the Zarr attributes.
    """
    plain = {key: attrs[key] for key in attrs if key not in _NETCDF_INTERNAL}  # h5py shows netCDF's own
    encoded = plain.pop(JSON_ATTRS, None)
    names = json.loads(_text(encoded)) if encoded is not None else []
    out: dict[str, Any] = {}
    for key, value in plain.items():
        if key in names:
            out[key] = json.loads(_text(value))
        elif isinstance(value, bytes):
            out[key] = value.decode("utf-8")
        elif isinstance(value, np.generic):
            out[key] = value.item()
        else:
            out[key] = value
    if not keep_export_attrs:
        for key in ("storedDtypeHdf5", "zarrDataType", "hdf5Export"):
            out.pop(key, None)
        if out.get("dtype") == "bool" and "dtype" not in names:
            out.pop("dtype")
    return out


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray) and value.shape == ():
        value = value.item()
    return str(value)


# --------------------------------------------------------------------------- blocks
def _hdf5_chunks(shape: tuple[int, ...], chunks: tuple[int, ...], itemsize: int) -> tuple[int, ...] | None:
    """HDF5 chunk shape: the Zarr chunks (clipped to the shape), halved along leading axes to <= 16 MiB."""
    if not shape or 0 in shape:
        return None
    out = [max(1, min(c, n)) for c, n in zip(chunks, shape)]
    while math.prod(out) * itemsize > _CHUNK_BYTES:
        axis = next((i for i, c in enumerate(out) if c > 1), None)
        if axis is None:
            break
        out[axis] = (out[axis] + 1) // 2
    return tuple(out)


def _blocks(shape: tuple[int, ...], chunks: tuple[int, ...], itemsize: int, limit: int) -> Iterator[tuple[slice, ...]]:
    """Regions covering ``shape``: whole Zarr chunks (grouped along axis 0 up to ``limit`` bytes), split
    further where one chunk alone exceeds ``limit``."""
    if not shape:
        yield ()
        return
    if 0 in shape:
        return
    block = [max(1, min(c, n)) for c, n in zip(chunks, shape)]
    size = math.prod(block) * itemsize
    if size < limit and block[0] < shape[0]:
        block[0] = min(shape[0], block[0] * max(1, limit // size))
    starts = [range(0, n, b) for n, b in zip(shape, block)]
    for corner in itertools.product(*starts):
        region = tuple(slice(s, min(s + b, n)) for s, b, n in zip(corner, block, shape))
        yield from _split(region, itemsize, limit)


def _split(region: tuple[slice, ...], itemsize: int, limit: int) -> Iterator[tuple[slice, ...]]:
    sizes = [s.stop - s.start for s in region]
    if math.prod(sizes) * itemsize <= limit or all(n <= 1 for n in sizes):
        yield region
        return
    axis = next(i for i, n in enumerate(sizes) if n > 1)
    inner = math.prod(sizes[axis + 1 :]) * itemsize
    step = max(1, limit // inner) if inner <= limit else 1
    for start in range(region[axis].start, region[axis].stop, step):
        piece = region[:axis] + (slice(start, min(start + step, region[axis].stop)),) + region[axis + 1 :]
        yield from _split(piece, itemsize, limit)


# --------------------------------------------------------------------------- export
def _target_dtype(dtype: np.dtype, where: str) -> tuple[np.dtype, dict[str, Any]]:
    """HDF5 dtype for a Zarr numpy dtype, and the attributes that record a conversion."""
    name = dtype.name
    if name in _WIDENED:
        target = _WIDENED[name]
        return target, {"storedDtypeHdf5": target.name, "zarrDataType": name}
    if dtype == np.bool_:
        return np.dtype(np.int8), {"dtype": "bool"}
    if dtype.kind in "iuf" and dtype.itemsize in (1, 2, 4, 8):
        return dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype, {}
    raise ValueError(f"{where}: data type {dtype} cannot be exported to HDF5")


def _open_window(window_url: str | os.PathLike[str], storage_options: Mapping[str, Any] | None) -> Any:
    import zarr

    import megadump_zarr.store.dtypes  # noqa: F401  (registers bfloat16/float8 with zarr)

    location = os.fspath(window_url)
    try:
        if storage_options:
            group = zarr.open_group(store=location, mode="r", storage_options=dict(storage_options))
        else:
            group = zarr.open_group(location, mode="r")
    except FileNotFoundError:
        raise FileNotFoundError(f"no Zarr window group at {location}") from None
    except Exception as error:  # zarr raises several types for a missing or foreign node
        raise ValueError(
            f"cannot open {location} as a Zarr window group: {_why(location, storage_options, error)}"
        ) from None
    attrs = group.attrs.asdict()
    if "schemaVersion" not in attrs or "windowIndex" not in attrs:
        raise ValueError(
            f"{location} is not a megadump_zarr window group (no schemaVersion/windowIndex attributes); pass the "
            f"path of rank_{{r}}/window_{{wwww}}"
        )
    from megadump_zarr.read.integrity import guard_window_group

    return guard_window_group(group, location)  # a missing or corrupt chunk of a committed window raises


def _why(location: str, storage_options: Mapping[str, Any] | None, error: BaseException) -> str:
    """Why zarr could not open the group: its document's own fault when it has one (zarr says "pop expected at
    most 1 argument, got 2" of a ``zarr.json`` that is a JSON list), else zarr's message.

    Args:
        location: The group's path or URL.
        storage_options: fsspec options for a URL.
        error: What zarr raised.
    """
    from megadump_zarr.read.location import get_bytes, open_location, parse_json

    try:
        raw = get_bytes(open_location(location, dict(storage_options or {})).store, "zarr.json")
        if raw is not None:
            parse_json(raw, f"{location.rstrip('/')}/zarr.json")
    except ValueError as plain:  # not JSON, or not a JSON object: named with the file
        return str(plain)
    except Exception:  # noqa: BLE001 - the document cannot be read here either: zarr's reason stands
        pass
    return str(error)


def export_hdf5(
    window_url: str | os.PathLike[str],
    h5_path: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    compression: str | None = "gzip",
    compression_level: int = 4,
    allow_incomplete: bool = False,
    overwrite: bool = False,
    progress: bool = False,
) -> Path:
    """Write one window (``ROOT/rank_{r}/window_{wwww}``) to an HDF5/netCDF4 file.

    Args:
        window_url: The window group: a local path or an fsspec URL.
        h5_path: The HDF5 file to create.
        storage_options: fsspec options for a URL.
        compression: ``"gzip"`` (with byte shuffle), ``"lzf"``, or None.
        compression_level: gzip level 0-9.
        allow_incomplete: Also export a window whose status is not ``"complete"`` (``"aborted"``, or
            ``"writing"`` — a window still being written or torn); its status is kept in the attributes.
        overwrite: Replace an existing ``h5_path`` (default: refuse).
        progress: Show a rich progress bar (one tick per array).

    Returns:
        ``h5_path``.

    Raises:
        ValueError: Not a window group, a window that is not complete (without ``allow_incomplete``), an
            unsupported data type or compression.
        FileExistsError: ``h5_path`` exists and ``overwrite`` is False.
    """
    import h5netcdf
    import h5py

    if compression not in _COMPRESSIONS:
        raise ValueError(f"compression must be one of {list(_COMPRESSIONS)}, got {compression!r}")
    group = _open_window(window_url, storage_options)
    window_attrs = group.attrs.asdict()
    status = window_attrs.get("status")
    if status in ("complete", "aborted"):
        from megadump_zarr.read.catalog import commit_evidence_problem

        consolidated = group.metadata.consolidated_metadata
        problem = commit_evidence_problem(
            window_attrs, None if consolidated is None else {key: {} for key in consolidated.metadata}
        )
        if problem is not None and not allow_incomplete:
            raise ValueError(
                f"window {os.fspath(window_url)}/zarr.json says status {status!r} but was never "
                f"committed: {problem} (a torn window; pass allow_incomplete=True to export it anyway)"
            )
    if status != "complete" and not allow_incomplete:
        raise ValueError(
            f"window {os.fspath(window_url)} has status {status!r}, not 'complete'; only committed complete windows "
            f"are exported (pass allow_incomplete=True to export it anyway)"
        )
    target = Path(h5_path)
    if target.exists() and not overwrite:
        raise FileExistsError(f"HDF5 file already exists: {target} (pass overwrite=True to replace it)")

    groups, arrays = _hierarchy(group)

    export_attrs = {
        "source": os.fspath(window_url),
        "exportedAt": datetime.now(timezone.utc).isoformat(),
        "producer": _producer(),
    }
    partial = target.with_name(f".{target.name}.partial-{os.getpid()}")
    try:
        # libver >= 1.8: dense attribute storage, so attributes over 64 KiB (long manifests) fit
        with (
            h5py.File(partial, "w", libver=("v108", "v110"), track_order=True) as raw,
            h5netcdf.File(raw, "w") as nc,
            _progress(progress, sum(map(len, arrays.values()))) as tick,
        ):
            for path, attrs in groups.items():
                h5group = nc if not path else nc.create_group(path)
                if not path:
                    attrs["hdf5Export"] = export_attrs
                _set_attrs(h5group.attrs, attrs, path or "/")
                _write_arrays(h5group, path, arrays.get(path, []), compression, compression_level, tick)
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return target


def _hierarchy(group: Any) -> tuple[dict[str, dict[str, Any]], dict[str, list[tuple[str, Any]]]]:
    """Group path -> attributes (parents first, ``""`` = the window) and group path -> its arrays.

    A committed window answers from its consolidated metadata. A torn window (status ``"writing"``: group
    documents are only written at commit) is listed from the store: every ``zarr.json`` below it, groups
    without a document implied (empty attributes) by the arrays under them. A window's task-record packs
    are exported as the task groups they hold, one HDF5 group per row, its attributes, records and row
    coordinates described from the pack's checked arrays along ``task`` and each record read from its row
    (:mod:`megadump_zarr.read.pack_record`); a torn window's pack cut short by the kill is left out.
    """
    import zarr

    from megadump_zarr.read.catalog import store_fetch
    from megadump_zarr.read.location import get_json, get_many, list_prefix, parse_json
    from megadump_zarr.read.pack_checks import PACK, pack_tables, rest_nodes, window_packs
    from megadump_zarr.read.pack_record import PackedTasks
    from megadump_zarr.read.pack_rows import PackedWindow

    prefix = f"{group.path}/" if group.path else ""
    groups: dict[str, dict[str, Any]] = {"": group.attrs.asdict()}
    arrays: dict[str, list[tuple[str, Any]]] = {}
    committed = group.metadata.consolidated_metadata is not None
    if committed:
        packs: dict[str, dict[str, dict[str, Any]]] = {}
        if any(PACK.match(path) for path in group.metadata.consolidated_metadata.flattened_metadata):
            # a window holding a pack: its documents as stored, its packs read and checked
            consolidated = (get_json(group.store, f"{prefix}zarr.json") or {}).get("consolidated_metadata") or {}
            nodes = dict(consolidated.get("metadata") or {})
            packs, kept = window_packs(nodes)
        if not packs:
            members = sorted(group.members(max_depth=None), key=lambda item: (item[0].count("/"), item[0]))
            for path, node in members:
                if isinstance(node, zarr.Group):
                    groups[path] = node.attrs.asdict()
                else:
                    parent, _, name = path.rpartition("/")
                    arrays.setdefault(parent, []).append((name, node))
            return groups, arrays
        tables = pack_tables(group.path, packs, store_fetch(group.store), stored=kept)
    else:
        keys = [k for k in list_prefix(group.store, prefix) if k.endswith("/zarr.json") and k != f"{prefix}zarr.json"]
        nodes = {
            key[len(prefix) : -len("/zarr.json")]: parse_json(raw, key)
            for key, raw in zip(keys, get_many(group.store, keys))
            if raw is not None
        }
        packs, _ = window_packs(nodes)
        tables = pack_tables(group.path, packs, store_fetch(group.store), strict=False)
    found: dict[str, dict[str, Any]] = {}
    for path, doc in rest_nodes(nodes).items():
        if doc.get("node_type") == "group":
            found[path] = doc.get("attributes") or {}
        elif doc.get("node_type") == "array":
            parent, _, name = path.rpartition("/")
            arrays.setdefault(parent, []).append((name, zarr.Array.from_dict(group.store_path / path, doc)))
    tasks = PackedTasks(tables)
    packed = PackedWindow(group.path, committed)  # one shard index read per shard
    for task_group in tasks.groups():
        found[task_group] = tasks.task_attributes(task_group) or {}
        for name in tasks.members(task_group):
            member = tasks.find(f"{task_group}/{name}")
            if member is not None:
                array = _PackedArray.of(group, packed, f"{task_group}/{name}", member)
                arrays.setdefault(task_group, []).append((name, array))
    if not committed:
        for parent in list(arrays):
            parts = parent.split("/") if parent else []
            for depth in range(1, len(parts) + 1):
                found.setdefault("/".join(parts[:depth]), {})
    for path in sorted(found, key=lambda p: (p.count("/"), p)):
        groups[path] = found[path]
    for members in arrays.values():
        members.sort(key=lambda item: item[0])
    return groups, arrays


class _PackedArray:
    """A packed record (or a packed task's row coordinate) as the export sees an array: its description (shape,
    data type, chunks, dimension names, attributes), read from where it is stored (its pack row).

    Args:
        path: Its path as the export names it (relative to the store's root).
        doc: Its description (:class:`~megadump_zarr.read.pack_record.PackedRecord` ``.doc``).
        stored: Where it is read from (:class:`~megadump_zarr.read.pack_arrays.RowArray` or ``RangeArray``).
    """

    def __init__(self, path: str, doc: Mapping[str, Any], stored: Any) -> None:
        from types import SimpleNamespace

        self.path, self._stored = path, stored
        self.shape, self.dtype, self.chunks = tuple(stored.shape), stored.dtype, tuple(stored.chunks)
        self.ndim = len(self.shape)
        names = doc.get("dimension_names")
        self.metadata = SimpleNamespace(
            dimension_names=tuple(names) if names else None,
            encode_chunk_key=lambda coords: "c" + "".join(f".{c}" for c in coords),
        )
        attrs = dict(doc.get("attributes") or {})
        self.attrs = SimpleNamespace(asdict=lambda: dict(attrs))

    @classmethod
    def of(cls, group: Any, packs: Any, rel: str, member: Any) -> _PackedArray:
        """A packed member of window ``group`` found at ``rel`` (its path relative to the window).

        Args:
            group: The window's zarr group.
            packs: Reads the window's rows (:class:`~megadump_zarr.read.pack_rows.PackedWindow`).
            rel: The member's path relative to the window.
            member: A :class:`~megadump_zarr.read.pack_record.PackedRecord` or ``PackedCoordinate``.
        """
        from megadump_zarr.read.pack_arrays import RangeArray, RowArray
        from megadump_zarr.read.pack_record import PackedRecord

        key = f"{group.path}/{rel}" if group.path else rel
        if not isinstance(member, PackedRecord):
            return cls(key, member.doc, RangeArray(member.start, member.stop))
        array = f"{group.path}/{member.array}" if group.path else member.array
        stored = RowArray(
            packs, group.store, array, member.pack_doc, member.row, key, member.shape, "", member.source()
        )
        return cls(key, member.doc, stored)

    def __getitem__(self, selection: Any) -> Any:
        return self._stored[selection]

    def get_block_selection(self, coords: tuple[int, ...]) -> Any:
        return self._stored.get_block_selection(coords)


def _producer() -> str:
    from megadump_zarr._version import __version__

    return f"megadump_zarr {__version__}"


def _set_attrs(target: Any, attrs: Mapping[str, Any], where: str) -> None:
    for key, value in _encode_attrs(attrs, where).items():
        target[key] = value


def _write_arrays(
    h5group: Any, path: str, members: list[tuple[str, Any]], compression: str | None, level: int, tick: Any
) -> None:
    """One data group: dimensions first, then coordinate variables, then data variables."""
    dims: dict[str, int] = {}
    described = []
    for name, array in members:
        where = f"{path}/{name}" if path else name
        names = array.metadata.dimension_names
        names = (
            tuple(names) if names is not None and all(names) else tuple(f"{name}_dim_{i}" for i in range(array.ndim))
        )
        for dim, length in zip(names, array.shape):
            if dims.setdefault(dim, length) != length:
                raise ValueError(
                    f"{where}: dimension {dim!r} has length {length} here and {dims[dim]} elsewhere in the group"
                )
        described.append((name, array, names, where))
    for dim, length in dims.items():
        h5group.dimensions[dim] = length
    is_coordinate = lambda item: item[2] == (item[0],)  # noqa: E731
    for name, array, names, where in sorted(described, key=lambda item: not is_coordinate(item)):
        _copy_array(h5group, name, array, names, where, compression, level)
        tick(where)


def _copy_array(
    h5group: Any, name: str, array: Any, dims: tuple[str, ...], where: str, compression: str | None, level: int
) -> None:
    source = np.dtype(array.dtype)
    from megadump_zarr.read.integrity import guard_read

    if source.kind in "TU":  # Zarr v3 "string" (statistics tables' coordinates): netCDF-4 variable-length strings
        values = np.asarray(guard_read(array, array.path or where, lambda: array[...]))
        import h5py

        variable = h5group.create_variable(name, dims, dtype=h5py.string_dtype())
        if values.size:
            variable[...] = values.astype(object)
        _set_attrs(variable.attrs, array.attrs.asdict(), where)
        return
    dtype, extra = _target_dtype(source, where)
    attrs = array.attrs.asdict()
    clash = sorted(set(extra) & set(attrs))
    if clash:
        raise ValueError(f"{where}: attributes {clash} would be overwritten by the HDF5 type mapping")
    shape = tuple(array.shape)
    zarr_chunks = tuple(array.chunks)
    if len(zarr_chunks) != len(shape) or not all(isinstance(c, int) and c > 0 for c in zarr_chunks):
        raise ValueError(
            f"{where}/zarr.json: chunk_grid chunk_shape {list(zarr_chunks)} is not {len(shape)} "
            "positive integers (an edited or corrupt array document)"
        )
    chunks = _hdf5_chunks(shape, zarr_chunks, dtype.itemsize)
    options: dict[str, Any] = {}
    if chunks is not None:
        options["chunks"] = chunks
        if compression == "gzip":
            options.update(compression="gzip", compression_opts=int(level), shuffle=True)
        elif compression == "lzf":
            options.update(compression="lzf", shuffle=True)
    variable = h5group.create_variable(name, dims, dtype=dtype, **options)
    itemsize = max(source.itemsize, dtype.itemsize)
    for region in _blocks(shape, zarr_chunks, itemsize, _BLOCK_BYTES):
        block = np.asarray(guard_read(array, array.path or where, lambda: array[region]))
        variable[region] = block.astype(dtype, copy=False) if block.dtype != dtype else block
    _set_attrs(variable.attrs, {**attrs, **extra}, where)


class _NullTick:
    def __call__(self, description: str | None = None) -> None:
        return None


class _progress:  # noqa: N801 - a context manager used like a function
    def __init__(self, enabled: bool, total: int) -> None:
        self.enabled, self.total = enabled, total
        self.bar: Any = None

    def __enter__(self) -> Any:
        if not self.enabled:
            return _NullTick()
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        self.bar.__enter__()
        task = self.bar.add_task("exporting arrays", total=self.total)

        def tick(description: str | None = None) -> None:
            self.bar.update(task, advance=1, description=description or "exporting arrays")

        return tick

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)
