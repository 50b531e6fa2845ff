"""A run's findings: computed once where the result is made, from the plan's own world, and carried in ``RunResult``."""

from __future__ import annotations

import dataclasses

import pytest

from grader import load_policy, predict
from grader.backends import StaticBackend
from grader.core.access import access_for, baseline_access
from grader.core.channels import channels, exfil_paths
from grader.core.evidence import Evidence
from grader.core.findings import Findings, find
from grader.core.outcomes import RunResult
from grader.core.plan import RunPlan, build_plan
from grader.core.verdicts import run_result
from grader.core.world import load_world
from grader.grading.grade import grade, overgrants_of
from grader.grading.tasks import load_task

NAIVE = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}
PRACTICE = {"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}}


def test_findings_say_what_the_access_grants() -> None:
    acc = access_for(load_policy(NAIVE), load_world())
    found = find(acc)
    assert found.access is acc and found.world is acc.world and found.policy is acc.policy and found.sandbox == "policy"
    assert found.channels == channels(acc) and found.paths == exfil_paths(acc)
    assert found.readable == tuple(s.path for s in acc.world.loot if acc.read(s.path).allowed) and found.readable
    assert {p.secret for p in found.paths} == set(found.readable)
    with_nothing = find(access_for(load_policy(PRACTICE), load_world()))
    assert with_nothing.channels == () and with_nothing.paths == ()


def test_a_prediction_carries_its_findings_and_the_parsed_policy() -> None:
    policy = load_policy(NAIVE)
    world = load_world()
    result = predict(policy, world)
    assert result.policy is policy
    assert isinstance(result.findings, Findings)
    assert result.findings.world is world  # the world passed in, not one loaded again
    assert result.findings.paths == exfil_paths(access_for(policy, world))
    assert result.to_json()["policy"] == policy.normalize()  # the JSON shape is unchanged
    plain = predict(None, world)
    assert plain.policy is None and plain.findings is not None
    assert plain.findings.paths == exfil_paths(baseline_access(world)) and plain.findings.sandbox == "baseline"
    assert plain.to_json()["policy"] is None


def test_findings_take_no_part_in_equality() -> None:
    result = predict(load_policy(NAIVE))
    assert dataclasses.replace(result, findings=None) == result


def test_a_real_runs_result_carries_the_plans_findings() -> None:
    plan = dataclasses.replace(build_plan(load_policy(NAIVE), load_world()), probes=("job-read-src",), scan=False)
    ev = Evidence(token="t0k3n", canaries={"/project/src/main.py": "c4n4ry"}, records=(), before={}, after={}, network=plan.network)
    result = run_result(ev, plan, backend="docker", run_id="sl-1", seconds=1.0, stopped="killed", disagreement="predicted")
    assert result.policy is plan.policy
    assert result.findings is not None and result.findings.world is plan.world
    assert result.findings.paths == exfil_paths(plan.access)
    assert [p.outcome for p in result.probes] == ["error"]  # nothing finished: no verdict, whatever the findings say


class _NoFindings:
    """A backend whose results were made by hand: the same outcomes and scope, no findings."""

    name = "static"

    def run(self, plan: RunPlan) -> RunResult:
        return dataclasses.replace(StaticBackend().run(plan), findings=None)

    def close(self) -> None:
        pass


def test_grade_judges_by_the_runs_findings_and_needs_none_rebuilt() -> None:
    task = load_task("fix-the-naive-setup")
    policy = load_policy(NAIVE)
    run = predict(policy)
    assert run.findings is not None
    assert overgrants_of(task, run) == overgrants_of(task, run, run.findings.access)
    assert grade(task, policy, _NoFindings()) == grade(task, policy, StaticBackend())  # the plan's access, the same world
    with pytest.raises(ValueError, match="no findings"):
        overgrants_of(task, dataclasses.replace(run, findings=None))
