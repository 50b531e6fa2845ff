"""export_view.py: the policy as sandbox-runtime's and Claude Code's settings, live beside lesson 01's editor."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from grader.core.policy import load_policy
from grader.notebook.export_view import ALLOW_READ_SENTENCE, RealToolsView, readable_secrets, real_tools_html
from grader.realtools.export import export

W = pytest.importorskip("ipywidgets")

from grader.notebook.agent_stage import AgentStage  # noqa: E402 - after the skip

SRC_ONLY = {"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}}


@pytest.fixture(autouse=True)
def _own_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(tmp_path / "progress.json"))


def _pre(html: str, cls: str) -> str:
    m = re.search(rf'<pre class="{cls}"[^>]*>(.*?)</pre>', html, re.S)
    assert m, cls
    return m.group(1).replace("&quot;", '"')


def test_the_view_shows_what_export_writes_for_both_tools() -> None:
    html = real_tools_html(json.dumps(SRC_ONLY))
    policy = load_policy(SRC_ONLY)
    assert 'data-state="exported"' in html
    assert _pre(html, "sl-real-tools-srt") == export(policy, "srt")[0]
    assert _pre(html, "sl-real-tools-claude-code") == export(policy, "claude-code")[0]


def test_every_scrollable_box_of_the_view_is_reachable_by_keyboard_and_named() -> None:
    """axe's scrollable-region-focusable: a box that scrolls must take the focus, or a keyboard cannot scroll it."""
    html = real_tools_html(json.dumps(SRC_ONLY))
    boxes = re.findall(r"<(\w+)([^>]*overflow:auto[^>]*)>", html)
    assert len(boxes) == 2
    for _tag, attrs in boxes:
        assert 'tabindex="0"' in attrs and 'role="region"' in attrs and 'aria-label="' in attrs, attrs


def test_the_view_says_reads_are_open_by_default_and_which_secrets_the_policy_leaves_readable() -> None:
    html = real_tools_html(json.dumps(SRC_ONLY))
    assert 'class="sl-allow-read"' in html and "re-opens" in html and "open by default" in html
    assert "in this lab" not in html  # there is no dialect to contrast with
    leaked = readable_secrets(load_policy(SRC_ONLY))
    assert "/home/user/.ssh/id_rsa" in leaked and "/etc/secrets/db_password" in leaked
    assert f"leaves {len(leaked)} secrets readable" in html
    srt = json.loads(export(load_policy(SRC_ONLY), "srt")[0])
    assert srt["filesystem"]["denyRead"] == [] and srt["filesystem"]["allowRead"] == ["/project/src"]  # as written
    assert "allowRead" in ALLOW_READ_SENTENCE and "denyRead" in ALLOW_READ_SENTENCE


def test_a_policy_that_hides_every_secret_is_told_so() -> None:
    assert "secrets readable" in real_tools_html("{}")
    safe = {"filesystem": {"denyRead": ["/home/user", "/etc/secrets", "/project", "/app/workspace"], "allowRead": ["/project/src"]}}
    assert "No secret or credential" in real_tools_html(json.dumps(safe))


def test_an_invalid_policy_shows_no_settings_at_all() -> None:
    for text in ("{", '{"filesystem": {"allowReads": ["/x"]}}'):
        html = real_tools_html(text)
        assert 'data-state="invalid"' in html and "sl-real-tools-srt" not in html and "sl-real-tools-claude-code" not in html


def test_the_widget_follows_its_textarea_and_never_keeps_a_stale_export() -> None:
    area = W.Textarea(value="{}")
    view = RealToolsView(area)
    assert "secrets readable" in view.value
    area.value = json.dumps(SRC_ONLY)
    assert "/project/src" in _pre(view.value, "sl-real-tools-srt")
    area.value = json.dumps(SRC_ONLY)[:-1]  # a keystroke breaks the JSON: the last export must go
    assert 'data-state="invalid"' in view.value and "sl-real-tools-srt" not in view.value
    assert view._html_fallback() == view.value


def test_the_agent_stage_shows_it_beside_its_policy_and_in_its_export() -> None:
    stage = AgentStage(SRC_ONLY, editable=True, run=False, beside=RealToolsView)
    assert isinstance(stage.beside, RealToolsView) and stage.beside.source is stage.text
    assert any(isinstance(c, W.HBox) and stage.text in c.children and stage.beside in c.children for c in stage.children)
    assert stage.text is not None
    stage.text.value = "{}"
    assert "secrets readable" in stage.beside.value
    assert "sl-real-tools" in stage._html_fallback()
    plain = AgentStage(SRC_ONLY, editable=True, run=False)  # without the hook, as before
    assert plain.beside is None and plain.text in plain.children
