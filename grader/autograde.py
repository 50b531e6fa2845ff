"""Scores computed by the grader, not by the learner's kernel: Sandbox Lab's step in ``nbgrader autograde``.

nbgrader's tests run in the learner's kernel, so anything a learner defines
there (``assert_passed = lambda *a: None``, a patched ``builtins``, a rewritten
``my_policy.json``) could decide a score. ``GradePolicies`` is an nbgrader
preprocessor that runs after nbgrader has executed a submission and before it
saves the scores. It:

1. finds the task from the rubric cells' ``grade_id``s (locked cells, restored
   from the gradebook by nbgrader, so a learner cannot rename them);
2. reads the policy the submission contains, by the rule in ``policy_source``:
   the string literal assigned to ``policy_json`` in the policy cell, parsed
   with ``ast`` (never executed); only when the cell holds no such literal, the
   ``my_policy.json`` the learner submitted beside the notebook;
3. grades it in this process (Docker when an engine answers, otherwise the
   static prediction, and the feedback says *predicted*), through the same
   deduplicating, parallel path as ``grade-batch``: the first notebook of a
   run grades every submission of the assignment at once;
4. rewrites the outputs of every rubric cell (points, or an error with the
   feedback) and of the notebook's feedback cell. nbgrader's ``SaveAutoGrades``
   then records exactly those scores.

Lessons with graded multiple-choice letters (lesson 05) get the same
treatment: a grade cell that checks ``is_option("<question>", answer_x)`` is
scored here, from the string literal ``answer_x = "c"`` in the answers cell,
against the question bank's hashed key. A ``str`` subclass or a patched
``strip`` in the kernel changes nothing.

Capture-the-flag attacks (the capture-the-flag task) get the same treatment: a
grade cell that checks ``assert_captured(<level>, attack_x)`` is scored here by
running the string literal assigned to ``attack_x`` in the learner's solution
cell in the level's sandbox, in the grader's own Docker run, with a flag the
kernel never saw. The code is read with ``ast`` and never executed in this
process; it runs only inside the sandbox.

The process-wide cache below is deliberate: nbgrader builds a new
preprocessor for every notebook, and one ``nbgrader autograde`` must grade a
class once, not once per student.

Imports: batch, backends, errors, policy, tasks. Only nbgrader's autograde runs it.
"""

from __future__ import annotations

import ast
import atexit
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from nbconvert.preprocessors import Preprocessor
import nbformat
from nbformat import NotebookNode
from traitlets import Bool, Unicode

from . import backends
from .backends.base import Backend
from .batch import Row, Submission, grade_batch
from .errors import SandboxLabError
from .quiz import answer_hash, question
from .tasks import Task, all_tasks

__all__ = ["GradePolicies", "PolicySource", "find_task", "grade_attacks", "policy_source"]

BACKEND_ENV = "SANDBOX_LAB_AUTOGRADE_BACKEND"  # "docker", "static" or "auto"; else SANDBOX_LAB_BACKEND; else "auto"
POLICY_FILE = "my_policy.json"
NOT_A_LITERAL = (
    "the policy cell does not set policy_json to a string literal, and no my_policy.json was submitted. "
    'Write your policy as policy_json = r"""{ ... }""" in the policy cell.'
)


@dataclass(frozen=True)
class PolicySource:
    """The policy a submission contains, and where it was found (for feedback)."""

    text: Optional[str]  # None: no policy found
    origin: str  # "policy cell", "my_policy.json" or why nothing was found


def _grade_id(cell: NotebookNode) -> str:
    return str(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", ""))


def find_task(nb: NotebookNode) -> Optional[Task]:
    """The task whose policy cell and every rubric cell this notebook holds (None: not a task notebook)."""
    ids = {_grade_id(c) for c in nb.cells}
    for task in all_tasks():
        if f"{task.id}-policy" in ids and all(task.grade_id(c.id) in ids for c in task.checks):
            return task
    return None


def _literals(source: str) -> dict[str, str]:
    """Every top-level ``name = "<string literal>"`` of a cell (the last one wins), never executing anything."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            for t in node.targets:
                if isinstance(t, ast.Name) and isinstance(value, str):
                    out[t.id] = value
    return out


def _asked(source: str) -> Optional[tuple[str, str]]:
    """(question id, variable) of a grade cell that checks ``is_option("<question>", <variable>)``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "is_option"
                and len(node.args) == 2 and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                and isinstance(node.args[1], ast.Name)):
            return node.args[0].value, node.args[1].id
    return None


def grade_answers(nb: NotebookNode) -> dict[str, bool]:
    """Score every graded multiple-choice cell from the answers' literals; rewrite its outputs. grade_id → right?"""
    answers: dict[str, str] = {}
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            answers.update(_literals(cell.source))
    scored: dict[str, bool] = {}
    for cell in nb.cells:
        md = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type != "code" or not md.get("grade"):
            continue
        asked = _asked(cell.source)
        if asked is None:
            continue
        qid, var = asked
        try:
            key = question(qid).answer_sha256
        except (KeyError, SandboxLabError):
            continue
        given = answers.get(var)
        right = given is not None and answer_hash(qid, given.strip().lower()) == key
        scored[_grade_id(cell)] = right
        if right:
            cell.outputs = [_stream(f"{qid}: right (checked by Sandbox Lab outside your kernel).")]
        elif given is None:
            cell.outputs = [_error(f'{qid}: no answer. Write {var} = "<letter>" in the answers cell.')]
        else:
            cell.outputs = [_error(f"{qid}: {given!r} is not the right option (checked by Sandbox Lab outside your kernel).")]
    return scored


def _captures(source: str) -> Optional[tuple[int, str]]:
    """(level number, variable) of a grade cell that checks ``assert_captured(<level>, <variable>)``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "assert_captured"
                and len(node.args) >= 2 and isinstance(node.args[0], ast.Constant) and type(node.args[0].value) is int
                and isinstance(node.args[1], ast.Name)):
            return node.args[0].value, node.args[1].id
    return None


def grade_attacks(nb: NotebookNode, backend: Optional[Backend] = None) -> dict[str, bool]:
    """Score every capture-the-flag cell by running the attack's literal in the grader's own sandbox run; rewrite its
    outputs. grade_id → captured? Only a real run can capture: on the static backend nothing is awarded, and it says why."""
    from .ctf import attack, level

    answers: dict[str, str] = {}
    blank: set[str] = set()  # variables of solution cells still as released: nothing was answered
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            found = _literals(cell.source)
            if _unchanged(cell):
                blank.update(found)
            else:
                answers.update(found)
    scored: dict[str, bool] = {}
    for cell in nb.cells:
        md = cell.get("metadata", {}).get("nbgrader", {})
        asked = _captures(cell.source) if cell.cell_type == "code" and md.get("grade") else None
        if asked is None:
            continue
        number, var = asked
        gid = _grade_id(cell)
        code = answers.get(var)
        scored[gid] = False
        if code is None:
            why = "the cell is as it was released" if var in blank else f'{var} is not set to a string literal'
            cell.outputs = [_error(f'level {number}: no attack ({why}). Write your attack as {var} = r"""...""" in its cell.')]
            continue
        try:
            lv = level(number)
            result = attack(lv, code, backend or _grading_backend())
        except SandboxLabError as exc:
            cell.outputs = [_error(f"level {number}: not verified, no points: {exc}")]
            continue
        if result.captured:
            scored[gid] = True
            where = "; ".join(s.evidence for s in result.sinks)
            cell.outputs = [_stream(f"level {number}: captured (verified by Sandbox Lab's own run in {result.backend}, "
                                    f"outside your kernel, with a fresh flag): {where}")]
        else:
            cell.outputs = [_error(f"level {number}: not captured in Sandbox Lab's own run (outside your kernel). Hint: {result.hint}")]
    return scored


def _unchanged(cell: NotebookNode) -> bool:
    """Is this solution cell exactly as nbgrader released it (its checksum unchanged)? Then nothing was answered."""
    from nbgrader.utils import compute_checksum

    expected = cell.get("metadata", {}).get("nbgrader", {}).get("checksum")
    return bool(expected) and bool(compute_checksum(cell) == expected)


def policy_source(nb: NotebookNode, task: Task, submitted_dir: Optional[Path]) -> PolicySource:
    """The policy a submission contains: the policy cell's literal wins; else the submitted my_policy.json."""
    cells = [c for c in nb.cells if _grade_id(c) == f"{task.id}-policy"]
    if cells and _unchanged(cells[0]):
        return PolicySource(None, "the policy cell is as it was released: write your policy there (no answer, no points)")
    if cells:
        text = _literals(cells[0].source).get("policy_json")
        if text is not None:
            return PolicySource(text, "the policy cell")
    if submitted_dir is not None:
        path = submitted_dir / POLICY_FILE
        if path.is_file():
            try:
                return PolicySource(path.read_text(encoding="utf-8"), f"{POLICY_FILE} (submitted)")
            except (OSError, UnicodeDecodeError) as exc:
                return PolicySource(None, f"{POLICY_FILE} could not be read: {exc}")
    return PolicySource(None, NOT_A_LITERAL)


# --- one grading of the class per process -----------------------------------------------------
# The class is graded in a background thread while nbgrader runs the learners' kernels, and
# each notebook waits only for its own row: the Docker runs overlap with kernel execution.

_lock = threading.Lock()
_rows: dict[tuple[str, str, str], Row] = {}  # (task, student, sha256 of the policy) → row
_ready: dict[tuple[str, str, str], threading.Event] = {}
_backend: Optional[Backend] = None


def _grading_backend() -> Backend:
    global _backend
    if _backend is None:
        # not backends.default(): nbgrader sets NBGRADER_EXECUTION=autograde around this step too,
        # and default() gives the learner's kernel the static backend there
        name = os.environ.get(BACKEND_ENV, "").strip() or os.environ.get(backends.BACKEND_ENV, "").strip() or "auto"
        _backend = backends.get(name)
        atexit.register(_backend.close)  # nothing left behind when nbgrader exits
    return _backend


def _submission(student: str, found: PolicySource) -> Submission:
    if found.text is None:
        return Submission(student, found.origin, None, found.origin)
    return Submission(student, found.origin, found.text.encode("utf-8"))


def _key(task: Task, sub: Submission) -> tuple[str, str, str]:
    return (task.id, sub.student, sub.sha256)


def _start(task: Task, subs: list[Submission]) -> None:
    """Grade ``subs`` in the background (the first one first); each row is handed over as soon as it is final."""
    todo = [s for s in subs if _key(task, s) not in _ready]
    if not todo:
        return
    by_student = {s.student: s for s in todo}
    for s in todo:
        _ready[_key(task, s)] = threading.Event()

    def hand_over(row: Row) -> None:
        sub = by_student[row.student]
        _rows[_key(task, sub)] = row
        _ready[_key(task, sub)].set()

    def grade_all() -> None:
        try:
            grade_batch(task, todo, _grading_backend(), on_row=hand_over)
        except BaseException as exc:  # noqa: BLE001 - every waiting notebook must learn it, none may hang
            for s in todo:
                if not _ready[_key(task, s)].is_set():
                    _rows[_key(task, s)] = Row(s.student, 0, task.max_score, "error",
                                               f"{task.id}: not graded: the grader failed ({type(exc).__name__}: {exc}); rerun autograde", s.source, s.sha256)
                    _ready[_key(task, s)].set()

    threading.Thread(target=grade_all, name="sandbox-lab-autograde", daemon=True).start()


def _classmates(coursedir: Any, assignment: str, task: Task, only: str) -> list[Submission]:
    """Every submission of this assignment nbgrader will grade in this run (the first notebook grades them all)."""
    root = Path(coursedir.root) / coursedir.submitted_directory
    out = []
    for folder in sorted(root.glob(f"*/{assignment}")):
        student = folder.parent.name
        if only not in ("", "*") and student != only:
            continue
        notebooks = sorted(folder.glob("*.ipynb"))
        if not notebooks:
            continue
        try:
            nb = _read(str(notebooks[0]))
        except Exception:  # noqa: BLE001 - a broken notebook is graded (as nothing) when its turn comes
            continue
        out.append(_submission(student, policy_source(nb, task, folder)))
    return out


# --- rewriting the notebook ---------------------------------------------------------------------


_nbformat_read: Any = nbformat.read  # nbformat ships no type information


def _read(path: str) -> Any:
    return _nbformat_read(path, as_version=4)


_node: Any = NotebookNode


def _stream(text: str) -> Any:
    return _node({"output_type": "stream", "name": "stdout", "text": text + "\n"})


def _error(text: str) -> Any:
    return _node({"output_type": "error", "ename": "AssertionError", "evalue": text, "traceback": [f"AssertionError: {text}"]})


def _rewrite(nb: NotebookNode, task: Task, row: Row, found: PolicySource) -> NotebookNode:
    checks = {str(c["id"]): c for c in row.checks}
    header = f"Graded by Sandbox Lab outside your kernel, from {found.origin}; nothing your notebook defines changes this."
    for cell in nb.cells:
        gid = _grade_id(cell)
        if cell.cell_type != "code":
            continue
        if gid == f"{task.id}-grade":
            cell.outputs = [_stream(header + "\n" + row.feedback)]
            continue
        for check in task.checks:
            if gid == task.grade_id(check.id):
                c = checks.get(check.id)
                if c is not None and c.get("passed"):
                    cell.outputs = [_stream(f"{task.id}/{check.id}: {c['points']}/{c['max_points']} ({row.backend}). {c['message']}")]
                else:
                    why = c["message"] if c is not None else row.feedback
                    cell.outputs = [_error(f"{task.id}/{check.id}: 0/{check.points} ({row.backend or 'not graded'}). {why}")]
    return nb


class GradePolicies(Preprocessor):
    """nbgrader autograde step: grade the submission's policy here and set every rubric cell's outcome."""

    enabled = Bool(True)  # nbconvert preprocessors are off unless enabled
    submitted_directory = Unicode("", help="where the submission's own files are (found from the course when empty)").tag(config=True)

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]) -> tuple[NotebookNode, dict[str, Any]]:
        grade_answers(nb)
        grade_attacks(nb)
        task = find_task(nb)
        if task is None:
            return nb, resources  # a lesson, not a task: no policy to grade
        info = resources.get("nbgrader", {})
        student, assignment = str(info.get("student", "")), str(info.get("assignment", ""))
        coursedir = self.config.CourseDirectory
        folder = Path(self.submitted_directory) if self.submitted_directory else (
            Path(coursedir.root or ".") / (coursedir.submitted_directory or "submitted") / student / assignment
        )
        found = policy_source(nb, task, folder if folder.is_dir() else None)
        sub = _submission(student, found)
        with _lock:
            if _key(task, sub) not in _ready:
                only = str(coursedir.student_id) if "student_id" in coursedir else ""
                class_ = _classmates(coursedir, assignment, task, only) if coursedir.root else []
                _start(task, [sub] + [s for s in class_ if s.student != student])
            done = _ready[_key(task, sub)]
        done.wait()
        row = _rows[_key(task, sub)]
        if row.status == "error" and "the grader failed" in row.feedback:
            raise SandboxLabError(row.feedback)
        self.log.info("Sandbox Lab graded %s/%s: %s/%s (%s)", student, task.id, row.score, row.max_score, row.backend)
        return _rewrite(nb, task, row, found), resources
