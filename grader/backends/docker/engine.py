"""The Docker engine as the backend sees it: the one importer of the docker SDK, and the one place its errors become ours.

Every other module of ``backends/docker`` calls the SDK through the objects
it returns (a client, its containers and networks) and the types re-exported
here (``Mount``, ``LogConfig``, ``Ulimit``), and wraps those calls in
``engine_errors``: inside it, a ``docker.errors.*`` or a ``requests``
exception (the SDK's transport) becomes one of the errors below, as httpx's
transports map their libraries' errors in one place. Callers catch these;
nobody outside this module names ``docker.errors``.

    EngineError(BackendError)   any failure of the engine or of the way to it
    ├── Unanswered              no answer: connection refused or lost, a read timeout (requests)
    └── DockerError             the SDK reported a failure (docker.errors.DockerException)
        ├── Refused             the engine answered with an error (APIError); ``explanation`` is its reason
        │   ├── Missing         the thing is not there (NotFound, ImageNotFound)
        │   └── PoolsFull       no address range left for another network (every pool in use)
        └── BuildFailed         an image build failed (BuildError); ``msg`` and ``build_log`` as the SDK gave them
    NetworksExhausted(BackendError)   full pools for a whole wait (``simnet.create_network``): the learner's message

Each keeps the SDK's message as its own (``str(exc)``), so whatever a caller
prints of it reads as before. ``engine_errors(what)`` also turns any of them
into the learner-facing ``BackendError`` that names ``what`` failed and what
to check.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Optional

import docker
import requests
from docker.models.containers import Container
from docker.models.networks import Network
from docker.types import LogConfig, Mount, Ulimit

from grader.core.errors import BackendError

__all__ = [
    "BeingRemoved",
    "BuildFailed",
    "Container",
    "DockerError",
    "EngineError",
    "LogConfig",
    "Missing",
    "Mount",
    "NetworksExhausted",
    "POOLS_FULL",
    "PoolsFull",
    "Network",
    "Refused",
    "Ulimit",
    "Unanswered",
    "engine_errors",
    "open_client",
    "refused",
    "send_stdin",
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
    ``engine_errors(what)`` passes it on as it is, instead of asking whether the engine answers (it does)."""

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
