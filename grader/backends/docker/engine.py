"""The Docker engine as the backend sees it: the adapter that owns the docker SDK's client, and the one place its errors become ours.

``DockerEngine`` holds a ``docker.DockerClient`` and offers the operations the
backend uses (containers, networks, images, the engine's own facts), each
taking and returning the project's own frozen references (``ContainerRef``,
``NetworkRef``, ``ImageRef``) or plain values. Every call maps the SDK's and
its transport's (``requests``) exceptions inside itself, as httpx's transports
map their libraries' errors in one place (``map_httpcore_exceptions``): no
other module holds an SDK object, names ``docker.errors`` or wraps a call to
map its errors.

    EngineError(BackendError)   any failure of the engine or of the way to it
    ├── Unanswered              no answer: connection refused or lost, a read timeout (requests)
    └── DockerError             the SDK reported a failure (docker.errors.DockerException)
        ├── Refused             the engine answered with an error (APIError); ``explanation`` is its reason
        │   ├── Missing         the thing is not there (NotFound, ImageNotFound)
        │   │   └── BeingRemoved  another call is removing that container now (409): as good as gone
        │   └── PoolsFull       no address range left for another network (every pool in use)
        └── BuildFailed         an image build failed (BuildError); ``msg`` and ``build_log`` as the SDK gave them
    NetworksExhausted(BackendError)   full pools for a whole wait (``simnet.create_network``): the learner's message

Each keeps the SDK's message as its own (``str(exc)``), so whatever a caller
prints of it reads as before. ``worded(what)`` turns any of them into the
learner-facing ``BackendError`` that names ``what`` failed and what to check;
``engine_errors`` is the mapping itself: the adapter's methods run inside it,
and no caller outside this module uses it (``tests/unit/backends/docker/test_engine_boundary.py``).
Container options are plain values: a mount, a log config or a ulimit is a
``Spec``, the engine API's own JSON form, built here by the SDK's types
(``mount``, ``log_config``, ``ulimit``) and handed back to them as a dict.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Union

import docker
import requests
from docker.types import LogConfig as _LogConfig, Mount as _Mount, Ulimit as _Ulimit

from grader.core.errors import BackendError

__all__ = [
    "BeingRemoved",
    "BuildFailed",
    "ContainerRef",
    "DockerEngine",
    "DockerError",
    "EngineError",
    "ImageRef",
    "Missing",
    "NetworkRef",
    "NetworksExhausted",
    "POOLS_FULL",
    "PoolsFull",
    "Refused",
    "Spec",
    "Unanswered",
    "engine_errors",
    "log_config",
    "mount",
    "open_client",
    "open_engine",
    "refused",
    "send_stdin",
    "ulimit",
    "worded",
]


class EngineError(BackendError):
    """The Docker engine, or the way to it, failed a call. ``str()`` is the SDK's own message."""

    def __init__(self, message: str, explanation: Optional[str] = None) -> None:
        super().__init__(message)
        self.explanation = explanation  # the engine's own reason, when it answered with one


class Unanswered(EngineError):
    """No answer from the engine: connection refused or lost, or a read that timed out."""


class DockerError(EngineError):
    """The docker SDK reported a failure."""


class Refused(DockerError):
    """The engine answered, with an error."""


class Missing(Refused):
    """The container, network or image is not there (any more)."""


# How the engine says another caller is removing that container now (409): for whoever removes it too, it is gone
# (two cleanups at once, a worker's sweep beside another's: seen in make test's parallel run).
BEING_REMOVED = ("is already in progress", "is marked for removal")


class BeingRemoved(Missing):
    """The container is being removed by another call: as good as gone."""


# How the engine says every range of its address pools is taken: Docker 20.10's words, then newer engines'.
# A limit of the engine's configuration (``default-address-pools``), not a failure: waited for (``simnet``).
POOLS_FULL = ("could not find an available, non-overlapping ipv4 address pool", "have been fully subnetted")


class PoolsFull(Refused):
    """The engine has no address range left for another network: other networks hold every one of its pools."""


class NetworksExhausted(BackendError):
    """The engine's address pools stayed full for a whole wait: no network for the run. Not an ``EngineError``:
    ``worded(what)`` passes it on as it is, instead of asking whether the engine answers (it does)."""

    def __init__(self, waited: float) -> None:
        super().__init__(
            "the Docker engine has no address range left for another network: every range of its address pools is "
            f"held by other networks, and none came free within {waited:.0f} s. Wait until other runs finish and "
            "rerun, or give the engine more, smaller pools: `scripts/ensure-docker` sets default-address-pools in "
            '/etc/docker/daemon.json (docs/scaling.md, "Address pools").'
        )


class BuildFailed(DockerError):
    """An image build failed; ``msg`` and ``build_log`` are the SDK's."""

    def __init__(self, message: str, msg: str, build_log: Any) -> None:
        super().__init__(message)
        self.msg = msg
        self.build_log = build_log


def _ours(exc: BaseException) -> Optional[EngineError]:
    """The error of ours for an SDK or transport exception; None for anything else."""
    # the order matters: NotFound is an APIError, which is also a requests HTTPError; and Docker 20.10 answers
    # full pools with a 404 (NotFound), so the pools' words are read before the status
    if isinstance(exc, docker.errors.APIError) and any(words in str(exc).lower() for words in POOLS_FULL):
        return PoolsFull(str(exc), exc.explanation)
    if isinstance(exc, docker.errors.NotFound):
        return Missing(str(exc), exc.explanation)
    if (isinstance(exc, docker.errors.APIError) and exc.status_code == 409
            and any(words in str(exc) for words in BEING_REMOVED)):
        return BeingRemoved(str(exc), exc.explanation)
    if isinstance(exc, docker.errors.APIError):
        return Refused(str(exc), exc.explanation)
    if isinstance(exc, docker.errors.BuildError):
        return BuildFailed(str(exc), exc.msg, exc.build_log)
    if isinstance(exc, docker.errors.DockerException):
        return DockerError(str(exc))
    if isinstance(exc, requests.exceptions.RequestException):
        return Unanswered(str(exc))
    return None


@contextmanager
def engine_errors(what: str = "", *, ignore: tuple[type[EngineError], ...] = ()) -> Iterator[None]:
    """Inside: the docker SDK's and its transport's exceptions become ours (``EngineError`` and below).

    Args:
        what: said in the learner-facing message: with it, every engine error
            (raised inside, or mapped here) becomes "the Docker engine failed
            during <what>: <first line>. Check that it answers (`docker info`),
            then rerun." as a plain ``BackendError``.
        ignore: kinds of engine error that end the block quietly (a container
            already gone, a kill that came too late).
    """
    try:
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - only the SDK's and its transport's are mapped; the rest re-raised
            mapped = _ours(exc)
            if mapped is None:
                raise
            raise mapped from exc
    except EngineError as exc:
        if isinstance(exc, ignore):
            return
        if not what:
            raise
        raise BackendError(
            f"the Docker engine failed during {what}: {str(exc).splitlines()[0][:200]}. "
            "Check that it answers (`docker info`), then rerun."
        ) from None


def refused(message: str, response: Any) -> Refused:
    """The error for an engine answer the SDK has no call for (a raw request), worded as the SDK words its own."""
    mapped = _ours(docker.errors.APIError(message, response=response))
    assert isinstance(mapped, Refused)
    return mapped


def open_client(*, timeout: int = 120) -> Any:
    """A docker client for ``DOCKER_HOST`` (or the default socket), at the API version the engine speaks; not yet asked anything."""
    return docker.from_env(version="auto", timeout=timeout)


def send_stdin(client: Any, container_id: str, data: bytes) -> None:
    """Write ``data`` to a running container's stdin (created with ``stdin_open``), then detach.

    The SDK gives the attach's raw socket only: a Unix or TCP socket (``_sock`` inside its ``SocketIO``), a TLS
    socket, or an SSH channel; each has ``sendall``. A container created with ``stdin_open`` has ``StdinOnce``
    set, so its stdin ends when this detaches: a reader gets ``data`` and then end of input. The socket itself is
    closed here, not only its ``SocketIO`` (whose ``close`` leaves the socket open until collected).
    """
    with engine_errors():
        sock = client.api.attach_socket(container_id, params={"stdin": 1, "stream": 1})
    raw = getattr(sock, "_sock", sock)
    try:
        raw.sendall(data)
    except OSError as exc:
        raise Unanswered(f"could not write to the container's stdin: {exc}") from None
    finally:
        # the HTTP response first (it closes its file chain), then the socket under it
        for end in (getattr(sock, "_response", None), sock, raw):
            if end is not None:
                try:
                    end.close()
                except (OSError, ValueError):  # closed already, by the one before
                    pass


@contextmanager
def worded(what: str) -> Iterator[None]:
    """Inside: an engine error becomes the learner-facing ``BackendError`` saying the engine failed during ``what``.

    Wording only: the SDK's exceptions are mapped by the adapter's methods
    already; any other error (``NetworksExhausted`` among them) passes as it is.
    """
    try:
        yield
    except EngineError as exc:
        raise BackendError(
            f"the Docker engine failed during {what}: {str(exc).splitlines()[0][:200]}. "
            "Check that it answers (`docker info`), then rerun."
        ) from None


# --- container options as plain values --------------------------------------------------------------------

Spec = dict[str, object]  # a value of the engine's API in its own JSON form: a mount, a log config, a ulimit


def mount(
    target: str, source: Optional[str], type: str = "volume", *,  # noqa: A002 - the engine's own word
    read_only: bool = False, tmpfs_size: Optional[int] = None, tmpfs_mode: Optional[int] = None,
) -> Spec:
    """A container mount (``bind``, ``volume`` or ``tmpfs``), checked and keyed as the SDK's ``Mount`` does it."""
    return dict(_Mount(target, source, type=type, read_only=read_only, tmpfs_size=tmpfs_size, tmpfs_mode=tmpfs_mode))


def log_config(driver: str, config: Mapping[str, str]) -> Spec:
    """A container's log driver and its options, as the SDK's ``LogConfig`` keys them."""
    return dict(_LogConfig(type=driver, config=dict(config)))


def ulimit(name: str, soft: int, hard: int) -> Spec:
    """One resource limit of a container's processes, as the SDK's ``Ulimit`` keys it."""
    return dict(_Ulimit(name=name, soft=soft, hard=hard))


# --- the project's own references: what leaves the adapter instead of the SDK's objects ------------------


@dataclass(frozen=True)
class ContainerRef:
    """A container as the engine last described it: who it is, and its state when asked (``DockerEngine.inspect``)."""

    id: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict, compare=False)
    status: str = ""  # created, running, exited, dead...; "" when not asked
    exit_code: Optional[int] = None
    finished_at: str = ""  # the engine's RFC 3339 time; "" or year 1 while it runs
    mounts: Mapping[str, str] = field(default_factory=dict, compare=False)  # destination → source on the engine's host
    addresses: Mapping[str, str] = field(default_factory=dict, compare=False)  # network name → the container's IPv4 there


@dataclass(frozen=True)
class NetworkRef:
    """A network: who it is, and the ids of the containers attached when it was described."""

    id: str
    name: str
    labels: Mapping[str, str] = field(default_factory=dict, compare=False)
    containers: tuple[str, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class ImageRef:
    """An image: its id, its tags and its labels."""

    id: str
    tags: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict, compare=False)


def _container_ref(c: Any) -> ContainerRef:
    """Ours for the SDK's ``Container`` (its ``attrs``: the engine's inspect)."""
    attrs = c.attrs or {}
    state = attrs.get("State") or {}
    if isinstance(state, str):  # a listing's summary: State is a word there
        state = {"Status": state}
    nets = (attrs.get("NetworkSettings") or {}).get("Networks") or {}
    return ContainerRef(
        id=str(c.id), name=str(attrs.get("Name") or "").lstrip("/"),
        labels=dict((attrs.get("Config") or {}).get("Labels") or attrs.get("Labels") or {}),
        status=str(state.get("Status", "")), exit_code=state.get("ExitCode"), finished_at=str(state.get("FinishedAt", "")),
        mounts={str(m.get("Destination", "")): str(m.get("Source", "")) for m in attrs.get("Mounts") or []},
        addresses={str(k): str((v or {}).get("IPAddress", "")) for k, v in nets.items()},
    )


def _network_ref(n: Any) -> NetworkRef:
    attrs = n.attrs or {}
    return NetworkRef(id=str(n.id), name=str(attrs.get("Name", n.name) or ""), labels=dict(attrs.get("Labels") or {}),
                      containers=tuple(attrs.get("Containers") or {}))


def _image_ref(i: Any) -> ImageRef:
    return ImageRef(id=str(i.id), tags=tuple(i.tags or ()), labels=dict(i.labels or {}))


Ident = Union[str, ContainerRef, NetworkRef]


def _id(thing: Ident) -> str:
    return thing if isinstance(thing, str) else thing.id


class DockerEngine:
    """The adapter: owns the SDK's client; every method maps the SDK's errors and returns refs or plain values."""

    def __init__(self, client: object) -> None:
        self._client: Any = client  # docker.DockerClient, or an object shaped like one (a test's fake)

    # --- the engine ---------------------------------------------------------------------------------------

    def ping(self) -> None:
        with engine_errors():
            self._client.ping()

    def close(self) -> None:
        with engine_errors():
            self._client.close()

    def runtimes(self) -> frozenset[str]:
        """The OCI runtimes registered with the engine (``docker info``'s Runtimes)."""
        with engine_errors():
            info = self._client.info()
        return frozenset((info.get("Runtimes") or {}).keys())

    def base_url(self) -> str:
        return str(self._client.api.base_url)

    # --- containers ---------------------------------------------------------------------------------------

    def create_container(self, image: str, command: Sequence[str], **options: object) -> ContainerRef:
        """Create (never start) a container; ``options`` are the SDK's ``containers.create`` keywords."""
        with engine_errors():
            return _container_ref(self._client.containers.create(image, list(command), **options))

    def start(self, c: ContainerRef) -> None:
        with engine_errors():
            self._client.api.start(c.id)

    def inspect(self, c: Union[str, ContainerRef]) -> ContainerRef:
        """The container as the engine describes it now (``Missing`` once it is gone)."""
        with engine_errors():
            return _container_ref(self._client.containers.get(_id(c)))

    def containers(self, filters: Mapping[str, object], *, all: bool = True) -> list[ContainerRef]:  # noqa: A002
        """The containers ``filters`` select (the engine's list: id, name, labels and status only)."""
        with engine_errors():
            found = self._client.api.containers(all=all, filters=dict(filters))
        return [ContainerRef(id=str(c["Id"]), name=str((c.get("Names") or [""])[0]).lstrip("/"),
                             labels=dict(c.get("Labels") or {}), status=str(c.get("State", ""))) for c in found]

    def logs(self, c: ContainerRef, *, stdout: bool = True, stderr: bool = True, tail: Optional[int] = None) -> bytes:
        with engine_errors():
            raw = self._client.api.logs(c.id, stdout=stdout, stderr=stderr, tail="all" if tail is None else tail)
        return bytes(raw)

    def follow(self, c: ContainerRef, until: Callable[[bytes], bool], *, timeout: float, limit: int,
               into: Optional[bytearray] = None) -> bool:
        """Read its stdout as it is written, from its start, until a whole line makes ``until`` true: True then,
        and ``into`` (given) holds every byte read, that line's included: what ``logs`` would give of stdout so far.

        False when the output ends first (it exited), passes ``limit`` bytes, or ``timeout`` seconds pass (the
        stream is closed under the reader), or the stream fails in any way: the caller then waits for the exit
        as it would have without following, and that wait meets any engine failure again, worded.
        """
        deadline = time.monotonic() + timeout  # an engine slow to answer the request gives no more time
        with engine_errors():
            stream = self._client.api.logs(c.id, stdout=True, stderr=False, stream=True, follow=True)
        timer = threading.Timer(max(0.0, deadline - time.monotonic()), stream.close)
        timer.daemon = True
        timer.start()
        read, tail = 0, b""
        try:
            for chunk in stream:
                read += len(chunk)
                if read > limit:
                    return False
                if into is not None:
                    into += chunk
                *lines, tail = (tail + chunk).split(b"\n")
                if any(until(line) for line in lines):
                    return True
        except Exception:  # noqa: BLE001 - closed at the timeout, or the transport failed: the wait decides
            return False
        finally:
            timer.cancel()
            # the stream's close shuts its socket; the HTTP response under it holds the socket's file, so the
            # socket is really closed (its descriptor freed) only once that is closed too
            for end in (stream, getattr(stream, "_response", None)):
                try:
                    if end is not None:
                        end.close()
                except Exception:  # noqa: BLE001 - closed already, by the timer or the one before
                    pass
        return False

    def wait(self, c: ContainerRef, timeout: float) -> Optional[int]:
        """Wait for it to exit; its exit code (None if the engine gave none). A read past ``timeout`` raises ``Unanswered``."""
        with engine_errors():
            status = self._client.api.wait(c.id, timeout=timeout)
        return int(status.get("StatusCode", -1)) if isinstance(status, dict) else None

    def kill(self, c: ContainerRef, signal: Optional[str] = None) -> None:
        with engine_errors():
            self._client.api.kill(c.id, signal=signal)

    def pid(self, c: ContainerRef) -> int:
        """Its first process's pid on the engine's machine, where that is the container's own process: 0 when it
        does not run, or runs under a runtime other than runc (gVisor's pid is its sandbox's, which a signal
        meant for the process inside would reach instead). Only a local engine's pid is this machine's."""
        with engine_errors():
            attrs = self._client.api.inspect_container(c.id)
        if (attrs.get("HostConfig") or {}).get("Runtime") != "runc":
            return 0
        return int((attrs.get("State") or {}).get("Pid") or 0)

    def remove_container(self, c: Union[str, ContainerRef]) -> None:
        """Remove it, running or not, with its anonymous volumes."""
        with engine_errors():
            self._client.api.remove_container(_id(c), force=True, v=True)

    def exec_run(self, c: ContainerRef, command: Sequence[str]) -> tuple[Optional[int], bytes]:
        """Run ``command`` inside; its exit code and its stdout. A stream the SDK lost its frames of raises ``ValueError``."""
        with engine_errors():  # what the SDK's Container.exec_run does, without asking for the container first
            made = self._client.api.exec_create(c.id, list(command), stdout=True, stderr=False)
            out = self._client.api.exec_start(made["Id"], demux=True)
            code = self._client.api.exec_inspect(made["Id"])["ExitCode"]
        return code, bytes((out or (b"", b""))[0] or b"")

    def put_archive(self, c: ContainerRef, path: str, data: bytes) -> None:
        with engine_errors():
            self._client.api.put_archive(c.id, path, data)

    def get_archive(self, c: ContainerRef, path: str) -> Iterator[bytes]:
        """The tar stream of ``path`` inside; the stream's own read errors are mapped as it is read."""
        with engine_errors():
            stream, _ = self._client.api.get_archive(c.id, path)
        return _mapped_stream(stream)

    def stat(self, c: ContainerRef, path: str) -> Optional[tuple[int, str]]:
        """(size, mtime as the engine writes it) of ``path`` inside, without its content; None if there is none.

        The archive API's HEAD, which the SDK has no call for.
        """
        with engine_errors():
            res = self._client.api.head(self._client.api._url("/containers/{0}/archive", c.id), params={"path": path})
        if res.status_code == 404:
            return None
        if res.status_code != 200:
            raise refused(f"stat {path}: HTTP {res.status_code}", res)
        raw = json.loads(base64.b64decode(res.headers["X-Docker-Container-Path-Stat"]))
        return int(raw.get("size", 0)), str(raw.get("mtime", ""))

    def send_stdin(self, c: ContainerRef, data: bytes) -> None:
        send_stdin(self._client, c.id, data)

    # --- networks -----------------------------------------------------------------------------------------

    def create_network(self, name: str, *, labels: Mapping[str, str], **options: object) -> NetworkRef:
        """Create a bridge network; ``options`` are the SDK's ``networks.create`` keywords."""
        with engine_errors():
            return _network_ref(self._client.networks.create(name, labels=dict(labels), **options))

    def network(self, n: Union[str, NetworkRef]) -> NetworkRef:
        """The network as the engine describes it now, with its containers (``Missing`` once it is gone)."""
        with engine_errors():
            return _network_ref(self._client.networks.get(_id(n)))

    def networks(self, filters: Mapping[str, object]) -> list[NetworkRef]:
        with engine_errors():
            found = self._client.api.networks(filters=dict(filters))
        return [NetworkRef(id=str(n["Id"]), name=str(n.get("Name", "")), labels=dict(n.get("Labels") or {})) for n in found]

    def connect(self, n: NetworkRef, c: ContainerRef) -> None:
        with engine_errors():
            self._client.api.connect_container_to_network(c.id, n.id)

    def disconnect(self, n: NetworkRef, c: Union[str, ContainerRef]) -> None:
        with engine_errors():
            self._client.api.disconnect_container_from_network(_id(c), n.id, force=True)

    def remove_network(self, n: Union[str, NetworkRef]) -> None:
        with engine_errors():
            self._client.api.remove_network(_id(n))

    # --- images -------------------------------------------------------------------------------------------

    def image(self, name: str) -> Optional[ImageRef]:
        """The image called ``name``; None if there is none."""
        try:
            with engine_errors():
                return _image_ref(self._client.images.get(name))
        except Missing:
            return None

    def image_id(self, name: str) -> str:
        """The id of the image ``name`` names now (``Missing`` if none)."""
        with engine_errors():
            return str(self._client.api.inspect_image(name)["Id"])

    def pull(self, repository: str, tag: str) -> ImageRef:
        with engine_errors():
            return _image_ref(self._client.images.pull(repository, tag))

    def build(self, tag: str, **options: object) -> ImageRef:
        """Build ``tag`` (the SDK's ``images.build`` keywords); a failed build raises ``BuildFailed`` with its log."""
        with engine_errors():
            image, _ = self._client.images.build(tag=tag, **options)
        return _image_ref(image)

    def import_image(self, archive: str, repository: str, tag: str, changes: Sequence[str]) -> None:
        with engine_errors():
            self._client.api.import_image_from_file(archive, repository=repository, tag=tag, changes=list(changes))


def _mapped_stream(stream: Any) -> Iterator[bytes]:
    with engine_errors():
        for chunk in stream:
            yield bytes(chunk)


def open_engine(*, timeout: int = 120) -> DockerEngine:
    """The adapter for ``DOCKER_HOST`` (or the default socket), at the API version the engine speaks; not yet asked anything."""
    with engine_errors():
        return DockerEngine(open_client(timeout=timeout))
