"""The lessons' ipywidgets front-ends: policy editor, probe board, side-by-side runs, questions and progress board.

The only module that imports ipywidgets. It holds no policy, grading or
rendering logic: it validates with ``load_policy``/``lint``, runs with a
``Backend`` and ``build_plan``, judges answers with ``quiz`` (``judge_choice``,
``recall_hint``, ``choice_order``) and ``prediction.score_prediction``, records
progress with ``progress`` (``mark_done``; ``record_attempt``, which keeps only
a question's first attempt), and draws every piece of HTML with the pure
functions of ``board``.

Each widget also carries a ``text/html`` rendering of its current state, so an
exported notebook (``scripts/lessons_html.py``) shows the board without a
kernel or a widget manager.

Stable CSS classes for browser tests: ``sl-policy-text`` (the JSON textarea),
``sl-probe-button``, ``sl-policy-status``, ``sl-backend-note``,
``sl-probe-board``; every probe row carries ``data-probe`` and ``data-outcome``.
An editor given a goal shows ``sl-goal`` (the goal) and, after each run,
``sl-goal-status`` with ``data-goal`` ``met`` or ``not-met``.
Questions: ``sl-quiz`` with ``sl-quiz-input``, ``sl-quiz-button``,
``sl-quiz-feedback`` and ``sl-rating-button``; ``sl-prediction-quiz`` with
``sl-prediction-probe`` (the checkboxes), ``sl-prediction-button`` and
``sl-prediction-result``. Capture the flag: ``sl-attack-editor`` with
``sl-attack-code`` (the attack's textarea), ``sl-attack-button`` and
``sl-attack-result``; the outcome inside carries ``data-captured`` ("true", "false", or
"error" for a run that could not be judged).
The agent on stage: ``sl-agent-stage`` with ``sl-agent-policy`` (its JSON
textarea, when editable), ``sl-agent-run-button``, ``sl-agent-transcript`` (rows carry ``data-step`` and
``data-outcome``) and ``sl-agent-verdict`` (``data-leaked``: true, false or unknown).
"""

from __future__ import annotations

import html
import json
from typing import Any, Iterable, Mapping, Optional, Union

import ipywidgets as W

from grader.lessons import board
from grader.lessons.agent import AgentRun, run_agent
from grader.core.analyzer import lint
from grader.backends import Backend, default
from grader.ctf.ladder import AttackResult, attack, level, load_levels
from grader.core.errors import LevelError, PolicyError, Problem, SandboxLabError
from grader.lessons.goals import Goal, check, goal as find_goal
from grader.grading.grade import carry_over
from grader.core.outcomes import RunResult
from grader.core.plan import build_plan
from grader.core.policy import Policy, load_policy
from grader.lessons.prediction import PredictionScore, scenario_policy, score_prediction
from grader.core.probes import probe
from grader.lessons.progress import Attempt, ProgressError, learner_seed, load_progress, mark_done, record_attempt, record_level
from grader.lessons.quiz import (
    RATINGS,
    Choice,
    ChoiceVerdict,
    InvalidAnswer,
    RecallHint,
    choice_order,
    judge_choice,
    load_questions,
    question,
    questions_for,
    rating_score,
    recall_hint,
)

__all__ = [
    "AgentStage",
    "AttackEditor",
    "PolicyEditor",
    "Prediction",
    "ProbeBoard",
    "ProgressBoard",
    "Quiz",
    "SideBySide",
    "ask",
    "attack_editor",
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
    """JSON policy text with live validation (errors with their JSON pointer, lint warnings) and a probe button.

    Given a ``goal`` (a ``goals.Goal`` or its id), the editor states it and,
    after each run, says "Goal met" or "Not yet: ..." with every reason
    (``goals.check``); a met goal is recorded on the progress board
    (``goal:<id>``) and followed by the policy as the real tools take it.
    """

    def __init__(self, initial: Union[Mapping[str, Any], str], *, backend: Optional[Backend] = None, rows: int = 10,
                 goal: Union[Goal, str, None] = None, record_progress: bool = True) -> None:
        text = initial if isinstance(initial, str) else json.dumps(dict(initial), indent=2)
        self._backend = backend
        self.goal: Optional[Goal] = find_goal(goal) if isinstance(goal, str) else goal
        self._record_progress = record_progress
        self.goal_box = W.HTML(board.goal_html(self.goal) if self.goal else "")
        self.goal_status = W.HTML()
        self.goal_met: Optional[bool] = None  # None until a run has been checked against the goal
        self.goal_reasons: list[str] = []
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
        super().__init__([self.goal_box, W.HTML("<strong>Sandbox policy (JSON)</strong>"), self.text, self.status,
                          W.HBox([self.button, self.backend_note]), self.goal_status, self.board])
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
            self.goal_met, self.goal_reasons, self.goal_status.value = None, [], ""  # nothing was judged
            return None
        self.board.show(outcome)
        self.backend_note.value = board.backend_note_html(outcome)
        self.last_result = outcome
        self._check_goal(policy, outcome)
        return outcome

    def _check_goal(self, policy: Policy, result: RunResult) -> None:
        if self.goal is None:
            return
        met, reasons = check(self.goal, result)
        self.goal_met, self.goal_reasons = met, reasons
        unsaved = ""
        if met and self._record_progress:
            try:
                mark_done(f"goal:{self.goal.id}")
            except (OSError, ProgressError) as exc:
                unsaved = str(exc)
        status = board.goal_status_html(self.goal, met, reasons, result, unsaved=unsaved)
        if met:
            status += board.carry_over_html(carry_over(policy))
        self.goal_status.value = status

    def _html_fallback(self) -> str:
        return board.editor_html(self.policy_text, self.status.value, self.backend_note.value,
                                 self.goal_box.value + self.goal_status.value + self.board.value)


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


# --- the agent on stage (lesson 01) --------------------------------------------------------


class AgentStage(_HTMLFallback, W.VBox):  # type: ignore[misc]
    """Lesson 01's scripted agent run in one sandbox: its transcript, and whether the key left (from the evidence).

    ``policy`` None is the plain container. ``editable`` shows the policy as
    JSON text the learner changes before pressing the run button; ``goal`` adds
    the lesson's check (the key stayed and the job was done). The agent runs
    once when the stage is shown, unless ``run`` is False.
    """

    def __init__(self, policy: PolicyInput = None, *, prompt: str = "", backend: Optional[Backend] = None,
                 editable: bool = False, goal: bool = False, title: str = "", run: bool = True) -> None:
        if editable and policy is None:
            raise ValueError("an editable stage needs a policy to start from (the plain container has no JSON)")
        self._backend = backend
        self._prompt = prompt
        self._goal = goal
        self.title = title or ("The agent in the plain container" if policy is None else "The agent under a policy")
        self._fixed: Optional[Policy] = None if editable else _as_policy(policy, "policy")
        self.text: Optional[W.Textarea] = None
        parts: list[W.Widget] = [W.HTML(f"<h4 style='margin:6px 0 2px'>{html.escape(self.title)}</h4>")]
        if editable:
            initial = policy if isinstance(policy, str) else json.dumps(
                policy.normalize() if isinstance(policy, Policy) else dict(policy or {}), indent=2)
            self.text = W.Textarea(value=initial, layout=W.Layout(width="100%", height="13em"))
            self.text.add_class("sl-agent-policy")
            parts.append(self.text)
        self.button = W.Button(description="Run the agent", icon="play", button_style="warning",
                               tooltip="Run the scripted agent in this sandbox and collect the evidence")
        self.button.add_class("sl-agent-run-button")
        self.view = W.HTML()
        self.view.add_class("sl-agent-output")
        self.last_run: Optional[AgentRun] = None
        super().__init__([*parts, self.button, self.view])
        self.add_class("sl-agent-stage")
        self.button.on_click(lambda _b: self.run())
        if run:
            self.run()

    def _policy(self) -> tuple[Optional[Policy], str]:
        """The policy to run under, or ("" when valid) the problems to show instead."""
        if self.text is None:
            return self._fixed, ""
        try:
            return load_policy(str(self.text.value).encode("utf-8", "surrogatepass"), name="the agent's policy"), ""
        except PolicyError as exc:
            return None, board.problems_html(exc.problems)

    def run(self) -> Optional[AgentRun]:
        """What the button does: run the agent (or predict it, on the static backend) and show the transcript."""
        policy, problems = self._policy()
        if problems:
            self.last_run, self.view.value = None, problems
            return None
        self.button.disabled, self.button.description = True, "Running…"
        try:
            if self._backend is None:
                self._backend = default()  # chosen on first use, then kept by this stage only
            try:
                outcome = run_agent(self._backend, policy, prompt=self._prompt)
            except SandboxLabError as exc:
                self.last_run, self.view.value = None, board.failed_html(f"{type(exc).__name__}: {exc}")
                return None
        finally:
            self.button.disabled, self.button.description = False, "Run the agent"
        self.last_run = outcome
        self.view.value = board.agent_run_html(outcome, goal=self._goal)
        return outcome

    def _html_fallback(self) -> str:
        if self.text is not None:
            text: Optional[str] = str(self.text.value)
        else:
            text = None if self._fixed is None else json.dumps(self._fixed.normalize(), indent=2)
        return board.agent_stage_html(self.title, text, str(self.view.value))


# --- questions ------------------------------------------------------------------------------


def _record(enabled: bool, item_id: str, result: str, score: float) -> tuple[Optional[Attempt], bool, str]:
    """Record an attempt (only a first one is kept): (the attempt that counts, whether it is this one, why not saved)."""
    if not enabled:
        return None, False, ""
    try:
        attempt, this_one = record_attempt(item_id, result, score)
    except (OSError, ProgressError) as exc:
        return None, False, str(exc)
    return attempt, this_one, ""


def _show(widget: W.Widget, visible: bool) -> None:
    widget.layout.display = "" if visible else "none"


class Quiz(_HTMLFallback, W.VBox):  # type: ignore[misc]
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
        self.prompt = W.HTML(board.prompt_html(q))
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
                    self.note.value = board.error_html(f"Options in the bank's order (progress file: {exc})")
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
            _show(self.ratings, False)
        self.input.add_class("sl-quiz-input")
        self.button.add_class("sl-quiz-button")
        self.rated = W.HTML()
        super().__init__([self.prompt, self.note, self.input, self.button, self.feedback, self.ratings, self.rated])
        self.add_class("sl-quiz")

    def check(self, answer: Optional[str] = None) -> Optional[ChoiceVerdict]:
        """Judge a pick (``answer``: an option's bank key or text; default: what the widget holds), record it, then reveal."""
        q = self.question
        if q.type != "choice":
            self.reveal(answer)
            return None
        try:
            verdict = judge_choice(q, self.input.value if answer is None else answer)
        except InvalidAnswer as exc:
            self.feedback.value = board.answer_html(False, str(exc))
            return None
        self.input.value = verdict.chosen
        attempt, this_one, unsaved = _record(self._record_progress, f"quiz:{q.id}", "right" if verdict.correct else "wrong",
                                             1.0 if verdict.correct else 0.0)
        self.verdict, self.attempt = verdict, attempt
        # The model answer only once the first attempt is on record (or nothing is recorded at all).
        reveal = attempt is not None or not self._record_progress
        self.feedback.value = board.choice_result_html(q, verdict, self.letters, reveal=reveal, attempt=attempt,
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
            self.feedback.value = board.answer_html(False, str(exc))
            return None
        self.hint = hint
        self.input.disabled = self.button.disabled = True
        self.feedback.value = board.recall_reveal_html(q, hint)
        _show(self.ratings, True)
        return hint

    def rate(self, rating: str) -> Optional[Attempt]:
        """Recall: the learner's own rating of their answer (``quiz.RATINGS``); the first one is recorded."""
        if self.hint is None:
            self.rated.value = board.answer_html(False, "Write your answer and show the model answer first.")
            return None
        try:
            score = rating_score(rating)
        except InvalidAnswer as exc:
            self.rated.value = board.answer_html(False, str(exc))
            return None
        attempt, this_one, unsaved = _record(self._record_progress, f"quiz:{self.question.id}", rating, score)
        self.rating, self.attempt = rating, attempt
        self.rated.value = board.rating_html(rating, attempt=attempt, this_one=this_one, unsaved=unsaved)
        return attempt

    def _html_fallback(self) -> str:
        q = self.question
        asked = board.prompt_html(q) + "".join(
            f"<p>({self.letters[c.key]}) {html.escape(c.text)}</p>" for c in self.order)
        return f'<div class="sl-quiz" data-question="{html.escape(q.id)}">{asked}{self.feedback.value}{self.rated.value}</div>'


class Prediction(_HTMLFallback, W.VBox):  # type: ignore[misc]
    """Predict, then run: tick the probes expected to succeed against a scenario's sandbox, run it, see each call scored."""

    def __init__(self, question_id: str, *, backend: Optional[Backend] = None, record_progress: bool = True) -> None:
        q = question(question_id)
        if q.type != "predict" or q.scenario is None:
            raise InvalidAnswer(f"{q.id} is not a predict question: show it with Quiz({q.id!r})")
        self.question = q
        self._backend = backend
        self._record_progress = record_progress
        self.prompt = W.HTML(board.prompt_html(q))
        self.scenario = W.HTML(board.scenario_html(q))
        self.boxes = {pid: W.Checkbox(value=False, description=f"{pid}: {probe(pid).story}", indent=False,
                                      layout=W.Layout(width="100%")) for pid in q.scenario.probes}
        for box in self.boxes.values():
            box.add_class("sl-prediction-probe")
        self.button = W.Button(description="Run it", icon="play", button_style="warning",
                               tooltip="Run this sandbox and compare your prediction with what happens")
        self.button.add_class("sl-prediction-button")
        self.view = W.HTML()
        self.view.add_class("sl-prediction-result")
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
                self.view.value = board.error_html(f"not probes of this question: {', '.join(sorted(unknown))}")
                return None
            for pid, box in self.boxes.items():
                box.value = pid in chosen
        self.button.disabled, self.button.description = True, "Running…"
        if self._backend is None:
            self._backend = default()  # chosen on first use, then kept by this widget only
        out = _run(self._backend, scenario_policy(q))
        if isinstance(out, str):  # the machinery failed: nothing is scored, the learner may try again
            self.view.value = board.failed_html(out)
            self.button.disabled, self.button.description = False, "Run it"
            return None
        score = score_prediction(q, self.predicted, out)
        attempt, this_one, unsaved = (
            _record(self._record_progress, f"quiz:{q.id}", score.result, score.score) if score.judged else (None, False, ""))
        self.result, self.score, self.attempt = out, score, attempt
        for box in self.boxes.values():  # the prediction that was scored stays on screen as it was
            box.disabled = True
        self.button.description = "Ran"
        self.view.value = board.prediction_html(q, score, attempt=attempt, this_one=this_one, unsaved=unsaved)
        return score

    def _html_fallback(self) -> str:
        ticks = "".join(f"<p>{'☑' if box.value else '☐'} {html.escape(str(box.description))}</p>" for box in self.boxes.values())
        return f'<div class="sl-prediction-quiz">{self.prompt.value}{self.scenario.value}{ticks}{self.view.value}</div>'


class _Asked(_HTMLFallback, W.HTML):  # type: ignore[misc]
    def _html_fallback(self) -> str:
        return str(self.value)


def ask(question_id: str) -> W.HTML:
    """A graded choice question, shown with the bank's letters and nothing of the answer (the answer goes in a cell)."""
    q = question(question_id)
    if q.type != "choice":
        raise InvalidAnswer(f"{q.id} is not a choice question")
    return _Asked(value=board.ask_html(q))


# --- progress -------------------------------------------------------------------------------


def _tasks() -> list[tuple[str, str]]:
    try:
        from grader.grading.tasks import all_tasks
    except ImportError:  # the task catalogue is optional for the board
        return []
    try:
        return [(f"task:{t.id}", t.title) for t in all_tasks()]
    except SandboxLabError:
        return []


def _levels() -> tuple[Any, ...]:
    try:
        return load_levels()
    except LevelError:
        return ()


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
        self.html.value = board.progress_html(progress, questions=load_questions(), tasks=_tasks(), levels=_levels())

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
    """Every question of a lesson (or kind): a Quiz each, a Prediction for a predict question."""
    return W.VBox([Prediction(q.id) if q.type == "predict" else Quiz(q.id) for q in questions_for(lesson=lesson, kind=kind)])


# --- capture the flag -----------------------------------------------------------------------


class AttackEditor(_HTMLFallback, W.VBox):  # type: ignore[misc]
    """A level's story and sandbox, a code editor for the learner's attack, and a button that runs it for real.

    The attack runs in the level's sandbox with a fresh flag (``ctf.attack``); the result says where the flag
    arrived, or shows the next hint (picked by the attempts recorded on the progress board).
    """

    def __init__(self, level_key: Union[int, str], initial: str = "", *, backend: Optional[Backend] = None,
                 record_progress: bool = True, rows: int = 12) -> None:
        self.level = level(level_key)
        self._backend = backend
        self._record_progress = record_progress
        self.intro = W.HTML(board.level_html(self.level))
        self.text = W.Textarea(value=initial or "# your attack: Python, run as the agent's tool would run it\n",
                               layout=W.Layout(width="100%", height=f"{rows * 1.6:.0f}em"))
        self.text.add_class("sl-attack-code")
        self.button = W.Button(description="Run the attack", icon="play", button_style="danger",
                               tooltip="Run this code inside the level's sandbox, with a fresh flag")
        self.button.add_class("sl-attack-button")
        self.view = W.HTML()
        self.view.add_class("sl-attack-result")
        self.result: Optional[AttackResult] = None
        self.attempts = 0  # attempts made in this editor (the progress board keeps the total)
        super().__init__([self.intro, self.text, self.button, self.view])
        self.add_class("sl-attack-editor")
        self.button.on_click(lambda _b: self.run())

    @property
    def code(self) -> str:
        return str(self.text.value)

    @code.setter
    def code(self, value: str) -> None:
        self.text.value = value

    def _attempts_before(self) -> int:
        if not self._record_progress:
            return self.attempts
        try:
            return load_progress().level(self.level.item_id).attempts
        except (OSError, ProgressError):
            return self.attempts

    def run(self, code: Optional[str] = None) -> Optional[AttackResult]:
        """What the button does: run the attack (``code``, or the editor's text) and show where the flag went."""
        if code is not None:
            self.code = code
        before = self._attempts_before()
        self.button.disabled, self.button.description = True, "Running…"
        try:
            if self._backend is None:
                self._backend = default()  # chosen on first use, then kept by this editor only
            result = attack(self.level, self.code, self._backend, attempts_before=before)
        except SandboxLabError as exc:  # no engine, the static backend, a broken run: said, never raised
            self.view.value = board.failed_html(str(exc))
            return None
        finally:
            self.button.disabled, self.button.description = False, "Run the attack"
        self.result = result
        if result.captured is None:  # could not judge: an error, no attempt, no hint
            self.view.value = board.attack_html(result, attempt=before + 1)
            return result
        self.attempts += 1
        unsaved = ""
        if self._record_progress:
            try:
                record_level(self.level.item_id, captured=result.captured, hint_shown=bool(result.hint))
            except (OSError, ProgressError) as exc:
                unsaved = f"<p><small>(progress not saved: {html.escape(str(exc))})</small></p>"
        self.view.value = board.attack_html(result, attempt=before + 1) + unsaved
        return result

    def _html_fallback(self) -> str:
        return (f'<div class="sl-attack-editor">{self.intro.value}<pre class="sl-attack-code">{html.escape(self.code)}</pre>'
                f"{self.view.value}</div>")


def attack_editor(level_key: Union[int, str], initial: str = "", *, backend: Optional[Backend] = None) -> AttackEditor:
    """An ``AttackEditor`` for a level (its number or id)."""
    return AttackEditor(level_key, initial, backend=backend)
