"""The run service's runs and executions on the server (``grader.hosted.remote_kinds``): the request read strictly,
the plan rebuilt from the policy and the server's own world, the job checked, the answer in the wire form."""

from __future__ import annotations

from typing import Any

import pytest

from grader import load_policy, predict
from grader.backends.base import Closing
from grader.backends.static import StaticBackend
from grader.core.execution import Execution, Job
from grader.core.outcomes import RunResult
from grader.core.plan import RunPlan, build_plan
from grader.core.transport import TransportError, execution_from_json, execution_request, result_from_json, run_request
from grader.core.world import load_world
from grader.hosted import remote_kinds

WORLD = load_world()
POLICY = load_policy({"filesystem": {"allowRead": ["/project"]}, "network": {"allowedDomains": ["pypi.org"]}})


class Recording(Closing):
    """The static backend's predictions, recording the plans and jobs the server hands it."""

    name = "static"

    def __init__(self) -> None:
        self.seen: list[tuple[RunPlan, Any]] = []

    def run(self, plan: RunPlan) -> RunResult:
        self.seen.append((plan, None))
        return StaticBackend().run(plan)

    def execute(self, plan: RunPlan, job: Job) -> Execution:
        self.seen.append((plan, job))
        return Execution("docker", "out", 0, False, None, "sl-1", 0.5)


def test_a_run_rebuilds_the_plan_from_the_policy() -> None:
    backend = Recording()
    body = run_request(build_plan(POLICY))
    answer = remote_kinds.run(body, backend=backend)
    (plan, _), = backend.seen
    assert plan == build_plan(POLICY) and plan.world is WORLD  # the server's own world, the standard hardening
    assert result_from_json(answer, WORLD) == predict(POLICY)


def test_a_run_of_some_probes_runs_only_those() -> None:
    backend = Recording()
    body = dict(run_request(build_plan(None)), probes=["read-ssh-key"])
    answer = remote_kinds.run(body, backend=backend)
    assert backend.seen[0][0].probes == ("read-ssh-key",) and backend.seen[0][0].sandbox == "baseline"
    assert [p["id"] for p in answer["probes"]] == [p.id for p in predict(None).probes]  # the static backend predicts all


def test_a_plan_from_the_client_is_refused_before_anything_runs() -> None:
    backend = Recording()
    body = dict(run_request(build_plan(POLICY)), mounts=[{"source": "/", "target": "/", "mode": "rw"}])
    with pytest.raises(TransportError, match=r"^\$\.mounts: unknown field"):
        remote_kinds.run(body, backend=backend)
    with pytest.raises(TransportError, match=r"^\$\.policy\.filesystem\.allowRead\[0\]"):
        remote_kinds.run(dict(run_request(build_plan(POLICY)), policy={"filesystem": {"allowRead": [3]}}), backend=backend)
    assert backend.seen == []


def test_an_execution_checks_the_job_against_the_world() -> None:
    backend = Recording()
    job = Job("print(1)", plant={WORLD.files[0].path: "FLAG{x}"}, signer="k" * 20)
    answer = remote_kinds.execute(execution_request(build_plan(None), job), backend=backend)
    (plan, got), = backend.seen
    assert got == job and plan == build_plan(None)
    assert execution_from_json(answer, WORLD).output == "out"
    bad = execution_request(build_plan(None), Job("print(1)"))
    bad["job"]["plant"] = {"/var/run/docker.sock": "x"}
    with pytest.raises(TransportError, match=r"^\$\.job: plant"):
        remote_kinds.execute(bad, backend=backend)
    assert len(backend.seen) == 1
