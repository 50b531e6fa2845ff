"""A run-service worker for the bench only: the service's own worker, timed inside each job; or a warm prototype of it.

``bench/service_cost.py`` starts Redis, the API and one of these in place of
``sandbox-lab worker``, and reads back the JSON line each job writes to
``$BENCH_MARKS``: where the time inside the job went.

* ``fork``: the service's worker exactly (``grader.hosted.worker``'s RQ
  ``Worker``, a work horse forked per job, ``kinds.worker_backend()`` per job:
  the Docker modules imported, an engine client, the images checked, the
  machine hub's internet adopted and a proxy claimed, then closed). Only clock
  reads are added.
* ``warm``: the prototype of the change this bench measures for issue 40: RQ's
  ``SimpleWorker`` (each job in the worker process, no fork) and one backend
  per worker kept across jobs, with its own internet and reused proxy pool (as
  ``grade-batch`` does). It fails closed as the service must: a job whose run
  raises (a backend error, a bug, RQ's job timeout, which ``SimpleWorker``
  delivers by SIGALRM in this same process) closes that backend and the next
  job builds a new one; the job itself gets its error as before
  (``jobs.perform`` is unchanged). This is a bench stand-in, not the service's
  worker: ``grader/hosted/worker.py`` and ``kinds.py`` are unchanged.

    BENCH_MARKS=marks.jsonl python bench/service_worker.py fork|warm NAME
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Callable

MODE, NAME = sys.argv[1], sys.argv[2]
MARKS = os.environ["BENCH_MARKS"]
T_IMPORT = time.perf_counter()

from rq import Queue, SimpleWorker, Worker  # noqa: E402
from rq.serializers import JSONSerializer  # noqa: E402

from grader import backends  # noqa: E402
from grader.hosted import jobs, kinds  # noqa: E402
from grader.hosted.settings import HEARTBEAT_SECONDS, service_settings  # noqa: E402
from grader.hosted.worker import MAINTENANCE_SECONDS, MONITOR_SECONDS  # noqa: E402

marks: dict[str, Any] = {}
_wrapped: set[str] = set()


def _timed(owner: Any, attr: str, label: str) -> None:
    key = f"{id(owner)}.{attr}"
    if key in _wrapped:
        return
    _wrapped.add(key)
    f: Callable[..., Any] = getattr(owner, attr)

    def wrapper(*a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            marks[label] = marks.get(label, 0.0) + time.perf_counter() - t0

    setattr(owner, attr, wrapper)


def _wrap_docker() -> None:
    """Clock wrappers on the Docker backend's steps (importing its modules, timed, when this process has not yet)."""
    t0 = time.perf_counter()
    import grader.backends.docker.backend as d
    import grader.backends.docker.hub as h

    marks["imports (docker backend)"] = marks.get("imports (docker backend)", 0.0) + time.perf_counter() - t0
    _timed(d.DockerBackend, "from_env", "engine + images + internet")
    _timed(h.Hub, "internet", "hub internet (adopt)")
    _timed(h.Hub, "take", "hub proxy (claim)")
    _timed(d.DockerBackend, "close", "backend close")
    if "DockerBackend.run" not in _wrapped:
        _wrapped.add("DockerBackend.run")
        run = d.DockerBackend.run

        def keep(self: Any, plan: Any) -> Any:
            t1 = time.perf_counter()
            try:
                result = run(self, plan)
            finally:
                marks["run (whole)"] = time.perf_counter() - t1
            marks["timings"] = dict(result.timings)
            return result

        d.DockerBackend.run = keep  # type: ignore[method-assign]


_kept: dict[bool, Any] = {}


class _Kept:
    """A kept backend as ``with`` uses it: closed and dropped only when the job's block raised (fail closed)."""

    def __init__(self, key: bool, backend: Any) -> None:
        self.key, self.backend = key, backend

    def __enter__(self) -> Any:
        return self.backend

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if exc is not None:  # the run raised (an engine error, a bug, the job's timeout): a new backend for the next job
            _kept.pop(self.key, None)
            try:
                self.backend.close()
            finally:
                marks["backend rebuilt"] = 1.0


def _warm_backend(*, tenant_code: bool = False) -> Any:
    backend = _kept.get(tenant_code)
    if backend is None:
        runtime = None
        if tenant_code:
            from grader.backends.docker.runtimes import code_runtime_from_env

            runtime = code_runtime_from_env(os.environ)
        backend = _kept[tenant_code] = backends.get("docker", shared=False, runtime=runtime)
    return _Kept(tenant_code, backend)


_perform = jobs.perform


def _timed_perform(*args: Any, **kwargs: Any) -> Any:  # jobs.perform's arguments, whatever they are this week
    from rq import get_current_job

    marks.clear()
    marks["perform_entry"] = time.time()
    marks["pid"] = os.getpid()
    t0 = time.perf_counter()
    _wrap_docker()  # in a forked horse: the Docker modules' import, which the job pays for in kinds.worker_backend anyway
    try:
        return _perform(*args, **kwargs)
    finally:
        marks["perform (whole)"] = time.perf_counter() - t0
        marks["perform_exit"] = time.time()
        job = get_current_job()
        marks["job"] = job.id if job is not None else None
        with open(MARKS, "a", encoding="utf-8") as out:
            out.write(json.dumps(marks) + "\n")


jobs.perform = _timed_perform  # RQ resolves "grader.hosted.jobs.perform" at each job
if MODE == "warm":
    kinds.worker_backend = _warm_backend
marks_import = time.perf_counter() - T_IMPORT

settings = service_settings()
conn = jobs.open_redis(settings)
queue = Queue(settings.queue_name, connection=conn, serializer=JSONSerializer)
cls = SimpleWorker if MODE == "warm" else Worker
worker = cls([queue], connection=conn, serializer=JSONSerializer, name=NAME,
             job_monitoring_interval=MONITOR_SECONDS, maintenance_interval=MAINTENANCE_SECONDS,
             # an idle worker beats once per dequeue timeout (worker_ttl - 15 s): often enough for the API's liveness
             worker_ttl=15 + HEARTBEAT_SECONDS)
sys.stderr.write(f"bench worker {MODE} {NAME}: imports {marks_import:.3f} s\n")
worker.work(with_scheduler=False)
