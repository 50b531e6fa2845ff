"""The class report over an nbgrader course: a small gradebook.db written with nbgrader's API, autograded notebooks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pytest

from grader.cli import main as cli
from grader.grading.class_report import ClassReportError, build_report, render_html
from grader.grading.nbgrader_book import NbgraderCourseError, load_nbgrader_book
from grader.grading.tasks import load_task
from reference import solution_text

pytestmark = pytest.mark.filterwarnings("ignore::sqlalchemy.exc.SAWarning")  # nbgrader's add_submission autoflushes

REPO = Path(__file__).parents[3]
TASK = load_task("scope-secure-sandbox")
A = f"{TASK.order:02d}-task-{TASK.id}"
OPEN = '{"filesystem": {"allowRead": ["/"], "allowWrite": ["/"]}, "network": {"allowedDomains": ["example.com"]}}'
# what each student's autograded notebook holds (None: no autograded notebook) and the points GradePolicies set
STUDENTS: dict[str, tuple[str | None, str]] = {
    "alice": (f'policy_json = r"""{solution_text(TASK.id)}"""', "full"),
    "bob": (f'policy_json = r"""{solution_text(TASK.id)}"""', "full"),
    "dan": (f'policy_json = r"""{OPEN}"""', "half"),
    "ivy": ('policy_json = r"""{"filesystem": {"allowRead": ["/project"]"""', "zero"),  # broken JSON
    "olga": (None, "zero"),  # in the gradebook, but its autograded notebook is gone
}


def _policy_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == f"{TASK.id}-policy")


def _alembic_head() -> str:
    """The head of nbgrader's migrations, read in this process.

    A new gradebook.db is stamped with it; nbgrader asks a fresh ``alembic heads`` process for it, which imports
    nbgrader's server extension whole (4 s of CPU). The stamp written is the same.
    """
    import nbgrader
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", str(Path(nbgrader.__file__).parent / "alembic"))
    head = ScriptDirectory.from_config(config).get_current_head()
    assert head, "nbgrader ships no alembic migrations"
    return head


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The course, built once with nbgrader's own API."""
    import nbgrader.api
    from nbgrader.api import Gradebook

    tmp_path = tmp_path_factory.mktemp("built") / "course"
    tmp_path.mkdir()
    source = nbformat.read(REPO / "lessons" / A / "task.ipynb", as_version=4)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(nbgrader.api, "get_alembic_version", _alembic_head)
        gb = Gradebook("sqlite:///" + str(tmp_path / "gradebook.db"), "sandbox-lab")
    with gb:
        gb.add_assignment(A)
        gb.add_notebook("task", A)
        for check in TASK.checks:
            gb.add_grade_cell(TASK.grade_id(check.id), "task", A, max_score=check.points, cell_type="code")
        for student in [*STUDENTS, "carol"]:  # carol is on the roster and never submits
            gb.add_student(student)
        for student, (cell, points) in STUDENTS.items():
            gb.add_submission(A, student)
            for i, check in enumerate(TASK.checks):
                g = gb.find_grade(TASK.grade_id(check.id), "task", A, student)
                g.auto_score = {"full": check.points, "half": check.points * (i % 2), "zero": 0}[points]
            gb.db.commit()
            if cell is not None:
                nb = nbformat.from_dict(json.loads(json.dumps(source)))
                _policy_cell(nb).source = cell
                folder = tmp_path / "autograded" / student / A
                folder.mkdir(parents=True)
                nbformat.write(nb, folder / "task.ipynb")
    return tmp_path


@pytest.fixture()
def course(built: Path, tmp_path: Path) -> Path:
    """A copy of the course each test may change."""
    return Path(shutil.copytree(built, tmp_path / "course"))


def test_rows_checks_policies_and_missing_students(course: Path) -> None:
    read = load_nbgrader_book(course, A)
    rows = {r.student: r for r in read.book.rows}
    assert set(rows) == set(STUDENTS) and read.book.missing == ["carol"]
    assert {s: r.status for s, r in rows.items()} == {"alice": "ok", "bob": "ok", "dan": "ok", "ivy": "invalid",
                                                       "olga": "error"}
    assert rows["alice"].score == TASK.max_score and all(c.passed for c in rows["alice"].checks)
    assert [c.passed for c in rows["dan"].checks] == [bool(i % 2) for i in range(len(TASK.checks))]
    assert set(read.policies) == {"alice", "bob", "dan"}
    assert "invalid JSON" in (rows["ivy"].model_extra or {})["reason"]


def test_report_counts_the_missing_and_the_checks_of_graded_rows_only(course: Path) -> None:
    read = load_nbgrader_book(course, A)
    report = build_report(read.book, policies=read.policies)
    assert report.students == 6 and report.missing == ["carol"]
    assert report.counts == {"ok": 3, "invalid": 1, "error": 1, "missing": 1}
    rates = {c["id"]: (c["passed"], c["graded"]) for c in report.checks}
    assert rates == {c.id: (2 + i % 2, 3) for i, c in enumerate(TASK.checks)}
    assert [g["students"] for g in report.groups if g["kind"] == "identical"] == [["alice", "bob"]]
    assert report.leaks, "dan's open policy leaks"
    assert "1 not submitted (carol)" in render_html(report)


def test_a_policy_missing_from_the_handed_policies_is_not_analysed(course: Path) -> None:
    read = load_nbgrader_book(course, A)
    report = build_report(read.book, policies={k: v for k, v in read.policies.items() if k != "dan"})
    assert {"student": "dan", "why": "no policy was read from the graded submission"} in report.not_analysed


def test_an_unanswered_policy_cell_is_invalid_with_the_reason(course: Path) -> None:
    """A policy cell exactly as released (its nbgrader checksum unchanged) holds no answer: never graded ok."""
    from nbgrader.utils import compute_checksum

    path = course / "autograded" / "bob" / A / "task.ipynb"
    nb = nbformat.read(path, as_version=4)
    cell = _policy_cell(nb)
    cell.metadata["nbgrader"]["checksum"] = compute_checksum(cell)
    nbformat.write(nb, path)
    row = next(r for r in load_nbgrader_book(course, A).book.rows if r.student == "bob")
    assert row.status == "invalid" and "as it was released" in (row.model_extra or {})["reason"]


def test_unknown_assignment_no_gradebook_and_a_non_task_assignment_are_errors(course: Path, tmp_path: Path) -> None:
    with pytest.raises(NbgraderCourseError, match="no assignment 'nope' in the gradebook"):
        load_nbgrader_book(course, "nope")
    with pytest.raises(NbgraderCourseError, match="no gradebook.db"):
        load_nbgrader_book(tmp_path / "elsewhere", A)
    from nbgrader.api import Gradebook

    with Gradebook("sqlite:///" + str(course / "gradebook.db"), "sandbox-lab") as gb:
        gb.add_assignment("quiz")
        gb.add_notebook("quiz", "quiz")
        gb.add_grade_cell("q1", "quiz", "quiz", max_score=1, cell_type="code")
    with pytest.raises(NbgraderCourseError, match="no Sandbox Lab task"):
        load_nbgrader_book(course, "quiz")


def test_cli_reads_an_nbgrader_course(course: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report"
    assert cli.main(["class-report", "--nbgrader", str(course), "--assignment", A, "--out", str(out)]) == 0
    data = json.loads((out / "class-report.json").read_text())
    assert data["missing"] == ["carol"] and data["counts"]["missing"] == 1
    assert (out / "class-report.html").is_file()
    assert cli.main(["class-report", "--nbgrader", str(course), "--assignment", A]) == 0
    assert (course / "class-report" / A / "class-report.json").is_file()


@pytest.mark.parametrize("argv", [
    ["class-report"],
    ["class-report", "grades/", "--nbgrader", "course"],
    ["class-report", "--nbgrader", "course"],
    ["class-report", "grades/", "--assignment", "x"],
])
def test_cli_takes_one_source(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 2
    assert "give either GRADEBOOK" in capsys.readouterr().err
    assert issubclass(NbgraderCourseError, ClassReportError)
