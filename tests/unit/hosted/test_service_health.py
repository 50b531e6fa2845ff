"""The run service's health (issue 39): live workers counted from heartbeats, /healthz and /readyz, Redis down as 503.

On a Redis of the test's own (hosted_fixtures); the workers here are RQ
registrations whose heartbeats the test writes, so the counting is judged
without Docker. The real stack under faults: tests/integration/test_service_faults.py.
"""

from __future__ import annotations

import os
import time
import warnings
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator

import pytest
import redis
from hosted_fixtures import auth as _auth, redis_server, settings  # noqa: F401 - fixtures
from rq import Worker
from rq.serializers import JSONSerializer
from rq.utils import utcformat
from starlette.exceptions import StarletteDeprecationWarning

from grader.hosted import worker as worker_module
from grader.hosted.app import create_app
from grader.hosted.jobs import ENGINE_FIELD, JobStore, open_redis
from grader.hosted.settings import LIVE_SECONDS, service_settings
from redis_server import RedisServer

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

NAIVE = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}


def _register(store: JobStore, name: str, beat_age: float, engine: str | None = "ok") -> None:
    """A worker registered on the store's queue whose last heartbeat was ``beat_age`` seconds ago."""
    w = Worker([store.queue], connection=store.conn, serializer=JSONSerializer, name=name)
    w.register_birth()
    beat = datetime.now(timezone.utc) - timedelta(seconds=beat_age)
    store.conn.hset(w.key, "last_heartbeat", utcformat(beat))
    if engine is not None:
        store.conn.hset(w.key, ENGINE_FIELD, engine)


@pytest.fixture()
def required(settings: Any) -> JobStore:
    return JobStore(settings, open_redis(settings))  # workers required, as the service runs


@pytest.fixture()
def client(settings: Any, required: JobStore) -> Iterator[TestClient]:
    with TestClient(create_app(settings, required), raise_server_exceptions=False) as c:
        yield c


def test_a_stale_registration_is_not_a_live_worker(required: JobStore, client: TestClient, settings: Any) -> None:
    _register(required, "killed", beat_age=LIVE_SECONDS + 5)  # SIGKILLed: its registration outlives it
    census = required.census()
    assert (census.registered, census.live) == (1, 0)
    started = time.monotonic()
    answer = client.post("/v1/probe", json={"policy": NAIVE}, headers=_auth(settings))
    assert time.monotonic() - started < 2  # at once, not after the client's deadline
    assert answer.status_code == 503, answer.text
    error = answer.json()["error"]
    assert error["code"] == "unavailable" and "no worker" in error["message"] and "1 registered" in error["message"]


def test_a_fresh_heartbeat_is_a_live_worker_and_the_job_is_accepted(required: JobStore, client: TestClient,
                                                                     settings: Any) -> None:
    _register(required, "stale", beat_age=LIVE_SECONDS + 5)
    _register(required, "fresh", beat_age=1)
    assert (required.census().registered, required.workers()) == (2, 1)
    assert client.post("/v1/probe", json={"policy": NAIVE}, headers=_auth(settings)).status_code == 202
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json() == {"ok": True, "workers": {"registered": 2, "live": 1, "engines": 1}}


def test_live_workers_whose_engine_is_down_are_503_naming_the_engine(required: JobStore, client: TestClient,
                                                                     settings: Any) -> None:
    _register(required, "no-engine", beat_age=1, engine="down: Error while fetching server API version")
    answer = client.post("/v1/probe", json={"policy": NAIVE}, headers=_auth(settings))
    assert answer.status_code == 503 and "Docker engine" in answer.json()["error"]["message"]
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert "fetching server API version" in ready.json()["error"]["message"]
    assert ready.json()["error"]["workers"] == {"registered": 1, "live": 1, "engines": 0}


def test_readyz_without_a_worker_is_503_and_healthz_stays_200(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"ok": True}
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["error"]["code"] == "unavailable" and "no worker" in ready.json()["error"]["message"]


def test_redis_down_is_503_on_every_route_but_healthz(tmp_path: Path) -> None:
    own = RedisServer()
    try:
        settings = service_settings({"SANDBOX_LAB_SERVICE_DIR": str(tmp_path / "service"), "SANDBOX_LAB_REDIS_URL": own.url,
                                     "SANDBOX_LAB_SERVICE_NAME": "down", "HOME": os.environ.get("HOME", "/root")})
        headers = _auth(settings)
        with TestClient(create_app(settings), raise_server_exceptions=False) as client:
            own.stop()
            answers = {
                "POST /v1/probe": client.post("/v1/probe", json={"policy": NAIVE}, headers=headers),
                "GET /v1/jobs": client.get("/v1/jobs/" + "a" * 32, headers=headers),
                "GET /v1/progress": client.get("/v1/progress", headers=headers),
                "GET /readyz": client.get("/readyz"),
                "GET /metrics": client.get("/metrics"),
            }
            for route, answer in answers.items():
                assert answer.status_code == 503, (route, answer.status_code, answer.text)
                error = answer.json()["error"]
                assert error["code"] == "unavailable" and "Redis" in error["message"], (route, error)
                assert "a bug" not in error["message"]
            assert client.get("/healthz").status_code == 200
            own.start()  # back: the same app serves again, no restart of the API
            assert client.get("/v1/progress", headers=headers).status_code == 200
    finally:
        own.close()


# --- the worker's own pieces ---------------------------------------------------------------------


def test_the_liveness_file_tells_a_turning_loop_from_a_hung_one(tmp_path: Path) -> None:
    path = tmp_path / "alive"
    assert not worker_module.alive(str(path))  # never touched: not alive
    worker_module._touch(str(path))
    assert worker_module.alive(str(path))
    assert not worker_module.alive(str(path), now=time.time() + worker_module.ALIVE_WITHIN_SECONDS + 1)


def test_storing_a_result_is_tried_again_through_an_outage_and_given_up_after_the_grace(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker_module.time, "sleep", lambda s: None)
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise redis.exceptions.ConnectionError("Connection refused")
        return "stored"

    assert worker_module._persist("job x", flaky) == "stored" and len(calls) == 3

    def down() -> None:
        raise redis.exceptions.ConnectionError("Connection refused")

    with pytest.raises(redis.exceptions.ConnectionError):
        worker_module._persist("job y", down, grace=0)


def test_worker_alive_is_the_liveness_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse
    import io

    from grader.plumbing.terminal import Streams, UsageError
    from grader.hosted.commands import run_worker

    args = argparse.Namespace(alive=True, name=None, burst=False)
    streams = Streams(out=io.StringIO(), err=io.StringIO())
    monkeypatch.delenv(worker_module.ALIVE_ENV, raising=False)
    with pytest.raises(UsageError, match="SANDBOX_LAB_WORKER_ALIVE"):
        run_worker(args, streams)
    monkeypatch.setenv(worker_module.ALIVE_ENV, str(tmp_path / "alive"))
    assert run_worker(args, streams) == 3 and "hung, or not running" in streams.err.getvalue()
    (tmp_path / "alive").touch()
    assert run_worker(args, streams) == 0


def test_a_worker_made_while_redis_is_down_waits_instead_of_dying(tmp_path: Path) -> None:
    # RQ's Worker() asks Redis its client's address: made during an outage, it raised out of serve_jobs and the
    # process died. In burst mode the loop returns after its one attempt, so the attempt is what is judged here.
    own = RedisServer()
    settings = service_settings({"SANDBOX_LAB_SERVICE_DIR": str(tmp_path / "service"), "SANDBOX_LAB_REDIS_URL": own.url,
                                 "SANDBOX_LAB_SERVICE_NAME": "down", "HOME": os.environ.get("HOME", "/root")})
    own.close()
    assert worker_module.serve_jobs(settings, name="w", burst=True) is False
