"""Reading a file someone names: a regular file only, and never more of it than a limit.

A path may name a pipe nobody writes to (opening it would wait for ever), a
device that never ends (``/dev/zero``: reading it whole takes the machine's
memory) or, in a student's submission, a symbolic link into somebody else's
files (a classmate's, the grader's own). ``read_regular`` opens without
blocking, asks the open file what it is (``NotRegular`` for anything but a
regular file: nothing can be swapped in between the check and the read), and
reads at most one byte past the limit (``TooLarge``): a file can grow, and
the size ``stat`` reports is no guard. A link is followed only where the
reader named the file itself (``follow``); a submission's never is, and
neither is a file with a second name (a hard link): where the link is not
followed, a file with more than one name is refused the same way.

Imports nothing of the package.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Optional, Union

__all__ = ["NotRegular", "TooLarge", "read_regular"]


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


def read_regular(path: Union[str, Path], limit: int, *, dir_fd: Optional[int] = None, follow: bool = False) -> bytes:
    """The bytes of the regular file at ``path`` (relative to ``dir_fd`` when given), at most ``limit``;
    ``NotRegular`` for a link (its last component is followed only with ``follow``: a file the reader named
    itself, never a submission; without ``follow`` a file with more than one name, a hard link, too), a directory,
    a pipe or a device; ``TooLarge`` over the limit; ``OSError``
    (``FileNotFoundError``, ...) as opening raises it."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegular("a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular("a directory" if stat.S_ISDIR(st.st_mode) else "a pipe or a device")
        if not follow and st.st_nlink > 1:
            # a hard link is a second name for somebody else's file (a classmate's, the grader's own), just as a
            # symbolic link points at one; it cannot be told from the original, so a submission never reads one
            raise NotRegular(f"a hard link (one of {st.st_nlink} names of the same file)")
        with os.fdopen(os.dup(fd), "rb") as fh:
            raw = fh.read(limit + 1)
    finally:
        os.close(fd)
    if len(raw) > limit:
        raise TooLarge(limit)
    return raw
