"""What the warm engine prepares ahead: the policy files a terminal probes, watched, and each one's next run
pre-started, so the next ``sandbox-lab probe`` only sends the go (issue 40).

A terminal's learner edits a policy file, saves it, and probes it again. After
a command ran a plan for a file it named (the file, read again, is that plan's
policy), the engine watches the file (``WATCH_MAX`` files at most, the most
recently probed), and keeps one prepared run for it (``course.prestart``:
one per file, one preparation at a time, retired after ``IDLE_S`` unused):

* at once for the same text (a rerun of the same policy), and
* for the new text once a saved change has stood ``SETTLE_S`` and parses as a
  policy (a change that does not parse retires the held run).

The next command that runs a plan equal by value to a held run's (the same
policy, world and target) fires it; a preparation of that plan under way is
waited for; any other plan runs cold. So what runs is always the plan the
command built from the file as it is when the command reads it: a held run
prepared for other text is retired, never fired.

Bounds: at most ``WATCH_MAX`` held runs, each a waiting sandbox and the proxy
it took (14-27 MiB, ``course.prestart``'s measurement), for ``IDLE_S`` after
the file last changed or ran; a file not probed for ``WATCH_S`` is forgotten.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Callable, Optional, Sequence

from grader.backends.base import Backend
from grader.core.errors import SandboxLabError
from grader.core.execution import Execution, Job
from grader.core.outcomes import RunResult
from grader.core.plan import RunPlan, build_plan
from grader.core.policy import Policy, load_policy
from grader.course.prestart import Prestart

__all__ = ["Ahead", "POLL_S", "SETTLE_S", "WATCH_MAX", "WATCH_S"]

WATCH_MAX = 4  # files watched at once: a learner switching between a few policies
WATCH_S = 600.0  # a file no command named for this long is no longer watched
POLL_S = 0.2  # how often a watched file's size and last change are read
SETTLE_S = 0.3  # a saved change prepared once it stood this long: an editor's save can be two writes


def _stamp(path: Path) -> Optional[tuple[int, int]]:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size


@dataclass
class _Watched:
    path: Path
    name: str  # the argument the command named it by: a policy read again is labelled the same
    stamp: Optional[tuple[int, int]]
    prestart: Prestart
    named_at: float = field(default_factory=time.monotonic)


class _Serving:
    """The kept backend as one command sees it: each plan it runs fires a held run made for it, if any, and is noted."""

    def __init__(self, backend: Backend, ahead: "Ahead") -> None:
        self._backend, self._ahead = backend, ahead

    @property
    def name(self) -> str:
        return self._backend.name

    def run(self, plan: RunPlan) -> RunResult:
        self._ahead.ran.append(plan)
        for w in self._ahead.watched():
            if w.prestart.has(plan):
                return w.prestart.run(plan)
        return self._backend.run(plan)

    def execute(self, plan: RunPlan, job: Job) -> Execution:
        return self._backend.execute(plan, job)

    def close(self) -> None:
        """The engine's backend outlives the command: nothing to let go of here."""

    def __enter__(self) -> "_Serving":
        return self

    def __exit__(self, kind: Optional[type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        pass


class Ahead:
    """The watched policy files of one engine, each with its next run prepared on the engine's kept backend."""

    def __init__(self, backend: Callable[[], Backend]) -> None:
        self._backend = backend
        self._lock = threading.Lock()
        self._files: dict[Path, _Watched] = {}
        self.ran: list[RunPlan] = []  # the plans the current command ran
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="sandbox-lab-ahead", daemon=True)
        self._thread.start()

    def serving(self, backend: Backend) -> Backend:
        """``backend`` for one command: its runs take what was prepared for them."""
        self.ran = []
        return _Serving(backend, self)

    def watched(self) -> list[_Watched]:
        with self._lock:
            return list(self._files.values())

    def after(self, argv: Sequence[str], cwd: str) -> None:
        """A command ended: watch each file it named whose policy it ran, and prepare its rerun."""
        ran, self.ran = self.ran, []
        for plan in ran:
            if plan.policy is None:
                continue
            for arg in argv[1:]:
                path = Path(cwd, arg)
                if arg.startswith("-") or not path.is_file():
                    continue
                try:
                    if load_policy(path, name=arg) != plan.policy:
                        continue
                except (SandboxLabError, OSError):
                    continue
                self._watch(path, arg, plan)

    def _watch(self, path: Path, name: str, plan: RunPlan) -> None:
        world, target = plan.world, plan.target
        stale: list[_Watched] = []
        with self._lock:
            w = self._files.pop(path, None)
            if w is None:
                w = _Watched(path, name, _stamp(path), Prestart(
                    self._backend, plan_for=lambda p: build_plan(p, world=world, target=target), settle_s=0.0))
            w.name, w.stamp, w.named_at = name, _stamp(path), time.monotonic()
            self._files[path] = w  # the most recent last
            while len(self._files) > WATCH_MAX:
                stale.append(self._files.pop(next(iter(self._files))))
        for old in stale:
            old.prestart.close()
        w.prestart.offer(plan.policy)  # the rerun of this very text

    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            now = time.monotonic()
            for w in self.watched():
                if now - w.named_at > WATCH_S:
                    with self._lock:
                        self._files.pop(w.path, None)
                    w.prestart.close()
                    continue
                stamp = _stamp(w.path)
                if stamp == w.stamp:
                    continue
                time.sleep(SETTLE_S)  # a save may be more than one write
                if _stamp(w.path) != stamp:
                    continue  # still being written: next round
                w.stamp = stamp
                policy: Optional[Policy]
                try:
                    policy = load_policy(w.path, name=w.name)
                except (SandboxLabError, OSError):
                    policy = None  # the command will say what is wrong; the held run goes
                w.prestart.offer(policy)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2 * POLL_S + SETTLE_S + 1)
        with self._lock:
            files, self._files = list(self._files.values()), {}
        for w in files:
            w.prestart.close()
