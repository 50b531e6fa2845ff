"""A named pipe that offers more bytes than any reader's limit: what a path to ``/dev/zero`` or a FIFO does.

The writer offers ``OFFERED`` bytes and stops when the reader closes its end,
so a test of a bounded read finishes even when the read is not bounded (it
then reads all of them), and tells the two apart by how much was taken:
``Endless.taken()`` is what the writer got rid of before the reader closed.
Used instead of ``/dev/zero`` itself, which would take the machine's memory
when the bound is broken.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

OFFERED = 16 << 20  # 16 MiB: over every limit of the package's readers (policy 1 MB, attack 256 KiB), not over 64 MiB


class Endless:
    def __init__(self, path: Path, fill: bytes) -> None:
        self.path, self.fill, self.written = path, fill, 0
        self.thread = threading.Thread(target=self._write, daemon=True)

    def _write(self) -> None:
        chunk = (self.fill * (65536 // len(self.fill) + 1))[:65536]
        try:
            with open(self.path, "wb", buffering=0) as fh:  # blocks until a reader opens the other end
                while self.written < OFFERED:
                    self.written += fh.write(chunk)
        except BrokenPipeError:
            pass  # the reader closed its end: what it took is what was written

    def taken(self) -> int:
        """What the writer got rid of; called once the reader under test is done with the pipe."""
        self.thread.join(timeout=0.5)
        self.release()  # a reader that opened and closed before the writer's open leaves it waiting for one
        self.thread.join(timeout=30)
        return self.written

    def release(self) -> None:
        """Open and close the reading end, so a writer still waiting in ``open`` goes on and meets a closed pipe."""
        if not self.thread.is_alive():
            return
        try:
            os.close(os.open(self.path, os.O_RDONLY | os.O_NONBLOCK))
        except OSError:
            pass


@contextmanager
def endless_pipe(path: Path, fill: bytes = b" ") -> Iterator[Endless]:
    """A FIFO at ``path`` whose writer offers ``OFFERED`` bytes of ``fill``; removed afterwards."""
    os.mkfifo(path)
    pipe = Endless(path, fill)
    pipe.thread.start()
    try:
        yield pipe
    finally:
        pipe.release()  # nobody opened it, or not after the writer began to wait: the writer ends
        pipe.thread.join(timeout=5)
        path.unlink(missing_ok=True)
