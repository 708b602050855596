"""Storage layer: persist dump windows as Zarr v3 (``store.writer.WindowWriter``); imports nothing heavy."""
