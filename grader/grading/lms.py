"""Grades that leave for a learning-management system: Canvas's gradebook CSV and Gradescope's ``results.json``.

**Canvas gradebook import CSV** (``canvas_csv``; ``CanvasExportPlugin`` for
``nbgrader export``). Canvas imports grades from the file its own gradebook
export writes (Canvas Instructor Guide, "How do I import grades in the
Gradebook?", community.canvaslms.com/t5/Instructor-Guide/How-do-I-import-grades-in-the-Gradebook/ta-p/807;
"How do I export grades in the Gradebook?", .../ta-p/809). Columns, in order:

===================  ==============================================================
``Student``          "Last, First" (shown by Canvas; not used to match a student)
``ID``               Canvas's numeric user id (blank: nbgrader does not know it)
``SIS User ID``      the institution's student id: nbgrader's student id by default
``SIS Login ID``     the institution's login (blank unless configured)
``Section``          the student's section (blank: nbgrader does not know it)
one per assignment   ``<name>`` creates a new assignment on import; ``<name> (<canvas id>)``
                     updates the existing one (``assignment_ids`` maps nbgrader names to ids)
===================  ==============================================================

The second row is ``Points Possible`` with each assignment's maximum under its
column (the other cells blank), as in Canvas's export. A score is nbgrader's
final score (raw score minus the late penalty, never below 0), and 0 for a
student with no submission, as nbgrader's own ``grades.csv``. Canvas's CSV
import carries scores only (no comments): per-check detail does not fit the
format and stays in nbgrader's feedback.

**Gradescope ``results.json``** (``gradescope_results``; ``grade-batch
--gradescope FILE``). Gradescope runs an autograder once per submission and
reads ``/autograder/results/results.json`` (Gradescope autograder docs,
"Autograder Specifications", gradescope-autograders.readthedocs.io/en/latest/specs/,
section "Output Format"): a top-level ``score``, ``output`` and
``visibility``, and a ``tests`` list with one entry per rubric check
(``name``, ``number``, ``score``, ``max_score``, ``status`` ``passed`` or
``failed``, ``output``, ``visibility``). A submission that could not be graded
(the run's evidence incomplete) scores 0 with the reason in ``output`` and
``extra_data.status = "error"``, never a pass.
"""

from __future__ import annotations

import csv
import functools
import io
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from grader.grading.batch import Gradebook, Row

__all__ = ["CANVAS_COLUMNS", "CanvasExportPlugin", "CanvasRow", "canvas_csv", "gradescope_results", "one_results"]

CANVAS_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
POINTS_POSSIBLE = "Points Possible"


@dataclass(frozen=True)
class CanvasRow:
    """One student's line: who (as Canvas matches them) and a score per assignment column."""

    student: str  # "Last, First"
    sis_user_id: str
    scores: tuple[Optional[float], ...]  # one per assignment, None: left blank (no change on import)
    canvas_id: str = ""
    sis_login_id: str = ""
    section: str = ""


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.2f}".rstrip("0")


def canvas_csv(assignments: Sequence[tuple[str, float]], rows: Sequence[CanvasRow]) -> str:
    """The Canvas gradebook import file: ``assignments`` are (column header, points possible)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([*CANVAS_COLUMNS, *(name for name, _ in assignments)])
    w.writerow([POINTS_POSSIBLE, "", "", "", "", *(_number(p) for _, p in assignments)])
    for r in rows:
        if len(r.scores) != len(assignments):
            raise ValueError(f"{r.sis_user_id}: {len(r.scores)} score(s) for {len(assignments)} assignment(s)")
        w.writerow([r.student, r.canvas_id, r.sis_user_id, r.sis_login_id, r.section,
                    *("" if s is None else _number(s) for s in r.scores)])
    return buf.getvalue()


def gradescope_results(row: Row) -> dict[str, Any]:
    """One graded submission as Gradescope's ``results.json``: a test per rubric check."""
    tests = [
        {
            "name": str(c["id"]),
            "number": str(i),
            "score": c["points"],
            "max_score": c["max_points"],
            "status": "passed" if c["passed"] else "failed",
            "output": str(c.get("message", "")) + (f"\n{c['error']}" if c.get("error") else ""),
            "visibility": "visible",
        }
        for i, c in enumerate(row.checks, 1)
    ]
    out: dict[str, Any] = {
        "score": row.score if row.status == "ok" else 0,
        "output": row.feedback,
        "visibility": "visible",
        "tests": tests,
        "extra_data": {"status": row.status, "max_score": row.max_score, "backend": row.backend, "sha256": row.sha256},
    }
    return out


def one_results(book: Gradebook) -> dict[str, Any]:
    """The ``results.json`` of a batch that holds exactly one submission (Gradescope grades one at a time)."""
    if len(book.rows) != 1:
        raise ValueError(
            f"--gradescope writes one submission's results.json (Gradescope runs the autograder once per "
            f"submission), but the batch held {len(book.rows)}; give grade-batch the one submission's directory"
        )
    return gradescope_results(book.rows[0])


@functools.lru_cache(maxsize=1)  # one class, however often nbgrader looks it up
def _plugin() -> Any:
    from nbgrader.api import Gradebook as NbGradebook, MissingEntry
    from nbgrader.plugins import ExportPlugin
    from traitlets import Dict, Enum, Unicode

    class CanvasExportPlugin(ExportPlugin):  # type: ignore[misc]  # nbgrader ships no type information
        """``nbgrader export --exporter=grader.grading.lms.CanvasExportPlugin --to canvas.csv``."""

        student_id_column = Enum(
            ["SIS User ID", "SIS Login ID", "ID"], default_value="SIS User ID",
            help="the Canvas column nbgrader's student id goes into (Canvas matches students by it)",
        ).tag(config=True)
        assignment_ids = Dict(
            {}, help="nbgrader assignment name -> Canvas assignment id: the column updates that assignment",
        ).tag(config=True)
        default_section = Unicode("", help="the Section column of every row").tag(config=True)

        def export(self, gradebook: NbGradebook) -> None:
            dest = self.to or "canvas.csv"
            wanted_a = [str(a) for a in self.assignment]
            wanted_s = [str(s) for s in self.student]
            assignments = [a for a in gradebook.assignments if not wanted_a or a.name in wanted_a]
            header = []
            for a in assignments:
                cid = self.assignment_ids.get(a.name)
                header.append((f"{a.name} ({cid})" if cid else a.name, float(a.max_score)))
            rows = []
            for s in gradebook.students:
                if wanted_s and s.id not in wanted_s:
                    continue
                scores: list[Optional[float]] = []
                for a in assignments:
                    try:
                        sub = gradebook.find_submission(a.name, s.id)
                    except MissingEntry:
                        scores.append(0.0)
                    else:
                        scores.append(max(0.0, float(sub.score) - float(sub.late_submission_penalty or 0.0)))
                name = ", ".join(p for p in (s.last_name, s.first_name) if p) or s.id
                ids = {"SIS User ID": "", "SIS Login ID": "", "ID": "", self.student_id_column: s.id}
                rows.append(CanvasRow(name, ids["SIS User ID"], tuple(scores), canvas_id=ids["ID"],
                                      sis_login_id=ids["SIS Login ID"], section=self.default_section))
            self.log.info("Exporting Canvas gradebook CSV to %s", dest)
            with open(dest, "w", newline="", encoding="utf-8") as fh:
                fh.write(canvas_csv(header, rows))

    return CanvasExportPlugin


def __getattr__(name: str) -> Any:
    # nbgrader is the lab extra: the plugin class is built on first use, so a core install (no extra) can import
    # this module (grade-batch --gradescope) without it.
    if name == "CanvasExportPlugin":
        return _plugin()
    raise AttributeError(name)
