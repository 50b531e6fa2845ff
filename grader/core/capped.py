"""Reading a file someone names, never more of it than a limit: a path may be a pipe or a device that never ends.

``read_capped`` reads at most one byte past the limit and refuses the file
when it gets it (``TooLarge``), so ``/dev/zero`` or a FIFO costs a bounded
read, never the machine's memory. The size ``stat`` reports is no guard: a
device says 0.

``read_regular`` is for a file a student submitted: only a regular file, and
never through a symbolic link (``NotRegular``), since a link in a submission
points into somebody else's files (a classmate's, the grader's own) and a pipe
would block the grader. It opens without following and without blocking, then
asks the open file what it is, so nothing can be swapped in between the check
and the read.

Imports nothing of the package.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Optional, Union

__all__ = ["NotRegular", "TooLarge", "read_capped", "read_regular"]


class TooLarge(ValueError):
    """The file holds more than the limit; ``limit`` is that limit in bytes."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"larger than {limit:,} bytes")
        self.limit = limit


class NotRegular(ValueError):
    """Not a regular file: ``what`` it is instead ("a symbolic link", "a directory", "a pipe or a device")."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def read_capped(path: Path, limit: int) -> bytes:
    """The bytes of ``path`` when it holds at most ``limit``; ``TooLarge`` when it holds more; ``OSError`` as
    opening or reading it raises one."""
    with path.open("rb") as fh:
        raw = fh.read(limit + 1)
    if len(raw) > limit:
        raise TooLarge(limit)
    return raw


def read_regular(path: Union[str, Path], limit: int, *, dir_fd: Optional[int] = None, follow: bool = False) -> bytes:
    """The bytes of the regular file at ``path`` (relative to ``dir_fd`` when given), at most ``limit``;
    ``NotRegular`` for a link (its last component is followed only with ``follow``: a file the reader named
    itself, never a submission), a directory, a pipe or a device; ``TooLarge`` over the limit; ``OSError``
    (``FileNotFoundError``, ...) as opening raises it."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegular("a symbolic link") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegular("a directory" if stat.S_ISDIR(mode) else "a pipe or a device")
        with os.fdopen(os.dup(fd), "rb") as fh:
            raw = fh.read(limit + 1)
    finally:
        os.close(fd)
    if len(raw) > limit:
        raise TooLarge(limit)
    return raw
