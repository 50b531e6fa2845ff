"""Graded tasks against real containers: every reference solution earns full marks, the naive setup does not,
and every over-grant of tests/fixtures/overgrants.json loses the points it loses on the static backend.

The least-* checks judge the scope a real run measures with its scope scan; a
run without a scope fails them ("could not be measured"), so these tests pass
only where the Docker backend measures the scope.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from grader.backends import get
from grader.backends.base import Backend
from grader.core.policy import load_policy
from grader.grading.grade import Grade, grade, grade_file
from grader.grading.tasks import all_tasks, load_task
from reference import solution_path

pytestmark = pytest.mark.docker

TASK_IDS = [t.id for t in all_tasks()]
CASES: list[dict[str, Any]] = json.loads((Path(__file__).parents[1] / "fixtures" / "overgrants.json").read_text())["cases"]
NAIVE = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}


@pytest.fixture(scope="module")
def backend(docker_client: Any) -> Backend:
    return get("docker")


@pytest.fixture(scope="module")
def solution_grades(backend: Backend) -> dict[str, Grade]:
    # Runs are independent (own networks, own world copy): grade them side by side.
    with ThreadPoolExecutor(max_workers=3) as pool:
        grades = pool.map(lambda t: grade_file(t, solution_path(t), backend), TASK_IDS)
        return dict(zip(TASK_IDS, grades))


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_solution_full_marks_with_docker(solution_grades: dict[str, Grade], task_id: str) -> None:
    g = solution_grades[task_id]
    assert g.backend == "docker"
    assert g.full_marks, g.feedback()


def test_naive_setup_loses_points_with_upload_evidence(backend: Backend) -> None:
    task = load_task("fix-the-naive-setup")
    g = grade(task, load_policy(NAIVE), backend)
    assert g.backend == "docker"
    assert 0 < g.score < g.max_score, g.feedback()
    leak = g.check("no-secret-leaves")
    assert not leak.passed
    # the evidence is what the simulated internet stored, not the static prediction
    assert "exfil-secret" in leak.message
    assert ("gist.github.com logged" in leak.message or "api.github.com logged" in leak.message), leak.message
    assert "with the canary of" in leak.message, leak.message
    assert "Fix:" in leak.message
    assert not g.check("build-works").passed


@pytest.fixture(scope="module")
def case_grades(backend: Backend) -> dict[str, Grade]:
    with ThreadPoolExecutor(max_workers=3) as pool:
        grades = pool.map(lambda c: grade(load_task(c["task"]), load_policy(c["policy"]), backend), CASES)
        return {c["id"]: g for c, g in zip(CASES, grades)}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_each_over_grant_costs_points_with_docker(case_grades: dict[str, Grade], case: dict[str, Any]) -> None:
    g = case_grades[case["id"]]
    assert g.backend == "docker"
    assert {c.id for c in g.checks if not c.passed} == set(case["fails"]), g.feedback()
    assert g.score == case["score"], g.feedback()
    text = " ".join(g.check(c).message for c in case["fails"])
    for fragment in case["says"]:
        assert fragment in text, (fragment, text)
