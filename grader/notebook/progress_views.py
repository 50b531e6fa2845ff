"""The score board's view: progress as mastery (lesson goals, tasks, capture-the-flag levels), and beside it the
lessons finished, the questions and the settings holes (their first attempts).

What counts towards the percent is what shows mastery, nothing that only shows
a cell was run: every lesson's goal met (``goals.LESSON_GOALS``: lesson 01's
agent stage and the editors' goals of lessons 02-04), every task at full marks,
and every capture-the-flag level captured or its solution asked for. The board
reaches 100% only when all of them are; a lesson's last cell counts nothing.

A level whose solution the learner asked for counts (they have now seen the
way through; the ladder goes on) but is shown as such, never as captured: the
"solved" figure counts only what was done unaided, and the line says how many
levels were counted by their solution. The ladder keeps that choice
(``course.reveals``); the board takes it as a set of level ids
(``solutions_shown``), so it reads nothing but what it is given.

Questions and settings holes are shown with their first attempt, and not
counted in the percent: a first attempt is final, so counting only right ones
would make 100% unreachable after one slip, and counting any answer would
reward clicking, not mastery. Their own figure (right at the first attempt)
sits beside the percent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AbstractSet, Sequence

from grader.course.ladder import Level
from grader.course.goals import LESSON_GOALS
from grader.notebook.palette import AMBER, GREEN, GREY, MUTED, RED, h
from grader.course.progress import LESSONS, Progress
from grader.course.quiz import Question

__all__ = ["COUNTED", "HATCHES", "LESSONS_FINISHED", "QUESTIONS", "BoardRow", "Tally", "board_groups", "level_row",
           "progress_html", "tally"]


@dataclass(frozen=True)
class BoardRow:
    """One item on the board: done (counts towards mastery), solved (done unaided: a level captured, not by its
    solution; a question right at the first attempt), and whether its solution was asked for."""

    item: str
    title: str
    done: bool
    solved: bool
    mark: str  # HTML: the coloured symbol
    solution_shown: bool = False


@dataclass(frozen=True)
class Tally:
    """The board's figures over the counted groups (``COUNTED``); ``shown``: levels counted by their solution."""

    done: int
    solved: int
    total: int
    shown: int = 0

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


def level_row(progress: Progress, lv: Level, solutions_shown: AbstractSet[str] = frozenset()) -> BoardRow:
    """A capture-the-flag level: done once captured, or once its solution was asked for (``solutions_shown``: the
    ``Level.item_id`` of every level whose solution the learner asked to see), shown as such and not solved; the
    uncapturable last level, once the learner has tried enough to be told why."""
    rec = progress.level(lv.item_id)
    title = f"{lv.number}. {lv.title}"
    tried = f"{rec.attempts} attempt{'s' if rec.attempts != 1 else ''}, {rec.hints} hint{'s' if rec.hints != 1 else ''} used"
    if rec.captured is not None:
        return BoardRow(lv.item_id, f"{title} (captured; {tried})", True, True, _mark("⚑", GREEN))
    if lv.uncapturable is not None and rec.attempts >= lv.uncapturable.after:
        return BoardRow(lv.item_id, f"{title} (nothing to capture, and you saw why; {tried})", True, True, _mark("✓", GREEN))
    if lv.item_id in solutions_shown:
        return BoardRow(lv.item_id, f"{title} (solution shown, not captured; {tried})", True, False, _mark("◇", GREY),
                        solution_shown=True)
    if rec.attempts:
        return BoardRow(lv.item_id, f"{title} ({tried})", False, False, _mark("◐", AMBER))
    return BoardRow(lv.item_id, title, False, False, _mark("○", MUTED))


def _done_rows(progress: Progress, items: Sequence[tuple[str, str]]) -> list[BoardRow]:
    out = []
    for item_id, title in items:
        done = progress.is_done(item_id)
        out.append(BoardRow(item_id, title, done, done, _mark("✓", GREEN) if done else _mark("○", MUTED)))
    return out


COUNTED = ("Lesson goals (met in the lesson)", "Tasks (done at full marks)",
           "Capture the flag (captured, or its solution asked for)")
QUESTIONS = "Questions (only the first attempt counts; not in the percent)"
HATCHES = "Settings with a hole (only the first attempt counts; not in the percent)"
LESSONS_FINISHED = "Lessons finished (not in the percent: their goals are)"


def board_groups(progress: Progress, *, questions: Sequence[Question] = (), tasks: Sequence[tuple[str, str]] = (),
                 levels: Sequence[Level] = (), hatches: Sequence[tuple[str, str]] = (),
                 solutions_shown: AbstractSet[str] = frozenset()) -> list[tuple[str, list[BoardRow]]]:
    """The board's groups in order: the counted ones (``COUNTED``), then the lessons, questions and settings holes
    (shown, not counted), then any other record."""
    goal_titles = {lesson: title for lesson, title, _ in LESSONS}
    groups: list[tuple[str, list[BoardRow]]] = [
        (COUNTED[0], _done_rows(progress, [(g.item_id, f"{goal_titles.get(g.lesson, g.lesson)}: {g.statement}")
                                           for g in LESSON_GOALS])),
        (COUNTED[1], _done_rows(progress, tasks)),
        (COUNTED[2], [level_row(progress, lv, solutions_shown) for lv in levels]),
        (LESSONS_FINISHED, _done_rows(progress, [(i, f"{t} (~{m} min)") for i, t, m in LESSONS])),
        (QUESTIONS, [_question_row(progress, q) for q in questions]),
        (HATCHES, [_attempt_row(progress, item, title) for item, title in hatches]),
    ]
    known = {r.item for _, rows in groups for r in rows}
    other = _done_rows(progress, [(i, i) for i in sorted(progress.done) if i not in known])
    if other:
        groups.append(("Other", other))
    return groups


def tally(groups: Sequence[tuple[str, Sequence[BoardRow]]]) -> Tally:
    """Done, solved, total and levels counted by their solution, over the counted groups only."""
    rows = [r for title, rs in groups if title in COUNTED for r in rs]
    return Tally(sum(r.done for r in rows), sum(r.solved for r in rows), len(rows), sum(r.solution_shown for r in rows))


def _first_right(groups: Sequence[tuple[str, Sequence[BoardRow]]]) -> tuple[int, int]:
    rows = [r for title, rs in groups if title in (QUESTIONS, HATCHES) for r in rs]
    return sum(r.solved for r in rows), len(rows)


def progress_html(progress: Progress, *, questions: Sequence[Question] = (), tasks: Sequence[tuple[str, str]] = (),
                  levels: Sequence[Level] = (), hatches: Sequence[tuple[str, str]] = (),
                  solutions_shown: AbstractSet[str] = frozenset()) -> str:
    """The score board: one line with the course mastered, then each group, its rows on demand."""

    def row(r: BoardRow) -> str:
        shown = ' data-solution-shown="true"' if r.solution_shown else ""
        return (f'<li data-item="{h(r.item)}" data-done="{str(r.solved).lower()}" data-finished="{str(r.done).lower()}"{shown}>'
                f'{r.mark} {h(r.title)} <small><code>{h(r.item)}</code></small></li>')

    groups = board_groups(progress, questions=questions, tasks=tasks, levels=levels, hatches=hatches,
                          solutions_shown=solutions_shown)
    t = tally(groups)
    right, asked = _first_right(groups)
    complete = " Course complete." if t.total and t.done == t.total else ""
    by_solution = (f" {t.shown} level{'s' if t.shown != 1 else ''} counted by {'their' if t.shown != 1 else 'its'} "
                   "solution, not captured." if t.shown else "")
    firsts = f" Questions and settings holes: {right} of {asked} right at the first attempt." if asked else ""
    parts = [f'<div class="sl-progress" data-solved="{t.solved}" data-done="{t.done}" data-total="{t.total}" '
             f'data-percent="{t.percent}" data-solutions-shown="{t.shown}">'
             f'<p role="status"><strong>{t.percent}% mastered: {t.done} of {t.total}</strong> (every lesson goal met, '
             f"every task at full marks, every level captured or its solution asked for).{by_solution}{complete}{firsts} "
             f"<small>(kept in <code>{h(progress.path)}</code>)</small></p>"]
    for title, rows in groups:
        if rows:
            counted = title in COUNTED
            if title == COUNTED[0]:
                head = f"{title}: {sum(r.done for r in rows)} of {len(rows)} met"
            elif counted:
                head = f"{title}: {sum(r.done for r in rows)} of {len(rows)} done"
            elif title in (QUESTIONS, HATCHES):
                head = f"{title}: {sum(r.solved for r in rows)} of {len(rows)} right, {sum(r.done for r in rows)} answered"
            elif title == LESSONS_FINISHED:
                head = f"{title}: {sum(r.done for r in rows)} of {len(rows)}"
            else:
                head = f"{title}: {len(rows)}"
            parts.append(f"<details class='sl-progress-group'><summary><strong>{h(head)}</strong></summary>"
                         f"<ul style='list-style:none;padding-left:8px'>{''.join(row(r) for r in rows)}</ul></details>")
    parts.append("</div>")
    return "\n".join(parts)
