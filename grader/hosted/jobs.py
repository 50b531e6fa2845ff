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
kind, and for a cached answer the cache key it points at), ``cache:<hash>`` (a token's own runs only),
``rate:<token>:<minute>``, ``active:<token>`` (a sorted set: the token's job slots, each scored by the
time it lapses), ``levels:<token id>`` (``progress_store``), ``metrics:*``.

Bounded, so no token can grow Redis without end (issue 39): a cached answer is
stored once and referenced, never copied into the job's record (ten re-POSTs of
a 4.5 MB result added 52 MB before); its record lives only as long as the entry
it points at. Cached answers take no job slot: each costs one small record,
counted by the token's rate. The slots are taken by one Lua script, so two API
processes on one Redis cannot both take a token's last one. A Redis at its
``maxmemory`` (``noeviction``: scripts/serve, deploy/k8s/redis.yaml) refuses the
write, and the request is a 503 ``store_full`` naming the limit.
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
from redis.exceptions import OutOfMemoryError
from redis.exceptions import ConnectionError as RedisConnectionError, TimeoutError as RedisTimeoutError
from rq import Callback, Queue, Retry
from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus
from rq.registry import StartedJobRegistry
from rq.serializers import JSONSerializer
from rq.timeouts import TimerDeathPenalty

from grader.core.errors import BackendError, SandboxLabError
from grader.plumbing.terminal import one_line
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


def perform(route: str, body: dict[str, Any], key: str, prefix: str, slot: Optional[str] = None,
            owner: Optional[str] = None) -> dict[str, Any]:
    """Run one job on a worker: the kind at ``route`` on ``body``; its result is cached under ``key``.

    ``slot`` names the token's slot set (``active:<token>``): the job's slot is freed when it ends. ``owner``
    is the token's id: a judged attack is recorded as the service's own attempt, and capture
    (``progress_store.record_attempt``), the only way a progress record kept here says "captured".

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
            if owner is not None and kind is not None and kind.name == "attack" and envelope["ok"] \
                    and isinstance(envelope["result"].get("captured"), bool):
                _record_attempt(conn, prefix, owner, body, envelope["result"]["captured"])
            if slot is not None:
                conn.zrem(slot, job.id)  # the run ended: its slot is free (a lost worker's is freed by _release_ended)
            outcome = "finished" if envelope["ok"] else envelope["error"]["code"]
            record_run(conn, prefix, kind.name if kind else route, outcome, time.monotonic() - started)
        except (RedisConnectionError, RedisTimeoutError) as exc:
            # the cache, the counters and the records are extras: a run finished while Redis was away still returns its
            # result (the worker stores it once Redis is back) rather than failing and being run again
            _log.warning("job %s: result not cached, counted or recorded (Redis unreachable: %s)", job.id, exc)
    return envelope


def _record_attempt(conn: Redis, prefix: str, owner: str, body: dict[str, Any], captured: bool) -> None:
    """The service's own record of a judged attack this token ran here: one attempt at its level, and a capture."""
    from grader.course.ladder import level
    from grader.hosted.progress_store import record_attempt

    record_attempt(conn, prefix, owner, level(body["level"]).item_id, captured=captured, when=time.time())


# Take one of a token's job slots, atomically (Redis runs one script at a time, whichever API process sent it):
# lapsed slots are dropped, then the slot is taken only while fewer than the cap are held.
# KEYS[1] the slot set; ARGV: now, the cap, the job id, its lapse time, the set's TTL in seconds.
_TAKE_SLOT = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[4], ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""
# A slot lapses after this long whatever happens. The worker frees it when the job ends, and _release_ended frees
# an ended job's (a lost worker's); this bounds only a slot every releaser lost (a queue reset). A job may wait in
# the queue behind others, so the bound is the result's lifetime, not the run's timeout.
_SLOT_SECONDS = RESULT_SECONDS


@dataclass(frozen=True)
class _Record:
    """What the API keeps about a job beside RQ's: whose it is, its kind, and for a cached answer the cache key.

    A cached answer's result is never copied here: ``cache`` names the entry, read when the job is read."""

    token: str
    kind: str
    cached: bool
    cache: Optional[str]

    @staticmethod
    def parse(raw: bytes | str) -> "_Record":
        data = json.loads(raw)
        if not isinstance(data, dict) or set(data) != {"token", "kind", "cached", "cache"}:
            raise ValueError("not a job record")
        if not (isinstance(data["token"], str) and isinstance(data["kind"], str) and isinstance(data["cached"], bool)
                and (data["cache"] is None or isinstance(data["cache"], str)) and data["cached"] == (data["cache"] is not None)):
            raise ValueError("a job record's field has the wrong type")
        return _Record(data["token"], data["kind"], data["cached"], data["cache"])


def _said_lost(job: Job, connection: Any, kind: Any, value: Any, traceback: Any) -> None:
    """RQ's failure callback: when a job is found abandoned (its worker stopped beating mid-run), say so in the
    log of whoever found it (a worker's maintenance or the API's poll), and whether it runs a second time."""
    if getattr(kind, "__name__", "") != "AbandonedJobError":
        return
    if job.retries_left:
        _log.warning("job %s: its worker %s was lost mid-run; it runs once more, and its answer is that second run's",
                     job.id, job.worker_name)
    else:
        _log.warning("job %s: its worker %s was lost mid-run, and so was its retry; it fails as worker_lost",
                     job.id, job.worker_name)


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
        self._take_slot = conn.register_script(_TAKE_SLOT)

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

    def _hold(self, token: Token, job_id: str, now: Optional[float] = None) -> None:
        """Take one of ``token``'s concurrent-job slots for ``job_id``; every slot taken, a 429 ``too_many_jobs``.

        The count and the take are one Lua script, so two API processes cannot both take the last slot (issue 39:
        one process's sweep freed a slot another had just taken and not yet queued, and 2 jobs ran on a cap of 1)."""
        key = self._active(token)
        now = time.time() if now is None else now
        self._release_ended(key)
        if not int(self._take_slot(keys=[key], args=[now, token.jobs, job_id, now + _SLOT_SECONDS, _SLOT_SECONDS])):
            raise ServiceError(429, "too_many_jobs", f"token {token.name!r} may have {token.jobs} jobs queued or "
                               "running at once; wait for one to finish", limit=f"{token.jobs} jobs")

    def _release_ended(self, key: str) -> None:
        """Free the slots of jobs RQ calls ended (a worker lost before it could free its own).

        Only a job RQ knows: a slot whose job is not queued yet (taken a moment ago, here or in another API
        process) is never freed here; a slot whose job record is gone lapses instead."""
        for raw in self.conn.zrange(key, 0, -1):
            other = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
            try:
                status = Job.fetch(other, connection=self.conn, serializer=JSONSerializer).get_status()
            except NoSuchJobError:
                continue
            if status not in _WAITING and status != JobStatus.STARTED:
                self.conn.zrem(key, other)

    # --- submitting ----------------------------------------------------------------------------

    def submit(self, token: Token, route: str, body: dict[str, Any]) -> dict[str, Any]:
        """Queue a checked ``body`` for the kind at ``route`` (or answer from the cache); the contract's 202 body."""
        try:
            return self._submit(token, route, body)
        except OutOfMemoryError:
            raise ServiceError(503, "store_full", "the service's store is full (Redis at its maxmemory), so nothing "
                               "was queued; try again later, and tell the operator if it lasts",
                               limit="redis maxmemory") from None

    def _submit(self, token: Token, route: str, body: dict[str, Any]) -> dict[str, Any]:
        kind = self.kinds[route]
        key = cache_key(self.settings.version, self._world, route, body, token.name)
        job_id = uuid.uuid4().hex
        # a cached answer is referenced, never copied: the job's record names the entry and expires with it
        left = int(self.conn.ttl(f"{self._prefix}cache:{key}"))
        result: Optional[str] = key if left > 0 else None
        if result is None and self.require_workers:
            why = self.census().unready()
            if why is not None:  # at once: a job nobody will run would keep the client waiting for its deadline
                raise ServiceError(503, "unavailable", f"{why}; try again later")
        record = {"token": token.name, "kind": kind.name, "cached": result is not None, "cache": result}
        self.conn.set(f"{self._prefix}job:{job_id}", json.dumps(record), ex=left if result is not None else RESULT_SECONDS)
        if result is None:
            try:
                self._hold(token, job_id)
            except ServiceError:
                self.conn.delete(f"{self._prefix}job:{job_id}")
                raise
            try:
                self.queue.enqueue(
                    "grader.hosted.jobs.perform", route, body, key, self._prefix, self._active(token), token.id,
                    job_id=job_id,
                    retry=Retry(max=1),  # a worker lost mid-job: once more on another, then failed (worker_lost)
                    on_failure=Callback(_said_lost),  # a second run is never silent
                    job_timeout=JOB_TIMEOUT, result_ttl=RESULT_SECONDS, failure_ttl=RESULT_SECONDS,
                )
            except BaseException:
                self.conn.zrem(self._active(token), job_id)
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
        if record.cache is not None:
            return self._from_cache(job_id, record.kind, record.cache)
        answer = self._from_queue(job_id, record.kind)
        if answer["status"] in ("finished", "failed"):  # ended, or lost with the queue: its slot is free either way
            self.conn.zrem(self._active(token), job_id)
        return answer

    def _from_cache(self, job_id: str, kind: str, key: str) -> dict[str, Any]:
        raw = self.conn.get(f"{self._prefix}cache:{key}")
        if raw is None:  # the record expires with the entry; read in between, it says so
            return self._answer(job_id, kind, "failed", None, ("expired", f"the cached result this job answered with "
                                                                f"expired ({CACHE_SECONDS} s after its run); submit it again"),
                                cached=True)
        try:
            result = json.loads(raw)
        except ValueError:
            result = None
        if not isinstance(result, dict):
            return self._answer(job_id, kind, "failed", None, ("unreadable", "the cached result cannot be read; "
                                                                "submit it again"), cached=True)
        return self._answer(job_id, kind, "finished", result, None, cached=True)

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
            # TimerDeathPenalty: the cleanup runs the job's failure callback (_said_lost) under a time limit, and
            # the default's SIGALRM works only in the main thread, never in the API's worker threads
            StartedJobRegistry(queue=self.queue, death_penalty_class=TimerDeathPenalty).cleanup()
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
