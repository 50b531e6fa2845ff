"""What a task notebook calls: start a task, save the learner's policy, grade it, and assert one check.

Each helper prints or raises in a learner's words; none holds grading logic
(that is ``grading``). These run in the learner's kernel, so they only give
feedback: scores are set by the grader's own process (``autograde``).
Reference solutions are not part of the package. ``grade_file`` is re-exported so a notebook needs one import.

A check that passes with the whole task at full marks records the task as done, and an attack that was
judged counts as an attempt at its level, on the learner's progress board (``course.progress``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

from grader.backends.base import Backend
from grader.course.ladder import attack, level
from grader.core.errors import BackendError, PolicyError, TaskError
from grader.grading.grade import Grade, grade_file
from grader.core.policy import load_policy
from grader.core.wording import RAN_AT
from grader.grading.tasks import Task, load_task
from grader.course.progress import ProgressError, load_progress, mark_done, record_level

__all__ = ["assert_captured", "assert_check", "assert_passed", "grade_file", "save_policy", "start_task"]


def save_policy(path: Union[str, os.PathLike[str]], policy_json: str) -> None:
    """Write the learner's policy text to ``path`` as it is, then say whether it is valid.

    The text is saved even when invalid: grading then reports every problem,
    with its JSON pointer, instead of silently grading something else.
    """
    Path(path).write_text(policy_json.strip() + "\n", encoding="utf-8")
    try:
        load_policy(path, name=Path(path).name)
    except PolicyError as exc:
        print(f"Saved {path}, but it is not valid yet:\n{exc}")
        return
    print(f"Saved {path}: a valid policy.")


def start_task(task_id: str, policy_path: Union[str, os.PathLike[str]] = "my_policy.json") -> Task:
    """Begin a task in a notebook: return it, and remove a policy file left by an earlier run.

    A stale ``my_policy.json`` must never be graded in place of what the
    notebook writes now (nbgrader copies a student's files before re-running).
    """
    task = load_task(task_id)
    Path(policy_path).unlink(missing_ok=True)
    return task


def assert_passed(result: Grade, check_id: str) -> None:
    """Raise ``AssertionError`` with the feedback if the check failed (an nbgrader test cell calls this)."""
    c = result.check(check_id)
    if not c.passed:
        head = f"{result.task}/{check_id}: 0/{c.max_points}. "
        if result.errors:
            head += "The policy is not valid: " + "; ".join(f"{p.pointer}: {p.message}" for p in result.errors) + " "
        raise AssertionError(head + c.message)
    where = result.ran_at  # a run the run service made says where it ran (``Grade.ran_at``), as the boards do
    how = f"{RAN_AT}{where}, {result.backend}" if where else result.backend
    print(f"{result.task}/{check_id}: {c.points}/{c.max_points} ({how}). {c.message}")
    if result.full_marks:
        _record_task(result)


def _record_level(item_id: str, captured: bool, hint_shown: bool) -> None:
    """Count a judged attack on the learner's progress board, as lesson 07's editor and ``sandbox-lab attack`` do."""
    try:
        record_level(item_id, captured=captured, hint_shown=hint_shown)
    except (OSError, ProgressError) as exc:
        print(f"(progress not saved: {exc})")


def _record_task(result: Grade) -> None:
    """Record the task as done on the learner's progress board: every one of its checks passed in this grade.

    The grade must hold every check the task has (a partial grade proves nothing). Progress is
    the learner's own record, kept in their kernel; a file that cannot be written is said, never raised:
    the check passed all the same.
    """
    try:
        wanted = {c.id for c in load_task(result.task).checks}
    except TaskError:
        return
    if wanted != {c.id for c in result.checks}:
        return
    item = f"task:{result.task}"
    try:
        if load_progress().is_done(item):
            return
        mark_done(item)
    except (OSError, ProgressError) as exc:
        print(f"(progress not saved: {exc})")
        return
    print(f"Task {result.task} done: every check passes. It is recorded on your progress board.")


def assert_check(task_id: str, check_id: str, path: Union[str, os.PathLike[str]], backend: Optional[Backend] = None) -> None:
    """Grade the policy file at ``path`` afresh and assert one check (static backend unless one is given)."""
    assert_passed(grade_file(task_id, path, backend), check_id)


def assert_captured(level_number: int, attack_code: str, backend: Optional[Backend] = None) -> None:
    """Run an attack on a capture-the-flag level and raise ``AssertionError`` unless it captured the flag.

    Feedback only, in the learner's kernel: at autograde time the grader runs the
    attack again, in its own Docker run, and sets this cell's outcome
    (``autograde.grade_attacks``). Where no engine answers here, it says so and
    leaves the judgement to the grader.
    """
    from grader.backends import default

    lv = level(level_number)
    b = backend if backend is not None else default()
    try:
        result = attack(lv, attack_code, b)
    except BackendError as exc:
        print(f"level {lv.number}: not run here ({str(exc).rstrip('.')}). The grader runs your attack in Docker when it grades.")
        return
    finally:
        if backend is None:
            b.close()
    if result.captured is None:  # a broken run is no verdict: say so, and leave the judgement to a rerun
        print(f"level {lv.number}: could not judge this run ({result.error}). Rerun the cell; "
              "the grader runs your attack in Docker when it grades.")
        return
    _record_level(lv.item_id, result.captured, bool(result.hint))
    if not result.captured:
        raise AssertionError(f"level {lv.number}: not captured. Hint: {result.hint}\nWhat it printed:\n{result.output[-1500:]}")
    where = "; ".join(f"{s.host} ({s.how})" for s in result.sinks)
    print(f"level {lv.number}: captured ({result.backend}): the flag arrived at {where}.")
