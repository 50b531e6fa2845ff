"""Capture the flag as a widget: a level's story and sandbox, an editor for the learner's attack, a button
that runs it for real, and one that shows the level's worked solution when the learner asks (``AttackEditor``).

Running and judging are ``ladder``'s; what is drawn, ``notebook.ladder_views``'. Stable CSS
classes for browser tests: ``sl-attack-editor`` with ``sl-attack-code`` (the
attack's textarea), ``sl-attack-button``, ``sl-solution-button`` and ``sl-attack-result``; the outcome
inside carries ``data-captured`` ("true", "false", or "error" for a run that
could not be judged).
"""

from __future__ import annotations

import html
from typing import Optional, Union

import ipywidgets as W

from grader.backends import Backend, default
from grader.core.errors import SandboxLabError
from grader.core.policy import Policy
from grader.notebook import ladder_views as ctf_views
from grader.course.ladder import AttackResult, attack, level
from grader.course.reveals import reveal
from grader.notebook import palette
from grader.course.progress import ProgressError, load_progress, record_level
from grader.notebook.widget_base import HTMLFallback, html_view, run_button

__all__ = ["AttackEditor", "attack_editor"]


class AttackEditor(HTMLFallback, W.VBox):  # type: ignore[misc]
    """A level's story and sandbox, a code editor for the learner's attack, and a button that runs it for real.

    The attack runs in the level's sandbox with a fresh flag (``ctf.attack``); the result says where the flag
    arrived, or shows the next hint (picked by the attempts recorded on the progress board).
    """

    def __init__(self, level_key: Union[int, str], initial: str = "", *, backend: Optional[Backend] = None,
                 record_progress: bool = True, rows: int = 12, policy: Optional[Policy] = None) -> None:
        self.level = level(level_key)
        self._backend = backend
        self._policy = policy  # the capstone's: the learner's own policy for its job
        self._record_progress = record_progress
        self.intro = W.HTML(ctf_views.level_html(self.level))
        self.text = W.Textarea(value=initial or "# your attack: Python, run as the agent's tool would run it\n",
                               layout=W.Layout(width="100%", height=f"{rows * 1.6:.0f}em"))
        self.text.add_class("sl-attack-code")
        self.button = run_button("Run the attack", "Run this code inside the level's sandbox, with a fresh flag",
                                 "sl-attack-button", style="danger")
        self.solution_button = run_button("Show the solution", "The level's worked solution; your progress notes that "
                                          "you asked", "sl-solution-button")
        self.solution_button.icon, self.solution_button.button_style = "eye", "info"
        self.solution_button.layout.width = "auto"  # ipywidgets' 148 px cut the label to "Show the solut…"
        if self.level.solution is None:  # the uncapturable level: its debrief says why nothing leaves
            self.solution_button.layout.display = "none"
        self.view = html_view("sl-attack-result")
        self.result: Optional[AttackResult] = None
        self.attempts = 0  # attempts made in this editor (the progress board keeps the total)
        super().__init__([self.intro, self.text, W.HBox([self.button, self.solution_button]), self.view])
        self.add_class("sl-attack-editor")
        self.button.on_click(lambda _b: self.run())
        self.solution_button.on_click(lambda _b: self.show_solution())

    @property
    def backend(self) -> Optional[Backend]:
        """The engine this editor runs on (None until the first attack picks the default)."""
        return self._backend

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
            result = attack(self.level, self.code, self._backend, attempts_before=before, policy=self._policy)
        except SandboxLabError as exc:  # no engine, the static backend, a broken run: said, never raised
            self.view.value = palette.failed_html(str(exc))
            return None
        finally:
            self.button.disabled, self.button.description = False, "Run the attack"
        self.result = result
        if result.captured is None:  # could not judge: an error, no attempt, no hint
            self.view.value = ctf_views.attack_html(result, attempt=before + 1)
            return result
        self.attempts += 1
        unsaved = ""
        if self._record_progress:
            try:
                record_level(self.level.item_id, captured=result.captured, hint_shown=bool(result.hint))
            except (OSError, ProgressError) as exc:
                unsaved = f"<p><small>(progress not saved: {html.escape(str(exc))})</small></p>"
        self.view.value = ctf_views.attack_html(result, attempt=before + 1) + unsaved
        return result

    def show_solution(self) -> str:
        """What the solution button does: show the level's worked solution, and record that the learner asked (the
        progress board reads it: ``reveals.solutions_shown``). No attempt is spent. Returns the HTML shown."""
        unsaved = ""
        try:
            sol = reveal(self.level, record=False)
            if self._record_progress:
                try:
                    reveal(self.level)
                except (OSError, SandboxLabError, ValueError) as exc:
                    unsaved = f"<p><small>(not recorded: {html.escape(str(exc))})</small></p>"
        except SandboxLabError as exc:  # the uncapturable level: its answer is that nothing leaves
            self.view.value = palette.failed_html(str(exc))
            return str(self.view.value)
        self.view.value = ctf_views.solution_html(sol, asked=True) + unsaved
        return str(self.view.value)

    def _html_fallback(self) -> str:
        return (f'<div class="sl-attack-editor">{self.intro.value}<pre class="sl-attack-code">{html.escape(self.code)}</pre>'
                f"{self.view.value}</div>")


def attack_editor(level_key: Union[int, str], initial: str = "", *, backend: Optional[Backend] = None) -> AttackEditor:
    """An ``AttackEditor`` for a level (its number or id)."""
    return AttackEditor(level_key, initial, backend=backend)
