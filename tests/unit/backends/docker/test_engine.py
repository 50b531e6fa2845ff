"""The one place the docker SDK's errors become ours, and the one module that imports the SDK at all."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import docker
import pytest
import requests

from grader.backends.docker import engine
from grader.backends.docker.engine import (
    BeingRemoved, BuildFailed, DockerError, EngineError, Missing, Refused, Unanswered, engine_errors,
)
from grader.core.errors import BackendError, InfrastructureError

PACKAGE = Path(__file__).resolve().parents[4] / "grader"


def _raised(exc: BaseException) -> BaseException:
    with pytest.raises(BaseException) as info:
        with engine_errors():
            raise exc
    return info.value


def _response(status: int, reason: str = "") -> requests.Response:
    res = requests.Response()
    res.status_code = status
    res.reason = reason
    res.url = "http+docker://localhost/v1.41/containers/x/json"
    return res


@pytest.mark.parametrize(("sdk", "ours"), [
    (docker.errors.NotFound("No such container: x", response=_response(404)), Missing),
    (docker.errors.ImageNotFound("No such image: y", response=_response(404)), Missing),
    (docker.errors.APIError("Conflict", response=_response(409), explanation="is not running"), Refused),
    # another caller removes it now (two sweeps at once): as good as gone, a Missing to whoever removes it too
    (docker.errors.APIError("409 Client Error: Conflict (\"removal of container 978ddfdb974 is already in progress\")",
                            response=_response(409), explanation="removal of container 978ddfdb974 is already in progress"),
     BeingRemoved),
    (docker.errors.BuildError("step 3 failed", build_log=[{"stream": "x"}]), BuildFailed),
    (docker.errors.DockerException("TLS parameters are wrong"), DockerError),
    (requests.exceptions.ConnectionError("Connection aborted."), Unanswered),
    (requests.exceptions.ReadTimeout("Read timed out."), Unanswered),
])
def test_each_sdk_error_becomes_ours_with_the_sdks_own_message(sdk: Exception, ours: type[EngineError]) -> None:
    got = _raised(sdk)
    assert type(got) is ours and isinstance(got, BackendError)
    assert str(got) == str(sdk)  # whatever a caller prints of it reads as before
    assert got.__cause__ is sdk


def test_the_engines_reason_and_the_builds_log_come_along() -> None:
    refused = _raised(docker.errors.APIError("Conflict", response=_response(409), explanation="is not running"))
    assert isinstance(refused, Refused) and refused.explanation == "is not running"
    built = _raised(docker.errors.BuildError("step 3 failed", build_log=[{"stream": "x"}]))
    assert isinstance(built, BuildFailed) and built.msg == "step 3 failed" and built.build_log == [{"stream": "x"}]


def test_anything_else_passes_unchanged() -> None:
    for exc in (InfrastructureError("the proxy stopped"), ValueError("bad"), KeyError("k")):
        assert _raised(exc) is exc


def test_with_what_every_engine_error_becomes_the_learners_message() -> None:
    with pytest.raises(BackendError) as info:
        with engine_errors("run sl-1"):
            raise requests.exceptions.ConnectionError("Connection aborted.\nsecond line")
    assert type(info.value) is BackendError  # plain: an outer engine_errors(what) leaves it alone
    assert str(info.value) == (
        "the Docker engine failed during run sl-1: Connection aborted.. Check that it answers (`docker info`), then rerun."
    )
    with pytest.raises(BackendError) as inner:
        with engine_errors("run sl-2"):
            with engine_errors():
                raise docker.errors.NotFound("No such container: z")
    assert str(inner.value).startswith("the Docker engine failed during run sl-2: No such container: z")
    plain = BackendError("this job needs an SSH-agent socket")
    with pytest.raises(BackendError) as kept:
        with engine_errors("run sl-3"):
            raise plain
    assert kept.value is plain  # our own errors are not the engine's


def test_ignore_ends_the_block_quietly_for_those_kinds_only() -> None:
    with engine_errors(ignore=(Missing,)):
        raise docker.errors.NotFound("gone")
    with engine_errors(ignore=(Refused,)):
        raise docker.errors.NotFound("gone too: Missing is a Refused")
    with pytest.raises(Unanswered):
        with engine_errors(ignore=(Refused,)):
            raise requests.exceptions.ConnectionError("away")


def test_a_raw_answer_is_worded_as_the_sdk_words_its_own() -> None:
    res = _response(500, "Server Error")
    got = engine.refused("stat /x: HTTP 500", res)
    assert isinstance(got, Refused)
    assert str(got) == str(docker.errors.APIError("stat /x: HTTP 500", response=res))


def test_only_the_engine_module_imports_the_docker_sdk() -> None:
    importers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            if any(n.split(".")[0] in ("docker", "requests") for n in names):
                importers.append(str(path.relative_to(PACKAGE)))
    assert sorted(set(importers)) == ["backends/docker/engine.py"]


def test_an_engine_that_goes_away_mid_cleanup_is_said_so_with_what_to_check() -> None:
    """`sandbox-lab cleanup` once printed the transport's bare "('Connection aborted.', FileNotFoundError(...))"."""
    from grader.backends.cleanup import Scope
    from grader.backends.docker.backend import sweep

    class Api:
        def containers(self, **_: object) -> list[object]:
            raise requests.exceptions.ConnectionError(("Connection aborted.", FileNotFoundError(2, "No such file or directory")))

    class Client:
        api = Api()

    with pytest.raises(BackendError) as caught:
        sweep(Scope(everything=False, engine=engine.DockerEngine(Client())))
    assert "the Docker engine failed during cleanup" in str(caught.value) and "docker info" in str(caught.value)


# --- the adapter: its methods map the SDK's errors themselves -------------------------------------------------


def test_the_adapters_calls_map_the_sdks_errors_inside(monkeypatch: pytest.MonkeyPatch) -> None:
    from docker.api.client import APIClient

    client = docker.DockerClient(base_url="unix:///nonexistent/docker.sock", version="1.41")
    eng = engine.DockerEngine(client)

    def not_found(self: object, *a: object, **k: object) -> None:
        raise docker.errors.NotFound("No such container: x", response=_response(404))

    def conflict(self: object, *a: object, **k: object) -> None:
        raise docker.errors.APIError("Conflict", response=_response(409), explanation="is not running")

    monkeypatch.setattr(APIClient, "inspect_container", not_found)
    with pytest.raises(Missing) as gone:
        eng.inspect("x")
    assert isinstance(gone.value.__cause__, docker.errors.NotFound)
    monkeypatch.setattr(APIClient, "kill", conflict)
    with pytest.raises(Refused) as late:
        eng.kill(engine.ContainerRef("x", "sl-x"))
    assert late.value.explanation == "is not running" and not isinstance(late.value, Missing)
    # no engine at the end of the socket: the transport's ConnectionError, as the adapter's Unanswered
    with pytest.raises(Unanswered):
        eng.ping()
    with pytest.raises(Unanswered):
        eng.containers({"label": "x"})


def test_a_fake_transport_error_from_any_call_comes_out_as_ours() -> None:
    class Api:
        def containers(self, **_: object) -> object:
            raise requests.exceptions.ReadTimeout("Read timed out.")

        def remove_network(self, *_: object) -> object:
            raise docker.errors.NotFound("network sl-x not found", response=_response(404))

    class Client:
        api = Api()

    eng = engine.DockerEngine(Client())
    with pytest.raises(Unanswered):
        eng.containers({})
    with pytest.raises(Missing):
        eng.remove_network("sl-x")


def test_a_container_ref_is_read_from_the_engines_inspect() -> None:
    class Container:
        id, name = "abc", "sl-1-proxy"
        attrs = {"Name": "/sl-1-proxy", "Config": {"Labels": {"role": "proxy"}}, "State": {"Status": "exited", "ExitCode": 3, "FinishedAt": "t"},
                 "Mounts": [{"Destination": "/d", "Source": "/s"}],
                 "NetworkSettings": {"Networks": {"sl-1-inet": {"IPAddress": "10.0.0.2"}}}}

    class Containers:
        def get(self, ident: str) -> Container:
            assert ident == "abc"
            return Container()

    class Client:
        containers = Containers()

    got = engine.DockerEngine(Client()).inspect(engine.ContainerRef("abc", "sl-1-proxy"))
    assert got == engine.ContainerRef("abc", "sl-1-proxy", status="exited", exit_code=3, finished_at="t")
    assert got.labels == {"role": "proxy"} and got.mounts == {"/d": "/s"} and got.addresses == {"sl-1-inet": "10.0.0.2"}


def test_worded_names_what_failed_and_lets_other_errors_pass() -> None:
    with pytest.raises(BackendError) as info:
        with engine.worded("run sl-9"):
            raise Unanswered("('Connection aborted.', ...)\nmore")
    assert type(info.value) is BackendError
    assert str(info.value).startswith("the Docker engine failed during run sl-9: ('Connection aborted.', ...).")
    with pytest.raises(InfrastructureError):
        with engine.worded("run sl-9"):
            raise InfrastructureError("not the engine's")


# --- following a container's output: the probe runner's end, seen as it is printed -----------------------------


class _Response:
    closed = False

    def close(self) -> None:
        self.closed = True


class _Stream:
    """The SDK's followed log stream: chunks as the engine sends them; ``close`` ends a blocked read."""

    def __init__(self, chunks: list[bytes], *, block: bool = False, fail: Optional[BaseException] = None) -> None:
        import threading

        self.chunks, self.block, self.fail, self.closed = list(chunks), block, fail, threading.Event()
        self._response = _Response()  # the HTTP response under the SDK's stream: it holds the socket's file

    def __iter__(self) -> Iterator[bytes]:
        yield from self.chunks
        if self.fail is not None:
            raise self.fail
        if self.block:  # a container that prints nothing more and does not exit: only the timeout's close ends it
            self.closed.wait(10)
            raise OSError("closed")

    def close(self) -> None:
        self.closed.set()


def _following(stream: _Stream) -> engine.DockerEngine:
    class Api:
        def logs(self, cid: str, **kw: object) -> _Stream:
            assert kw == {"stdout": True, "stderr": False, "stream": True, "follow": True}, kw
            return stream

    class Client:
        api = Api()

    return engine.DockerEngine(Client())


REF = engine.ContainerRef(id="c1", name="sbx")


def test_follow_sees_a_line_split_across_chunks_and_only_whole_lines() -> None:
    seen: list[bytes] = []

    def until(line: bytes) -> bool:
        seen.append(line)
        return line == b"END"

    stream = _Stream([b"one\nE", b"N", b"D\ntwo\n"])
    got = _following(stream).follow(REF, until, timeout=5, limit=1000)
    assert got is True and seen == [b"one", b"END"]  # and no read past the line it waited for
    assert stream.closed.is_set() and stream._response.closed, "its socket freed, though the container runs on"
    # a last line without its newline is not whole: never taken for the end
    assert _following(_Stream([b"one\nEND"])).follow(REF, lambda x: x == b"END", timeout=5, limit=1000) is False


def test_follow_keeps_every_byte_it_read_up_to_the_line_it_waited_for() -> None:
    """What the run reads instead of a second ``logs`` request: every chunk as it came, split lines whole again,
    the end line included. The gamed version keeps only the lines ``until`` saw: a line split across chunks, or
    one before the output's first newline, would be lost from the evidence."""
    into = bytearray()
    assert _following(_Stream([b'{"a": 1}\n{"b', b'": 2}\nE', b"ND\n"])).follow(
        REF, lambda x: x == b"END", timeout=5, limit=1000, into=into) is True
    assert bytes(into) == b'{"a": 1}\n{"b": 2}\nEND\n'


@pytest.mark.parametrize("stream, limit", [
    (_Stream([b"a\n", b"b\n"]), 1000),  # it exited without the line
    (_Stream([b"x" * 600, b"\nEND\n"]), 500),  # past the limit before the line
    (_Stream([b"a\n"], fail=requests.exceptions.ConnectionError("gone")), 1000),  # the transport failed
    (_Stream([b"a\n"], block=True), 1000),  # nothing more within the timeout: closed under the reader
])
def test_follow_says_false_for_every_other_end_and_the_caller_waits_as_before(stream: _Stream, limit: int) -> None:
    assert _following(stream).follow(REF, lambda x: x == b"END", timeout=0.2, limit=limit) is False
    assert stream.closed.is_set() and stream._response.closed, "the stream and its response are closed whatever the end"


def test_follow_counts_its_timeout_from_the_call_so_an_engine_slow_to_answer_gives_no_more_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The wall clock starts before the go: an engine that takes longer than the whole timeout to answer the logs
    request leaves nothing of it, and the stream is closed at once. Before, the timer started after the answer,
    and a loaded machine gave the sandbox that much more time (CI: a run with a 0.02 s clock ran every probe)."""
    now = [100.0]
    monkeypatch.setattr(engine.time, "monotonic", lambda: now[0])
    intervals: list[float] = []
    real_timer = engine.threading.Timer

    def timer(interval: float, fn: Callable[[], object]) -> Any:
        intervals.append(interval)
        return real_timer(interval, fn)

    monkeypatch.setattr(engine.threading, "Timer", timer)
    stream = _Stream([b"a\n"], block=True)
    slow = _following(stream)
    answer = slow._client.api.logs

    def late(cid: str, **kw: object) -> _Stream:
        now[0] += 0.5  # the engine answered half a second later
        return answer(cid, **kw)

    slow._client.api.logs = late
    assert slow.follow(REF, lambda x: x == b"END", timeout=0.2, limit=1000) is False
    assert intervals == [0.0] and stream.closed.is_set()
