"""Files the command line writes (``export-hdf5``, ``plot``): claimed exclusively, never clobbered.

:func:`claim_output` is the one way a command creates an output file:

- a new file is claimed with ``O_CREAT | O_EXCL`` before any work is done, so of two runs racing for one
  new name exactly one proceeds, the other is refused at once;
- an existing regular file is replaced only with ``overwrite=True`` (``--overwrite``);
- anything that exists and is not a regular file (a directory, a device node such as ``/dev/null``, a
  FIFO, a socket, a symbolic link — even one to a regular file) is refused, with or without ``overwrite``;
- the content is written to a temporary file in the same directory and renamed into place only when
  the writer finished without error: a reader never sees half a file, a failed run leaves nothing behind
  (not even its empty claim).
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
import os
from pathlib import Path
import secrets
import stat

__all__ = ["claim_output"]

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def _refuse_special(path: Path) -> os.stat_result | None:
    """``lstat`` of ``path`` (``None`` when absent); refuse anything that is not a regular file."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        raise FileExistsError(
            f"{path} exists and is {_kind(info.st_mode)}: refusing to write over it "
            "(even with --overwrite, only a regular file is ever replaced)"
        )
    return info


@contextlib.contextmanager
def claim_output(path: str | os.PathLike[str], overwrite: bool = False) -> Iterator[Path]:
    """Claim ``path`` as a new output; yield a temporary path to write, renamed onto ``path`` on success.

    Args:
        path: The output file to create.
        overwrite: Replace an existing regular file (default: refuse it).

    Yields:
        A path in the same directory (not yet existing, hidden, with ``path``'s suffix) that the caller
        writes completely.

    Raises:
        FileExistsError: ``path`` exists and ``overwrite`` is False, or it exists and is not a regular
            file, or another run claimed it first.
        FileNotFoundError: The parent directory does not exist.
        OSError: The claim or the final rename failed (e.g. permission denied).
        ValueError: The writer produced no file.
    """
    target = Path(os.path.expanduser(os.fspath(path)))
    parent = target.parent
    if not parent.is_dir():
        raise FileNotFoundError(f"cannot write {target}: directory {parent} does not exist")
    existing = _refuse_special(target)
    if existing is not None and not overwrite:
        raise FileExistsError(f"{target} already exists (pass --overwrite to replace it)")
    claimed: os.stat_result | None = None
    if existing is None:
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except FileExistsError:
            _refuse_special(target)
            raise FileExistsError(
                f"{target} already exists: another run claimed it first (pass --overwrite to replace it)"
            ) from None
        try:
            claimed = os.fstat(fd)
        finally:
            os.close(fd)
    # the temporary keeps the suffix, so writers that infer the format from it (matplotlib) still can
    temp = parent / f".{target.stem}.tmp-{os.getpid()}-{secrets.token_hex(4)}{target.suffix}"
    try:
        yield temp
        if not temp.is_file() or temp.is_symlink():
            raise ValueError(f"writing {target} produced no file")
        now = _refuse_special(target)
        if claimed is not None and (now is None or (now.st_ino, now.st_dev) != (claimed.st_ino, claimed.st_dev)):
            raise FileExistsError(
                f"{target} was replaced by someone else while it was being written; refusing to write over it"
            )
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            if temp.exists() or temp.is_symlink():
                temp.unlink()
        if claimed is not None:
            with contextlib.suppress(OSError):
                now = os.lstat(target)
                if (now.st_ino, now.st_dev) == (claimed.st_ino, claimed.st_dev) and now.st_size == 0:
                    target.unlink()  # our empty claim: leave nothing behind
        raise
