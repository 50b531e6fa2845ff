"""Progress kept by the run service (grader/course/progress_sync.py, and how grader/course/progress.py combines the
service's copy with the local file): against the service's real app on loopback (uvicorn in a thread, a Redis of its own),
and against a stand-in that refuses (401, 429) or cannot be reached."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest
from hosted_fixtures import redis_server, settings  # noqa: F401 - fixtures

from grader.backends import remote
from grader.course import progress_sync
from grader.course.progress import (
    Attempt, LevelRecord, Progress, load_progress, mark_done, merge_progress, record_attempt, record_json, record_level,
    learner_seed, reset_progress,
)
from grader.course.progress_sync import ProgressService, SyncFailed, service_from_env


@pytest.fixture()
def service(settings: Any) -> Iterator[str]:
    """The service's API (create_app) on a loopback port of its own, for as long as the test."""
    import uvicorn

    from grader.hosted.app import create_app

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(create_app(settings), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the API did not start"
        time.sleep(0.05)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def _issue(settings: Any, name: str = "alice") -> str:
    from grader.hosted.tokens import issue_token

    return issue_token(settings.tokens_file, name)


def _use(monkeypatch: pytest.MonkeyPatch, url: str, token: str) -> None:
    monkeypatch.setenv("SANDBOX_LAB_SERVICE_URL", url)
    monkeypatch.setenv("SANDBOX_LAB_TOKEN", token)


# --- which learners sync -------------------------------------------------------------------------


def test_the_environment_names_are_the_remote_backends() -> None:
    assert (progress_sync.SERVICE_URL_ENV, progress_sync.TOKEN_ENV) == (remote.SERVICE_URL_ENV, remote.TOKEN_ENV)


def test_only_a_service_with_a_token_syncs_and_a_bad_url_is_said() -> None:
    assert service_from_env({}) is None
    assert service_from_env({"SANDBOX_LAB_SERVICE_URL": "http://h"}) is None
    assert service_from_env({"SANDBOX_LAB_TOKEN": "t"}) is None
    found = service_from_env({"SANDBOX_LAB_SERVICE_URL": "https://h:8/api/", "SANDBOX_LAB_TOKEN": " t "})
    assert found == ProgressService("https://h:8/api", "t") and "t" not in repr(found).replace("https", "")
    for bad in ("ftp://h", "http://user:pw@h", "http://h/?token=x", "h"):
        with pytest.raises(SyncFailed):
            service_from_env({"SANDBOX_LAB_SERVICE_URL": bad, "SANDBOX_LAB_TOKEN": "t"})


# --- the merge rule ------------------------------------------------------------------------------


def test_merging_loses_nothing_and_keeps_what_came_first(tmp_path: Path) -> None:
    mine = Progress(tmp_path / "p.json", {"l01": 100.0, "l02": 300.0}, {"q1": Attempt(50.0, "partly", 0.5)}, "",
                    {"ctf-1": LevelRecord(2, 1, None), "ctf-2": LevelRecord(1, 0, 90.0)})
    theirs = Progress(Path("elsewhere"), {"l02": 200.0, "l03": 400.0},
                      {"q1": Attempt(40.0, "right", 1.0), "q2": Attempt(60.0, "right", 1.0)}, "seed",
                      {"ctf-1": LevelRecord(5, 0, 70.0), "ctf-2": LevelRecord(1, 1, 95.0)})
    both = merge_progress(mine, theirs)
    assert both.path == mine.path
    assert both.done == {"l01": 100.0, "l02": 200.0, "l03": 400.0}
    assert both.first == {"q1": Attempt(40.0, "right", 1.0), "q2": Attempt(60.0, "right", 1.0)}  # the earliest attempt
    assert both.levels == {"ctf-1": LevelRecord(5, 1, 70.0), "ctf-2": LevelRecord(1, 1, 90.0)}
    assert both.learner == "seed" and merge_progress(mine, replace_learner(theirs, "")).learner == ""
    # gaming: a later "first attempt" that scored better never replaces the earlier one, whichever side it is on
    assert merge_progress(theirs, mine).first["q1"] == Attempt(40.0, "right", 1.0)
    late = Progress(Path("x"), {}, {"q1": Attempt(55.0, "right", 1.0)})
    assert merge_progress(mine, late).first["q1"] == Attempt(50.0, "partly", 0.5)


def replace_learner(p: Progress, learner: str) -> Progress:
    from dataclasses import replace

    return replace(p, learner=learner)


# --- against the service's own app -----------------------------------------------------------------


def test_progress_outlives_a_session(service: str, settings: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    _use(monkeypatch, service, _issue(settings))
    first_session, second_session = tmp_path / "one" / "p.json", tmp_path / "two" / "p.json"
    mark_done("l01", path=first_session, now=100.0)
    record_attempt("q1", "partly", 0.5, path=first_session, now=110.0)
    record_level("ctf-1", captured=False, hint_shown=True, path=first_session)
    seed = learner_seed(path=first_session)
    # a new Binder session: no file, the same token
    again = load_progress(second_session)
    assert again.done == {"l01": 100.0} and again.first["q1"] == Attempt(110.0, "partly", 0.5)
    assert again.level("ctf-1") == LevelRecord(1, 1, None) and learner_seed(path=second_session) == seed
    assert json.loads(second_session.read_text())["done"] == {"l01": 100.0}  # loading kept the service's copy here too
    # and what is done there is added, nothing of the first session lost; the first attempt still counts
    mark_done("l02", path=second_session, now=200.0)
    assert record_attempt("q1", "right", 1.0, path=second_session) == (Attempt(110.0, "partly", 0.5), False)
    assert load_progress(first_session).done == {"l01": 100.0, "l02": 200.0}
    assert capsys.readouterr().err == ""  # nothing to say when the service answers


def test_loading_combines_the_local_file_with_the_service_copy(service: str, settings: Any, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    local = tmp_path / "p.json"
    mark_done("offline-item", path=local, now=50.0)  # made while no service was named
    _use(monkeypatch, service, _issue(settings))
    ProgressService(service, _token_env()).store({"version": 2, "done": {"l01": 10.0, "offline-item": 80.0}, "first": {}})
    assert load_progress(local).done == {"l01": 10.0, "offline-item": 50.0}
    mark_done("l02", path=local, now=90.0)  # saving sends the combination
    assert ProgressService(service, _token_env()).fetch()["done"] == {"l01": 10.0, "offline-item": 50.0, "l02": 90.0}


def _token_env() -> str:
    import os

    return os.environ["SANDBOX_LAB_TOKEN"]


def test_a_revoked_token_keeps_working_locally_with_a_labelled_notice(service: str, settings: Any, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from grader.hosted.tokens import revoke_token

    _use(monkeypatch, service, _issue(settings))
    local = tmp_path / "p.json"
    mark_done("l01", path=local, now=1.0)
    revoke_token(settings.tokens_file, "alice")
    capsys.readouterr()
    assert mark_done("l02", path=local, now=2.0).done == {"l01": 1.0, "l02": 2.0}
    err = capsys.readouterr().err.splitlines()
    assert err and all(line.startswith("progress: ") and "HTTP 401" in line and service in line for line in err)
    assert _token_env() not in "\n".join(err)
    assert load_progress(local).done == {"l01": 1.0, "l02": 2.0}


def test_reset_resets_the_service_copy_too(service: str, settings: Any, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    _use(monkeypatch, service, _issue(settings))
    local = tmp_path / "p.json"
    mark_done("l01", path=local)
    reset_progress(path=local)
    assert load_progress(local).done == {} and not local.exists()


# --- a service that cannot be used ----------------------------------------------------------------


class _Refusing:
    """A stand-in that answers every request with ``status`` (or a body that is no record), counting PUTs."""

    def __init__(self, status: int, body: Any = None, put_status: Optional[int] = None) -> None:
        self.puts = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

            def _answer(self, code: int = status) -> None:
                data = json.dumps(body if body is not None else {"error": {"code": "x", "message": "no"}}).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                self._answer()

            def do_PUT(self) -> None:  # noqa: N802
                owner.puts += 1
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self._answer(put_status or status)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize(("status", "body", "said"), [
    (429, None, "HTTP 429, over quota"),
    (401, None, "HTTP 401, the token was refused"),
    (500, None, "HTTP 500"),
    (200, {"version": 2, "done": {"l01": "now"}, "first": {}}, "does not parse"),  # gaming: a record that is not one
    (200, ["not", "a", "record"], "does not parse"),
])
def test_a_service_that_refuses_or_answers_nonsense_leaves_the_file_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        status: int, body: Any, said: str) -> None:
    stand_in = _Refusing(status, body)
    try:
        local = tmp_path / "p.json"
        mark_done("l01", path=local, now=1.0)  # made before a service was named
        _use(monkeypatch, stand_in.url, "t0k3n")
        assert mark_done("l02", path=local, now=2.0).done == {"l01": 1.0, "l02": 2.0}
        assert load_progress(local).done == {"l01": 1.0, "l02": 2.0}
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 2 and all(line.startswith("progress: kept on this machine only: ") and said in line for line in err)
        assert stand_in.puts == 0  # a copy that could not be read is never replaced
    finally:
        stand_in.close()


def test_an_unreachable_service_keeps_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    _use(monkeypatch, f"http://127.0.0.1:{port}", "t0k3n")
    local = tmp_path / "p.json"
    assert mark_done("l01", path=local, now=1.0).done == {"l01": 1.0}
    assert json.loads(local.read_text())["done"] == {"l01": 1.0}
    (line,) = capsys.readouterr().err.splitlines()  # one line an action, and the service asked once
    assert line.startswith("progress: kept on this machine only: the run service at http://127.0.0.1:") and "could not be reached" in line
    _use(monkeypatch, "not a url", "t0k3n")
    assert load_progress(local).done == {"l01": 1.0}
    assert "not an http://" in capsys.readouterr().err


def test_without_a_service_nothing_is_sent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SANDBOX_LAB_SERVICE_URL", raising=False)
    monkeypatch.setenv("SANDBOX_LAB_TOKEN", "t0k3n")

    def refuse(self: Any, method: str, body: Any) -> Any:
        raise AssertionError("nothing may be sent without a service")

    monkeypatch.setattr(ProgressService, "_call", refuse)
    assert mark_done("l01", path=tmp_path / "p.json", now=1.0).done == {"l01": 1.0}
    assert record_json(load_progress(tmp_path / "p.json"))["done"] == {"l01": 1.0}


def test_a_save_the_service_refuses_is_kept_in_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    stand_in = _Refusing(200, {"version": 2, "done": {"elsewhere": 5.0}, "first": {}}, put_status=429)
    try:
        _use(monkeypatch, stand_in.url, "t0k3n")
        local = tmp_path / "p.json"
        assert mark_done("l01", path=local, now=1.0).done == {"elsewhere": 5.0, "l01": 1.0}
        (line,) = capsys.readouterr().err.splitlines()
        assert line.startswith("progress: saved on this machine only: ") and "HTTP 429, over quota" in line
        assert json.loads(local.read_text())["done"] == {"elsewhere": 5.0, "l01": 1.0} and stand_in.puts == 1
    finally:
        stand_in.close()
