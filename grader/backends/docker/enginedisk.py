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

The volume machinery is ``volumes``; a service's working directory is a
``files.Files`` either way.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Optional, Protocol

from grader.core.errors import BackendError, InfrastructureError
from grader.backends.files import Files, HostFiles
from grader.backends.listeners import HostListener
from grader.backends.runs import MAX_OUTPUT, RunDir
from grader.backends.docker.engine import ContainerRef, DockerEngine, log_config
from grader.backends.docker.volumes import ENV, VolumeCopy, VolumeFiles, parse_engine_time

__all__ = [
    "ENV",
    "Disk",
    "EngineDisk",
    "HostDisk",
    "Listener",
    "RunCopy",
    "disk_for",
    "engine_mode",
]

LISTENER_WAIT = 20.0

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



# --- the sandbox's copy of the run directory ------------------------------------------


class RunCopy(Protocol):
    """The run directory as the engine sees it: where each of its paths is, for a bind mount."""

    container: Optional[ContainerRef]  # a helper the run must remove with its own containers (None: nothing)

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

    def __init__(
        self, run_dir: RunDir, engine: Optional[DockerEngine] = None, image: str = "", name: str = "",
        labels: Optional[dict[str, str]] = None,
    ) -> None:
        self.dir = run_dir
        self.container: Optional[ContainerRef] = None
        self._engine, self._image, self._name, self._labels = engine, image, name, dict(labels or {})
        self._volume: Optional[VolumeCopy] = None

    def place(self) -> Callable[[str], str]:
        if self.dir.handed:
            return lambda rel: str(self.dir.path / rel)
        if self._engine is None:
            raise BackendError(
                "the run's world copy could not be given to the sandbox's user (this grader is not root, nor that "
                "user) and there is no engine to send it to; run the grader as root or as the world's user"
            )
        if self._volume is None:
            self._volume = VolumeCopy(self._engine, self._image, self.dir, self._name, {**self._labels, _ROLE: "disk"})
        try:
            return self._volume.place()
        finally:
            self.container = self._volume.container

    def fetch(self) -> None:
        if self._volume is not None:
            self._volume.fetch()



# --- the host's listener -------------------------------------------------------------


class Listener(Protocol):
    """Where a sandbox that reaches its host would arrive: its port, what arrived, and whether it still listens."""

    @property
    def port(self) -> int: ...

    @property
    def hits(self) -> list[str]: ...

    container: Optional[ContainerRef]

    def problem(self) -> str: ...

    def close(self) -> None: ...


class _GraderListener(HostListener):
    """The grader's own listener: the engine's host is the grader's."""

    container: Optional[ContainerRef] = None

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

    def __init__(self, engine: DockerEngine, image: str, name: str, labels: dict[str, str]) -> None:
        self._engine = engine
        self.container: Optional[ContainerRef] = engine.create_container(
            image, ["python3", "-c", _LISTENER], name=f"{name}-host", labels=labels, network_mode="host",
            # it runs no learner code; still, nothing it does not need
            user="65534:65534", cap_drop=["ALL"], security_opt=["no-new-privileges"], read_only=True,
            mem_limit="64m", pids_limit=16, log_config=log_config("json-file", {"max-size": "1m"}),
        )
        self._port = 0
        try:
            engine.start(self.container)
            self._port = self._wait()
        except BaseException:
            # not yet the run's: nobody else would remove it
            engine.remove_container(self.container)
            raise

    def _wait(self) -> int:
        assert self.container is not None
        deadline = time.monotonic() + LISTENER_WAIT
        while time.monotonic() < deadline:
            first = self._lines()[:1]
            if first:
                return int(first[0]["port"])
            if self._engine.inspect(self.container).status in ("exited", "dead"):
                break
            time.sleep(0.02)
        raise InfrastructureError("the listener on the Docker engine's host did not start")

    def _lines(self) -> list[dict[str, Any]]:
        assert self.container is not None
        raw = self._engine.logs(self.container, stdout=True, stderr=False)
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
        status = self._engine.inspect(self.container).status
        if status != "running":
            return f"the listener on the engine's host stopped during the run (status {status})"
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

    def finished(self, container: ContainerRef) -> float:
        """When ``container`` finished, on the clock a service's heartbeat is written with."""
        ...


class HostDisk:
    """The engine shares the grader's disk: bind its directories, listen on its host. What the backend always did."""

    remote = False

    def files(self, name: str, local: Callable[[], Path]) -> Files:
        return HostFiles(local())

    def __init__(self, engine: Optional[DockerEngine] = None) -> None:
        # for a world copy this process could not give to the sandbox's user (``_HostCopy``); None: no engine
        self.engine = engine

    def copy(self, run_dir: RunDir, image: str, name: str, labels: dict[str, str]) -> RunCopy:
        return _HostCopy(run_dir, self.engine, image, name, labels)

    def listener(self, image: str, name: str, labels: dict[str, str]) -> Listener:
        return _GraderListener()

    def finished(self, container: ContainerRef) -> float:
        return time.time()


class EngineDisk:
    """The engine has a disk of its own: every file goes through its API, and "the host" is its host."""

    remote = True

    def __init__(self, engine: DockerEngine) -> None:
        self.engine = engine

    def files(self, name: str, local: Callable[[], Path]) -> Files:
        return VolumeFiles(self.engine, name)

    def copy(self, run_dir: RunDir, image: str, name: str, labels: dict[str, str]) -> RunCopy:
        return VolumeCopy(self.engine, image, run_dir, name, {**labels, _ROLE: "disk"})

    def listener(self, image: str, name: str, labels: dict[str, str]) -> Listener:
        return _EngineListener(self.engine, image, name, {**labels, _ROLE: "host-listener"})

    def finished(self, container: ContainerRef) -> float:
        at = parse_engine_time(self.engine.inspect(container).finished_at)
        return at or time.time()


_ROLE = "org.sandbox-lab.role"  # simnet.LABEL_ROLE; simnet imports this module, not the other way round


def disk_for(engine: DockerEngine, env: Mapping[str, str] = os.environ) -> Disk:
    """The disk a backend on ``engine`` uses, as ``SANDBOX_LAB_ENGINE_DISK`` and ``DOCKER_HOST`` say."""
    return EngineDisk(engine) if engine_mode(env) == "remote" else HostDisk(engine)
