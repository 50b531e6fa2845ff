"""The backends a worker keeps between jobs: one per kind of code (the project's probes, a tenant's code), warm.

Issue 40 measured where a service run's time went: each job forked a work
horse, imported the Docker modules, opened an engine client, checked the
images, adopted the hub's internet and took a single-use proxy, then closed it
all (``bench/service_cost.py``). ``grade-batch`` pays those once for a whole
class. A worker that keeps its backends (``grader.hosted.worker``'s kept mode,
the default) pays them once per worker, as the batch path does: its own
internet, and a proxy pool whose proxies are reused across runs of the same
world.

Fail closed: a job whose block raises anything (an engine error, a bug, RQ's
job timeout delivered in this process) closes the backend it used, so the
next job builds a fresh one and never inherits a half-run's state. A backend
is also rebuilt after ``REBUILD_AFTER`` jobs (whatever it accumulates stays
bounded), and closed once idle for ``IDLE_SECONDS`` (its internet's
containers and warm proxies are not held by a worker nobody uses); a worker
that stops closes them all.

Imports the backends' base only; the backend is made by the function it is given.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Callable, Iterator, Optional

from grader.backends.base import Backend

__all__ = ["IDLE_SECONDS", "REBUILD_AFTER", "KeptBackends"]

_log = logging.getLogger("sandbox_lab.worker")

REBUILD_AFTER = 200  # jobs on one backend before it is closed and made again
IDLE_SECONDS = 600.0  # a kept backend unused this long is closed (its containers freed); the next job makes one


class KeptBackends:
    """Backends kept across the jobs of one worker process, keyed by whether the job runs a tenant's code.

    ``make(tenant_code)`` builds one. ``lease`` hands it to one job at a time
    (a worker runs one job at a time; the lock makes a second caller wait
    rather than share a run in flight)."""

    def __init__(self, make: Callable[[bool], Backend], *, rebuild_after: int = REBUILD_AFTER,
                 idle_seconds: float = IDLE_SECONDS, clock: Callable[[], float] = time.monotonic) -> None:
        self._make = make
        self._rebuild_after = rebuild_after
        self._idle = idle_seconds
        self._clock = clock
        self._kept: dict[bool, tuple[Backend, int]] = {}
        self._lock = threading.RLock()  # a job may lease both kinds, nested
        self._last_used = clock()
        self.made = 0  # backends built so far (the bench and the tests read it)
        self.closed = 0  # and closed

    @contextlib.contextmanager
    def lease(self, tenant_code: bool = False) -> Iterator[Backend]:
        """The kept backend for this kind of job, made if missing; closed and dropped if the block raises."""
        with self._lock:
            backend, uses = self._kept.pop(tenant_code, (None, 0))
            if backend is None:
                backend, uses = self._make(tenant_code), 0
                self.made += 1
            try:
                yield backend
            except BaseException:
                self._close(backend, quietly=True)  # whatever the run left in it goes with it
                raise
            finally:
                self._last_used = self._clock()
            if uses + 1 >= self._rebuild_after:
                self._close(backend)
            else:
                self._kept[tenant_code] = (backend, uses + 1)

    def retire_idle(self) -> bool:
        """Close every kept backend if none was used for the idle period; True if any was closed. Never waits
        for a job: a backend in use is not idle."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if not self._kept or self._clock() - self._last_used < self._idle:
                return False
            self._close_all()
            return True
        finally:
            self._lock.release()

    def close(self) -> None:
        """Close every kept backend (the worker stops); waits for a job holding one."""
        with self._lock:
            self._close_all()

    def holding(self) -> int:
        """How many backends are kept now."""
        return len(self._kept)

    def _close_all(self) -> None:
        kept, self._kept = list(self._kept.values()), {}
        for backend, _ in kept:
            self._close(backend)

    def _close(self, backend: Optional[Backend], *, quietly: bool = False) -> None:
        """Close ``backend``; ``quietly``: a failure to close is logged, so the job's own error is the one raised
        (what the backend could not remove carries this worker's pid: ``cleanup`` takes it once the worker ends)."""
        if backend is None:
            return
        self.closed += 1
        if not quietly:
            backend.close()
            return
        try:
            backend.close()
        except Exception as exc:  # noqa: BLE001 - the job's error matters more; its leftovers are labelled
            _log.error("a kept backend could not be closed after a failed job: %s", exc)
