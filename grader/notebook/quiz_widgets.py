"""The question widgets: a choice or recall question (``Quiz``), predict-then-run (``Prediction``), a graded
choice question shown for a cell's answer (``ask``) and that answer judged in the lesson (``graded``), and every
question of a lesson (``quizzes``).

Judging is ``quiz``'s and ``prediction``'s; what is drawn, ``quiz_views``'s.
Stable CSS classes for browser tests: ``sl-quiz`` with ``sl-quiz-input``,
``sl-quiz-button``, ``sl-quiz-feedback`` and ``sl-rating-button``;
``sl-prediction-quiz`` with ``sl-prediction-probe`` (the checkboxes),
``sl-prediction-button`` and ``sl-prediction-result``.

A choice question's options are one radio group (``role="radiogroup"``, named by
the prompt, one Tab stop, the arrow keys move the choice): ipywidgets draws
RadioButtons as separate, unnamed radios, so ``RADIO_GROUP_JS`` is displayed
beside each one to group them (it only sets attributes; see its comment).
"""

from __future__ import annotations

import html
from typing import Iterable, Optional

import ipywidgets as W
from IPython.display import Javascript, display

from grader.backends import Backend, default
from grader.core.outcomes import RunResult
from grader.core.probes import probe
from grader.notebook import palette, quiz_views
from grader.course.first_answer import FIRST_ANSWER_MIME, first_answer_record
from grader.course.prediction import PredictionScore, scenario_policy, score_prediction
from grader.course.progress import Attempt, ProgressError, learner_seed
from grader.course.quiz import (
    RATINGS,
    Choice,
    ChoiceVerdict,
    InvalidAnswer,
    RecallHint,
    choice_order,
    judge_choice,
    question,
    questions_for,
    rating_score,
    recall_hint,
)
from grader.notebook.widget_base import HTMLFallback, html_view, record_first, run_button, run_sandbox, show_widget

__all__ = ["RADIO_GROUP_JS", "Prediction", "Quiz", "ask", "graded", "quizzes"]

# ipywidgets 8's RadioButtons draws each option as an <input type="radio"> with no name, in a box with no role: every
# option is a Tab stop of its own, and the arrow keys move JupyterLab's cell selection (its command-mode shortcuts
# take them) instead of the choice. ipywidgets lets Python set neither a name nor a role, so this script, shown beside
# each choice question, does it in the page: each box's radios get one name (one Tab stop; the browser's own arrow
# keys move and check), the box role="radiogroup" labelled by the question's prompt, and each radio
# data-lm-suppress-shortcuts, JupyterLab's marker for "keys here are not notebook shortcuts". It sets attributes
# only, on the course's quiz boxes (.sl-quiz), reads nothing and sends nothing; a box drawn later (a rerun cell) is
# grouped when it appears. tests/browser/test_learner_lab.py checks it in Chromium.
RADIO_GROUP_JS = """
(() => {
  if (window.slRadioGroups) { window.slRadioGroups(); return; }
  let made = 0, queued = false;
  const group = () => {
    queued = false;
    document.querySelectorAll('.sl-quiz .widget-radio-box').forEach(box => {
      if (!box.dataset.slGroup) {
        box.dataset.slGroup = 'sl-choice-' + Date.now().toString(36) + '-' + (made++);
        box.setAttribute('role', 'radiogroup');
        const prompt = box.closest('.sl-quiz').querySelector('.widget-html-content');
        if (prompt) {
          if (!prompt.id) prompt.id = box.dataset.slGroup + '-prompt';
          box.setAttribute('aria-labelledby', prompt.id);
        }
      }
      box.querySelectorAll('input[type="radio"]').forEach(r => {
        if (r.name === box.dataset.slGroup) return;
        r.name = box.dataset.slGroup;
        r.setAttribute('data-lm-suppress-shortcuts', 'true');  // read on the key's target itself, before its parents
      });
    });
  };
  window.slRadioGroups = group;
  group();
  new MutationObserver(() => { if (!queued) { queued = true; requestAnimationFrame(group); } })
    .observe(document.body, {childList: true, subtree: true});
})();
"""


class Quiz(HTMLFallback, W.VBox):  # type: ignore[misc]
    """One choice or recall question, asked so that the answer comes before any help.

    Choice: the options in this learner's order (``quiz.choice_order``); the
    first pick is recorded, and only then does the model answer show. Recall:
    the learner writes an answer, then sees the hint, the model answer and its
    rubric, and rates themselves; the first rating is recorded.
    """

    def __init__(self, question_id: str, *, record_progress: bool = True) -> None:
        q = question(question_id)
        if q.type == "predict":
            raise InvalidAnswer(f"{q.id} is a predict question: show it with Prediction({q.id!r})")
        self.question = q
        self._record_progress = record_progress
        self.prompt = W.HTML(quiz_views.prompt_html(q))
        self.note = W.HTML()
        self.feedback = W.HTML()
        self.feedback.add_class("sl-quiz-feedback")
        self.verdict: Optional[ChoiceVerdict] = None
        self.hint: Optional[RecallHint] = None
        self.rating: Optional[str] = None
        self.attempt: Optional[Attempt] = None  # the attempt the board counts, once there is one
        self.letters: dict[str, str] = {}
        if q.type == "choice":
            seed = ""
            if record_progress:
                try:
                    seed = learner_seed()
                except (OSError, ProgressError) as exc:
                    self.note.value = palette.error_html(f"Options in the bank's order (progress file: {exc})")
            self.order: tuple[Choice, ...] = choice_order(q, seed)
            self.letters = {c.key: "abcdefghijklmnopqrstuvwxyz"[i] for i, c in enumerate(self.order)}
            self.input: W.Widget = W.RadioButtons(options=[(f"({self.letters[c.key]}) {c.text}", c.key) for c in self.order],
                                                  value=None, layout=W.Layout(width="100%"))
            self.button = W.Button(description="Check answer")
            self.button.on_click(lambda _b: self.check())
            self.ratings = W.HBox([])
        else:
            self.order = ()
            self.input = W.Textarea(placeholder="Your answer, in a sentence or two. Write it before you look.",
                                    layout=W.Layout(width="100%"))
            self.button = W.Button(description="Show the model answer")
            self.button.on_click(lambda _b: self.reveal())
            buttons = []
            for rating in RATINGS:
                b = W.Button(description=rating)
                b.add_class("sl-rating-button")
                b.on_click(lambda _b, r=rating: self.rate(r))
                buttons.append(b)
            self.ratings = W.HBox(buttons)
            show_widget(self.ratings, False)
        self.input.add_class("sl-quiz-input")
        self.button.add_class("sl-quiz-button")
        self.rated = W.HTML()
        super().__init__([self.prompt, self.note, self.input, self.button, self.feedback, self.ratings, self.rated])
        self.add_class("sl-quiz")

    def _ipython_display_(self) -> None:
        """Show the widget; beside a choice question, first the script that makes its options one radio group."""
        if self.question.type == "choice":
            display(Javascript(RADIO_GROUP_JS))  # type: ignore[no-untyped-call]
        display(self._repr_mimebundle_(), raw=True)  # type: ignore[no-untyped-call]

    def check(self, answer: Optional[str] = None) -> Optional[ChoiceVerdict]:
        """Judge a pick (``answer``: an option's bank key or text; default: what the widget holds), record it, then reveal."""
        q = self.question
        if q.type != "choice":
            self.reveal(answer)
            return None
        try:
            verdict = judge_choice(q, self.input.value if answer is None else answer)
        except InvalidAnswer as exc:
            self.feedback.value = quiz_views.answer_html(False, str(exc))
            return None
        self.input.value = verdict.chosen
        attempt, this_one, unsaved = record_first(self._record_progress, f"quiz:{q.id}", "right" if verdict.correct else "wrong",
                                             1.0 if verdict.correct else 0.0)
        self.verdict, self.attempt = verdict, attempt
        # The model answer only once the first attempt is on record (or nothing is recorded at all).
        reveal = attempt is not None or not self._record_progress
        self.feedback.value = quiz_views.choice_result_html(q, verdict, self.letters, reveal=reveal, attempt=attempt,
                                                       this_one=this_one, unsaved=unsaved)
        return verdict

    def reveal(self, answer: Optional[str] = None) -> Optional[RecallHint]:
        """Recall: take the written answer (it cannot be changed after), show the hint, the model answer and the rubric."""
        q = self.question
        if answer is not None:
            self.input.value = answer
        try:
            hint = recall_hint(q, self.input.value)
        except InvalidAnswer as exc:
            self.feedback.value = quiz_views.answer_html(False, str(exc))
            return None
        self.hint = hint
        self.input.disabled = self.button.disabled = True
        self.feedback.value = quiz_views.recall_reveal_html(q, hint)
        show_widget(self.ratings, True)
        return hint

    def rate(self, rating: str) -> Optional[Attempt]:
        """Recall: the learner's own rating of their answer (``quiz.RATINGS``); the first one is recorded."""
        if self.hint is None:
            self.rated.value = quiz_views.answer_html(False, "Write your answer and show the model answer first.")
            return None
        try:
            score = rating_score(rating)
        except InvalidAnswer as exc:
            self.rated.value = quiz_views.answer_html(False, str(exc))
            return None
        attempt, this_one, unsaved = record_first(self._record_progress, f"quiz:{self.question.id}", rating, score)
        self.rating, self.attempt = rating, attempt
        self.rated.value = quiz_views.rating_html(rating, hint=self.hint, attempt=attempt, this_one=this_one, unsaved=unsaved)
        return attempt

    def _html_fallback(self) -> str:
        q = self.question
        asked = quiz_views.prompt_html(q) + "".join(
            f"<p>({self.letters[c.key]}) {html.escape(c.text)}</p>" for c in self.order)
        return f'<div class="sl-quiz" data-question="{html.escape(q.id)}">{asked}{self.feedback.value}{self.rated.value}</div>'


class Prediction(HTMLFallback, W.VBox):  # type: ignore[misc]
    """Predict, then run: tick the probes expected to succeed against a scenario's sandbox, run it, see each call scored."""

    def __init__(self, question_id: str, *, backend: Optional[Backend] = None, record_progress: bool = True) -> None:
        q = question(question_id)
        if q.type != "predict" or q.scenario is None:
            raise InvalidAnswer(f"{q.id} is not a predict question: show it with Quiz({q.id!r})")
        self.question = q
        self._backend = backend
        self._record_progress = record_progress
        self.prompt = W.HTML(quiz_views.prompt_html(q))
        self.scenario = W.HTML(quiz_views.scenario_html(q))
        self.boxes = {pid: W.Checkbox(value=False, description=f"{pid}: {probe(pid).story}", indent=False,
                                      layout=W.Layout(width="100%")) for pid in q.scenario.probes}
        for box in self.boxes.values():
            box.add_class("sl-prediction-probe")
        self.button = run_button("Run it", "Run this sandbox and compare your prediction with what happens",
                                 "sl-prediction-button")
        self.view = html_view("sl-prediction-result")
        self.result: Optional[RunResult] = None
        self.score: Optional[PredictionScore] = None
        self.attempt: Optional[Attempt] = None
        super().__init__([self.prompt, self.scenario, *self.boxes.values(), self.button, self.view])
        self.add_class("sl-prediction-quiz")
        self.button.on_click(lambda _b: self.run())

    @property
    def predicted(self) -> tuple[str, ...]:
        """The probes ticked as "will succeed"."""
        return tuple(pid for pid, box in self.boxes.items() if box.value)

    def run(self, predicted: Optional[Iterable[str]] = None) -> Optional[PredictionScore]:
        """Run the scenario (once) and score the prediction (``predicted``, or the ticked boxes) against it."""
        q = self.question
        if predicted is not None:
            chosen = set(predicted)
            unknown = chosen - set(self.boxes)
            if unknown:
                self.view.value = palette.error_html(f"not probes of this question: {', '.join(sorted(unknown))}")
                return None
            for pid, box in self.boxes.items():
                box.value = pid in chosen
        self.button.disabled, self.button.description = True, "Running…"
        if self._backend is None:
            self._backend = default()  # chosen on first use, then kept by this widget only
        out = run_sandbox(self._backend, scenario_policy(q))
        if isinstance(out, str):  # the machinery failed: nothing is scored, the learner may try again
            self.view.value = palette.failed_html(out)
            self.button.disabled, self.button.description = False, "Run it"
            return None
        score = score_prediction(q, self.predicted, out)
        attempt, this_one, unsaved = (
            record_first(self._record_progress, f"quiz:{q.id}", score.result, score.score) if score.judged else (None, False, ""))
        self.result, self.score, self.attempt = out, score, attempt
        for box in self.boxes.values():  # the prediction that was scored stays on screen as it was
            box.disabled = True
        self.button.description = "Ran"
        self.view.value = quiz_views.prediction_html(q, score, attempt=attempt, this_one=this_one, unsaved=unsaved)
        return score

    def _html_fallback(self) -> str:
        ticks = "".join(f"<p>{'☑' if box.value else '☐'} {html.escape(str(box.description))}</p>" for box in self.boxes.values())
        return f'<div class="sl-prediction-quiz">{self.prompt.value}{self.scenario.value}{ticks}{self.view.value}</div>'


class _Asked(HTMLFallback, W.HTML):  # type: ignore[misc]
    def __init__(self, *, first_answer: Optional[dict[str, object]] = None, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self._first_answer = first_answer  # ``first_answer`` record, once the key has shown (autograde reads it)

    def _html_fallback(self) -> str:
        return str(self.value)

    def _repr_mimebundle_(self, **kwargs: object) -> object:
        data = super()._repr_mimebundle_(**kwargs)
        if isinstance(data, dict) and self._first_answer is not None:
            data[FIRST_ANSWER_MIME] = self._first_answer
        return data


def ask(question_id: str) -> W.HTML:
    """A graded choice question, shown with the bank's letters and nothing of the answer (the answer goes in a cell)."""
    q = question(question_id)
    if q.type != "choice":
        raise InvalidAnswer(f"{q.id} is not a choice question")
    return _Asked(value=quiz_views.ask_html(q))


_UNANSWERED = ("", "?")  # what the answers cell holds until the learner writes a letter


def graded(question_id: str, answer: object, *, record_progress: bool = True) -> W.HTML:
    """A graded choice question's answer (the letter from a lesson's answers cell) judged in the lesson itself.

    Never raises for a missing or malformed answer, so Run All goes on: it
    says "not answered yet" (or what is wrong). A letter is recorded as the
    first attempt, and only once it is on record do the verdict's reasoning,
    the picked option's note and the course source show (as in ``Quiz``). The
    score a class counts is not this: nbgrader's autograde scores the letter in
    the grader's own process (``grading.autograde.grade_answers``), and scores 0
    where this output records a wrong first attempt (``first_answer``).
    """
    q = question(question_id)
    if q.type != "choice":
        raise InvalidAnswer(f"{q.id} is not a choice question")
    if answer is None or (isinstance(answer, str) and answer.strip() in _UNANSWERED):
        return _Asked(value=quiz_views.not_answered_html(q))
    if not isinstance(answer, str):
        return _Asked(value=quiz_views.not_answered_html(q, f'not a letter ({type(answer).__name__}): write it in quotes, e.g. "a".'))
    try:
        verdict = judge_choice(q, answer)
    except InvalidAnswer as exc:
        return _Asked(value=quiz_views.not_answered_html(q, str(exc)))
    attempt, this_one, unsaved = record_first(record_progress, f"quiz:{q.id}", "right" if verdict.correct else "wrong",
                                              1.0 if verdict.correct else 0.0)
    reveal = attempt is not None or not record_progress  # as Quiz.check: the reasoning once the first attempt is on record
    # The key is on screen from here on: the output carries whether the first attempt was right, so a class grade
    # scores that one and not a letter changed after the feedback (``first_answer``).
    record = first_answer_record(q.id, attempt.solved) if attempt is not None else None
    return _Asked(value=quiz_views.graded_html(q, verdict, reveal=reveal, attempt=attempt, this_one=this_one, unsaved=unsaved),
                  first_answer=record)


def quizzes(*, lesson: Optional[str] = None, kind: Optional[str] = None) -> W.VBox:
    """Every question of a lesson (or kind): a Quiz each, a Prediction for a predict question."""
    return W.VBox([Prediction(q.id) if q.type == "predict" else Quiz(q.id) for q in questions_for(lesson=lesson, kind=kind)])
