"""What every widget shares: a ``text/html`` rendering for exports, a policy from what a lesson passes, one run
whose machinery failure becomes a message (reused within the kernel session, ``session_runs``), and a question's
first attempt recorded.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Union

import ipywidgets as W

from grader.backends import Backend
from grader.core.outcomes import RunResult
from grader.core.policy import Policy, load_policy
from grader.course.progress import Attempt, ProgressError, record_attempt
from grader.course.session_runs import SESSION

__all__ = [
    "HTMLFallback", "PolicyInput", "as_policy", "html_view", "record_first", "run_button", "run_sandbox", "run_sandboxes",
    "show_widget",
]

PolicyInput = Union[Policy, Mapping[str, Any], str, None]


class HTMLFallback:
    """Adds a ``text/html`` rendering to a widget's output, for exports and kernels without a widget manager."""

    def _html_fallback(self) -> str:
        raise NotImplementedError

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        data = super()._repr_mimebundle_(**kwargs)  # type: ignore[misc]
        if isinstance(data, dict):
            data["text/html"] = self._html_fallback()
        return data


def as_policy(value: PolicyInput, name: str) -> Optional[Policy]:
    """What a lesson passes (a policy, its JSON as a mapping or text, a file, or None: the plain container) as a policy."""
    if value is None or isinstance(value, Policy):
        return value
    if isinstance(value, Mapping):
        return load_policy(dict(value), name=name)
    return load_policy(value, name=name)


def run_sandbox(backend: Backend, policy: Optional[Policy]) -> Union[RunResult, str]:
    """Run one sandbox, or reuse this session's earlier run of it (labelled so on its board); a machinery failure
    becomes a message for the learner, never a traceback."""
    return SESSION.run(backend, policy)


def run_sandboxes(backend: Backend, policies: Mapping[str, Optional[Policy]]) -> dict[str, Union[RunResult, str]]:
    """``run_sandbox`` for several sandboxes at once (a side-by-side board), by name, in the given order."""
    return SESSION.run_all(backend, policies)


def record_first(enabled: bool, item_id: str, result: str, score: float) -> tuple[Optional[Attempt], bool, str]:
    """Record an attempt (only a first one is kept): (the attempt that counts, whether it is this one, why not saved)."""
    if not enabled:
        return None, False, ""
    try:
        attempt, this_one = record_attempt(item_id, result, score)
    except (OSError, ProgressError) as exc:
        return None, False, str(exc)
    return attempt, this_one, ""


def show_widget(widget: W.Widget, visible: bool) -> None:
    """Show or hide a widget, keeping its place."""
    widget.layout.display = "" if visible else "none"


def run_button(description: str, tooltip: str, css_class: str, *, style: str = "warning") -> W.Button:
    """The play button that starts a run: its words, what it does on hover, and the class tests and themes find it by."""
    button = W.Button(description=description, icon="play", button_style=style, tooltip=tooltip)
    button.add_class(css_class)
    return button


def html_view(css_class: str) -> W.HTML:
    """An empty HTML output a run's result is rendered into, found by ``css_class``."""
    view = W.HTML()
    view.add_class(css_class)
    return view
