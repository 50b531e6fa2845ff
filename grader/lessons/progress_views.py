"""The score board's view: lessons, questions (their first attempt), tasks, capture-the-flag levels and goals met.

Imports: ctf (``Level``), goals, palette, progress, quiz. Nothing downstream.
"""

from __future__ import annotations

from typing import Sequence

from grader.ctf.ladder import Level
from grader.lessons.goals import GOALS
from grader.lessons.palette import AMBER, GREEN, MUTED, RED, h
from grader.lessons.progress import LESSONS, Progress
from grader.lessons.quiz import Question

__all__ = ["progress_html"]


def _question_row(progress: Progress, q: Question) -> tuple[str, str, bool, str]:
    """(item id, title, solved, mark) of a question: solved only by a right first attempt."""
    item = f"quiz:{q.id}"
    title = q.prompt if len(q.prompt) < 70 else q.prompt[:67] + "..."
    first = progress.first_attempt(item)
    if first is None:
        return item, title, False, f'<span style="color:{MUTED}">○</span>'
    colour = GREEN if first.solved else (AMBER if first.score > 0 else RED)
    mark = "✓" if first.solved else ("◐" if first.score > 0 else "✗")
    return item, f"{title} (first attempt: {first.result})", first.solved, f'<span style="color:{colour}">{mark}</span>'


def _level_row(progress: Progress, lv: Level) -> tuple[str, str, bool, str]:
    """(item id, title, solved, mark) of a capture-the-flag level: attempts and hints used; solved once captured
    (the uncapturable last level: once the learner has tried enough to be told why)."""
    rec = progress.level(lv.item_id)
    title = f"{lv.number}. {lv.title}"
    tried = f"{rec.attempts} attempt{'s' if rec.attempts != 1 else ''}, {rec.hints} hint{'s' if rec.hints != 1 else ''} used"
    if rec.captured is not None:
        return lv.item_id, f"{title} (captured; {tried})", True, f'<span style="color:{GREEN}">⚑</span>'
    if lv.uncapturable is not None and rec.attempts >= lv.uncapturable.after:
        return lv.item_id, f"{title} (nothing to capture, and you saw why; {tried})", True, f'<span style="color:{GREEN}">✓</span>'
    if rec.attempts:
        return lv.item_id, f"{title} ({tried})", False, f'<span style="color:{AMBER}">◐</span>'
    return lv.item_id, title, False, f'<span style="color:{MUTED}">○</span>'


def progress_html(progress: Progress, *, questions: Sequence[Question] = (), tasks: Sequence[tuple[str, str]] = (),
                  levels: Sequence[Level] = ()) -> str:
    """The score board: lessons, questions (their first attempt), tasks and capture-the-flag levels, each solved or not."""

    def row(item_id: str, title: str, done: bool, mark: str) -> str:
        return f'<li data-item="{h(item_id)}" data-done="{str(done).lower()}">{mark} {h(title)} <small><code>{h(item_id)}</code></small></li>'

    def done_rows(items: Sequence[tuple[str, str]]) -> list[tuple[str, str, bool, str]]:
        out = []
        for item_id, title in items:
            done = progress.is_done(item_id)
            out.append((item_id, title, done, f'<span style="color:{GREEN}">✓</span>' if done else f'<span style="color:{MUTED}">○</span>'))
        return out

    groups: list[tuple[str, list[tuple[str, str, bool, str]]]] = [
        ("Lessons", done_rows([(i, f"{t} (~{m} min)") for i, t, m in LESSONS])),
        ("Questions (only the first attempt counts)", [_question_row(progress, q) for q in questions]),
        ("Tasks", done_rows(tasks)),
        ("Capture the flag (attempts and hints are counted)", [_level_row(progress, lv) for lv in levels]),
    ]
    counted = len(groups)
    goals = [(f"goal:{g.id}", f"Goal: {g.statement}") for g in GOALS.values() if progress.is_done(f"goal:{g.id}")]
    if goals:  # goals met in the lessons' editors; they count nothing towards the total
        groups.append(("Goals met", done_rows(goals)))
    known = {r[0] for _, rows in groups for r in rows}
    other = done_rows([(i, i) for i in sorted(progress.done) if i not in known])
    if other:
        groups.append(("Other", other))
    total = sum(len(rows) for _, rows in groups[:counted])
    solved = sum(r[2] for _, rows in groups[:counted] for r in rows)
    parts = [f'<div class="sl-progress" data-solved="{solved}" data-total="{total}"><p><strong>Solved {solved} of {total}</strong> '
             f"<small>(kept in <code>{h(progress.path)}</code>)</small></p>"]
    for title, rows in groups:
        if rows:
            parts.append(f"<h4 style='margin:6px 0 2px'>{h(title)}</h4><ul style='list-style:none;padding-left:8px'>{''.join(row(*r) for r in rows)}</ul>")
    parts.append("</div>")
    return "\n".join(parts)
