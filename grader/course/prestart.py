"""An editor's pre-started sandbox: when its text becomes a valid policy, that policy's run is prepared in the
background, so Probe only sends the go (issue 40).

``Prestart`` holds at most one prepared run per editor, for the editor's
current text, and prepares one at a time on its own thread (typing is never
blocked): a changed text retires the held run before the next is prepared,
so an editor never holds two sandboxes. A text is prepared only once it has
stood ``SETTLE_S`` unchanged (typing a domain letter by letter makes a valid
policy at every key), and never when the session already has its result
(``session_runs``: Probe would reuse it). Probe takes the held run only if it
was prepared for the plan pressed on (``matches``: the plan compared by value),
waits for a preparation of that same plan already under way, and otherwise
runs cold; a held run made for another plan is retired, never fired. The
prepared run itself retires after ``IDLE_S`` unused (its backend's timer), and
every held run goes with its backend at close or when the kernel exits.

What one held run costs, measured on Docker (``docker stats --no-stream`` of the
run's containers 3 s after ``prepare``, the bench's policies, 2026-12-05): the
waiting sandbox (its probe runner's interpreter, orders read) 14 MiB of its
256 MiB limit; a run behind a proxy also holds the proxy it took from the
backend's warm pool, 12-13 MiB (the pool refills behind it). So about 14 MiB
(no network) to 27 MiB (behind a proxy) per editor, for at most ``IDLE_S``
after its last edit. A policy that lets the sandbox write a file the user's
shells run also starts the replay's internet ahead (``replay.likely``), one
more services container; none of the bench's policies does. A policy that lets
it rewrite the sandbox's settings (the bench's naive one) also holds the next
sandboxed session ready (``nextready``): its sandbox waits in a shell, 0.4 MiB,
with the proxy it took, 12.5 MiB (measured the same way, 2026-12-05): about
40 MiB per editor in all.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Optional, Protocol, runtime_checkable

from grader.backends.base import Backend
from grader.core.errors import SandboxLabError
from grader.core.outcomes import RunResult
from grader.core.plan import RunPlan, build_plan
from grader.core.policy import Policy
from grader.course.session_runs import lesson_target

__all__ = ["IDLE_S", "SETTLE_S", "PreparedRun", "Prepares", "Prestart", "lesson_plan"]

IDLE_S = 120.0  # a prepared run unused this long is retired: its memory goes back to the machine
SETTLE_S = 0.6  # a text prepared only once it stood this long: not one sandbox per keystroke


@runtime_checkable
class PreparedRun(Protocol):
    """A run held ready up to its probes (``backends.docker.prepared.Prepared``)."""

    plan: RunPlan

    def matches(self, plan: RunPlan) -> bool: ...

    def settled(self, timeout: float) -> bool: ...

    def go(self) -> RunResult: ...

    def complete(self) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class Prepares(Protocol):
    """A backend that can prepare a run ahead of its go (Docker's); the static backend cannot, and needs not."""

    def prepare(self, plan: RunPlan, *, idle_s: Optional[float] = ..., next_at_go: bool = ...) -> PreparedRun: ...


def lesson_plan(policy: Policy) -> RunPlan:
    """The plan Probe runs for ``policy`` (``SessionRuns.run`` builds the same): the one a prepared run must hold."""
    return build_plan(policy, target=lesson_target())


class Prestart:
    """One editor's prepared run: at most one, for its current valid text; Probe fires it (``run``)."""

    def __init__(self, backend: Callable[[], Backend], *, known: Callable[[Backend, RunPlan], bool] = lambda b, p: False,
                 plan_for: Callable[[Policy], RunPlan] = lesson_plan, idle_s: float = IDLE_S,
                 settle_s: float = SETTLE_S, next_at_go: bool = False) -> None:
        """Args:
            backend: the editor's backend, chosen on first use (called on the preparing thread too).
            known: whether the session already has this plan's result (nothing to prepare).
            next_at_go: start the replay's parts at the go, not while preparing (``DockerBackend.prepare``).
        """
        self._backend = backend
        self._known = known
        self._plan_for = plan_for
        self._idle_s = idle_s
        self._settle_s = settle_s
        self._next_at_go = next_at_go
        self._cond = threading.Condition()
        self._wanted: Optional[RunPlan] = None  # the plan of the editor's current text, if valid
        self._changed_at = 0.0
        self._held: Optional[PreparedRun] = None
        self._busy: Optional[RunPlan] = None  # being prepared now
        self._failed: Optional[RunPlan] = None  # its preparation failed: not tried again until the text changes
        self._thread: Optional[threading.Thread] = None
        self._closed = False
        self.prepared = 0  # preparations made (for tests and the bench)

    @property
    def held(self) -> Optional[PreparedRun]:
        return self._held

    def offer(self, policy: Optional[Policy]) -> None:
        """The editor's text changed (``policy``: it is valid; None: it is not): retire a run held for other text,
        and prepare this one once it has settled."""
        plan: Optional[RunPlan] = None
        if policy is not None:
            try:
                plan = self._plan_for(policy)
            except SandboxLabError:  # Probe will say what is wrong; nothing to prepare
                plan = None
        with self._cond:
            if self._closed:
                return
            self._wanted, self._changed_at = plan, time.monotonic()
            self._failed = None  # a new text: a new chance
            stale = self._held if self._held is not None and (plan is None or not self._held.matches(plan)) else None
            if stale is not None:
                self._held = None
            if plan is not None and self._thread is None:
                self._thread = threading.Thread(target=self._work, name="sandbox-lab-prestart", daemon=True)
                self._thread.start()
            self._cond.notify_all()
        if stale is not None:
            stale.close()

    def complete(self) -> None:
        """Make the held run whole now (``PreparedRun.complete``), if one is held; a no-op otherwise."""
        with self._cond:
            held = self._held
        if held is not None:
            held.complete()

    def has(self, plan: RunPlan) -> bool:
        """Is a run for ``plan`` held, or being prepared? (``run`` would fire or await it rather than run cold.)"""
        with self._cond:
            return self._busy == plan or (self._held is not None and self._held.matches(plan))

    def run(self, plan: RunPlan) -> RunResult:
        """What Probe runs: the held run if it was prepared for ``plan`` (or the preparation of ``plan`` under way,
        waited for), else ``plan`` cold. A held run for another plan is retired, never fired."""
        with self._cond:
            while self._busy is not None and self._busy == plan:
                self._cond.wait()
            held, self._held = self._held, None
            self._wanted = None  # this text has run: nothing more to prepare until it changes
        if held is not None and held.matches(plan):
            return held.go()
        if held is not None:
            held.close()
        return self._backend().run(plan)

    def close(self) -> None:
        """Retire the held run and stop preparing (the editor is gone, or the kernel exits)."""
        with self._cond:
            self._closed = True
            held, self._held = self._held, None
            self._cond.notify_all()
        if held is not None:
            held.close()

    # --- the preparing thread ------------------------------------------------------------

    def _next(self) -> Optional[RunPlan]:
        """The plan to prepare now, once the text has settled; None: closed."""
        with self._cond:
            while True:
                if self._closed:
                    return None
                plan = self._wanted
                if plan is None or plan == self._failed or (self._held is not None and self._held.matches(plan)):
                    self._cond.wait()
                    continue
                wait = self._changed_at + self._settle_s - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                self._busy = plan
                return plan

    def _work(self) -> None:
        while (plan := self._next()) is not None:
            made: Optional[PreparedRun] = None
            try:
                backend = self._backend()
                if isinstance(backend, Prepares) and not self._known(backend, plan):
                    made = backend.prepare(plan, idle_s=self._idle_s, next_at_go=self._next_at_go)
                    self.prepared += 1
            except Exception:  # noqa: BLE001 - a failed preparation costs only speed: Probe runs cold and says why
                made = None
                with self._cond:
                    self._failed = plan
            with self._cond:
                self._busy = None
                keep = made is not None and not self._closed and self._wanted == plan and self._held is None
                if keep:
                    self._held, made = made, None
                elif made is None and self._wanted == plan:
                    self._failed = plan  # nothing to prepare for it (static backend, or a known result)
                self._cond.notify_all()
            if made is not None:  # the text changed while it was made: retired, never fired
                made.close()
