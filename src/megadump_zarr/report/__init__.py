"""A divergence report a person can look at: one self-contained HTML file (``megadump report``).

``report_html(a, b)`` compares dump ``a`` with dump ``b`` and returns the page; ``report_html(a)`` shows
one dump's statistics and non-finite records. The page needs no network at view time.
"""

from __future__ import annotations

from typing import Any

from megadump_zarr.report.collect import ReportData, collect_comparison, collect_single
from megadump_zarr.report.html import render_html

__all__ = ["ReportData", "collect_comparison", "collect_single", "render_html", "report_html"]


def report_html(a: Any, b: Any = None, **options: Any) -> str:
    """The report page for dump ``a`` against dump ``b`` (or ``a`` alone).

    Args:
        a: The dump under test: a ``Dump`` or a path/URL.
        b: The reference dump, or None for a single-dump report.
        **options: For a comparison, ``rtol``, ``atol``, ``names``, ``select``, ``by``, ``worst``;
            for a single dump, ``names`` and ``select``.
    """
    data = collect_single(a, **options) if b is None else collect_comparison(a, b, **options)
    return render_html(data)
