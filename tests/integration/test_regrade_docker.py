"""A regrade regrades: a class graded static, then the same ``--out`` with Docker, runs again in Docker.

The journal of ``grade_batch`` reuses a stored grade only under the same Sandbox
Lab version, rubric, world, backend and policy bytes (tests/unit/grading/test_batch.py
covers each of them without Docker); here the backend change is made for real.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grader.backends.static import StaticBackend
from grader.grading.batch import grade_batch
from grader.grading.tasks import load_task
from reference import solution_path

pytestmark = [pytest.mark.docker]

TASK = load_task("fix-the-naive-setup")
STUDENTS = ["ada", "ben", "cy", "dee", "eve"]


def _five(folder: Path) -> Path:
    folder.mkdir()
    solution = json.loads(solution_path(TASK.id).read_text())
    for i, student in enumerate(STUDENTS):
        (folder / f"{student}.json").write_text(json.dumps(solution, indent=i))  # five files, one meaning
    return folder


def test_a_static_gradebook_is_regraded_by_docker_row_by_row(tmp_path: Path, docker_backend: Any) -> None:
    subs, out = _five(tmp_path / "subs"), tmp_path / "out"
    static = grade_batch(TASK, subs, StaticBackend(), out=out)
    assert [r.backend for r in static.rows] == ["static"] * 5

    book = grade_batch(TASK, subs, docker_backend, out=out)
    assert book.resumed == 0 and book.runs >= 1, book.summary()
    assert [r.student for r in book.rows] == STUDENTS
    assert [r.backend for r in book.rows] == ["docker"] * 5, "every row must come from a Docker run"
    # the solution scores full marks in both: nothing to report as changed
    assert all(r.score == TASK.max_score for r in book.rows) and book.changes == ()
    written = json.loads((out / "gradebook.json").read_text())
    assert written["backend"] == "docker" and {r["backend"] for r in written["rows"]} == {"docker"}

    again = grade_batch(TASK, subs, docker_backend, out=out)
    assert again.resumed == 5 and again.runs == 0
