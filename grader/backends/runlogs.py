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
from grader.core.evidence import log_window, self_checked_after
from grader.protocol.common import RUN_LOG_CAP, RUNS_DIR
from grader.protocol.wire import WireError
from grader.backends.files import Files

__all__ = ["ANY_CLIENT", "LOGS", "PROXY_TAIL", "close_run", "forget_run", "open_run", "proxy_window"]

ANY_CLIENT = "*"  # every client no other run claims: an internet this run has to itself
LOGS = ("http.jsonl", "dns.jsonl", "tcp.jsonl")
OPEN_TIMEOUT = 10.0  # the internet polls its requests every few ms (20 when idle): seconds mean it is gone or hung
CLOSE_TIMEOUT = 10.0
PROXY_TAIL = 1 << 20  # of the proxy's log before a run's window: enough to hold the line that numbers it


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


def proxy_window(out: Files, since: int, finished: float, *, limit: int, wait: float) -> str:
    """What a run's proxy logged since the run took it (at byte ``since`` of its ``proxy.jsonl``), shown whole up to
    a moment after the sandbox ``finished``; WireError past ``limit`` bytes (a flood of its own run), where a line
    is lost, repeated, moved or cut, or when no self-check after ``finished`` is logged within ``wait`` seconds.

    Whole: its lines number on from the line before the window (``evidence.log_window``), and it holds one
    of the proxy's own self-checks decided after ``finished`` (``evidence.self_checked_after``; the proxy
    makes one at once when poked, and every ``HEARTBEAT_INTERVAL`` unasked), so nothing it logged before
    then is missing at the end.
    """
    deadline = time.monotonic() + wait
    while True:
        # with the tail before the run's window: its last line numbers the window's first
        start = max(0, since - PROXY_TAIL)
        data = out.read("proxy.jsonl", start, since - start + limit + 1)
        before, window = data[: since - start], data[since - start :]
        if len(window) > limit:
            raise WireError(f"proxy.jsonl: more than {limit} bytes in this run")
        # a last line not yet whole is one the proxy is writing now: it is after the self-check that proves the
        # rest whole, or that check is not there yet; either way it is read on the next pass
        window = window[: window.rfind(b"\n") + 1]
        text = log_window(before.decode("utf-8", "replace"), window.decode("utf-8", "replace"), "proxy.jsonl",
                          from_start=start == 0)
        if self_checked_after(text, finished):
            return text
        if time.monotonic() > deadline:
            raise WireError("proxy.jsonl: no self-check of the proxy logged after the sandbox finished, so the log "
                            "cannot be shown whole up to then (cut at its end, or the proxy stopped deciding)")
        time.sleep(0.02)
