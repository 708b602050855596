"""notebooks/explore_dump.ipynb: committed without outputs, and runs top to bottom on the venv's kernel."""

from __future__ import annotations

import json
import os
from pathlib import Path
import sys

import nbformat
import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "explore_dump.ipynb"


def test_committed_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.nbformat == 4
    assert nb.metadata["kernelspec"]["name"] == "python3"
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert len(code) >= 8
    for cell in code:
        assert cell.outputs == [], cell.source[:60]
        assert cell.execution_count is None, cell.source[:60]
    assert any(cell.cell_type == "markdown" for cell in nb.cells)


@pytest.fixture
def venv_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A ``python3`` kernel spec, first on JUPYTER_PATH, that runs this interpreter (the venv's)."""
    spec_dir = tmp_path / "jupyter" / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3 (megadump_zarr venv)",
                "language": "python",
            }
        )
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    return "python3"


def test_notebook_executes(venv_kernel, tmp_path):
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOK, as_version=4)
    # one extra cell, in memory only: which interpreter ran the notebook
    nb.cells.append(nbformat.v4.new_code_cell("import sys\nprint(sys.executable)"))
    client = NotebookClient(
        nb, timeout=300, kernel_name=venv_kernel, allow_errors=False, resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    errors = [
        output
        for cell in nb.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "error"
    ]
    assert not errors, errors
    printed = "".join(o.get("text", "") for o in nb.cells[-1].outputs if o.output_type == "stream")
    assert os.path.realpath(printed.strip()) == os.path.realpath(sys.executable)
    # the notebook did what it says: a compare table of passes and at least two figures
    text = "\n".join(
        o.get("text", "") if o.output_type == "stream" else str(o.get("data", {}).get("text/plain", ""))
        for cell in nb.cells
        if cell.cell_type == "code"
        for o in cell.outputs
    )
    assert "pass" in text and "first divergence: None" in text
    images = sum(
        "image/png" in o.get("data", {}) for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs
    )
    assert images >= 2
