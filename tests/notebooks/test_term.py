"""An instructor's whole term through nbgrader's exchange, graded in Docker: one assignment, a roster of four.

Every step is nbgrader's own command (run by nbgrader itself, ``python -m
nbgrader``), each account a HOME of its own whose ``~/.jupyter/nbgrader_config.py``
names the shared exchange (``c.Exchange.root``, a temporary directory) and the
course, as ``/etc/jupyter/nbgrader_config.py`` does on a shared machine. nbgrader
names a student by the OS account (``nbgrader.utils.get_username``: the uid's
name from ``pwd``, ``JUPYTERHUB_USER`` for ``jovyan``), unless
``c.CourseDirectory.student_id`` says otherwise: each student's config sets it,
standing in for an account of their own.

The instructor imports the roster (``nbgrader db student import``), sets the due
date (``nbgrader db assignment add --duedate``), generates and releases the
assignment; each student fetches, completes and submits it:

- **alice** submits twice, a weak policy and then the reference: the last
  submission counts (collect takes the newest by its timestamp), full marks;
- **bob** submits the reference after the due date: nbgrader's configured late
  penalty ("zero", ``nbgrader_config.py``) takes his whole score. Time travel:
  bob's ``submit`` runs with nbgrader's ``Exchange.timestamp_format`` fixed to
  a moment two days after the due date, as if his clock said so; nbgrader's own
  submit writes that time into the exchange folder's name and ``timestamp.txt``;
- **carol** never submits: 0 in the export, *missing* in the class report;
- **erin** submits late, then edits ``timestamp.txt`` in her exchange copy to
  look on time (nbgrader's collect copies that file, and autograde takes the
  submission time from it; the folder name only orders submissions): see
  ``test_a_forged_timestamp_is_trusted_by_nbgrader``;
- **mallory**, not on the roster, submits too: autograde refuses her
  (``c.Autograde.create_student = False``), and the gradebook never holds her.

Then collect, autograde (in Docker, the project's preprocessors), generate and
release feedback, each student fetches it, export (nbgrader's CSV and Canvas's)
and ``sandbox-lab class-report --nbgrader``. Needs Docker: skipped locally
without an engine, failed with ``CI`` set.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import nbformat
import pytest

from grader.grading.tasks import load_task
import kernels
from reference import solution_text

pytestmark = [pytest.mark.notebook, pytest.mark.slow, pytest.mark.docker]

REPO = Path(__file__).resolve().parents[2]
TASK = load_task("scope-secure-sandbox")
ASSIGNMENT = f"{TASK.order:02d}-task-{TASK.id}"
COURSE_ID = "sandbox-lab"
STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
MANUAL_POINTS = 2  # the "why" answer, graded by hand
ROSTER = {"alice": ("Alice", "Ahn"), "bob": ("Bob", "Berg"), "carol": ("Carol", "Chen"), "erin": ("Erin", "Eze")}
DUE = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=1)
LATE = DUE + timedelta(days=2)
WEAK = '{"filesystem": {"allowRead": ["/"], "allowWrite": ["/"]}, "network": {"allowedDomains": ["*"]}}'


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%d %H:%M:%S.%f") + " UTC"


class Term:
    """The machine of a term: an exchange, the instructor's course, and one HOME per account."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.exchange = root / "exchange"
        self.course = root / "course"
        self.course.mkdir()
        shutil.copy(REPO / "nbgrader_config.py", self.course)
        shutil.copytree(REPO / "lessons" / ASSIGNMENT, self.course / "lessons" / ASSIGNMENT)

    def home(self, user: str) -> Path:
        home = self.root / "home" / user
        config = home / ".jupyter" / "nbgrader_config.py"
        if not config.exists():
            config.parent.mkdir(parents=True)
            # nbgrader names a student by the OS account (pwd); one account per student is the student id in config
            who = "" if user == "instructor" else f"c.CourseDirectory.student_id = {user!r}\n"
            config.write_text(f"c = get_config()\nc.Exchange.root = {str(self.exchange)!r}\n"
                              f"c.CourseDirectory.course_id = {COURSE_ID!r}\n{who}")
        return home

    def nbgrader(self, user: str, *args: str, cwd: Path | None = None, ok: bool = True) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER") and k not in ("VIRTUAL_ENV",)}
        env.update(HOME=str(self.home(user)), USER=user, LOGNAME=user, PYTHONPATH=str(REPO),
                   SANDBOX_LAB_AUTOGRADE_BACKEND="docker")
        with kernels.environment(env) as env:  # autograde's kernels over ipc: no TCP port to lose to another kernel
            proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=cwd or self.home(user), env=env,
                                  capture_output=True, text=True, timeout=900)
        if ok:
            assert proc.returncode == 0, f"{user}: nbgrader {' '.join(args)} failed:\n{(proc.stdout + proc.stderr)[-3000:]}"
        return proc

    def instructor(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        return self.nbgrader("instructor", *args, cwd=self.course, ok=ok)

    def complete(self, student: str, policy: str) -> None:
        """The student's fetched notebook with ``policy`` in the policy cell."""
        path = self.home(student) / ASSIGNMENT / "task.ipynb"
        nb = nbformat.read(path, as_version=4)
        cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == f"{TASK.id}-policy"]
        assert len(cells) == 1 and STUB in cells[0].source, "the fetched notebook has the policy cell to fill in"
        cells[0].source = cells[0].source.replace(STUB, f'policy_json = r"""{policy}"""')
        nbformat.write(nb, path)

    def submit(self, student: str, policy: str, *, at: datetime | None = None) -> None:
        if not (self.home(student) / ASSIGNMENT).is_dir():
            self.nbgrader(student, "fetch_assignment", ASSIGNMENT)
        else:  # a second submission starts from the released notebook again
            shutil.copy(self.course / "release" / ASSIGNMENT / "task.ipynb", self.home(student) / ASSIGNMENT)
        self.complete(student, policy)
        clock = [f"--Exchange.timestamp_format={_stamp(at).replace(' UTC', ' %Z')}"] if at else []
        self.nbgrader(student, "submit", ASSIGNMENT, *clock)


def _grades(course: Path) -> dict[str, dict[str, str]]:
    with (course / "grades.csv").open(newline="") as fh:
        return {r["student_id"]: r for r in csv.DictReader(fh) if r["assignment"] == ASSIGNMENT}


@pytest.fixture(scope="module")
def term(tmp_path_factory: pytest.TempPathFactory) -> Term:
    t = Term(tmp_path_factory.mktemp("term"))
    roster = t.course / "roster.csv"
    roster.write_text("id,first_name,last_name,email\n" + "".join(
        f"{sid},{first},{last},{sid}@example.edu\n" for sid, (first, last) in ROSTER.items()))
    t.instructor("db", "student", "import", str(roster))
    t.instructor("db", "assignment", "add", ASSIGNMENT, f"--duedate={_stamp(DUE)}")
    t.instructor("generate_assignment", ASSIGNMENT)
    t.instructor("release_assignment", ASSIGNMENT)

    reference = solution_text(TASK.id).strip()
    t.submit("alice", WEAK)
    t.submit("alice", reference)  # the last submission counts
    t.submit("bob", reference, at=LATE)
    t.submit("erin", reference, at=LATE)
    # erin rewrites the time in her own exchange copy (the folder is hers, its mode 0777 as nbgrader's submit leaves it)
    [erin] = (t.exchange / COURSE_ID / "inbound").glob(f"erin+{ASSIGNMENT}+*")
    (erin / "timestamp.txt").chmod(0o644)
    (erin / "timestamp.txt").write_text(_stamp(DUE - timedelta(hours=1)))

    t.instructor("collect", ASSIGNMENT)
    t.instructor("autograde", ASSIGNMENT)
    t.instructor("generate_feedback", ASSIGNMENT)
    t.instructor("release_feedback", ASSIGNMENT)
    for student in ("alice", "bob"):
        t.nbgrader(student, "fetch_feedback", ASSIGNMENT)
    t.instructor("export")
    t.instructor("export", "--exporter=grader.grading.lms.CanvasExportPlugin", "--to", "canvas.csv")
    return t


def test_on_time_full_marks_late_penalised_missing_zero(term: Term) -> None:
    grades = _grades(term.course)
    assert set(grades) == set(ROSTER), "every student of the roster has a row, and no one else"
    alice, bob, carol = grades["alice"], grades["bob"], grades["carol"]
    assert float(alice["score"]) == TASK.max_score and float(alice["late_submission_penalty"]) == 0
    assert float(bob["raw_score"]) == TASK.max_score, "bob's policy earned every autograded point"
    assert float(bob["late_submission_penalty"]) == TASK.max_score and float(bob["score"]) == 0, bob
    assert carol["timestamp"] == "" and float(carol["score"]) == 0
    assert {float(g["max_score"]) for g in grades.values()} == {float(TASK.max_score + MANUAL_POINTS)}


def test_the_last_submission_counts(term: Term) -> None:
    inbound = sorted((term.exchange / COURSE_ID / "inbound").glob(f"alice+{ASSIGNMENT}+*"))
    assert len(inbound) == 2, "alice submitted twice"
    stamps = sorted((p / "timestamp.txt").read_text() for p in inbound)
    assert (term.course / "submitted" / "alice" / ASSIGNMENT / "timestamp.txt").read_text() == stamps[-1]
    nb = nbformat.read(term.course / "submitted" / "alice" / ASSIGNMENT / "task.ipynb", as_version=4)
    [cell] = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == f"{TASK.id}-policy"]
    assert solution_text(TASK.id).strip() in cell.source and WEAK not in cell.source


def test_feedback_reaches_each_student(term: Term) -> None:
    for student in ("alice", "bob"):
        pages = list((term.home(student) / ASSIGNMENT / "feedback").glob("*/task.html"))
        assert len(pages) == 1, (student, pages)
        assert "BEGIN HIDDEN TESTS" not in pages[0].read_text()
    assert not (term.home("carol") / ASSIGNMENT).exists()


def test_canvas_export_has_the_penalty_and_the_missing_zero(term: Term) -> None:
    rows = list(csv.reader((term.course / "canvas.csv").read_text().splitlines()))
    scores = {r[2]: float(r[5]) for r in rows[2:]}
    assert scores == {"alice": TASK.max_score, "bob": 0.0, "carol": 0.0, "erin": float(_grades(term.course)["erin"]["score"])}
    assert {r[0] for r in rows[2:]} >= {"Ahn, Alice", "Berg, Bob", "Chen, Carol"}


def test_class_report_from_nbgraders_database(term: Term) -> None:
    out = term.root / "report"
    code = ("import sys; from grader.cli.main import main; "
            f"sys.exit(main(['class-report', '--nbgrader', {str(term.course)!r}, '--assignment', {ASSIGNMENT!r}, "
            f"'--out', {str(out)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((out / "class-report.json").read_text())
    assert report["task"] == TASK.id and report["students"] == len(ROSTER)
    assert report["missing"] == ["carol"] and report["counts"] == {"ok": 3, "invalid": 0, "error": 0, "missing": 1}
    assert all(c["rate"] == 1.0 and c["graded"] == 3 for c in report["checks"]), report["checks"]
    assert {g["kind"]: g["students"] for g in report["groups"]}.get("identical") == ["alice", "bob", "erin"]
    assert "1 not submitted (carol)" in (out / "class-report.html").read_text()


def test_a_student_not_on_the_roster_is_refused(term: Term) -> None:
    term.submit("mallory", solution_text(TASK.id).strip())
    term.instructor("collect", ASSIGNMENT)
    proc = term.instructor("autograde", ASSIGNMENT, "--student", "mallory", ok=False)
    assert proc.returncode != 0 and "No student with ID 'mallory' exists in the database" in proc.stdout + proc.stderr
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook("sqlite:///" + str(term.course / "gradebook.db"), COURSE_ID) as gb:
        assert "mallory" not in {s.id for s in gb.students}
        with pytest.raises(MissingEntry):
            gb.find_submission(ASSIGNMENT, "mallory")


@pytest.mark.xfail(strict=True, reason="nbgrader's collect copies the timestamp.txt a student wrote into their own "
                   "exchange folder, and autograde takes the submission time from it: an edited time is believed")
def test_a_forged_timestamp_is_trusted_by_nbgrader(term: Term) -> None:
    """erin submitted two days late and then wrote an on-time timestamp.txt into her exchange copy."""
    erin = _grades(term.course)["erin"]
    assert float(erin["late_submission_penalty"]) == TASK.max_score, erin
