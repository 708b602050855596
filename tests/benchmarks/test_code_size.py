"""benchmarks.code_size counts what ``wc -l`` counts, at a git ref and in the working tree."""

from __future__ import annotations

from pathlib import Path
import subprocess

from benchmarks import code_size


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def test_counts_lines_at_a_ref_and_now(tmp_path: Path) -> None:
    for folder in code_size.FOLDERS:
        (tmp_path / code_size.PACKAGE / folder).mkdir(parents=True)
        (tmp_path / code_size.PACKAGE / folder / "a.py").write_text("x = 1\n\n# c\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    (tmp_path / code_size.PACKAGE / "read" / "a.py").write_text("x = 1\n")
    (tmp_path / code_size.PACKAGE / "store" / "sub").mkdir()
    (tmp_path / code_size.PACKAGE / "store" / "sub" / "b.py").write_text("y = 2\nz = 3\n")
    rows = code_size.measure(tmp_path, "HEAD")
    by = {row["workload"]: row for row in rows}
    assert (by["lines of read/"]["baseline"], by["lines of read/"]["ours"]) == (3, 1)
    assert (by["lines of store/"]["baseline"], by["lines of store/"]["ours"]) == (3, 5)
    assert by["lines of read/"]["non-blank"] == "2 -> 1"
    total = by["lines of read/ + store/ + verify/"]
    assert (total["baseline"], total["ours"], total["change"]) == (9, 9, 0)
    assert total["status"] == "not met"
