"""The package version, in a leaf every layer may import (``import megadump_zarr`` would be an upward edge)."""

__version__ = "0.1.0"
