"""The run service's ``/v1/runs`` and ``/v1/executions``: what ``--backend remote`` asks a machine with Docker to do.

Each takes the request's JSON body and returns the answer's (``core.transport``);
the API and its workers call them and carry the answer as the job's ``result``.
The server never trusts a plan from the client: it reads the policy and the
probe ids strictly, rebuilds the plan from the policy and its own world
(``build_plan``), and checks a job against that world (``Job.check``), so a
request can only select parts of the run's own simulated world, as a local run
does. The run itself is the local Docker backend's, unchanged.

A body that does not parse raises ``TransportError`` (a ``ValueError`` naming
the JSON path: the API's 400); a backend that cannot run raises
``BackendError`` (the API's 503 or a failed job). Neither is ever an outcome.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

from grader import backends
from grader.backends.base import Backend
from grader.core.plan import build_plan
from grader.core.transport import execution_to_json, parse_execution_request, parse_run_request, result_to_json
from grader.core.world import World, load_world

__all__ = ["execute", "run"]


def run(body: Any, *, backend: Optional[Backend] = None, world: Optional[World] = None) -> dict[str, Any]:
    """``POST /v1/runs``: the probes the body names, against the policy it carries, in a real sandbox.

    Args:
        backend: a worker's Docker backend, kept between jobs; None opens one for this job
            (``backends.get("docker")``, sharing the machine's simulated internet) and closes it.
        world: the server's world; None is this version's (``load_world``).
    """
    request = parse_run_request(body)
    w = world or load_world()
    plan = replace(build_plan(request.policy, w), probes=tuple(request.probes))
    if backend is not None:
        return result_to_json(backend.run(plan))
    with backends.get("docker", shared=True) as own:
        return result_to_json(own.run(plan))


def execute(body: Any, *, backend: Optional[Backend] = None, world: Optional[World] = None) -> dict[str, Any]:
    """``POST /v1/executions``: the job's code in the sandbox of the policy the body carries (null: the plain
    container), checked against the server's world first; the answer carries all of its evidence."""
    w = world or load_world()
    policy, job = parse_execution_request(body, w)
    plan = build_plan(policy, w)
    if backend is not None:
        return execution_to_json(backend.execute(plan, job))
    with backends.get("docker", shared=True) as own:
        return execution_to_json(own.execute(plan, job))
