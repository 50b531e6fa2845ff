"""A kernel session's runs: the same sandbox is not run twice for two boards, and side-by-side sandboxes run at once."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Optional

import pytest

from grader import load_policy
from grader.backends import StaticBackend
from grader.core.errors import BackendError
from grader.core.outcomes import RunResult
from grader.core.plan import RunPlan, build_plan
from grader.core.world import load_world
from grader.course.session_runs import REUSED_NOTE, SessionRuns, run_key

NAIVE = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}
SECURE = {"filesystem": {"allowWrite": ["/app/workspace/build"]}, "network": {"allowedDomains": ["registry.npmjs.org"]}}


class Engine:
    """Stands in for the Docker backend: the analyzer's outcomes, counted, with a run id of its own."""

    name = "docker"

    def __init__(self, *, barrier: Optional[threading.Barrier] = None, lose: str = "", fail: bool = False) -> None:
        self.runs = 0
        self.barrier = barrier
        self.lose = lose
        self.fail = fail
        self._lock = threading.Lock()

    def run(self, plan: RunPlan) -> RunResult:
        with self._lock:
            self.runs += 1
            n = self.runs
        if self.barrier is not None:
            self.barrier.wait()  # every run of a side-by-side board must be in flight at once
        if self.fail:
            raise BackendError("the engine went away")
        r = dataclasses.replace(StaticBackend().run(plan), backend="docker", run_id=f"sl-{n}", notes=())
        if self.lose:
            r = dataclasses.replace(r, probes=tuple(dataclasses.replace(p, outcome="error") if p.id == self.lose else p
                                                    for p in r.probes))
        return r


def test_a_policy_run_once_is_reused_and_says_so() -> None:
    runs, engine = SessionRuns(), Engine()
    first = runs.run(engine, load_policy(NAIVE))
    again = runs.run(engine, load_policy(dict(NAIVE)))
    assert engine.runs == 1
    assert isinstance(first, RunResult) and isinstance(again, RunResult)
    assert first.notes == () and again.probes == first.probes
    assert again.notes == (REUSED_NOTE.format(run_id="sl-1"),)  # the board says nothing ran again, and which run it shows
    again2 = runs.run(engine, load_policy(NAIVE))
    assert isinstance(again2, RunResult) and len(again2.notes) == 1  # the note is not stacked


def test_anything_that_decides_the_result_runs_it_again() -> None:
    runs, engine = SessionRuns(), Engine()
    runs.run(engine, load_policy(NAIVE))
    runs.run(engine, load_policy(SECURE))  # another policy
    runs.run(engine, None)  # the plain container
    other = Engine()  # another engine with the same name: another machine
    runs.run(other, load_policy(NAIVE))
    assert engine.runs == 3 and other.runs == 1


def test_the_key_covers_the_world_and_the_version(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = Engine()
    plan = build_plan(load_policy(NAIVE))
    world = load_world()
    moved = dataclasses.replace(world, files=world.files[:-1])
    assert run_key(engine, plan) != run_key(engine, dataclasses.replace(plan, world=moved))  # type: ignore[arg-type]
    assert run_key(engine, plan) != run_key(engine, dataclasses.replace(plan, scan=False))
    before = run_key(engine, plan)
    monkeypatch.setattr("grader.course.session_runs.__version__", "9.9.9")
    assert run_key(engine, plan) != before


def test_a_failed_or_incomplete_run_is_not_kept() -> None:
    runs = SessionRuns()
    broken = Engine(fail=True)
    assert runs.run(broken, load_policy(NAIVE)) == "BackendError: the engine went away"
    assert runs.run(broken, load_policy(NAIVE)) == "BackendError: the engine went away"
    assert broken.runs == 2
    lossy = Engine(lose="exfil-secret")  # a probe that could not be judged: the machinery may recover
    runs.run(lossy, load_policy(NAIVE))
    runs.run(lossy, load_policy(NAIVE))
    assert lossy.runs == 2


def test_the_static_backends_predictions_are_not_kept_nor_labelled() -> None:
    runs, static = SessionRuns(), StaticBackend()
    a, b = runs.run(static, load_policy(NAIVE)), runs.run(static, load_policy(NAIVE))  # type: ignore[arg-type]
    assert isinstance(b, RunResult) and not any("earlier run" in n for n in b.notes) and a == b


def test_side_by_side_sandboxes_run_at_once_and_keep_their_order() -> None:
    runs = SessionRuns()
    engine = Engine(barrier=threading.Barrier(3, timeout=10))  # one after the other, the first would wait in vain
    got = runs.run_all(engine, {"secure": load_policy(SECURE), "naive": load_policy(NAIVE), "plain": None})
    assert list(got) == ["secure", "naive", "plain"]
    assert all(isinstance(r, RunResult) for r in got.values())
    assert engine.runs == 3


def test_a_bounded_memory_forgets_the_oldest() -> None:
    runs, engine = SessionRuns(keep=1), Engine()
    runs.run(engine, load_policy(NAIVE))
    runs.run(engine, load_policy(SECURE))
    runs.run(engine, load_policy(NAIVE))
    assert engine.runs == 3
    runs.clear()
    runs.run(engine, load_policy(NAIVE))
    assert engine.runs == 4


def test_widgets_share_the_sessions_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.notebook import widget_base, widgets

    monkeypatch.setattr(widget_base, "SESSION", SessionRuns())
    engine: Any = Engine()
    widgets.side_by_side({"naive": NAIVE, "secure": SECURE}, engine)
    board = widgets.probe_board(NAIVE, engine, only=["write-shell-rc"])
    assert engine.runs == 2  # the board after the comparison reused the comparison's naive run
    assert "earlier run of the same policy" in board.value
