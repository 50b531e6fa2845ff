"""The disk one run may write: its world copy on a tmpfs of a fixed size, released with the run directory.

Issue 39: an attack wrote 4 GiB under /tmp/sandbox-lab-runs in 7 s. A sandbox
writes the disk only through the world copy's writable binds (its root is
read-only, its /tmp a 16 MiB tmpfs: ``core.plan.Hardening``), so bounding the
world copy bounds the run. Measured on this machine's engine (overlay2 on
ext4): ``--storage-opt size=`` is refused ("supported only for overlay over
xfs with 'pquota'"), there is no project quota on ext4, and a tmpfs mounted
with ``size=`` over the world directory, bound into the sandbox, stops a
writer at its size with ENOSPC. It needs root on the grader's machine and an
engine that shares its disk (``make serve``'s workers as root); elsewhere
(``bound_world`` returns False) the world copy is not bounded here, and the
floor is the engine host's own disk (docs/operators.md).

A tmpfs holds its bytes in memory: ``WORLD_BYTES`` times the runs at once is
what the worker's machine may hold, and it is freed when the run directory is
removed (``remove_dir``: every place a run directory is removed, the run's own removal, the hub's, the sweep's
and the srt backend's, unmounts first; ``rmtree`` alone cannot remove a mount point and would leave it mounted).

Imports: errors and the standard library. Never ``docker``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from grader.core.errors import SandboxLabError

__all__ = ["WORLD_BYTES", "DiskQuotaExceeded", "bound_world", "filled", "release", "remove_dir"]

# 64 MiB: the world is ~40 KiB of files, and no lesson, task or level writes more than a few KiB into it;
# a hostile job gets 64 MiB of memory-backed disk, four jobs of one token 256 MiB.
WORLD_BYTES = 64 * 1024 * 1024
# Less than this left after a run: the run filled its quota (a writer stops at ENOSPC a block or so short).
_SLACK = 256 * 1024


class DiskQuotaExceeded(SandboxLabError):
    """A run wrote its world copy full: the run is refused with the limit named, never judged or retried."""

    def __init__(self, limit: int = WORLD_BYTES) -> None:
        self.limit = limit
        super().__init__(f"the run wrote {limit // (1024 * 1024)} MiB into its world copy, the most one run may "
                         "write (its disk quota); it was stopped there and not judged. Write less: no task or level "
                         "needs more than a few KiB")


def bound_world(world: Path, limit: int = WORLD_BYTES) -> bool:
    """Mount a tmpfs of ``limit`` bytes at ``world`` (made empty here); False where this process cannot (not root,
    not Linux), and the world copy stays on the runs root's disk."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return False
    world.mkdir(mode=0o755, exist_ok=True)
    # nosuid, nodev: the sandbox's user writes here, and nothing it writes may become a device or a setuid file
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={limit},mode=0755,nosuid,nodev", "sandbox-lab-world",
                           str(world)], capture_output=True, text=True, check=False)
    return done.returncode == 0


def filled(world: Path, limit: int = WORLD_BYTES) -> bool:
    """Whether the run wrote ``world`` (a bounded one) to its limit."""
    try:
        st = os.statvfs(world)
    except OSError:
        return False
    return st.f_blocks * st.f_frsize <= limit and st.f_bavail * st.f_frsize < _SLACK


def release(root: Path) -> None:
    """Unmount every quota mounted under ``root`` (lazily: a process still inside cannot keep it), so the
    directory can be removed and the memory is freed. Nothing mounted there: nothing done."""
    try:
        with open("/proc/self/mounts", encoding="utf-8") as fh:
            points = [line.split()[1] for line in fh if line.startswith("sandbox-lab-world ")]
    except OSError:
        return
    prefix = str(root.resolve()) + "/"
    for point in sorted(points, reverse=True):
        path = point.replace("\\040", " ")
        if path.startswith(prefix):
            subprocess.run(["umount", "-l", path], capture_output=True, check=False)


def remove_dir(root: Path) -> None:
    """Remove a run directory: its quota unmounted first, then the tree (errors ignored, as a sweep retries)."""
    release(root)
    shutil.rmtree(root, ignore_errors=True)
