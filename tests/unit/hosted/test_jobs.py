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


# --- issue 39: bounded Redis -------------------------------------------------------------------------


def test_a_cached_answer_is_referenced_never_copied(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # ten re-POSTs of a 4.5 MB result added 52 MB: each job record held a copy of the cached result for 24 h
    store = JobStore(settings, open_redis(settings), require_workers=False)
    monkeypatch.setenv("SANDBOX_LAB_SERVICE_BACKEND", "static")
    first = store.submit(ALICE, "probe", {"policy": {}})
    SimpleWorker([store.queue], connection=store.conn, serializer=JSONSerializer).work(burst=True)
    result = store.status(ALICE, first["job"])["result"]
    entry = next(store.conn.scan_iter(f"{settings.prefix}cache:*"))
    again = [store.submit(ALICE, "probe", {"policy": {}}) for _ in range(10)]
    for job in again:
        key = f"{settings.prefix}job:{job['job']}"
        assert job["status"] == "finished" and len(store.conn.get(key)) < 300  # a reference, not the result
        assert 0 < store.conn.ttl(key) <= store.conn.ttl(entry)  # it expires with what it points at
        assert store.status(ALICE, job["job"]) == {**store.status(ALICE, job["job"]), "result": result, "cached": True}
    assert store.conn.zcard(f"{settings.prefix}active:{ALICE.name}") == 0  # cached answers hold no job slot
    store.conn.delete(entry)
    gone = store.status(ALICE, again[0]["job"])
    assert gone["status"] == "failed" and gone["error"]["code"] == "expired" and gone["result"] is None


def test_a_full_redis_is_a_503_naming_the_limit_and_queues_nothing(settings: Any) -> None:
    from grader.hosted.problems import ServiceError

    store = JobStore(settings, open_redis(settings), require_workers=False)
    old = store.conn.config_get("maxmemory*")
    store.conn.config_set("maxmemory-policy", "noeviction")
    store.conn.config_set("maxmemory", 1)  # every write over the limit: what a full store answers
    try:
        with pytest.raises(ServiceError) as caught:
            store.submit(ALICE, "probe", {"policy": {}})
    finally:
        store.conn.config_set("maxmemory", old["maxmemory"])
        store.conn.config_set("maxmemory-policy", old["maxmemory-policy"])
    err = caught.value
    assert (err.status, err.code, err.extra["limit"]) == (503, "store_full", "redis maxmemory")
    assert store.depth() == 0


def test_the_job_cap_holds_across_two_api_processes_on_one_redis(settings: Any) -> None:
    """Issue 39: with two API processes (the Kubernetes design runs two), 2 jobs started on a cap of 1 in 3 of 11
    bursts. Two stores on their own connections, 20 bursts of 8 requests released at once: never over the cap."""
    import threading

    one = Token(name="carol", sha256="2" * 64, created=0.0, expires=None, rate=10_000, jobs=1)
    apis = [JobStore(settings, open_redis(settings), require_workers=False) for _ in range(2)]
    slot = f"{settings.prefix}active:carol"
    for burst in range(20):
        gate = threading.Barrier(8)
        taken: list[str] = []

        def post(api: JobStore, i: int) -> None:
            gate.wait()
            try:
                taken.append(api.submit(one, "probe", {"policy": {"network": {"allowedDomains": [f"b{burst}-{i}.example"]}}})["job"])
            except Exception as exc:  # noqa: BLE001 - only the cap's 429 is expected
                assert getattr(exc, "code", None) == "too_many_jobs", exc

        threads = [threading.Thread(target=post, args=(apis[i % 2], i)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(taken) == 1, f"burst {burst}: {len(taken)} jobs admitted on a cap of 1"
        assert apis[0].conn.zrange(slot, 0, -1) == [taken[0].encode()]
        apis[0].conn.zrem(slot, taken[0])  # the job ends: what the worker does when its run returns
