"""The README's instructor commands, run verbatim in a temporary copy of the course, as an instructor would.

Every ```sh block of the section "For instructors" is read from README.md and
run line by line with bash, from the root of a copy of the course
(``lessons/``, ``solutions/``, ``nbgrader_config.py``, and ``.venv`` linked to
the project's): with ``PATH`` as a user's shell has it, without the virtualenv
on it and without ``VIRTUAL_ENV``, since the README says the commands work
without activating it. Where the README says an instructor puts something in
place (a student's notebook in ``submitted/``, ``my_policy.json``, a
``submissions/`` folder), the test does, then checks that every command
succeeded and left what it promises. Grading uses the static backend unless
``SANDBOX_LAB_BACKEND`` says otherwise (Docker works too, only slower).
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

from reference import solution_text
from grader.grading.tasks import load_task

pytestmark = [pytest.mark.notebook, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SECTION = "## For instructors"
STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
SUBMITTED = re.compile(r"submitted/<student>/([\w.-]+)/([\w.-]+\.ipynb)")
STUDENTS = {"ref": "the reference solution", "starter": "the released notebook, unchanged"}


def instructor_blocks(readme: str) -> list[list[str]]:
    """The commands of each ```sh block in the instructor section, one per line (comment lines dropped)."""
    start = readme.index(SECTION)
    end = readme.find("\n## ", start + len(SECTION))
    section = readme[start:] if end == -1 else readme[start:end]
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
        pytest.fail(f"{venv}/bin/nbgrader is missing: run `make venv` (the README's commands use the project's .venv)")
    course = root / "course"
    course.mkdir()
    for name in ("lessons", "solutions"):
        shutil.copytree(REPO / name, course / name, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "my_policy.json"))
    shutil.copy(REPO / "nbgrader_config.py", course)
    (course / ".venv").symlink_to(venv)
    return course


def _run(course: Path, command: str, env: dict[str, str]) -> str:
    proc = subprocess.run(["bash", "-c", command], cwd=course, env=env, capture_output=True, text=True, timeout=900)
    output = proc.stdout + proc.stderr
    # a command whose comment says "(exit N ..." is shown for that outcome: it must end exactly so, no other way
    said = re.search(r"#.*\(exit (\d)\b", command)
    expected = int(said.group(1)) if said else 0
    assert proc.returncode == expected, (f"the README's command ended with exit {proc.returncode}, not {expected}: "
                                         f"{command}\n{output[-3000:]}")
    return output


def _submit(course: Path, assignment: str, filename: str) -> None:
    """Students return the released notebook, where the README says it goes."""
    task = load_task(assignment.split("-task-", 1)[1])
    released = nbformat.read(course / "release" / assignment / filename, as_version=4)
    sources = {"ref": f'policy_json = r"""{solution_text(task.id)}"""', "starter": STUB}
    for student, source in sources.items():
        nb = nbformat.from_dict(json.loads(json.dumps(released)))
        cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == f"{task.id}-policy"]
        assert len(cells) == 1 and STUB in cells[0].source, "the released notebook has one policy cell to fill in"
        cells[0].source = cells[0].source.replace(STUB, source)
        folder = course / "submitted" / student / assignment
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / filename)


def _policy_files(course: Path, task_id: str) -> None:
    """What the policy-file commands take: the instructor's own policy, and one file per student."""
    (course / "my_policy.json").write_text(solution_text(task_id))
    submissions = course / "submissions"
    submissions.mkdir()
    (submissions / "alice.json").write_text(solution_text(task_id))
    (submissions / "bob.json").write_text('{"filesystem": {"allowWrite": ["/home/user"]}, "network": {"allowedDomains": ["*.github.com"]}}')
    (submissions / "carol.json").write_text('{"filesystem": {"allowRead": ["/project/src"]')  # broken JSON


def test_the_instructor_section_has_commands_to_run() -> None:
    blocks = instructor_blocks((REPO / "README.md").read_text())
    assert len(blocks) >= 2 and all(blocks), blocks
    assert any("generate_assignment" in c for c in blocks[0]) and any("autograde" in c for c in blocks[0])


def test_readme_instructor_commands_succeed_as_written(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index(SECTION):]
    where = SUBMITTED.search(section)
    assert where, "the README says where submissions go (submitted/<student>/<assignment>/<notebook>.ipynb)"
    assignment, filename = where.groups()
    course = _course(tmp_path)
    env = _user_env()
    task_ids: list[str] = []
    for block in instructor_blocks(readme):
        for command in block:
            if " autograde " in f"{command} " and not (course / "submitted").exists():
                _submit(course, assignment, filename)
            m = re.search(r"--task[ =]([\w-]+)", command)
            if m and not task_ids:
                task_ids.append(m.group(1))
                _policy_files(course, m.group(1))
            _run(course, command, env)

    # each step left what the README says it does
    released = (course / "release" / assignment / filename).read_text()
    assert "BEGIN SOLUTION" not in released and "BEGIN HIDDEN TESTS" not in released
    task = load_task(assignment.split("-task-", 1)[1])
    with (course / "grades.csv").open(newline="") as fh:
        scores = {r["student_id"]: float(r["score"]) for r in csv.DictReader(fh) if r["assignment"] == assignment}
    assert scores == {"ref": float(task.max_score), "starter": 0.0}, scores
    for student in STUDENTS:
        assert (course / "feedback" / student / assignment / filename.replace(".ipynb", ".html")).is_file()
    assert task_ids, "the README grades policy files with --task"
    with (course / "grades" / "gradebook.csv").open(newline="") as fh:
        rows = {r["student"]: r for r in csv.DictReader(fh)}
    assert set(rows) == {"alice", "bob", "carol"}, rows
    with (course / "canvas.csv").open(newline="") as fh:
        canvas = list(csv.reader(fh))
    assert canvas[0][:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"] and canvas[1][0] == "Points Possible"
    report = json.loads((course / "grades" / "class-report.json").read_text())
    assert report["students"] == 3 and (course / "grades" / "class-report.html").is_file()
