"""The policy as the real tools take it, live beside the policy editor: sandbox-runtime's and Claude Code's settings.

A learner writes policies in the shape of sandbox-runtime's settings file, and
one rule reads differently there: in Sandbox Lab a non-empty ``allowRead``
makes everything it does not list unreadable; in sandbox-runtime and Claude
Code every read is allowed by default and ``allowRead`` only re-allows paths
inside a ``denyRead``. Said late, a learner who stops early carries the wrong
rule to a real machine; so the first editor a learner meets (lesson 01's)
shows, beside the policy and updated as it is typed, what
``sandbox-lab export --to srt`` and ``--to claude-code`` write for it
(``grading.grade.carry_over``), with that difference in one sentence
(``ALLOW_READ_SENTENCE``) and what the export added for this policy.

An invalid policy shows no settings at all (never the last valid one's): the
export follows the policy, and the editor's own status says what to fix.

``real_tools_html`` is the pure view; ``RealToolsView`` is the widget that
follows a textarea (``AgentStage(..., beside=RealToolsView)``). Stable CSS
classes: ``sl-real-tools`` with ``data-state`` (``exported`` or ``invalid``),
``sl-real-tools-srt``, ``sl-real-tools-claude-code`` and ``sl-allow-read``.

Imports: errors, policy, grading.grade (``carry_over``), palette, widget_base. Nothing downstream.
"""

from __future__ import annotations

import json
import re
from typing import Any

import ipywidgets as W

from grader.core.errors import PolicyError
from grader.core.policy import Policy, load_policy
from grader.grading.grade import carry_over
from grader.lessons.palette import AMBER, h
from grader.lessons.widget_base import HTMLFallback

__all__ = ["ALLOW_READ_SENTENCE", "RealToolsView", "added_deny_read", "real_tools_html"]

# The one sentence every first use of allowRead owes the learner (lesson 01 quotes it; tests/unit/test_allow_read_claims.py
# keeps every other mention of allowRead honest).
ALLOW_READ_SENTENCE = (
    "allowRead differs: in this lab, a policy that lists paths in allowRead makes everything else unreadable, while "
    "sandbox-runtime and Claude Code let commands read everything by default and use allowRead only to re-allow paths "
    'inside a denyRead, so {"allowRead": ["/project/src"]} alone hides nothing there and the export adds the denyRead that does.'
)

_PRE = "margin:2px 0 6px;padding:4px 6px;background:#f2f4f7;font-size:85%;max-height:16em;overflow:auto"


def added_deny_read(policy: Policy, srt_settings: str) -> list[str]:
    """The ``denyRead`` entries the srt export wrote that the policy did not: what makes its ``allowRead`` restrict there."""
    exported = json.loads(srt_settings)["filesystem"]["denyRead"]
    return [p for p in exported if p not in policy.filesystem.denyRead]


def _this_policy(policy: Policy, srt_settings: str) -> str:
    """What the difference means for this policy, in one sentence."""
    fs = policy.filesystem
    if fs.allowRead:
        added = added_deny_read(policy, srt_settings)
        if not added:
            return ("Your allowRead lists paths, and every data root of the simulated machine is covered by one of your rules, "
                    "so the export adds no denyRead: on a real machine the rest of the disk stays readable under both tools.")
        return (f"Your allowRead lists paths, so the export adds denyRead of {', '.join(added)} (what none of your rules covers) "
                "and keeps your allowRead to re-allow what you listed; without that denyRead, your allowRead would hide nothing there.")
    if fs.denyRead:
        return "Your policy has no allowRead: its denyRead hides the same paths here and in both tools; everything else is readable in all three."
    return "Your policy has no read rule: here and in both tools, every file is readable."


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
        f'<p style="margin:2px 0 4px"><em>{h(_this_policy(policy, carry.srt))}</em></p>'
        "<p style=\"margin:2px 0\">sandbox-runtime's settings file (<code>~/.srt-settings.json</code>):</p>"
        # a scrollable box is reachable by keyboard (tabindex) and says what it holds (WCAG: scrollable-region-focusable)
        f'<pre class="sl-real-tools-srt" style="{_PRE}" tabindex="0" role="region" '
        f'aria-label="sandbox-runtime settings for this policy">{h(carry.srt)}</pre>'
        "<p style=\"margin:2px 0\">Claude Code's <code>settings.json</code>, its sandbox block:</p>"
        f'<pre class="sl-real-tools-claude-code" style="{_PRE}" tabindex="0" role="region" '
        f'aria-label="Claude Code sandbox settings for this policy">{h(carry.claude_code)}</pre>'
        f"<p style=\"margin:2px 0\"><small>Differences between Sandbox Lab and srt that matter for this policy: "
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
