"""A worker of the run service: serves this service's queue on the local Docker engine (``DOCKER_HOST`` honoured), through Redis outages.

Capacity grows by starting workers, on this machine or on others that reach
the same Redis; each runs one job at a time, in a forked work horse (RQ's
``Worker``), so a run that crashes or leaks ends with its horse.

What keeps it serving (issue 39):

- **Heartbeats every ``HEARTBEAT_SECONDS``, idle or busy.** RQ's idle worker
  blocks on the queue ``worker_ttl - 15`` s between beats (405 s by default):
  ``worker_ttl`` is set so it beats as often as a busy one, and the API counts a
  worker live only while its beat is fresh (``jobs.JobStore.census``). Each beat
  also writes whether the worker's Docker engine answers (``jobs.ENGINE_FIELD``,
  checked every ``ENGINE_CHECK_SECONDS``), and touches the file
  ``$SANDBOX_LAB_WORKER_ALIVE`` names, which a liveness probe reads.
- **A Redis outage is waited out, not died of.** RQ's own loop retries only
  while idle: a beat that fails while a horse runs raised out of the work loop
  and the worker quit ("found an unhandled exception"), leaving its queue to
  nobody. Here a failed beat is logged and the run goes on; the horse retries
  storing its result for ``STORE_GRACE_SECONDS``; and a work loop that ends on
  an error is started again, with backoff, in the same process.
- **A job whose end cannot be recorded is never lost**: it stays in RQ's
  started-job registry, and once its heartbeat lapses the registry's cleanup
  runs it once more on a live worker (``Retry(max=1)``, logged as a retry) or
  fails it as ``worker_lost``.

Process death (SIGKILL, the OOM killer) is the supervisor's: ``scripts/supervise.py``
under ``make serve``, the kubelet in deploy/k8s.

Imports the jobs (the queue's name and serializer), the settings and the engine adapter (one ping).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar, Union

import redis
from rq import Queue, SimpleWorker, Worker
from rq.exceptions import StopRequested
from rq.worker import BaseWorker, WorkerStatus
from rq.serializers import JSONSerializer
from rq.worker_registration import unregister

from grader.hosted import kinds
from grader.hosted.jobs import ENGINE_FIELD, open_redis
from grader.hosted.kept import IDLE_SECONDS, KeptBackends
from grader.hosted.settings import HEARTBEAT_SECONDS, ServiceSettings

__all__ = ["ALIVE_ENV", "ALIVE_WITHIN_SECONDS", "ENGINE_CHECK_SECONDS", "MAINTENANCE_SECONDS", "MODES", "MODE_ENV",
           "MONITOR_SECONDS", "STORE_GRACE_SECONDS", "alive", "serve_jobs", "worker_mode"]

MONITOR_SECONDS = HEARTBEAT_SECONDS  # a busy worker's beat; RQ adds 60 s before it counts the job abandoned
MAINTENANCE_SECONDS = 15  # how often a worker looks for abandoned jobs (RQ's default, 10 min, leaves them too long)
ENGINE_CHECK_SECONDS = 15  # a ping of the engine at most this often: cheap, and a beat never waits long on it
STORE_GRACE_SECONDS = 120  # a horse keeps trying to store a finished run's result this long through an outage
ALIVE_ENV = "SANDBOX_LAB_WORKER_ALIVE"
MODE_ENV = "SANDBOX_LAB_WORKER_MODE"
MODES = ("kept", "fork")
ALIVE_WITHIN_SECONDS = 60  # a worker whose loop has not turned for this long is hung: its liveness probe fails
_BACKOFF_MAX_SECONDS = 10.0  # a Redis that comes back is used within this; RQ's own cap (60 s) idles a worker too long

_REDIS_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
_log = logging.getLogger("sandbox_lab.worker")
_T = TypeVar("_T")


def _engine_state() -> str:
    """``ok`` when the Docker engine this worker runs on answers a ping; ``down: <why>`` otherwise."""
    try:
        from grader.backends.docker.engine import open_engine

        engine = open_engine(timeout=3)
        try:
            engine.ping()
        finally:
            engine.close()  # nothing is kept open across the fork of a work horse
    except StopRequested:
        raise  # SIGTERM arrived during the ping: RQ's stop, not the engine's state
    except Exception as exc:  # noqa: BLE001 - any failure here means "this worker cannot run a job now"
        return f"down: {(str(exc).splitlines() or [type(exc).__name__])[0][:200]}"
    return "ok"


def _touch(path: Optional[str]) -> None:
    if path:
        try:
            Path(path).touch()
        except OSError as exc:  # a liveness file that cannot be written fails the probe, which says so
            _log.warning("cannot touch the liveness file %s: %s", path, exc)


def alive(path: str, within: float = ALIVE_WITHIN_SECONDS, now: Optional[float] = None) -> bool:
    """Has the worker that touches ``path`` turned its loop within ``within`` seconds? (A liveness probe's question.)"""
    try:
        age = (time.time() if now is None else now) - os.stat(path).st_mtime
    except OSError:
        return False
    return age <= within


def _persist(what: str, step: Callable[[], _T], grace: float = STORE_GRACE_SECONDS) -> _T:
    """``step()``, tried again through a Redis outage for up to ``grace`` seconds; past it, the error."""
    deadline = time.monotonic() + grace
    delay = 0.5
    while True:
        try:
            return step()
        except _REDIS_DOWN as exc:
            if time.monotonic() + delay > deadline:
                raise
            _log.warning("%s: Redis unreachable (%s); trying again in %.1f s", what, exc, delay)
            time.sleep(delay)
            delay = min(delay * 2, _BACKOFF_MAX_SECONDS)


class _Supervision(BaseWorker):
    """What makes an RQ worker outlive a Redis outage while it holds a job (the module docstring says how); mixed
    into the kept worker and the forking one."""

    max_connection_wait_time = _BACKOFF_MAX_SECONDS

    def __init__(self, *args: Any, alive_file: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._alive_file = alive_file
        self.asked_to_stop = False
        self._engine = "ok"
        self._engine_checked = float("-inf")

    def request_stop(self, signum: Any, frame: Any) -> None:
        self.asked_to_stop = True  # RQ sets _stop_requested only when busy: idle, it just leaves its loop
        super().request_stop(signum, frame)  # type: ignore[no-untyped-call]

    def heartbeat(self, timeout: Optional[int] = None, pipeline: Any = None) -> None:
        _touch(self._alive_file)
        if not self.is_horse and time.monotonic() - self._engine_checked >= ENGINE_CHECK_SECONDS:
            self._engine, self._engine_checked = _engine_state(), time.monotonic()
        try:
            super().heartbeat(timeout, pipeline)
            (pipeline if pipeline is not None else self.connection).hset(self.key, ENGINE_FIELD, self._engine)
        except _REDIS_DOWN as exc:
            # the beat is missed, and so the API stops counting this worker live: the truth while Redis is away
            _log.warning("worker %s: heartbeat not written (Redis unreachable: %s)", self.name, exc)

    def maintain_heartbeats(self, job: Any, execution: Any) -> None:
        try:
            super().maintain_heartbeats(job, execution)
        except _REDIS_DOWN as exc:
            _log.warning("worker %s: job %s keeps running; its heartbeat is not written (Redis unreachable: %s)",
                         self.name, job.id, exc)

    def _finalize_success(self, job: Any, queue: Any, execution: Any, return_value: Any) -> None:
        # in the horse: a run finished while Redis was away keeps its result until Redis is back (within the grace)
        _persist(f"job {job.id}: storing its result",
                 lambda: super(_Supervision, self)._finalize_success(job, queue, execution, return_value))

    def _finalize_failure(self, job: Any, queue: Any, execution: Any, exc_info: Any) -> None:
        _persist(f"job {job.id}: storing its failure",
                 lambda: super(_Supervision, self)._finalize_failure(job, queue, execution, exc_info))

    def execute_job(self, job: Any, queue: Any) -> None:
        try:
            super().execute_job(job, queue)
        except _REDIS_DOWN as exc:
            # the horse's end could not be recorded: the job stays in the started-job registry, whose cleanup
            # (on any worker, about a minute after its last heartbeat) runs it once more or fails it as worker_lost
            _log.error("worker %s: the end of job %s could not be recorded (Redis unreachable: %s); the queue "
                       "will retry it once or report it worker_lost", self.name, job.id, exc)

    def handle_job_failure(self, job: Any, queue: Any, started_job_registry: Any = None, exc_string: str = "",
                           execution: Any = None) -> None:
        if job.should_retry and "Work-horse terminated unexpectedly" in exc_string:
            _log.warning("worker %s: job %s lost its work horse (%s); running it once more", self.name, job.id,
                         exc_string.strip())
        super().handle_job_failure(job, queue, started_job_registry, exc_string, execution)


class _SupervisedWorker(_Supervision, Worker):
    """The forking worker (``fork`` mode): each job in a work horse of its own, with a new backend."""


class _BeatingSimpleWorker(SimpleWorker):
    """RQ's ``SimpleWorker`` (each job in this process), beating while a job runs as the forking worker's monitor does:
    the worker's own beat (the API's census) and the job's (RQ's abandoned-job check), every ``MONITOR_SECONDS``,
    from a thread; the job keeps the main thread (RQ's job timeout is a SIGALRM there)."""

    def execute_job(self, job: Any, queue: Any) -> None:
        execution = self.prepare_execution(job)
        stop = threading.Event()
        beat = threading.Thread(target=self._beat_while_running, args=(job, execution, stop), name="job-heartbeat",
                                daemon=True)
        beat.start()
        try:
            self.perform_job(job, queue, execution)
        finally:
            stop.set()
            beat.join(timeout=ENGINE_CHECK_SECONDS)
        self.set_state(WorkerStatus.IDLE)

    def get_heartbeat_ttl(self, job: Any, working_time: float = 0.0) -> int:
        # the forking worker's TTL (a beat's interval + 60 s), not SimpleWorker's (the job's whole timeout + 60 s):
        # this worker beats during the job, so a worker killed mid-job has its job found abandoned a minute later
        return int(BaseWorker.get_heartbeat_ttl(self, job, working_time))

    def _beat_while_running(self, job: Any, execution: Any, stop: threading.Event) -> None:
        while not stop.wait(self.job_monitoring_interval):
            try:
                self.maintain_heartbeats(job, execution)
            except Exception as exc:  # noqa: BLE001 - a beat missed is logged; the job goes on
                _log.warning("worker %s: job %s's heartbeat failed: %s", self.name, job.id, exc)


class _KeptWorker(_Supervision, _BeatingSimpleWorker):
    """The kept worker (``kept`` mode, the default): jobs run in this process, on backends kept between jobs
    (``hosted.kept``), so a run costs what a ``grade-batch`` run costs. An idle worker closes its backends after
    ``kept.IDLE_SECONDS`` (checked at each beat)."""

    def __init__(self, *args: Any, kept: KeptBackends, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kept = kept

    def heartbeat(self, timeout: Optional[int] = None, pipeline: Any = None) -> None:
        super().heartbeat(timeout, pipeline)
        if self.kept.retire_idle():
            _log.info("worker %s: idle for %.0f s; its kept backends are closed", self.name, IDLE_SECONDS)


def _forget(conn: Any, worker: BaseWorker) -> None:
    """Take a worker that ended on an error out of the registry, so a new one may take its name."""
    try:
        with conn.pipeline() as pipe:
            pipe.delete(worker.key)
            unregister(worker, pipe)
            pipe.execute()
    except _REDIS_DOWN:
        pass  # the next attempt's registration finds the old entry and this runs again


def worker_mode(environ: Optional[dict[str, str]] = None) -> str:
    """``kept`` (the default: jobs in this process, on kept backends) or ``fork`` (a work horse and a new backend
    per job), from ``$SANDBOX_LAB_WORKER_MODE``; anything else is refused with the choices named."""
    value = ((os.environ if environ is None else environ).get(MODE_ENV) or "kept").strip().lower()
    if value not in MODES:
        raise ValueError(f"{MODE_ENV}={value!r}: choose {' or '.join(MODES)}")
    return value


def serve_jobs(settings: ServiceSettings, *, name: Optional[str] = None, burst: bool = False,
               mode: Optional[str] = None) -> bool:
    """Serve jobs until stopped (SIGTERM ends the current job first); ``burst``: until the queue is empty.

    A work loop that ends on an error (Redis gone, a bug in a loop) is started again after a backoff of
    1 s doubling to 10 s; a stop request or a burst's end returns. ``mode``: ``worker_mode()``'s, by default.
    In kept mode the backends live across jobs and loops, and are closed when this returns."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    chosen = mode or worker_mode()
    kept = KeptBackends(kinds.new_backend) if chosen == "kept" else None
    kinds.keep_backends(kept)
    try:
        return _serve(settings, name=name, burst=burst, kept=kept)
    finally:
        kinds.keep_backends(None)
        if kept is not None:
            kept.close()  # its internet and proxies are removed with the worker, not left to a sweep


def _serve(settings: ServiceSettings, *, name: Optional[str], burst: bool, kept: Optional[KeptBackends]) -> bool:
    alive_file = os.environ.get(ALIVE_ENV) or None
    worked = False
    delay = 1.0
    while True:
        conn = open_redis(settings)
        queue = Queue(settings.queue_name, connection=conn, serializer=JSONSerializer)
        worker: Optional[Union[_KeptWorker, _SupervisedWorker]] = None
        started = time.monotonic()
        try:
            try:
                # inside the try: RQ's Worker() asks Redis its client's address, so a worker made during an
                # outage raised out of this loop and the process died (a restart by the supervisor, not a wait)
                options: dict[str, Any] = dict(connection=conn, serializer=JSONSerializer, name=name,
                                               job_monitoring_interval=MONITOR_SECONDS,
                                               maintenance_interval=MAINTENANCE_SECONDS,
                                               worker_ttl=HEARTBEAT_SECONDS + 15, alive_file=alive_file)
                worker = (_KeptWorker([queue], kept=kept, **options) if kept is not None
                          else _SupervisedWorker([queue], **options))
                worked = bool(worker.work(burst=burst, with_scheduler=False)) or worked
            except Exception:
                if not isinstance(sys.exc_info()[1], (*_REDIS_DOWN, ValueError, StopRequested)):
                    _log.exception("worker %s: its work loop raised; the process ends (its supervisor restarts it)",
                                   name or "(unnamed)")
                raise
        except _REDIS_DOWN as exc:  # at its making, its birth, or its death's registration
            _log.error("worker %s: Redis unreachable (%s)", name or "(unnamed)", exc)
        except ValueError as exc:  # a name still registered by this worker's previous loop
            _log.error("worker %s: %s", name or "(unnamed)", exc)
        except StopRequested:
            return worked
        if burst or (worker is not None and worker.asked_to_stop):
            return worked
        if worker is not None:
            _forget(conn, worker)
            try:
                worker.unsubscribe()  # type: ignore[no-untyped-call]
            except Exception:  # noqa: BLE001 - its thread is a daemon; the new loop subscribes afresh
                pass
        if time.monotonic() - started > 60:
            delay = 1.0  # it served a while: this is a new fault, not the same one again
        _log.warning("worker %s: its work loop ended; serving again in %.0f s", name or "(unnamed)", delay)
        _touch(alive_file)
        try:
            time.sleep(delay)
        except StopRequested:  # SIGTERM during the backoff: RQ's handler is still installed
            return worked
        delay = min(delay * 2, _BACKOFF_MAX_SECONDS)
