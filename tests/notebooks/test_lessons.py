"""Every notebook in lessons/ runs top to bottom, with no error output, on both backends.

Twice per notebook: with ``SANDBOX_LAB_BACKEND=static`` (the Binder path: no
Docker engine) and with ``docker`` (real containers; marked ``docker``). The
progress file is redirected to a temporary path so a test run never touches
the learner's record.

The graded task notebooks (``lessons/1N-task-<id>/task.ipynb``) are nbgrader
source notebooks: they are run from a temporary copy of their folder (they write
``my_policy.json`` to the working directory; their reference solution comes
inline in the source notebook, generated from ``solutions/``), and must score full
marks. Their released versions, made by ``nbgrader generate_assignment`` in a
temporary copy of the course as ``test_nbgrader.py`` does, must contain no
solution: no nbgrader solution or hidden-test block, no reference policy.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from grader.grading.tasks import all_tasks
from grader.course.ladder import level as ctf_level
import kernels
from reference import solution_path
from grader.core.wording import backend_phrase

nbformat = pytest.importorskip("nbformat", reason="the notebook stack is in the 'lab' extra")
nbclient = pytest.importorskip("nbclient", reason="the notebook stack is in the 'lab' extra")

pytestmark = [
    pytest.mark.notebook,
    # jupyter's own libraries warn about their internals; ours must not
    pytest.mark.filterwarnings("ignore::DeprecationWarning:zmq.*"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ipykernel.*"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:nbclient.*"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning:nbclient.*"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "lessons").glob("0*/*.ipynb"))
CAPTURE = "15-task-capture-the-flag"  # the capture-the-flag task: attacks, not a policy (tested at the end)
TASK_NOTEBOOKS = sorted(p for p in (ROOT / "lessons").glob("1*-task-*/task.ipynb") if p.parent.name != CAPTURE)
TASKS = {f"{t.order:02d}-task-{t.id}": t for t in all_tasks()}  # assignment folder -> task
BACKENDS = [
    pytest.param("static", id="static"),
    pytest.param("docker", id="docker", marks=[pytest.mark.docker, pytest.mark.slow]),
]


def _texts(nb: Any) -> list[str]:
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.get("output_type") == "stream":
                out.append(o.get("text", ""))
            for value in o.get("data", {}).values():
                if isinstance(value, str):
                    out.append(value)
    return out


def _execute(path: Path, cwd: Path) -> Any:
    """Run the notebook at ``path`` top to bottom in a fresh kernel started in ``cwd``; no cell may error."""
    nb = kernels.execute(nbformat.read(path, as_version=4), cwd)  # over ipc: no TCP port to lose to another kernel
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, "\n".join(f"{e['ename']}: {e['evalue']}" for e in errors)
    return nb


def test_the_lessons_exist() -> None:
    names = [p.parent.name for p in NOTEBOOKS]
    assert names == ["00-start-here", "01-why-sandbox", "02-naive-vs-secure", "03-container-alone",
                     "04-trusted-domains", "05-check-yourself", "06-what-a-policy-misses",
                     "07-break-it-yourself"]


def test_every_task_has_its_notebook() -> None:
    assert [p.parent.name for p in TASK_NOTEBOOKS] == list(TASKS)
    assert len(TASKS) == 5


@pytest.mark.parametrize("path", NOTEBOOKS + TASK_NOTEBOOKS + [ROOT / "lessons" / CAPTURE / "task.ipynb"], ids=lambda p: p.parent.name)
def test_notebooks_are_committed_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in nb.cells if c.cell_type == "code")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.parent.name)
def test_lesson_runs_top_to_bottom(path: Path, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_LAB_BACKEND", backend)  # the kernel inherits the environment
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(tmp_path / "progress.json"))
    # A copy of the lesson's folder: what a lesson writes beside itself (lesson 07's capstone editor saves
    # capstone_policy.json) must not land in the checkout, where an unpaired file fails the pairs test.
    folder = tmp_path / path.parent.name
    shutil.copytree(path.parent, folder, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "*.md"))
    nb = _execute(folder / path.name, folder)
    text = "\n".join(_texts(nb))
    # a backend failure is shown to the learner, not raised; here it is a failure all the same
    assert "sl-failed" not in text and "could not run:" not in text
    if "describe_backend" in "".join(c.source for c in nb.cells):
        assert f"Backend: {backend}" in text
    # a board drawn from a run (its opening tag), not the name in a stylesheet every course view carries
    board = '<div class="sl-board" data-backend=' in text
    if backend == "static" and board:
        assert "predicted:" in text  # the Binder path says so in the output
    if backend == "docker" and board:
        assert "ran in Docker" in text
        assert "predicted:" not in text
    if "sl-agent-run" in text:  # the agent on stage says how its transcript was obtained
        assert ("predicted, not run" in text) == (backend == "static")
        assert ("ran in Docker" in text) == (backend == "docker")


# --- graded task notebooks ----------------------------------------------------------------

_PHRASE = {b: backend_phrase(b) for b in ("static", "docker")}  # how a Grade names its backend


def _task_copy(path: Path, root: Path) -> Path:
    """The task's folder copied to ``root/lessons/<folder>``, the layout the course has; a stale policy file is left out."""
    folder = root / "lessons" / path.parent.name
    shutil.copytree(path.parent, folder, ignore=shutil.ignore_patterns("my_policy.json", ".ipynb_checkpoints"))
    return folder


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("path", TASK_NOTEBOOKS, ids=lambda p: p.parent.name)
def test_task_runs_top_to_bottom(path: Path, backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The source notebook (with its solution) runs clean, says which backend graded, and scores full marks."""
    task = TASKS[path.parent.name]
    monkeypatch.setenv("SANDBOX_LAB_BACKEND", backend)  # the kernel inherits the environment
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(tmp_path / "progress.json"))
    folder = _task_copy(path, tmp_path)
    nb = _execute(folder / "task.ipynb", folder)  # the kernel's working directory: where my_policy.json goes
    text = "\n".join(_texts(nb))
    assert f"Grading backend: {backend}" in text
    assert f"{task.id}: {task.max_score}/{task.max_score} ({_PHRASE[backend]})" in text, text[-3000:]
    for c in task.checks:  # each visible test cell reports its points and the backend that judged them
        assert f"{task.id}/{c.id}: {c.points}/{c.points} ({backend})." in text
    if backend == "docker":
        assert "predicted" not in text, "the docker run fell back to the static prediction"
    # full marks in the learner's kernel: the task is done on the progress board, said once
    assert text.count(f"Task {task.id} done") == 1
    assert f"task:{task.id}" in json.loads((tmp_path / "progress.json").read_text(encoding="utf-8"))["done"]
    # the policy cell wrote the reference solution into the working directory, not into the repository
    written = json.loads((folder / "my_policy.json").read_text(encoding="utf-8"))
    assert written == json.loads(solution_path(task.id).read_text(encoding="utf-8"))


def _nbgrader(course: Path, *args: str) -> str:
    """``python -m nbgrader ...`` in ``course`` (as tests/notebooks/test_nbgrader.py runs it)."""
    with kernels.environment({**os.environ, "SANDBOX_LAB_BACKEND": "static", "PYTHONPATH": str(ROOT)}) as env:
        proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
                              capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{output[-3000:]}"
    return output


@pytest.fixture(scope="module")
def released(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A temporary copy of the course with every task released by ``nbgrader generate_assignment``."""
    root = tmp_path_factory.mktemp("course")
    shutil.copy(ROOT / "nbgrader_config.py", root)
    for path in [*TASK_NOTEBOOKS, ROOT / "lessons" / CAPTURE / "task.ipynb"]:
        shutil.copytree(path.parent, root / "lessons" / path.parent.name)  # as committed, stray files included
    # one nbgrader run for all of them (nbgrader globs the assignment id): a run per task costs ~5 s more each
    _nbgrader(root, "generate_assignment", "1*-task-*", "--force")
    assert sorted(p.name for p in (root / "release").iterdir()) == sorted([*TASKS, CAPTURE])
    return root / "release"


def _blocks(source: str, name: str) -> list[str]:
    """The text inside ``### BEGIN <name>`` ... ``### END <name>`` blocks."""
    return [b.strip() for b in re.findall(rf"### BEGIN {name}\n(.*?)### END {name}", source, re.DOTALL) if b.strip()]


def _no_space(text: str) -> str:
    return re.sub(r"\s+", "", text)


@pytest.mark.slow
@pytest.mark.parametrize("path", TASK_NOTEBOOKS, ids=lambda p: p.parent.name)
def test_released_task_has_no_solution(path: Path, released: Path) -> None:
    task = TASKS[path.parent.name]
    folder = released / path.parent.name
    assert sorted(p.name for p in folder.iterdir()) == ["task.ipynb"], "only the notebook is released"
    raw = (folder / "task.ipynb").read_text(encoding="utf-8")
    nb = nbformat.reads(raw, as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
        assert marker not in raw
    # nothing of what the source notebook hides: solution code, the model answer, hidden tests
    source = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
    hidden = _blocks(source, "SOLUTION") + _blocks(source, "HIDDEN TESTS")
    assert len(hidden) == 2, "one solution code cell and one model answer (scores come from the grader, not hidden tests)"
    for block in hidden:
        assert _no_space(block) not in _no_space(text), f"released: {block[:200]}"
    assert "solution_text(" not in text and "solution_path(" not in text
    # no reference policy from solutions/, in any layout
    solution = solution_path(task.id).read_text(encoding="utf-8")
    assert _no_space(solution) not in _no_space(text)
    for literal in re.findall(r'"""(.*?)"""', text, re.DOTALL):
        try:
            value = json.loads(literal)
        except ValueError:
            continue
        assert value != json.loads(solution), "the released starter policy is the reference solution"
    # the learner's cell is the starter and nbgrader's stub, and every graded cell survived
    cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    assert "raise NotImplementedError()" in cells[f"{task.id}-policy"].source
    assert all(f"{task.id}-{c.id}" in cells for c in task.checks)


# --- the capture-the-flag task ----------------------------------------------------------------


@pytest.mark.docker
@pytest.mark.slow
def test_capture_task_runs_top_to_bottom_and_captures_every_level(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The source notebook, with the reference attacks, captures every level in the learner's kernel (feedback)."""
    monkeypatch.setenv("SANDBOX_LAB_BACKEND", "docker")
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(tmp_path / "progress.json"))
    folder = _task_copy(ROOT / "lessons" / CAPTURE / "task.ipynb", tmp_path)
    text = "\n".join(_texts(_execute(folder / "task.ipynb", folder)))
    for n in (1, 2, 3):
        assert f"level {n}: captured (docker)" in text, text[-3000:]
    levels = json.loads((tmp_path / "progress.json").read_text(encoding="utf-8"))["levels"]
    assert sum(1 for rec in levels.values() if rec["captured"] is not None) == 3  # recorded on the board


def test_capture_task_on_the_static_backend_runs_and_leaves_the_verdict_to_the_grader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_LAB_BACKEND", "static")
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(tmp_path / "progress.json"))
    folder = _task_copy(ROOT / "lessons" / CAPTURE / "task.ipynb", tmp_path)
    text = "\n".join(_texts(_execute(folder / "task.ipynb", folder)))
    assert text.count("The grader runs your attack in Docker when it grades.") == 3 and ": captured" not in text
    assert not (tmp_path / "progress.json").exists()  # no judged attack, no attempt recorded


@pytest.mark.slow
def test_released_capture_task_has_no_reference_attack(released: Path) -> None:
    raw = (released / CAPTURE / "task.ipynb").read_text(encoding="utf-8")
    nb = nbformat.reads(raw, as_version=4)
    text = "\n".join(c.source for c in nb.cells)
    for marker in ("BEGIN SOLUTION", "END SOLUTION"):
        assert marker not in raw
    for n in (1, 2, 3):
        reference = (ROOT / "solutions" / "attacks" / f"{ctf_level(n).id}.py").read_text(encoding="utf-8")
        body = [ln for ln in reference.splitlines() if ln.strip() and not ln.startswith(("import", '"""'))]
        assert not any(ln in text for ln in body), f"level {n}'s reference attack was released"
        cells = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
        assert "raise NotImplementedError()" in cells[f"capture-the-flag-l{n:02d}-attack"].source
        assert cells[f"capture-the-flag-l{n:02d}-captured"].source == f"assert_captured({n}, attack_{n})"
