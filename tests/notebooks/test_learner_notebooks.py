"""Learners get learner notebooks: what `make lab` and Binder serve holds no answer.

``scripts/learner-lessons`` writes what nbgrader releases; this walks every
notebook it wrote and fails on anything that hands a learner the answers:
nbgrader's solution or hidden-test markers, a solution helper (there is none in
the package: ``grader.grading.notebook`` has no ``solution_text``), a reference policy
from ``solutions/`` in any spelling, or a filled graded answer
(``answer_x = "c"``). It also proves each check can fail, on a planted copy.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import grader.grading.notebook
import grader.grading.tasks
from grader.grading.autograde import literal_strings
from reference import SOLUTIONS

pytestmark = [pytest.mark.notebook]

REPO = Path(__file__).resolve().parents[2]
HELPERS = ("solution_text", "solution_path", "SANDBOX_LAB_SOLUTIONS", "solutions/")
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
REFERENCES = [json.loads(p.read_text()) for p in sorted(SOLUTIONS.glob("*.json"))]


def problems(folder: Path) -> list[str]:
    """Everything in the learner notebooks under ``folder`` that gives an answer away."""
    found = []
    notebooks = sorted(folder.rglob("*.ipynb"))
    if not notebooks:
        return [f"no notebooks under {folder}"]
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        name = path.relative_to(folder)
        for cell in nb.cells:
            src = cell.source
            found += [f"{name}: nbgrader marker {m!r}" for m in MARKERS if m in src]
            found += [f"{name}: solution helper {h!r}" for h in HELPERS if h in src]
            if cell.cell_type != "code":
                continue
            for var, value in literal_strings(src).items():
                if var.startswith("answer_") and value.strip() not in ("", "?"):
                    found.append(f"{name}: a filled answer {var} = {value!r}")
                try:
                    policy = json.loads(value)
                except ValueError:
                    continue
                if policy in REFERENCES:
                    found.append(f"{name}: a reference solution in {var}")
    return found


@pytest.fixture(scope="module")
def learner(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("learner") / "learner"
    env = {**os.environ, "PYTHON": sys.executable}
    proc = subprocess.run([str(REPO / "scripts" / "learner-lessons"), str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


# The one folder of the learner lab that is no lesson: the documents the lessons link to (lesson 02's
# link to docs/srt-differences.md lands there).
DOCS = "docs"


def _notebook_dirs(learner: Path) -> set[str]:
    return {p.name for p in learner.iterdir() if p.is_dir() and p.name != DOCS}


def test_every_lesson_and_task_is_there(learner: Path) -> None:
    sources = {p.parent.name for p in (REPO / "lessons").glob("*/*.ipynb")}
    assert _notebook_dirs(learner) == sources
    assert sorted(p.name for p in (learner / DOCS).iterdir()) == ["srt-differences.md"]
    released = [p for p in learner.rglob("*.md") if p.parent != learner / DOCS]
    assert not released, "no lesson source (it holds the solutions) is released"


def test_lesson_00_s_route_leads_to_every_notebook_of_the_learner_lab(learner: Path) -> None:
    """Every link of the route resolves where the learner lab has its folders (at its root, not under lessons/)."""
    nb = nbformat.read(learner / "00-start-here" / "start-here.ipynb", as_version=4)
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    links = re.findall(r"\]\((\.\./[^)]+\.ipynb)\)", text)
    assert len(links) == len(_notebook_dirs(learner))
    for link in links:
        assert (learner / "00-start-here" / link).resolve().is_file(), link
    assert "lessons/1" not in text  # a task folder is named as the learner lab has it


def test_no_learner_notebook_gives_an_answer_away(learner: Path) -> None:
    assert problems(learner) == []


def test_the_package_has_no_solution_helper() -> None:
    assert not hasattr(grader.grading.notebook, "solution_text")
    assert not hasattr(grader.grading.tasks, "solution_path")


@pytest.mark.parametrize("plant", [
    'policy_json = r"""{reference}"""',
    'from grader.grading.notebook import solution_text',
    'answer_etc_secrets = "c"',
    '### BEGIN SOLUTION\nx = 1\n### END SOLUTION',
])
def test_each_check_can_fail(learner: Path, tmp_path: Path, plant: str) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(learner, copy)
    path = next(copy.rglob("task.ipynb"))
    nb = nbformat.read(path, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(plant.format(reference=json.dumps(REFERENCES[0]))))
    nbformat.write(nb, path)
    assert problems(copy), plant
