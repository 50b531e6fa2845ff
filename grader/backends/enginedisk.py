"""Where a run's files live for the Docker engine: the grader's own disk, or the engine's, reached through its API.

A Docker engine mounts bind sources from *its* host's disk. With the engine
on the grader's machine (the default socket) that is the grader's disk, and
the backend binds its run directories as they are (``HostDisk``: no copy, no
extra call), once their world copy belongs to the sandbox's user (``RunDir.handed``:
the grader is root, or that user); a grader that is neither keeps the world
private and sends it in a volume with that owner, as below. An engine reached
through ``DOCKER_HOST=tcp://…`` or ``ssh://…``
usually runs elsewhere and cannot see that disk, so ``EngineDisk`` moves
everything through the API instead:

* the sandbox's run directory (the world copy with its canaries, the mask, the
  runner's config, ``resolv.conf``) is laid out on the grader's disk as
  always (``runs.RunDir``: canaries and before-hashes stay where the grader
  judges), then sent as one tar stream (``put_archive``) into the anonymous
  volume of a helper container that never starts. The sandbox binds
  subpaths of that volume's mount point (the engine's own path), path by path,
  read-only, read-write or masked exactly as the plan says: Docker 20.10 (API
  1.41) has no volume subpath mounts, but a bind of a path inside a volume
  works on every local volume driver. After the run the world comes back
  (``get_archive``) into the run directory, so ``RunDir.snapshot`` and
  ``gather_evidence`` judge it unchanged;
* each service (the simulated internet, a proxy) gets an anonymous volume as
  its ``/run/sandbox-lab``: its config goes in by ``put_archive`` before it
  starts, its ready file and heartbeat are stat'ed through the archive API,
  its logs read with ``tail`` inside it (from the run's offsets: the shared
  internet's logs only grow);
* "the host" of a sandbox is the engine's host, where the grader's own
  ``HostListener`` is not: a listener container in the engine host's network
  namespace takes its place, and its silence counts only while it runs.

Every helper is an ordinary labelled container; its anonymous volume goes with
it (``remove(v=True)``, as ``Leftovers`` and ``sweep`` already remove), so a
killed grader leaves nothing that ``cleanup`` does not find. Times compared
with a service's heartbeat come from the engine's clock (the sandbox's
``FinishedAt``), never the grader's, which may differ.

Which disk: ``SANDBOX_LAB_ENGINE_DISK`` (``local``, ``remote`` or ``auto``);
``auto`` is local for no ``DOCKER_HOST`` or a ``unix://`` one, remote for any
other.

Imports: errors, plan, runs and the docker SDK. Only ``simnet``, ``replay`` and ``docker``
use it.
"""

from __future__ import annotations

import base64
import io
import json
import os
import posixpath
import re
import shutil
import stat
import tarfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import IO, Any, Callable, Iterator, Literal, Mapping, Optional, Protocol

try:
    import docker
    from docker.types import LogConfig, Mount
except ImportError:  # an install without the [docker] extra: the srt backend uses only the host-disk parts here
    docker = None
    LogConfig = Mount = None

from grader.core.errors import BackendError, InfrastructureError
from grader.backends.runs import MAX_OUTPUT, HostListener, RunDir

__all__ = [
    "ENV",
    "host_files",
    "host_path",
    "Disk",
    "EngineDisk",
    "Files",
    "HostDisk",
    "Listener",
    "RunCopy",
    "Stat",
    "disk_for",
    "engine_mode",
]

ENV = "SANDBOX_LAB_ENGINE_DISK"
SERVICE_ROOT = "/run/sandbox-lab"  # where a service container finds its config and writes its out/
COPY_ROOT = "/disk"  # where the helper container holds a run's copy
LISTENER_WAIT = 20.0
# What comes back of one file of the world copy: the judge reads 64 KiB of each
# (``RunDir.snapshot``); a hostile run's huge file must not fill the grader's disk.
FETCH_FILE_LIMIT = 1024 * 1024
FETCH_TOTAL_LIMIT = 256 * 1024 * 1024

Mode = Literal["local", "remote"]


def engine_mode(env: Mapping[str, str] = os.environ) -> Mode:
    """``local`` when the engine sees the grader's disk, ``remote`` when everything must go through its API."""
    chosen = env.get(ENV, "").strip().lower()
    if chosen in ("local", "remote"):
        return "local" if chosen == "local" else "remote"
    if chosen not in ("", "auto"):
        raise BackendError(f"{ENV}={chosen!r} is not a disk mode. Set it to local, remote or auto (or unset it).")
    host = env.get("DOCKER_HOST", "").strip()
    # a unix socket is on this machine; tcp:// and ssh:// may be anywhere (a loopback one too: set local to bind)
    return "local" if not host or host.startswith("unix://") else "remote"


# --- files of one service -------------------------------------------------------------


@dataclass(frozen=True)
class Stat:
    """What the grader needs of a file a service writes: its size and its modification time (the engine's clock)."""

    size: int
    mtime: float


class Files(Protocol):
    """A service's working directory (``/run/sandbox-lab`` inside it), by paths relative to it."""

    @property
    def name(self) -> str: ...

    def mount(self) -> Mount:
        """How the service container mounts it at ``/run/sandbox-lab``."""
        ...

    def attach(self, container: Any) -> None:
        """The service container now exists (created, not started): what was written before goes in."""
        ...

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
class _HostFiles:
    """A directory on the grader's disk, bind-mounted: what the backend always did."""

    root: Path
    prefix: str = ""

    @property
    def name(self) -> str:
        return self.root.name

    def _p(self, rel: str) -> Path:
        return self.root / self.prefix / rel if self.prefix else self.root / rel

    def mount(self) -> Mount:
        return Mount(SERVICE_ROOT, str(self.root), type="bind")

    def attach(self, container: Any) -> None:
        pass

    def sub(self, rel: str) -> Files:
        return _HostFiles(self.root, posixpath.join(self.prefix, rel) if self.prefix else rel)

    def mkdir(self, rel: str) -> None:
        self._p(rel).mkdir(parents=True, exist_ok=True)

    def write(self, rel: str, data: bytes) -> None:
        p = self._p(rel)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_bytes(data)
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
        shutil.rmtree(self.root, ignore_errors=True)


def host_files(path: Path) -> Files:
    """A directory on the grader's disk as a service's ``Files`` (what ``HostDisk.files`` gives)."""
    return _HostFiles(path)


def host_path(files: Files) -> Path:
    """Where a directory on the grader's disk is; TypeError for one on a remote engine's disk."""
    if not isinstance(files, _HostFiles):
        raise TypeError("these files live on the engine's disk, not the grader's")
    return files.root / files.prefix if files.prefix else files.root


class _VolumeFiles:
    """A service's anonymous volume on the engine's host, reached only through the engine's API.

    Written with ``put_archive`` (before the service starts: kept until
    ``attach``), stat'ed with the archive API's HEAD, read with ``tail`` run
    inside the service (the archive API would send a whole growing log every
    time). The volume is removed with its container.
    """

    def __init__(self, client: Any, name: str, prefix: str = "", shared: Optional["_VolumeFiles"] = None) -> None:
        self.client = client
        self._name = name
        self.prefix = prefix
        self._root = shared if shared is not None else self  # the view that holds the container
        self.container: Optional[Any] = None
        self._pending: list[tuple[str, Optional[bytes]]] = []  # (path, data); None data: a directory

    @property
    def name(self) -> str:
        return self._name

    def _abs(self, rel: str) -> str:
        return posixpath.join(SERVICE_ROOT, self.prefix, rel)

    def mount(self) -> Mount:
        # no source: an anonymous volume, created with the container and removed with it (v=True)
        return Mount(SERVICE_ROOT, None, type="volume")

    def attach(self, container: Any) -> None:
        root = self._root
        root.container = container
        pending, root._pending = root._pending, []
        if pending:
            container.put_archive(SERVICE_ROOT, _tar(pending))

    def sub(self, rel: str) -> Files:
        return _VolumeFiles(self.client, self._name, posixpath.join(self.prefix, rel), self._root)

    def _put(self, rel: str, data: Optional[bytes]) -> None:
        path = posixpath.relpath(self._abs(rel), SERVICE_ROOT)
        root = self._root
        if root.container is None:
            root._pending.append((path, data))
        else:
            # the archive API replaces a file by removing it and writing the new one: a reader
            # may find it missing for a moment, and the proxy fails closed when it does
            root.container.put_archive(SERVICE_ROOT, _tar([(path, data)]))

    def mkdir(self, rel: str) -> None:
        self._put(rel, None)

    def write(self, rel: str, data: bytes) -> None:
        self._put(rel, data)

    def stat(self, rel: str) -> Optional[Stat]:
        c = self._root.container
        if c is None:
            return None
        return _archive_stat(self.client, c.id, self._abs(rel))

    def read(self, rel: str, offset: int = 0, limit: int = MAX_OUTPUT) -> bytes:
        c = self._root.container
        if c is None:
            return b""
        path = self._abs(rel)
        try:
            code, out = c.exec_run(["tail", "-c", f"+{offset + 1}", path], stdout=True, stderr=False, demux=True)
            if code == 0:
                return bytes((out or (b"", b""))[0] or b"")[:limit]
            if _archive_stat(self.client, c.id, path) is None:
                return b""
        except docker.errors.APIError:
            pass  # the service is not running (it died): the archive API still reads a stopped container
        except ValueError:
            # docker-py lost the frames of the exec's multiplexed stream (seen over TCP with large
            # outputs: "N is not a valid stream"); the archive API has no frames to lose
            pass
        data = _archive_file(c, path, offset + limit)
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


def _archive_stat(client: Any, container_id: str, path: str) -> Optional[Stat]:
    """The archive API's HEAD: a file's stat without its content (the SDK has no call for it)."""
    res = client.api.head(client.api._url("/containers/{0}/archive", container_id), params={"path": path})
    if res.status_code == 404:
        return None
    if res.status_code != 200:
        raise docker.errors.APIError(f"stat {path}: HTTP {res.status_code}", response=res)
    raw = json.loads(base64.b64decode(res.headers["X-Docker-Container-Path-Stat"]))
    return Stat(int(raw.get("size", 0)), parse_engine_time(str(raw.get("mtime", ""))))


def _archive_file(container: Any, path: str, limit: int) -> bytes:
    try:
        stream, _ = container.get_archive(path)
    except docker.errors.NotFound:
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

    def readinto(self, b: Any) -> int:
        while not self._buf:
            try:
                self._buf = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


# --- the sandbox's copy of the run directory ------------------------------------------


class RunCopy(Protocol):
    """The run directory as the engine sees it: where each of its paths is, for a bind mount."""

    container: Optional[Any]  # a helper the run must remove with its own containers (None: nothing)

    def place(self) -> Callable[[str], str]:
        """Make the run directory visible to the engine, as it is now; return where each relative path is."""
        ...

    def fetch(self) -> None:
        """Bring the world copy back into the run directory, as the sandbox left it."""
        ...


class _HostCopy:
    """The run directory itself, once its world copy is the sandbox's user's: the engine shares the grader's disk.

    A grader that could not give the world to that user (not root, and not
    that user: ``RunDir.handed``) keeps it private; then it goes to the engine
    as a remote engine's does, in a volume, with the sandbox's user as owner.
    It is never opened to every local user instead.
    """

    def __init__(self, run_dir: RunDir, client: Any = None, image: str = "", name: str = "", labels: Optional[dict[str, str]] = None) -> None:
        self.dir = run_dir
        self.container: Optional[Any] = None
        self._client, self._image, self._name, self._labels = client, image, name, dict(labels or {})
        self._volume: Optional[_VolumeCopy] = None

    def place(self) -> Callable[[str], str]:
        if self.dir.handed:
            return lambda rel: str(self.dir.path / rel)
        if self._client is None:
            raise BackendError(
                "the run's world copy could not be given to the sandbox's user (this grader is not root, nor that "
                "user) and there is no engine to send it to; run the grader as root or as the world's user"
            )
        if self._volume is None:
            self._volume = _VolumeCopy(self._client, self._image, self.dir, self._name, {**self._labels, _ROLE: "disk"})
        try:
            return self._volume.place()
        finally:
            self.container = self._volume.container

    def fetch(self) -> None:
        if self._volume is not None:
            self._volume.fetch()


SENT = ("world", "mask", "run", "resolv.conf")  # what the sandbox mounts; never the owner record


class _VolumeCopy:
    """The run directory sent into a helper's anonymous volume, bound path by path into the sandbox."""

    def __init__(self, client: Any, image: str, run_dir: RunDir, name: str, labels: dict[str, str]) -> None:
        self.client = client
        self.image = image
        self.dir = run_dir
        self.name = name
        self.labels = labels
        self.container: Optional[Any] = None

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
            self.container = self.client.containers.create(
                self.image, ["true"], name=f"{self.name}-disk", labels=self.labels, network_mode="none",
                mounts=[Mount(COPY_ROOT, None, type="volume")],
            )
        self.container.reload()
        source = next((m.get("Source", "") for m in self.container.attrs.get("Mounts") or [] if m.get("Destination") == COPY_ROOT), "")
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
        self.container.put_archive(COPY_ROOT, buf.getvalue())
        return lambda rel: posixpath.normpath(posixpath.join(source, rel))

    def fetch(self) -> None:
        assert self.container is not None
        stream, _ = self.container.get_archive(posixpath.join(COPY_ROOT, "world"))
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
    world.mkdir(parents=True, exist_ok=True)
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
                    dest.mkdir(exist_ok=True)
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
                dest.write_bytes(data)


# --- the host's listener -------------------------------------------------------------


class Listener(Protocol):
    """Where a sandbox that reaches its host would arrive: its port, what arrived, and whether it still listens."""

    @property
    def port(self) -> int: ...

    @property
    def hits(self) -> list[str]: ...

    container: Optional[Any]

    def problem(self) -> str: ...

    def close(self) -> None: ...


class _GraderListener(HostListener):
    """The grader's own listener: the engine's host is the grader's."""

    container: Optional[Any] = None

    def problem(self) -> str:
        return ""


# Runs in the services image, in the engine host's network namespace: listens
# where the grader's HostListener would if it ran there (loopback and the host's
# address on each bridge: ``runs.sandbox_addresses``, never every interface, where
# other machines arrive), and says what arrived on its standard output, one JSON
# line each (read back as the container's log).
_LISTENER = r"""
import fcntl, json, os, selectors, socket, struct
found = ["127.0.0.1"]
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for name in sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else []:
    if os.path.isdir(os.path.join("/sys/class/net", name, "bridge")):
        try:
            found.append(socket.inet_ntoa(fcntl.ioctl(u.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))[20:24]))
        except OSError:
            pass
addresses = list(dict.fromkeys(found))
for _ in range(20):
    socks = []
    try:
        for a in addresses:
            s = socket.socket()
            socks.append(s)
            s.bind((a, socks[0].getsockname()[1] if len(socks) > 1 else 0))
            s.listen(16)
        break
    except OSError:
        for s in socks:
            s.close()
sel = selectors.DefaultSelector()
for s in socks:
    sel.register(s, selectors.EVENT_READ)
print(json.dumps({"port": socks[0].getsockname()[1], "addresses": [s.getsockname()[0] for s in socks]}), flush=True)
while True:
    for key, _ in sel.select():
        c, _ = key.fileobj.accept()
        c.settimeout(1.0)
        try:
            data = c.recv(1024)
        except OSError:
            data = b""
        c.close()
        print(json.dumps({"hit": data.decode("utf-8", "replace")}), flush=True)
"""


class _EngineListener:
    """A listener on the engine's host: one container in its network namespace, for one run."""

    def __init__(self, client: Any, image: str, name: str, labels: dict[str, str]) -> None:
        self.container: Optional[Any] = client.containers.create(
            image, ["python3", "-c", _LISTENER], name=f"{name}-host", labels=labels, network_mode="host",
            # it runs no learner code; still, nothing it does not need
            user="65534:65534", cap_drop=["ALL"], security_opt=["no-new-privileges"], read_only=True,
            mem_limit="64m", pids_limit=16, log_config=LogConfig(type="json-file", config={"max-size": "1m"}),
        )
        self._port = 0
        try:
            self.container.start()
            self._port = self._wait()
        except BaseException:
            # not yet the run's: nobody else would remove it
            self.container.remove(force=True, v=True)
            raise

    def _wait(self) -> int:
        assert self.container is not None
        deadline = time.monotonic() + LISTENER_WAIT
        while time.monotonic() < deadline:
            first = self._lines()[:1]
            if first:
                return int(first[0]["port"])
            self.container.reload()
            if self.container.status in ("exited", "dead"):
                break
            time.sleep(0.02)
        raise InfrastructureError("the listener on the Docker engine's host did not start")

    def _lines(self) -> list[dict[str, Any]]:
        assert self.container is not None
        raw: bytes = self.container.logs(stdout=True, stderr=False)
        out = []
        for line in raw[:MAX_OUTPUT].decode("utf-8", "replace").splitlines():
            try:  # the listener's own lines (its port, each hit); anything else is not one of them
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                out.append(value)
        return out

    @property
    def port(self) -> int:
        return self._port

    @property
    def hits(self) -> list[str]:
        return [str(r["hit"]) for r in self._lines() if "hit" in r]

    def problem(self) -> str:
        assert self.container is not None
        self.container.reload()
        if self.container.status != "running":
            return f"the listener on the engine's host stopped during the run (status {self.container.status})"
        return ""

    def close(self) -> None:
        pass  # removed with the run's containers


# --- the two disks -------------------------------------------------------------------


class Disk(Protocol):
    """Where a backend's runs keep their files for the engine."""

    remote: bool

    def files(self, name: str, local: Callable[[], Path]) -> Files:
        """A service's working directory; ``local`` makes the grader-side directory when the disk is the grader's."""
        ...

    def copy(self, run_dir: RunDir, image: str, name: str, labels: dict[str, str]) -> RunCopy: ...

    def listener(self, image: str, name: str, labels: dict[str, str]) -> Listener: ...

    def finished(self, container: Any) -> float:
        """When ``container`` finished, on the clock a service's heartbeat is written with."""
        ...


class HostDisk:
    """The engine shares the grader's disk: bind its directories, listen on its host. What the backend always did."""

    remote = False

    def files(self, name: str, local: Callable[[], Path]) -> Files:
        return _HostFiles(local())

    def __init__(self, client: Any = None) -> None:
        self.client = client  # for a world copy this process could not give to the sandbox's user (``_HostCopy``)

    def copy(self, run_dir: RunDir, image: str, name: str, labels: dict[str, str]) -> RunCopy:
        return _HostCopy(run_dir, self.client, image, name, labels)

    def listener(self, image: str, name: str, labels: dict[str, str]) -> Listener:
        return _GraderListener()

    def finished(self, container: Any) -> float:
        return time.time()


class EngineDisk:
    """The engine has a disk of its own: every file goes through its API, and "the host" is its host."""

    remote = True

    def __init__(self, client: Any) -> None:
        self.client = client

    def files(self, name: str, local: Callable[[], Path]) -> Files:
        return _VolumeFiles(self.client, name)

    def copy(self, run_dir: RunDir, image: str, name: str, labels: dict[str, str]) -> RunCopy:
        return _VolumeCopy(self.client, image, run_dir, name, {**labels, _ROLE: "disk"})

    def listener(self, image: str, name: str, labels: dict[str, str]) -> Listener:
        return _EngineListener(self.client, image, name, {**labels, _ROLE: "host-listener"})

    def finished(self, container: Any) -> float:
        container.reload()
        at = parse_engine_time(str(container.attrs.get("State", {}).get("FinishedAt", "")))
        return at or time.time()


_ROLE = "org.sandbox-lab.role"  # simnet.LABEL_ROLE; simnet imports this module, not the other way round


def disk_for(client: Any, env: Mapping[str, str] = os.environ) -> Disk:
    """The disk a backend on ``client`` uses, as ``SANDBOX_LAB_ENGINE_DISK`` and ``DOCKER_HOST`` say."""
    return EngineDisk(client) if engine_mode(env) == "remote" else HostDisk(client)
