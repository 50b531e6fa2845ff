"""A run-service worker for the bench only: the service's own worker, timed inside each job.

``bench/service_cost.py`` starts Redis, the API and one of these in place of
``sandbox-lab worker``, and reads back the JSON line each job writes to
``$BENCH_MARKS``: where the time inside the job went.

* ``fork``: the service's worker in fork mode (``SANDBOX_LAB_WORKER_MODE=fork``:
  RQ's ``Worker``, a work horse forked per job, ``kinds.worker_backend()`` per job:
  the Docker modules imported, an engine client, the images checked, the
  machine hub's internet adopted and a proxy claimed, then closed).
* ``kept`` (``warm`` is the same): the service's worker as it runs by default
  (``grader.hosted.kept``: each job in the worker process, one backend per kind
  of code kept across jobs, with its own internet and reused proxy pool, as
  ``grade-batch`` does; closed and made again after a job that raised).

Only clock reads are added (``grader.hosted.worker.serve_jobs`` is the service's own loop).

    BENCH_MARKS=marks.jsonl python bench/service_worker.py fork|kept NAME
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

from grader.hosted import jobs, kinds  # noqa: E402
from grader.hosted.settings import service_settings  # noqa: E402
from grader.hosted.worker import serve_jobs  # noqa: E402

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


_perform = jobs.perform


def _timed_perform(*args: Any, **kwargs: Any) -> Any:  # jobs.perform's arguments, whatever they are this week
    from rq import get_current_job

    marks.clear()
    kept = kinds._kept
    closed = kept.closed if kept is not None else 0
    marks["perform_entry"] = time.time()
    marks["pid"] = os.getpid()
    t0 = time.perf_counter()
    _wrap_docker()  # in a forked horse: the Docker modules' import, which the job pays for in kinds.worker_backend anyway
    try:
        return _perform(*args, **kwargs)
    finally:
        marks["perform (whole)"] = time.perf_counter() - t0
        marks["perform_exit"] = time.time()
        if kept is not None:
            marks["backends made"] = float(kept.made)
            if kept.closed > closed:
                marks["backend rebuilt"] = 1.0  # closed with the job that raised (or at its quota): the next makes one
        job = get_current_job()
        marks["job"] = job.id if job is not None else None
        with open(MARKS, "a", encoding="utf-8") as out:
            out.write(json.dumps(marks) + "\n")


jobs.perform = _timed_perform  # RQ resolves "grader.hosted.jobs.perform" at each job
marks_import = time.perf_counter() - T_IMPORT
sys.stderr.write(f"bench worker {MODE} {NAME}: imports {marks_import:.3f} s\n")
serve_jobs(service_settings(), name=NAME, mode="kept" if MODE == "warm" else MODE)
