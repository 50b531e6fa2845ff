"""One run's evidence at a simulated internet: claim the run's clients, close its logs, read them back whole.

The internet (``protocol/common.Recorder``) writes the records of the clients
a run claims to that run's own logs, capped, and closes them with a record
that counts them when the grader asks. So a run's evidence is its own (no
other tenant's traffic can evict, hide or forge it) and provably complete:
a log that was cut, never closed, or whose count does not match is an error
(``WireError``); one whose run overflowed its cap proves what it holds, and
nothing about what it lacks (``runs.read_sinks``, ``Evidence.incomplete``). The same protocol
serves an internet shared by many runs (the hub, ``SharedInternet``: a run
claims its proxy's address) and one a run has to itself (it claims ``*``).

The protocol is files in the internet's ``out/runs/`` (``files.Files``,
so an engine on another machine works the same): ``<run>.open`` names the
run's clients and the internet answers ``<run>/opened``; ``<run>.close``
asks for the closing records, answered by ``<run>/closed``; ``<run>.gone``
lets the internet delete the run's files. Only the grader writes there.
"""

from __future__ import annotations

import json
import time
from typing import Callable, Iterable

from grader.core.errors import InfrastructureError
from grader.protocol.common import RUN_LOG_CAP, RUNS_DIR
from grader.protocol.wire import WireError
from grader.backends.files import Files

__all__ = ["ANY_CLIENT", "LOGS", "close_run", "forget_run", "open_run"]

ANY_CLIENT = "*"  # every client no other run claims: an internet this run has to itself
LOGS = ("http.jsonl", "dns.jsonl", "tcp.jsonl")
OPEN_TIMEOUT = 10.0  # the internet polls its requests every few ms (20 when idle): seconds mean it is gone or hung
CLOSE_TIMEOUT = 10.0


def _until(done: Callable[[], bool], timeout: float) -> bool:
    """Until ``done()``: asked after 1 ms, then ever less often, every 20 ms at most (a stat through a remote
    engine is an API call). The internet answers within a few ms while it is busy (``Recorder.watch``)."""
    deadline = time.monotonic() + timeout
    pause = 0.001
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 1.5, 0.02)
    return True


def _wait(out: Files, rel: str, timeout: float) -> bool:
    return _until(lambda: out.stat(rel) is not None, timeout)


def open_run(out: Files, key: str, clients: Iterable[str]) -> None:
    """Claim ``clients`` for run ``key`` and wait until the internet writes their records to the run's own logs.

    Called before the sandbox starts: nothing the run sends can reach the general log instead.
    """
    out.write(f"{RUNS_DIR}/{key}.open", json.dumps({"run": key, "clients": list(clients)}).encode())
    if not _wait(out, f"{RUNS_DIR}/{key}/opened", OPEN_TIMEOUT):
        raise InfrastructureError("the simulated internet did not open the run's logs (it does not answer its grader)")


def close_run(out: Files, key: str) -> dict[str, str]:
    """Ask for the run's closing records and return its logs' texts; WireError if they never close."""
    out.write(f"{RUNS_DIR}/{key}.close", b"")
    if not _wait(out, f"{RUNS_DIR}/{key}/closed", CLOSE_TIMEOUT):
        raise WireError("the run's logs were never closed: the simulated internet did not answer")
    # a closed log of a capped run is at most the cap plus its closing line; one byte more is a log that grew after
    limit = RUN_LOG_CAP + 4096
    texts = {}
    for name in LOGS:
        data = out.read(f"{RUNS_DIR}/{key}/{name}", 0, limit + 1)
        if len(data) > limit:
            raise WireError(f"{name}: longer than the run's cap")
        texts[name] = data.decode("utf-8", "replace")
    return texts


def forget_run(out: Files, key: str, *, wait: float = 2.0) -> None:
    """Let the internet delete the run's logs (read, or never to be read), and give it up to ``wait`` seconds to.

    The internet writes the logs as its own user (root in its container): a grader that is not root
    cannot delete them, so an internet removed right after this must have done it first. It drops the
    request file last, once the logs are gone; it looks every few ms after a run's requests.
    """
    try:
        out.write(f"{RUNS_DIR}/{key}.gone", b"")
    except Exception:  # noqa: BLE001 - the internet is gone with its files: nothing left to delete
        return

    def gone() -> bool:
        try:
            return out.stat(f"{RUNS_DIR}/{key}.gone") is None
        except Exception:  # noqa: BLE001 - gone with its files
            return True

    _until(gone, wait)
