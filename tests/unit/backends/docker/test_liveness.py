"""Whether a recorder is up and answering: its ready file, its heartbeat after a moment, and a poke that only hurries it."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import docker.errors
import pytest

from grader.backends.docker.engine import ContainerRef, DockerEngine
from grader.backends.docker.liveness import beat_after, poke, signal_directly, wait_ready
from grader.backends.files import HostFiles
from grader.core.errors import InfrastructureError


class _Container:
    """A service container as the SDK gives it: ``kill`` records the signal, or fails as the engine would."""

    def __init__(self, fail: BaseException | None = None, delay: float = 0.0, status: str = "running") -> None:
        self.signals: list[str] = []
        self.sent = threading.Event()
        self.fail, self.delay, self.status = fail, delay, status
        self.name = "sl-test-internet"

    def kill(self, signal: str) -> None:
        time.sleep(self.delay)
        try:
            if self.fail is not None:
                raise self.fail
            self.signals.append(signal)
        finally:
            self.sent.set()

    def reload(self) -> None:
        pass

    def logs(self, tail: int) -> bytes:
        return b"Traceback: the service could not bind its port"

    id = "c1"

    @property
    def attrs(self) -> dict[str, Any]:
        return {"Name": "/" + self.name, "State": {"Status": self.status}}


class _Client:
    """The SDK's client as the engine adapter reaches this one container: its kill, its inspect and its logs."""

    def __init__(self, c: _Container) -> None:
        self.c = c
        self.api = self.containers = self

    def kill(self, ident: str, signal: str | None = None) -> None:
        self.c.kill(signal=str(signal))

    def get(self, ident: str) -> _Container:
        self.c.reload()
        return self.c

    def logs(self, ident: str, **kwargs: Any) -> bytes:
        return self.c.logs(tail=kwargs["tail"])


def _held(c: _Container) -> tuple[DockerEngine, ContainerRef]:
    """The adapter over the fake SDK client (it maps the SDK's errors), and the container's ref."""
    return DockerEngine(_Client(c)), ContainerRef(c.id, c.name)


def _beat(out: Path, when: float) -> None:
    (out / "heartbeat").write_text(repr(when))
    import os

    os.utime(out / "heartbeat", (when, when))


def test_a_beat_counts_only_after_the_moment(tmp_path: Path) -> None:
    files = HostFiles(tmp_path)
    finished = time.time()
    assert not beat_after(files, finished, timeout=0.05), "no heartbeat file is no beat"
    _beat(tmp_path, finished - 1.0)
    assert not beat_after(files, finished, timeout=0.05), "a beat from before the sandbox finished proves nothing"
    _beat(tmp_path, finished + 0.01)
    assert beat_after(files, finished, timeout=0.05)


def _stamped(out: Path, written: str, stamp: float) -> None:
    """A heartbeat whose recorder wrote ``written`` and whose file time the kernel stamped ``stamp``."""
    (out / "heartbeat").write_text(written)
    import os

    os.utime(out / "heartbeat", (stamp, stamp))


def test_a_beat_stamped_a_tick_early_counts_by_the_time_its_recorder_wrote(tmp_path: Path) -> None:
    """A new file's time comes from the kernel's coarse clock, a tick (4-10 ms) behind: a poked beat written 1 ms
    after the moment can be stamped 3 ms before it (measured here, a beat written 4.6 ms after its stamp). Its own
    written time decides then; a build that looked at the stamp alone waits out the recorder's whole interval."""
    files = HostFiles(tmp_path)
    finished = time.time()
    _stamped(tmp_path, repr(finished + 0.001), finished - 0.003)
    started = time.monotonic()
    assert beat_after(files, finished, timeout=1.0)
    assert time.monotonic() - started < 0.5, "counted only once the wait was nearly over"


@pytest.mark.parametrize("written", [lambda at: repr(at - 0.001), lambda at: "not a time", lambda at: ""],
                         ids=["written before", "no time", "empty"])
def test_a_beat_near_the_moment_counts_only_if_written_after_it(tmp_path: Path, written: Any) -> None:
    """Stamped just before the moment, a beat whose own time is before it too, or that carries no time, is no
    beat after it: the slack lets a beat's written time decide, never the stamp's closeness alone."""
    files = HostFiles(tmp_path)
    finished = time.time()
    _stamped(tmp_path, written(finished), finished - 0.003)
    assert not beat_after(files, finished, timeout=0.05)


def test_a_beat_stamped_long_before_the_moment_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a beat stamped within ``STAMP_SLACK`` of the moment is opened: an old one is no beat whatever it says."""
    files = HostFiles(tmp_path)
    finished = time.time()
    _stamped(tmp_path, repr(finished + 5.0), finished - 1.0)
    assert not beat_after(files, finished, timeout=0.05)


def test_a_poke_asks_for_sigusr1_and_returns_before_the_engine_answers() -> None:
    slow = _Container(delay=0.5)
    started = time.monotonic()
    poke(*_held(slow))
    assert time.monotonic() - started < 0.4, "the caller waited for the engine's answer"
    assert slow.sent.wait(5)
    assert slow.signals == ["SIGUSR1"]


@pytest.mark.parametrize("error", [docker.errors.NotFound("gone"), docker.errors.APIError("is not running")])
def test_a_poke_that_cannot_arrive_is_no_error_and_no_beat(tmp_path: Path, error: Exception) -> None:
    """A stopped or vanished recorder is judged by its missing beat, as it always was: the poke adds nothing."""
    gone = _Container(fail=error)
    poke(*_held(gone))
    assert gone.sent.wait(5)
    assert gone.signals == []
    assert not beat_after(HostFiles(tmp_path), time.time(), timeout=0.05)


def test_a_service_that_exits_before_it_is_ready_is_an_infrastructure_error(tmp_path: Path) -> None:
    exited: Any = _Container(status="exited")
    with pytest.raises(InfrastructureError, match="sl-test-internet did not start: .*could not bind"):
        wait_ready(*_held(exited), HostFiles(tmp_path))


def test_a_ready_file_ends_the_wait(tmp_path: Path) -> None:
    (tmp_path / "ready").write_text("{}")
    wait_ready(*_held(_Container()), HostFiles(tmp_path))


_HANDLER = ("import pathlib, signal, sys, time\n"
            "signal.signal(signal.SIGUSR1, lambda *_: pathlib.Path(sys.argv[1]).write_text('poked'))\n"
            "print('up', flush=True)\n"
            "time.sleep(30)\n")


def test_a_pid_the_engine_names_outside_the_container_is_never_signalled(tmp_path: Path) -> None:
    """A remote engine's pid is a number on another machine; here it may be anyone's process. The engine below
    names a local process that is in no container of that id: the poke goes through the engine, and the process
    hears nothing. The gamed version signals whatever pid the engine names."""
    import subprocess
    import sys

    heard = tmp_path / "heard"
    local = subprocess.Popen([sys.executable, "-c", _HANDLER, str(heard)], stdout=subprocess.PIPE, text=True)
    try:
        assert local.stdout is not None and local.stdout.readline().strip() == "up"
        remote = _Container()
        remote.id = "e" * 64  # a full id: only the cgroup check stands between the pid and a signal

        class Api(_Client):
            def inspect_container(self, ident: str) -> dict[str, Any]:
                return {"State": {"Status": "running", "Pid": local.pid}, "HostConfig": {"Runtime": "runc"}}

        engine = DockerEngine(Api(remote))
        poke(engine, ContainerRef(remote.id, remote.name))
        assert remote.sent.wait(5), "the poke did not go through the engine"
        assert remote.signals == ["SIGUSR1"]
        time.sleep(0.3)
        assert not heard.exists(), "a process outside the container was signalled"
    finally:
        local.kill()
        local.wait(5)
        if local.stdout is not None:
            local.stdout.close()


@pytest.mark.parametrize("runtime", ["runsc", None])
def test_a_container_under_another_runtime_is_poked_through_the_engine(runtime: str | None) -> None:
    """Under gVisor the engine's pid is its sandbox's process on this machine, not the recorder inside: a signal
    meant for the recorder would reach gVisor instead. Only runc's pid is signalled from here."""
    c = _Container()
    c.id = "f" * 64

    class Api(_Client):
        def inspect_container(self, ident: str) -> dict[str, Any]:
            config = {"Runtime": runtime} if runtime else {}
            return {"State": {"Status": "running", "Pid": 1}, "HostConfig": config}

    engine = DockerEngine(Api(c))
    assert engine.pid(ContainerRef(c.id, c.name)) == 0
    assert not signal_directly(engine, ContainerRef(c.id, c.name))
