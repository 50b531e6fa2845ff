"""Tampered submissions, run through ``nbgrader autograde`` itself: each scores exactly what its policy earns, or 0 with a reason.

One class of task 11 (where the naive setup earns some points but not all), on
the static backend. Every tampered submission carries the *reference* policy,
so a deviation that fails open shows up as points it must not have. Each one's
expected score is computed here from ``grade()`` and the released rubric: the
policy's points minus the points of every rubric cell the deviation affects.

* ``a-dup``: a rubric cell duplicated (same grade_id twice). It sorts first: it
  used to abort ``nbgrader autograde`` for every student after it.
* ``deleted``: the issue's attack: the policy cell deleted, a plain code cell in
  its place with the naive policy, ``save_policy`` and no-op asserts (it used to
  get every autograded point).
* ``points``: a rubric cell's points raised in its metadata.
* ``markdown``: a rubric cell turned into markdown (nbgrader turns it back into a
  code cell with no outputs, which scores full points).
* ``moved``: the policy cell moved below the rubric cells.
* ``renamed``: the policy cell's grade_id changed.
* ``unlocked``: a rubric cell unlocked and edited to ``pass``.
* ``noschema``: a rubric cell's ``schema_version`` removed (nbgrader aborts the
  whole class on an old schema); nothing graded changed, so full marks.
* ``link``: no literal in the policy cell and ``my_policy.json`` a symbolic link
  to a classmate's file (the reference).
* ``dir``: no literal and ``my_policy.json`` a directory.
* ``ref`` and ``naive``: honest submissions, full marks and the naive score.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import nbformat
import pytest

from grader.backends.static import StaticBackend
from grader.grading.grade import grade
from grader.core.policy import load_policy
from grader.grading.tasks import load_task
import kernels
from reference import solution_path

pytestmark = [pytest.mark.notebook, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TASK = load_task("fix-the-naive-setup")
ASSIGNMENT = f"{TASK.order:02d}-task-{TASK.id}"
POLICY = f"{TASK.id}-policy"
NAIVE = json.dumps({"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}})
REFERENCE = solution_path(TASK.id).read_text().strip()
WRITE = f'policy_json = r"""{REFERENCE}"""\nsave_policy("my_policy.json", policy_json)'
COMPUTED = 'import json\npolicy_json = json.dumps({"filesystem": {}})  # no literal: the submitted file counts'
RUBRIC = [TASK.grade_id(c.id) for c in TASK.checks]
FIRST, SECOND = RUBRIC[0], RUBRIC[1]

Nb = nbformat.NotebookNode


def _gid(cell: Nb) -> str:
    return str(cell.metadata.get("nbgrader", {}).get("grade_id", ""))


def _at(nb: Nb, gid: str) -> int:
    return next(i for i, c in enumerate(nb.cells) if _gid(c) == gid)


def _answer(nb: Nb, source: str = WRITE) -> None:
    nb.cells[_at(nb, POLICY)].source = source


def ref(nb: Nb) -> None:
    _answer(nb)


def naive(nb: Nb) -> None:
    _answer(nb, f'policy_json = r"""{NAIVE}"""\nsave_policy("my_policy.json", policy_json)')


def a_dup(nb: Nb) -> None:
    _answer(nb)
    i = _at(nb, FIRST)
    copy = nbformat.from_dict(json.loads(json.dumps(nb.cells[i])))
    copy["id"] = "a-copy"
    nb.cells.insert(i + 1, copy)


def deleted(nb: Nb) -> None:
    nb.cells[_at(nb, POLICY)] = nbformat.v4.new_code_cell(
        f'policy_json = r"""{NAIVE}"""\nsave_policy("my_policy.json", policy_json)\n'
        "assert_passed = assert_check = lambda *a, **k: None"
    )


def points(nb: Nb) -> None:
    _answer(nb)
    nb.cells[_at(nb, FIRST)].metadata.nbgrader["points"] = 100


def markdown(nb: Nb) -> None:
    _answer(nb)
    i = _at(nb, SECOND)
    old = nb.cells[i]
    md = nbformat.v4.new_markdown_cell(old.source)
    md.metadata = old.metadata
    nb.cells[i] = md


def moved(nb: Nb) -> None:
    _answer(nb)
    cell = nb.cells.pop(_at(nb, POLICY))
    nb.cells.insert(_at(nb, RUBRIC[-1]) + 1, cell)


def renamed(nb: Nb) -> None:
    _answer(nb)
    nb.cells[_at(nb, POLICY)].metadata.nbgrader["grade_id"] = f"{TASK.id}-my-policy"


def unlocked(nb: Nb) -> None:
    _answer(nb)
    cell = nb.cells[_at(nb, FIRST)]
    cell.metadata.nbgrader["locked"] = False
    cell.source = "pass"


def noschema(nb: Nb) -> None:
    _answer(nb)
    del nb.cells[_at(nb, FIRST)].metadata.nbgrader["schema_version"]


def link(nb: Nb) -> None:
    _answer(nb, COMPUTED)


def dir_(nb: Nb) -> None:
    _answer(nb, COMPUTED)


STUDENTS: dict[str, Callable[[Nb], None]] = {
    "a-dup": a_dup, "deleted": deleted, "points": points, "markdown": markdown, "moved": moved, "renamed": renamed,
    "unlocked": unlocked, "noschema": noschema, "link": link, "dir": dir_, "ref": ref, "naive": naive,
}


def _earned(policy_text: str, zeroed: set[str]) -> int:
    g = grade(TASK, load_policy(policy_text), StaticBackend())
    return sum(c.points for c in g.checks if TASK.grade_id(c.id) not in zeroed)


def _nbgrader(course: Path, *args: str) -> str:
    env = {**os.environ, "SANDBOX_LAB_AUTOGRADE_BACKEND": "static", "PYTHONPATH": str(REPO)}
    env.pop("SANDBOX_LAB_BACKEND", None)
    with kernels.environment(env) as env:  # autograde's kernels over ipc: no TCP port to lose to another kernel
        proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True, text=True, timeout=900)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{output[-3000:]}"
    return output


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("course")
    shutil.copy(REPO / "nbgrader_config.py", root)
    shutil.copytree(REPO / "lessons" / ASSIGNMENT, root / "lessons" / ASSIGNMENT)
    _nbgrader(root, "generate_assignment", ASSIGNMENT, "--force")
    released = nbformat.read(root / "release" / ASSIGNMENT / "task.ipynb", as_version=4)
    for student, tamper in STUDENTS.items():
        nb = nbformat.from_dict(json.loads(json.dumps(released)))
        tamper(nb)
        folder = root / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / "task.ipynb")
    (root / "submitted" / "ref" / ASSIGNMENT / "my_policy.json").write_text(REFERENCE)
    (root / "submitted" / "link" / ASSIGNMENT / "my_policy.json").symlink_to(root / "submitted" / "ref" / ASSIGNMENT / "my_policy.json")
    (root / "submitted" / "dir" / ASSIGNMENT / "my_policy.json").mkdir()
    log = _nbgrader(root, "autograde", ASSIGNMENT, "--force", "--Autograde.create_student=True")  # no roster here
    _nbgrader(root, "generate_feedback", ASSIGNMENT, "--force")
    _nbgrader(root, "export")
    return root, log


def _scores(course: Path) -> dict[str, float]:
    with (course / "grades.csv").open(newline="") as fh:
        return {r["student_id"]: float(r["score"]) for r in csv.DictReader(fh) if r["assignment"] == ASSIGNMENT}


def _structure(course: Path, student: str) -> dict[str, object]:
    nb = json.loads((course / "autograded" / student / ASSIGNMENT / "task.ipynb").read_text())
    return dict(nb["metadata"]["sandbox_lab"]["structure"])


def test_each_tampering_scores_what_its_policy_earns_minus_what_it_affects(course: tuple[Path, str]) -> None:
    root, _ = course
    everything = set(RUBRIC)
    expected = {
        "ref": _earned(REFERENCE, set()),
        "naive": _earned(NAIVE, set()),
        "a-dup": _earned(REFERENCE, {FIRST}),
        "deleted": 0,
        "points": _earned(REFERENCE, {FIRST}),
        "markdown": _earned(REFERENCE, {SECOND}),
        "moved": _earned(REFERENCE, everything),
        "renamed": 0,
        "unlocked": _earned(REFERENCE, {FIRST}),
        "noschema": _earned(REFERENCE, set()),
        "link": 0,
        "dir": 0,
    }
    assert expected["ref"] == TASK.max_score and 0 < expected["naive"] < TASK.max_score
    assert 0 < expected["a-dup"] < TASK.max_score and 0 < expected["markdown"] < TASK.max_score
    assert _scores(root) == {k: float(v) for k, v in expected.items()}, "every student graded, none more than earned"


def test_the_deleted_policy_cell_attack_scores_zero_and_says_why(course: tuple[Path, str]) -> None:
    root, log = course
    html = (root / "feedback" / "deleted" / ASSIGNMENT / "task.html").read_text().replace("&#39;", "'")
    assert f"cell '{POLICY}' is missing" in html
    assert "differs from the released assignment" in html
    found = _structure(root, "deleted")
    assert found["checked"] is True
    [dev] = found["deviations"]  # type: ignore[misc]
    assert dev["grade_id"] == POLICY and set(dev["affects"]) == set(RUBRIC)
    assert "Sandbox Lab: deleted/" in log and "0 points on:" in log


@pytest.mark.parametrize(("student", "cell", "words"), [
    ("a-dup", FIRST, "appears 2 times"),
    ("points", FIRST, '"points": 100'),
    ("markdown", SECOND, "is a markdown cell"),
    ("moved", POLICY, "was moved"),
    ("renamed", POLICY, "is missing"),
    ("unlocked", FIRST, '"locked": False'),
])
def test_each_deviation_is_listed_for_the_instructor_and_in_the_feedback(course: tuple[Path, str], student: str, cell: str, words: str) -> None:
    root, log = course
    devs = _structure(root, student)["deviations"]
    assert any(d["grade_id"] == cell and words in d["problem"] for d in devs), devs  # type: ignore[attr-defined]
    assert f"Sandbox Lab: {student}/{ASSIGNMENT}/task differs" in log
    html = (root / "feedback" / student / ASSIGNMENT / "task.html").read_text()
    assert "differs from the released assignment" in html


def test_honest_submissions_have_no_deviation(course: tuple[Path, str]) -> None:
    root, log = course
    for student in ("ref", "naive", "noschema", "link", "dir"):
        assert _structure(root, student) == {"checked": True, "deviations": []}
        assert f"Sandbox Lab: {student}/" not in log.replace(f"Sandbox Lab graded {student}/", "")


@pytest.mark.parametrize(("student", "words"), [("link", "symbolic link"), ("dir", "not a regular file")])
def test_an_unsafe_policy_file_is_refused_with_the_reason(course: tuple[Path, str], student: str, words: str) -> None:
    root, _ = course
    html = (root / "feedback" / student / ASSIGNMENT / "task.html").read_text()
    assert words in html
