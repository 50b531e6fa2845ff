"""The next sandboxed session made ready while a probe run's sandbox runs, for the settings its probes will write.

When a policy lets the sandbox rewrite its own settings file, the replay runs
the next sandboxed session under the rewritten settings (``replay.play``):
after the probes, a whole cold run of a job, its container's create and start
on the learner's wait. What the probes will write is known before they fire:
``write-sandbox-settings`` adds the attacker's host to the file the run laid
out (``probe_runner.widen``), and the session's job steals the key whose canary
the run laid out (``replay.next_job``). So a run whose policy lets that write
land (``expected``) makes that session ready beside its own sandbox: its world
copy laid out, its proxy taken, its sandbox created and started, its job
waiting for a go on stdin (``golines.JOB_AWAIT_GO``).

What it guarantees, by construction:

* it runs only the session it was made for: the replay reads the settings the
  probes really wrote, builds that session's plan and job, and ``take`` hands
  the held run over only when both are equal by value to what it was made for
  and its sandbox still waits; anything else (the write did not land, another
  text, a stopped sandbox) removes it and the session runs cold, as before;
* it runs once, after the probes' evidence is collected (the replay sends the
  go), and it is removed with the run whatever happens (``close``): unused, a
  preparation still under way is removed as soon as it ends.

Only a hint for scheduling: whether the session plays, and what it proves, is
the evidence's. A run made ready costs what a cold one does (its CPU moves
before the press, not after), and memory while it waits: its sandbox waits in
a shell (0.4 MiB, measured with ``docker stats``) beside the proxy it took
(12.5 MiB).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Optional, Protocol

from grader.core.execution import Execution, Job
from grader.core.next_session import KEY, SETTINGS, read_settings, widened_settings
from grader.core.plan import RunPlan, build_plan
from grader.core.probes import probe
from grader.backends.docker import replay

__all__ = ["Held", "Later", "NextReady", "expected", "ready_for"]

Later = Callable[[Callable[[], None]], None]  # the backend's reaper: work behind the result (``run.Backing.remove_later``)


def expected(plan: RunPlan, token: str, canaries: dict[str, str], settings_text: str) -> Optional[tuple[RunPlan, Job]]:
    """The next sandboxed session a probe run of ``plan`` will most likely play: its plan and job, or None when the
    run's policy keeps the settings write from landing (or its world has no settings, or they would not parse).

    Args:
        token: the run's token (the job's address at the attacker carries it).
        canaries: the canaries the run laid out (the job plants the key's).
        settings_text: the settings file as the run laid it out, canary and all.
    """
    writes = any(probe(p).target == SETTINGS and probe(p).action == "write" for p in plan.probes)
    if not writes or not plan.access.write(SETTINGS).allowed or KEY not in canaries:
        return None
    policy, _ = read_settings(widened_settings(settings_text, plan.world.attacker.name, ""))
    if policy is None:
        return None
    job = replay.next_job(plan, None, token, canaries[KEY])
    try:
        job.check(plan.world)
    except ValueError:
        return None
    return build_plan(policy, plan.world), job


class Held(Protocol):
    """What ``NextReady`` holds: a job's run prepared up to its go (``run.Run``, by its shape)."""

    def alive(self) -> bool: ...

    def release(self) -> None: ...

    def fire_job(self) -> Execution: ...


def ready_for(plan: RunPlan, token: str, canaries: dict[str, str], settings: Path,
              make: Callable[[RunPlan, Job], Held], later: Later) -> Optional["NextReady"]:
    """Start making ready the next sandboxed session ``expected`` of a probe run of ``plan`` (``settings``: the file
    as the run laid it out; ``make`` prepares a job's run up to its go; ``later``: the backend's reaper); None when
    none is expected."""
    try:
        text = settings.read_text(encoding="utf-8")
    except (OSError, ValueError):  # no settings in this world, or not text: nothing to expect
        return None
    found = expected(plan, token, canaries, text)
    if found is None:
        return None
    nplan, job = found
    return NextReady(nplan, job, lambda: make(nplan, job), later)


class NextReady:
    """One next sandboxed session, being made ready in a thread of its own; ``take`` it for its plan, or ``close``."""

    def __init__(self, plan: RunPlan, job: Job, make: Callable[[], Held], later: Later) -> None:
        self.plan, self.job, self._later = plan, job, later
        self._lock = threading.Lock()
        self._held: Optional[Held] = None
        self._closed = False
        self._thread = threading.Thread(target=self._prepare, args=(make,), name="sandbox-lab-next-ready", daemon=True)
        self._thread.start()

    @property
    def ready(self) -> bool:
        """Is the session held now, waiting for its go?"""
        with self._lock:
            return self._held is not None

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for its preparation to end; True once it has (made ready, or failed and left
        to start cold): nothing of it is under way any more."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def take(self, plan: RunPlan, job: Job) -> Optional[Held]:
        """The held session if it was made for exactly ``plan`` and ``job`` and still waits for its go; else None,
        and whatever was made is removed. Waits for a preparation under way; once."""
        self._thread.join()
        with self._lock:
            held, self._held, self._closed = self._held, None, True
        if held is None:
            return None
        if (plan, job) != (self.plan, self.job) or not held.alive():
            held.release()
            return None
        return held

    def close(self) -> None:
        """Remove it unused: now if it is ready, or as its preparation ends."""
        with self._lock:
            held, self._held, self._closed = self._held, None, True
        if held is not None:
            held.release()
        elif self._thread.is_alive():
            # its preparation removes what it made as it ends; the backend's reaper waits for that, so whoever
            # waits for the run's removals (``DockerBackend.drain``, its close) waits for this one's too
            try:
                self._later(self._thread.join)
            except RuntimeError:  # the reaper is shut down (the backend closes): wait for it here
                self._thread.join()

    def _prepare(self, make: Callable[[], Held]) -> None:
        try:
            held = make()
        except Exception:  # noqa: BLE001 - it could not be made (its removal is its own): the session starts cold
            return
        with self._lock:
            keep = not self._closed
            if keep:
                self._held = held
        if not keep:
            held.release()
