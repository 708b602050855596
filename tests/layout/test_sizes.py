"""The size words, defined once (``layout.sizes``): compression is logical bytes / bytes on disk, and a
transfer rate always has a digit that is not zero (never ``0 MiB/s``)."""

from __future__ import annotations

import re

from hypothesis import given, strategies as st

from megadump_zarr.layout.sizes import compression, compression_text, transfer_rate
from megadump_zarr.transfer.upload import UploadReport


def test_compression_is_logical_over_on_disk() -> None:
    assert compression(300, 100) == 3.0 and compression(100, 400) == 0.25
    assert compression(100, None) is None and compression(100, 0) is None  # unknown: not 1.00
    assert compression_text(3.0) == "compression 3.00×" and compression_text(None) == "compression —"


def test_rates_in_the_unit_that_shows_them() -> None:
    assert transfer_rate(12 * 2**20, 1.0) == "12 MiB/s"
    assert transfer_rate(300 * 2**10, 1.0) == "300 KiB/s"
    assert transfer_rate(50_000, 10.0) == "4.88 KiB/s"
    assert transfer_rate(80, 1.0) == "80 B/s"
    assert transfer_rate(0, 1.0) is None and transfer_rate(10, 0.0) is None


@given(st.integers(1, 2**50), st.floats(1e-6, 1e6))
def test_a_rate_never_reads_zero(n_bytes: int, seconds: float) -> None:
    rate = transfer_rate(n_bytes, seconds)
    assert rate is not None and re.fullmatch(r"[\d.e+-]+ (B|KiB|MiB|GiB)/s", rate), rate
    number = rate.split(" ")[0]
    assert float(number) > 0 and re.search(r"[1-9]", number.split("e")[0]), rate


def test_a_tiny_upload_prints_no_zero_rate() -> None:
    report = UploadReport(
        "s3://b/x", windows=["rank_0/window_0000"], uploaded_objects=3, uploaded_bytes=5000, seconds=0.8
    )
    line = report.summary()
    assert "0 MiB/s" not in line and "(6.1 KiB/s)" in line and "(4.9 KiB) uploaded" in line, line
    assert "MiB/s" not in UploadReport("s3://b/x", seconds=0.2).summary()  # nothing moved: no rate
