"""Lesson 01's agent on stage as a widget: the scripted agent run in one sandbox, its transcript and verdict.

Running is ``agent``'s; what is drawn, ``agent_views``'s. Stable CSS classes:
``sl-agent-stage`` with ``sl-agent-policy`` (its JSON textarea, when editable),
``sl-agent-run-button``, ``sl-agent-transcript`` (rows carry ``data-step`` and
``data-outcome``) and ``sl-agent-verdict`` (``data-leaked``: true, false or unknown).
"""

from __future__ import annotations

import html
import json
from typing import Callable, Optional

import ipywidgets as W

from grader.backends import Backend, default
from grader.core.errors import PolicyError, SandboxLabError
from grader.core.policy import Policy, load_policy
from grader.notebook import agent_views, board, palette
from grader.course.agent import AgentRun, run_agent
from grader.course.goals import AGENT_GOAL, agent_goal_met
from grader.course.progress import ProgressError, mark_done
from grader.course.session_runs import lesson_target
from grader.notebook.widget_base import HTMLFallback, PolicyInput, as_policy, html_view, run_button

__all__ = ["AgentStage"]


class AgentStage(HTMLFallback, W.VBox):  # type: ignore[misc]
    """Lesson 01's scripted agent run in one sandbox: its transcript, and whether the key left (from the evidence).

    ``policy`` None is the plain container. ``editable`` shows the policy as
    JSON text the learner changes before pressing the run button; ``goal`` adds
    the lesson's check (the key stayed and the job was done), recorded once met
    (``goal:l01-key-stays``) so the progress board counts it. The agent runs
    once when the stage is shown, unless ``run`` is False.
    """

    def __init__(self, policy: PolicyInput = None, *, prompt: str = "", backend: Optional[Backend] = None,
                 editable: bool = False, goal: bool = False, title: str = "", run: bool = True,
                 beside: Optional[Callable[[W.Textarea], W.Widget]] = None) -> None:
        if editable and policy is None:
            raise ValueError("an editable stage needs a policy to start from (the plain container has no JSON)")
        self._backend = backend
        self._prompt = prompt
        self._goal = goal
        self.title = title or ("The agent in the plain container" if policy is None else "The agent under a policy")
        self._fixed: Optional[Policy] = None if editable else as_policy(policy, "policy")
        self.text: Optional[W.Textarea] = None
        self.beside: Optional[W.Widget] = None
        parts: list[W.Widget] = [W.HTML(f"<h4 style='margin:6px 0 2px'>{html.escape(self.title)}</h4>")]
        if editable:
            initial = policy if isinstance(policy, str) else json.dumps(
                policy.normalize() if isinstance(policy, Policy) else dict(policy or {}), indent=2)
            self.text = W.Textarea(value=initial, layout=W.Layout(width="100%", height="13em"))
            self.text.add_class("sl-agent-policy")
            # ``beside``: a view that follows the policy as it is typed (lesson 01: export_view.RealToolsView)
            self.beside = beside(self.text) if beside is not None else None
            if self.beside is not None:
                self.text.layout.flex = "1 1 20em"  # two columns where 40em fit, one above the other where not
            parts.append(self.text if self.beside is None else W.HBox(
                [self.text, self.beside], layout=W.Layout(width="100%", flex_flow="row wrap", align_items="flex-start")))
        self.button = run_button("Run the agent", "Run the scripted agent in this sandbox and collect the evidence",
                                 "sl-agent-run-button")
        self.view = html_view("sl-agent-output")
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
                outcome = run_agent(self._backend, policy, prompt=self._prompt, target=lesson_target())
            except SandboxLabError as exc:
                self.last_run, self.view.value = None, palette.failed_html(f"{type(exc).__name__}: {exc}")
                return None
        finally:
            self.button.disabled, self.button.description = False, "Run the agent"
        self.last_run = outcome
        self.view.value = agent_views.agent_run_html(outcome, goal=self._goal)
        if self._goal and agent_goal_met(outcome.leaked, outcome.job_done):
            try:  # lesson 01's goal met: it counts on the progress board (goals.LESSON_GOALS)
                mark_done(f"goal:{AGENT_GOAL}")
            except (OSError, ProgressError) as exc:
                self.view.value += palette.error_html(f"Progress not saved: {exc}")
        return outcome

    def _html_fallback(self) -> str:
        if self.text is not None:
            text: Optional[str] = str(self.text.value)
        else:
            text = None if self._fixed is None else json.dumps(self._fixed.normalize(), indent=2)
        extra = self.beside._html_fallback() if isinstance(self.beside, HTMLFallback) else ""
        return agent_views.agent_stage_html(self.title, text, extra + str(self.view.value))
