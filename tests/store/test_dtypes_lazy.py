"""``ml_dtypes`` is imported only when a bfloat16/float8 type is used: not by ``import megadump_zarr``, not by
reading a float32 dump, and it is then imported on demand so bf16 arrays still open."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import json, sys
import numpy as np
import zarr
import megadump_zarr
from megadump_zarr.layout.dtypes import NUMPY_DTYPES
seen = {"after_import": "ml_dtypes" in sys.modules}
root = sys.argv[1]
a = zarr.create_array(root + "/f32.zarr", shape=(4,), dtype="float32")
a[:] = np.arange(4, dtype=np.float32)
assert zarr.open_array(root + "/f32.zarr")[:].tolist() == [0.0, 1.0, 2.0, 3.0]
seen["names"] = list(NUMPY_DTYPES)
seen["float32"] = str(NUMPY_DTYPES["float32"])
seen["after_float32"] = "ml_dtypes" in sys.modules
import ml_dtypes
b = zarr.create_array(root + "/bf16.zarr", shape=(3,), dtype=ml_dtypes.bfloat16)
b[:] = np.array([1.5, -2.0, 0.25], dtype=ml_dtypes.bfloat16)
read = zarr.open_array(root + "/bf16.zarr")
seen["bf16"] = [str(read.dtype), read[:].astype(np.float32).tolist(), NUMPY_DTYPES["bfloat16"] == read.dtype]
print(json.dumps(seen))
"""


def test_ml_dtypes_imported_only_for_bf16_and_fp8(tmp_path):
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["after_import"] is False
    assert seen["after_float32"] is False
    assert seen["float32"] == "float32"
    assert seen["names"][-3:] == ["bfloat16", "float8_e4m3fn", "float8_e5m2"] and "float32" in seen["names"]
    assert seen["bf16"] == ["bfloat16", [1.5, -2.0, 0.25], True]
