"""The question bank's views: a question's prompt, a judged pick, a recall answer revealed, a self-rating, a
predict question's scenario and its scored prediction, a graded lesson answer judged, and a question as static HTML.

Functions from values to HTML strings, testable without a kernel; the quiz
widgets (``quiz_widgets``) only put them on screen. The model answer is drawn
only when the caller says so (``reveal``): a wrong click cannot show it before
the progress board has counted the first attempt.
"""

from __future__ import annotations

import json
from typing import Mapping, Optional

from grader.core.wording import backend_phrase
from grader.course.first_answer import LEDGER, class_key
from grader.notebook.palette import AMBER, GREEN, MUTED, RED, h
from grader.course.prediction import PredictionScore
from grader.course.progress import Attempt
from grader.course.quiz import HINT_LABEL, ChoiceVerdict, Question, RecallHint, right_key

__all__ = [
    "answer_html",
    "ask_html",
    "choice_result_html",
    "graded_html",
    "not_answered_html",
    "prediction_html",
    "prompt_html",
    "question_html",
    "rating_html",
    "recall_reveal_html",
    "scenario_html",
]


_QUIZ_LABELS = {"choice": "Choose one", "text": "Recall: write your answer first", "predict": "Predict, then run"}


def prompt_html(q: Question) -> str:
    """A question's kind and prompt, as the quiz widgets and the static export both show them."""
    label = ("Understanding check" if q.kind == "check" else "Recall") + f" · {_QUIZ_LABELS[q.type]}"
    return f"<p><small>{h(label)}</small><br><strong>{h(q.prompt)}</strong></p>"


def answer_html(correct: bool, feedback: str, *, unsaved: str = "") -> str:
    """Feedback text (e.g. ``quiz.check_answer``'s), green when right and red when not; ``unsaved`` says why progress was not kept."""
    body = "<br>".join(h(line) for line in feedback.splitlines())
    note = f"<br><small>(progress not saved: {h(unsaved)})</small>" if unsaved else ""
    return f'<div style="color:{GREEN if correct else RED}">{body}{note}</div>'


def ask_html(q: Question) -> str:
    """A graded choice question: its prompt and options under the bank's letters, and nothing of the answer."""
    options = "".join(f'<li data-key="{h(c.key)}"><strong>{h(c.key)}</strong>) {h(c.text)}</li>' for c in q.choices)
    return (f'<div class="sl-question sl-graded" data-question="{h(q.id)}">{prompt_html(q)}'
            f"<ul style='list-style:none;padding-left:8px'>{options}</ul></div>")


def _counted_html(attempt: Optional[Attempt], this_one: bool, unsaved: str) -> str:
    """Whether this attempt is the one the progress board counts."""
    if unsaved:
        return f'<p class="sl-attempt"><small style="color:{AMBER}">(progress not saved: {h(unsaved)})</small></p>'
    if attempt is None:
        return ""
    if this_one:
        return f'<p class="sl-attempt" data-first="true"><small>First attempt recorded on your progress board: {h(attempt.result)}.</small></p>'
    return (f'<p class="sl-attempt" data-first="false"><small>Only your first attempt counts on the progress board '
            f"({h(attempt.result)}); this one is not recorded.</small></p>")


def _seed_html(q: Question) -> str:
    """The course source's own explanation of the question's idea, quoted."""
    if not q.seed:
        return ""
    return (f'<blockquote class="sl-seed" style="margin:4px 0 4px 8px;padding-left:8px;border-left:3px solid {MUTED}">'
            f"<small>The course source on this idea:</small><br>{h(q.seed)}</blockquote>")


def _model_answer_html(q: Question, prefix: str = "") -> str:
    rubric = "".join(f"<li>{h(r)}</li>" for r in q.rubric)
    return (f'<div class="sl-model-answer"><p><strong>Model answer:</strong> {h(prefix)}{h(q.model_answer)}</p>'
            f"<p><em>Why:</em> {h(q.reasoning)}</p>"
            + (f"<p><strong>A full answer</strong></p><ul class='sl-rubric'>{rubric}</ul>" if rubric else "")
            + _seed_html(q) + "</div>")


def choice_result_html(q: Question, verdict: ChoiceVerdict, letters: Mapping[str, str], *, reveal: bool,
                       attempt: Optional[Attempt] = None, this_one: bool = False, unsaved: str = "") -> str:
    """A judged pick, under the letters the learner saw (``letters``: bank key → shown letter).

    The model answer is drawn only when ``reveal`` is true: the widget sets it
    once the first attempt is recorded, so a wrong click cannot show the answer
    before the board has counted it.
    """
    shown = letters.get(verdict.chosen, verdict.chosen)
    if verdict.correct:
        head = f'<p style="color:{GREEN}"><strong>✓ Right:</strong> ({h(shown)}).</p>'
    else:
        note = f" {h(verdict.note)}" if verdict.note and reveal else ""
        head = f'<p style="color:{RED}"><strong>✗ Not quite:</strong> ({h(shown)}) is not the answer.{note}</p>'
    body = _model_answer_html(q, f"({letters.get(verdict.right, verdict.right)}) ") if reveal else (
        "<p><em>The model answer appears once your first attempt is recorded.</em></p>")
    return (f'<div class="sl-quiz-result" data-correct="{str(verdict.correct).lower()}" data-revealed="{str(reveal).lower()}">'
            f"{head}{body}{_counted_html(attempt, this_one, unsaved)}</div>")


# Said under every graded lesson check: the verdict here is for the learner; a class's score is computed elsewhere.
_GRADED_NOTE = ("In a class, this check is also scored when your notebook is graded: from the letter in your answers cell, "
                "by Sandbox Lab outside your kernel. Your first answer is the one graded: if it was wrong, a letter "
                "changed after this feedback scores 0.")


def not_answered_html(q: Question, problem: str = "") -> str:
    """A graded lesson check without a usable answer: says so (or what is wrong with it), and nothing of the key."""
    why = problem or ("not answered yet. Write the letter you chose between the quotes in the answers cell above, "
                      "then run that cell and this one.")
    return (f'<div class="sl-graded-result" data-question="{h(q.id)}" data-answered="false">'
            f'<p style="color:{AMBER}"><strong>{h(q.id)}</strong>: {h(why)}</p></div>')


# Said under a graded check in a class, where the key waits for the instructor's feedback (``first_answer``).
_CLASS_NOTE = ("In this class your first answer to this check is the one graded. It is recorded beside your notebook "
               f"({LEDGER}: submit it with the notebook, and do not edit it; an edited or missing record scores 0). "
               "Whether it is right, and why, comes with the feedback your instructor releases after grading.")


def graded_html(q: Question, verdict: ChoiceVerdict, *, reveal: bool, attempt: Optional[Attempt] = None,
                this_one: bool = False, unsaved: str = "", withheld: Optional[bool] = None) -> str:
    """A graded lesson check judged in the lesson (the bank's letters): verdict, why, the course source; how a class scores it.

    ``withheld`` (default: in a class, ``first_answer.class_key``): nothing of right or wrong, only that the
    answer is recorded, and which answer is the graded one (the verdict comes with the instructor's feedback).
    """
    if class_key() is not None if withheld is None else withheld:
        return _withheld_html(q, verdict, attempt=attempt, this_one=this_one, unsaved=unsaved)
    letters = {c.key: c.key for c in q.choices}
    body = choice_result_html(q, verdict, letters, reveal=reveal, attempt=attempt, this_one=this_one, unsaved=unsaved)
    return (f'<div class="sl-graded-result" data-question="{h(q.id)}" data-answered="true">{body}'
            f"<p><small>{h(_GRADED_NOTE)}</small></p></div>")


def _withheld_html(q: Question, verdict: ChoiceVerdict, *, attempt: Optional[Attempt], this_one: bool, unsaved: str) -> str:
    if attempt is None:
        why = unsaved or "progress is not recorded here"
        said = (f"your answer ({verdict.chosen}) could not be recorded ({why}). Fix that and run this cell again: "
                "a check without a recorded first answer scores 0.")
        color = RED
    elif this_one:
        said, color = f"answer ({verdict.chosen}) recorded. This first answer is the one graded.", MUTED
    else:
        said, color = (f"your first answer was recorded earlier and is the one graded; ({verdict.chosen}), in the answers "
                       "cell now, is not."), AMBER
    return (f'<div class="sl-graded-result" data-question="{h(q.id)}" data-answered="true" data-withheld="true">'
            f'<p style="color:{color}"><strong>{h(q.id)}</strong>: {h(said)}</p>'
            f"<p><small>{h(_CLASS_NOTE)}</small></p></div>")


def recall_reveal_html(q: Question, hint: RecallHint) -> str:
    """After a written answer: what the hint found, the model answer and its rubric, and the request to rate oneself."""
    rows = "".join(
        f'<li data-idea="{h(hit.idea)}" data-found="{str(bool(hit.found)).lower()}">'
        + (f'<span style="color:{GREEN}">✓</span> {h(hit.idea)} <small>(you wrote “{h(hit.found)}”)</small>' if hit.found
           else f'<span style="color:{MUTED}">○</span> {h(hit.idea)} <small>(not found in your words)</small>')
        + "</li>" for hit in hint.hits)
    return (f'<div class="sl-recall-reveal"><p class="sl-hint-label"><small><strong>Keyword hint</strong> ({h(HINT_LABEL)}): '
            "the key ideas, looked for as whole words. It cannot read meaning: compare your answer with the model answer "
            f"yourself.</small></p><ul style='list-style:none;padding-left:8px'>{rows}</ul>"
            f"{_model_answer_html(q)}<p><strong>How did you do?</strong> Rate your own answer against the rubric.</p></div>")


def _hint_beside_html(rating: str, hint: RecallHint) -> str:
    """The keyword hint's count next to the learner's rating, and a word when the two disagree."""
    found = sum(1 for hit in hint.hits if hit.found)
    total = len(hint.hits)
    disagree = (rating == "got it" and found < total) or (rating == "missed" and found == total)
    note = (" They disagree: read the rubric once more. Your rating is the one recorded; the hint only counts words."
            if disagree else "")
    return (f'<p class="sl-rating-vs-hint" data-found="{found}" data-total="{total}" data-disagree="{str(disagree).lower()}">'
            f"<small>Beside it, the keyword hint ({h(HINT_LABEL)}) found {found} of {total} key idea{'s' if total != 1 else ''}."
            f"{h(note)}</small></p>")


def rating_html(rating: str, *, hint: Optional[RecallHint] = None, attempt: Optional[Attempt] = None, this_one: bool = False,
                unsaved: str = "") -> str:
    """The learner's self-rating beside what the keyword hint found, and whether it is the one the board counts."""
    beside = _hint_beside_html(rating, hint) if hint is not None else ""
    return (f'<div class="sl-rating" data-rating="{h(rating)}"><p>You rated your answer: <strong>{h(rating)}</strong>.</p>'
            f"{beside}{_counted_html(attempt, this_one, unsaved)}</div>")


def scenario_html(q: Question) -> str:
    """A predict question's sandbox: its policy as JSON, or the plain container."""
    if q.scenario is None:
        return ""
    if q.scenario.policy is None:
        what = "<p>The sandbox: <strong>a plain Docker container</strong> (default bridge networking; home and projects mounted).</p>"
    else:
        what = f"<p>The sandbox's policy:</p><pre class='sl-scenario-policy'>{h(json.dumps(q.scenario.policy, indent=2))}</pre>"
    return (f'<div class="sl-scenario" data-question="{h(q.id)}">{what}'
            "<p><small>Tick each probe you expect to <strong>succeed</strong>, then run the sandbox.</small></p></div>")


def prediction_html(q: Question, score: PredictionScore, *, attempt: Optional[Attempt] = None, this_one: bool = False,
                    unsaved: str = "") -> str:
    """A prediction scored probe by probe against the run, saying how the run was obtained; then the model answer."""
    how = backend_phrase(score.backend, score.codes, ran_at=score.ran_at)
    against = "what really happened" if score.observed else "the static analyzer's prediction (nothing was run)"
    rows = []
    for c in score.calls:
        verdict = {True: ("✓ right", GREEN), False: ("✗ wrong", RED), None: ("no verdict", AMBER)}[c.right]
        evidence = "".join(f'<div class="sl-evidence"><small>evidence: <code>{h(e)}</code></small></div>' for e in c.evidence)
        rows.append(
            f'<tr data-probe="{h(c.probe)}" data-predicted="{"succeeded" if c.predicted else "blocked"}" '
            f'data-outcome="{h(c.outcome)}" data-right="{"" if c.right is None else str(c.right).lower()}">'
            f'<td style="padding:2px 6px"><code>{h(c.probe)}</code><br><small>{h(c.story)}</small></td>'
            f'<td style="padding:2px 6px">{"succeeds" if c.predicted else "blocked"}</td>'
            f'<td style="padding:2px 6px">{h(c.outcome)}<br><small>{h(c.explanation)}</small>{evidence}</td>'
            f'<td style="padding:2px 6px;color:{verdict[1]};font-weight:bold;white-space:nowrap">{verdict[0]}</td></tr>')
    return (
        f'<div class="sl-prediction" data-question="{h(q.id)}" data-backend="{h(score.backend)}" '
        f'data-observed="{str(score.observed).lower()}" data-right="{score.right}" data-judged="{score.judged}">'
        f'<p class="sl-backend" style="margin:2px 0"><strong>{h(how)}</strong></p>'
        f"<p><strong>Your prediction: {h(score.result)}</strong>, compared with {h(against)}.</p>"
        '<table class="sl-prediction-table" style="border-collapse:collapse"><thead><tr><th style="text-align:left">probe</th>'
        '<th style="text-align:left">you predicted</th><th style="text-align:left">outcome</th><th style="text-align:left">your call</th>'
        f'</tr></thead><tbody>{"".join(rows)}</tbody></table>{_model_answer_html(q)}{_counted_html(attempt, this_one, unsaved)}</div>'
    )


def question_html(q: Question, *, reveal: bool = False) -> str:
    """A question as static HTML (for exports); the model answer sits in a closed ``<details>``."""
    parts = [f'<div class="sl-question" data-question="{h(q.id)}">{prompt_html(q)}']
    if q.choices:
        parts.append("<ol type='a'>" + "".join(f"<li>{h(c.text)}</li>" for c in q.choices) + "</ol>")
    parts.append(scenario_html(q))
    prefix = f"({right_key(q)}) " if q.type == "choice" else ""
    parts.append(f'<details{" open" if reveal else ""}><summary>Model answer (answer first!)</summary>'
                 f"{_model_answer_html(q, prefix)}</details></div>")
    return "\n".join(parts)
