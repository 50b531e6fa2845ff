"""The service's jobs on Redis: admission (rate, concurrent jobs), the cache, the queue (RQ), and a job's status.

Why RQ: the service needs a queue that survives a restart, retries a job
whose worker died and fails it visibly otherwise, and keeps results for a
poll. RQ does each with Redis alone (``Retry``, the started-job registry's
abandoned-job cleanup, result TTLs), runs every job in a forked work horse
(a crash or a leak in one run ends with that run), and is small enough to read.
Celery brings a broker abstraction and a scheduler the service does not use;
Dramatiq and arq would do, but arq is asyncio-only (the backends are not) and
Dramatiq's results need a middleware. Jobs go through RQ's ``JSONSerializer``:
nothing read back from Redis is unpickled.

A worker runs ``perform``, which never raises for a run that failed for a
known reason: it returns ``{"ok": false, "error": {...}}``, so RQ's own
``failed`` means a worker lost mid-job (``worker_lost``), a timeout, or a bug.

Keys (all under ``ServiceSettings.prefix``): ``job:<id>`` (who asked, which
kind, whether cached), ``cache:<hash>`` (a token's own runs only), ``rate:<token>:<minute>``,
``active:<token>``, ``metrics:*``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from typing import Any, Mapping, Optional

from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError, TimeoutError as RedisTimeoutError
from rq import Queue, Retry
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer

from grader.core.errors import BackendError, SandboxLabError
from grader.cli.core import one_line
from grader.hosted.kinds import KINDS, Kind
from grader.hosted.metrics import record_run
from grader.hosted.problems import ServiceError
from grader.hosted.settings import CACHE_SECONDS, JOB_TIMEOUT, LIVE_SECONDS, RESULT_SECONDS, ServiceSettings
from grader.hosted.tokens import Token

__all__ = ["ENGINE_FIELD", "JobStore", "WorkerCensus", "cache_key", "open_redis", "perform", "world_hash"]

_log = logging.getLogger("sandbox_lab.jobs")
ENGINE_FIELD = "sandbox_lab_engine"  # in a worker's RQ hash, written with each heartbeat: "ok" or "down: <why>"

_WAITING = {JobStatus.QUEUED, JobStatus.DEFERRED, JobStatus.SCHEDULED, JobStatus.CREATED, JobStatus.READY_TO_ENQUEUE,
            JobStatus.RATE_LIMITED}


def open_redis(settings: ServiceSettings) -> Redis:
    return Redis.from_url(settings.redis_url, socket_timeout=10, socket_connect_timeout=5)


def world_hash() -> str:
    """The SHA-256 of the world this version judges against: a result is only reused against the same world."""
    return hashlib.sha256(resources.files("grader").joinpath("world.json").read_bytes()).hexdigest()


def cache_key(version: str, world: str, route: str, body: Mapping[str, Any], owner: str) -> str:
    """Everything that decides a result, hashed: the version, the world, the kind and the body in canonical JSON;
    and whose it is (the token's name).

    A token reuses only its own runs: shared across tokens, one tenant could send another's request first (a
    public corpus policy, a lesson's solution) and have its own run, made beside its own load, answer the
    other's; and a cached answer would tell it that someone sent that exact body."""
    canonical = json.dumps([version, world, route, body, owner], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def _envelope_ok(result: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, "result": result}


def _envelope_error(code: str, message: str) -> dict[str, Any]:
    return {"ok": False, "error": {"code": code, "message": message}}


def _cacheable(result: dict[str, Any]) -> bool:
    """A broken run is never reused: a probe judged ``error``, a grade that could not grade, an attack not judged."""
    if any(isinstance(p, dict) and p.get("outcome") == "error" for p in result.get("probes", ()) or ()):
        return False
    if result.get("could_not_grade"):
        return False
    return not ("captured" in result and result["captured"] is None)


def perform(route: str, body: dict[str, Any], key: str, prefix: str) -> dict[str, Any]:
    """Run one job on a worker: the kind at ``route`` on ``body``; its result is cached under ``key``.

    Returns the envelope ``{"ok": true, "result"}`` or ``{"ok": false, "error": {"code", "message"}}``:
    a bad body (``invalid``), no engine (``unavailable``), a run that failed (``run_failed``)."""
    from rq import get_current_job

    started = time.monotonic()
    kind: Optional[Kind] = KINDS.get(route)
    if kind is None:
        envelope = _envelope_error("invalid", f"no kind {route!r} on this worker")
    elif not isinstance(body, dict):
        envelope = _envelope_error("invalid", "$: the body must be a JSON object")
    else:
        try:
            envelope = _envelope_ok(kind.run(body))
        except ServiceError as exc:
            envelope = _envelope_error(exc.code, exc.message)
        except BackendError as exc:
            envelope = _envelope_error("unavailable", one_line(exc))
        except SandboxLabError as exc:
            envelope = _envelope_error("run_failed", one_line(exc))
    job = get_current_job()
    if job is not None:
        try:
            conn = job.connection
            if envelope["ok"] and _cacheable(envelope["result"]):
                conn.set(f"{prefix}cache:{key}", json.dumps(envelope["result"]), ex=CACHE_SECONDS)
            outcome = "finished" if envelope["ok"] else envelope["error"]["code"]
            record_run(conn, prefix, kind.name if kind else route, outcome, time.monotonic() - started)
        except (RedisConnectionError, RedisTimeoutError) as exc:
            # the cache, the counters and the records are extras: a run finished while Redis was away still returns its
            # result (the worker stores it once Redis is back) rather than failing and being run again
            _log.warning("job %s: result not cached, counted or recorded (Redis unreachable: %s)", job.id, exc)
    return envelope


@dataclass(frozen=True)
class _Record:
    """What the API keeps about a job beside RQ's: whose it is, its kind, and a cached result."""

    token: str
    kind: str
    cached: bool
    result: Optional[dict[str, Any]]

    @staticmethod
    def parse(raw: bytes | str) -> "_Record":
        data = json.loads(raw)
        if not isinstance(data, dict) or set(data) != {"token", "kind", "cached", "result"}:
            raise ValueError("not a job record")
        if not (isinstance(data["token"], str) and isinstance(data["kind"], str) and isinstance(data["cached"], bool)
                and (data["result"] is None or isinstance(data["result"], dict))):
            raise ValueError("a job record's field has the wrong type")
        return _Record(data["token"], data["kind"], data["cached"], data["result"])


@dataclass(frozen=True)
class WorkerCensus:
    """The queue's workers, counted from their heartbeats (``JobStore.census``)."""

    registered: int
    live: int
    engines: int  # live workers whose Docker engine answers
    engine_problems: tuple[str, ...]

    def unready(self) -> Optional[str]:
        """Why no job can be taken now, or ``None`` when one can."""
        if self.live == 0:
            stale = f" ({self.registered} registered, none has beaten within {LIVE_SECONDS} s)" if self.registered else ""
            return f"no worker is serving this service's queue{stale}"
        if self.engines == 0:
            return f"no worker's Docker engine answers ({'; '.join(self.engine_problems)[:300]})"
        return None

    def to_json(self) -> dict[str, int]:
        return {"registered": self.registered, "live": self.live, "engines": self.engines}


class JobStore:
    """One service's jobs: admit, submit and read them. Every key under ``settings.prefix``."""

    def __init__(self, settings: ServiceSettings, conn: Redis, kinds: Optional[dict[str, Kind]] = None, *,
                 require_workers: bool = True) -> None:
        self.settings = settings
        self.require_workers = require_workers  # no worker listening: a 503, so the client predicts instead of waiting
        self.conn = conn
        self.kinds = KINDS if kinds is None else kinds
        self.queue = Queue(settings.queue_name, connection=conn, serializer=JSONSerializer)
        self._world = world_hash()
        self._prefix = settings.prefix

    # --- admission ---------------------------------------------------------------------------

    def admit_rate(self, token: Token, now: Optional[float] = None) -> None:
        """Count one request against ``token``'s runs a minute; over it, a 429 ``rate_limited`` naming the limit."""
        now = time.time() if now is None else now
        minute = int(now // 60)
        key = f"{self._prefix}rate:{token.name}:{minute}"
        with self.conn.pipeline() as pipe:
            pipe.incr(key)
            pipe.expire(key, 120)
            count = int(pipe.execute()[0])
        if count > token.rate:
            wait = max(1, int(60 - now % 60))
            raise ServiceError(429, "rate_limited", f"token {token.name!r} may start {token.rate} runs a minute; "
                               f"try again in {wait} s", limit=f"{token.rate}/min")

    def _active(self, token: Token) -> str:
        return f"{self._prefix}active:{token.name}"

    def _hold(self, token: Token, job_id: str) -> None:
        """Take one of ``token``'s concurrent-job slots for ``job_id``; every slot taken, a 429 ``too_many_jobs``."""
        key = self._active(token)
        for raw in self.conn.smembers(key):  # release the slots of jobs that ended (or whose record is gone)
            other = raw.decode("utf-8") if isinstance(raw, bytes) else raw
            if self._ended(other):
                self.conn.srem(key, other)
        self.conn.sadd(key, job_id)
        self.conn.expire(key, RESULT_SECONDS)
        if int(self.conn.scard(key)) > token.jobs:  # add first, then count: two racing requests cannot both pass
            self.conn.srem(key, job_id)
            raise ServiceError(429, "too_many_jobs", f"token {token.name!r} may have {token.jobs} jobs queued or "
                               "running at once; wait for one to finish", limit=f"{token.jobs} jobs")

    def _ended(self, job_id: str) -> bool:
        try:
            status = Job.fetch(job_id, connection=self.conn, serializer=JSONSerializer).get_status()
        except NoSuchJobError:
            return True
        return status not in _WAITING and status != JobStatus.STARTED

    # --- submitting ----------------------------------------------------------------------------

    def submit(self, token: Token, route: str, body: dict[str, Any]) -> dict[str, Any]:
        """Queue a checked ``body`` for the kind at ``route`` (or answer from the cache); the contract's 202 body."""
        kind = self.kinds[route]
        key = cache_key(self.settings.version, self._world, route, body, token.name)
        job_id = uuid.uuid4().hex
        cached = self.conn.get(f"{self._prefix}cache:{key}")
        result: Optional[dict[str, Any]] = None
        if cached is not None:
            try:
                parsed = json.loads(cached)
                result = parsed if isinstance(parsed, dict) else None
            except ValueError:
                result = None  # an unreadable cache entry is no answer: run it again
        if result is None and self.require_workers:
            why = self.census().unready()
            if why is not None:  # at once: a job nobody will run would keep the client waiting for its deadline
                raise ServiceError(503, "unavailable", f"{why}; try again later")
        record = {"token": token.name, "kind": kind.name, "cached": result is not None, "result": result}
        self.conn.set(f"{self._prefix}job:{job_id}", json.dumps(record), ex=RESULT_SECONDS)
        if result is None:
            self._hold(token, job_id)
            try:
                self.queue.enqueue(
                    "grader.hosted.jobs.perform", route, body, key, self._prefix, job_id=job_id,
                    retry=Retry(max=1),  # a worker lost mid-job: once more on another, then failed (worker_lost)
                    job_timeout=JOB_TIMEOUT, result_ttl=RESULT_SECONDS, failure_ttl=RESULT_SECONDS,
                )
            except BaseException:
                self.conn.srem(self._active(token), job_id)
                self.conn.delete(f"{self._prefix}job:{job_id}")
                raise
        return {"job": job_id, "status": "finished" if result is not None else "queued", "url": f"/v1/jobs/{job_id}"}

    def depth(self) -> int:
        return int(self.queue.count)

    def workers(self) -> int:
        """How many workers are live (a fresh heartbeat), not how many are registered."""
        return self.census().live

    def census(self, now: Optional[datetime] = None) -> "WorkerCensus":
        """The queue's workers as their heartbeats tell: registered, live (a beat within ``LIVE_SECONDS``), and
        live with an engine that answers (a worker that does not report its engine counts as answering)."""
        from rq.utils import utcparse
        from rq.worker_registration import get_keys

        now = datetime.now(timezone.utc) if now is None else now
        keys = sorted(get_keys(queue=self.queue))
        with self.conn.pipeline() as pipe:
            for key in keys:
                pipe.hmget(key, "last_heartbeat", ENGINE_FIELD)
            rows = pipe.execute() if keys else []
        live = 0
        engines: list[str] = []
        for beat, engine in rows:
            if beat is None:
                continue  # registered, its hash expired: dead
            at = utcparse(beat.decode() if isinstance(beat, bytes) else beat).replace(tzinfo=timezone.utc)
            if (now - at).total_seconds() > LIVE_SECONDS:
                continue
            live += 1
            engines.append("ok" if engine is None else engine.decode() if isinstance(engine, bytes) else engine)
        problems = tuple(sorted({e.removeprefix("down: ") for e in engines if e != "ok"}))
        return WorkerCensus(registered=len(keys), live=live, engines=sum(e == "ok" for e in engines),
                            engine_problems=problems)

    # --- reading -------------------------------------------------------------------------------

    def status(self, token: Token, job_id: str) -> dict[str, Any]:
        """The contract's job body; an unknown id, or another token's job, is the same 404."""
        raw = self.conn.get(f"{self._prefix}job:{job_id}") if len(job_id) <= 64 else None
        missing = ServiceError(404, "not_found", f"no job {job_id[:64]!r} for this token")
        if raw is None:
            raise missing
        try:
            record = _Record.parse(raw)
        except ValueError as exc:
            return self._answer(job_id, "unknown", "failed", None, ("unreadable", f"the job's record cannot be read ({exc})"))
        if record.token != token.name:
            raise missing
        if record.cached:
            return self._answer(job_id, record.kind, "finished", record.result, None, cached=True)
        return self._from_queue(job_id, record.kind)

    def _answer(self, job_id: str, kind: str, status: str, result: Optional[dict[str, Any]],
                error: Optional[tuple[str, str]], cached: bool = False) -> dict[str, Any]:
        return {"job": job_id, "status": status, "kind": kind, "result": result,
                "error": None if error is None else {"code": error[0], "message": error[1]},
                "cached": cached, "ran_at": self.settings.name}

    def _from_queue(self, job_id: str, kind: str) -> dict[str, Any]:
        try:
            job = Job.fetch(job_id, connection=self.conn, serializer=JSONSerializer)
        except NoSuchJobError:
            return self._answer(job_id, kind, "failed", None, ("lost", "the queue has no record of this job any more "
                                                                "(its store was reset); submit it again"))
        status = job.get_status()
        if status == JobStatus.STARTED:
            # a worker that died leaves its job started until someone looks: expired entries are retried or failed
            StartedJobRegistry(queue=self.queue).cleanup()
            status = job.get_status()
        if status in _WAITING:
            return self._answer(job_id, kind, "queued", None, None)
        if status == JobStatus.STARTED:
            return self._answer(job_id, kind, "started", None, None)
        if status == JobStatus.FINISHED:
            return self._finished(job_id, kind, job)
        if status == JobStatus.FAILED:
            latest = job.latest_result()
            text = (latest.exc_string or "") if latest is not None else ""
            if "AbandonedJobError" in text:
                return self._answer(job_id, kind, "failed", None, ("worker_lost", "the worker running this job was lost, "
                                                                    "and so was its retry; submit it again"))
            if "JobTimeoutException" in text:
                return self._answer(job_id, kind, "failed", None, ("timeout", f"the run did not end within {JOB_TIMEOUT} s"))
            return self._answer(job_id, kind, "failed", None, ("internal", "the worker failed on this job (a bug in Sandbox "
                                                                "Lab; the operator's worker log has the traceback)"))
        return self._answer(job_id, kind, "failed", None, ("canceled", f"the job was {status.value}"))

    def _finished(self, job_id: str, kind: str, job: Job) -> dict[str, Any]:
        envelope = job.return_value()
        if isinstance(envelope, dict) and envelope.get("ok") is True and isinstance(envelope.get("result"), dict) \
                and set(envelope) == {"ok", "result"}:
            return self._answer(job_id, kind, "finished", envelope["result"], None)
        if isinstance(envelope, dict) and envelope.get("ok") is False and set(envelope) == {"ok", "error"}:
            err = envelope["error"]
            if isinstance(err, dict) and isinstance(err.get("code"), str) and isinstance(err.get("message"), str):
                return self._answer(job_id, kind, "failed", None, (err["code"], err["message"]))
        return self._answer(job_id, kind, "failed", None, ("unreadable", "the job's result cannot be read"))
