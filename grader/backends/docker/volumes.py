"""A run's files on the Docker engine's own disk, reached only through its API: services' volumes and the run's copy.

For an engine on another machine (``enginedisk.EngineDisk``), and for a world
copy this grader could not give to the sandbox's user:

* a service's working directory (``VolumeFiles``) is the anonymous volume of
  its container: written with ``put_archive``, stat'ed with the archive API's
  HEAD, read with ``tail`` run inside it (from the run's offsets);
* the sandbox's run directory (``VolumeCopy``) is sent as one tar stream into
  the anonymous volume of a helper container that never starts, and the world
  comes back (``get_archive``) into the run directory after the run, rebuilt
  without trusting a name or a link in the tar (``_unpack_world``).

Every volume is anonymous: it goes with its container (``remove(v=True)``).
"""

from __future__ import annotations

import io
import os
import posixpath
import re
import shutil
import stat
import tarfile
import time
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import IO, TYPE_CHECKING, Callable, Iterator, Optional

from grader.core.errors import BackendError, InfrastructureError
from grader.backends.files import Files, HostFiles, Stat
from grader.backends.runs import MAX_OUTPUT, RunDir
from grader.backends.owners import make_dir, write_file
from grader.backends.docker.engine import ContainerRef, DockerEngine, Missing, Refused, Spec, mount

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = [
    "COPY_ROOT", "ENV", "FETCH_FILE_LIMIT", "FETCH_TOTAL_LIMIT", "SERVICE_ROOT", "VolumeCopy", "VolumeFiles",
    "attach", "parse_engine_time", "service_mount",
]

ENV = "SANDBOX_LAB_ENGINE_DISK"  # local, remote or auto (``enginedisk.engine_mode``)
SERVICE_ROOT = "/run/sandbox-lab"  # where a service container finds its config and writes its out/
COPY_ROOT = "/disk"  # where the helper container holds a run's copy
# What comes back of one file of the world copy: the judge reads 64 KiB of each
# (``RunDir.snapshot``); a hostile run's huge file must not fill the grader's disk.
FETCH_FILE_LIMIT = 1024 * 1024
FETCH_TOTAL_LIMIT = 256 * 1024 * 1024


def service_mount(files: Files) -> Spec:
    """How a service container mounts its working directory at ``/run/sandbox-lab``."""
    if isinstance(files, HostFiles):
        return mount(SERVICE_ROOT, str(files.root), type="bind")  # what the backend always did
    if isinstance(files, VolumeFiles):
        return files.mount()
    raise TypeError(f"no way to mount {type(files).__name__} in a container")


def attach(files: Files, container: ContainerRef) -> None:
    """The service container now exists (created, not started): what was written before it goes in."""
    if isinstance(files, VolumeFiles):
        files.attach(container)


class VolumeFiles:
    """A service's anonymous volume on the engine's host, reached only through the engine's API.

    Written with ``put_archive`` (before the service starts: kept until
    ``attach``), stat'ed with the archive API's HEAD, read with ``tail`` run
    inside the service (the archive API would send a whole growing log every
    time), and read again through the archive API when ``tail``'s output is
    shorter than the file (docker-py can lose an exec's output over TCP). The
    volume is removed with its container.
    """

    def __init__(self, engine: DockerEngine, name: str, prefix: str = "", shared: Optional["VolumeFiles"] = None) -> None:
        self.engine = engine
        self._name = name
        self.prefix = prefix
        self._root = shared if shared is not None else self  # the view that holds the container
        self.container: Optional[ContainerRef] = None
        self._pending: list[tuple[str, Optional[bytes]]] = []  # (path, data); None data: a directory

    @property
    def name(self) -> str:
        return self._name

    def _abs(self, rel: str) -> str:
        return posixpath.join(SERVICE_ROOT, self.prefix, rel)

    def mount(self) -> Spec:
        # no source: an anonymous volume, created with the container and removed with it (v=True)
        return mount(SERVICE_ROOT, None, type="volume")

    def attach(self, container: ContainerRef) -> None:
        root = self._root
        root.container = container
        pending, root._pending = root._pending, []
        if pending:
            self.engine.put_archive(container, SERVICE_ROOT, _tar(pending))

    def sub(self, rel: str) -> Files:
        return VolumeFiles(self.engine, self._name, posixpath.join(self.prefix, rel), self._root)

    def _put(self, rel: str, data: Optional[bytes]) -> None:
        path = posixpath.relpath(self._abs(rel), SERVICE_ROOT)
        root = self._root
        if root.container is None:
            root._pending.append((path, data))
        else:
            # the archive API replaces a file by removing it and writing the new one: a reader
            # may find it missing for a moment, and the proxy fails closed when it does
            self.engine.put_archive(root.container, SERVICE_ROOT, _tar([(path, data)]))

    def mkdir(self, rel: str) -> None:
        self._put(rel, None)

    def write(self, rel: str, data: bytes) -> None:
        self._put(rel, data)

    def stat(self, rel: str) -> Optional[Stat]:
        c = self._root.container
        if c is None:
            return None
        return _archive_stat(self.engine, c, self._abs(rel))

    def read(self, rel: str, offset: int = 0, limit: int = MAX_OUTPUT) -> bytes:
        c = self._root.container
        if c is None:
            return b""
        path = self._abs(rel)
        try:
            code, out = self.engine.exec_run(c, ["tail", "-c", f"+{offset + 1}", path])
            got = out[:limit]
            now = _archive_stat(self.engine, c, path)
            if code == 0 and (now is None or len(got) >= min(limit, now.size - offset)):
                return got
            # Over TCP, docker-py can lose an exec's output frames without a word: a closed log of 2,731 bytes
            # came back empty. The file is append-only or replaced whole, so output shorter than what it
            # holds now is output lost (or a log that grew meanwhile): the archive API reads it whole.
            if code != 0 and now is None:
                return b""
        except Refused:
            pass  # the service is not running (it died): the archive API still reads a stopped container
        except ValueError:
            # docker-py lost the frames of the exec's multiplexed stream (seen over TCP with large
            # outputs: "N is not a valid stream"); the archive API has no frames to lose
            pass
        data = _archive_file(self.engine, c, path, offset + limit)
        return data[offset:offset + limit]

    def remove(self) -> None:
        pass  # the volume goes with the service container


def _tar(items: list[tuple[str, Optional[bytes]]]) -> bytes:
    buf = io.BytesIO()
    now = time.time()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for path, data in items:
            info = tarfile.TarInfo(path)
            info.mtime = now
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _archive_stat(engine: DockerEngine, container: ContainerRef, path: str) -> Optional[Stat]:
    """A file's stat without its content (the archive API's HEAD); None if there is none."""
    got = engine.stat(container, path)
    return None if got is None else Stat(got[0], parse_engine_time(got[1]))


def _archive_file(engine: DockerEngine, container: ContainerRef, path: str, limit: int) -> bytes:
    try:
        stream = engine.get_archive(container, path)
    except Missing:
        return b""
    with tarfile.open(fileobj=io.BufferedReader(_ChunkReader(stream)), mode="r|") as tf:
        for member in tf:
            if member.isfile():
                fh = tf.extractfile(member)
                return fh.read(limit) if fh else b""
    return b""


_ENGINE_TIME = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)")


def parse_engine_time(text: str) -> float:
    """An engine timestamp (RFC 3339 with up to nanoseconds) as seconds since the epoch; 0.0 for none or unreadable."""
    m = _ENGINE_TIME.fullmatch(text.strip())
    if m is None or m.group(1).startswith("0001-"):  # Go's zero time: "never"
        return 0.0
    whole, frac, zone = m.groups()
    stamp = datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone))
    return stamp.timestamp() + (float("0." + frac) if frac else 0.0)


class _ChunkReader(io.RawIOBase):
    """A file object over the SDK's stream of byte chunks, for tarfile's streaming mode."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = iter(chunks)
        self._buf = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: "WriteableBuffer") -> int:
        view = memoryview(b).cast("B")
        while not self._buf:
            try:
                self._buf = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(view), len(self._buf))
        view[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n




SENT = ("world", "mask", "run", "resolv.conf")  # what the sandbox mounts; never the owner record


class VolumeCopy:
    """The run directory sent into a helper's anonymous volume, bound path by path into the sandbox."""

    def __init__(self, engine: DockerEngine, image: str, run_dir: RunDir, name: str, labels: dict[str, str]) -> None:
        self.engine = engine
        self.image = image
        self.dir = run_dir
        self.name = name
        self.labels = labels
        self.container: Optional[ContainerRef] = None

    def place(self) -> Callable[[str], str]:
        for top in SENT:
            for folder, _, files in os.walk(self.dir.path / top):
                if any(stat.S_ISSOCK(os.lstat(os.path.join(folder, f)).st_mode) for f in files):
                    # a tar carries no socket: the job would find no agent, and its finding would read "blocked"
                    raise BackendError(
                        "this job needs an SSH-agent socket beside the sandbox, which only a run directory bound "
                        "from the grader's disk can carry: use a local Docker engine, as root or as the world's user"
                    )
        if self.container is None:  # placed again (the next session): the same volume, brought up to date
            # Never started: it only holds the volume. No network, no command that could run.
            self.container = self.engine.create_container(
                self.image, ["true"], name=f"{self.name}-disk", labels=self.labels, network_mode="none",
                mounts=[mount(COPY_ROOT, None, type="volume")],
            )
        source = self.engine.inspect(self.container).mounts.get(COPY_ROOT, "")
        if not source:
            raise BackendError(
                "the Docker engine gave the run's volume no mount point on its host (a volume driver other than "
                f"'local'?). Set {ENV}=local if the engine shares this machine's disk, or use an engine with local volumes."
            )
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tf:
            for top in SENT:
                p = self.dir.path / top
                if p.exists():
                    # modes as laid out; the world's files owned by the sandbox's user, as root lays them out
                    # (a grader that is not root kept them its own): the engine keeps both
                    owner = self.dir.uid if top == "world" and not self.dir.handed else None
                    tf.add(str(p), arcname=top, filter=lambda info: _numeric(info, owner))
        self.engine.put_archive(self.container, COPY_ROOT, buf.getvalue())
        return lambda rel: posixpath.normpath(posixpath.join(source, rel))

    def fetch(self) -> None:
        assert self.container is not None
        stream = self.engine.get_archive(self.container, posixpath.join(COPY_ROOT, "world"))
        world = self.dir.world
        shutil.rmtree(world, ignore_errors=True)
        _unpack_world(io.BufferedReader(_ChunkReader(stream)), world)


def _numeric(info: tarfile.TarInfo, owner: Optional[int] = None) -> tarfile.TarInfo:
    info.uname = info.gname = ""
    if owner is not None:
        info.uid = info.gid = owner
    return info


def _unpack_world(raw: IO[bytes], world: Path) -> None:
    """Rebuild the world copy from the engine's tar of it, without trusting a name or a link in it.

    Regular files (each cut at ``FETCH_FILE_LIMIT``), directories and symbolic
    links come back as they were (a link is made, never followed); hard links
    become a second name of the file already written; nothing else is made.
    A name outside the world, or under a link, is ignored.
    """
    make_dir(world, parents=True, exist_ok=True)  # modes explicit: the umask decides nothing
    base = os.path.realpath(world)
    total = 0
    with tarfile.open(fileobj=raw, mode="r|") as tf:
        for m in tf:
            parts = PurePosixPath(m.name).parts
            if not parts or parts[0] != "world" or ".." in parts or PurePosixPath(m.name).is_absolute():
                continue
            dest = world.joinpath(*parts[1:])
            if len(parts) > 1 and os.path.realpath(dest.parent) != os.path.join(base, *parts[1:-1]):
                continue  # a parent is a link (or missing): never write through it
            if os.path.lexists(dest) and not (m.isdir() and dest.is_dir() and not dest.is_symlink()):
                continue  # a name given twice: the first one stands
            if m.isdir():
                if len(parts) > 1:
                    make_dir(dest, exist_ok=True)
            elif m.issym():
                os.symlink(m.linkname, dest)
            elif m.islnk():
                link = PurePosixPath(m.linkname).parts
                src = world.joinpath(*link[1:]) if link and link[0] == "world" and ".." not in link else None
                if src is not None and src.is_file() and not src.is_symlink():
                    os.link(src, dest)
            elif m.isfile():
                fh = tf.extractfile(m)
                data = fh.read(FETCH_FILE_LIMIT) if fh else b""
                total += len(data)
                if total > FETCH_TOTAL_LIMIT:
                    raise InfrastructureError("the world copy the sandbox left is too large to bring back")
                write_file(dest, data)

