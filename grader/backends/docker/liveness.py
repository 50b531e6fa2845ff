"""Whether a recorder (the internet, a proxy) is up and answering: its ready file, its heartbeat, and a poke.

A service writes ``out/ready`` once it listens and rewrites ``out/heartbeat``
after each self-check (``protocol.common.heartbeat``). The grader trusts a
recorder's silence only from one that beat after the sandbox finished, and it
pokes the recorder when the sandbox finishes so that beat comes within
milliseconds rather than at the end of an interval.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Iterator, Optional

from grader.core.errors import InfrastructureError
from grader.protocol.common import POKE_SIGNAL
from grader.backends.files import Files, Stat
from grader.backends.docker.engine import ContainerRef, DockerEngine, EngineError

__all__ = ["BEAT_WAIT", "READY_TIMEOUT", "NotHere", "beat_after", "held_process", "poke", "signal_directly", "wait_ready"]

READY_TIMEOUT = 20.0  # how long a service may take to write its ready file


def wait_ready(engine: DockerEngine, container: ContainerRef, out: Files) -> None:
    """Wait for a service's ``out/ready`` file; a service that exits or stalls is an infrastructure error."""
    deadline = time.monotonic() + READY_TIMEOUT
    checked = time.monotonic()
    while time.monotonic() < deadline:
        if out.stat("ready") is not None:
            return
        time.sleep(0.01)
        if time.monotonic() - checked > 0.25:
            checked = time.monotonic()
            if engine.inspect(container).status in ("exited", "dead"):
                break
    tail = engine.logs(container, tail=10).decode("utf-8", "replace")
    raise InfrastructureError(f"{container.name} did not start: {tail.strip()[-400:]}")


BEAT_WAIT = 3.0  # how long to wait for a service's first heartbeat after the sandbox finished
STAMP_SLACK = 0.05  # a file time this far before a moment may be of a write after it (coarse stamps: a tick or so)


def poke(engine: DockerEngine, container: ContainerRef) -> None:
    """Ask a recorder for a self-check now (``common.heartbeat``) instead of at the end of its interval; returns at once.

    Sent from a thread of its own while the caller reads or waits: straight to the recorder's process where it is
    one of this machine's (``signal_directly``), else through the engine, which takes 15 ms and as much CPU to
    pass a signal on (it runs the OCI runtime for it). Only a speed-up: a poke that does not arrive (the container
    is gone or stopped) leaves the recorder to beat on its interval or not at all, and ``beat_after`` judges that
    as it always has.
    """

    def send() -> None:
        if signal_directly(engine, container):
            return
        try:
            engine.kill(container, signal=POKE_SIGNAL.name)
        except EngineError:
            pass

    threading.Thread(target=send, name="sandbox-lab-poke", daemon=True).start()


def signal_directly(engine: DockerEngine, container: ContainerRef, sig: signal.Signals = POKE_SIGNAL) -> bool:
    """Send ``sig`` to the container's first process from here; False (nothing sent) unless that is sure to be it
    (``held_process``). Under a runtime other than runc the engine names no pid (``DockerEngine.pid``)."""
    send = getattr(signal, "pidfd_send_signal", None)
    if send is None:
        return False
    try:
        with held_process(engine, container) as (_, fd):
            send(fd, sig)
        return True
    except (NotHere, OSError):  # it ended (ESRCH), or this user may not signal it: the engine passes it on, if it can
        return False


class NotHere(Exception):
    """Why a container's first process is not one this machine can hold (``held_process``)."""


@contextlib.contextmanager
def held_process(engine: DockerEngine, container: ContainerRef) -> Iterator[tuple[int, int]]:
    """The container's first process as this machine's: its pid and a pidfd holding it, while the block runs;
    ``NotHere`` with the reason otherwise.

    The engine names a pid; it is this machine's process only if the engine is (a remote engine's pid is a number
    on another machine, and here it may be anyone's). So the process is held by a pidfd (it cannot be swapped for
    another under the same number while held), and yielded only if its cgroup, read after that, names the
    container's full id: a local process of a remote engine's pid, or one that took the pid after the container's
    ended, is never yielded.
    """
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is None or len(container.id) < 64:
        raise NotHere("its processes cannot be read here")
    try:
        pid = engine.pid(container)
        if pid <= 0:
            raise NotHere("it does not run, or not as a process of this machine")
        fd = pidfd_open(pid)
    except (EngineError, OSError) as exc:
        raise NotHere(f"it could not be asked ({exc})") from None
    try:
        try:
            with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
                mine = container.id in f.read()
        except OSError as exc:  # it ended meanwhile
            raise NotHere(f"it could not be asked ({exc})") from None
        if not mine:
            raise NotHere("its pid is not its process on this machine")
        yield pid, fd
    finally:
        os.close(fd)


def beat_after(out: Files, after: float, timeout: float = BEAT_WAIT) -> bool:
    """True once the service writing ``out/heartbeat`` has passed a self-check later than ``after``.

    Evidence of silence counts only from a recorder shown to answer after the
    sandbox finished: a service that runs but hangs stops beating.

    A beat's file time is stamped from the kernel's coarse clock, up to a tick
    (4-10 ms) before the write: a poked beat written a few milliseconds after
    ``after`` can carry a time before it. So a beat stamped within
    ``STAMP_SLACK`` before ``after`` is decided by the time its recorder wrote
    in it (``common.heartbeat``: its clock when the check passed, the same
    clock as ``after``), read once per beat. Measured before this: through the
    warm engine, 2-3 naive reruns in 20 took such a beat for none and waited
    a whole interval (1 s) for the next.
    """
    deadline = time.monotonic() + timeout
    read: Optional[Stat] = None  # the last beat whose own time was read
    while True:
        beat = out.stat("heartbeat")
        if beat is not None and beat.mtime > after:
            return True
        if beat is not None and beat != read and beat.mtime > after - STAMP_SLACK:
            read = beat
            if _written_at(out) > after:
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)  # a poked recorder beats within milliseconds (``poke``)


def _written_at(out: Files) -> float:
    """The time the recorder wrote in its heartbeat; 0.0 if it is not one (then its file time alone decides)."""
    try:
        return float(out.read("heartbeat", limit=64).decode("ascii"))
    except (ValueError, UnicodeDecodeError):
        return 0.0
