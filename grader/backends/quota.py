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

The plain container (the baseline: ``plan.BASELINE_HARDENING``) had a third
writable place, the container's own layer on the engine's disk, which nothing
on this engine can bound (a job wrote 2 GiB there in 1.5 s). Its root is now
read-only as well, and the directories its user could write in a default
container (``Hardening.scratch_dirs``: /var/tmp, /run/lock) are subdirectories
of one more tmpfs of ``scratch_bytes`` under the run directory
(``bound_scratch``), bound into the sandbox; a run that fills it is refused as
one that fills its world copy. Where this process cannot mount it, Docker's own
tmpfs of that size stands in for each directory (``docker.run.hardened_options``):
bounded just as well, but a full one is not seen. What differs from a default
container: a write to a system path fails with EROFS instead of EACCES (its
user, uid 1000, could not write there anyway), and /var/tmp and /run/lock hold
``scratch_bytes`` between them; its capabilities, setuid binaries, mounts and
network stay Docker's, so the levels it teaches keep their verdicts.

Both tmpfs also bound their files (``nr_inodes``): many empty files use no
block, only the kernel's memory, and would otherwise end in the run's OOM kill
rather than in this error.

A tmpfs holds its bytes in memory: ``WORLD_BYTES`` times the runs at once is
what the worker's machine may hold, and it is freed when the run directory is
removed (``remove_dir``: every place a run directory is removed, the run's own removal, the hub's, the sweep's
and the srt backend's, unmounts first; ``rmtree`` alone cannot remove a mount point and would leave it mounted).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

from grader.backends.owners import OWNER, STAGING
from grader.core.errors import SandboxLabError

__all__ = [
    "SCRATCH_FILES", "WORLD_BYTES", "WORLD_FILES", "DiskQuotaExceeded", "bound_scratch", "bound_world", "filled",
    "release", "remove_dir", "scratch_name",
]

# 64 MiB: the world is ~40 KiB of files, and no lesson, task or level writes more than a few KiB into it;
# a hostile job gets 64 MiB of memory-backed disk, four jobs of one token 256 MiB.
WORLD_BYTES = 64 * 1024 * 1024
# Files (inodes) each tmpfs may hold: the world is ~100 files, a default container's /var/tmp holds none.
WORLD_FILES = 16384
SCRATCH_FILES = 4096
# Less than this left after a run: the run filled its quota (a writer stops at ENOSPC a block or so short).
_SLACK = 256 * 1024
# the mount sources ``release`` unmounts; a sandbox sees them in its mountinfo (tests/integration/test_replay.py)
_WORLD_SOURCE, _SCRATCH_SOURCE = "sandbox-lab-world", "sandbox-lab-scratch"


class DiskQuotaExceeded(SandboxLabError):
    """A run wrote its world copy (or its writable directories) full: refused with the limit named, never judged
    or retried."""

    def __init__(self, limit: int = WORLD_BYTES, where: str = "its world copy", files: int = WORLD_FILES) -> None:
        self.limit, self.where, self.files = limit, where, files
        super().__init__(f"the run wrote {limit // (1024 * 1024)} MiB (or {files} files) into {where}, the most one "
                         "run may write (its disk quota); it was stopped there and not judged. Write less: no task or "
                         "level needs more than a few KiB")


def _mount(path: Path, source: str, limit: int, files: int) -> bool:
    """A tmpfs of ``limit`` bytes and ``files`` inodes at ``path`` (made empty here); False where this process
    cannot mount (not root, not Linux)."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return False
    path.mkdir(mode=0o755, exist_ok=True)
    # nosuid, nodev: the sandbox's user writes here, and nothing it writes may become a device or a setuid file
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={limit},nr_inodes={files},mode=0755,nosuid,nodev",
                           source, str(path)], capture_output=True, text=True, check=False)
    return done.returncode == 0


def bound_world(world: Path, limit: int = WORLD_BYTES) -> bool:
    """Mount a tmpfs of ``limit`` bytes at ``world`` (made empty here); False where this process cannot (not root,
    not Linux), and the world copy stays on the runs root's disk."""
    return _mount(world, _WORLD_SOURCE, limit, WORLD_FILES)


def scratch_name(directory: str) -> str:
    """The subdirectory of a run's scratch that stands in for ``directory`` of the image (``/var/tmp``: ``var-tmp``)."""
    return directory.strip("/").replace("/", "-")


def bound_scratch(scratch: Path, dirs: tuple[str, ...], limit: int) -> dict[str, Path]:
    """Mount one tmpfs of ``limit`` bytes at ``scratch`` holding an empty directory for each of ``dirs`` (root's,
    mode 1777, as /var/tmp is in the image): the image directory → its stand-in. Empty where this process cannot
    mount, and the caller keeps Docker's own tmpfs (bounded, but not seen full)."""
    if not dirs or not _mount(scratch, _SCRATCH_SOURCE, limit, SCRATCH_FILES):
        return {}
    out: dict[str, Path] = {}
    for d in dirs:
        sub = scratch / scratch_name(d)
        sub.mkdir()
        os.chmod(sub, 0o1777)  # sticky, as in the image: one process of the run cannot delete another's files
        out[d] = sub
    return out


def filled(world: Path, limit: int = WORLD_BYTES) -> bool:
    """Whether the run wrote ``world`` (a bounded one) to its limit, in bytes or in files."""
    try:
        st = os.statvfs(world)
    except OSError:
        return False
    if st.f_blocks * st.f_frsize > limit:
        return False  # not one of ours: a disk bigger than the quota
    return st.f_bavail * st.f_frsize < _SLACK or (st.f_files > 0 and st.f_favail < 2)


def release(root: Path) -> None:
    """Unmount every quota mounted under ``root`` (lazily: a process still inside cannot keep it), so the
    directory can be removed and the memory is freed. Nothing mounted there: nothing done."""
    try:
        with open("/proc/self/mounts", encoding="utf-8") as fh:
            points = [line.split()[1] for line in fh if line.split(" ", 1)[0] in (_WORLD_SOURCE, _SCRATCH_SOURCE)]
    except OSError:
        return
    prefix = str(root.resolve()) + "/"
    for point in sorted(points, reverse=True):
        path = point.replace("\\040", " ")
        if path.startswith(prefix):
            subprocess.run(["umount", "-l", path], capture_output=True, check=False)


def remove_dir(root: Path) -> None:
    """Remove a run directory: its quota unmounted first, then the tree, its owner record last (errors ignored,
    as a sweep retries).

    A sweep takes a directory by its record, or by the pid in a staging name (``owners.staging_pid``). A grader
    killed half-way through ``rmtree``, which takes entries in the directory's own order, once left a tree
    without its record, which no sweep removes while it is younger than ``cleanup.ABANDONED_S`` (seen in CI, a
    batch killed mid-run). So the directory is first renamed to a staging name of this process, and its record
    goes last: whatever a kill leaves is still named as this process's, by its record or by its name.
    """
    release(root)
    doomed = root.with_name(f"{STAGING}{os.getpid()}-{root.name}")
    try:
        os.rename(root, doomed)  # in the same directory: atomic; a kill before it leaves the record in place
        root = doomed
    except OSError:
        pass  # gone already, or not ours to rename: removed where it is, record last
    try:
        entries = [e for e in os.scandir(root) if e.name != OWNER]
    except OSError:
        entries = []
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
    shutil.rmtree(root, ignore_errors=True)
