"""The policy as the real tools take it, live beside the policy editor: sandbox-runtime's and Claude Code's settings.

A policy means here what it means to sandbox-runtime (srt), and the rule people
most often get wrong is that reads are open by default: ``allowRead`` only
re-opens paths inside a ``denyRead``, so ``{"allowRead": ["/project/src"]}``
alone hides nothing. Said late, a learner who stops early carries the wrong
rule to a real machine; so the first editor a learner meets (lesson 01's)
shows, beside the policy and updated as it is typed, what
``sandbox-lab export --to srt`` and ``--to claude-code`` write for it
(``grading.grade.carry_over``), that rule in one sentence
(``ALLOW_READ_SENTENCE``) and which secrets this policy leaves readable.

An invalid policy shows no settings at all (never the last valid one's): the
export follows the policy, and the editor's own status says what to fix.

``real_tools_html`` is the pure view; ``RealToolsView`` is the widget that
follows a textarea (``AgentStage(..., beside=RealToolsView)``). Stable CSS
classes: ``sl-real-tools`` with ``data-state`` (``exported`` or ``invalid``),
``sl-real-tools-srt``, ``sl-real-tools-claude-code`` and ``sl-allow-read``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import ipywidgets as W

from grader.core.access import access_for
from grader.core.errors import PolicyError
from grader.core.policy import Policy, load_policy
from grader.core.world import load_world
from grader.grading.grade import carry_over
from grader.notebook.palette import AMBER, h
from grader.notebook.widget_base import HTMLFallback

__all__ = ["ALLOW_READ_SENTENCE", "RealToolsView", "readable_secrets", "real_tools_html"]

# The one sentence every first use of allowRead owes the learner (lesson 01 quotes it; tests/unit/project/test_allow_read_claims.py
# keeps every other mention of allowRead honest).
ALLOW_READ_SENTENCE = (
    "Reads are open by default in sandbox-runtime and Claude Code, as here: denyRead hides a path, and allowRead only "
    're-opens paths inside a denyRead, so {"allowRead": ["/project/src"]} alone hides nothing.'
)

_PRE = "margin:2px 0 6px;padding:4px 6px;background:#f2f4f7;font-size:85%;max-height:16em;overflow:auto"


def readable_secrets(policy: Policy) -> list[str]:
    """The simulated machine's secrets and credentials this policy leaves readable (srt's rules)."""
    world = load_world()
    access = access_for(policy, world)
    return [f.path for f in world.loot if access.read(f.path).allowed]


def _this_policy(policy: Policy) -> str:
    """What the rule means for this policy, in one sentence."""
    leaked = readable_secrets(policy)
    if not leaked:
        return "No secret or credential of the simulated machine is readable under this policy, here or in either tool."
    shown = ", ".join(leaked[:4]) + (f" and {len(leaked) - 4} more" if len(leaked) > 4 else "")
    return f"This policy leaves {len(leaked)} secret{'s' if len(leaked) != 1 else ''} readable, here and in both tools: {shown}."


def real_tools_html(text: str) -> str:
    """The policy ``text`` (the editor's JSON) as sandbox-runtime's and Claude Code's settings, or why there are none yet."""
    head = ('<p style="margin:2px 0"><strong>The same policy in the real tools</strong> '
            "<small>(what <code>sandbox-lab export --to srt</code> and <code>--to claude-code</code> write; "
            "it follows your edits)</small></p>")
    parts = re.split(r'(\{"allowRead": \["/project/src"\]\}|allowRead|denyRead)', ALLOW_READ_SENTENCE)
    said = "".join(f"<code>{h(p)}</code>" if i % 2 else h(p) for i, p in enumerate(parts))
    sentence = f'<p class="sl-allow-read" style="margin:2px 0 4px">{said}</p>'
    try:
        policy = load_policy(text.encode("utf-8", "surrogatepass"), name="the policy editor")
    except PolicyError as exc:
        n = len(exc.problems)
        return (f'<div class="sl-real-tools" data-state="invalid">{head}{sentence}'
                f'<p style="margin:2px 0;color:{AMBER}">No export while the policy is invalid ({n} problem{"s" if n != 1 else ""}): '
                "fix it, and the settings appear here.</p></div>")
    carry = carry_over(policy)
    return (
        f'<div class="sl-real-tools" data-state="exported">{head}{sentence}'
        f'<p style="margin:2px 0 4px"><em>{h(_this_policy(policy))}</em></p>'
        "<p style=\"margin:2px 0\">sandbox-runtime's settings file (<code>~/.srt-settings.json</code>):</p>"
        # a scrollable box is reachable by keyboard (tabindex) and says what it holds (WCAG: scrollable-region-focusable)
        f'<pre class="sl-real-tools-srt" style="{_PRE}" tabindex="0" role="region" '
        f'aria-label="sandbox-runtime settings for this policy">{h(carry.srt)}</pre>'
        "<p style=\"margin:2px 0\">Claude Code's <code>settings.json</code>, its sandbox block:</p>"
        f'<pre class="sl-real-tools-claude-code" style="{_PRE}" tabindex="0" role="region" '
        f'aria-label="Claude Code sandbox settings for this policy">{h(carry.claude_code)}</pre>'
        f"<p style=\"margin:2px 0\"><small>Notes on srt's rules for this policy: "
        f"{len(carry.differences)}; <code>sandbox-lab check</code> lists them.</small></p></div>"
    )


class RealToolsView(HTMLFallback, W.HTML):  # type: ignore[misc]
    """``real_tools_html`` of a textarea's policy, redrawn whenever its text changes."""

    def __init__(self, source: W.Textarea, **kwargs: Any) -> None:
        super().__init__(layout=W.Layout(flex="1 1 20em", min_width="16em"), **kwargs)
        self.source = source
        self.add_class("sl-real-tools-view")
        source.observe(lambda _change: self.refresh(), names="value")
        self.refresh()

    def refresh(self) -> None:
        self.value = real_tools_html(str(self.source.value))

    def _html_fallback(self) -> str:
        return str(self.value)
