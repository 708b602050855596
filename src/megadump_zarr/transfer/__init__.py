"""Move dumps to object stores: ``upload`` a local dump, or ``UploadOnReady`` each window as it commits.

Writing straight to an object store needs nothing from here: ``TensorDumpConfig("s3://bucket/run",
storage_options=...)`` does it (see :mod:`megadump_zarr.store.object_backend`).
"""

from megadump_zarr.transfer.ready import UploadOnReady
from megadump_zarr.transfer.upload import UploadError, UploadReport, upload, upload_windows

__all__ = ["UploadError", "UploadOnReady", "UploadReport", "upload", "upload_windows"]
