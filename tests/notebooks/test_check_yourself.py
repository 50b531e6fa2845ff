"""Lesson 05 as a learner gets it (released by nbgrader): Run All never stops, and a wrong answer shows why.

The released notebook is run top to bottom with nothing answered: no cell
errors, and each graded check says "not answered yet". Run again with two
wrong letters, each check shows its verdict, the reasoning and the course
source's explanation, and the first attempts are on the progress board. Then
``nbgrader autograde`` scores the released notebook as submitted untouched (0),
the letters written in the key's branch instead of the answers (0: autograde
reads the top-level letters, as the lesson does) and the right letters (2).
Last, the gaming attempt: wrong letters, the key read, the right letters
written and run again, submitted with the outputs: 0, because the first answer
is the one graded (``course.first_answer``); right the first time: 2.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import kernels

nbformat = pytest.importorskip("nbformat", reason="the notebook stack is in the 'lab' extra")
nbclient = pytest.importorskip("nbclient", reason="the notebook stack is in the 'lab' extra")

pytestmark = [
    pytest.mark.notebook,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning:zmq.*"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ipykernel.*"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:nbclient.*"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning:nbclient.*"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]

REPO = Path(__file__).resolve().parents[2]
LESSON = "05-check-yourself"
ANSWERS = "l05-answers"
RIGHT = 'answer_etc_secrets = "c"\nanswer_standard_docker = "b"'


def _nbgrader(course: Path, *args: str) -> str:
    env = {**os.environ, "SANDBOX_LAB_AUTOGRADE_BACKEND": "static", "SANDBOX_LAB_BACKEND": "static", "PYTHONPATH": str(REPO)}
    with kernels.environment(env) as env:  # autograde's kernels over ipc: no TCP port to lose to another kernel
        proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{(proc.stdout + proc.stderr)[-3000:]}"
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("course")
    shutil.copy(REPO / "nbgrader_config.py", root)
    shutil.copytree(REPO / "lessons" / LESSON, root / "lessons" / LESSON, ignore=shutil.ignore_patterns("*.md"))
    _nbgrader(root, "generate_assignment", LESSON, "--force")
    return root


def _released(course: Path) -> Any:
    return nbformat.read(course / "release" / LESSON / "check-yourself.ipynb", as_version=4)


def _answer(nb: Any, source: str) -> Any:
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == ANSWERS)
    cell.source = source
    return nb


def _run(nb: Any, cwd: Path, monkeypatch: pytest.MonkeyPatch, progress: Path) -> tuple[list[str], list[Any]]:
    monkeypatch.setenv("SANDBOX_LAB_BACKEND", "static")
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(progress))
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the kernel imports this checkout's grader, whatever the venv points at
    kernels.execute(nb, cwd)
    texts, errors = [], []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "error":
                errors.append(f"{o['ename']}: {o['evalue']}")
            texts.append(o.get("text", ""))
            texts.extend(v for v in o.get("data", {}).values() if isinstance(v, str))
    return texts, errors


def test_the_released_answers_cell_starts_empty_with_nothing_else_to_write(course: Path) -> None:
    """The key is removed with no stub (grader/grading/release.py): no "# YOUR CODE HERE" where nothing is to be written."""
    cell = next(c for c in _released(course).cells if c.metadata.get("nbgrader", {}).get("grade_id") == ANSWERS)
    assert cell.source == ('answer_etc_secrets = ""      # the letter you chose, between the quotes, e.g. "a"\n'
                           'answer_standard_docker = ""  # the letter you chose, between the quotes')


def test_run_all_with_nothing_answered_never_stops(course: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = _released(course)
    texts, errors = _run(nb, course / "release" / LESSON, monkeypatch, tmp_path / "progress.json")
    assert errors == []
    assert "\n".join(texts).count("not answered yet") == 2
    last = [c for c in nb.cells if c.cell_type == "code"][-1]
    assert "finish_lesson" in last.source and last.outputs, "Run All reached the last cell"
    assert not (tmp_path / "progress.json").exists() or '"quiz:check-' not in (tmp_path / "progress.json").read_text()


def test_answering_wrong_shows_why_and_records_the_first_attempt(course: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = _answer(_released(course), 'answer_etc_secrets = "a"\nanswer_standard_docker = "c"')
    progress = tmp_path / "progress.json"
    texts, errors = _run(nb, course / "release" / LESSON, monkeypatch, progress)
    assert errors == []
    joined = "\n".join(texts)
    assert joined.count("Not quite") == 2 and joined.count("The course source on this idea") >= 2
    assert "POST them to a public GitHub Gist" in joined and "default bridge networking" in joined
    first = json.loads(progress.read_text())["first"]
    assert first["quiz:check-etc-secrets-github"]["result"] == "wrong" and first["quiz:check-standard-docker"]["result"] == "wrong"


def _submit_and_grade(course: Path, students: dict[str, Any]) -> dict[str, float]:
    """Each student's notebook submitted, autograded and exported by nbgrader: student → score."""
    for student, nb in students.items():
        folder = course / "submitted" / student / LESSON
        folder.mkdir(parents=True, exist_ok=True)  # it may hold files submitted beside the notebook already
        nbformat.write(nb, folder / "check-yourself.ipynb")
    _nbgrader(course, "autograde", LESSON, "--force", "--Autograde.create_student=True")  # no roster here
    _nbgrader(course, "export")
    with (course / "grades.csv").open(newline="") as fh:
        return {r["student_id"]: float(r["score"]) for r in csv.DictReader(fh) if r["assignment"] == LESSON}


def test_autograde_scores_the_top_level_letters_only(course: Path) -> None:
    released = _released(course)
    cell = next(c for c in released.cells if c.metadata.get("nbgrader", {}).get("grade_id") == ANSWERS)
    in_branch = cell.source + '\nif False:\n    answer_etc_secrets = "c"\n    answer_standard_docker = "b"'  # never run
    students = {"untouched": released, "branch": _answer(released, in_branch),
                "right": _answer(released, 'answer_etc_secrets = "c"\nanswer_standard_docker = "b"')}
    scores = _submit_and_grade(course, students)
    assert scores == {"untouched": 0.0, "branch": 0.0, "right": 2.0}


def test_a_letter_changed_after_the_key_showed_scores_nothing(course: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gaming attempt: answer wrong, read the key the lesson shows, write the right letters, run again, submit.
    The first answer is the one graded (``course.first_answer``): 0. A learner right the first time keeps the points."""
    cwd = course / "release" / LESSON
    gamer = _answer(_released(course), 'answer_etc_secrets = "a"\nanswer_standard_docker = "c"')
    _run(gamer, cwd, monkeypatch, tmp_path / "gamer.json")
    gamer = _answer(gamer, RIGHT)  # the key seen: the letters changed, and the notebook run again
    texts, errors = _run(gamer, cwd, monkeypatch, tmp_path / "gamer.json")
    assert errors == [] and "\n".join(texts).count("Right") >= 2  # the lesson now says "Right", and that the first counts
    honest = _answer(_released(course), RIGHT)
    _run(honest, cwd, monkeypatch, tmp_path / "honest.json")
    scores = _submit_and_grade(course, {"gamer": gamer, "honest": honest})
    assert scores["gamer"] == 0.0 and scores["honest"] == 2.0, scores
    graded_nb = nbformat.read(course / "autograded" / "gamer" / LESSON / "check-yourself.ipynb", as_version=4)
    said = [o.get("evalue", "") for c in graded_nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert sum("your first answer was not the right option" in e for e in said) == 2, said


def test_in_a_class_the_first_answer_is_graded_from_the_signed_record(course: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A class (``course.first_answer``): each kernel has its learner's key, nbgrader the class secret. The check
    withholds the key; the gamer answers wrong, writes the right letters, runs again, clears every output and
    submits with the first-answers file: 0. A learner who deleted the file (and the outputs): 0, saying why. A
    learner who copied an honest classmate's file: 0. The honest learner, right first: 2."""
    from grader.course.first_answer import CLASS_KEY_ENV, CLASS_SECRET_ENV, LEDGER, learner_key

    secret = "the-class-secret"
    students: dict[str, Any] = {}
    folders: dict[str, Path] = {}
    for name, first in (("c-gamer", 'answer_etc_secrets = "a"\nanswer_standard_docker = "c"'), ("c-honest", RIGHT),
                        ("c-deleter", 'answer_etc_secrets = "a"\nanswer_standard_docker = "c"'), ("c-copier", RIGHT)):
        folder = tmp_path / name
        shutil.copytree(course / "release" / LESSON, folder)  # each learner's own copy of the assignment
        monkeypatch.setenv(CLASS_KEY_ENV, learner_key(secret, name))
        nb = _answer(_released(course), first)
        texts, errors = _run(nb, folder, monkeypatch, tmp_path / f"{name}.json")
        assert errors == [] and "Model answer" not in "\n".join(texts) and "recorded" in "\n".join(texts)
        if name != "c-honest":
            nb = _answer(nb, RIGHT)  # the right letters, from elsewhere; run again
            _run(nb, folder, monkeypatch, tmp_path / f"{name}.json")
        for cell in nb.cells:  # and every output cleared before submitting
            if cell.cell_type == "code":
                cell.outputs = []
        students[name], folders[name] = nb, folder
    (folders["c-deleter"] / LEDGER).unlink()
    shutil.copy(folders["c-honest"] / LEDGER, folders["c-copier"] / LEDGER)
    for name, folder in folders.items():
        dest = course / "submitted" / name / LESSON
        dest.mkdir(parents=True)
        if (folder / LEDGER).exists():  # nbgrader submit takes the assignment folder whole
            shutil.copy(folder / LEDGER, dest / LEDGER)
    monkeypatch.setenv(CLASS_SECRET_ENV, secret)
    scores = _submit_and_grade(course, students)
    assert {k: scores[k] for k in students} == {"c-gamer": 0.0, "c-honest": 2.0, "c-deleter": 0.0, "c-copier": 0.0}, scores

    def said(name: str) -> str:
        nb = nbformat.read(course / "autograded" / name / LESSON / "check-yourself.ipynb", as_version=4)
        return "\n".join(o.get("evalue", "") for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error")

    assert said("c-gamer").count("first answer was not the right option") == 2
    assert said("c-deleter").count("no trustworthy first answer: no record of it was submitted") == 2
    assert said("c-copier").count("made for another learner") == 2
