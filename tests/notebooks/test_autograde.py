"""Autograding nobody can talk their way around: scores come from the grader's process, not the learner's kernel.

Each submission below attacks the notebook a different way. Whatever the
learner's kernel does, ``nbgrader autograde`` must give each exactly the score
its policy earns, as ``grade()`` computes it outside any notebook:

* ``redefine``: the naive policy, and ``assert_passed = assert_check = lambda *a, **k: None``
  (before this step existed, that one line gave every autograded cell its points);
* ``builtins``: the naive policy, and a cell that patches ``builtins.AssertionError``
  and replaces ``grader.grading.notebook`` in ``sys.modules`` with a module whose asserts pass;
* ``rewrite``: the naive policy in the cell, and the reference written into
  ``my_policy.json`` right after it (the kernel grades the file; the grader the cell);
* ``raises``: the reference policy, then the cell raises;
* ``nosave``: the reference policy, never saved to ``my_policy.json``;
* ``computed``: a policy built by code (no literal) and no submitted file: invalid, 0;
* ``deleted``: the policy cell deleted and a plain code cell in its place with the
  naive policy, ``save_policy`` and no-op asserts. The grader used to find no
  task, left the notebook to the kernel, and it scored 12/12; now the
  structure check zeroes every rubric cell the policy cell feeds, with why.

The grading backend is static here (fast); the Docker variant runs the
reference and the redefinition attack for real.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader.backends.static import StaticBackend
from grader.core.policy import load_policy
from grader.grading.grade import grade
from grader.grading.tasks import load_task
import kernels
from reference import solution_path

pytestmark = [pytest.mark.notebook, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
TASK = load_task("scope-secure-sandbox")
ASSIGNMENT = f"{TASK.order:02d}-task-{TASK.id}"
STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
NAIVE = json.dumps({"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}})
REFERENCE = solution_path(TASK.id).read_text().strip()
DELETE = "# (the policy cell deleted; this plain cell in its place)\n"

ATTACKS = {
    "reference": f'policy_json = r"""{REFERENCE}"""',
    "redefine": f'policy_json = r"""{NAIVE}"""\nassert_passed = assert_check = lambda *a, **k: None',
    "builtins": (
        f'policy_json = r"""{NAIVE}"""\n'
        "import builtins, sys, types\n"
        "class _Never(Exception):\n    pass\n"
        "builtins.AssertionError = _Never\n"
        "_fake = types.ModuleType('grader.grading.notebook')\n"
        "_fake.assert_passed = _fake.assert_check = lambda *a, **k: None\n"
        "sys.modules['grader.grading.notebook'] = _fake\n"
        "assert_passed = assert_check = _fake.assert_passed"
    ),
    "rewrite": (
        f'policy_json = r"""{NAIVE}"""\n'
        "save_policy('my_policy.json', policy_json)\n"
        f"open('my_policy.json', 'w').write(r'''{REFERENCE}''')\n"
        "STOP_SAVE = True"
    ),
    "raises": f'policy_json = r"""{REFERENCE}"""\nraise RuntimeError("the learner\'s cell fails after the policy")',
    "nosave": f'policy_json = r"""{REFERENCE}"""\nsave_policy = lambda *a, **k: None',
    "computed": 'policy_json = json.dumps({"filesystem": {"allowRead": ["/project/src"]}})\nimport json',
    "deleted": DELETE + f'policy_json = r"""{NAIVE}"""\nsave_policy("my_policy.json", policy_json)\n'
                        "assert_passed = assert_check = lambda *a, **k: None",
}


def _nbgrader(course: Path, *args: str, backend: str = "static") -> str:
    env = {**os.environ, "SANDBOX_LAB_AUTOGRADE_BACKEND": backend, "PYTHONPATH": str(REPO)}
    env.pop("SANDBOX_LAB_BACKEND", None)
    with kernels.environment(env) as env:  # autograde's kernels over ipc: no TCP port to lose to another kernel
        proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True, text=True, timeout=900)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{output[-3000:]}"
    return output


def _submit(course: Path, released: nbformat.NotebookNode, student: str, source: str) -> None:
    nb = nbformat.from_dict(json.loads(json.dumps(released)))
    cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == f"{TASK.id}-policy"]
    assert len(cells) == 1 and STUB in cells[0].source
    cell = cells[0]
    if source.startswith(DELETE):
        nb.cells[nb.cells.index(cell)] = nbformat.v4.new_code_cell(source)
        source = ""
    # the learner replaces the whole cell (its starter assignment and the save call) with their code
    cell.source = source + ("" if not source or "save_policy" in source or "raise" in source.splitlines()[-1] else "\nsave_policy('my_policy.json', policy_json)")
    folder = course / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / "task.ipynb")
    (folder / "timestamp.txt").write_text("2026-11-30 10:00:00.000000 UTC")


def _course(root: Path, students: dict[str, str], backend: str) -> Path:
    shutil.copy(REPO / "nbgrader_config.py", root)
    shutil.copytree(REPO / "lessons" / ASSIGNMENT, root / "lessons" / ASSIGNMENT)
    _nbgrader(root, "generate_assignment", ASSIGNMENT, "--force", backend=backend)
    released = nbformat.read(root / "release" / ASSIGNMENT / "task.ipynb", as_version=4)
    for student, source in students.items():
        _submit(root, released, student, source)
    _nbgrader(root, "autograde", ASSIGNMENT, "--force", "--Autograde.create_student=True", backend=backend)  # no roster here
    _nbgrader(root, "generate_feedback", ASSIGNMENT, "--force", backend=backend)
    _nbgrader(root, "export", backend=backend)
    return root


def _scores(course: Path) -> dict[str, float]:
    with (course / "grades.csv").open(newline="") as fh:
        return {r["student_id"]: float(r["score"]) for r in csv.DictReader(fh) if r["assignment"] == ASSIGNMENT}


def _earned(policy_text: str) -> int:
    return grade(TASK, load_policy(policy_text), StaticBackend()).score


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _course(tmp_path_factory.mktemp("course"), ATTACKS, "static")


def test_each_submission_gets_exactly_what_its_policy_earns(course: Path) -> None:
    scores = _scores(course)
    full, naive = _earned(REFERENCE), _earned(NAIVE)
    assert full == TASK.max_score and naive < full
    expected = {"reference": full, "redefine": naive, "builtins": naive, "rewrite": naive, "raises": full, "nosave": full, "computed": 0,
                "deleted": 0}
    assert scores == {k: float(v) for k, v in expected.items()}


def test_feedback_says_who_graded_and_how(course: Path) -> None:
    html = (course / "feedback" / "redefine" / ASSIGNMENT / "task.html").read_text()
    assert "Graded by Sandbox Lab outside your kernel" in html
    assert "predicted" in html  # the static backend says so
    assert "exfil-secret" in html and "Fix:" in html
    computed = (course / "feedback" / "computed" / ASSIGNMENT / "task.html").read_text()
    assert "string literal" in computed
    deleted = (course / "feedback" / "deleted" / ASSIGNMENT / "task.html").read_text()
    assert f"{TASK.id}-policy' is missing" in deleted.replace("&#39;", "'") and "differs from the released assignment" in deleted


@pytest.mark.docker
def test_docker_grades_the_reference_in_full_and_the_redefinition_attacks_at_zero(tmp_path: Path) -> None:
    course = _course(tmp_path, {k: ATTACKS[k] for k in ("reference", "redefine", "deleted")}, "docker")
    scores = _scores(course)
    assert scores["reference"] == float(TASK.max_score)
    assert scores["redefine"] == float(_earned(NAIVE))
    assert scores["deleted"] == 0.0
    assert _earned(NAIVE) == 0, "the naive setup earns nothing on this task"
    html = (course / "feedback" / "reference" / ASSIGNMENT / "task.html").read_text()
    assert "ran in Docker" in html


LESSON = "05-check-yourself"
RIGHT = 'answer_etc_secrets = "c"\nanswer_standard_docker = "b"'
FAKED = (  # wrong letters, and a str whose strip() equals anything: the old hidden test passed it
    "class _Any(str):\n"
    "    def strip(self):\n"
    "        return self\n"
    "    def lower(self):\n"
    "        return self\n"
    "    def __eq__(self, other):\n"
    "        return True\n"
    "    __hash__ = str.__hash__\n"
    'answer_etc_secrets = _Any("a")\n'
    'answer_standard_docker = "a"'
)


def test_lesson_letters_are_checked_outside_the_kernel(tmp_path: Path) -> None:
    root = tmp_path
    shutil.copy(REPO / "nbgrader_config.py", root)
    shutil.copytree(REPO / "lessons" / LESSON, root / "lessons" / LESSON, ignore=shutil.ignore_patterns("*.md"))
    _nbgrader(root, "generate_assignment", LESSON, "--force")
    released = nbformat.read(root / "release" / LESSON / "check-yourself.ipynb", as_version=4)
    for student, source in {"right": RIGHT, "faked": FAKED}.items():
        nb = nbformat.from_dict(json.loads(json.dumps(released)))
        cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "l05-answers")
        cell.source = source
        folder = root / "submitted" / student / LESSON
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / "check-yourself.ipynb")
    _nbgrader(root, "autograde", LESSON, "--force", "--Autograde.create_student=True")  # no roster here
    _nbgrader(root, "export")
    with (root / "grades.csv").open(newline="") as fh:
        scores = {r["student_id"]: float(r["score"]) for r in csv.DictReader(fh) if r["assignment"] == LESSON}
    assert scores == {"right": 2.0, "faked": 0.0}
