"""Sandbox Lab: write a JSON sandbox policy for an AI agent's tool execution, then watch real attacks against it.

The public API, in the order data flows: ``load_policy`` → ``analyze``/``run_probes`` → ``grade``.

Every name is imported on first use (PEP 562 ``__getattr__``), so importing a
submodule (``sandbox-lab --help`` imports ``grader.cli.main``) does not pay for
pydantic, the analyzer and the grader; ``from grader import grade`` works as before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from grader.core.version import __version__

if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from grader.backends.base import Backend
    from grader.core.analyzer import analyze, lint, predict
    from grader.core.errors import BackendError, DockerUnavailable, PolicyError, SandboxLabError, TaskError
    from grader.core.outcomes import ProbeOutcome, RunResult
    from grader.core.plan import build_plan
    from grader.core.policy import Policy, load_policy, policy_schema
    from grader.core.probes import PROBES
    from grader.core.world import load_world
    from grader.grading.grade import grade
    from grader.grading.tasks import load_task

# public name -> the module that defines it
_LAZY = {
    "analyze": "grader.core.analyzer",
    "lint": "grader.core.analyzer",
    "predict": "grader.core.analyzer",
    "BackendError": "grader.core.errors",
    "DockerUnavailable": "grader.core.errors",
    "PolicyError": "grader.core.errors",
    "SandboxLabError": "grader.core.errors",
    "TaskError": "grader.core.errors",
    "ProbeOutcome": "grader.core.outcomes",
    "RunResult": "grader.core.outcomes",
    "Policy": "grader.core.policy",
    "load_policy": "grader.core.policy",
    "policy_schema": "grader.core.policy",
    "build_plan": "grader.core.plan",
    "PROBES": "grader.core.probes",
    "grade": "grader.grading.grade",
    "load_task": "grader.grading.tasks",
    "load_world": "grader.core.world",
}


def __getattr__(name: str) -> Any:
    """Import a public name on first use and keep it, so the next lookup is an ordinary attribute."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'grader' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


def run_probes(policy: "Policy | None", backend: "Backend | None" = None) -> "RunResult":
    """Run every probe against a policy (``None``: the plain container) with a backend (default: auto)."""
    from grader.backends import default
    from grader.core.plan import build_plan

    return (backend or default()).run(build_plan(policy))


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
