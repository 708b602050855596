"""The compressor vocabulary shared by the config (validation) and the store (interpretation).

A leaf module: it imports nothing from the package, so every layer may use it.

Grammar (case-insensitive)::

    default                      the measured default (see DEFAULT_COMPRESSOR)
    none                         no compression (bytes codec only)
    zstd[-LEVEL]                 LEVEL 1..22, default 1
    blosc-CNAME[-LEVEL][-SHUF]   CNAME lz4|lz4hc|zstd|zlib|blosclz, LEVEL 1..9 (default 5),
                                 SHUF shuffle|bitshuffle|noshuffle (default shuffle)
"""

from __future__ import annotations

from dataclasses import dataclass
import re

__all__ = ["CompressorSpec", "DEFAULT_COMPRESSOR", "parse_compressor"]

# Chosen by `python -m benchmarks.codecs` on the demo block's activations (32768 x 1024, 4 MiB chunks,
# two threads): blosc lz4 with bit shuffle compresses bf16 1.26x at ~1140 MB/s and fp32 1.12x at ~930
# MB/s; zstd-1 gives 1.30x / 1.09x at ~800 / ~720 MB/s, zstd-3 the same ratios at half the speed, and
# blosc-zstd with bit shuffle 1.31x at ~440 MB/s. At disk speeds of ~1 GB/s the lz4 bit-shuffle output
# is written as fast as it is made, so it persists a window soonest.
DEFAULT_COMPRESSOR = "blosc-lz4-bitshuffle"

_BLOSC_CNAMES = ("lz4", "lz4hc", "zstd", "zlib", "blosclz")
_SHUFFLES = ("shuffle", "bitshuffle", "noshuffle")
_PATTERN = re.compile(
    r"^(?:(?P<none>none)|(?P<zstd>zstd)(?:-(?P<zlevel>\d+))?|"
    r"blosc-(?P<cname>[a-z0-9]+)(?:-(?P<blevel>\d+))?(?:-(?P<shuffle>[a-z]+))?)$"
)


@dataclass(frozen=True)
class CompressorSpec:
    """A parsed compressor name.

    Args:
        kind: ``"none"``, ``"zstd"`` or ``"blosc"``.
        level: Compression level (0 for none).
        cname: Blosc inner codec name, empty otherwise.
        shuffle: Blosc shuffle mode, empty otherwise.
    """

    kind: str
    level: int = 0
    cname: str = ""
    shuffle: str = ""

    @property
    def name(self) -> str:
        """Canonical spelling, for attributes and messages."""
        if self.kind == "none":
            return "none"
        if self.kind == "zstd":
            return f"zstd-{self.level}"
        return f"blosc-{self.cname}-{self.level}-{self.shuffle}"


def parse_compressor(value: object) -> CompressorSpec:
    """Parse a compressor name, raising a message that names the bad value.

    Args:
        value: A name in the grammar of this module, or ``None`` for no compression.
    """
    if value is None:
        return CompressorSpec("none")
    if not isinstance(value, str):
        raise TypeError(f"compressor must be a string such as 'zstd-1' or 'none', got {type(value).__name__}")
    text = value.strip().lower()
    if text == "default":
        text = DEFAULT_COMPRESSOR
    match = _PATTERN.match(text)
    if match is None:
        raise ValueError(
            f"unsupported compressor {value!r}; expected 'default', 'none', 'zstd[-LEVEL]' or "
            f"'blosc-CNAME[-LEVEL][-SHUFFLE]' with CNAME in {list(_BLOSC_CNAMES)}"
        )
    if match["none"]:
        return CompressorSpec("none")
    if match["zstd"]:
        level = int(match["zlevel"] or 1)
        if not 1 <= level <= 22:
            raise ValueError(f"compressor {value!r}: zstd level must be 1..22, got {level}")
        return CompressorSpec("zstd", level)
    cname = match["cname"]
    if cname not in _BLOSC_CNAMES:
        raise ValueError(f"compressor {value!r}: blosc codec must be one of {list(_BLOSC_CNAMES)}, got {cname!r}")
    level = int(match["blevel"] or 5)
    if not 1 <= level <= 9:
        raise ValueError(f"compressor {value!r}: blosc level must be 1..9, got {level}")
    shuffle = match["shuffle"] or "shuffle"
    if shuffle not in _SHUFFLES:
        raise ValueError(f"compressor {value!r}: blosc shuffle must be one of {list(_SHUFFLES)}, got {shuffle!r}")
    return CompressorSpec("blosc", level, cname, shuffle)
