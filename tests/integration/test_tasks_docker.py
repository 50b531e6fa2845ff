"""Graded tasks against real containers: every reference solution earns full marks, the naive setup does not."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from grader.backends import get
from grader.backends.base import Backend
from grader.policy import load_policy
from grader.grading import Grade, grade, grade_file
from grader.tasks import all_tasks, load_task, solution_path

pytestmark = pytest.mark.docker

TASK_IDS = [t.id for t in all_tasks()]
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
    assert "received by" in leak.message and ("gist.github.com" in leak.message or "api.github.com" in leak.message), leak.message
    assert "Fix:" in leak.message
    assert not g.check("build-works").passed
