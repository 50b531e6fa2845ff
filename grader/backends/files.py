"""A service's working directory, by paths relative to it: the ``Files`` protocol, and its kind on the grader's disk.

A simulated internet or a proxy writes its config, ready file, heartbeat and
logs in one directory (``/run/sandbox-lab`` inside its container). The
grader reads and writes it through ``Files``: on the grader's own disk
(``HostFiles``, what the srt backend and a local Docker engine use), or, for a
Docker engine on another machine, in a volume reached through the engine's
API (``docker.volumes``). How a container mounts one is the Docker backend's
business (``docker.volumes.service_mount``), not this module's.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Protocol

from grader.backends.quota import remove_dir
from grader.backends.runs import MAX_OUTPUT
from grader.backends.owners import make_dir, write_file

__all__ = ["Files", "HostFiles", "Stat", "host_files", "host_path"]


@dataclass(frozen=True)
class Stat:
    """What the grader needs of a file a service writes: its size and its modification time (the engine's clock)."""

    size: int
    mtime: float


class Files(Protocol):
    """A service's working directory (``/run/sandbox-lab`` inside it), by paths relative to it."""

    @property
    def name(self) -> str: ...

    def sub(self, rel: str) -> "Files":
        """The same directory seen from ``rel`` (``out``): paths given to the view are under it."""
        ...

    def mkdir(self, rel: str) -> None: ...

    def write(self, rel: str, data: bytes) -> None:
        """Replace ``rel`` with ``data``; a reader sees the old or the new file, never a half-written one locally."""
        ...

    def stat(self, rel: str) -> Optional[Stat]:
        """None when ``rel`` does not exist (yet)."""
        ...

    def read(self, rel: str, offset: int = 0, limit: int = MAX_OUTPUT) -> bytes:
        """At most ``limit`` bytes of ``rel`` from ``offset``; b"" when there is no such file."""
        ...

    def remove(self) -> None: ...


@dataclass(frozen=True)
class HostFiles:
    """A directory on the grader's disk (a Docker engine on this machine binds it as it is)."""

    root: Path
    prefix: str = ""

    @property
    def name(self) -> str:
        return self.root.name

    def _p(self, rel: str) -> Path:
        return self.root / self.prefix / rel if self.prefix else self.root / rel

    def sub(self, rel: str) -> Files:
        return HostFiles(self.root, posixpath.join(self.prefix, rel) if self.prefix else rel)

    def mkdir(self, rel: str) -> None:
        make_dir(self._p(rel), parents=True, exist_ok=True)  # modes explicit: the umask decides nothing

    def write(self, rel: str, data: bytes) -> None:
        p = self._p(rel)
        tmp = p.with_name(p.name + ".tmp")
        write_file(tmp, data)
        os.replace(tmp, p)

    def stat(self, rel: str) -> Optional[Stat]:
        try:
            st = self._p(rel).stat()
        except OSError:
            return None
        return Stat(st.st_size, st.st_mtime)

    def read(self, rel: str, offset: int = 0, limit: int = MAX_OUTPUT) -> bytes:
        p = self._p(rel)
        if not p.is_file():
            return b""
        with p.open("rb") as fh:
            fh.seek(offset)
            return fh.read(limit)

    def remove(self) -> None:
        remove_dir(self.root)  # a run's world quota (a tmpfs) unmounted first: rmtree cannot remove a mount point


def host_files(path: Path) -> Files:
    """A directory on the grader's disk as a service's ``Files`` (what ``HostDisk.files`` gives)."""
    return HostFiles(path)


def host_path(files: Files) -> Path:
    """Where a directory on the grader's disk is; TypeError for one on a remote engine's disk."""
    if not isinstance(files, HostFiles):
        raise TypeError("these files live on the engine's disk, not the grader's")
    return files.root / files.prefix if files.prefix else files.root

