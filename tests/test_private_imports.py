"""No module imports another module's private name (``tests/_layers.py`` :func:`private_imports`).

``KNOWN`` lists the private imports still there (issue 25 counted 12 import statements; the ones across
rooms, ``cli/main.py`` -> ``store.redact._Scrubber`` and ``read``'s ``catalog._window_info`` used by
``integrity`` and ``analyse.records``, are public now). The test fails on any other, naming the file,
line and name, and on a listed one that is gone (so the list only shrinks).
"""

from __future__ import annotations

from pathlib import Path
import textwrap

from tests._layers import PrivateImport, private_imports

ROOT = Path(__file__).resolve().parents[1] / "src" / "megadump_zarr"

KNOWN: set[tuple[str, str, str]] = set()
"""Private names still imported from another module (each inside one room): make them public or move them."""


def _found() -> set[tuple[str, str, str]]:
    return {(found.source, found.target, found.name) for found in private_imports(ROOT)}


def test_no_new_private_import() -> None:
    new = [str(found) for found in private_imports(ROOT) if (found.source, found.target, found.name) not in KNOWN]
    assert not new, "private names imported from another module (make them public or move them):\n" + "\n".join(new)


def test_known_private_imports_are_still_there() -> None:
    gone = sorted(KNOWN - _found())
    assert not gone, f"remove these from tests/test_private_imports.py KNOWN, they are fixed: {gone}"


def test_the_fixed_ones_stay_fixed() -> None:
    names = {(source, name) for source, _, name in _found()}
    assert not names & {
        ("cli/main.py", "_Scrubber"),
        ("read/integrity.py", "_window_info"),
        ("analyse/records.py", "_window_info"),
        ("cli/commands/report.py", "_tolerance"),
    }


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "megadump_zarr"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def test_a_deliberate_private_import_is_named(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "__init__.py": "from megadump_zarr._version import __version__\n",  # a private module: allowed
            "_version.py": "__version__ = '1'\n",
            "store/__init__.py": "",
            "store/redact.py": "from ._own import _fine  # noqa\n_Scrubber = 1\n",
            "cli/__init__.py": "",
            "cli/main.py": "def f():\n    from megadump_zarr.store.redact import _Scrubber, Public\n"
            "from ..store.redact import __all__\n",
            "cli/self.py": "from megadump_zarr.cli.self import _mine\n",  # its own name: not across modules
        },
    )
    found = private_imports(root)
    assert [str(item) for item in found] == [
        "src/megadump_zarr/cli/main.py:2 imports _Scrubber from megadump_zarr.store.redact (a private name)",
        "src/megadump_zarr/store/redact.py:1 imports _fine from megadump_zarr.store._own (a private name)",
    ]
    assert found[0] == PrivateImport("cli/main.py", "megadump_zarr.store.redact", "_Scrubber", 2)
