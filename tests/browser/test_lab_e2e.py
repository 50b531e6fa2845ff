"""A learner's first probe, in a real browser: JupyterLab on localhost, Debian's Chromium driven by Playwright.

Opens the naive-vs-secure lesson, runs all cells, presses the policy editor's
probe button on the naive setup (the SSH key is read and exfiltrated), then types
a secure policy into the editor and probes again (the exfiltration is blocked).
A second test drives lesson 01's agent on stage: the scripted agent leaks the
key in the plain container and under the naive policy, then the learner types a
policy into the stage and the verdict turns to "the key stayed" with the job done.
The probes and the agent run in real containers (Docker backend). Screenshots of every step go
to ``artifacts/screenshots/`` (gitignored) for a person to look at.

The browser is Debian's ``/usr/bin/chromium`` (``scripts/ensure-browser``),
never a Playwright browser download. JupyterLab and Chromium are always stopped,
even when a step fails.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from labdriver import ROOT, RUN_ALL_MS, Lab, chromium, jupyterlab, require_browser, wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.docker, pytest.mark.slow]

LESSON = "02-naive-vs-secure/naive-vs-secure.ipynb"
SHOTS = ROOT / "artifacts" / "screenshots"
# The secure policy of the "fix the naive setup" task: secrets hidden, one registry reachable.
SECURE_POLICY = {
    "filesystem": {
        "allowWrite": ["/app/workspace/build"],
        "denyRead": ["/home/user", "/etc/secrets", "/project/.env"],
    },
    "network": {"allowedDomains": ["registry.npmjs.org"]},
}

PROBE_MS = 120_000
# a lab's first page: under make test other workers' Docker tests share the cores
START_MS = 180_000


@pytest.fixture()
def lab(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[tuple[str, Lab]]:
    """JupyterLab on a free localhost port, rooted in a copy of lessons/, on the Docker backend (the real
    thing: a missing engine fails loudly); yields the lesson's URL (``LESSON``, or the one an indirect
    parametrization names) and the running lab."""
    require_browser()
    root = tmp_path / "lessons"
    shutil.copytree(ROOT / "lessons", root)
    with jupyterlab(root, tmp_path, learner=False, backend="docker") as running:
        yield running.url(getattr(request, "param", LESSON)), running


@pytest.fixture()
def page(tmp_path: Path) -> Iterator[Any]:
    """A headless Chromium page (Debian's browser, fresh profile); closed even when the test fails."""
    require_browser()
    with chromium(tmp_path / "chromium-profile") as context:
        yield context.pages[0] if context.pages else context.new_page()


def _shot(page: Any, step: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"lab-e2e-{step}.png"), full_page=False)


def _outcomes(editor: Any) -> dict[str, str]:
    rows = editor.locator(".sl-probe-board [data-probe]")
    return {r.get_attribute("data-probe"): r.get_attribute("data-outcome") for r in rows.all()}


def _wait_for_outcome(page: Any, probe: str, outcome: str) -> None:
    page.locator(f'.sl-policy-editor .sl-probe-board [data-probe="{probe}"][data-outcome="{outcome}"]').wait_for(
        state="attached", timeout=PROBE_MS)


def _run_all(page: Any, lab: tuple[str, Lab], until: str, shot: str) -> Any:
    """Open the lesson, run every cell from the Run menu, wait until all finished; the first ``until`` element."""
    url, running = lab
    page.goto(url)
    page.locator(".jp-Notebook .jp-Cell").first.wait_for(timeout=START_MS)
    # The kernel has started when the status bar says so; then run every cell from the Run menu.
    wait_idle(page, running, url=url)
    _shot(page, f"{shot}1-opened")
    page.locator(".lm-MenuBar-item", has_text="Run").first.click()
    page.locator(".lm-Menu-item:visible", has_text="Run All Cells").first.click()

    found = page.locator(until).first
    found.wait_for(state="attached", timeout=RUN_ALL_MS)
    # Every cell has finished (no "[*]" prompt left) and the kernel is free for the button's message.
    page.wait_for_function(
        """() => [...document.querySelectorAll('.jp-InputPrompt')].every(p => !p.textContent.includes('*'))""",
        timeout=RUN_ALL_MS)
    wait_idle(page, running)
    return found


def test_naive_policy_leaks_the_ssh_key_and_the_fixed_one_blocks_it(lab: tuple[str, Lab], page: Any) -> None:
    editor = _run_all(page, lab, ".sl-policy-editor", "")
    editor.scroll_into_view_if_needed()
    _shot(page, "2-editor")

    # The naive setup: the SSH key is readable and leaves the machine.
    button = editor.locator("button.sl-probe-button")
    button.click()
    _wait_for_outcome(page, "exfil-secret", "succeeded")
    editor.locator(".sl-backend-note").filter(has_text="docker").wait_for(timeout=PROBE_MS)
    editor.scroll_into_view_if_needed()
    _shot(page, "3-naive-probed")
    naive = _outcomes(editor)
    assert naive.get("read-ssh-key") == "succeeded", naive
    assert naive.get("exfil-secret") == "succeeded", naive

    # Type the secure policy into the editor, as a learner would, and probe again.
    text = editor.locator(".sl-policy-text textarea")
    text.fill(json.dumps(SECURE_POLICY, indent=2))
    text.press("Tab")  # leave the field, so the widget's last value is synced
    page.wait_for_function("el => !el.disabled", arg=button.element_handle(), timeout=30_000)
    _shot(page, "4-secure-typed")
    button.click()
    _wait_for_outcome(page, "exfil-secret", "blocked")
    editor.scroll_into_view_if_needed()
    _shot(page, "5-secure-probed")
    secure = _outcomes(editor)
    assert secure.get("read-ssh-key") == "blocked", secure
    assert secure.get("exfil-secret") == "blocked", secure
    assert secure.get("job-write-build") == "succeeded", secure


def test_lesson_02_editor_reaches_goal_met(lab: tuple[str, Lab], page: Any, tmp_path: Path) -> None:
    """The learner's exercise end to end: the goal is stated, the naive setup is "Not yet", the fixed one "Goal met"."""
    editor = _run_all(page, lab, ".sl-policy-editor", "goal-0-")
    goal = editor.locator(".sl-goal")
    assert "no channel out except the npm registry" in goal.inner_text()
    assert editor.locator(".sl-goal-status").count() == 0  # nothing is judged before a run

    # The naive setup the editor starts from: not yet, and the first reason names the SSH key.
    button = editor.locator("button.sl-probe-button")
    button.click()
    status = editor.locator('.sl-goal-status[data-goal="not-met"]')
    status.wait_for(state="attached", timeout=PROBE_MS)
    editor.scroll_into_view_if_needed()
    _shot(page, "goal-1-not-yet")
    not_yet = status.inner_text()
    assert "Not yet:" in not_yet and "read-ssh-key succeeded — ~/.ssh/id_rsa is readable" in not_yet, not_yet
    assert "ran in Docker" in not_yet, not_yet

    # Hide the secrets, as the lesson's hints say, and probe again: goal met.
    text = editor.locator(".sl-policy-text textarea")
    text.fill(json.dumps(SECURE_POLICY, indent=2))
    text.press("Tab")
    page.wait_for_function("el => !el.disabled", arg=button.element_handle(), timeout=30_000)
    button.click()
    met = editor.locator('.sl-goal-status[data-goal="met"]')
    met.wait_for(state="attached", timeout=PROBE_MS)
    editor.scroll_into_view_if_needed()
    _shot(page, "goal-2-met")
    said = met.inner_text()
    assert "Goal met" in said and "npm publish" in said, said  # the accepted risk is named
    assert editor.locator('.sl-goal-status[data-goal="not-met"]').count() == 0
    assert editor.locator(".sl-carry-over").count() == 1  # then the policy as srt and Claude Code take it
    outcomes = _outcomes(editor)
    assert outcomes.get("exfil-secret") == "blocked" and outcomes.get("job-fetch-npm") == "succeeded", outcomes
    progress = json.loads((tmp_path / "home" / "progress.json").read_text())
    assert "goal:l02-npm-build" in progress["done"], progress


# Lesson 01's goal: the key hidden, no network, the project readable and its output directory writable.
AGENT_POLICY = {
    "filesystem": {"denyRead": ["/home/user", "/etc/secrets", "/project/.env"], "allowWrite": ["/project/out"]},
    "network": {"allowedDomains": []},
}


@pytest.mark.parametrize("lab", ["01-why-sandbox/why-sandbox.ipynb"], indirect=True)
def test_the_agent_on_stage_leaks_the_key_until_the_learner_s_policy_contains_it(lab: tuple[str, Lab], page: Any) -> None:
    _run_all(page, lab, ".sl-agent-stage .sl-agent-policy", "agent-")
    stage = page.locator(".sl-agent-stage", has=page.locator(".sl-agent-policy")).first
    failed = page.locator(".sl-agent-stage .sl-failed")
    assert failed.count() == 0, failed.first.inner_text()  # the machinery's own message, e.g. an engine out of networks
    # Runs 1 and 2 (prompt, no prompt): the plain container, the key on record at the gist.
    verdicts = page.locator(".sl-agent-stage .sl-agent-verdict")
    assert [verdicts.nth(i).get_attribute("data-leaked") for i in range(3)] == ["true", "true", "true"]
    assert "ran in Docker" in page.locator(".sl-agent-stage .sl-agent-how").first.inner_text()
    rows = page.locator(".sl-agent-stage").first.locator(".sl-agent-transcript [data-step]")
    assert [(r.get_attribute("data-step"), r.get_attribute("data-outcome")) for r in rows.all()] == [
        (str(n), "ok") for n in range(1, 7)]
    stage.scroll_into_view_if_needed()
    _shot(page, "agent-2-naive")
    assert stage.locator(".sl-agent-goal").get_attribute("data-met") == "false"

    # Beside the policy: the same policy as sandbox-runtime's and Claude Code's settings, and the rule people get wrong.
    real = stage.locator('.sl-real-tools[data-state="exported"]')
    assert "re-opens" in real.locator(".sl-allow-read").inner_text()
    assert '"/home/user"' in real.locator(".sl-real-tools-srt").inner_text()

    # The learner's policy, typed into the stage; the agent runs again, the key stays and the job is done.
    text = stage.locator(".sl-agent-policy textarea")
    text.fill(json.dumps(AGENT_POLICY, indent=2))
    text.press("Tab")  # leave the field, so the widget's last value is synced
    # the export follows the edit: the learner's denyRead is in both tools' settings
    stage.locator(".sl-real-tools-srt", has_text="/project/.env").wait_for(state="attached", timeout=30_000)
    assert "//project/.env" in stage.locator(".sl-real-tools-claude-code").inner_text()
    button = stage.locator("button.sl-agent-run-button")
    page.wait_for_function("el => !el.disabled", arg=button.element_handle(), timeout=30_000)
    button.click()
    stage.locator('.sl-agent-verdict[data-leaked="false"]').wait_for(state="attached", timeout=PROBE_MS)
    stage.scroll_into_view_if_needed()
    _shot(page, "agent-3-contained")
    assert stage.locator(".sl-agent-goal").get_attribute("data-met") == "true"
    assert stage.locator(".sl-agent-job").get_attribute("data-done") == "true"
    outcomes = {r.get_attribute("data-step"): r.get_attribute("data-outcome") for r in stage.locator("[data-step]").all()}
    assert outcomes == {"1": "ok", "2": "ok", "3": "failed", "4": "failed", "5": "ok", "6": "ok"}, outcomes
