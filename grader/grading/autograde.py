"""Scores computed by the grader, not by the learner's kernel: Sandbox Lab's steps in ``nbgrader autograde``.

nbgrader's tests run in the learner's kernel, so anything a learner defines
there (``assert_passed = lambda *a: None``, a patched ``builtins``, a rewritten
``my_policy.json``) could decide a score; and nbgrader trusts the structure of
the notebook it is handed. Two preprocessors close both, and fail closed:

``CheckSubmission`` is the first *sanitizing* step, before nbgrader's own and
before any learner code runs. It:

1. reads the released assignment: the source notebook's graded cells (order,
   nbgrader metadata, cell types) and nbgrader's gradebook record of their
   released text;
2. compares the submission with it (``submission.check_structure``): every
   graded cell present exactly once with its metadata, in order, locked cells
   unedited. The notebook handed on is brought back to the released structure
   (a missing rubric cell is put back, duplicates and unknown records lose their
   nbgrader metadata), so nbgrader's own steps never abort the class, and every
   deviation is remembered with the rubric cells it scores 0;
3. reads the policy the submission contains, by the rule in ``policy_source``:
   the string literal assigned to ``policy_json`` in the policy cell, parsed
   with ``ast`` (never executed); only when the cell holds no such literal, the
   ``my_policy.json`` submitted beside the notebook, read only as a regular file
   inside the submission (``submission.read_policy_file``: no links);
4. starts grading it in this process (Docker when an engine answers, otherwise
   the static prediction, and the feedback says *predicted*), through the same
   deduplicating, parallel path as ``grade-batch``: the first notebook of a run
   reads and grades every submission of the assignment at once, before any
   learner's kernel has run.

``GradePolicies`` runs after nbgrader has executed the submission and before it
saves the scores. It rewrites the outputs of **every** autograded rubric cell:
points or an error with the feedback from the grade; 0 with the reason where
the structure check found a deviation that affects it; 0 where no judge of this
module scores it, and 0 everywhere if ``CheckSubmission`` did not run. The
learner's kernel never decides a rubric cell. nbgrader's ``SaveAutoGrades``
then records exactly those scores. What deviated is listed for the instructor:
a WARNING log line per submission, and ``metadata.sandbox_lab.structure`` in
the autograded notebook (``{"checked": true, "deviations": [{"grade_id",
"problem", "affects"}]}``, always overwritten, so a learner cannot forge it).

Lessons with graded multiple-choice letters (lesson 05) get the same
treatment (``answers``): a grade cell that checks ``is_option("<question>",
answer_x)`` is scored here, from the string literal ``answer_x = "c"`` in the
answers cell, against the question bank's hashed key. A ``str`` subclass or a
patched ``strip`` in the kernel changes nothing. The first answer is what
counts (``course.first_answer``): in a class (``SANDBOX_LAB_CLASS_SECRET`` set
here), from the record signed for this student in the check's output or in the
submitted ``first-answers.jsonl``, and 0 with the reason where there is no
trustworthy one; both read by ``CheckSubmission``, before nbgrader clears the
outputs. Without the secret, a record in the outputs is read unverified, and a
warning says so.

Capture-the-flag attacks (the capture-the-flag task) get the same treatment: a
grade cell that checks ``assert_captured(<level>, attack_x)`` is scored here by
running the string literal assigned to ``attack_x`` in the learner's solution
cell in the level's sandbox, in the grader's own Docker run, with a flag the
kernel never saw. The code is read with ``ast`` and never executed in this
process; it runs only inside the sandbox.

Not covered: nbgrader runs learner code with the grader's own rights, so a
kernel could rewrite files on the grading machine (another student's
submission, the gradebook). Everything here is read before the first kernel
starts; run ``nbgrader autograde`` in a container of its own all the same.

The process-wide state below is deliberate: nbgrader builds a new
preprocessor for every notebook, hands nothing from its sanitizing pass to its
grading pass but the file, and one ``nbgrader autograde`` must grade a class
once, not once per student. What ``CheckSubmission`` found is handed over in
process memory, where no learner can write.
"""

from __future__ import annotations

import atexit
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from nbconvert.preprocessors import Preprocessor
import nbformat
from nbformat import NotebookNode
from traitlets import Bool

from grader import backends
from grader.backends.base import Backend
from grader.grading.answers import asked_call as _asked, call_on as _call_on, class_secret, error_output as _error
from grader.grading.answers import first_answers, grade_answers, grade_id as _grade_id, graded_calls as _graded_calls
from grader.grading.answers import literal_strings, stream_output as _stream
from grader.grading.batch import Row, Submission, grade_batch
from grader.core.errors import SandboxLabError
from grader.core.text import printable
from grader.grading.submission import Deviation, Reference, check_structure, read_submitted, reference_of, zeroed
from grader.grading.tasks import Task, all_tasks
from grader.course.first_answer import FirstAnswer

__all__ = ["CheckSubmission", "GradePolicies", "PolicySource", "Reading", "find_task", "first_answers", "grade_answers",
           "grade_attacks", "literal_strings", "policy_source"]

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


def find_task(nb: NotebookNode) -> Optional[Task]:
    """The task whose policy cell and every rubric cell this notebook holds (None: not a task notebook)."""
    ids = {_grade_id(c) for c in nb.cells}
    for task in all_tasks():
        if f"{task.id}-policy" in ids and all(task.grade_id(c.id) in ids for c in task.checks):
            return task
    return None


def _captures(source: str) -> Optional[tuple[int, str]]:
    """(level number, variable) of a grade cell that checks ``assert_captured(<level>, <variable>)``."""
    return _call_on(source, "assert_captured", int)


def grade_attacks(nb: NotebookNode, backend: Optional[Backend] = None) -> dict[str, bool]:
    """Score every capture-the-flag cell by running the attack's literal in the grader's own sandbox run; rewrite its
    outputs. grade_id → captured? Only a real run can capture: on the static backend nothing is awarded, and it says why."""
    from grader.course.ladder import attack, level

    answers: dict[str, str] = {}
    blank: set[str] = set()  # variables of solution cells still as released: nothing was answered
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            found = literal_strings(cell.source)
            if _unchanged(cell):
                blank.update(found)
            else:
                answers.update(found)
    scored: dict[str, bool] = {}
    for cell, (number, var) in _graded_calls(nb, _captures):
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
        elif result.captured is None:
            cell.outputs = [_error(f"level {number}: not verified, no points: could not grade: the grader's run could not "
                                   f"be judged ({result.error}); regrade this submission")]
        else:
            cell.outputs = [_error(f"level {number}: not captured in Sandbox Lab's own run (outside your kernel). Hint: {result.hint}")]
    return scored


def _unchanged(cell: NotebookNode) -> bool:
    """Is this solution cell exactly as nbgrader released it (its checksum unchanged)? Then nothing was answered."""
    from nbgrader.utils import compute_checksum

    expected = cell.get("metadata", {}).get("nbgrader", {}).get("checksum")
    return bool(expected) and bool(compute_checksum(cell) == expected)


def policy_source(nb: NotebookNode, task: Task, submitted_dir: Optional[Path]) -> PolicySource:
    """The policy a submission contains: the policy cell's literal wins; else the submitted my_policy.json.

    The file is read only as a regular file directly inside ``submitted_dir``
    (threat: a link to a classmate's file, a directory, a FIFO that hangs the
    grader, a huge file); anything else is no policy, with the reason.
    """
    cells = [c for c in nb.cells if _grade_id(c) == f"{task.id}-policy"]
    if cells and _unchanged(cells[0]):
        return PolicySource(None, "the policy cell is as it was released: write your policy there (no answer, no points)")
    if cells:
        text = literal_strings(cells[0].source).get("policy_json")
        if text is not None:
            return PolicySource(text, "the policy cell")
    if submitted_dir is not None:
        got = read_submitted(submitted_dir, POLICY_FILE)
        if got.text is not None:
            return PolicySource(got.text, f"{POLICY_FILE} (submitted)")
        if got.cause != "absent":  # there but not read: say why; a file never submitted is just no answer
            return PolicySource(None, f"{got.why}. The policy cell does not set policy_json to a string literal either.")
    return PolicySource(None, NOT_A_LITERAL)


@dataclass(frozen=True)
class Reading:
    """What ``CheckSubmission`` found in one submission before any learner code ran."""

    task: Optional[Task]
    deviations: tuple[Deviation, ...]
    policy: Optional[PolicySource]  # None: not a policy task
    first: tuple[tuple[str, FirstAnswer], ...] = ()  # ``first_answers``: (grade_id, its first answer) as submitted

    def zeroed(self) -> dict[str, list[str]]:
        """rubric grade_id → why it scores 0."""
        return zeroed(self.deviations)


# --- one reading and one grading of the class per process -----------------------------------
# The class is graded in a background thread while nbgrader runs the learners' kernels, and
# each notebook waits only for its own row: the Docker runs overlap with kernel execution.

_lock = threading.Lock()
_rows: dict[tuple[str, str, str], Row] = {}  # (task, student, sha256 of the policy) → row
_ready: dict[tuple[str, str, str], threading.Event] = {}
_backend: Optional[Backend] = None
_readings: dict[tuple[str, str, str], Reading] = {}  # (assignment, student, notebook) → what CheckSubmission found
_references: dict[tuple[str, str, str, str], tuple[Reference, Optional[Task]]] = {}  # (db, assignment, notebook, mtime)
_class_read: set[tuple[str, str]] = set()  # (assignment, notebook) whose classmates were read and started


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


def _read_one(nb: NotebookNode, ref: Reference, task: Optional[Task], folder: Optional[Path],
              student: str = "") -> tuple[NotebookNode, Reading]:
    """Check one submission's structure and find its policy: the notebook brought back to the release, and the reading."""
    # from the outputs as submitted (nbgrader clears them next) and the submitted ledger, verified for this student
    first = tuple(sorted(first_answers(nb, folder=folder, student=student, secret=class_secret()).items()))
    structure = check_structure(nb, ref)
    policy = policy_source(structure.notebook, task, folder) if task is not None else None
    return structure.notebook, Reading(task, structure.deviations, policy, first)


def _classmates(coursedir: Any, assignment: str, notebook: str, ref: Reference, task: Task, only: str) -> list[Submission]:
    """Every other submission of this assignment nbgrader will grade in this run, read now, before any kernel runs."""
    root = Path(coursedir.format_path(coursedir.submitted_directory, "*", assignment)).parent.parent
    out = []
    for folder in sorted(root.glob(f"*/{assignment}")):
        student = folder.parent.name
        if only not in ("", "*") and student != only:
            continue
        try:
            _, reading = _read_one(_read(str(folder / f"{notebook}.ipynb")), ref, task, folder, student)
        except Exception:  # noqa: BLE001 - a broken notebook is read (and graded as nothing, with why) when its turn comes
            continue
        if reading.policy is not None:
            out.append(_submission(student, reading.policy))
    return out


def _released(path: Path, assignment: str, notebook: str, db_url: str, config: Any) -> tuple[Reference, Optional[Task]]:
    """The released assignment's graded structure (source notebook) and released text (nbgrader's gradebook)."""
    from nbgrader.api import Gradebook
    from nbgrader.preprocessors import ClearHiddenTests
    from nbgrader.utils import compute_checksum

    source = _read(str(path))
    metadata = {_grade_id(c): c for c in source.cells if _grade_id(c)}
    hider = ClearHiddenTests(config=config)
    released: dict[str, tuple[str, str]] = {}
    with Gradebook(db_url) as gb:
        for sc in gb.find_notebook(notebook, assignment).source_cells:
            # the gradebook keeps hidden tests (nbgrader restores them to run); the learner saw the cell without them
            shown = _from_dict({"cell_type": sc.cell_type, "source": sc.source,
                           "metadata": {"nbgrader": dict(metadata[sc.name].metadata.get("nbgrader", {}))} if sc.name in metadata else {}})
            if sc.name in metadata:
                hider._remove_hidden_test_region(shown)
                released[sc.name] = (sc.source, compute_checksum(shown))
    return reference_of(source, released, _reads), find_task(source)


def _reads(source: str) -> Optional[set[str]]:
    """The answer variables a rubric cell reads, when it is one this module scores by name (else None: all of them)."""
    asked = _asked(source) or _captures(source)
    return {asked[1]} if asked is not None else None


# --- rewriting the notebook ---------------------------------------------------------------------


_nbformat_read: Any = nbformat.read  # nbformat ships no type information
_from_dict: Any = nbformat.from_dict


def _read(path: str) -> Any:
    return _nbformat_read(path, as_version=4)


def _rewrite(nb: NotebookNode, task: Task, row: Row, found: PolicySource, structure: str) -> set[str]:
    """Set the feedback cell and every rubric cell of a policy task from the grade; the rubric grade_ids set."""
    checks = {str(c["id"]): c for c in row.checks}
    header = f"Graded by Sandbox Lab outside your kernel, from {found.origin}; nothing your notebook defines changes this."
    if structure:
        header += "\n" + structure
    done: set[str] = set()
    for cell in nb.cells:
        gid = _grade_id(cell)
        if cell.cell_type != "code":
            continue
        if gid == f"{task.id}-grade":
            cell.outputs = [_stream(header + "\n" + row.feedback)]
            continue
        for check in task.checks:
            if gid == task.grade_id(check.id):
                done.add(gid)
                c = checks.get(check.id)
                if c is not None and c.get("passed"):
                    cell.outputs = [_stream(f"{task.id}/{check.id}: {c['points']}/{c['max_points']} ({row.backend}). {c['message']}")]
                else:
                    why = c["message"] if c is not None else row.feedback
                    cell.outputs = [_error(f"{task.id}/{check.id}: 0/{check.points} ({row.backend or 'not graded'}). {why}")]
    return done


def _info(resources: dict[str, Any]) -> tuple[str, str, str, str]:
    info = resources.get("nbgrader", {})
    return (str(info.get("student", "")), str(info.get("assignment", "")), str(info.get("notebook", "")), str(info.get("db_url", "")))


def _coursedir(config: Any) -> Any:
    from nbgrader.coursedir import CourseDirectory

    return CourseDirectory(config=config)


class CheckSubmission(Preprocessor):
    """nbgrader sanitizing step (first, before nbgrader's own): check the submission against the release, read its policy."""

    enabled = Bool(True)  # nbconvert preprocessors are off unless enabled

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]) -> tuple[NotebookNode, dict[str, Any]]:
        student, assignment, notebook, db_url = _info(resources)
        coursedir = _coursedir(self.config)
        source = Path(coursedir.format_path(coursedir.source_directory, ".", assignment)) / f"{notebook}.ipynb"
        with _lock:
            # keyed by the source's mtime too: a long-lived formgrader process must not grade against a stale release
            rkey = (db_url, assignment, notebook, str(source.stat().st_mtime_ns) if source.exists() else "")
            if rkey not in _references:
                # an unreadable release is the instructor's to fix: it fails this notebook loudly (never a pass)
                _references[rkey] = _released(source, assignment, notebook, db_url, self.config)
            ref, task = _references[rkey]
        folder = Path(coursedir.format_path(coursedir.submitted_directory, student, assignment))
        nb, reading = _read_one(nb, ref, task, folder if folder.is_dir() else None, student)
        if reading.first and class_secret() is None:
            self.log.warning("Sandbox Lab: %s/%s/%s: first answers read from the outputs unverified: set "
                             "SANDBOX_LAB_CLASS_SECRET (and give each learner's kernel its key) to verify them",
                             student, assignment, notebook)
        with _lock:
            _readings[(assignment, student, notebook)] = reading
            if task is not None and reading.policy is not None:
                sub = _submission(student, reading.policy)
                if _key(task, sub) not in _ready:
                    class_: list[Submission] = []
                    if (assignment, notebook) not in _class_read:
                        _class_read.add((assignment, notebook))
                        class_ = _classmates(coursedir, assignment, notebook, ref, task, str(coursedir.student_id))
                    _start(task, [sub] + [s for s in class_ if s.student != student])
        if reading.deviations:
            self.log.warning("Sandbox Lab: %s/%s/%s differs from the released assignment (%d): %s; 0 points on: %s",
                             student, assignment, notebook, len(reading.deviations),
                             "; ".join(str(d) for d in reading.deviations), ", ".join(sorted(reading.zeroed())) or "nothing")
        return nb, resources


NOT_CHECKED = ("Sandbox Lab's structure check did not run before this notebook was executed, so nothing in it "
               "can be trusted (instructor: nbgrader_config.py must list CheckSubmission first in "
               "Autograde.sanitize_preprocessors)")


class GradePolicies(Preprocessor):
    """nbgrader autograde step: grade the submission's policy here and set every rubric cell's outcome."""

    enabled = Bool(True)  # nbconvert preprocessors are off unless enabled

    def preprocess(self, nb: NotebookNode, resources: dict[str, Any]) -> tuple[NotebookNode, dict[str, Any]]:
        student, assignment, notebook, _ = _info(resources)
        rubric = [c for c in nb.cells if c.cell_type == "code" and c.get("metadata", {}).get("nbgrader", {}).get("grade")
                  and not c.get("metadata", {}).get("nbgrader", {}).get("solution")]
        try:
            return self._grade(nb, resources, rubric)
        except Exception as exc:  # noqa: BLE001 - a submission that errored scores 0 with the reason, never a partial score
            why = (f"0 points: Sandbox Lab could not grade this submission ({type(exc).__name__}: "
                   f"{printable(str(exc).splitlines()[0] if str(exc) else '')}); the instructor regrades it")
            self.log.error("Sandbox Lab could not grade %s/%s/%s: every rubric cell scores 0: %s",
                           student, assignment, notebook, why)
            for cell in rubric:
                cell.outputs = [_error(f"{_grade_id(cell)}: {why}")]
            nb.metadata["sandbox_lab"] = {"structure": {"checked": False, "deviations": []}, "error": printable(str(exc))}
            return nb, resources

    def _grade(self, nb: NotebookNode, resources: dict[str, Any], rubric: list[NotebookNode]) -> tuple[NotebookNode, dict[str, Any]]:
        student, assignment, notebook, _ = _info(resources)
        with _lock:
            reading = _readings.pop((assignment, student, notebook), None)  # used once: never a stale reading
        if reading is None:
            reading = Reading(None, (Deviation("*", NOT_CHECKED, frozenset(_grade_id(c) for c in rubric), "not-checked"),), None)
        judged = set(grade_answers(nb, dict(reading.first))) | set(grade_attacks(nb))
        zero = reading.zeroed()
        summary = ""
        if reading.deviations:
            summary = ("Your notebook differs from the released assignment: " + "; ".join(str(d) for d in reading.deviations)
                       + ". 0 points on: " + (", ".join(sorted(zero)) or "nothing (no rubric cell depends on it)")
                       + ". Keep every graded cell as released (write only in the answer cells) and resubmit.")
        task = reading.task
        if task is not None and reading.policy is not None:
            sub = _submission(student, reading.policy)
            with _lock:
                done = _ready[_key(task, sub)]
            done.wait()
            row = _rows[_key(task, sub)]
            if row.status == "error" and "the grader failed" in row.feedback:
                # the grade could not be made (the engine stopped, a fault on this submission): every rubric cell
                # scores 0 with the row's reason, never the answers' points alone (``preprocess`` does it)
                raise SandboxLabError(row.feedback)
            judged |= _rewrite(nb, task, row, reading.policy, summary)
            self.log.info("Sandbox Lab graded %s/%s: %s/%s (%s) before structure checks", student, task.id, row.score, row.max_score, row.backend)
        for cell in rubric:
            gid = _grade_id(cell)
            if gid in zero:
                cell.outputs = [_error(f"{gid}: 0 points: the submission differs from the released assignment: "
                                       + "; ".join(zero[gid]) + ". Keep every graded cell as released and resubmit.")]
            elif gid not in judged:
                # fail closed: a rubric cell no judge here scores is never left to the learner's kernel
                cell.outputs = [_error(f"{gid}: 0 points: Sandbox Lab has no judge for this cell outside your kernel "
                                       "(instructor: every autograded cell must check a policy, an option or an attack).")]
        nb.metadata["sandbox_lab"] = {"structure": {"checked": not any(d.grade_id == "*" for d in reading.deviations),
                                                    "deviations": [d.to_json() for d in reading.deviations]}}
        return nb, resources
