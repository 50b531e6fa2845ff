"""The course summary a learner keeps: one self-contained HTML page of what they did, captured and scored.

It shows the progress board's two figures (done, solved), every lesson and when it
was finished, each question's first attempt, each task with the learner's best
policy and its score, each capture-the-flag level with its attempts and hints, and
the goals met in the lessons' editors. The page has no script, no style sheet and
no image from elsewhere: it opens anywhere, offline, years later.

"Best policy": every ``my_policy.json`` found for a task in the lab folders given
(the learner lab, and the copies ``scripts/learner-lessons`` keeps of an earlier one
beside it: ``<lab>.<date>``) is graded again here with the static backend (instant,
no Docker), and the best-scoring one is shown. A file that cannot be read or is not
a valid policy scores 0, with the reason, like a task notebook's grade.

``course_items`` is the catalogue the board counts (lessons, questions, tasks,
levels), loaded from the course's own sources.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import AbstractSet, Optional, Sequence, Union

from grader.backends.static import StaticBackend
from grader.course import reveals
from grader.course.ladder import Level, load_levels
from grader.grading.grade import Grade, grade_file
from grader.grading.tasks import Task, all_tasks
from grader.realtools.hatches import EXERCISES
from grader.course.hole_hunt import item_id
from grader.notebook.palette import GREEN, GREY, MUTED, h
from grader.course.progress import LESSONS, Progress, load_progress, progress_path
from grader.notebook.progress_views import BoardRow, board_groups, tally
from grader.course.quiz import Question, load_questions

__all__ = ["CourseItems", "TaskPolicy", "best_policies", "course_items", "summary_html", "summary_path", "write_summary"]

SUMMARY_NAME = "sandbox-lab-summary.html"
_MAX_POLICY = 20_000  # characters of a policy shown: a policy file is small; a huge one is cut, not copied whole


@dataclass(frozen=True)
class CourseItems:
    """Everything the board counts, from the course's sources."""

    questions: tuple[Question, ...]
    tasks: tuple[Task, ...]
    levels: tuple[Level, ...]
    hatches: tuple[tuple[str, str], ...] = ()  # (item id, title) of lesson 06's settings with a hole

    def task_rows(self) -> tuple[tuple[str, str], ...]:
        """(item id, title) of each task, as the board lists them."""
        return tuple((f"task:{t.id}", t.title) for t in self.tasks)

    def item_ids(self) -> tuple[str, ...]:
        """Every counted item id: lessons, questions, tasks, levels, settings holes."""
        return (tuple(i for i, _, _ in LESSONS) + tuple(f"quiz:{q.id}" for q in self.questions)
                + tuple(i for i, _ in self.task_rows()) + tuple(lv.item_id for lv in self.levels)
                + tuple(i for i, _ in self.hatches))


def course_items() -> CourseItems:
    """The course's items, loaded from its question bank, task files and level files."""
    return CourseItems(tuple(load_questions()), tuple(all_tasks()), tuple(load_levels()), hatch_rows())


def hatch_rows() -> tuple[tuple[str, str], ...]:
    """(item id, title) of each settings-with-a-hole exercise of lesson 06, as the board lists them."""
    return tuple((item_id(e.id), f"Find the hole: {e.id.replace('-', ' ')}") for e in EXERCISES)


@dataclass(frozen=True)
class TaskPolicy:
    """A learner's policy for a task: where it was found, its text (cut if huge) and its grade (static backend)."""

    task: str
    path: Path
    text: str
    grade: Grade


def _candidates(task: Task, labs: Sequence[Path]) -> list[Path]:
    folder = f"{task.order:02d}-task-{task.id}"
    out = []
    for lab in labs:
        roots = [lab, *sorted(lab.parent.glob(f"{lab.name}.*"))]  # the copies learner-lessons keeps of an earlier lab
        for root in roots:
            for where in (root / folder / "my_policy.json", root / "lessons" / folder / "my_policy.json"):
                if where.is_file() and where not in out:
                    out.append(where)
    return out


def best_policies(tasks: Sequence[Task], labs: Sequence[Path]) -> dict[str, TaskPolicy]:
    """For each task, the best-scoring ``my_policy.json`` found in ``labs`` (graded again, statically); none found: absent."""
    backend = StaticBackend()
    out: dict[str, TaskPolicy] = {}
    try:
        for task in tasks:
            for path in _candidates(task, labs):
                try:
                    text = path.read_text(encoding="utf-8", errors="replace")
                except OSError:
                    continue
                g = grade_file(task, path, backend)
                best = out.get(task.id)
                if best is None or g.score > best.grade.score:
                    out[task.id] = TaskPolicy(task.id, path, text[:_MAX_POLICY], g)
    finally:
        backend.close()
    return out


def _when(t: Optional[float]) -> str:
    return time.strftime("%Y-%m-%d", time.localtime(t)) if t is not None else ""


def _rows(rows: Sequence[BoardRow], extra: dict[str, str]) -> str:
    return "".join(
        f'<tr data-item="{h(r.item)}" data-done="{str(r.done).lower()}"><td>{r.mark}</td><td>{h(r.title)}</td>'
        f"<td>{h(extra.get(r.item, ''))}</td></tr>" for r in rows)


def summary_html(progress: Progress, items: CourseItems, policies: Optional[dict[str, TaskPolicy]] = None,
                 *, now: Optional[float] = None, solutions_shown: AbstractSet[str] = frozenset()) -> str:
    """The whole page, self-contained: no script, no external style sheet, font or image.

    ``solutions_shown``: the levels whose solution the learner asked for (``course.reveals``), counted as such."""
    policies = policies or {}
    groups = board_groups(progress, questions=items.questions, tasks=items.task_rows(), levels=items.levels,
                          hatches=items.hatches, solutions_shown=solutions_shown)
    t = tally(groups)
    finished = {i: _when(at) for i, at in progress.done.items()}
    for q in items.questions:
        a = progress.first_attempt(f"quiz:{q.id}")
        if a is not None:
            finished[f"quiz:{q.id}"] = _when(a.at)
    for lv in items.levels:
        finished[lv.item_id] = _when(progress.level(lv.item_id).captured)
    captured = [lv for lv in items.levels if progress.level(lv.item_id).captured is not None]
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>Sandbox Lab: course summary</title>",
        "<style>body{font-family:system-ui,sans-serif;max-width:52rem;margin:1rem auto;padding:0 1rem;line-height:1.45}"
        "table{border-collapse:collapse;width:100%}td,th{padding:3px 6px;vertical-align:top;text-align:left;"
        "border-bottom:1px solid #eaecf0}pre{background:#f9fafb;padding:6px;overflow-x:auto;white-space:pre-wrap}</style>",
        "</head><body>",
        "<h1>Sandbox Lab: course summary</h1>",
        f'<p class="sl-summary-figures" data-done="{t.done}" data-solved="{t.solved}" data-total="{t.total}" data-percent="{t.percent}">'
        f"<strong>{t.percent}% of the course mastered</strong> ({t.done} of {t.total}: lesson goals met, tasks at full marks, "
        f"levels captured or their solution asked for; {t.solved} of them without a solution shown). "
        f"Written {h(_when(now if now is not None else time.time()))}.</p>",
        f"<h2>Flags captured: {len(captured)} of {len(items.levels)}</h2>",
        "<ul>" + "".join(f"<li>Level {lv.number}: {h(lv.title)}</li>" for lv in captured) + "</ul>" if captured
        else f'<p style="color:{MUTED}">None yet: lesson 07 and <code>sandbox-lab attack</code>.</p>',
    ]
    for title, rows in groups:
        if not rows:
            continue
        parts.append(f"<h2>{h(title)}</h2><table><thead><tr><th>done</th><th>item</th><th>when</th></tr></thead>"
                     f"<tbody>{_rows(rows, finished)}</tbody></table>")
    parts.append("<h2>Your best policies</h2>")
    if not policies:
        parts.append(f'<p style="color:{MUTED}">No <code>my_policy.json</code> found in the task folders.</p>')
    for task in items.tasks:
        p = policies.get(task.id)
        if p is None:
            continue
        g = p.grade
        colour = GREEN if g.full_marks else GREY
        parts.append(
            f'<section class="sl-summary-policy" data-task="{h(task.id)}" data-score="{g.score}" data-max="{g.max_score}">'
            f"<h3>{h(task.title)}: <span style=\"color:{colour}\">{g.score}/{g.max_score}</span></h3>"
            f"<p><small>{h(p.path)}; graded again here, {h(g.backend)} (a prediction, not a run)</small></p>"
            f"<pre>{h(p.text)}</pre></section>")
    parts.append(f"<p><small>From your progress record <code>{h(progress.path)}</code>.</small></p></body></html>")
    return "\n".join(parts) + "\n"


def summary_path() -> Path:
    """Where the summary is written by default: beside the progress record."""
    return progress_path().parent / SUMMARY_NAME


def write_summary(path: Union[str, "os.PathLike[str]", None] = None, *,
                  labs: Sequence[Union[str, "os.PathLike[str]"]] = ()) -> Path:
    """Write the course summary (``summary_path()`` unless ``path`` is given) and return where it went.

    ``labs``: folders holding the task folders (the learner lab's root); by default the folder above the
    working directory, where a lesson's notebook runs beside the tasks. An unreadable progress record
    raises ``ProgressError``, an unreadable record of solutions shown ``LevelError`` (a summary of nothing would hide it).
    """
    progress = load_progress()
    items = course_items()
    roots = [Path(p) for p in labs] if labs else [Path.cwd().parent]
    html_text = summary_html(progress, items, best_policies(items.tasks, roots), solutions_shown=frozenset(reveals.solutions_shown()))
    out = Path(path) if path is not None else summary_path()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html_text, encoding="utf-8")
    return out
