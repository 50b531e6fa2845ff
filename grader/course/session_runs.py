"""The runs of one kernel session: a policy run once is not run again for the next board, and a lesson's
side-by-side sandboxes run at the same time.

A lesson shows the same policy on several boards (lesson 02 compares the naive
and the secure sandbox, then shows each alone): the second board reuses the
first one's result instead of making the learner wait for the same run again.
A result is reused only when everything that decides it is the same
(``run_key``): Sandbox Lab's version, the backend (the same object: another
engine is another machine), the world, and the plan compiled from the policy
(its canonical JSON). A reused result says so on its board (``REUSED_NOTE``):
the learner is not told something ran that did not.

The static backend's predictions are not kept (they cost nothing). Only
complete results are kept: a failed run (a message) or a result with a
probe that could not be judged (``error``) runs again next time, since the
machinery may have recovered. The memory is the kernel's (``SESSION``, bounded,
lock-protected): it lives as long as the learner's session, and a restarted
kernel runs everything afresh.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Union

from grader.core.access import Target, parse_target
from grader.core.errors import SandboxLabError
from grader.core.outcomes import RunResult
from grader.core.plan import RunPlan, build_plan
from grader.core.policy import Policy
from grader.core.version import __version__

if TYPE_CHECKING:
    from grader.backends.base import Backend

__all__ = ["REUSED_NOTE", "SESSION", "SessionRuns", "lesson_target", "run_key"]

# what a reused result's board says under its summary: the run it shows, and how to get a fresh one
REUSED_NOTE = "result from this session's earlier run of the same policy (run {run_id}); nothing ran again. " \
              "Change the policy, or restart the kernel, to run it afresh."
KEEP = 64  # results kept per session: a whole course's boards, a few kilobytes each


def lesson_target() -> Target:
    """The target a course or a learner chose once, by a setting ($SANDBOX_LAB_TARGET): srt when unset.

    A value the lab does not know is a ``SandboxLabError`` the board shows, never a silent srt."""
    try:
        return parse_target(os.environ.get("SANDBOX_LAB_TARGET"))
    except ValueError as exc:
        raise SandboxLabError(str(exc)) from None


def run_key(backend: "Backend", plan: RunPlan) -> str:
    """Everything that decides a run's result, as one digest (the backend's identity is compared apart)."""
    decided = {
        "version": __version__,
        "backend": str(getattr(backend, "name", type(backend).__name__)),
        "world": dataclasses.asdict(plan.world),
        "policy": plan.policy.normalize() if plan.policy is not None else None,
        # the plan as compiled: what the sandbox gets, whatever the policy's spelling
        "plan": {"sandbox": plan.sandbox, "network": plan.network, "allowed": plan.allowed_domains,
                 "denied": plan.denied_domains, "mounts": [dataclasses.asdict(m) for m in plan.mounts],
                 "hardening": dataclasses.asdict(plan.hardening), "probes": plan.probes, "scan": plan.scan,
                 "target": plan.target},
    }
    text = json.dumps(decided, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _complete(result: RunResult) -> bool:
    """A result worth reusing: every probe judged (an ``error`` may be the machinery's, and may not recur)."""
    return all(p.outcome != "error" for p in result.probes)


def _failure(exc: SandboxLabError) -> str:
    return f"{type(exc).__name__}: {exc}"


class SessionRuns:
    """The results of one session's runs, by ``run_key``; runs what it does not have, several at once."""

    def __init__(self, keep: int = KEEP) -> None:
        self._keep = keep
        self._lock = threading.Lock()
        # key -> (the backend that ran it, its result); the backend is held so its identity stays its own
        self._results: OrderedDict[str, tuple[Any, RunResult]] = OrderedDict()

    def clear(self) -> None:
        with self._lock:
            self._results.clear()

    def _get(self, backend: "Backend", key: str) -> Optional[RunResult]:
        with self._lock:
            got = self._results.get(key)
            if got is None or got[0] is not backend:
                return None
            self._results.move_to_end(key)
            return got[1]

    def _put(self, backend: "Backend", key: str, result: RunResult) -> None:
        with self._lock:
            self._results[key] = (backend, result)
            self._results.move_to_end(key)
            while len(self._results) > self._keep:
                self._results.popitem(last=False)

    def has(self, backend: "Backend", plan: RunPlan) -> bool:
        """Has this session a result of ``plan`` on ``backend`` to reuse? (An editor prepares no sandbox for it.)"""
        return self._get(backend, run_key(backend, plan)) is not None

    def run(self, backend: "Backend", policy: Optional[Policy], *,
            ready: Optional[Callable[[RunPlan], RunResult]] = None) -> Union[RunResult, str]:
        """One sandbox's result (reused, with its note, if this session already ran it); a machinery failure
        becomes a message for the learner, never a traceback. ``ready``: runs the plan in place of ``backend.run``
        (an editor's prepared sandbox, ``prestart``), with the same result."""
        try:
            plan = build_plan(policy, target=lesson_target())
            if getattr(backend, "name", "") == "static":
                return backend.run(plan)  # a prediction costs nothing: nothing to reuse
            key = run_key(backend, plan)
            earlier = self._get(backend, key)
            if earlier is not None:
                return dataclasses.replace(earlier, notes=(*earlier.notes, REUSED_NOTE.format(run_id=earlier.run_id or "?")))
            result = ready(plan) if ready is not None else backend.run(plan)
        except SandboxLabError as exc:
            return _failure(exc)
        if _complete(result):
            self._put(backend, key, result)
        return result

    def run_all(self, backend: "Backend", policies: Mapping[str, Optional[Policy]]) -> dict[str, Union[RunResult, str]]:
        """Every policy's result, by name, in the given order; the runs not already done run at the same time
        (a side-by-side board waits for its slowest sandbox, not for their sum)."""
        names = list(policies)
        if len(names) <= 1:
            return {n: self.run(backend, policies[n]) for n in names}
        with ThreadPoolExecutor(max_workers=len(names), thread_name_prefix="side-by-side") as pool:
            futures = {n: pool.submit(self.run, backend, policies[n]) for n in names}
            return {n: futures[n].result() for n in names}


# The kernel session's runs: the one piece of state a lesson's boards share (a restarted kernel starts empty)
SESSION = SessionRuns()
