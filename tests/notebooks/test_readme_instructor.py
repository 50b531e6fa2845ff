"""The instructors' commands (docs/instructors.md, linked from the README), run verbatim in a temporary copy of
the course, as an instructor would.

Every ```sh block of docs/instructors.md is read and run line by line with bash, in order: the instructor's commands (``.venv/bin/...``)
from the root of a copy of the course (``lessons/``, ``solutions/``,
``nbgrader_config.py``, and ``.venv`` linked to the project's), with ``PATH`` as
a user's shell has it, without the virtualenv on it and without
``VIRTUAL_ENV``, since the page says the commands work without activating
it; the students' commands (a line starting with ``nbgrader``) once per
student, from the student's own HOME, with nbgrader on their PATH. Every
account's ``~/.jupyter/nbgrader_config.py`` names the exchange (a temporary
directory) and the course, as the page's ``/etc/jupyter`` file does; a
student's also names the student (``c.CourseDirectory.student_id``, standing in
for an account of their own). Where the page says someone puts something in
place (``roster.csv``, the policy in the fetched notebook, ``my_policy.json``,
a ``submissions/`` folder, Gradescope's ``submission/``), the test does, then
checks that every command succeeded and left what it promises. Students:
``ref`` submits the reference solution, ``starter`` the notebook as fetched,
``absent`` fetches and never submits. Grading uses the static backend unless
``SANDBOX_LAB_BACKEND`` says otherwise (Docker works too, only slower); the
same term in Docker, with a late and a forged submission, is
tests/notebooks/test_term.py.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import kernels
from reference import solution_text
from grader.grading.tasks import load_task

pytestmark = [pytest.mark.notebook, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "instructors.md"  # the README's "Teaching a class" links it
SECTION = "# For instructors"
WRITTEN_ANSWER = 2  # each policy task's "Why?" cell: nbgrader counts it in max_score, a person grades it
STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
SUBMITTED = re.compile(r"submitted/<student>/([\w.-]+)/([\w.-]+\.ipynb)")
STUDENTS = {"ref": "the reference solution", "starter": "the released notebook, unchanged", "absent": "no submission"}
SUBMITTING = ("ref", "starter")
# the term, in the order the page walks it (one command each, student commands marked by their subcommand)
TERM = ("db student import", "db assignment add", "generate_assignment", "release_assignment", "fetch_assignment",
        "submit", "collect", "autograde", "generate_feedback", "release_feedback", "fetch_feedback", "export",
        "class-report --nbgrader", "CanvasExportPlugin", "--gradescope")


def instructor_blocks(doc: str) -> list[list[str]]:
    """The commands of each ```sh block in the instructors' page, one per line (comment lines dropped)."""
    section = doc[doc.index(SECTION):]
    blocks = re.findall(r"^```sh\n(.*?)^```", section, re.S | re.M)
    commands = []
    for block in blocks:
        joined = block.replace("\\\n", " ")  # continuation lines are one command
        commands.append([line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")])
    return commands


def _user_env() -> dict[str, str]:
    """The environment of an instructor's shell: this one, without any virtualenv on PATH."""
    venv_dirs = {os.path.realpath(p) for p in (os.path.dirname(sys.executable), os.path.join(sys.prefix, "bin"),
                                                REPO / ".venv" / "bin")}
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if p and os.path.realpath(p) not in venv_dirs)
    env["SANDBOX_LAB_BACKEND"] = os.environ.get("SANDBOX_LAB_BACKEND", "static")
    return env


def _course(root: Path) -> Path:
    """A copy of the course as a checkout has it, with the project's virtualenv where `make venv` puts it."""
    venv = REPO / ".venv"
    if not (venv / "bin" / "nbgrader").exists():
        pytest.fail(f"{venv}/bin/nbgrader is missing: run `make venv` (the page's commands use the project's .venv)")
    course = root / "course"
    course.mkdir()
    for name in ("lessons", "solutions"):
        shutil.copytree(REPO / name, course / name, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "my_policy.json"))
    shutil.copy(REPO / "nbgrader_config.py", course)
    (course / ".venv").symlink_to(venv)
    return course


def _run(course: Path, command: str, env: dict[str, str]) -> str:
    with kernels.environment(env) as env:  # autograde's kernels over ipc: no TCP port to lose to another kernel
        proc = subprocess.run(["bash", "-c", command], cwd=course, env=env, capture_output=True, text=True, timeout=900)
    output = proc.stdout + proc.stderr
    # a command whose comment says "(exit N ..." is shown for that outcome: it must end exactly so, no other way
    said = re.search(r"#.*\(exit (\d)\b", command)
    expected = int(said.group(1)) if said else 0
    assert proc.returncode == expected, (f"docs/instructors.md's command ended with exit {proc.returncode}, not {expected}: "
                                         f"{command}\n{output[-3000:]}")
    return output


def _home(root: Path, user: str, exchange: Path) -> Path:
    """An account: its HOME, whose nbgrader config names the exchange and the course (and the student)."""
    home = root / "home" / user
    config = home / ".jupyter" / "nbgrader_config.py"
    if not config.exists():
        config.parent.mkdir(parents=True)
        who = "" if user == "instructor" else f"c.CourseDirectory.student_id = {user!r}\n"
        config.write_text(f"c = get_config()\nc.Exchange.root = {str(exchange)!r}\n"
                          f"c.CourseDirectory.course_id = 'sandbox-lab'\n{who}")
    return home


def _account_env(env: dict[str, str], home: Path, user: str, *, student: bool) -> dict[str, str]:
    out = {k: v for k, v in env.items() if not k.startswith("JUPYTER")}
    out.update(HOME=str(home), USER=user, LOGNAME=user)
    if student:  # a student's Jupyter has nbgrader on PATH
        out["PATH"] = os.pathsep.join([str(REPO / ".venv" / "bin"), out.get("PATH", "")])
    return out


def _complete(home: Path, assignment: str, filename: str, student: str) -> None:
    """What a student writes in the fetched notebook before ``submit``: the reference policy, or nothing."""
    if student != "ref":
        return
    task = load_task(assignment.split("-task-", 1)[1])
    path = home / assignment / filename
    nb = nbformat.read(path, as_version=4)
    cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == f"{task.id}-policy"]
    assert len(cells) == 1 and STUB in cells[0].source, "the fetched notebook has one policy cell to fill in"
    cells[0].source = cells[0].source.replace(STUB, f'policy_json = r"""{solution_text(task.id)}"""')
    nbformat.write(nb, path)


def _policy_files(course: Path, task_id: str) -> None:
    """What the policy-file commands take: the instructor's own policy, and one file per student."""
    (course / "my_policy.json").write_text(solution_text(task_id))
    submissions = course / "submissions"
    submissions.mkdir()
    (submissions / "alice.json").write_text(solution_text(task_id))
    (submissions / "bob.json").write_text('{"filesystem": {"allowWrite": ["/home/user"]}, "network": {"allowedDomains": ["*.github.com"]}}')
    (submissions / "carol.json").write_text('{"filesystem": {"allowRead": ["/project/src"]')  # broken JSON
    (course / "submission").mkdir()  # Gradescope's: the one upload
    (course / "submission" / "my_policy.json").write_text(solution_text(task_id))


def test_the_readme_sends_instructors_to_the_page() -> None:
    readme = (REPO / "README.md").read_text()
    assert "(docs/instructors.md)" in readme and "graded by hand" in readme


def test_the_page_names_nbgraders_own_default_exchange_and_the_written_answer() -> None:
    from nbgrader.exchange.default.exchange import Exchange

    doc = DOC.read_text()
    default = Exchange.root.default_value  # what the pinned nbgrader uses when nothing configures it
    assert f"`{default}` by default" in doc and f'c.Exchange.root = "{default}"' in doc
    assert "/srv/nbgrader" not in doc
    assert "written answer is graded by hand" in doc and f"worth {WRITTEN_ANSWER} points" in doc


def test_the_instructor_section_has_commands_to_run() -> None:
    blocks = instructor_blocks(DOC.read_text())
    assert len(blocks) >= 2 and all(blocks), blocks
    commands = [c for block in blocks for c in block]
    at = [next((i for i, c in enumerate(commands) if step in c.split("#")[0]), -1) for step in TERM]
    assert -1 not in at and at == sorted(at), dict(zip(TERM, at))
    students = [c for c in commands if c.startswith("nbgrader ")]
    assert [c.split()[1] for c in students] == ["fetch_assignment", "submit", "fetch_feedback"], students


def test_readme_instructor_commands_succeed_as_written(tmp_path: Path) -> None:
    readme = DOC.read_text()
    section = readme[readme.index(SECTION):]
    where = SUBMITTED.search(section)
    assert where, "the page says where submissions go (submitted/<student>/<assignment>/<notebook>.ipynb)"
    assignment, filename = where.groups()
    course = _course(tmp_path)
    exchange = tmp_path / "exchange"
    env = _account_env(_user_env(), _home(tmp_path, "instructor", exchange), "instructor", student=False)
    (course / "roster.csv").write_text("id,first_name,last_name,email\n" + "".join(
        f"{s},{s.title()},Student,{s}@example.edu\n" for s in STUDENTS))
    task_ids: list[str] = []
    for block in instructor_blocks(readme):
        for command in block:
            if command.startswith("nbgrader "):  # each student, in their own account
                step = command.split()[1]
                for student in STUDENTS if step == "fetch_assignment" else SUBMITTING:
                    home = _home(tmp_path, student, exchange)
                    if step == "submit":
                        _complete(home, assignment, filename, student)
                    _run(home, command, _account_env(_user_env(), home, student, student=True))
                continue
            m = re.search(r"--task[ =]([\w-]+)", command)
            if m and not task_ids:
                task_ids.append(m.group(1))
                _policy_files(course, m.group(1))
            _run(course, command, env)

    # each step left what the page says it does
    released = (course / "release" / assignment / filename).read_text()
    assert "BEGIN SOLUTION" not in released and "BEGIN HIDDEN TESTS" not in released
    task = load_task(assignment.split("-task-", 1)[1])
    with (course / "grades.csv").open(newline="") as fh:
        exported = [r for r in csv.DictReader(fh) if r["assignment"] == assignment]
    scores = {r["student_id"]: float(r["score"]) for r in exported}
    assert scores == {"ref": float(task.max_score), "starter": 0.0, "absent": 0.0}, scores
    # what the page says: the written answer is in nbgrader's max_score and waits for a person
    assert {float(r["max_score"]) for r in exported} == {float(task.max_score + WRITTEN_ANSWER)}, exported
    for student in SUBMITTING:
        assert (course / "feedback" / student / assignment / filename.replace(".ipynb", ".html")).is_file()
        fetched = list((tmp_path / "home" / student / assignment / "feedback").glob(f"*/{filename.replace('.ipynb', '.html')}"))
        assert len(fetched) == 1, (student, fetched)
    assert not (course / "submitted" / "absent").exists()
    nb_report = json.loads((course / "class-report" / assignment / "class-report.json").read_text())
    assert nb_report["missing"] == ["absent"] and nb_report["students"] == len(STUDENTS), nb_report["counts"]
    assert (course / "class-report" / assignment / "class-report.html").is_file()
    gradescope = json.loads((course / "results.json").read_text())
    assert gradescope["score"] == task.max_score and all(t["status"] == "passed" for t in gradescope["tests"])
    assert task_ids, "the page grades policy files with --task"
    with (course / "grades" / "gradebook.csv").open(newline="") as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    assert set(rows) == {"alice", "bob", "carol"}, rows
    with (course / "canvas.csv").open(newline="") as fh:
        canvas = list(csv.reader(fh))
    assert canvas[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"] and canvas[1][0] == "Points Possible"
    report = json.loads((course / "grades" / "class-report.json").read_text())
    assert report["students"] == 3 and (course / "grades" / "class-report.html").is_file()
