"""Where a record's bytes are on disk, whatever the window layout (schema-6 task groups or schema-7 packs).

Tests that perturb, corrupt or delete stored data by hand need the physical place of a record; readers name a
record by its task group path in either layout (``read.pack_rows`` reads a packed one by row), so tests name
records by that path (the ``records()["path"]`` column) and find the physical place here::

    from tests._layout import record_chunk, stored_record

    array, index = stored_record(root, path)      # zarr array holding it (writable) and its index there
    array[index] = array[index] + 1.0             # perturb the record in place

    span = record_chunk(root, path)               # file, offset and length of the record's (first) chunk
    span.flip(3)                                  # flip a byte of the stored chunk (checksum mismatch)
"""

from __future__ import annotations

from dataclasses import dataclass
import json
import os
from pathlib import Path
from typing import Any

import zarr
from zarr.storage import LocalStore, WrapperStore

from megadump_zarr.store.packs import decode_index, index_nbytes

__all__ = [
    "ChunkSpan",
    "document_in_inventory",
    "pack_of",
    "record_chunk",
    "record_in_inventory",
    "stored_record",
    "task_dirs",
    "tear",
]


def _read_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def pack_of(root: str | os.PathLike[str], group: str) -> tuple[Path, int] | None:
    """The pack directory and row holding the logical task group ``group`` (relative to ``root``), or None."""
    stage = Path(root) / Path(group).parent
    name = Path(group).name
    for pack in sorted(stage.glob("pack_*")):
        if not (pack / "task_id" / "zarr.json").is_file():
            continue
        for row, entry in enumerate(_tasks(pack)):
            if entry["group"] == name:
                return pack, row
    return None


def _tasks(pack: Path) -> list[Any]:
    """A stored pack's task entries, decoded from its arrays along ``task``."""
    from tests._packs import stored_rows

    window = next(a for a in pack.parents if a.name.startswith("window_"))
    return stored_rows(window, pack.relative_to(window).as_posix())[0]


class _Reinventoried(WrapperStore):
    """A local store whose chunk writes are recorded in their window's inventory, as the writer of a run that
    stored those values would have recorded them (``layout.inventory``)."""

    def __init__(self, store: Any, root: Path) -> None:
        super().__init__(store)
        self._root = root

    def _with_store(self, store: Any) -> _Reinventoried:
        return type(self)(store, self._root)

    async def set(self, key: str, value: Any) -> None:
        await self._store.set(key, value)
        if not key.endswith("zarr.json"):
            record_in_inventory(self._root, key, value.to_bytes())


def record_in_inventory(root: str | os.PathLike[str], key: str, data: bytes) -> None:
    """Record chunk ``key``'s new bytes ``data`` in its window's inventory (and the inventory's digest in the window
    document), as the writer of those bytes would have.

    Args:
        root: Dump root (local).
        key: The chunk's key relative to the root (``rank_0/window_0000/.../c.0.0``).
        data: Its stored bytes.
    """
    from megadump_zarr.layout.inventory import (
        INVENTORY_DIGEST_ATTR,
        INVENTORY_FILE,
        chunk_digest,
        inventory_digest,
    )

    window = Path(root) / "/".join(key.split("/")[:2])
    array, _, name = key.partition("/")[2].partition("/")[2].rpartition("/")
    doc = _read_json(window / array / "zarr.json")
    counts = [-(-s // c) for s, c in zip(doc["shape"], doc["chunk_grid"]["configuration"]["chunk_shape"])]
    index = 0
    for coord, count in zip((int(p) for p in name[2:].split(".")) if name != "c" else (), counts):
        index = index * count + coord
    inventory = _read_json(window / INVENTORY_FILE)
    meta, digests = inventory["arrays"][array]
    digests = digests[: 8 * index] + f"{chunk_digest(data)[0]:08x}" + digests[8 * index + 8 :]
    inventory["arrays"][array] = [meta, digests]
    encoded = json.dumps(inventory, separators=(",", ":")).encode()
    (window / INVENTORY_FILE).write_bytes(encoded)
    window_doc = _read_json(window / "zarr.json")
    window_doc["attributes"][INVENTORY_DIGEST_ATTR] = inventory_digest(encoded)
    (window / "zarr.json").write_text(json.dumps(window_doc))


def document_in_inventory(root: str | os.PathLike[str], array: str) -> None:
    """Record array ``array``'s edited document in its window's inventory (and the inventory's digest in the
    window document): a forger who rewrites the inventory too, so only checks beyond it can refuse the edit.

    Args:
        root: Dump root (local).
        array: The array's path relative to the root (``rank_0/window_0000/.../output_00_big``).
    """
    from megadump_zarr.layout.inventory import INVENTORY_DIGEST_ATTR, INVENTORY_FILE, inventory_digest, metadata_digest

    window = Path(root) / "/".join(array.split("/")[:2])
    rel = array.split("/", 2)[2]
    inventory = _read_json(window / INVENTORY_FILE)
    inventory["arrays"][rel][0] = metadata_digest(_read_json(window / rel / "zarr.json"))
    encoded = json.dumps(inventory, separators=(",", ":")).encode()
    (window / INVENTORY_FILE).write_bytes(encoded)
    window_doc = _read_json(window / "zarr.json")
    window_doc["attributes"][INVENTORY_DIGEST_ATTR] = inventory_digest(encoded)
    (window / "zarr.json").write_text(json.dumps(window_doc))


def stored_record(root: str | os.PathLike[str], path: str) -> tuple[zarr.Array, Any]:
    """The stored zarr array holding the record at logical ``path`` and the record's index in it; what is written
    through it is recorded in its window's inventory (a run that stored other values).

    Args:
        root: Dump root (local).
        path: The record's path relative to the root (``rank_0/window_0000/.../task_000001/output_00_ys``).
    """
    store = _Reinventoried(LocalStore(str(root)), Path(root))
    direct = Path(root) / path
    if (direct / "zarr.json").is_file():
        return zarr.open_array(store, path=path, mode="r+"), ...
    group, _, component = path.rpartition("/")
    found = pack_of(root, group)
    if found is None:
        raise FileNotFoundError(f"no stored array and no pack holds record {path} below {root}")
    pack, row = found
    return zarr.open_array(store, path=(pack / component).relative_to(root).as_posix(), mode="r+"), row


@dataclass(frozen=True)
class ChunkSpan:
    """Bytes ``[offset, offset + nbytes)`` of ``file``: one stored chunk (with its crc32c)."""

    file: Path
    offset: int
    nbytes: int

    def read(self) -> bytes:
        """The chunk's stored bytes."""
        with open(self.file, "rb") as handle:
            handle.seek(self.offset)
            return handle.read(self.nbytes)

    def write(self, data: bytes) -> None:
        """Overwrite the chunk's bytes in place (``data`` no longer than the chunk)."""
        assert len(data) <= self.nbytes, (len(data), self.nbytes)
        with open(self.file, "r+b") as handle:
            handle.seek(self.offset)
            handle.write(data)

    def flip(self, at: int = 0, mask: int = 0x01) -> None:
        """XOR one byte of the chunk (``at`` from the chunk's start; negative from its end)."""
        raw = bytearray(self.read())
        raw[at] ^= mask
        self.write(bytes(raw))

    @property
    def whole_file(self) -> bool:
        """Whether the chunk is the whole file (schema-6 chunk files)."""
        return self.offset == 0 and self.nbytes == self.file.stat().st_size


def record_chunk(root: str | os.PathLike[str], path: str, chunk: int = 0) -> ChunkSpan:
    """Where chunk ``chunk`` (along axis 0) of the record at logical ``path`` is stored.

    Args:
        root: Dump root (local).
        path: The record's path relative to the root.
        chunk: Chunk index along axis 0 (packed records have exactly one chunk).
    """
    direct = Path(root) / path
    if (direct / "zarr.json").is_file():
        doc = _read_json(direct / "zarr.json")
        ndim = len(doc["shape"])
        file = direct / ("c" if ndim == 0 else "c." + ".".join([str(chunk)] + ["0"] * (ndim - 1)))
        return ChunkSpan(file, 0, file.stat().st_size)
    group, _, component = path.rpartition("/")
    found = pack_of(root, group)
    if found is None:
        raise FileNotFoundError(f"no stored array and no pack holds record {path} below {root}")
    if chunk:
        raise ValueError(f"packed record {path} has one chunk, asked for chunk {chunk}")
    pack, row = found
    doc = _read_json(pack / component / "zarr.json")
    per_shard = doc["chunk_grid"]["configuration"]["chunk_shape"][0]
    zeros = ".0" * (len(doc["shape"]) - 1)
    shard = pack / component / f"c.{row // per_shard}{zeros}"
    raw = shard.read_bytes()
    entry = decode_index(raw[-index_nbytes(per_shard) :], per_shard, str(shard))[row % per_shard]
    assert entry is not None, f"row {row} absent from {shard}"
    return ChunkSpan(shard, entry[0], entry[1])


def task_dirs(root: str | os.PathLike[str]) -> list[str]:
    """Logical task group paths (relative to ``root``) of every L1 task stored below it, packed or not."""
    root = Path(root)
    found = [p.relative_to(root).as_posix() for p in root.glob("rank_*/window_*/*/stages/*/task_*") if p.is_dir()]
    task_docs = root.glob("rank_*/window_*/*/stages/*/pack_*/task_id/zarr.json")
    for task_doc in task_docs:
        stage = task_doc.parent.parent.parent.relative_to(root).as_posix()
        found += [f"{stage}/{entry['group']}" for entry in _tasks(task_doc.parent.parent)]
    return sorted(found)


def tear(root: Path, window: str = "rank_0/window_0000") -> None:
    """Make a committed window look torn as the writer leaves it when killed before its commit: status
    ``writing``, no consolidated metadata, no group documents except each pack's (its attributes, written with
    its arrays, without consolidated metadata)."""
    wdir = Path(root) / window
    doc = json.loads((wdir / "zarr.json").read_bytes())
    nodes = doc.pop("consolidated_metadata")["metadata"]
    doc["attributes"]["status"] = "writing"
    doc["attributes"].pop("committedAt", None)
    for path, node in nodes.items():
        if node["node_type"] != "group":
            continue
        if path.rpartition("/")[2].startswith("pack_"):
            own = {"attributes": node["attributes"], "zarr_format": 3, "node_type": "group"}
            (wdir / path / "zarr.json").write_text(json.dumps(own))
        else:
            (wdir / path / "zarr.json").unlink(missing_ok=True)
    (wdir / "zarr.json").write_text(json.dumps(doc))
