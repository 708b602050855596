"""The stated public API: every name in ``megadump_zarr.__all__`` and ``megadump_zarr.runtime.__all__`` exists
and has a docstring, and so has every public method and property of a public class (the API reference is
generated from them; tests/docs/test_docs_build.py checks each name is on that page)."""

from __future__ import annotations

import inspect
from pathlib import Path
import sys

import pytest

import megadump_zarr
import megadump_zarr.runtime

MODULES = [megadump_zarr, megadump_zarr.runtime]


def undocumented(module) -> list[str]:
    """The public names of ``module.__all__`` (and public members of its classes) without a docstring."""
    missing = []
    for name in module.__all__:
        value = getattr(module, name)
        if not (inspect.getdoc(value) or "").strip():
            missing.append(name)
        if inspect.isclass(value):
            for member, attribute in vars(value).items():
                if member.startswith("_") or not (inspect.isfunction(attribute) or isinstance(attribute, property)):
                    continue
                if not (inspect.getdoc(attribute) or "").strip():
                    missing.append(f"{name}.{member}")
    return missing


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_every_public_name_has_a_docstring(module) -> None:
    assert len(module.__all__) == len(set(module.__all__))
    assert undocumented(module) == []


def test_a_kernel_is_written_from_the_runtime_api_alone() -> None:
    for name in ("Graph", "MegaKernel", "OperatorNode", "SplitSpec", "TensorSpec", "Tile", "LaunchContext"):
        assert name in megadump_zarr.runtime.__all__


def test_the_package_face_names_what_the_guides_use() -> None:
    for name in ("TensorDumpConfig", "tensor_dump", "schedule", "open_dump", "compare", "root_cause", "replay"):
        assert name in megadump_zarr.__all__


def test_an_undocumented_name_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    module = types.ModuleType("fake")

    class Documented:
        """Has a docstring."""

        def method(self):
            pass

    module.Documented = Documented
    module.__all__ = ["Documented"]
    assert undocumented(module) == ["Documented.method"]


def test_importing_the_package_stays_light() -> None:
    import subprocess

    code = "import sys, megadump_zarr; print(sorted(m for m in ('torch', 'xarray', 'pandas') if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(Path(megadump_zarr.__file__).parents[1])},
    )
    assert done.stdout.strip() == "[]"
