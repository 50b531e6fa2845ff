"""An nbgrader course's assignment as the class report reads it (``sandbox-lab class-report --nbgrader COURSE``).

The class report (``class_report``) reads a gradebook of rows, one per
student, each with its per-check results and the policy graded. For an
nbgrader course they come from two places, both written by ``nbgrader
autograde`` and neither by a learner's kernel:

- **nbgrader's gradebook** (``gradebook.db``, read through nbgrader's own
  ``Gradebook`` API): the roster, each student's submission, and the score
  of every rubric cell (``<task>-<check>``), which ``GradePolicies`` set from
  the grader's own grade. A check passed is a rubric cell at its full points;
- **the autograded notebook** (``autograded/<student>/<assignment>/``): the
  policy graded, found by the rule autograde used (``autograde.policy_source``:
  the policy cell's literal, else the submitted ``my_policy.json``), parsed,
  never executed.

A student of the roster without a submission in the gradebook is *missing*
(scores 0, counted in no check); a submission whose policy is absent or not a
valid policy is *invalid*, with the reason; a submission in the gradebook
without its autograded notebook is *error*. Nothing is guessed: an unknown
course, assignment or task is a ``NbgraderCourseError`` with what to do.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from grader.core.errors import SandboxLabError
from grader.core.policy import load_policy
from grader.grading.class_report import ClassReportError, parse_gradebook
from grader.grading.tasks import Task, all_tasks

__all__ = ["NbgraderBook", "NbgraderCourseError", "load_nbgrader_book"]


class NbgraderCourseError(ClassReportError):
    """An nbgrader course the class report cannot read: what is wrong and what to do."""

    def __init__(self, course: str, problem: str) -> None:
        self.problems = (problem,)
        SandboxLabError.__init__(self, f"{course}: {problem}")


@dataclass(frozen=True)
class NbgraderBook:
    """The gradebook of one assignment (``class_report``'s shape) and the policy graded for each submission."""

    book: Any  # class_report's parsed gradebook
    policies: dict[str, bytes]


def _task_of(grade_ids: set[str], course: str, assignment: str) -> Task:
    found = [t for t in all_tasks() if t.checks and all(t.grade_id(c.id) in grade_ids for c in t.checks)]
    if len(found) != 1:
        raise NbgraderCourseError(course, f"assignment {assignment!r} holds the rubric cells of "
                                  f"{'no' if not found else 'more than one'} Sandbox Lab task; the class report reads "
                                  "task assignments (lessons/1N-task-*)")
    return found[0]


def _policy_of(autograded: Path, submitted: Path, task: Task) -> tuple[Optional[bytes], str]:
    """The policy autograde graded in this submission, or None with the reason."""
    import nbformat

    from grader.grading.autograde import policy_source

    read: Any = nbformat.read  # nbformat ships no type information

    notebooks = sorted(autograded.glob("*.ipynb"))
    if not notebooks:
        return None, f"{autograded}: no autograded notebook (run nbgrader autograde)"
    for path in notebooks:
        nb = read(path, as_version=4)
        if any(c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == f"{task.id}-policy" for c in nb.cells):
            found = policy_source(nb, task, submitted if submitted.is_dir() else None)
            if found.text is None:
                return None, found.origin
            return found.text.encode("utf-8"), ""
    return None, f"{autograded}: no notebook holds the policy cell {task.id}-policy"


def load_nbgrader_book(course: Path, assignment: str, db_url: Optional[str] = None,
                       course_id: str = "sandbox-lab") -> NbgraderBook:
    """One assignment of the nbgrader course rooted at ``course``, as the class report reads it."""
    from nbgrader.api import Gradebook, MissingEntry

    where = str(course)
    db = db_url or "sqlite:///" + str(course / "gradebook.db")
    if db.startswith("sqlite:///") and not Path(db[len("sqlite:///"):]).is_file():
        raise NbgraderCourseError(where, "no gradebook.db: run nbgrader from the course's root (nbgrader_config.py)")
    with Gradebook(db, course_id) as gb:
        try:
            record = gb.find_assignment(assignment)
        except MissingEntry:
            known = ", ".join(a.name for a in gb.assignments) or "none"
            raise NbgraderCourseError(where, f"no assignment {assignment!r} in the gradebook (known: {known})") from None
        grade_ids = {cell.name for nb in record.notebooks for cell in nb.grade_cells}
        task = _task_of(grade_ids, where, assignment)
        rows: list[dict[str, Any]] = []
        missing: list[str] = []
        policies: dict[str, bytes] = {}
        for student in sorted(gb.students, key=lambda s: s.id):
            try:
                sub = gb.find_submission(assignment, student.id)
            except MissingEntry:
                missing.append(student.id)
                continue
            scores = {g.name: g for nb in sub.notebooks for g in nb.grades}
            checks = []
            for c in task.checks:
                g = scores.get(task.grade_id(c.id))
                points = int(round(g.score)) if g is not None and g.score is not None else 0
                checks.append({"id": c.id, "points": points, "max_points": c.points, "passed": points >= c.points})
            autograded = course / "autograded" / student.id / assignment
            policy, why = _policy_of(autograded, course / "submitted" / student.id / assignment, task)
            status = "ok"
            if policy is None:
                status = "error" if not autograded.is_dir() or "no autograded notebook" in why else "invalid"
            else:
                try:
                    load_policy(policy, name=f"{student.id}'s policy")
                except (SandboxLabError, ValueError) as exc:
                    status, why = "invalid", str(exc)
            row: dict[str, Any] = {
                "student": student.id, "score": sum(c["points"] for c in checks), "max_score": task.max_score,
                "status": status, "checks": checks if status == "ok" else [],
                "source": str(autograded), "sha256": hashlib.sha256(policy).hexdigest() if policy else "",
                # nbgrader's own figures: the final score has the late penalty taken off
                "final_score": float(sub.score), "late_penalty": float(sub.late_submission_penalty or 0.0),
                "seconds_late": float(sub.total_seconds_late),
            }
            if status != "ok":
                row["reason"] = why
            elif policy is not None:
                policies[student.id] = policy
            rows.append(row)
    data = {"task": task.id, "max_score": task.max_score, "backend": "nbgrader autograde", "rows": rows,
            "missing": missing}
    return NbgraderBook(parse_gradebook(data, where), policies)
