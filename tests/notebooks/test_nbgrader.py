"""nbgrader end to end, run by nbgrader itself on a temporary copy of the course.

generate_assignment → three students submit (the reference solution, the naive
setup, a syntactically broken policy) → autograde → generate_feedback →
export, and ``validate --invert`` on the released notebook. The grading
backend is static (fast, no Docker) unless ``SANDBOX_LAB_BACKEND`` says otherwise.
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
TASK = load_task("fix-the-naive-setup")
ASSIGNMENT = f"{TASK.order:02d}-task-{TASK.id}"
STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
MANUAL_POINTS = 2  # the "why" answer, graded by hand


def _nbgrader(course: Path, *args: str) -> str:
    env = {**os.environ, "SANDBOX_LAB_BACKEND": os.environ.get("SANDBOX_LAB_BACKEND", "static"), "PYTHONPATH": str(REPO)}
    with kernels.environment(env) as env:  # autograde's kernels over ipc: no TCP port to lose to another kernel
        proc = subprocess.run(
            [sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
            capture_output=True, text=True, timeout=600,
        )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{output[-3000:]}"
    return output


def _submit(course: Path, released: nbformat.NotebookNode, student: str, policy_source: str) -> None:
    nb = nbformat.from_dict(json.loads(json.dumps(released)))
    cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == f"{TASK.id}-policy"]
    assert len(cells) == 1 and STUB in cells[0].source
    cells[0].source = cells[0].source.replace(STUB, policy_source)
    folder = course / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / "task.ipynb")
    (folder / "timestamp.txt").write_text("2026-11-30 10:00:00.000000 UTC")


# What a learner's markup tries in the feedback HTML: each marker must never reach it.
HOSTILE_OUTPUT = ('<script>window.PWNED_SCRIPT = 1</script><img src="x" onerror="PWNED_ONERROR()">'
                  '<b>kept bold</b><a href="javascript:PWNED_HREF()">link</a>')
HOSTILE_MARKDOWN = 'My answer <img src=x onerror="PWNED_MARKDOWN()"> <script>PWNED_MD_SCRIPT()</script>'
MARKERS = ("PWNED_SCRIPT", "PWNED_ONERROR", "PWNED_HREF", "PWNED_MARKDOWN", "PWNED_MD_SCRIPT", "PWNED_PNG", "PWNED_JS")


def _submit_hostile(course: Path, released: nbformat.NotebookNode, policy_source: str) -> None:
    """A full-marks policy, plus a cell that displays script-carrying HTML, a crafted image and JavaScript, and a
    markdown answer with an onerror= attribute."""
    _submit(course, released, "hostile", policy_source)
    path = course / "submitted" / "hostile" / ASSIGNMENT / "task.ipynb"
    nb = nbformat.read(path, as_version=4)
    at = next(i for i, c in enumerate(nb.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == f"{TASK.id}-policy")
    nb.cells.insert(at + 1, nbformat.v4.new_code_cell(
        "from IPython.display import HTML, Javascript, display\n"
        f"display(HTML({HOSTILE_OUTPUT!r}))\n"
        "display({'image/png': 'AAAA\" onerror=\"PWNED_PNG()'}, raw=True)\n"
        "display(Javascript('PWNED_JS()'))"))
    nb.cells.insert(at + 2, nbformat.v4.new_markdown_cell(HOSTILE_MARKDOWN))
    nbformat.write(nb, path)


@pytest.fixture(scope="module")
def course(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("course")
    shutil.copy(REPO / "nbgrader_config.py", root)
    shutil.copytree(REPO / "lessons" / ASSIGNMENT, root / "lessons" / ASSIGNMENT)
    _nbgrader(root, "generate_assignment", ASSIGNMENT, "--force")
    released = nbformat.read(root / "release" / ASSIGNMENT / "task.ipynb", as_version=4)
    reference = solution_path(TASK.id).read_text().strip()
    _submit(root, released, "ref", f'policy_json = r"""{reference}"""')
    _submit(root, released, "naive", "# keeping the starter as it is")
    _submit(root, released, "broken", 'policy_json = \'{"filesystem": {"allowWrite": ["/app/workspace/build"]\'')
    _submit_hostile(root, released, f'policy_json = r"""{reference}"""')
    _nbgrader(root, "autograde", ASSIGNMENT, "--force", "--Autograde.create_student=True")  # no roster here
    _nbgrader(root, "generate_feedback", ASSIGNMENT, "--force")
    _nbgrader(root, "export")
    _nbgrader(root, "export", "--exporter=grader.grading.lms.CanvasExportPlugin", "--to", "canvas.csv")
    return root


def _scores(course: Path) -> dict[str, tuple[float, float]]:
    with (course / "grades.csv").open(newline="") as fh:
        return {r["student_id"]: (float(r["score"]), float(r["max_score"])) for r in csv.DictReader(fh) if r["assignment"] == ASSIGNMENT}


def test_released_notebook_has_no_solution_and_fails_every_test(course: Path) -> None:
    released = course / "release" / ASSIGNMENT / "task.ipynb"
    text = released.read_text()
    assert "solution_text(TASK.id)" not in text and "BEGIN HIDDEN TESTS" not in text
    assert "*.github.com" in text, "the learner starts from the naive setup"
    out = _nbgrader(course, "validate", "--invert", str(released))
    assert "Success! The notebook does not pass any tests." in out, out[-2000:]


def test_scores(course: Path) -> None:
    scores = _scores(course)
    full = float(TASK.max_score + MANUAL_POINTS)
    naive = grade(TASK, load_policy({"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}), StaticBackend())
    assert scores["ref"] == (float(TASK.max_score), full), "every autograded point; the why answer awaits a human"
    assert scores["naive"] == (float(naive.score), full)
    assert 0 < naive.score < TASK.max_score
    assert scores["broken"] == (0.0, full)


def test_feedback_names_the_exfiltration_path(course: Path) -> None:
    html = (course / "feedback" / "naive" / ASSIGNMENT / "task.html").read_text()
    assert "exfil-secret" in html
    assert "gist.github.com" in html
    assert "Fix:" in html
    broken = (course / "feedback" / "broken" / ASSIGNMENT / "task.html").read_text()
    assert "not a valid policy" in broken and "invalid JSON" in broken


def test_feedback_carries_no_learner_script(course: Path) -> None:
    """The hostile cell ran at autograde (its output is in the autograded notebook), yet none of its markup reaches
    the feedback HTML: no <script> of the learner, no on*= attribute, no javascript: URL; harmless markup stays."""
    from bs4 import BeautifulSoup

    autograded = (course / "autograded" / "hostile" / ASSIGNMENT / "task.ipynb").read_text()
    assert "PWNED_SCRIPT" in autograded and "PWNED_ONERROR" in autograded, "the attack must have run for the test to mean anything"
    html = (course / "feedback" / "hostile" / ASSIGNMENT / "task.html").read_text()
    soup = BeautifulSoup(html, "html.parser")
    # anywhere in the page: no learner script, no event handler, no javascript: URL, nothing in an attribute
    assert [s for s in soup.find_all("script") if "PWNED" in s.get_text()] == []
    assert [(tag.name, a) for tag in soup.find_all(True) for a, v in tag.attrs.items()
            if a.lower().startswith("on") or "javascript:" in str(v).lower() or "PWNED" in str(v)] == []
    # the cells' source is shown as escaped, highlighted code: leave it out, and no marker is left anywhere else
    for area in soup.find_all(class_=lambda c: bool(c) and "input" in c.lower()):
        area.decompose()
    rest = str(soup)
    for marker in MARKERS:
        assert marker not in rest, marker
    assert "<b>kept bold</b>" in rest and "My answer" in rest
    assert "removed from feedback" in rest
    assert _scores(course)["hostile"] == (float(TASK.max_score), float(TASK.max_score + MANUAL_POINTS))


def test_canvas_export_has_the_sample_files_columns_and_nbgraders_scores(course: Path) -> None:
    """nbgrader export with the Canvas plugin: Canvas's import columns (the sample file's), a Points Possible row,
    and every student's score as nbgrader's own grades.csv has it."""
    sample = list(csv.reader((REPO / "tests" / "fixtures" / "lms" / "canvas_gradebook_import.csv").read_text().splitlines()))
    rows = list(csv.reader((course / "canvas.csv").read_text().splitlines()))
    assert rows[0] == sample[0][:5] + [ASSIGNMENT]
    assert rows[1] == ["Points Possible", "", "", "", "", str(TASK.max_score + MANUAL_POINTS)]
    scores = {r[2]: float(r[5]) for r in rows[2:]}
    assert scores == {student: score for student, (score, _) in _scores(course).items()}
