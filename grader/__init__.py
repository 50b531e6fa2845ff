"""Sandbox Lab: write a JSON sandbox policy for an AI agent's tool execution, then watch real attacks against it.

The public API, in the order data flows: ``load_policy`` → ``analyze``/``run_probes`` → ``grade``.

Every name is imported on first use (PEP 562 ``__getattr__``), so importing a
submodule (``sandbox-lab --help`` imports ``grader.cli.main``) does not pay for
pydantic, the analyzer and the grader; ``from grader import grade`` works as before.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import warnings

from grader.core.version import __version__

# typing's own flag, without importing typing (or importlib.abc) with the package: a command handed to the warm
# engine imports this module and ``cli.client`` only (mypy reads the name as typing.TYPE_CHECKING)
TYPE_CHECKING = False
if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from importlib.abc import Loader, MetaPathFinder
    from typing import Any

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


# Where a module lived before the packages became the layers (issue 42), and where it lives now. A notebook saved
# before the move (a learner's copy, a released nbgrader assignment, a submission being autograded) still runs:
# ``from grader.lessons.widgets import PolicyEditor`` imports grader.notebook.widgets itself, the same module object.
_MOVED = {
    "grader.cli.core": "grader.plumbing.terminal",
    "grader.core.domains": "grader.protocol.domains",
    "grader.ctf.diagnosis": "grader.course.diagnosis",
    "grader.ctf.ladder": "grader.course.ladder",
    "grader.ctf.levels": "grader.course.levels",
    "grader.ctf.magic": "grader.notebook.magic",
    "grader.ctf.reveals": "grader.course.reveals",
    "grader.ctf.views": "grader.notebook.ladder_views",
    "grader.ctf.widgets": "grader.notebook.ladder_widgets",
    "grader.lessons.agent": "grader.course.agent",
    "grader.lessons.agent_stage": "grader.notebook.agent_stage",
    "grader.lessons.agent_views": "grader.notebook.agent_views",
    "grader.lessons.board": "grader.notebook.board",
    "grader.lessons.export_view": "grader.notebook.export_view",
    "grader.lessons.first_answer": "grader.course.first_answer",
    "grader.lessons.gaps": "grader.course.gaps",
    "grader.lessons.goal_views": "grader.notebook.goal_views",
    "grader.lessons.goals": "grader.course.goals",
    "grader.lessons.hole_hunt": "grader.course.hole_hunt",
    "grader.lessons.needed_jobs": "grader.course.needed_jobs",
    "grader.lessons.palette": "grader.notebook.palette",
    "grader.lessons.prediction": "grader.course.prediction",
    "grader.lessons.prestart": "grader.course.prestart",
    "grader.lessons.progress": "grader.course.progress",
    "grader.lessons.progress_sync": "grader.course.progress_sync",
    "grader.lessons.progress_views": "grader.notebook.progress_views",
    "grader.lessons.quiz": "grader.course.quiz",
    "grader.lessons.quiz_views": "grader.notebook.quiz_views",
    "grader.lessons.quiz_widgets": "grader.notebook.quiz_widgets",
    "grader.lessons.route": "grader.course.route",
    "grader.lessons.session_runs": "grader.course.session_runs",
    "grader.lessons.summary": "grader.notebook.summary",
    "grader.lessons.widget_base": "grader.notebook.widget_base",
    "grader.lessons.widgets": "grader.notebook.widgets",
    "grader.services.common": "grader.protocol.common",
    "grader.services.wire": "grader.protocol.wire",
}
_MOVED_PACKAGES = frozenset(old.rpartition(".")[0] for old in _MOVED if old.count(".") == 2) - {"grader.core", "grader.cli", "grader.services"}


if TYPE_CHECKING:
    class _FinderAndLoader(MetaPathFinder, Loader): ...
else:  # the import system asks for the methods alone: importlib.abc is not imported with the package
    _FinderAndLoader = object


class _MovedFinder(_FinderAndLoader):
    """Finds a module by its old name and hands back the module under its new one (no code of its own runs)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname in _MOVED_PACKAGES:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        if fullname in _MOVED:
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        if spec.name in _MOVED_PACKAGES:
            return None  # an empty package: its old modules are found by name, one by one
        warnings.warn(f"{spec.name} moved to {_MOVED[spec.name]}", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(_MOVED[spec.name])
        spec.loader_state = module.__spec__  # the import system sets __spec__ to ours: exec_module puts it back
        return module

    def exec_module(self, module: Any) -> None:
        real = getattr(module.__spec__, "loader_state", None)
        if real is not None:
            module.__spec__ = real


if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
    sys.meta_path.append(_MovedFinder())
