"""The replay's shells made ready ahead, without Docker: what waits for the go, when it is made, and every way the go goes."""

from __future__ import annotations

import subprocess
from typing import Any, Optional

import pytest

from grader.backends.docker import replay
from grader.backends.docker.engine import ContainerRef, Missing, Refused
from grader.backends.docker.resources import Resources
from grader.core.errors import InfrastructureError


class _Engine:
    """Inspect, send a go, read logs, remove: as the fake is told; what was sent and removed is kept."""

    def __init__(self, status: str = "running", send: Optional[Exception] = None, logs: bytes = b"",
                 inspect: Optional[Exception] = None) -> None:
        self.status, self.send, self.out, self.inspect_error = status, send, logs, inspect
        self.sent: list[bytes] = []
        self.removed: list[str] = []

    def inspect(self, c: ContainerRef) -> ContainerRef:
        if self.inspect_error is not None:
            raise self.inspect_error
        return ContainerRef(c.id, c.name, status=self.status)

    def send_stdin(self, c: ContainerRef, data: bytes) -> None:
        if self.send is not None:
            raise self.send
        self.sent.append(data)

    def logs(self, c: ContainerRef, **_: Any) -> bytes:
        return self.out

    def remove_container(self, c: ContainerRef) -> None:
        self.removed.append(c.id)


class _Leftovers:
    def __init__(self, engine: _Engine) -> None:
        self.engine = engine

    def remove(self, thing: Any) -> None:
        raise AssertionError("no removal should fail here")


READY = ContainerRef("c1", "sl-x-next-ready")


def _shell(command: list[str], stdin: str) -> subprocess.CompletedProcess[str]:
    """``AWAIT_GO`` run by a real bash, its driver replaced by one that says it ran."""
    script = command[2].replace(" ".join(replay.NEXT), "echo driver ran")
    return subprocess.run(["bash", "-c", script], input=stdin, capture_output=True, text=True, timeout=10)


def test_the_prepared_shells_run_nothing_without_their_go() -> None:
    assert replay.AWAIT_GO[:2] == ["bash", "-c"]
    for stdin in ("", "\n", "stop\n", "gone\n", " go\n"):
        done = _shell(replay.AWAIT_GO, stdin)
        assert done.returncode == 3 and done.stdout == "", (stdin, done)


def test_after_their_go_they_say_so_first_then_run_the_driver_as_a_cold_start_does() -> None:
    done = _shell(replay.AWAIT_GO, "go\n")
    assert done.returncode == 0 and done.stdout.encode() == replay.ACK + b"driver ran\n", done
    assert replay.AWAIT_GO[2].endswith(f"exec {' '.join(replay.NEXT)} </dev/null")  # same process, no stdin


def test_a_running_prepared_container_is_sent_its_go() -> None:
    engine = _Engine()
    assert replay._go(engine, READY, _Leftovers(engine)) is True  # type: ignore[arg-type]
    assert engine.sent == [b"go\n"] and not engine.removed


def test_one_stopped_before_its_go_ran_nothing_and_is_removed_for_a_cold_start() -> None:
    engine = _Engine(status="exited")
    assert replay._go(engine, READY, _Leftovers(engine)) is False  # type: ignore[arg-type]
    assert engine.sent == [] and engine.removed == ["c1"]


def test_one_gone_before_its_go_gives_way_to_a_cold_start() -> None:
    engine = _Engine(inspect=Missing("no such container"))
    assert replay._go(engine, READY, _Leftovers(engine)) is False  # type: ignore[arg-type]


def test_a_go_that_may_have_reached_it_is_an_infrastructure_error_never_a_second_start() -> None:
    engine = _Engine(send=Refused("attach failed"))  # still running afterwards: the go may be in
    with pytest.raises(InfrastructureError, match="could not be sent its go"):
        replay._go(engine, READY, _Leftovers(engine))  # type: ignore[arg-type]


def test_a_failed_preparation_leaves_the_internet_and_no_shells() -> None:
    internet: Any = type("Net", (), {"container": ContainerRef("i", "i")})()

    def broken(net: Any) -> ContainerRef:
        raise RuntimeError("refused")

    ahead = replay.Ahead(lambda: internet, broken)
    made = Resources()
    assert ahead.take(made) is internet and ahead.shells(made) is None
    assert made.internets == [internet] and made.containers == []


def test_prepared_shells_are_the_runs_once_taken_or_settled() -> None:
    internet: Any = object()
    ahead = replay.Ahead(lambda: internet, lambda net: READY)
    made = Resources()
    ahead.settle(made)
    assert ahead.shells(made) == READY and made.containers == [READY] and made.internets == [internet]  # once
