"""Chunk encoding shared by the window writer and the pack writer: compression, the crc32c seal, the raw rule."""

from __future__ import annotations

import struct
from typing import Any

import google_crc32c
import numpy as np

from megadump_zarr.codecs import CompressorSpec, parse_compressor

__all__ = ["NO_COMPRESSION", "RAW_BELOW_BYTES", "Encoder", "joined"]

_CRC = struct.Struct("<I")
RAW_BELOW_BYTES = 256
"""An array of one chunk smaller than this is stored uncompressed (see ``writer._stored_raw``)."""
NO_COMPRESSION = parse_compressor("none")


class Encoder:
    """Compresses chunk buffers with numcodecs and seals them with a CRC-32C (thread-safe; releases the GIL).

    The checksum is what zarr's ``crc32c`` codec appends (``google_crc32c``, the library zarr itself
    uses; 4 bytes, little-endian). It is returned as a separate part so that a chunk is never copied
    to append it: the local backend writes both parts with one ``os.writev``.

    Args:
        spec: Parsed compressor.
        checksum: Append the CRC-32C of the encoded chunk.
    """

    def __init__(self, spec: CompressorSpec, checksum: bool = True) -> None:
        self.spec = spec
        self.checksum = checksum
        self._codecs: dict[int, Any] = {}
        if spec.kind == "zstd":
            from numcodecs import Zstd

            self._zstd = Zstd(level=spec.level, checksum=False)

    def encode(self, payload: np.ndarray, itemsize: int, raw: bool = False) -> Any:
        """Compress one chunk.

        Args:
            payload: The chunk's bytes as a contiguous uint8 array (returned as is for ``"none"``).
            itemsize: Element size, for blosc's shuffle.
            raw: Store the chunk uncompressed whatever the compressor (see :data:`RAW_BELOW_BYTES`).
        """
        if raw or self.spec.kind == "none":
            return payload
        if self.spec.kind == "zstd":
            return self._zstd.encode(payload)
        codec = self._codecs.get(itemsize)
        if codec is None:
            from numcodecs import Blosc

            shuffle = {"noshuffle": Blosc.NOSHUFFLE, "shuffle": Blosc.SHUFFLE, "bitshuffle": Blosc.BITSHUFFLE}
            codec = Blosc(
                cname=self.spec.cname,
                clevel=self.spec.level,
                shuffle=shuffle[self.spec.shuffle],
                blocksize=0,
                typesize=itemsize,
            )
            self._codecs[itemsize] = codec
        return codec.encode(payload)

    def seal(self, encoded: Any) -> Any:
        """The stored chunk: ``encoded`` alone, or ``(encoded, crc32c)`` (a tuple of parts).

        Args:
            encoded: An encoded chunk (bytes, or a uint8 array for ``"none"``).
        """
        if not self.checksum:
            return encoded
        return encoded, _CRC.pack(google_crc32c.value(encoded))


def joined(parts: Any) -> Any:
    """One buffer from a sealed chunk (for backends that take a single buffer)."""
    if not isinstance(parts, tuple):
        return parts
    return b"".join(memoryview(part).cast("B") if not isinstance(part, bytes) else part for part in parts)
