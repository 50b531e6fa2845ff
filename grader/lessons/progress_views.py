"""The score board's view: lessons, questions (their first attempt), tasks, capture-the-flag levels and goals met.

Two figures, kept apart: how much of the course is **done** (a lesson finished, a
question answered, a task at full marks, a level captured or seen through) and how
much was **solved** (the same, but a question only when its first attempt was right).
The board reaches 100% only when every item is done; answering again after the
feedback never raises the solved figure. One line says both; each group's rows
open on demand.

Imports: ctf (``Level``), goals, palette, progress, quiz. Nothing downstream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from grader.ctf.ladder import Level
from grader.lessons.goals import GOALS
from grader.lessons.palette import AMBER, GREEN, MUTED, RED, h
from grader.lessons.progress import LESSONS, Progress
from grader.lessons.quiz import Question

__all__ = ["COUNTED", "BoardRow", "Tally", "board_groups", "progress_html", "tally"]


@dataclass(frozen=True)
class BoardRow:
    """One item on the board: done (the course moves on), solved (done and, for a question, right at the first attempt)."""

    item: str
    title: str
    done: bool
    solved: bool
    mark: str  # HTML: the coloured symbol


@dataclass(frozen=True)
class Tally:
    """The board's figures over the counted groups (goals met and other records count nothing)."""

    done: int
    solved: int
    total: int

    @property
    def percent(self) -> int:
        """Whole percent done, rounded down: 100 only when every item is done."""
        return 100 * self.done // self.total if self.total else 0


def _mark(symbol: str, colour: str) -> str:
    return f'<span style="color:{colour}">{symbol}</span>'


def _question_row(progress: Progress, q: Question) -> BoardRow:
    """A question: done once answered, solved only by a right first attempt."""
    return _attempt_row(progress, f"quiz:{q.id}", q.prompt)


def _attempt_row(progress: Progress, item: str, title: str) -> BoardRow:
    """An item judged once (a question, a settings hole hunt): done once tried, solved only by a right first attempt."""
    title = title if len(title) < 70 else title[:67] + "..."
    first = progress.first_attempt(item)
    if first is None:
        return BoardRow(item, title, False, False, _mark("○", MUTED))
    colour = GREEN if first.solved else (AMBER if first.score > 0 else RED)
    symbol = "✓" if first.solved else ("◐" if first.score > 0 else "✗")
    return BoardRow(item, f"{title} (first attempt: {first.result})", True, first.solved, _mark(symbol, colour))


def _level_row(progress: Progress, lv: Level) -> BoardRow:
    """A capture-the-flag level: attempts and hints used; done once captured
    (the uncapturable last level: once the learner has tried enough to be told why)."""
    rec = progress.level(lv.item_id)
    title = f"{lv.number}. {lv.title}"
    tried = f"{rec.attempts} attempt{'s' if rec.attempts != 1 else ''}, {rec.hints} hint{'s' if rec.hints != 1 else ''} used"
    if rec.captured is not None:
        return BoardRow(lv.item_id, f"{title} (captured; {tried})", True, True, _mark("⚑", GREEN))
    if lv.uncapturable is not None and rec.attempts >= lv.uncapturable.after:
        return BoardRow(lv.item_id, f"{title} (nothing to capture, and you saw why; {tried})", True, True, _mark("✓", GREEN))
    if rec.attempts:
        return BoardRow(lv.item_id, f"{title} ({tried})", False, False, _mark("◐", AMBER))
    return BoardRow(lv.item_id, title, False, False, _mark("○", MUTED))


def _done_rows(progress: Progress, items: Sequence[tuple[str, str]]) -> list[BoardRow]:
    out = []
    for item_id, title in items:
        done = progress.is_done(item_id)
        out.append(BoardRow(item_id, title, done, done, _mark("✓", GREEN) if done else _mark("○", MUTED)))
    return out


COUNTED = ("Lessons", "Questions (only the first attempt counts)", "Tasks (done at full marks)",
           "Capture the flag (attempts and hints are counted)", "Settings with a hole (only the first attempt counts)")


def board_groups(progress: Progress, *, questions: Sequence[Question] = (), tasks: Sequence[tuple[str, str]] = (),
                 levels: Sequence[Level] = (), hatches: Sequence[tuple[str, str]] = ()) -> list[tuple[str, list[BoardRow]]]:
    """The board's groups in order: the counted ones (``COUNTED``), then goals met and any other record."""
    groups: list[tuple[str, list[BoardRow]]] = [
        (COUNTED[0], _done_rows(progress, [(i, f"{t} (~{m} min)") for i, t, m in LESSONS])),
        (COUNTED[1], [_question_row(progress, q) for q in questions]),
        (COUNTED[2], _done_rows(progress, tasks)),
        (COUNTED[3], [_level_row(progress, lv) for lv in levels]),
        (COUNTED[4], [_attempt_row(progress, item, title) for item, title in hatches]),
    ]
    goals = [(f"goal:{g.id}", f"Goal: {g.statement}") for g in GOALS.values() if progress.is_done(f"goal:{g.id}")]
    if goals:  # goals met in the lessons' editors; they count nothing towards the total
        groups.append(("Goals met", _done_rows(progress, goals)))
    known = {r.item for _, rows in groups for r in rows}
    other = _done_rows(progress, [(i, i) for i in sorted(progress.done) if i not in known])
    if other:
        groups.append(("Other", other))
    return groups


def tally(groups: Sequence[tuple[str, Sequence[BoardRow]]]) -> Tally:
    """Done, solved and total over the counted groups only."""
    rows = [r for title, rs in groups if title in COUNTED for r in rs]
    return Tally(sum(r.done for r in rows), sum(r.solved for r in rows), len(rows))


def progress_html(progress: Progress, *, questions: Sequence[Question] = (), tasks: Sequence[tuple[str, str]] = (),
                  levels: Sequence[Level] = (), hatches: Sequence[tuple[str, str]] = ()) -> str:
    """The score board: one line with the course done and solved, then each group, its rows on demand."""

    def row(r: BoardRow) -> str:
        return (f'<li data-item="{h(r.item)}" data-done="{str(r.solved).lower()}" data-finished="{str(r.done).lower()}">'
                f'{r.mark} {h(r.title)} <small><code>{h(r.item)}</code></small></li>')

    groups = board_groups(progress, questions=questions, tasks=tasks, levels=levels, hatches=hatches)
    t = tally(groups)
    complete = " Course complete." if t.total and t.done == t.total else ""
    parts = [f'<div class="sl-progress" data-solved="{t.solved}" data-done="{t.done}" data-total="{t.total}" data-percent="{t.percent}">'
             f'<p role="status"><strong>{t.percent}% done: {t.done} of {t.total} items</strong>; solved {t.solved} of {t.total} '
             f"(a question counts as solved only when its first attempt was right).{complete} "
             f"<small>(kept in <code>{h(progress.path)}</code>)</small></p>"]
    for title, rows in groups:
        if rows:
            counted = title in COUNTED
            head = f"{title}: {sum(r.done for r in rows)} of {len(rows)} done" if counted else f"{title}: {len(rows)}"
            parts.append(f"<details class='sl-progress-group'><summary><strong>{h(head)}</strong></summary>"
                         f"<ul style='list-style:none;padding-left:8px'>{''.join(row(r) for r in rows)}</ul></details>")
    parts.append("</div>")
    return "\n".join(parts)
