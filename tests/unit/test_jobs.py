"""The jobs on Redis: the cache key, the worker's envelope, and a queued job surviving a Redis restart (grader/hosted/jobs.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hosted_fixtures import redis_server, settings  # noqa: F401 - fixtures
from rq import SimpleWorker
from rq.serializers import JSONSerializer

from grader.hosted.jobs import JobStore, cache_key, open_redis, perform, world_hash
from grader.hosted.tokens import Token
from redis_server import RedisServer

ALICE = Token(name="alice", sha256="0" * 64, created=0.0, expires=None, rate=100, jobs=10)


def test_the_cache_key_is_everything_that_decides_a_result() -> None:
    world = world_hash()
    key = cache_key("0.1.0", world, "probe", {"policy": {"a": 1, "b": 2}}, "alice")
    assert key == cache_key("0.1.0", world, "probe", {"policy": {"b": 2, "a": 1}}, "alice")
    assert len({key, cache_key("0.2.0", world, "probe", {"policy": {"a": 1, "b": 2}}, "alice"),
                cache_key("0.1.0", "0" * 64, "probe", {"policy": {"a": 1, "b": 2}}, "alice"),
                cache_key("0.1.0", world, "grade", {"policy": {"a": 1, "b": 2}}, "alice"),
                cache_key("0.1.0", world, "probe", {"policy": {"a": 1, "b": 3}}, "alice"),
                cache_key("0.1.0", world, "probe", {"policy": {"a": 1, "b": 2}}, "bob")}) == 6


def test_the_worker_reports_a_known_failure_as_an_error_never_a_result(monkeypatch: pytest.MonkeyPatch) -> None:
    assert perform("runz", {}, "k", "p:") == {"ok": False, "error": {"code": "invalid", "message": "no kind 'runz' on this worker"}}
    bad = perform("probe", {"policy": {"filesystem": {"allowRead": [3]}}}, "k", "p:")
    assert bad["ok"] is False and bad["error"]["code"] == "invalid"
    monkeypatch.setenv("SANDBOX_LAB_SERVICE_BACKEND", "docker")
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    down = perform("probe", {"policy": {}}, "k", "p:")
    assert down["ok"] is False and down["error"]["code"] == "unavailable"


def test_a_queued_job_survives_a_redis_restart(redis_server: RedisServer, settings: Any,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    store = JobStore(settings, open_redis(settings), require_workers=False)
    job = store.submit(ALICE, "probe", {"policy": {}})
    assert store.status(ALICE, job["job"])["status"] == "queued"
    redis_server.restart()  # append-only file on: what was acknowledged is on disk
    store = JobStore(settings, open_redis(settings), require_workers=False)
    assert store.depth() == 1 and store.status(ALICE, job["job"])["status"] == "queued"
    monkeypatch.setenv("SANDBOX_LAB_SERVICE_BACKEND", "static")
    SimpleWorker([store.queue], connection=store.conn, serializer=JSONSerializer).work(burst=True)
    done = store.status(ALICE, job["job"])
    assert done["status"] == "finished" and done["result"]["backend"] == "static"


def test_a_job_whose_queue_record_is_gone_is_failed_with_a_reason(settings: Any) -> None:
    store = JobStore(settings, open_redis(settings), require_workers=False)
    job = store.submit(ALICE, "probe", {"policy": {}})
    store.queue.empty()
    store.conn.delete(f"rq:job:{job['job']}")
    answer = store.status(ALICE, job["job"])
    assert answer["status"] == "failed" and answer["error"]["code"] == "lost" and answer["result"] is None


def test_a_token_is_answered_from_its_own_runs_only(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # a tenant who sends another's request first (a public policy) must not have its run answer the other's
    bob = Token(name="bob", sha256="1" * 64, created=0.0, expires=None, rate=100, jobs=10)
    store = JobStore(settings, open_redis(settings), require_workers=False)
    monkeypatch.setenv("SANDBOX_LAB_SERVICE_BACKEND", "static")
    first = store.submit(bob, "probe", {"policy": {}})
    SimpleWorker([store.queue], connection=store.conn, serializer=JSONSerializer).work(burst=True)
    assert store.status(bob, first["job"])["status"] == "finished"
    assert store.submit(bob, "probe", {"policy": {}})["status"] == "finished"  # its own run: from the cache
    theirs = store.submit(ALICE, "probe", {"policy": {}})
    assert theirs["status"] == "queued"  # a run of its own, never bob's
    assert store.status(ALICE, theirs["job"])["cached"] is False
