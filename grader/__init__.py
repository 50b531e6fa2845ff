"""Sandbox Lab: write a JSON sandbox policy for an AI agent's tool execution, then watch real attacks against it.

The public API, in the order data flows: ``load_policy`` → ``analyze``/``run_probes`` → ``grade``.
"""

from __future__ import annotations

from .analyzer import analyze, lint, predict
from .errors import (
    BackendError,
    DockerUnavailable,
    PolicyError,
    SandboxLabError,
    TaskError,
)
from .outcomes import ProbeOutcome, RunResult
from .policy import Policy, load_policy, policy_schema
from .probes import PROBES
from .world import load_world

__version__ = "0.1.0"

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
    "lint",
    "load_policy",
    "load_world",
    "policy_schema",
    "predict",
]
