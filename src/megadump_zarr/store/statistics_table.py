"""The statistics table of one invocation: a Zarr group ``statistics`` with a ``record`` dimension.

Layout (inside ``invocation_{iiiiii}_{direction}/``)::

    statistics/                 group, attrs: statisticsLayout 2, digestAlgorithm (absent with ``digests:
                                false``: placeholders), recordCount, payloadCount, coordinates
      stage task_id owner_id core_type core_id worker io index name shape dtype path payload
                                coordinates, dims ("record",): text as Zarr v3 ``string`` (vlen-utf8),
                                ids int64 (-1 = none), shape as JSON text ("[4, 8]"), payload bool
                                (whether the record's payload array is stored at ``path``)
      element_count nan_count inf_count    int64
      min max mean l2norm                  float64 over finite elements (NaN = no finite element)
      digest                               uint64, the record digest (megadump_zarr.layout.digest)

Every array is one chunk (beside its ``zarr.json``, "." chunk keys), compressed like the payloads and
sealed with ``crc32c`` when the writer seals chunks. The data variables carry the CF ``coordinates``
attribute, so ``xr.open_zarr(".../statistics")`` gives a Dataset whose coordinates are the columns above.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from megadump_zarr.codecs import CompressorSpec
from megadump_zarr.layout.digest import DIGEST_ALGORITHM
from megadump_zarr.layout.statistics import (
    DIGEST_ALGORITHM_ATTRIBUTE,
    DIGESTS_ATTRIBUTE,
    STATISTICS_GROUP,
    STATISTICS_LAYOUT_ATTRIBUTE,
    STATISTICS_LAYOUT_VERSION,
)
from megadump_zarr.layout.write_model import StatisticsTable
from megadump_zarr.store import chunking
from megadump_zarr.store.encoding import Encoder, joined
from megadump_zarr.store.metadata import array_document_bytes, codecs_for, dumps

__all__ = ["STATISTICS_GROUP", "STATISTICS_LAYOUT_VERSION", "statistics_nodes"]

_DIMS = ("record",)


def _chunk(spec: CompressorSpec, checksum: bool, raw: bytes | np.ndarray, itemsize: int) -> bytes:
    """One stored chunk of a column: its bytes encoded and sealed as the window writer's (:class:`Encoder`)."""
    data = np.frombuffer(raw, dtype=np.uint8) if isinstance(raw, bytes) else raw.reshape(-1).view(np.uint8)
    encoder = Encoder(spec, checksum)
    return bytes(joined(encoder.seal(encoder.encode(data, itemsize))))


def _string_document(length: int, spec: CompressorSpec, checksum: bool, attrs: dict[str, Any]) -> bytes:
    """A 1-D Zarr v3 ``string`` array document (vlen-utf8, then the byte codecs of the payloads)."""
    codecs = [{"name": "vlen-utf8", "configuration": {}}, *codecs_for(np.dtype(np.uint8), spec, checksum)[1:]]
    doc = {
        "shape": [length],
        "data_type": "string",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [max(length, 1)]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": chunking.CHUNK_KEY_SEPARATOR}},
        "fill_value": "",
        "codecs": codecs,
        "attributes": attrs,
        "dimension_names": list(_DIMS),
        "zarr_format": 3,
        "node_type": "array",
        "storage_transformers": [],
    }
    return dumps(doc)


def _column(
    values: np.ndarray, spec: CompressorSpec, checksum: bool, attrs: dict[str, Any]
) -> tuple[bytes, bytes | None]:
    """``(document, chunk)`` of one column (no chunk for an empty table)."""
    length = len(values)
    key_chunk = None
    if values.dtype == object:
        document = _string_document(length, spec, checksum, attrs)
        if length:
            from numcodecs import VLenUTF8

            raw = bytes(VLenUTF8().encode(values))
            key_chunk = _chunk(spec, checksum, raw, 1)
        return document, key_chunk
    values = np.ascontiguousarray(values)
    document = array_document_bytes((length,), values.dtype, (max(length, 1),), spec, dumps(attrs), _DIMS, checksum)
    if length:
        key_chunk = _chunk(spec, checksum, values, values.dtype.itemsize)
    return document, key_chunk


def statistics_nodes(
    table: StatisticsTable, spec: CompressorSpec, checksum: bool
) -> tuple[list[tuple[str, bytes]], dict[str, tuple[str, bytes]]]:
    """Everything to store for one statistics table.

    Args:
        table: The invocation's table.
        spec: The writer's compressor.
        checksum: Whether chunks end with ``crc32c`` (the writer's setting).

    Returns:
        ``(items, nodes)``: ``(key, bytes)`` to put, keys relative to the ``statistics`` group; and the
        nodes for consolidated metadata, ``{relative path: ("group", attrs json) | ("array", document)}``
        with paths relative to the ``statistics`` group ("" is the group itself).

    Raises:
        ValueError: Columns of different lengths, or a name used twice.
    """
    columns = {**table.coords}
    clash = set(columns) & set(table.variables)
    if clash:
        raise ValueError(f"statistics table column(s) {sorted(clash)} are both coordinates and variables")
    columns.update(table.variables)
    lengths = {name: len(values) for name, values in columns.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"statistics table columns differ in length: {lengths}")
    coordinate_names = " ".join(table.coords)
    items: list[tuple[str, bytes]] = []
    nodes: dict[str, tuple[str, bytes]] = {}
    chunk_key = "c" + chunking.CHUNK_KEY_SEPARATOR + "0"
    for name, values in columns.items():
        attrs = {} if name in table.coords else {"coordinates": coordinate_names}
        document, chunk = _column(np.asarray(values), spec, checksum, attrs)
        if chunk is not None:
            items.append((f"{name}/{chunk_key}", chunk))
        items.append((f"{name}/zarr.json", document))
        nodes[name] = ("array", document)
    group_attrs = {
        STATISTICS_LAYOUT_ATTRIBUTE: STATISTICS_LAYOUT_VERSION,
        **({} if table.attrs.get(DIGESTS_ATTRIBUTE) is False else {DIGEST_ALGORITHM_ATTRIBUTE: DIGEST_ALGORITHM}),
        "coordinates": list(table.coords),
        "variables": list(table.variables),
        **dict(table.attrs),
    }
    nodes[""] = ("group", dumps(group_attrs))
    return items, nodes
