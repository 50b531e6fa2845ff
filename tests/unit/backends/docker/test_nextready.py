"""The next sandboxed session made ready while the probes run (grader/backends/docker/nextready.py), without Docker:
what a run expects its probes to write is what the real runner writes; and a held session is handed over only for
the plan and job it was made for, and is removed in every other case."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import threading
from pathlib import Path
from typing import Callable, Optional

import pytest

from grader.backends.docker import replay
from grader.backends.docker.nextready import NextReady, expected, ready_for
from grader.core.execution import Execution, Job
from grader.core.next_session import KEY, MARKER_KEY, SETTINGS, read_settings
from grader.core.plan import RunPlan, build_plan
from grader.core.policy import load_policy
from grader.protocol import wire
from grader.services import probe_runner

NAIVE = {"filesystem": {"allowWrite": ["/home/user"]}, "network": {"allowedDomains": ["*.github.com"]}}
PRACTICE = {"filesystem": {"denyRead": ["~", "/etc/secrets", "/project"], "allowRead": ["/project/src"],
                           "allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}}
CANARIES = {KEY: "c0ffee" * 5, SETTINGS: "5e771265" * 4}


def _laid_out(plan: RunPlan) -> str:
    """The settings file as a run lays it out: the world's, its canary filled in (``RunDir.lay_out``)."""
    f = next(f for f in plan.world.files if f.path == SETTINGS)
    return f.content.replace("{canary}", CANARIES[SETTINGS])


def _widened_by_the_runner(tmp_path: Path, text: str, attacker: str) -> str:
    """What the real probe runner leaves in that file after ``write-sandbox-settings`` (``Agent.widen``)."""
    path = tmp_path / "settings.json"
    path.write_text(text)
    agent = probe_runner.Agent(wire.parse_orders({"timeout": 1, "connect_timeout": 1, "proxy": None, "ca_file": "", "probes": []}))
    with contextlib.redirect_stdout(io.StringIO()):
        agent.widen("write-sandbox-settings", str(path), wire.Widen(domains=(attacker,), key=MARKER_KEY, marker="m"), "")
    return path.read_text()


def test_the_expected_session_is_the_one_the_runners_write_leads_to(tmp_path: Path) -> None:
    plan = build_plan(load_policy(NAIVE))
    assert "write-sandbox-settings" in plan.probes and plan.access.write(SETTINGS).allowed
    found = expected(plan, "tok3n", CANARIES, _laid_out(plan))
    assert found is not None
    next_plan, job = found
    # the replay's own reading of what the runner wrote (``replay._settings``), and the plan it builds from it
    policy, why = read_settings(_widened_by_the_runner(tmp_path, _laid_out(plan), plan.world.attacker.name))
    assert policy is not None, why
    assert next_plan == build_plan(policy, plan.world)
    assert plan.world.attacker.name in next_plan.policy.network.allowedDomains if next_plan.policy else False
    assert job == replay.next_job(plan, None, "tok3n", CANARIES[KEY])
    assert job.plant == {KEY: f"\n{CANARIES[KEY]}\n"} and "tok3n" in job.code


def test_nothing_is_expected_where_the_write_cannot_land_or_would_not_be_read() -> None:
    practice = build_plan(load_policy(PRACTICE))
    assert not practice.access.write(SETTINGS).allowed
    assert expected(practice, "t", CANARIES, _laid_out(practice)) is None  # the policy keeps the write out
    naive = build_plan(load_policy(NAIVE))
    without = dataclasses.replace(naive, probes=tuple(p for p in naive.probes if p != "write-sandbox-settings"))
    assert expected(without, "t", CANARIES, _laid_out(naive)) is None  # no probe writes them
    assert expected(naive, "t", {}, _laid_out(naive)) is None  # no key laid out to plant
    # settings that would not read as a policy once widened: the next session would not start
    assert expected(naive, "t", CANARIES, '{"filesystem": {"allowWrite": 7}}') is None


def test_no_settings_file_no_session_made_ready_with_one_one_is(tmp_path: Path) -> None:
    plan = build_plan(load_policy(NAIVE))
    made: list[RunPlan] = []

    def make(p: RunPlan, j: Job) -> _Held:
        made.append(p)
        return _Held()

    assert ready_for(plan, "t", CANARIES, tmp_path / "missing.json", make, lambda f: f()) is None
    (tmp_path / "settings.json").write_text(_laid_out(plan))
    got = ready_for(plan, "t", CANARIES, tmp_path / "settings.json", make, lambda f: f())
    assert got is not None and got.take(got.plan, got.job) is not None and len(made) == 1, "with the file: made ready"


class _Held:
    def __init__(self, alive: bool = True) -> None:
        self._alive, self.released, self.fired = alive, 0, 0

    def alive(self) -> bool:
        return self._alive

    def release(self) -> None:
        self.released += 1

    def fire_job(self) -> Execution:
        raise AssertionError("the test fires nothing")


def _ready(held: _Held, gate: Optional[threading.Event] = None, later: Optional[list[Callable[[], None]]] = None,
           fail: bool = False) -> tuple[NextReady, RunPlan, Job]:
    plan = build_plan(load_policy(NAIVE))
    job = Job(code="print(1)")

    def make() -> _Held:
        if gate is not None:
            gate.wait(10)
        if fail:
            raise RuntimeError("the engine refused it")
        return held

    return NextReady(plan, job, make, (later.append if later is not None else lambda f: f())), plan, job


def test_taken_only_for_its_own_plan_and_job() -> None:
    held = _Held()
    ready, plan, job = _ready(held)
    assert ready.take(plan, job) is held and held.released == 0
    assert ready.take(plan, job) is None, "once"
    ready.close()
    assert held.released == 0, "taken: the taker fires it, and the run removes it"


@pytest.mark.parametrize("other", ["policy", "job", "stopped"])
def test_any_other_session_gets_none_and_the_held_one_is_removed(other: str) -> None:
    held = _Held(alive=other != "stopped")
    ready, plan, job = _ready(held)
    if other == "policy":
        plan = build_plan(load_policy(PRACTICE), plan.world)
    elif other == "job":
        job = dataclasses.replace(job, code="print(2)")
    assert ready.take(plan, job) is None
    assert held.released == 1


def test_closed_before_it_is_ready_it_is_removed_as_its_preparation_ends_and_the_reaper_waits_for_that() -> None:
    held, gate, later = _Held(), threading.Event(), []
    ready, plan, job = _ready(held, gate, later)
    ready.close()
    assert held.released == 0 and len(later) == 1, "the reaper is handed the wait for the preparation"
    gate.set()
    later[0]()  # what the reaper runs: the preparation's end
    assert held.released == 1
    assert ready.take(plan, job) is None, "closed: nothing to take"


def test_a_preparation_that_failed_leaves_the_session_to_start_cold() -> None:
    ready, plan, job = _ready(_Held(), fail=True)
    assert ready.take(plan, job) is None
    ready.close()



def test_closed_as_the_backend_shuts_down_it_waits_for_its_preparation_itself() -> None:
    held, gate = _Held(), threading.Event()
    plan = build_plan(load_policy(NAIVE))

    def make() -> _Held:
        gate.wait(10)
        return held

    def shut(work: Callable[[], None]) -> None:
        raise RuntimeError("cannot schedule new futures after shutdown")

    ready = NextReady(plan, Job(code="print(1)"), make, shut)
    threading.Timer(0.2, gate.set).start()
    ready.close()  # returns once the preparation ended and what it made is removed
    assert held.released == 1


def test_waited_for_it_says_once_its_preparation_has_ended_made_or_failed() -> None:
    held, gate = _Held(), threading.Event()
    ready, plan, job = _ready(held, gate)
    assert ready.wait(0.05) is False and not ready.ready, "still being made"
    gate.set()
    assert ready.wait(10) is True and ready.ready
    assert ready.take(plan, job) is held
    failed, _, _ = _ready(_Held(), fail=True)
    assert failed.wait(10) is True and not failed.ready, "failed: settled, to start cold"
