"""The documentation site builds with warnings as errors (what ``make docs`` runs), and what it generates from
the code is complete: every public name of ``megadump_zarr.__all__`` and ``megadump_zarr.runtime.__all__``
in the API reference, every ``megadump`` command in the CLI reference, every benchmark JSON as a table."""

from __future__ import annotations

from functools import cache
import json
from pathlib import Path
import subprocess
import sys

import pytest

import megadump_zarr
import megadump_zarr.runtime

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


@cache
def _build(out: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), out],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = _build(str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return out


def test_the_site_builds_without_warnings(site: Path) -> None:
    for page in ("index", "install", "commands", "quickstart", "concepts", "promises", "benchmarks", "changelog"):
        assert (site / f"{page}.html").is_file(), page
    for page in ("guides/own-kernel", "guides/integrate-runtime", "reference/api", "reference/cli"):
        assert (site / f"{page}.html").is_file(), page


@pytest.mark.parametrize("module", [megadump_zarr, megadump_zarr.runtime], ids=lambda m: m.__name__)
def test_every_public_name_is_in_the_api_reference(site: Path, module) -> None:
    html = (site / "reference" / "api.html").read_text(encoding="utf-8")
    missing = [name for name in module.__all__ if f'id="{module.__name__}.{name}"' not in html]
    assert missing == []


def test_every_command_is_in_the_cli_reference(site: Path) -> None:
    from megadump_zarr.cli.main import build_parser

    html = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    commands = [action for action in build_parser()._subparsers._group_actions][0].choices
    missing = [name for name in commands if f'id="megadump-{name}"' not in html]
    assert len(commands) >= 10 and missing == []


def test_every_benchmark_result_is_a_table(site: Path) -> None:
    html = (site / "benchmarks.html").read_text(encoding="utf-8")
    results = sorted((DOCS / "benchmarks").glob("*.json"))
    assert results
    for path in results:
        document = json.loads(path.read_text(encoding="utf-8"))
        assert document["run"]["date"] in html, path.name
    assert html.count('class="benchmark-table') == len(results)


def test_the_changelog_is_in_the_site(site: Path) -> None:
    html = (site / "changelog.html").read_text(encoding="utf-8")
    assert "Keep a Changelog" in html and "0.1.0" in html
