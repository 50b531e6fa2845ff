"""Capture the flag's hints, played as a learner in a real browser: five wrong attacks on three levels each get a
hint naming what that attack did, never the level's solution; the solution appears only when asked for.

Issue 41's "done when". JupyterLab on localhost, rooted in a copy of lessons/,
on the Docker backend; Debian's headless Chromium driven by Playwright. Lesson
07 is opened, its setup cell run (it registers ``%%attack``), and each of the
five wrong attacks of ``tests/integration/test_ctf_docker.py`` (``WRONG_ATTACKS``,
read from there so the two tests cannot drift apart) is typed into its level's
``%%attack N`` cell as a learner types it: click the cell, select all, type,
Shift+Enter. The rendered hint must hold the words that test checks in the
hint string (the host, the proxy's refusal or 502, the failed lookup or write,
the next session's output), and no text of the level's ``solution`` block may
appear anywhere in the cell's output. Then the "Show the solution" button is
pressed once: the worked solution appears, marked as asked, and the asking is
recorded beside the learner's progress file.

Every attack runs in real containers: the run took 42-53 s (load average 10 on 2 shared cores),
one JupyterLab and one kernel for all five. Screenshots of every cell go to ``artifacts/screenshots/``.
The kernel is shut down through the server (its backend removes the proxies
and the shared internet it kept), then JupyterLab and Chromium are stopped,
even when a step fails; the test then checks that the kernel left no container.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from labdriver import NOTEBOOK, ROOT, Lab, chromium, jupyterlab, open_notebook, require_browser

pytestmark = [pytest.mark.browser, pytest.mark.docker, pytest.mark.slow]

LESSON = "07-break-it-yourself/break-it.ipynb"
SHOTS = ROOT / "artifacts" / "screenshots"
ATTACK_MS = 180_000  # one attack in real containers: ~5-10 s quiet, much longer on 2 shared busy cores
SETUP_MS = 120_000  # the setup cell: the Docker backend is chosen (its images checked) on first use


def _wrong_attacks() -> list[tuple[str, str, str, tuple[str, ...]]]:
    """The integration test's five wrong attacks: (level id, why it is wrong, the attack, words its hint must say)."""
    path = ROOT / "tests" / "integration" / "test_ctf_docker.py"
    spec = importlib.util.spec_from_file_location("_ctf_wrong_attacks", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return list(module.WRONG_ATTACKS)


def _kernel_pids(runtime_dir: Path) -> set[int]:
    """The pids of the kernels this lab started (their command lines name its runtime directory's connection files)."""
    pids = set()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if str(runtime_dir).encode() in (proc / "cmdline").read_bytes():
                    pids.add(int(proc.name))
            except OSError:
                pass
    return pids


def _containers_of(pids: set[int]) -> list[str]:
    """Containers the Docker backend labelled as made by one of ``pids`` (``org.sandbox-lab.pid``)."""
    import docker

    from grader.backends.docker.backend import LABEL_PID

    client = docker.from_env()
    try:
        return sorted(c["Names"][0].lstrip("/") for pid in pids
                      for c in client.api.containers(all=True, filters={"label": f"{LABEL_PID}={pid}"}))
    finally:
        client.close()


@pytest.fixture()
def lab(tmp_path: Path) -> Iterator[Lab]:
    """JupyterLab rooted in a copy of lessons/, on the Docker backend (a missing engine fails loudly). At the end
    its kernels are shut down through the server (so each backend's finalizer removes what it kept), the server is
    stopped, and no container made by one of its kernels may be left."""
    require_browser()
    root = tmp_path / "lessons"
    shutil.copytree(ROOT / "lessons", root)
    kernels: set[int] = set()
    with jupyterlab(root, tmp_path, learner=False, backend="docker") as running:
        try:
            yield running
        finally:
            kernels = _kernel_pids(tmp_path / "jupyter-runtime")
            running.shut_down_kernels()
    left = _containers_of(kernels) if kernels else []
    assert not left, f"the lesson's kernel left containers behind: {left}"


@pytest.fixture()
def page(tmp_path: Path) -> Iterator[Any]:
    """A headless Chromium page (Debian's browser, fresh profile); closed even when the test fails."""
    require_browser()
    with chromium(tmp_path / "chromium-profile") as context:
        yield context.pages[0] if context.pages else context.new_page()


def _cell_index(page: Any, first_line: str) -> int:
    """The index of the notebook's cell whose first line is ``first_line``."""
    index = page.evaluate(
        """([nb, first]) => [...document.querySelectorAll(nb + ' .jp-Cell')].findIndex(c => {
             const line = c.querySelector('.jp-InputArea-editor .cm-line');
             return !!line && line.textContent.trim() === first; })""", [NOTEBOOK, first_line])
    assert index >= 0, f"lesson 07 has no cell starting {first_line!r}"
    return int(index)


def _cell_text(cell: Any) -> str:
    return "\n".join(cell.locator(".jp-InputArea-editor .cm-line").all_text_contents())


def _prompt(cell: Any) -> str:
    return str(cell.locator(".jp-InputPrompt").first.text_content()).strip()


def _type_into(page: Any, cell: Any, text: str) -> None:
    """Replace the cell's text as a learner does: click into it, select all, type it line by line. After each Enter
    the editor indents the new line itself; Shift+Home selects that indentation, so the line's own replaces it."""
    cell.locator(".jp-InputArea-editor .cm-content").click()
    page.keyboard.press("Control+A")
    for n, line in enumerate(text.split("\n")):
        if n:
            page.keyboard.press("Enter")
            page.keyboard.press("Shift+Home")
        page.keyboard.type(line)
    held = _cell_text(cell)
    assert held == text, f"the editor holds something else than what was typed:\n{held}\n---\n{text}"


def _run(page: Any, cell: Any, *, timeout: int = ATTACK_MS) -> None:
    """Shift+Enter in the cell, then wait until it has run again (a new execution count) and the kernel is idle."""
    before = _prompt(cell)
    page.keyboard.press("Shift+Enter")
    page.wait_for_function(
        """([el, before]) => { const t = el.textContent.trim(); return /\\d/.test(t) && !t.includes('*') && t !== before; }""",
        arg=[cell.locator(".jp-InputPrompt").first.element_handle(), before], timeout=timeout, polling=500)
    page.locator(".jp-StatusBar-Widget", has_text="Idle").first.wait_for(timeout=60_000)


def _shot(cell: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    cell.screenshot(path=str(SHOTS / f"ctf-hints-{name}.png"))


def test_five_wrong_attacks_on_three_levels_each_get_a_hint_naming_what_they_did_and_the_solution_only_when_asked(
        lab: Lab, page: Any) -> None:
    from grader.course.ladder import level
    from grader.course.progress import load_progress

    wrong = _wrong_attacks()
    assert len(wrong) == 5 and len({lv for lv, *_ in wrong}) == 3, [w[:2] for w in wrong]
    open_notebook(page, lab.url(LESSON), lab)

    # The setup cell registers %%attack on the lesson's backend (Docker, as SANDBOX_LAB_BACKEND names it).
    setup = page.locator(f"{NOTEBOOK} .jp-Cell").nth(_cell_index(page, "from grader.backends import default"))
    setup.locator(".jp-InputArea-editor .cm-content").click()
    _run(page, setup, timeout=SETUP_MS)
    said = setup.locator(".jp-OutputArea").inner_text()
    assert "docker" in said.lower() and "Traceback" not in said, said

    hints: list[str] = []
    attempts: dict[str, int] = {}
    for n, (level_id, why, code, words) in enumerate(wrong, start=1):
        lv = level(level_id)
        assert lv.solution is not None
        attempts[lv.item_id] = attempts.get(lv.item_id, 0) + 1
        cell = page.locator(f"{NOTEBOOK} .jp-Cell").nth(_cell_index(page, f"%%attack {lv.number}"))
        _type_into(page, cell, f"%%attack {lv.number}\n{code.rstrip()}")
        _run(page, cell)
        outcome = cell.locator(".sl-attack-outcome[data-captured]")
        outcome.wait_for(state="attached", timeout=60_000)  # the widget's view, drawn once its model arrives
        cell.scroll_into_view_if_needed()
        _shot(cell, f"{n}-{level_id}")
        shown = cell.locator(".jp-OutputArea").first
        assert outcome.get_attribute("data-captured") == "false", (why, outcome.inner_text())
        assert f"Not captured (attempt {attempts[lv.item_id]})" in outcome.inner_text(), why  # misses pile up per level
        hint = cell.locator('.sl-attack-hint[data-hint-from="evidence"]')
        assert hint.count() == 1, (why, outcome.inner_text())  # read from what this run did, not a canned hint
        text = hint.inner_text()
        for w in words:
            assert w in text, (why, w, text)
        everything = str(shown.text_content())  # what the learner can see or open, the attack's printout included
        for sol in (lv.solution.answer, lv.solution.channel, *lv.solution.also):
            assert sol not in everything, (why, sol)
        assert cell.locator(".sl-solution").count() == 0, why
        hints.append(text)
    assert len(set(hints)) == len(wrong), "each attack got its own hint"

    # Asked for: the last level's "Show the solution" button, pressed once.
    lv = level(wrong[-1][0])
    assert lv.solution is not None
    cell = page.locator(f"{NOTEBOOK} .jp-Cell").nth(_cell_index(page, f"%%attack {lv.number}"))
    cell.locator("button.sl-solution-button").click()
    solution = cell.locator('.sl-solution[data-asked="true"]')
    solution.wait_for(state="attached", timeout=60_000)
    cell.scroll_into_view_if_needed()
    _shot(cell, "6-solution-asked")
    text = solution.inner_text()
    assert "The solution you asked for" in text, text
    for sol in (lv.solution.answer, lv.solution.channel, *lv.solution.also):
        assert sol in text, (sol, text)
    asked = json.loads((lab.home / "solutions-shown.json").read_text(encoding="utf-8"))
    assert set(asked["shown"]) == {lv.item_id}, asked  # recorded as asked, for this level only
    progress = load_progress(lab.home / "progress.json")
    assert {k: progress.level(k).attempts for k in attempts} == attempts  # every miss counted, asking spent none
