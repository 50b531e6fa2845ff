"""Sandbox Lab: write a JSON sandbox policy for an AI agent's tool execution, then watch real attacks against it.

The public API, in the order data flows: ``load_policy`` → ``analyze``/``run_probes`` → ``grade``.
"""

from __future__ import annotations

from grader.core.analyzer import analyze, lint, predict
from grader.core.errors import (
    BackendError,
    DockerUnavailable,
    PolicyError,
    SandboxLabError,
    TaskError,
)
from grader.backends.base import Backend
from grader.core.outcomes import ProbeOutcome, RunResult
from grader.core.policy import Policy, load_policy, policy_schema
from grader.core.plan import build_plan
from grader.core.probes import PROBES
from grader.grading.grade import grade
from grader.grading.tasks import load_task
from grader.core.world import load_world


def run_probes(policy: "Policy | None", backend: "Backend | None" = None) -> RunResult:
    """Run every probe against a policy (``None``: the plain container) with a backend (default: auto)."""
    from grader.backends import default

    return (backend or default()).run(build_plan(policy))

from grader.core.version import __version__

__all__ = [
    "PROBES",
    "BackendError",
    "DockerUnavailable",
    "Policy",
    "PolicyError",
    "ProbeOutcome",
    "RunResult",
    "SandboxLabError",
    "TaskError",
    "__version__",
    "analyze",
    "build_plan",
    "grade",
    "load_task",
    "run_probes",
    "lint",
    "load_policy",
    "load_world",
    "policy_schema",
    "predict",
]
