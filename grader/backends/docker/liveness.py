"""Whether a recorder (the internet, a proxy) is up and answering: its ready file, its heartbeat, and a poke.

A service writes ``out/ready`` once it listens and rewrites ``out/heartbeat``
after each self-check (``protocol.common.heartbeat``). The grader trusts a
recorder's silence only from one that beat after the sandbox finished, and it
pokes the recorder when the sandbox finishes so that beat comes within
milliseconds rather than at the end of an interval.
"""

from __future__ import annotations

import threading
import time
from grader.core.errors import InfrastructureError
from grader.protocol.common import POKE_SIGNAL
from grader.backends.files import Files
from grader.backends.docker.engine import ContainerRef, DockerEngine, EngineError

__all__ = ["BEAT_WAIT", "READY_TIMEOUT", "beat_after", "poke", "wait_ready"]

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


def poke(engine: DockerEngine, container: ContainerRef) -> None:
    """Ask a recorder for a self-check now (``common.heartbeat``) instead of at the end of its interval; returns at once.

    The engine takes 15-30 ms to answer a signal, so the request goes from a thread of its own while the caller
    reads or waits. Only a speed-up: a poke that does not arrive (the container is gone or stopped) leaves the
    recorder to beat on its interval or not at all, and ``beat_after`` judges that as it always has.
    """

    def send() -> None:
        try:
            engine.kill(container, signal=POKE_SIGNAL.name)
        except EngineError:
            pass

    threading.Thread(target=send, name="sandbox-lab-poke", daemon=True).start()


def beat_after(out: Files, after: float, timeout: float = BEAT_WAIT) -> bool:
    """True once the service writing ``out/heartbeat`` has passed a self-check later than ``after``.

    Evidence of silence counts only from a recorder shown to answer after the
    sandbox finished: a service that runs but hangs stops beating.
    """
    deadline = time.monotonic() + timeout
    while True:
        beat = out.stat("heartbeat")
        if beat is not None and beat.mtime > after:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)  # a poked recorder beats within milliseconds (``poke``)
