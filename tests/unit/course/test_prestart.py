"""An editor's pre-started sandbox (issue 40), with a fake preparing backend: at most one held per editor, for its
current text only; Probe fires it only for the plan it was made for, else runs cold; nothing is left held."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from typing import Any, Optional

import pytest

from grader import load_policy
from grader.backends import StaticBackend
from grader.core.outcomes import RunResult
from grader.core.plan import RunPlan, build_plan
from grader.core.policy import Policy
from grader.notebook import widgets
from grader.course.prestart import Prestart, lesson_plan
from grader.course.session_runs import SESSION

SECURE = {"filesystem": {"allowWrite": ["/app/workspace/build"]}, "network": {"allowedDomains": ["registry.npmjs.org"]}}
PRACTICE = {"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}}


class FakePrepared:
    def __init__(self, engine: "Engine", plan: RunPlan) -> None:
        self.engine, self.plan, self.state = engine, plan, "ready"

    def matches(self, plan: RunPlan) -> bool:
        return self.plan == plan

    def settled(self, timeout: float) -> bool:
        self.engine.settling.append(timeout)
        return self.engine.ready.wait(timeout)

    def go(self) -> RunResult:
        assert self.state == "ready", "fired twice or after retirement"
        self.state = "used"
        self.engine.fired.append(self.plan)
        return dataclasses.replace(StaticBackend().run(self.plan), backend="docker", run_id="prepared")

    def complete(self) -> None:
        if self.state == "ready":
            self.engine.completed.append(self.plan)

    def close(self) -> None:
        if self.state == "ready":
            self.state = "closed"


class Engine:
    """Stands in for the Docker backend: prepares (slowly, if asked), runs cold, counts both."""

    name = "docker"

    def __init__(self, delay: float = 0.0, fail: bool = False) -> None:
        self.delay, self.fail = delay, fail
        self.made: list[FakePrepared] = []
        self.fired: list[RunPlan] = []
        self.cold: list[RunPlan] = []
        self.idle: list[Optional[float]] = []
        self.next_at_go: list[bool] = []
        self.completed: list[RunPlan] = []  # held runs made whole (``complete``), each time asked
        self.settling: list[float] = []
        self.ready = threading.Event()  # the prepared sandbox's runner waits for its go
        self.ready.set()

    def prepare(self, plan: RunPlan, *, idle_s: Optional[float] = 120.0, next_at_go: bool = False) -> FakePrepared:
        time.sleep(self.delay)
        if self.fail:
            raise RuntimeError("no engine")
        self.idle.append(idle_s)
        self.next_at_go.append(next_at_go)
        p = FakePrepared(self, plan)
        self.made.append(p)
        return p

    def run(self, plan: RunPlan) -> RunResult:
        self.cold.append(plan)
        return dataclasses.replace(StaticBackend().run(plan), backend="docker", run_id="cold")

    def live(self) -> list[FakePrepared]:
        return [p for p in self.made if p.state == "ready"]


def _policy(raw: Any) -> Policy:
    return load_policy(raw)


def _until(cond: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def _prestart(engine: Engine, **kw: Any) -> Prestart:
    return Prestart(lambda: engine, settle_s=kw.pop("settle_s", 0.0), **kw)  # type: ignore[arg-type,return-value]


def test_a_valid_text_is_prepared_and_probe_fires_it() -> None:
    engine = Engine()
    pre = _prestart(engine)
    pre.offer(_policy(SECURE))
    _until(lambda: pre.held is not None)
    result = pre.run(lesson_plan(_policy(SECURE)))
    assert result.run_id == "prepared" and engine.fired == [lesson_plan(_policy(SECURE))] and not engine.cold
    assert engine.idle == [120.0] and pre.held is None
    assert engine.next_at_go == [False], "an editor's held run is made whole: its next session ready before the press"


def test_a_run_is_held_as_soon_as_it_is_made_and_fired_while_it_still_settles() -> None:
    """The editor holds a run as soon as its sandbox is made, before its runner waits for its go: a Probe pressed
    then is sent at once (the runner reads its go as it is ready), where waiting for ``settled`` first would
    give up the overlap of the runner's start and the next session's preparation with the probes."""
    engine = Engine()
    engine.ready.clear()
    pre = _prestart(engine)
    pre.offer(_policy(SECURE))
    _until(lambda: pre.held is not None)
    assert pre.run(lesson_plan(_policy(SECURE))).run_id == "prepared" and not engine.cold and not engine.settling


def test_probe_on_another_plan_retires_the_held_run_and_runs_cold() -> None:
    engine = Engine()
    pre = _prestart(engine)
    pre.offer(_policy(SECURE))
    _until(lambda: pre.held is not None)
    result = pre.run(lesson_plan(_policy(PRACTICE)))
    assert result.run_id == "cold" and not engine.fired
    assert [p.state for p in engine.made] == ["closed"]  # never fired for a plan it was not made for


def test_a_changed_text_retires_the_held_run_and_an_editor_never_holds_two() -> None:
    engine = Engine(delay=0.05)
    pre = _prestart(engine)
    for raw in (SECURE, PRACTICE, SECURE, PRACTICE):
        pre.offer(_policy(raw))
        assert len(engine.live()) <= 1
        time.sleep(0.02)
        assert len(engine.live()) <= 1
    _until(lambda: pre.held is not None and pre.held.matches(lesson_plan(_policy(PRACTICE))))
    assert len(engine.live()) == 1
    pre.offer(None)  # the text stopped being a policy
    assert not engine.live()
    assert pre.run(lesson_plan(_policy(SECURE))).run_id == "cold"


def test_a_text_is_prepared_only_once_it_settles() -> None:
    engine = Engine()
    pre = _prestart(engine, settle_s=0.3)
    text = json.dumps(SECURE)
    for end in range(len(text) - 5, len(text) + 1):  # typing: every key a new text, some of them valid
        try:
            pre.offer(load_policy(text[:end].encode()))
        except Exception:  # noqa: BLE001 - not a policy yet
            pre.offer(None)
        time.sleep(0.01)
    _until(lambda: pre.held is not None)
    assert len(engine.made) == 1


def test_probe_during_the_preparation_of_its_plan_waits_for_it() -> None:
    engine = Engine(delay=0.3)
    pre = _prestart(engine)
    pre.offer(_policy(SECURE))
    _until(lambda: pre._busy is not None)
    assert pre.run(lesson_plan(_policy(SECURE))).run_id == "prepared"


def test_a_failed_preparation_leaves_probe_to_run_cold() -> None:
    engine = Engine(fail=True)
    pre = _prestart(engine)
    pre.offer(_policy(SECURE))
    time.sleep(0.2)
    assert pre.held is None
    assert pre.run(lesson_plan(_policy(SECURE))).run_id == "cold"


def test_a_backend_that_cannot_prepare_is_left_alone() -> None:
    pre = Prestart(lambda: StaticBackend(), settle_s=0.0)
    pre.offer(_policy(SECURE))
    time.sleep(0.1)
    assert pre.held is None
    assert pre.run(lesson_plan(_policy(SECURE))).backend == "static"


def test_close_retires_the_held_run_and_prepares_nothing_more() -> None:
    engine = Engine()
    pre = _prestart(engine)
    pre.offer(_policy(SECURE))
    _until(lambda: pre.held is not None)
    pre.close()
    assert not engine.live()
    pre.offer(_policy(PRACTICE))
    time.sleep(0.1)
    assert len(engine.made) == 1 and pre.held is None


def test_a_plan_whose_result_the_session_has_is_not_prepared() -> None:
    engine = Engine()
    pre = _prestart(engine, known=lambda b, p: True)
    pre.offer(_policy(SECURE))
    time.sleep(0.1)
    assert not engine.made


def test_the_editor_prepares_on_an_edit_and_its_probe_fires_the_prepared_run() -> None:
    SESSION.clear()
    engine = Engine()
    editor = widgets.PolicyEditor(PRACTICE, backend=engine)  # type: ignore[arg-type]
    try:
        time.sleep(0.1)
        assert not engine.made  # the initial text is not prepared: an opened notebook holds no sandbox
        editor.policy_text = json.dumps(SECURE)
        _until(lambda: editor._prestart.held is not None, timeout=10)
        result = editor.probe()
        assert result is not None and result.run_id == "prepared" and not engine.cold
        editor.policy_text = "{not json"
        editor.policy_text = json.dumps(PRACTICE)
        _until(lambda: editor._prestart.held is not None, timeout=10)
    finally:
        editor.close()
        SESSION.clear()
    assert not engine.live()  # the widget's close retired it
