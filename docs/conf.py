"""Sphinx configuration of the megadump_zarr documentation.

Why Sphinx (with myst-parser) rather than MkDocs-Material: the pages stay Markdown (MyST), while the two
references are generated from the code by Sphinx's own extensions: the CLI reference from the argparse
parser the ``megadump`` command runs (sphinx-argparse on ``megadump_zarr.cli.main.build_parser``), the API
reference from the docstrings of the names in ``__all__`` (autodoc + napoleon for the Google-style
``Args:`` sections the code uses). ``make docs`` builds with warnings as errors.
"""

from __future__ import annotations

from pathlib import Path
import sys

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent / "src"))

from megadump_zarr._version import __version__  # noqa: E402

project = "megadump_zarr"
author = "megadump_zarr developers"
copyright = "megadump_zarr developers, Apache-2.0"
release = version = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinxarg.ext",
    "apiref",
    "benchtable",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "benchmarks/*.json"]

smartquotes = False  # keep "--json" and "--only" as typed, not as dashes
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_typehints = "description"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
autosummary_generate = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True

html_theme = "furo"
html_title = f"megadump_zarr {release}"
html_static_path: list[str] = []
