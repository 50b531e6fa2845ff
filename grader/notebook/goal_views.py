"""A policy editor's goal, as HTML: stated before any run, then met or "Not yet" with every reason.
"""

from __future__ import annotations

from typing import Sequence

from grader.core.outcomes import RunResult
from grader.course.goals import Goal
from grader.notebook.palette import AMBER, GREEN, h, run_phrase

__all__ = ["goal_html", "goal_status_html"]


def goal_html(goal: Goal) -> str:
    """The goal of an editor, stated before any run."""
    return f'<div class="sl-goal" data-goal-id="{h(goal.id)}"><strong>Goal:</strong> {h(goal.statement)}</div>'


def goal_status_html(goal: Goal, met: bool, reasons: Sequence[str], result: RunResult, *, unsaved: str = "") -> str:
    """After a run: "Goal met" (with the risk the goal accepts, if any) or "Not yet: ..." with every reason.

    ``data-goal`` is ``met`` or ``not-met``, for browser tests; how the run was
    obtained is said, so a prediction is never mistaken for an observation.
    """
    how = f"<small>({h(run_phrase(result))})</small>"
    saved = f'<br><small style="color:{AMBER}">Progress not saved: {h(unsaved)}</small>' if unsaved else ""
    if met:
        accepted = f"<br><small><strong>Accepted risk:</strong> {h(goal.accepted_why)}</small>" if goal.accepted_why else ""
        return (f'<div class="sl-goal-status" data-goal="met" data-goal-id="{h(goal.id)}" style="color:{GREEN}">'
                f"<strong>✓ Goal met.</strong> {how}{accepted}{saved}</div>")
    items = "".join(f"<li>{h(r)}</li>" for r in reasons)
    return (f'<div class="sl-goal-status" data-goal="not-met" data-goal-id="{h(goal.id)}">'
            f'<strong style="color:{AMBER}">Not yet:</strong> {h(reasons[0]) if len(reasons) == 1 else ""} {how}'
            + (f'<ul style="margin:2px 0">{items}</ul>' if len(reasons) > 1 else "") + "</div>")
