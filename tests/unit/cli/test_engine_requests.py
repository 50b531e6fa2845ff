"""The warm engine's side of a request (grader/cli/engine.py ``_answer``), over a socket pair: a terminal that sends
nothing or reads nothing holds the engine for at most its I/O timeout, and a stale engine declines."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import pytest

from grader.cli import engine


class _Engine:
    """Stands in for ``engine.Engine``: writes ``size`` characters of report, returns 0."""

    def __init__(self, size: int = 0) -> None:
        self.size, self.ran, self.afters = size, 0, 0

    def after(self, request: dict[str, Any]) -> None:
        self.afters += 1

    def run(self, request: dict[str, Any], conn: socket.socket) -> int:
        self.ran += 1
        out = engine._Frames(conn, "out", False)
        for _ in range(self.size // 65536):
            out.write("x" * 65536)
        return 0


@pytest.fixture()
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine, "IO_TIMEOUT_S", 0.3)


def _pair() -> tuple[socket.socket, socket.socket]:
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)


def test_a_terminal_that_sends_nothing_holds_the_engine_for_its_timeout_only(quick: None) -> None:
    ours, theirs = _pair()
    with ours, theirs:
        t = time.monotonic()
        engine._answer(_Engine(), ours, stale=False)  # type: ignore[arg-type]
        assert time.monotonic() - t < 5


def test_a_terminal_that_reads_nothing_holds_the_engine_for_its_timeout_only(quick: None) -> None:
    ours, theirs = _pair()
    with ours, theirs:
        theirs.sendall(json.dumps({"argv": ["probe", "p.json"], "cwd": "/", "env": {}}).encode() + b"\n")
        fake = _Engine(size=64 << 20)  # far more than the socket buffers hold
        t = time.monotonic()
        engine._answer(fake, ours, stale=False)  # type: ignore[arg-type]
        assert fake.ran == 1 and time.monotonic() - t < 30


def test_a_request_is_answered_with_the_exit_code_and_a_stale_engine_declines() -> None:
    for stale, expected in ((False, {"exit": 0}), (True, {"declined": "stale"})):
        ours, theirs = _pair()
        with ours, theirs:
            theirs.sendall(json.dumps({"argv": ["check", "p.json"], "cwd": "/", "env": {}}).encode() + b"\n")
            fake = _Engine()
            done = threading.Thread(target=engine._answer, args=(fake, ours, stale))
            done.start()
            done.join(10)
            with theirs.makefile("rb") as replies:
                assert json.loads(replies.readline()) == expected
            assert fake.ran == (0 if stale else 1)


def test_the_caller_has_its_exit_code_before_the_engine_prepares_its_rerun() -> None:
    """``Engine.after`` (watching the files, starting a rerun's preparation) runs once the exit code is sent: a
    preparing thread holds the interpreter's lock, and the terminal waited on it for up to 30 ms. It runs even
    when the terminal went away."""
    ours, theirs = _pair()
    with ours, theirs:
        theirs.sendall(json.dumps({"argv": ["probe", "p.json"], "cwd": "/", "env": {}}).encode() + b"\n")
        fake = _Engine()
        seen: list[bytes] = []
        theirs.setblocking(False)

        def after(request: dict[str, Any]) -> None:
            seen.append(theirs.recv(4096))  # raises (no data yet) if the answer had not been sent
        fake.after = after  # type: ignore[method-assign]
        engine._answer(fake, ours, stale=False)  # type: ignore[arg-type]
        assert seen and json.loads(seen[0].decode().splitlines()[-1]) == {"exit": 0}
    gone, theirs = _pair()
    with gone:
        theirs.sendall(json.dumps({"argv": ["probe", "p.json"], "cwd": "/", "env": {}}).encode() + b"\n")
        theirs.close()
        fake = _Engine(size=4 << 20)  # its report cannot be written: the terminal is gone
        engine._answer(fake, gone, stale=False)  # type: ignore[arg-type]
        assert fake.afters == 1
