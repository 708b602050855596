"""Chunks bound to their place: each array's ``zarr.json`` records the crc32c of every chunk it stores.

A chunk's crc32c (the 4 trailing bytes zarr's ``crc32c`` codec appends, see ``store.encoding``) proves
its bytes whole, not that they belong here: a chunk copied from another window or step, or two chunk
files swapped, each still carries a valid checksum. The writer therefore records, per array, the
checksum of each chunk it wrote, in grid order, as the attribute :data:`DIGEST_ATTR`: a string of 8
lower-case hex digits per chunk (the little-endian crc32c as an unsigned integer; ``""`` for an array
with no chunk). ``megadump verify`` compares each stored chunk's trailing 4 bytes with its entry, so a
chunk that is valid elsewhere but not here is named. Arrays written without checksums, and dumps
written before this attribute existed, and coordinate arrays (whose documents carry no attributes, which is
how readers recognise them) carry none: their chunks are *not bound* (a note, not a problem).

Cost: 4 bytes already computed per chunk, and 8 bytes of JSON per chunk in the array's document.

Wiring: ``WindowWriter._chunk`` calls :func:`note_chunk_digest` on each sealed chunk (when it checksums) and
``WindowWriter._document`` calls :func:`splice_chunk_digests` on the attributes. Packs record none yet.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DIGEST_ATTR", "digests_of", "note_chunk_digest", "splice_chunk_digests"]

DIGEST_ATTR = "chunkCrc32c"


def note_chunk_digest(job: Any, index: int, sealed: Any) -> None:
    """Remember the crc32c of chunk ``index`` of ``job`` (thread-safe: one dict item per chunk).

    Args:
        job: The array job (``store.plan.ArrayJob``) being written.
        index: The chunk's index along axis 0 (its grid position).
        sealed: The stored chunk: ``(encoded, crc)`` as ``Encoder.seal`` returns it, or one buffer ending
            with the crc (``encoding.joined``); only read when the writer checksums (see
            :func:`splice_chunk_digests`).
    """
    crc = sealed[1] if isinstance(sealed, tuple) else memoryview(sealed).cast("B")[-4:]
    job.__dict__.setdefault("_chunk_crcs", {})[index] = bytes(crc)


def splice_chunk_digests(job: Any, attrs_json: bytes, checksum: bool) -> bytes:
    """The attributes JSON with :data:`DIGEST_ATTR` appended (unchanged without checksums).

    Args:
        job: The array job; its chunks were all sealed (see :func:`note_chunk_digest`).
        attrs_json: The encoded attributes object (``b"{...}"``).
        checksum: Whether the chunks carry a crc32c.
    """
    if not checksum or "name" not in job.attrs:  # records only: coordinate arrays keep no attributes
        return attrs_json
    crcs = job.__dict__.get("_chunk_crcs", {})
    count = job.chunks.count
    if len(crcs) != count:  # a chunk was not sealed here (never happens): record nothing rather than a wrong digest
        return attrs_json
    # the little-endian bytes reversed are the value's 8 big-endian hex digits, as f"{value:08x}" writes them
    text = crcs[0][::-1].hex() if count == 1 else "".join(crcs[i][::-1].hex() for i in range(count))
    sep = b"," if attrs_json != b"{}" else b""
    return attrs_json[:-1] + sep + b'"' + DIGEST_ATTR.encode() + b'":"' + text.encode() + b'"}'


def digests_of(attrs: Any, count: int) -> list[int] | str | None:
    """The recorded crc32c of each chunk, or why there are none usable.

    Args:
        attrs: The array's attributes.
        count: The number of chunks its grid implies.

    Returns:
        ``None`` when the array records no digests (not bound), a list of ``count`` integers, or a
        message naming what is wrong with the attribute.
    """
    if not isinstance(attrs, dict) or DIGEST_ATTR not in attrs:
        return None
    text = attrs[DIGEST_ATTR]
    if not isinstance(text, str) or len(text) != 8 * count:
        shown = repr(text) if len(repr(text)) <= 40 else repr(text)[:37] + "..."
        return (
            f"attributes.{DIGEST_ATTR} {shown} is not {count} crc32c value(s) of 8 hex digits "
            f"(one per chunk of the grid)"
        )
    try:
        return [int(text[8 * i : 8 * i + 8], 16) for i in range(count)]
    except ValueError:
        return f"attributes.{DIGEST_ATTR} is not hexadecimal"
