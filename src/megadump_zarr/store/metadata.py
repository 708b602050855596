"""Zarr v3 metadata documents (``zarr.json``) for arrays and groups, including inline consolidated metadata.

The documents match what zarr-python 3.1.6 writes for the same arrays (``ArrayV3Metadata.to_dict`` and
``GroupMetadata.to_dict``; same keys, same key order, same codec configurations), except that they are
encoded compactly (no indentation): zarr reads either, and compact JSON is cheaper to write and parse.

Consolidated metadata follows ``zarr.consolidate_metadata`` (``zarr/api/asynchronous.py`` and
``ConsolidatedMetadata.to_dict`` in ``zarr/core/group.py``): a group's ``consolidated_metadata`` is
``{"kind": "inline", "must_understand": false, "metadata": {...}}`` whose ``metadata`` maps the *flat*
relative path of every descendant (``"task_000001/output_00_x"``) to its document; descendant groups
appear with an empty ``{"kind": "inline", "must_understand": false, "metadata": {}}`` of their own, and
entries are ordered by (path depth, NFKC-casefolded path).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
import functools
import json
import math
from typing import Any
import unicodedata

import numpy as np

from megadump_zarr.layout.dtypes import DATA_TYPES, ML_FLOATS
from megadump_zarr.codecs import CompressorSpec
from megadump_zarr.store import chunking
from megadump_zarr.store.packs import sharded_codecs

__all__ = [
    "CRC32C_CODEC",
    "array_document_bytes",
    "codecs_for",
    "consolidated_group_bytes",
    "consolidated_sort_key",
    "data_type_name",
    "dumps",
    "fill_value_for",
    "flat_group_bytes",
    "group_document",
    "pack_array_document_bytes",
    "plain_group_bytes",
    "stats_bytes",
]

_SUPPORTED = frozenset(DATA_TYPES)


@functools.lru_cache(maxsize=64)
def _data_type_name(dtype: np.dtype) -> str:
    name = dtype.name
    if name not in _SUPPORTED:
        raise TypeError(f"unsupported dtype {dtype} for a tensor dump array; supported: {list(DATA_TYPES)}")
    return name


def data_type_name(dtype: np.dtype) -> str:
    """The Zarr v3 ``data_type`` of a numpy dtype (numpy's own name; ml_dtypes names for bf16/float8).

    Args:
        dtype: A numpy dtype; its byte order is ignored (the store always writes little-endian).

    Raises:
        TypeError: For dtypes the store does not write (complex, strings, objects, datetimes, ...).
    """
    return _data_type_name(np.dtype(dtype))


def fill_value_for(dtype: np.dtype) -> bool | int | float:
    """The JSON fill value zarr writes for a zero fill: ``false``, ``0`` or ``0.0``.

    Args:
        dtype: A supported numpy dtype.
    """
    name = data_type_name(dtype)
    if name == "bool":
        return False
    if name in ML_FLOATS or name.startswith("float"):
        return 0.0
    return 0


CRC32C_CODEC: dict[str, Any] = {"name": "crc32c"}
"""The checksum codec entry, as ``zarr.codecs.Crc32cCodec.to_dict`` writes it (no configuration)."""


def codecs_for(dtype: np.dtype, spec: CompressorSpec, checksum: bool = True) -> list[dict[str, Any]]:
    """The codec chain: ``bytes`` (little-endian; no configuration for 1-byte types, as zarr writes it),
    the compressor, if any, then ``crc32c`` (a CRC-32C of the encoded chunk, 4 bytes little-endian
    appended to it), which zarr-python and tensorstore check on every read.

    Args:
        dtype: A supported numpy dtype.
        spec: Parsed compressor.
        checksum: End the chain with ``crc32c``.
    """
    itemsize = np.dtype(dtype).itemsize
    chain: list[dict[str, Any]] = [
        {"name": "bytes", "configuration": {"endian": "little"}} if itemsize > 1 else {"name": "bytes"}
    ]
    if spec.kind == "zstd":
        chain.append({"name": "zstd", "configuration": {"level": spec.level, "checksum": False}})
    elif spec.kind == "blosc":
        chain.append(
            {
                "name": "blosc",
                "configuration": {
                    "typesize": itemsize,
                    "cname": spec.cname,
                    "clevel": spec.level,
                    "shuffle": spec.shuffle,
                    "blocksize": 0,
                },
            }
        )
    elif spec.kind != "none":
        raise ValueError(f"unknown compressor kind {spec.kind!r}")
    if checksum:
        chain.append(dict(CRC32C_CODEC))
    return chain


def array_document_bytes(
    shape: Sequence[int],
    dtype: np.dtype,
    chunks: Sequence[int],
    compressor: CompressorSpec,
    attributes_json: bytes,
    dimension_names: Sequence[str],
    checksum: bool = True,
) -> bytes:
    """An array's ``zarr.json`` document (keys in zarr-python's order) encoded with :func:`dumps`, splicing in
    attributes that are already encoded.

    Args:
        shape: Array shape.
        dtype: A supported numpy dtype.
        chunks: Regular chunk shape.
        compressor: Parsed compressor.
        attributes_json: The attributes object, already encoded with :func:`dumps`.
        dimension_names: One name per axis (the key is omitted for 0-d arrays, as zarr does).
        checksum: Chunks carry a ``crc32c`` checksum (see :func:`codecs_for`).
    """
    if type(shape) is tuple and type(chunks) is tuple and type(dimension_names) is tuple:  # the writer's jobs
        head, tail = _array_frame(shape, dtype, chunks, compressor, checksum, dimension_names)
        return head + attributes_json + tail
    head = _array_head(
        tuple(int(d) for d in shape), np.dtype(dtype), tuple(int(c) for c in chunks), compressor, bool(checksum)
    )
    return head + attributes_json + _array_tail(tuple(dimension_names))


@functools.lru_cache(maxsize=4096)
def _array_frame(
    shape: tuple[Any, ...],
    dtype: Any,
    chunks: tuple[Any, ...],
    compressor: CompressorSpec,
    checksum: Any,
    dimension_names: tuple[str, ...],
) -> tuple[bytes, bytes]:
    """The encoded document around the attributes, cached on the caller's values as given (a window's
    arrays mostly share them; :func:`_array_head` normalises them once per distinct key)."""
    head = _array_head(
        tuple(int(d) for d in shape), np.dtype(dtype), tuple(int(c) for c in chunks), compressor, bool(checksum)
    )
    return head, _array_tail(tuple(dimension_names))


def pack_array_document_bytes(
    shape: Sequence[int],
    dtype: np.dtype,
    shard: Sequence[int],
    compressor: CompressorSpec,
    attributes_json: bytes,
    dimension_names: Sequence[str],
    checksum: bool = True,
) -> bytes:
    """A task-record pack's record array document (see :mod:`.packs`): ``shape`` ``(T, *record)``, shards
    of ``shard`` (``(rows, *record)``), inner chunks of one record whose codec chain is
    :func:`codecs_for`'s; what zarr-python writes for ``create_array(chunks=(1, *record), shards=shard)``.

    Args:
        shape: ``(T, *record_shape)``.
        dtype: A supported numpy dtype.
        shard: Shard shape ``(rows, *record_shape)``.
        compressor: Parsed compressor of the inner chunks.
        attributes_json: The attributes object, already encoded with :func:`dumps`.
        dimension_names: ``("task", *record_dims)``.
        checksum: Inner chunks carry a ``crc32c`` checksum.
    """
    head = _array_head(
        tuple(int(d) for d in shape), np.dtype(dtype), tuple(int(c) for c in shard), compressor, bool(checksum), True
    )
    return head + attributes_json + _array_tail(tuple(dimension_names))


# Many arrays of a window share shape, dtype and dimension names: the encoded parts are cached.
@functools.lru_cache(maxsize=4096)
def _array_head(
    shape: tuple[int, ...],
    dtype: np.dtype,
    chunks: tuple[int, ...],
    compressor: CompressorSpec,
    checksum: bool,
    sharded: bool = False,
) -> bytes:
    codecs = codecs_for(dtype, compressor, checksum)
    if sharded:  # chunks is the shard shape; inner chunks hold one row
        codecs = sharded_codecs([1, *chunks[1:]], codecs)
    head = {
        "shape": list(shape),
        "data_type": data_type_name(dtype),
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": chunking.CHUNK_KEY_SEPARATOR}},
        "fill_value": fill_value_for(dtype),
        "codecs": codecs,
    }
    return dumps(head)[:-1] + b',"attributes":'


@functools.lru_cache(maxsize=4096)
def _array_tail(dimension_names: tuple[str, ...]) -> bytes:
    tail: dict[str, Any] = {"dimension_names": list(dimension_names)} if dimension_names else {}
    tail |= {"zarr_format": 3, "node_type": "array", "storage_transformers": []}
    return b"," + dumps(tail)[1:]


def group_document(attributes: Mapping[str, Any], consolidated: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A group's ``zarr.json`` document.

    Args:
        attributes: JSON-serialisable attributes.
        consolidated: Flat ``{relative_path: document}`` of descendants to inline as consolidated
            metadata, or ``None`` for a plain group (no ``consolidated_metadata`` key).
    """
    doc: dict[str, Any] = {"attributes": dict(attributes), "zarr_format": 3}
    if consolidated is not None:
        doc["consolidated_metadata"] = {
            "kind": "inline",
            "must_understand": False,
            "metadata": {k: consolidated[k] for k in sorted(consolidated, key=consolidated_sort_key)},
        }
    doc["node_type"] = "group"
    return doc


def _default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_ENCODER = json.JSONEncoder(allow_nan=True, separators=(",", ":"), default=_default)  # json.dumps's, made once


def dumps(value: Any) -> bytes:
    """Compact JSON bytes, as zarr would parse them (NaN/Infinity allowed, numpy scalars converted).

    Args:
        value: A JSON-serialisable value (numpy scalars and arrays are converted).
    """
    return _ENCODER.encode(value).encode()


def _scalar_json(value: Any) -> str:
    """One JSON scalar as :func:`dumps` writes it (``float.__repr__``, ``NaN``/``Infinity``, ``null``)."""
    kind = type(value)
    if kind is float:
        if value != value:
            return "NaN"
        if value in (math.inf, -math.inf):
            return "Infinity" if value > 0 else "-Infinity"
        return float.__repr__(value)
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    return dumps(value).decode()


def stats_bytes(stats: Mapping[str, Any]) -> bytes:
    """A flat object of JSON scalars (an array's ``stats`` attribute) encoded exactly as :func:`dumps` would,
    without the encoder's per-call set-up (a window of small records encodes thousands of these).

    Args:
        stats: ``{name: value}``; names other than ASCII letters and digits send the whole object through
            :func:`dumps`, values other than float, int and ``None`` go through it one by one.
    """
    if not all(type(name) is str and name.isascii() and name.isalnum() for name in stats):
        return dumps(dict(stats))
    return ("{" + ",".join(f'"{name}":{_scalar_json(value)}' for name, value in stats.items()) + "}").encode()


def consolidated_sort_key(path: str) -> tuple[int, str]:
    """Order of entries in consolidated metadata: zarr sorts by (depth, NFKC-casefolded path).

    Args:
        path: Relative path of a descendant.
    """
    if path.isascii():
        return path.count("/"), path.lower()  # NFKC and casefold are lower() on ASCII
    return path.count("/"), unicodedata.normalize("NFKC", path).casefold()


def _json_key(path: str) -> bytes:
    """``"path":`` as JSON; plain printable ASCII (the usual case) skips the encoder."""
    if path.isascii() and path.isprintable() and '"' not in path and "\\" not in path:
        return b'"' + path.encode() + b'":'
    return dumps(path) + b":"


_CONSOLIDATED_EMPTY = b'"consolidated_metadata":{"kind":"inline","must_understand":false,"metadata":{}}'


def flat_group_bytes(attributes_json: bytes) -> bytes:
    """A descendant group's entry inside an ancestor's consolidated metadata (empty nested metadata).

    Args:
        attributes_json: The group's attributes, already encoded with :func:`dumps`.
    """
    return b'{"attributes":' + attributes_json + b',"zarr_format":3,' + _CONSOLIDATED_EMPTY + b',"node_type":"group"}'


def plain_group_bytes(attributes_json: bytes) -> bytes:
    """A group's ``zarr.json`` without consolidated metadata (what :func:`group_document` gives).

    Args:
        attributes_json: The group's attributes, already encoded with :func:`dumps`.
    """
    return b'{"attributes":' + attributes_json + b',"zarr_format":3,"node_type":"group"}'


def consolidated_group_bytes(attributes_json: bytes, entries: Iterable[tuple[str, bytes]]) -> bytes:
    """A group's ``zarr.json`` with inline consolidated metadata, assembled from pre-encoded documents.

    Args:
        attributes_json: The group's attributes, already encoded with :func:`dumps`.
        entries: ``(relative_path, encoded_document)`` for every descendant; descendant groups must use
            :func:`flat_group_bytes`. Sorted here into zarr's order.
    """
    ordered = sorted(entries, key=lambda item: consolidated_sort_key(item[0]))
    body = b",".join(_json_key(path) + doc for path, doc in ordered)
    return (
        b'{"attributes":'
        + attributes_json
        + b',"zarr_format":3,"consolidated_metadata":{"kind":"inline","must_understand":false,"metadata":{'
        + body
        + b'}},"node_type":"group"}'
    )
