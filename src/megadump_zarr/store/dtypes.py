"""Zarr v3 data types for bfloat16 and float8.

zarr-python 3.1 ships no data types for the ``ml_dtypes`` floats that MegaKernel
tensors use, so this module defines them as zarr ``ZDType`` classes:

========================  ====================  ===================================
class                     Zarr v3 ``data_type``  numpy dtype
========================  ====================  ===================================
:class:`BFloat16`         ``"bfloat16"``        ``ml_dtypes.bfloat16``
:class:`Float8E4M3FN`     ``"float8_e4m3fn"``   ``ml_dtypes.float8_e4m3fn``
:class:`Float8E5M2`       ``"float8_e5m2"``     ``ml_dtypes.float8_e5m2``
========================  ====================  ===================================

``bfloat16`` and ``float8_e5m2`` are the names defined in zarr-extensions
(https://github.com/zarr-developers/zarr-extensions/tree/main/data-types).
zarr-extensions has no entry for the finite-only E4M3 variant (its
``float8_e4m3`` is the IEEE-like format with Inf, a different encoding), so we
chose torch's spelling ``float8_e4m3fn``. zarr-python would flag such a
non-standard name with an ``UnstableSpecificationWarning``; we deliberately do
not, because every MegaKernel dump containing fp8 weights would warn.

Zarr v2 has no representation for these types: ``to_json(zarr_format=2)``
raises ``ValueError`` and v2 metadata never matches them.

Fill values are encoded as the Zarr v3 core spec prescribes for IEEE floats:
a JSON number, ``"NaN"``, ``"Infinity"``, ``"-Infinity"``, or a ``"0x..."``
string holding the raw big-endian bits (4 hex digits for bfloat16, 2 for
float8). zarr's own float helpers read 4 hex digits as IEEE float16, which is
wrong for bfloat16, hence the overrides here. A NaN whose bits differ from the
type's canonical NaN (``0x7fc0``, ``0x7f``, ``0x7e``) is written in hex so that
its sign and payload survive.

Registration: pyproject.toml declares these classes in the ``zarr.data_type``
entry-point group. zarr 3.1 collects that group when ``zarr`` is imported, but
only registers the classes when ``zarr.dtype.data_type_registry._lazy_load()``
runs, and zarr 3.1 itself never calls it. Importing this module therefore also
registers the three classes, so either ``_lazy_load()`` or loading the entry
points with :mod:`importlib.metadata` makes them available.

This module is imported by zarr through the entry points, so it must not import
anything else from ``megadump_zarr``. It does not import ``ml_dtypes`` either (half a second of
start-up, longer than the rest of ``megadump compare``'s imports on a float32 dump): the classes name
their ``ml_dtypes`` types through :class:`_MLType`, which imports it when a bfloat16/float8 type is
first used, and a numpy dtype cannot be an ``ml_dtypes`` one before ``ml_dtypes`` is imported
(:meth:`_MLDtypesFloat._check_native_dtype`), so matching float32 against the registry imports nothing.
"""

from __future__ import annotations

import string
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Self, SupportsFloat, SupportsIndex

import numpy as np
from zarr.core.dtype.common import DataTypeValidationError, HasItemSize
from zarr.core.dtype.npy.common import check_json_float_v2, float_from_json_v2, float_to_json_v3
from zarr.core.dtype.npy.float import BaseFloat
from zarr.core.dtype.wrapper import ZDType
from zarr.dtype import data_type_registry

if TYPE_CHECKING:
    from zarr.core.common import JSON, ZarrFormat
    from zarr.core.dtype.common import DTypeJSON

__all__ = ["BFloat16", "Float8E4M3FN", "Float8E5M2"]


class _MLType:
    """A class attribute naming an ``ml_dtypes`` type, imported on first use (see the module docstring).

    Args:
        name: The ``ml_dtypes`` scalar type's name, e.g. ``"bfloat16"``.
        dtype_class: Give the numpy dtype class (``type(np.dtype(scalar))``, zarr's ``dtype_cls``)
            instead of the scalar type.
    """

    def __init__(self, name: str, *, dtype_class: bool = False) -> None:
        self.name, self.dtype_class = name, dtype_class

    def __set_name__(self, owner: type, attr: str) -> None:
        self.owner, self.attr = owner, attr

    def __get__(self, obj: object, owner: type | None = None) -> Any:
        import ml_dtypes

        scalar = getattr(ml_dtypes, self.name)
        value = type(np.dtype(scalar)) if self.dtype_class else scalar
        setattr(self.owner, self.attr, value)  # resolved once: later lookups are plain class attributes
        return value


class _MLDtypesFloat:
    """Behaviour shared by the ``ml_dtypes`` float wrappers.

    A mixin rather than a ``ZDType``: :class:`BFloat16` combines it with zarr's
    ``BaseFloat`` (which adds endianness), the float8 classes with a plain
    ``ZDType`` (one-byte types have no endianness, see :class:`_Float8`).
    """

    _zarr_v3_name: ClassVar[str]
    scalar_type: ClassVar[type[np.generic]]
    """The ``ml_dtypes`` scalar type, e.g. ``ml_dtypes.bfloat16``."""

    @property
    def item_size(self) -> int:
        """Size of one element in bytes."""
        return np.dtype(self.scalar_type).itemsize

    @classmethod
    def _check_native_dtype(cls, dtype: Any) -> bool:
        """Whether ``dtype`` is this type's numpy dtype; False without importing ``ml_dtypes`` when it is
        not imported yet (no numpy dtype can be one of its types then).

        Args:
            dtype: A numpy dtype.
        """
        if "ml_dtypes" not in sys.modules:
            return False
        return type(dtype) is cls.dtype_cls

    @classmethod
    def _check_json_v3(cls, data: DTypeJSON) -> bool:
        """Whether ``data`` (a Zarr v3 ``data_type`` field) is this type's name."""
        return data == cls._zarr_v3_name

    @classmethod
    def _from_json_v3(cls, data: DTypeJSON) -> Self:
        """The data type of a Zarr v3 ``data_type`` field; ``DataTypeValidationError`` (zarr's registry then
        tries the next type) when it is not this type's name."""
        if cls._check_json_v3(data):
            return cls()
        msg = f"Invalid JSON representation of {cls.__name__}: got {data!r}, expected {cls._zarr_v3_name!r}."
        raise DataTypeValidationError(msg)

    @classmethod
    def _from_json_v2(cls, data: DTypeJSON) -> Self:
        """Always ``DataTypeValidationError`` (Zarr v2 cannot name this type; zarr's registry moves on)."""
        msg = f"{cls._zarr_v3_name} has no Zarr v2 representation; got {data!r}."
        raise DataTypeValidationError(msg)

    def to_json(self, zarr_format: ZarrFormat) -> str:  # type: ignore[override]
        """The ``data_type`` metadata value (``ValueError`` unless ``zarr_format`` is 3)."""
        if zarr_format == 3:
            return self._zarr_v3_name
        raise _v2_unsupported(self._zarr_v3_name, zarr_format)

    def _check_scalar(self, data: object) -> bool:
        """Whether ``data`` (a number, a numpy scalar or a numeric string) can be converted to this type."""
        if isinstance(data, str):
            try:
                float(data)
            except ValueError:
                return False
            return True
        return isinstance(data, SupportsFloat | SupportsIndex)

    def cast_scalar(self, data: object) -> Any:
        """Convert ``data`` to a scalar of this type, rounding to nearest even.

        A scalar that already has this type is returned unchanged, so NaN
        payloads survive.

        Args:
            data: A number, numpy scalar or numeric string.

        Raises:
            TypeError: ``data`` is not a number.
            ValueError: ``data`` is not NaN but becomes NaN, i.e. Inf or an
                out-of-range value for a type without Inf (float8_e4m3fn).
        """
        if isinstance(data, self.scalar_type):
            return data
        if not self._check_scalar(data):
            raise TypeError(f"Cannot convert {data!r} of type {type(data)} to a scalar of data type {self}.")
        value = self.scalar_type(float(data))  # type: ignore[arg-type]
        if _isnan(value) and not _isnan(float(data)):  # type: ignore[arg-type]
            raise ValueError(f"{data!r} is not representable in {self._zarr_v3_name} (it would become NaN).")
        return value

    def default_scalar(self) -> Any:
        """Return zero of this type, the default fill value."""
        return self.cast_scalar(0)

    def from_json_scalar(self, data: JSON, *, zarr_format: ZarrFormat) -> Any:
        """Decode a Zarr v3 ``fill_value``.

        Args:
            data: A JSON number, ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` or a
                ``"0x"`` string with ``2 * item_size`` hex digits of raw big-endian bits.
            zarr_format: Must be 3.

        Raises:
            TypeError: ``data`` has none of the forms above.
            ValueError: A hex string of the wrong length, a value the type cannot
                hold, or ``zarr_format`` is not 3.
        """
        if zarr_format != 3:
            raise _v2_unsupported(self._zarr_v3_name, zarr_format)
        if isinstance(data, str) and data.startswith("0x"):
            digits = data[2:]
            if len(digits) != 2 * self.item_size or not set(digits) <= set(string.hexdigits):
                n = 2 * self.item_size
                raise ValueError(f"Invalid {self._zarr_v3_name} fill value {data!r}: expected '0x' and {n} hex digits.")
            return self._from_bits(int(digits, 16))
        if check_json_float_v2(data):
            return self.cast_scalar(float_from_json_v2(data))  # type: ignore[arg-type]
        msg = (
            f"Invalid {self._zarr_v3_name} fill value {data!r}: "
            "expected a number, 'NaN', 'Infinity', '-Infinity' or a hex string."
        )
        raise TypeError(msg)

    def to_json_scalar(self, data: object, *, zarr_format: ZarrFormat) -> float | str:
        """A fill value (what :meth:`cast_scalar` accepts) for Zarr v3 metadata (``ValueError`` unless
        ``zarr_format`` is 3)."""
        if zarr_format != 3:
            raise _v2_unsupported(self._zarr_v3_name, zarr_format)
        value = self.cast_scalar(data)
        bits = self._to_bits(value)
        if _isnan(value) and bits != self._to_bits(self.scalar_type(np.nan)):
            return f"0x{bits:0{2 * self.item_size}x}"
        return float_to_json_v3(value)

    def _to_bits(self, value: np.generic) -> int:
        """Return the raw bits of a scalar of this type as an unsigned integer."""
        return int(np.array(value, dtype=self.scalar_type).view(f"u{self.item_size}"))

    def _from_bits(self, bits: int) -> Any:
        """Return the scalar of this type whose raw bits are ``bits``."""
        return np.array(bits, dtype=f"u{self.item_size}").view(self.scalar_type)[()]


def _isnan(value: object) -> bool:
    """``numpy.isnan`` without the "invalid value" warning that signalling NaNs raise."""
    with np.errstate(invalid="ignore"):
        return bool(np.isnan(value))


def _v2_unsupported(name: str, zarr_format: object) -> ValueError:
    """The error raised when a Zarr v2 encoding of type ``name`` is requested."""
    return ValueError(f"{name} is only supported in Zarr format 3, not zarr_format={zarr_format!r}.")


@dataclass(frozen=True, kw_only=True)
class BFloat16(_MLDtypesFloat, BaseFloat[Any, Any]):  # type: ignore[misc]
    """Zarr data type ``bfloat16``: 1 sign, 8 exponent, 7 mantissa bits.

    Wraps ``ml_dtypes.bfloat16``. Like zarr's ``Float16`` it has an
    ``endianness`` (default little) that the ``bytes`` codec writes out.
    """

    dtype_cls = _MLType("bfloat16", dtype_class=True)
    scalar_type = _MLType("bfloat16")
    _zarr_v3_name = "bfloat16"


@dataclass(frozen=True, kw_only=True)
class _Float8(_MLDtypesFloat, ZDType[Any, Any], HasItemSize):  # type: ignore[misc]
    """Base of the one-byte float types.

    Unlike zarr's ``BaseFloat`` it has no endianness, mirroring zarr's ``Int8``:
    the ``bytes`` codec then needs no ``endian`` setting, and arrays written by
    other implementations without one still open.
    """

    @classmethod
    def from_native_dtype(cls, dtype: np.dtype[Any]) -> Self:
        """Build the data type from a numpy dtype.

        Args:
            dtype: Must be this class's ``ml_dtypes`` dtype.

        Raises:
            DataTypeValidationError: ``dtype`` is another dtype.
        """
        if cls._check_native_dtype(dtype):
            return cls()
        raise DataTypeValidationError(f"Invalid data type: {dtype}. Expected an instance of {cls.dtype_cls}")

    def to_native_dtype(self) -> np.dtype[Any]:
        """Return the numpy dtype."""
        return np.dtype(self.scalar_type)


@dataclass(frozen=True, kw_only=True)
class Float8E4M3FN(_Float8):
    """Zarr data type ``float8_e4m3fn``: 4 exponent, 3 mantissa bits, no Inf.

    Wraps ``ml_dtypes.float8_e4m3fn`` (torch ``float8_e4m3fn``). NaN is
    ``0x7f``/``0xff``; finite range is +/-448. The name is torch's, not a
    zarr-extensions one (see the module docstring).
    """

    dtype_cls = _MLType("float8_e4m3fn", dtype_class=True)
    scalar_type = _MLType("float8_e4m3fn")
    _zarr_v3_name = "float8_e4m3fn"


@dataclass(frozen=True, kw_only=True)
class Float8E5M2(_Float8):
    """Zarr data type ``float8_e5m2``: 5 exponent, 2 mantissa bits, IEEE-like.

    Wraps ``ml_dtypes.float8_e5m2`` (torch ``float8_e5m2``), with NaN and +/-Inf.
    """

    dtype_cls = _MLType("float8_e5m2", dtype_class=True)
    scalar_type = _MLType("float8_e5m2")
    _zarr_v3_name = "float8_e5m2"


for _cls in (BFloat16, Float8E4M3FN, Float8E5M2):
    data_type_registry.register(_cls._zarr_v3_name, _cls)
del _cls
