"""megadump_zarr: MegaKernel tensor dumps in Zarr v3."""
__version__ = "0.1.0"
