"""What every HTML view has in common: one palette, one way to escape untrusted text, and how a run was obtained.

Each feature owns its views (the probe board in ``board``, questions in
``quiz_views``, the score board in ``progress_views``, the agent in
``agent_views``, goals in ``goal_views``, capture the flag in ``notebook.ladder_views``);
this module is the only thing they share. Every string that came from a
policy, a container or the question bank goes through ``h``: escaped, its
control characters shown as escapes, so a hostile path such as
``/x/<script>`` or evidence a container wrote shows as text. Colours follow
``wording.tone``, as in the text report.
"""

from __future__ import annotations

import html

from grader.core.outcomes import RunResult
from grader.core.wording import Tone, backend_phrase, printable

__all__ = ["AMBER", "BG", "GREEN", "GREY", "INK", "MUTED", "NARROW_CSS", "RED", "error_html", "failed_html", "h", "run_phrase"]

# The palette of every view: ink and background per ``wording.tone``.
RED, GREEN, AMBER, GREY, MUTED = "#b42318", "#067647", "#b54708", "#475467", "#98a2b3"
INK: dict[Tone, str] = {"bad": RED, "good": GREEN, "warn": AMBER, "plain": GREY}
BG: dict[Tone, str] = {"bad": "#fee4e2", "good": "#dcfae6", "warn": "#fef0c7", "plain": "transparent"}


# On a narrow screen (a phone, 414 px) JupyterLab leaves an output ~2/3 of the width: a 64 px prompt column, an
# 8 px collapser and paddings beside every output. In a notebook that shows the course's views (``:has``, so no
# other notebook changes), and only below 600 px, the lesson's outputs get that width back and small print stays
# at 12 px or more. A <style> in an output applies to the page, which is the point: it is the one piece of CSS a
# lesson can ship to JupyterLab without an extension (the learner lab's settings move the right sidebar's panels
# to the left, binder/learner-lab). Exports (no .jp-Notebook) are unaffected.
_COURSE = ":is(.sl-board, .sl-side-by-side, .sl-policy-editor, .sl-progress-board, .sl-quiz, .sl-attack-editor)"
NARROW_CSS = (
    "<style>@media (max-width: 600px) {"
    f" .jp-Notebook:has({_COURSE}) .jp-OutputPrompt,"
    f" .jp-Notebook:has({_COURSE}) .jp-OutputCollapser,"
    f" .jp-Notebook:has({_COURSE}) .jp-InputCollapser {{ display: none; }}"
    f" .jp-Notebook:has({_COURSE}) .jp-WindowedPanel-viewport {{ padding-left: 2px; padding-right: 2px; }}"
    f" .jp-Notebook:has({_COURSE}) .jp-Cell {{ padding: 2px; }}"
    f" .jp-Notebook {_COURSE} :is(small, [style*='font-size:smaller']) {{ font-size: max(12px, 0.85em) !important; }}"
    # the probe table's three columns would break words mid-way: each probe becomes a block (what, outcome, why)
    " .jp-Notebook .sl-probe-table :is(tr, td, th) { display: block; }"
    " .jp-Notebook .sl-probe-table thead { display: none; }"
    "}</style>"
)


def h(text: object) -> str:
    """Untrusted text as HTML: escaped, and its control characters shown, not passed on."""
    return html.escape(printable(str(text)), quote=True)


def run_phrase(result: RunResult) -> str:
    """How ``result`` was obtained, in the learner's words (``wording.backend_phrase``)."""
    return backend_phrase(result.backend, result.codes, ran_at=result.ran_at, run_id=result.run_id, seconds=result.seconds)


def failed_html(message: str) -> str:
    """The board of a run that failed: the machinery's message, never a traceback."""
    return f'<div class="sl-board sl-failed" style="color:{AMBER}"><strong>The run failed:</strong> {h(message)}</div>'


def error_html(message: str) -> str:
    """Any other view that could not be drawn (e.g. an unreadable progress file), with the reason."""
    return f'<div class="sl-error" style="color:{AMBER}">{h(message)}</div>'
