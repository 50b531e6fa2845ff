"""The lessons' main widgets: the policy editor, the probe board, side-by-side runs and the progress board; and the
one place a lesson imports every widget from.

Each feature owns its widget beside its views: questions in ``quiz_widgets``,
the agent on stage in ``agent_stage``, capture the flag in ``notebook.ladder_widgets``;
they are re-exported here, so ``from grader.notebook.widgets import Quiz`` keeps
working. Widgets hold no policy, grading or rendering logic: they validate
with ``load_policy``/``lint``, run with a ``Backend`` and ``build_plan``, record
progress with ``progress`` (``mark_done``), and draw every piece of HTML with
the pure view functions (``board``, ``goal_views``, ``progress_views``).

The boards carry ``palette.NARROW_CSS``: below 600 px wide, a notebook that shows
them gives its outputs the width of the screen (no prompt column).

Each widget also carries a ``text/html`` rendering of its current state
(``widget_base.HTMLFallback``), so an exported notebook
(``scripts/lessons_html.py``) shows the board without a kernel or a widget manager.

Stable CSS classes for browser tests: ``sl-policy-text`` (the JSON textarea),
``sl-probe-button``, ``sl-policy-status``, ``sl-backend-note``,
``sl-probe-board``; every probe row carries ``data-probe`` and ``data-outcome``.
An editor given a goal shows ``sl-goal`` (the goal) and, after each run,
``sl-goal-status`` with ``data-goal`` ``met`` or ``not-met``. The other
features' classes are listed in their own modules.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import ipywidgets as W

from grader.backends import Backend, default
from grader.core.analyzer import lint
from grader.core.errors import LevelError, PolicyError, Problem, SandboxLabError
from grader.core.outcomes import RunResult
from grader.core.policy import Policy, load_policy
from grader.course.ladder import load_levels
from grader.course.reveals import solutions_shown
from grader.notebook.ladder_widgets import AttackEditor, attack_editor
from grader.grading.grade import carry_over
from grader.notebook import board, goal_views, palette, progress_views
from grader.notebook.agent_stage import AgentStage
from grader.course.goals import Goal, check, goal as find_goal
from grader.course.needed_jobs import only_jobs
from grader.course.prestart import Prestart
from grader.course.progress import ProgressError, load_progress, mark_done
from grader.course.quiz import load_questions
from grader.notebook.quiz_widgets import Prediction, Quiz, ask, quizzes
from grader.course.session_runs import SESSION
from grader.notebook.summary import hatch_rows
from grader.notebook.widget_base import HTMLFallback, PolicyInput, as_policy, html_view, run_button, run_sandbox, run_sandboxes

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


# --- probe board ----------------------------------------------------------------------------


class ProbeBoard(HTMLFallback, W.HTML):  # type: ignore[misc]
    """A run's outcomes as a table (attacks first; red where an attack succeeded, green where a job works) and the exfiltration picture."""

    def __init__(self, result: Optional[RunResult] = None, *, only: Optional[list[str]] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._only = only
        self.result: Optional[RunResult] = None
        self.add_class("sl-probe-board")
        self.show(result)

    def show(self, result: Optional[RunResult]) -> None:
        self.result = result
        self.value = palette.NARROW_CSS + board.board_html(result, only=self._only)

    def show_error(self, message: str) -> None:
        self.result = None
        self.value = palette.NARROW_CSS + palette.failed_html(message)

    def _html_fallback(self) -> str:
        return str(self.value)


def probe_board(policy: PolicyInput, backend: Optional[Backend] = None, *, only: Optional[list[str]] = None,
                jobs: Optional[Sequence[str]] = None) -> ProbeBoard:
    """Run one policy (``None`` = the plain-container baseline) and show its board, optionally only some probes;
    ``jobs``: count only these job probes (the lesson's job's, ``needed_jobs``)."""
    b = backend if backend is not None else default()
    out = run_sandbox(b, as_policy(policy, "policy"))
    pb = ProbeBoard(None, only=only)
    if isinstance(out, str):
        pb.show_error(out)
    else:
        pb.show(out if jobs is None else only_jobs(out, jobs))
    return pb


# --- policy editor --------------------------------------------------------------------------

_FIX_FIRST = "<em>Fix the errors above first.</em>"  # what "Probe" says while the policy is invalid
# ipywidgets holds a text update back while the kernel is busy with the one before, but sends a click at once: a
# press can reach the kernel before the text it was made on. The first text after a press on text that did not
# parse, if it comes within this many seconds, is the text the learner pressed on, and runs if valid.
_LATE_TEXT_S = 5.0


class PolicyEditor(HTMLFallback, W.VBox):  # type: ignore[misc]
    """JSON policy text with live validation (errors with their JSON pointer, lint warnings) and a probe button.

    Given a ``goal`` (a ``goals.Goal`` or its id), the editor states it and,
    after each run, says "Goal met" or "Not yet: ..." with every reason
    (``goals.check``); a met goal is recorded on the progress board
    (``goal:<id>``) and followed by the policy as the real tools take it.

    Given ``save_as``, every edit is written to that file as it stands, valid or
    not, so a command that reads the file (``%%attack capstone --policy ...``)
    runs what the editor shows, or names the same problems: never an older,
    valid text kept behind the learner's back.

    When an edit makes the text a valid policy, its sandbox is prepared in the
    background (``prestart``: on Docker, up to the probes' go), so Probe only
    fires it; at most one per editor, retired when the text changes, after
    ``prestart.IDLE_S`` unused, and when the kernel exits. One held run costs
    about 14 MiB, 27 MiB behind a proxy (measured: ``prestart``'s docstring). The
    initial text is not prepared: a notebook of editors opened and left alone
    holds no sandbox.
    """

    def __init__(self, initial: Union[Mapping[str, Any], str], *, backend: Optional[Backend] = None, rows: int = 10,
                 goal: Union[Goal, str, None] = None, record_progress: bool = True,
                 jobs: Optional[Sequence[str]] = None, save_as: Union[str, os.PathLike[str], None] = None) -> None:
        text = initial if isinstance(initial, str) else json.dumps(dict(initial), indent=2)
        self.save_as: Optional[Path] = None if save_as is None else Path(save_as)
        self._backend = backend
        self._jobs = jobs  # the board counts only these job probes (None: every one)
        self.goal: Optional[Goal] = find_goal(goal) if isinstance(goal, str) else goal
        self._record_progress = record_progress
        self.goal_box = W.HTML(goal_views.goal_html(self.goal) if self.goal else "")
        self.goal_status = W.HTML()
        self.goal_met: Optional[bool] = None  # None until a run has been checked against the goal
        self.goal_reasons: list[str] = []
        # The tooltip is the textarea's accessible name (its title): the heading above is not tied to it.
        self.text = W.Textarea(value=text, tooltip="Sandbox policy (JSON)",
                               layout=W.Layout(width="100%", height=f"{rows * 1.6:.0f}em"))
        self.text.add_class("sl-policy-text")
        self.status = W.HTML()
        self.status.add_class("sl-policy-status")
        self.button = run_button("Probe this policy", "Run every attack and job probe against this policy", "sl-probe-button")
        self.backend_note = html_view("sl-backend-note")
        self.board = ProbeBoard(None)
        self.policy: Optional[Policy] = None
        self.errors: tuple[Problem, ...] = ()
        self.warnings: tuple[Problem, ...] = ()
        self.last_result: Optional[RunResult] = None
        super().__init__([self.goal_box, W.HTML("<strong>Sandbox policy (JSON)</strong>"), self.text, self.status,
                          W.HBox([self.button, self.backend_note], layout=W.Layout(flex_flow="row wrap")),
                          self.goal_status, self.board])
        self.add_class("sl-policy-editor")
        self._pressed_at: Optional[float] = None  # when "Probe" was pressed on text that did not parse
        self._backend_lock = threading.Lock()  # the backend is chosen once, by Probe or by the preparing thread
        self._prestart = Prestart(self._chosen_backend, known=SESSION.has)
        self.text.observe(lambda _change: self._text_changed(), names="value")
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
        self.status.value = board.problems_html(self.errors, self.warnings) + self._save()
        # The button stays enabled (and in the Tab order) while the text is invalid: a disabled button is skipped by
        # Tab, so a keyboard user who leaves the text box mid-edit, or before the kernel has checked the last
        # keystroke, lands in the next cell's widget instead of on "Probe". Pressing it then says what to fix.
        if self.policy is not None and self.backend_note.value == _FIX_FIRST:
            self.backend_note.value = ""
        return self.policy

    def _save(self) -> str:
        """Write the text to ``save_as`` (if given) and say so, as a line for the status."""
        if self.save_as is None:
            return ""
        try:
            self.save_as.write_text(self.policy_text.strip() + "\n", encoding="utf-8")
        except OSError as exc:
            return palette.error_html(f"Not saved to {self.save_as.name}: {exc.strerror or exc}")
        state = "a valid policy" if self.policy is not None else "not valid yet: fix the problems above"
        return (f'<p class="sl-policy-saved" style="color:{palette.GREY};margin:2px 0">'
                f"Saved to {palette.h(self.save_as.name)} ({state}).</p>")

    def _chosen_backend(self) -> Backend:
        with self._backend_lock:
            if self._backend is None:
                self._backend = default()  # chosen on first use, then kept by this editor only
            return self._backend

    def close(self) -> None:
        """Retire the prepared sandbox with the widget (ipywidgets closes one whose ``__init__`` failed, too)."""
        prestart: Optional[Prestart] = getattr(self, "_prestart", None)
        if prestart is not None:
            prestart.close()
        super().close()

    def _text_changed(self) -> None:
        """Validate the new text and prepare its sandbox (``prestart``); if it is the first since a press on text
        that did not parse, and came at once (``_LATE_TEXT_S``), it is the text that press was made on: run it
        when it is valid."""
        policy = self.validate()
        self._prestart.offer(policy)
        pressed, self._pressed_at = self._pressed_at, None
        if policy is not None and pressed is not None and time.monotonic() - pressed < _LATE_TEXT_S:
            self.probe()

    def probe(self) -> Optional[RunResult]:
        """What the button does: run every probe against the current policy and show the board."""
        policy = self.validate()
        if policy is None:
            self.backend_note.value = _FIX_FIRST
            self._pressed_at = time.monotonic()
            return None
        self._pressed_at = None
        self.button.disabled, self.button.description = True, "Probing…"
        try:
            # the sandbox prepared for this very plan if there is one (``prestart``), else a cold run
            outcome = SESSION.run(self._chosen_backend(), policy, ready=self._prestart.run)
        finally:
            self.button.disabled, self.button.description = False, "Probe this policy"
        if isinstance(outcome, str):
            self.board.show_error(outcome)
            self.backend_note.value = board.backend_note_html(None, backend=str(getattr(self._backend, "name", "?")))
            self.last_result = None
            self.goal_met, self.goal_reasons, self.goal_status.value = None, [], ""  # nothing was judged
            return None
        self.board.show(outcome if self._jobs is None else only_jobs(outcome, self._jobs))
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
        status = goal_views.goal_status_html(self.goal, met, reasons, result, unsaved=unsaved)
        if met:
            status += board.carry_over_html(carry_over(policy))
        self.goal_status.value = status

    def _html_fallback(self) -> str:
        return board.editor_html(self.policy_text, self.status.value, self.backend_note.value,
                                 self.goal_box.value + self.goal_status.value + self.board.value)


# --- several sandboxes ----------------------------------------------------------------------


class SideBySide(HTMLFallback, W.HTML):  # type: ignore[misc]
    """Several sandboxes run and compared probe by probe; ``results`` maps each name to its run (or error message)."""

    def __init__(self, results: Mapping[str, Union[RunResult, str]]) -> None:
        super().__init__(value=palette.NARROW_CSS + board.comparison_html(results))
        self.results = dict(results)
        self.add_class("sl-side-by-side")

    def _html_fallback(self) -> str:
        return str(self.value)


def side_by_side(policies: Mapping[str, PolicyInput], backend: Optional[Backend] = None, *,
                 jobs: Optional[Sequence[str]] = None) -> SideBySide:
    """Run each policy (``None`` = the plain-container baseline) with one backend and compare them;
    ``jobs``: count only these job probes (the lesson's job's, ``needed_jobs``)."""
    b = backend if backend is not None else default()
    results: dict[str, Union[RunResult, str]] = {}
    valid: dict[str, Optional[Policy]] = {}
    for name, value in policies.items():
        try:
            valid[name] = as_policy(value, name)
        except PolicyError as exc:
            results[name] = str(exc)
    ran = run_sandboxes(b, valid)  # at the same time: the board waits for the slowest sandbox, not their sum
    for name in policies:
        out = results.get(name) or ran[name]
        results[name] = out if isinstance(out, str) or jobs is None else only_jobs(out, jobs)
    return SideBySide(results)


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


class ProgressBoard(HTMLFallback, W.VBox):  # type: ignore[misc]
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
            shown = frozenset(solutions_shown())  # the levels whose solution the learner asked for (course.reveals)
        except (ProgressError, LevelError) as exc:
            self.html.value = palette.error_html(str(exc))
            return
        self.html.value = palette.NARROW_CSS + progress_views.progress_html(progress, questions=load_questions(), tasks=_tasks(), levels=_levels(),
                                                       hatches=hatch_rows(), solutions_shown=shown)

    def _html_fallback(self) -> str:
        return str(self.html.value)


def finish_lesson(item_id: str) -> ProgressBoard:
    """Record a lesson as done and show the progress board."""
    try:
        mark_done(item_id)
    except (OSError, ProgressError) as exc:
        print(f"Progress not saved: {exc}")
    return ProgressBoard()
