"""A prepared run: one plan's sandbox made ready up to its probes, held until its go, retired unused.

Everything a run does before its probes fire (the run directory and world copy,
the proxy for this policy, the sandbox created, started and networked, its
probe runner waiting for its go on stdin) is ``run.Run.prepare``; ``go`` sends
the go and returns exactly what ``DockerBackend.run`` returns, because that is
``prepare(plan).go()``: one path.

What it guarantees, by construction:

* it runs the plan it was made for and no other: it holds its plan, and ``go``
  takes none. A caller holding one asks by plan (``matches``) and retires one
  made for another;
* it is used once: a second ``go`` is refused (``PreparedUsed``), as is a ``go``
  after ``close``;
* it is never used stale: idle past ``idle_s`` it is retired (a timer removes
  everything it made); one whose sandbox or services image was rebuilt since it
  was made (``sandbox-lab setup``: other image ids), or whose sandbox stopped
  while it waited, is retired at ``go`` and the run is made afresh;
* retired unused, its proxy goes back to the pool (nothing passed through it);
* a killed grader's prepared run is any run's leftovers: its containers carry
  the run labels with the grader's pid, its directory the owner record, so
  ``cleanup`` removes them.

A held run costs memory: the waiting sandbox (its runner's interpreter, 14 MiB),
the proxy it took (13 MiB), where the user's shells will likely play the
replay's internet started ahead and their container waiting for its go, and
where the probes will likely rewrite the settings the next sandboxed session
waiting for its go with its own proxy (``nextready``: 13 MiB more);
``course.prestart``'s docstring has the measurement. Prepared with
``next_at_go`` (the warm engine's held reruns), those last two are started at
the go instead, during the probes, as a cold run's are: it holds the waiting
sandbox and its proxy alone.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Literal, Optional

from grader.core.errors import BackendError, InfrastructureError
from grader.core.outcomes import RunResult
from grader.core.plan import RunPlan
from grader.backends.runs import run_with_retries
from grader.backends.docker.run import Run

__all__ = ["IDLE_S", "Prepared", "PreparedUsed"]

# How long a prepared run waits for its go before it is retired: a learner reading the board between two edits.
# Past it the sandbox's memory goes back to the machine; a late Probe runs cold, never on a stale sandbox.
IDLE_S = 120.0

State = Literal["ready", "used", "closed", "expired"]


class PreparedUsed(BackendError):
    """``go`` on a prepared run already used or closed: a run is fired once."""


class Prepared:
    """One plan's run made ready up to its probes; ``go`` fires it, ``close`` retires it (removes everything)."""

    def __init__(
        self, plan: RunPlan, run: Optional[Run], *, fresh: Callable[[], Run],
        images: Optional[Callable[[], tuple[str, str]]],
        retries: int, idle_s: Optional[float] = IDLE_S, on_done: Callable[["Prepared"], None] = lambda p: None,
    ) -> None:
        """Args:
            run: the prepared run, or None when preparing failed in a way worth trying again (``go`` runs cold).
            fresh: a new run of the same plan, for a retry or a run retired before its go.
            images: the image ids now (sandbox, services); compared at ``go`` with those at preparation, with the
                sandbox's state. None: fired at once (``DockerBackend.run``), nothing to compare.
            idle_s: retire after this many seconds unused; None: never (``DockerBackend.run``'s own).
            on_done: told once, when it is used or retired (the backend's record of what it holds).
        """
        self.plan = plan
        self._run = run
        self._fresh = fresh
        self._images = images
        self._image_ids = images() if run is not None and images is not None else ("", "")
        self._retries = retries
        self._on_done = on_done
        self._lock = threading.Lock()
        self.state: State = "ready"
        self.made_at = time.monotonic()
        self._timer: Optional[threading.Timer] = None
        if run is not None and idle_s is not None:
            self._timer = threading.Timer(idle_s, self._expire)
            self._timer.daemon = True
            self._timer.name = f"sandbox-lab-prepared-{run.run_id}"
            self._timer.start()

    @property
    def run_id(self) -> Optional[str]:
        """The held run's id (None: nothing held, ``go`` runs cold)."""
        return self._run.run_id if self._run is not None else None

    def matches(self, plan: RunPlan) -> bool:
        """Was this run prepared for ``plan``? (Frozen plans compare by value: the world, the policy, every setting.)"""
        return self.plan == plan

    def settled(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s until nothing of it is still starting: its probe runner waits for its go
        (``Run.ready``), and its next sandboxed session (``nextready``, where the policy lets the run rewrite its
        settings) is made. True then; False if that did not come in time, or nothing is held (``go`` runs cold)."""
        run = self._run
        if run is None:
            return False
        deadline = time.monotonic() + timeout
        if not run.ready(timeout):
            return False
        return run.next_ready is None or run.next_ready.wait(max(0.0, deadline - time.monotonic()))

    def go(self) -> RunResult:
        """Fire the probes and return the run's result, as ``DockerBackend.run(plan)`` would; once."""
        held = self._take()
        if held is not None and not self._current(held):
            held.release()
            held = None

        def attempt(final: bool) -> RunResult:
            nonlocal held
            run, held = held, None
            if run is None:
                run = self._fresh()
                run.prepare()
            return run.finish(final=final)

        try:
            return run_with_retries(attempt, self._retries)
        finally:
            if held is not None:  # only when the first attempt failed before firing
                held.release()

    def complete(self) -> None:
        """Start now, while it waits, what its go would start (``next_at_go``: the replay's internet, the next
        sandboxed session), so its go costs the probes alone; nothing once it is used or retired, or started."""
        with self._lock:  # ``go`` takes the run under this lock: never started under a run already firing
            if self.state == "ready" and self._run is not None:
                self._run.start_next()

    def close(self) -> None:
        """Retire it unused: everything it made is removed (behind the caller, on the backend's reaper)."""
        self._retire("closed")

    # --- inside -------------------------------------------------------------------------

    def _take(self) -> Optional[Run]:
        with self._lock:
            if self.state in ("used", "closed"):
                raise PreparedUsed(f"this prepared run was already {self.state}: prepare the plan again")
            expired = self.state == "expired"
            self.state = "used"
            run, self._run = self._run, None
        self._stop_timer()
        self._on_done(self)
        return None if expired else run

    def _current(self, run: Run) -> bool:
        """Still what a fresh run would be: the same images, and its sandbox still waiting for the go."""
        if self._images is None:
            return True
        try:
            return self._images() == self._image_ids and run.alive()
        except (BackendError, InfrastructureError):
            return False

    def _expire(self) -> None:
        self._retire("expired")

    def _retire(self, state: State) -> None:
        with self._lock:
            if self.state != "ready":
                return
            self.state = state
            run, self._run = self._run, None
        self._stop_timer()
        self._on_done(self)
        if run is not None:
            # Never fired (``go`` takes the run before it sends anything): its probe runner waited for a go that
            # never came, so its proxy carried nothing of it and may serve the next run, as after a clean run (the
            # pool's and the hub keeper's own checks still decide). A run ``go`` found stale goes unclean.
            run.clean = True
            run.release()

    def _stop_timer(self) -> None:
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.cancel()
