"""Task-record packs: how schema 7 stores the small records of an L1 stage, and how they read back.

Schema 6 gave every L1 task a group, every record an array and every row coordinate an array: 11
file-system operations for a task of two records, the whole cost of a window of small tiles. Schema 7
stores the tasks of one stage whose records all fit in one chunk (``PACK_MAX_RECORD_BYTES``) and have
the same signature (record names, dtypes, shapes, dimensions and coordinates) as one **pack**:

* ``stages/{stage}/pack_{pppp}/`` — a data group (consolidated metadata of its children, so plain
  ``xr.open_zarr`` opens it), attributes ``{"megadumpPack": 4, "stage": ..., "taskCount": T}`` (only for
  two or more tasks of one signature: a shape unique in its stage stays a task group, see ``pack_groups``);
* ``pack/task_id`` — int64 ``(T,)``, dims ``("task",)``: the task ids (format 1, schema 7: ``pack/task``,
  the dimension's index coordinate; readers read both). Each row's task entry is
  ``{"group": "task_000007", "attrs": {...the schema-6 task group attributes...}, "coords": {"token": [start,
  stop], ...}}`` (each schema-6 row coordinate of the task, always ``arange(start, stop)``): format 4 keeps the
  entries in ``row_fields``; formats 1-3 kept them as the list ``attributes.tasks`` of this array;
* ``pack/owner_id`` and ``pack/core_id`` — int64 ``(T,)``, dims ``("task",)`` (for xarray users);
* ``pack/global_{dim}`` (format 3) — int64 ``(T, n)``, dims ``("task", dim)``, one per row coordinate: each row's
  global indices along ``dim``, ``arange(start, stop)`` of its ``coords`` entry (where the task's rows sit in
  the stitched tensor), attributes ``{"megadumpRowCoordinate": dim, "long_name": ...}``; ``verify`` checks the
  values against ``coords``;
* ``pack/row_fields`` (format 4) — float64 ``(T, C)``, dims ``("task", "field")``: each row's varying task and
  record attributes (ids, statistics, offsets, ...) as columns, what the rows share stored once in its
  attributes (:mod:`.pack_fields`);
* ``pack/{record}`` (``input_00_x`` ...) — shape ``(T, *record_shape)``, dims ``("task", *record_dims)``,
  Zarr v3 ``sharding_indexed``: inner chunk ``(1, *record_shape)`` whose codec chain is exactly the
  schema-6 record's (bytes, blosc or none, crc32c), shards of ``shard_rows`` tasks, index at the end
  (``(offset, nbytes)`` little-endian uint64 per inner chunk, then its crc32c). Attributes
  ``{"coordinates": "task_id owner_id core_id global_token row_fields", "shardCrc32c": ...}``: the CF
  ``coordinates`` xarray decodes (plain ``xr.open_zarr(pack)`` shows the id arrays as coordinates along
  ``task``, format 2, the row coordinates, format 3, and ``row_fields``, format 4), then ``"shardCrc32c"``
  (:data:`SHARD_DIGEST_ATTR`; with checksums only): 8 lower-case hex digits per shard in grid order,
  :func:`shard_digest` (the crc32c of its chunks' crc32c and its index), so ``verify`` tells a shard valid
  elsewhere (copied from another window, swapped with a same-shaped one) from its own, as the tasks layout's
  ``chunkCrc32c`` does for chunks (``store.chunk_digests``); packs written before it record none (not bound).
  Each row's schema-6 record attributes (``stats`` included) are in ``row_fields`` (format 4; formats 1-3: the
  list ``attributes.records`` of this array).

So a stage of 2048 tasks of two 8 KiB records is 8 shard files plus a handful of documents instead of
22,528 files and directories, and every physical array is a plain Zarr v3 array that zarr-python and
tensorstore read.

Readers describe a pack's records as the tasks layout stores them: a format-4 pack's rows are first put back as
format 3's lists (``pack_fields.hydrate_pack``, from its one ``row_fields`` chunk), then :func:`expand_pack` turns a
pack's documents into their task groups, record arrays and row coordinates and tells where each record's chunk is (an inner
chunk of a shard, byte for byte the tasks layout's chunk, checksum included; or a row-index range), and
``read.pack_rows`` reads each record as its row of the pack array.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
import struct
from typing import Any

import google_crc32c
import numpy as np

from megadump_zarr.layout.schema import PACK_STORAGE  # re-exported: the format's name for its windows
from megadump_zarr.store.pack_fields import FIELDS_ARRAY

__all__ = [
    "COORDINATES_ATTR",
    "INDEX_ARRAYS",
    "INDEX_CODECS",
    "NO_CHUNK",
    "OWNER_ARRAY",
    "CORE_ARRAY",
    "PACK_ATTR",
    "PACK_COORDINATES",
    "PACK_MAX_RECORD_BYTES",
    "PACK_PREFIX",
    "PACK_SHARD_BYTES",
    "PACK_STORAGE",
    "PACK_VERSION",
    "PACK_VERSIONS",
    "RECORDS_ATTR",
    "ROW_COORDINATE_ATTR",
    "ROW_COORDINATE_PREFIX",
    "TASKS_ATTR",
    "TASK_ARRAY",
    "TASK_ARRAYS",
    "TASK_ARRAY_V1",
    "TASK_DIM",
    "SHARD_DIGEST_ATTR",
    "RangeSource",
    "ShardSource",
    "decode_index",
    "encode_index",
    "expand_pack",
    "index_nbytes",
    "is_pack_group",
    "pack_name",
    "range_chunk",
    "row_coordinate_attrs",
    "row_coordinate_name",
    "row_coordinate_names",
    "shard_rows",
    "shard_digest",
    "shard_digest_of",
    "sharded_codecs",
    "task_array_name",
]

PACK_PREFIX = "pack_"
PACK_ATTR = "megadumpPack"  # pack group attribute: the pack format version
PACK_VERSION = 4
"""The pack format the writer writes: 4 keeps each row's varying attributes in ``row_fields``
(:mod:`.pack_fields`) instead of JSON lists; 3 stores each row coordinate's global rows as an array along
``task`` (``global_{dim}``); 2 names the task id array ``task_id`` (1, schema 7's: ``task``)."""
PACK_VERSIONS = (1, 2, 3, 4)
"""Pack formats readers know."""
TASK_DIM = "task"
"""The dimension along a pack's rows."""
TASK_ARRAY = "task_id"
"""The task id array of a format-2 pack (dims ``("task",)``: a coordinate, not the dimension's index)."""
TASK_ARRAY_V1 = "task"
"""The task id array of a format-1 pack (schema 7; the ``task`` dimension's index coordinate)."""
TASK_ARRAYS = (TASK_ARRAY, TASK_ARRAY_V1)
OWNER_ARRAY = "owner_id"
CORE_ARRAY = "core_id"
INDEX_ARRAYS = (TASK_ARRAY, TASK_ARRAY_V1, OWNER_ARRAY, CORE_ARRAY, FIELDS_ARRAY)
"""A pack's per-row arrays that are not records (a record never takes one of these names)."""
ROW_COORDINATE_PREFIX = "global_"
"""Format 3: the pack array ``global_{dim}`` (int64 ``(T, n)``, dims ``("task", dim)``) holds each row's global
``dim`` indices, ``arange(start, stop)`` of its ``attributes.tasks[row].coords.{dim}`` (the stitched tensor's rows),
so plain xarray sees where each task's rows sit; a record name or dimension never starts with the prefix."""
ROW_COORDINATE_ATTR = "megadumpRowCoordinate"
"""A format-3 row coordinate array's attribute naming its dimension (what tells it from a record array)."""
COORDINATES_ATTR = "coordinates"
PACK_COORDINATES = f"{TASK_ARRAY} {OWNER_ARRAY} {CORE_ARRAY}"
"""A format-2 record array's ``coordinates`` attribute (the CF convention xarray decodes): plain
``xr.open_zarr(pack)`` shows ``task_id``, ``owner_id`` and ``core_id`` as coordinates along ``task``."""
TASKS_ATTR = "tasks"
RECORDS_ATTR = "records"
SHARD_DIGEST_ATTR = "shardCrc32c"
"""A record array's attribute binding each shard to its place: :func:`shard_digest` of each, 8 hex digits, grid order."""
PACK_MAX_RECORD_BYTES = 1 << 20
"""Records up to this size (and the writer's chunk size) are packed; larger ones keep an array each."""
PACK_SHARD_BYTES = 4 << 20
"""Uncompressed bytes of one shard (a whole number of records, at least one): the writer's default chunk size.
16 MiB measured no faster on P2 (benchmarks/export.py) and held twice the memory (a shard is encoded whole
before its one write; two are in flight on two cores); readers take the shard shape from each document."""
NO_CHUNK = 2**64 - 1
INDEX_CODECS: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
_CRC = struct.Struct("<I")


def pack_name(index: int) -> str:
    """The group name of a stage's ``index``-th pack (``pack_0000``)."""
    return f"{PACK_PREFIX}{int(index):04d}"


def is_pack_group(doc: Mapping[str, Any] | None) -> bool:
    """Whether a group document is a pack's (of a format this reader knows, ``PACK_VERSIONS``)."""
    attrs = (doc or {}).get("attributes")
    version = attrs.get(PACK_ATTR) if isinstance(attrs, dict) else None
    return type(version) is int and version in PACK_VERSIONS


def task_array_name(nodes: Mapping[str, Any], pack: str) -> str | None:
    """The component holding a pack's task ids among ``nodes`` (``task_id``, or schema 7's ``task``), if any.

    Args:
        nodes: Window nodes (relative path -> document).
        pack: The pack group's path relative to the window.
    """
    for name in TASK_ARRAYS:
        doc = nodes.get(f"{pack}/{name}")
        if isinstance(doc, dict) and doc.get("node_type") == "array":
            return name
    return None


def row_coordinate_name(dim: str) -> str:
    """The format-3 pack array holding each row's global ``dim`` indices (``global_token``)."""
    return f"{ROW_COORDINATE_PREFIX}{dim}"


def row_coordinate_attrs(dim: str) -> dict[str, str]:
    """The attributes of a format-3 row coordinate array (its marker and a label for xarray users)."""
    return {
        ROW_COORDINATE_ATTR: dim,
        "long_name": f"global {dim} index in the stitched tensor (each task's rows [start, stop))",
    }


def row_coordinate_names(pack: str, nodes: Mapping[str, Any], tasks: list[Any]) -> dict[str, str]:
    """A pack's row coordinate arrays among ``nodes``: component -> dimension.

    An array is one when it is named :func:`row_coordinate_name` of a dimension the rows' ``coords`` give and its
    attributes carry that dimension as :data:`ROW_COORDINATE_ATTR` (an array without the marker is read as a
    record, and a record without ``records`` is named malformed: never skipped silently).

    Args:
        pack: The pack group's path relative to the window.
        nodes: Window nodes (relative path -> document).
        tasks: The pack's ``attributes.tasks`` entries.
    """
    dims = {
        dim
        for entry in tasks
        if isinstance(entry, dict) and isinstance(entry.get("coords"), dict)
        for dim in entry["coords"]
    }
    found = {}
    for dim in dims:
        name = row_coordinate_name(str(dim))
        doc = nodes.get(f"{pack}/{name}")
        attrs = doc.get("attributes") if isinstance(doc, dict) else None
        if isinstance(attrs, dict) and attrs.get(ROW_COORDINATE_ATTR) == dim:
            found[name] = str(dim)
    return found


def shard_rows(record_nbytes: int, tasks: int) -> int:
    """Records per shard: as many as fit in ``PACK_SHARD_BYTES`` (at least 1, at most ``tasks``).

    Args:
        record_nbytes: Uncompressed bytes of one record.
        tasks: Rows of the pack.
    """
    return max(1, min(int(tasks), PACK_SHARD_BYTES // max(1, int(record_nbytes))))


def sharded_codecs(inner_shape: list[int], inner_codecs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The codec list of a pack's record array, as zarr-python writes it for ``shards=``.

    Args:
        inner_shape: ``[1, *record_shape]``.
        inner_codecs: The record's own codec chain (schema 6's).
    """
    return [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": list(inner_shape),
                "codecs": list(inner_codecs),
                "index_codecs": INDEX_CODECS,
                "index_location": "end",
            },
        }
    ]


def index_nbytes(count: int) -> int:
    """Bytes of a shard index of ``count`` inner chunks (with its checksum)."""
    return 16 * int(count) + 4


def encode_index(entries: list[tuple[int, int] | None]) -> bytes:
    """A shard index: ``(offset, nbytes)`` per inner chunk (``None``: absent), then its crc32c.

    Args:
        entries: One entry per inner chunk, in C order.
    """
    table = np.full((len(entries), 2), NO_CHUNK, dtype="<u8")
    for i, entry in enumerate(entries):
        if entry is not None:
            table[i] = entry
    raw = table.tobytes()
    return raw + _CRC.pack(google_crc32c.value(raw))


def shard_digest(chunk_crcs: bytes, index: bytes) -> int:
    """A shard's digest (:data:`SHARD_DIGEST_ATTR`): the crc32c of its inner chunks' stored crc32c (in index
    order) followed by its index without the index's own crc32c.

    Not the crc32c of the shard's bytes: bytes followed by their own crc32c always have the same crc32c, so a
    run of checksummed chunks would leave only the index to tell shards apart. Each chunk's crc32c stands
    for its bytes (``verify`` checks them), so this binds the same bytes without a second pass over them.

    Args:
        chunk_crcs: The 4 trailing bytes of each inner chunk present, in index order.
        index: The shard index as stored (:func:`encode_index`).
    """
    return google_crc32c.value(chunk_crcs + index[:-4])


def shard_digest_of(raw: bytes, count: int, key: str) -> int:
    """:func:`shard_digest` of the stored shard ``raw`` of ``count`` inner chunks (each ending with its crc32c).

    Args:
        raw: The shard's bytes.
        count: Inner chunks per shard.
        key: The shard's key (for messages).

    Raises:
        ValueError: The index is damaged, an entry lies outside the shard, or a chunk fails its crc32c (named by
            the chunk check: this digest binds intact chunks to their place).
    """
    size = index_nbytes(count)
    index = raw[len(raw) - size :]
    crcs = []
    for entry in decode_index(index, count, key):
        if entry is not None:
            offset, nbytes = entry
            if nbytes < 4 or offset + nbytes > len(raw) - size:
                raise ValueError(f"{key}: shard index entry {entry} lies outside the shard's chunks")
            crc = raw[offset + nbytes - 4 : offset + nbytes]
            if _CRC.pack(google_crc32c.value(raw[offset : offset + nbytes - 4])) != crc:
                raise ValueError(f"{key}: inner chunk {entry} fails its crc32c")
            crcs.append(crc)
    return shard_digest(b"".join(crcs), index)


def decode_index(raw: bytes, count: int, key: str) -> list[tuple[int, int] | None]:
    """Parse a shard index read from the end of shard ``key``.

    Args:
        raw: The last :func:`index_nbytes` bytes of the shard.
        count: Inner chunks per shard.
        key: The shard's key (for messages).

    Raises:
        ValueError: Wrong length or a checksum mismatch (the message names ``key``).
    """
    expected = index_nbytes(count)
    if len(raw) != expected:
        raise ValueError(f"{key}: shard index is {len(raw)} bytes, expected {expected}")
    body, crc = raw[:-4], _CRC.unpack(raw[-4:])[0]
    actual = google_crc32c.value(body)
    if actual != crc:
        raise ValueError(f"{key}: shard index checksum mismatch (stored {crc:#010x}, computed {actual:#010x})")
    table = np.frombuffer(body, dtype="<u8").reshape(count, 2)
    return [None if int(o) == NO_CHUNK and int(n) == NO_CHUNK else (int(o), int(n)) for o, n in table]


@dataclass(frozen=True)
class ShardSource:
    """A virtual record chunk: inner chunk ``slot`` of shard ``shard`` (path relative to the window).

    Args:
        shard: The shard's key relative to the window.
        slot: Inner chunk index in the shard.
        count: Inner chunks per shard (the index length).
    """

    shard: str
    slot: int
    count: int


@dataclass(frozen=True)
class RangeSource:
    """A virtual row coordinate chunk: int64 ``arange(start, stop)``, raw, with its crc32c."""

    start: int
    stop: int


def range_chunk(source: RangeSource) -> bytes:
    """The stored bytes of a virtual coordinate chunk (little-endian int64, then the crc32c)."""
    data = np.arange(source.start, source.stop, dtype="<i8").tobytes()
    return data + _CRC.pack(google_crc32c.value(data))


_RAW_CODECS = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
_KEY_ENCODING = {"name": "default", "configuration": {"separator": "."}}


def _coordinate_doc(dim: str, length: int) -> dict[str, Any]:
    return {
        "shape": [length],
        "data_type": "int64",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [max(1, length)]}},
        "chunk_key_encoding": _KEY_ENCODING,
        "fill_value": 0,
        "codecs": _RAW_CODECS,
        "attributes": {},
        "dimension_names": [dim],
        "zarr_format": 3,
        "node_type": "array",
        "storage_transformers": [],
    }


def _list_field(doc: Mapping[str, Any], name: str, where: str, length: int) -> list[Any]:
    value = (doc.get("attributes") or {}).get(name)
    if not isinstance(value, list) or len(value) != length:
        got = (
            "missing"
            if value is None
            else f"{type(value).__name__} of {len(value) if isinstance(value, list) else '?'}"
        )
        raise ValueError(f"{where}: attributes.{name} must be a list of {length} entries, got {got}")
    return value


def expand_pack(
    pack: str, nodes: Mapping[str, dict[str, Any]], where: str = ""
) -> tuple[dict[str, dict[str, Any]], dict[str, ShardSource | RangeSource]]:
    """The schema-6 view of one pack.

    Args:
        pack: The pack group's path relative to the window (``invocation_.../stages/{stage}/pack_0000``).
        nodes: Window nodes (relative path -> document) holding at least the pack's ``task`` array and its
            record arrays (the pack group document itself is not needed: a torn window has none; when present,
            its ``megadumpPack`` must be 1).
        where: Window key, for messages.

    Returns:
        ``(virtual, sources)``: virtual nodes (task groups without consolidated metadata, record arrays,
        row coordinate arrays) keyed by path relative to the window, and the source of every virtual
        chunk keyed by its key relative to the window.

    Raises:
        ValueError: A malformed pack (the message names the document and field).
    """
    stage = pack.rpartition("/")[0]
    prefix = f"{pack}/"
    task_name = task_array_name(nodes, pack) or TASK_ARRAY
    task_doc = nodes.get(prefix + task_name)
    label = f"{where}/{pack}" if where else pack
    if not isinstance(task_doc, dict) or not isinstance(task_doc.get("shape"), list) or len(task_doc["shape"]) != 1:
        raise ValueError(f"{label}/{task_name}/zarr.json: a pack needs a 1-D task array")
    count = task_doc["shape"][0]
    if not isinstance(count, int) or count < 0:
        raise ValueError(f"{label}/{task_name}/zarr.json: shape {task_doc['shape']!r} is not a row count")
    tasks = _list_field(task_doc, TASKS_ATTR, f"{label}/{task_name}/zarr.json", count)
    group_doc = nodes.get(pack)
    if group_doc is not None and not is_pack_group(group_doc):  # a newer pack format must not read as this one
        version = (group_doc.get("attributes") or {}).get(PACK_ATTR) if isinstance(group_doc, dict) else None
        raise ValueError(
            f"{label}/zarr.json: attributes.{PACK_ATTR} {version!r} is not a pack format this reader "
            f"knows {list(PACK_VERSIONS)}"
        )
    virtual: dict[str, dict[str, Any]] = {}
    sources: dict[str, ShardSource | RangeSource] = {}
    groups: list[str] = []
    row_coordinates = row_coordinate_names(pack, nodes, tasks)  # format 3: values checked by verify
    for row, entry in enumerate(tasks):
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("group"), str)
            or not isinstance(entry.get("attrs"), dict)
        ):
            raise ValueError(f"{label}/{task_name}/zarr.json: attributes.tasks[{row}] must hold 'group' and 'attrs'")
        name = entry["group"]
        if not name or "/" in name or name in (".", "..") or not name.startswith("task_"):
            raise ValueError(
                f"{label}/{task_name}/zarr.json: attributes.tasks[{row}].group {name!r} is not a task group name"
            )
        group = f"{stage}/{name}"
        if group in virtual:
            raise ValueError(f"{label}/{task_name}/zarr.json: task group {name!r} appears twice")
        groups.append(group)
        virtual[group] = {"attributes": entry["attrs"], "zarr_format": 3, "node_type": "group"}
        coords = entry.get("coords") or {}
        if not isinstance(coords, dict):
            raise ValueError(f"{label}/{task_name}/zarr.json: attributes.tasks[{row}].coords must be an object")
        for dim, bounds in coords.items():
            if (
                not isinstance(bounds, list)
                or len(bounds) != 2
                or not all(isinstance(b, int) and not isinstance(b, bool) for b in bounds)
                or bounds[1] < bounds[0]
            ):
                raise ValueError(
                    f"{label}/{task_name}/zarr.json: attributes.tasks[{row}].coords.{dim} {bounds!r} "
                    f"is not [start, stop]"
                )
            virtual[f"{group}/{dim}"] = _coordinate_doc(dim, bounds[1] - bounds[0])
            if bounds[1] > bounds[0]:
                sources[f"{group}/{dim}/c.0"] = RangeSource(bounds[0], bounds[1])
    for path, doc in nodes.items():
        if not path.startswith(prefix) or "/" in path[len(prefix) :]:
            continue
        component = path[len(prefix) :]
        if doc.get("node_type") != "array":  # a pack holds arrays only: skipping one would drop its records silently
            raise ValueError(
                f"{label}/{component}/zarr.json: node_type {doc.get('node_type')!r} must be 'array' "
                "(a task-record pack holds arrays only)"
            )
        if component in INDEX_ARRAYS or component in row_coordinates:
            continue
        _expand_records(label, path, component, doc, groups, virtual, sources)
    return virtual, sources


def _expand_records(
    label: str,
    path: str,
    component: str,
    doc: dict[str, Any],
    groups: list[str],
    virtual: dict[str, dict[str, Any]],
    sources: dict[str, ShardSource | RangeSource],
) -> None:
    where = f"{label}/{component}/zarr.json"
    shape = doc.get("shape")
    if not isinstance(shape, list) or len(shape) < 2 or shape[0] != len(groups):
        raise ValueError(f"{where}: shape {shape!r} must be [{len(groups)}, *record_shape]")
    records = _list_field(doc, RECORDS_ATTR, where, len(groups))
    codecs = doc.get("codecs")
    try:
        (sharding,) = codecs
        config = sharding["configuration"]
        assert sharding["name"] == "sharding_indexed" and config.get("index_location", "end") == "end"
        inner_shape, inner_codecs = list(config["chunk_shape"]), list(config["codecs"])
        shard_shape = list(doc["chunk_grid"]["configuration"]["chunk_shape"])
    except (TypeError, ValueError, KeyError, AssertionError):
        raise ValueError(
            f"{where}: a pack record array must have one sharding_indexed codec (index at the end)"
        ) from None
    record_shape = shape[1:]
    if inner_shape != [1, *record_shape] or len(shard_shape) != len(shape) or shard_shape[1:] != record_shape:
        raise ValueError(
            f"{where}: inner chunk {inner_shape!r} / shard {shard_shape!r} do not hold one record of {record_shape!r}"
        )
    per_shard = shard_shape[0]
    if not isinstance(per_shard, int) or per_shard < 1:
        raise ValueError(f"{where}: shard shape {shard_shape!r} has no rows")
    dims = doc.get("dimension_names")
    record_dims = list(dims[1:]) if isinstance(dims, list) and len(dims) == len(shape) else None
    zeros = ".0" * len(record_shape)
    for row, (group, attrs) in enumerate(zip(groups, records)):
        if not isinstance(attrs, dict):
            raise ValueError(f"{where}: attributes.records[{row}] is not a JSON object")
        node: dict[str, Any] = {
            "shape": list(record_shape),
            "data_type": doc.get("data_type"),
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(record_shape)}},
            "chunk_key_encoding": doc.get("chunk_key_encoding", _KEY_ENCODING),
            "fill_value": doc.get("fill_value"),
            "codecs": inner_codecs,
            "attributes": attrs,
        }
        if record_dims is not None:
            node["dimension_names"] = record_dims
        node |= {"zarr_format": 3, "node_type": "array", "storage_transformers": []}
        virtual[f"{group}/{component}"] = node
        sources[f"{group}/{component}/c{zeros}"] = ShardSource(
            f"{path}/c.{row // per_shard}{zeros}", row % per_shard, per_shard
        )
