"""The lessons' ipywidgets front-ends: policy editor, probe board, side-by-side runs, quiz and progress board.

The only module that imports ipywidgets. It holds no policy, grading or
rendering logic: it validates with ``load_policy``/``lint``, runs with a
``Backend`` and ``build_plan``, grades quiz answers with ``quiz.check_answer``,
records progress with ``progress.mark_done``, and draws every piece of HTML
with the pure functions of ``board``.

Each widget also carries a ``text/html`` rendering of its current state, so an
exported notebook (``scripts/lessons_html.py``) shows the board without a
kernel or a widget manager.

Stable CSS classes for browser tests: ``sl-policy-text`` (the JSON textarea),
``sl-probe-button``, ``sl-policy-status``, ``sl-backend-note``,
``sl-probe-board``; every probe row carries ``data-probe`` and ``data-outcome``.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional, Union

import ipywidgets as W

from . import board
from .analyzer import lint
from .backends import Backend, default
from .errors import PolicyError, Problem, SandboxLabError
from .outcomes import RunResult
from .plan import build_plan
from .policy import Policy, load_policy
from .progress import ProgressError, load_progress, mark_done
from .quiz import check_answer, load_questions, question, questions_for

__all__ = [
    "PolicyEditor",
    "ProbeBoard",
    "ProgressBoard",
    "Quiz",
    "SideBySide",
    "finish_lesson",
    "probe_board",
    "quizzes",
    "side_by_side",
]

PolicyInput = Union[Policy, Mapping[str, Any], str, None]


class _HTMLFallback:
    """Adds a ``text/html`` rendering to a widget's output, for exports and kernels without a widget manager."""

    def _html_fallback(self) -> str:
        raise NotImplementedError

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        data = super()._repr_mimebundle_(**kwargs)  # type: ignore[misc]
        if isinstance(data, dict):
            data["text/html"] = self._html_fallback()
        return data


def _as_policy(value: PolicyInput, name: str) -> Optional[Policy]:
    if value is None or isinstance(value, Policy):
        return value
    if isinstance(value, Mapping):
        return load_policy(dict(value), name=name)
    return load_policy(value, name=name)


def _run(backend: Backend, policy: Optional[Policy]) -> Union[RunResult, str]:
    """Run one sandbox; a machinery failure becomes a message for the learner, never a traceback."""
    try:
        return backend.run(build_plan(policy))
    except SandboxLabError as exc:
        return f"{type(exc).__name__}: {exc}"


# --- probe board ----------------------------------------------------------------------------


class ProbeBoard(_HTMLFallback, W.HTML):  # type: ignore[misc]
    """A run's outcomes as a table (attacks first; red where an attack succeeded, green where a job works) and the exfiltration picture."""

    def __init__(self, result: Optional[RunResult] = None, *, only: Optional[list[str]] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._only = only
        self.result: Optional[RunResult] = None
        self.add_class("sl-probe-board")
        self.show(result)

    def show(self, result: Optional[RunResult]) -> None:
        self.result = result
        self.value = board.board_html(result, only=self._only)

    def show_error(self, message: str) -> None:
        self.result = None
        self.value = board.failed_html(message)

    def _html_fallback(self) -> str:
        return str(self.value)


def probe_board(policy: PolicyInput, backend: Optional[Backend] = None, *, only: Optional[list[str]] = None) -> ProbeBoard:
    """Run one policy (``None`` = the plain-container baseline) and show its board, optionally only some probes."""
    b = backend if backend is not None else default()
    out = _run(b, _as_policy(policy, "policy"))
    pb = ProbeBoard(None, only=only)
    if isinstance(out, str):
        pb.show_error(out)
    else:
        pb.show(out)
    return pb


# --- policy editor --------------------------------------------------------------------------


class PolicyEditor(_HTMLFallback, W.VBox):  # type: ignore[misc]
    """JSON policy text with live validation (errors with their JSON pointer, lint warnings) and a probe button."""

    def __init__(self, initial: Union[Mapping[str, Any], str], *, backend: Optional[Backend] = None, rows: int = 10) -> None:
        text = initial if isinstance(initial, str) else json.dumps(dict(initial), indent=2)
        self._backend = backend
        self.text = W.Textarea(value=text, layout=W.Layout(width="100%", height=f"{rows * 1.6:.0f}em"))
        self.text.add_class("sl-policy-text")
        self.status = W.HTML()
        self.status.add_class("sl-policy-status")
        self.button = W.Button(description="Probe this policy", icon="play", button_style="warning",
                               tooltip="Run every attack and job probe against this policy")
        self.button.add_class("sl-probe-button")
        self.backend_note = W.HTML()
        self.backend_note.add_class("sl-backend-note")
        self.board = ProbeBoard(None)
        self.policy: Optional[Policy] = None
        self.errors: tuple[Problem, ...] = ()
        self.warnings: tuple[Problem, ...] = ()
        self.last_result: Optional[RunResult] = None
        super().__init__([W.HTML("<strong>Sandbox policy (JSON)</strong>"), self.text, self.status,
                          W.HBox([self.button, self.backend_note]), self.board])
        self.add_class("sl-policy-editor")
        self.text.observe(lambda _change: self.validate(), names="value")
        self.button.on_click(lambda _b: self.probe())
        self.validate()

    @property
    def policy_text(self) -> str:
        return str(self.text.value)

    @policy_text.setter
    def policy_text(self, value: str) -> None:
        self.text.value = value  # the observer re-validates

    def validate(self) -> Optional[Policy]:
        """Check the text now: sets ``policy`` (or None), ``errors`` and ``warnings``, and the status line."""
        try:
            # Always parse as JSON text: a string in the editor is never read as a file path.
            policy = load_policy(self.policy_text.encode("utf-8", "surrogatepass"), name="the policy editor")
        except PolicyError as exc:
            self.policy, self.errors, self.warnings = None, exc.problems, ()
        else:
            self.policy, self.errors, self.warnings = policy, (), lint(policy)
        self.status.value = board.problems_html(self.errors, self.warnings)
        self.button.disabled = self.policy is None
        return self.policy

    def probe(self) -> Optional[RunResult]:
        """What the button does: run every probe against the current policy and show the board."""
        policy = self.validate()
        if policy is None:
            self.backend_note.value = "<em>Fix the errors above first.</em>"
            return None
        self.button.disabled, self.button.description = True, "Probing…"
        try:
            if self._backend is None:
                self._backend = default()  # chosen on first use, then kept by this editor only
            outcome = _run(self._backend, policy)
        finally:
            self.button.disabled, self.button.description = False, "Probe this policy"
        if isinstance(outcome, str):
            self.board.show_error(outcome)
            self.backend_note.value = board.backend_note_html(None, backend=str(getattr(self._backend, "name", "?")))
            self.last_result = None
            return None
        self.board.show(outcome)
        self.backend_note.value = board.backend_note_html(outcome)
        self.last_result = outcome
        return outcome

    def _html_fallback(self) -> str:
        return board.editor_html(self.policy_text, self.status.value, self.backend_note.value, self.board.value)


# --- several sandboxes ----------------------------------------------------------------------


class SideBySide(_HTMLFallback, W.HTML):  # type: ignore[misc]
    """Several sandboxes run and compared probe by probe; ``results`` maps each name to its run (or error message)."""

    def __init__(self, results: Mapping[str, Union[RunResult, str]]) -> None:
        super().__init__(value=board.comparison_html(results))
        self.results = dict(results)
        self.add_class("sl-side-by-side")

    def _html_fallback(self) -> str:
        return str(self.value)


def side_by_side(policies: Mapping[str, PolicyInput], backend: Optional[Backend] = None) -> SideBySide:
    """Run each policy (``None`` = the plain-container baseline) with one backend and compare them."""
    b = backend if backend is not None else default()
    results: dict[str, Union[RunResult, str]] = {}
    for name, value in policies.items():
        try:
            policy = _as_policy(value, name)
        except PolicyError as exc:
            results[name] = str(exc)
            continue
        results[name] = _run(b, policy)
    return SideBySide(results)


# --- quiz -----------------------------------------------------------------------------------


class Quiz(_HTMLFallback, W.VBox):  # type: ignore[misc]
    """One question: answer, then see whether it is right, the model answer and its reasoning."""

    def __init__(self, question_id: str, *, record_progress: bool = True) -> None:
        self.question = question(question_id)
        self._record = record_progress
        q = self.question
        self.prompt = W.HTML(board.prompt_html(q))
        if q.type == "choice":
            self.input: W.Widget = W.RadioButtons(options=[(f"({c.key}) {c.text}", c.key) for c in q.choices],
                                                  value=None, layout=W.Layout(width="100%"))
        else:
            self.input = W.Textarea(placeholder="Your answer, in a sentence", layout=W.Layout(width="100%"))
        self.input.add_class("sl-quiz-input")
        self.button = W.Button(description="Check answer")
        self.button.add_class("sl-quiz-button")
        self.feedback = W.HTML()
        self.feedback.add_class("sl-quiz-feedback")
        self.correct: Optional[bool] = None
        super().__init__([self.prompt, self.input, self.button, self.feedback])
        self.add_class("sl-quiz")
        self.button.on_click(lambda _b: self.check())

    def check(self, answer: Optional[str] = None) -> tuple[bool, str]:
        """Grade ``answer`` (or what the widget holds); reveal the model answer and its reasoning."""
        if answer is not None:
            self.input.value = answer
        value = self.input.value
        correct, text = check_answer(self.question.id, value if isinstance(value, str) else "")
        self.correct = correct
        unsaved = ""
        if correct and self._record:
            try:
                mark_done(f"quiz:{self.question.id}")
            except (OSError, ProgressError) as exc:
                unsaved = str(exc)
        self.feedback.value = board.answer_html(correct, text, unsaved=unsaved)
        return correct, text

    def _html_fallback(self) -> str:
        return board.question_html(self.question)


# --- progress -------------------------------------------------------------------------------


def _tasks() -> list[tuple[str, str]]:
    try:
        from .tasks import all_tasks
    except ImportError:  # the task catalogue is optional for the board
        return []
    try:
        return [(f"task:{t.id}", t.title) for t in all_tasks()]
    except SandboxLabError:
        return []


class ProgressBoard(_HTMLFallback, W.VBox):  # type: ignore[misc]
    """What the learner has solved across lessons, questions and tasks (kept in ``progress.json``)."""

    def __init__(self) -> None:
        self.html = W.HTML()
        self.html.add_class("sl-progress-board")
        self.button = W.Button(description="Refresh", icon="refresh")
        self.button.on_click(lambda _b: self.refresh())
        super().__init__([self.html, self.button])
        self.refresh()

    def refresh(self) -> None:
        try:
            progress = load_progress()
        except ProgressError as exc:
            self.html.value = board.error_html(str(exc))
            return
        self.html.value = board.progress_html(progress, questions=load_questions(), tasks=_tasks())

    def _html_fallback(self) -> str:
        return str(self.html.value)


def finish_lesson(item_id: str) -> ProgressBoard:
    """Record a lesson as done and show the progress board."""
    try:
        mark_done(item_id)
    except (OSError, ProgressError) as exc:
        print(f"Progress not saved: {exc}")
    return ProgressBoard()


def quizzes(*, lesson: Optional[str] = None, kind: Optional[str] = None) -> W.VBox:
    """Every question of a lesson (or kind), one Quiz each."""
    return W.VBox([Quiz(q.id) for q in questions_for(lesson=lesson, kind=kind)])
