"""The public API is exactly what ``grader.__all__`` says (after httpx's tests/test_exported_members.py).

Changing this list is changing the public API: do it on purpose, in the same
change as the code.
"""

from __future__ import annotations

import grader

PUBLIC = [
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


def test_all_is_pinned() -> None:
    assert sorted(grader.__all__) == sorted(PUBLIC)
    assert len(grader.__all__) == len(set(grader.__all__))


def test_every_public_name_exists() -> None:
    for name in grader.__all__:
        assert hasattr(grader, name), name


def test_public_callables_and_classes_are_documented() -> None:
    for name in grader.__all__:
        member = getattr(grader, name)
        if callable(member):
            assert (member.__doc__ or "").strip(), name


def test_every_submodule_lists_its_public_names() -> None:
    from grader.cli import main as cli
    from grader.realtools import export
    from grader.grading import report
    from grader import backends

    for module in (backends, cli, export, report):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"
