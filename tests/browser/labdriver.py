"""What the browser tests share: a JupyterLab server on a free localhost port, Debian's Chromium, Run All, axe-core.

The server is started the way ``make lab`` starts it for a learner (the
learner lab's configuration first on ``JUPYTER_CONFIG_PATH``) or, for the older
end-to-end test, on a copy of the lesson sources. Its kernels import the
``grader`` of this checkout (``PYTHONPATH``), never the one the virtualenv's
editable install points at. JupyterLab and Chromium are always stopped, even
when a step fails.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
AXE = ROOT / "tools" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
LEARNER_CONFIG = ROOT / "binder" / "learner-lab"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
SERVER_START_S = 60
# Generous: a Docker run takes ~5 s, and a lesson runs up to a dozen sandboxes.
RUN_ALL_MS = 300_000

# WCAG 2.0, 2.1 and 2.2, levels A and AA: the rules axe-core tags with these.
WCAG_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22a", "wcag22aa"]
SERIOUS = ("serious", "critical")


def missing_browser() -> str:
    """Why the browser cannot be driven here ("" when it can)."""
    if not os.path.exists(CHROMIUM):
        return f"{CHROMIUM} is missing: run scripts/ensure-browser (installs Debian's chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is missing: run scripts/ensure-browser (pip installs it, no browser download)"
    return ""


def require_browser(*, axe: bool = False) -> None:
    problem = missing_browser()
    if not problem and axe and not AXE.is_file():
        problem = f"{AXE.relative_to(ROOT)} is missing: run scripts/ensure-browser (npm ci in tools/axe)"
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"{problem}; CI is set, so this fails instead of skipping", pytrace=False)
        pytest.skip(problem)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def lab_settings(settings_dir: Path) -> None:
    """User settings that keep the page quiet and every cell in the DOM."""
    def write(plugin: str, name: str, value: dict[str, Any]) -> None:
        path = settings_dir / plugin / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))

    # No news/update pop-ups over the notebook (and no network lookups for them).
    write("@jupyterlab/apputils-extension", "notification", {"fetchNews": "false", "checkForUpdates": False})
    # Windowing renders only visible cells; the tests look for outputs far down the notebook.
    write("@jupyterlab/notebook-extension", "tracker", {"windowingMode": "none"})


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)  # the server and the kernels it started
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@dataclass(frozen=True)
class Lab:
    base: str
    token: str
    home: Path  # where the learner's progress.json goes
    log: Optional[Path] = None  # the server's output, for a failure's diagnosis

    def url(self, notebook: str) -> str:
        """The notebook in a fresh workspace (``reset``): the notebook a test opened before stays closed."""
        return f"{self.base}/lab/tree/{notebook}?token={self.token}&reset"

    def shut_down_kernels(self) -> None:
        """Every kernel the lab runs, shut down (a module of tests opens one notebook after another)."""
        with urllib.request.urlopen(f"{self.base}/api/kernels?token={self.token}", timeout=10) as r:
            kernels = json.load(r)
        for k in kernels:
            request = urllib.request.Request(f"{self.base}/api/kernels/{k['id']}?token={self.token}", method="DELETE")
            with urllib.request.urlopen(request, timeout=30):
                pass


@contextmanager
def jupyterlab(root: Path, work: Path, *, learner: bool, backend: str = "docker",
               extra_env: Optional[dict[str, str]] = None) -> Iterator[Lab]:
    """JupyterLab serving ``root``; ``learner``: with the learner lab's configuration, as ``make lab`` runs it;
    ``backend``: the lessons' backend (``SANDBOX_LAB_BACKEND``; never a silent fallback); ``extra_env``: more of
    the kernel's environment (the run service's URL and token for ``remote``)."""
    home = work / "home"
    home.mkdir(parents=True, exist_ok=True)
    lab_settings(work / "lab-settings")
    port, token = free_port(), f"sl-{os.getpid()}-{time.monotonic_ns()}"
    env = dict(os.environ)
    env.update(
        SANDBOX_LAB_BACKEND=backend,  # named, so a missing engine fails loudly rather than falling back
        SANDBOX_LAB_PROGRESS=str(home / "progress.json"),
        JUPYTER_CONFIG_DIR=str(work / "jupyter-config"),
        JUPYTER_RUNTIME_DIR=str(work / "jupyter-runtime"),
        JUPYTERLAB_WORKSPACES_DIR=str(work / "lab-workspaces"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")])),
        PYTHONUNBUFFERED="1",
    )
    env.update(extra_env or {})
    if learner:
        env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(filter(None, [str(LEARNER_CONFIG), os.environ.get("JUPYTER_CONFIG_PATH", "")]))
    log_path = work / "jupyter.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
         "--port-retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         f"--LabApp.user_settings_dir={work / 'lab-settings'}", f"--LabApp.workspaces_dir={work / 'lab-workspaces'}",
         "--ServerApp.open_browser=False"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + SERVER_START_S
        while True:
            if proc.poll() is not None:
                pytest.fail(f"JupyterLab exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"JupyterLab did not answer in {SERVER_START_S} s:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.5)
        yield Lab(base, token, home, log_path)
    finally:
        stop(proc)
        log.close()


@contextmanager
def chromium(profile: Path, *, width: int = 1400, height: int = 1000) -> Iterator[Any]:
    """A headless Chromium context (Debian's browser, fresh profile); closed even when the test fails."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": width, "height": height},
        )
        try:
            context.set_default_timeout(60_000)
            for page in context.pages:
                dismiss_connection_errors(page)
            context.on("page", dismiss_connection_errors)
            yield context
        finally:
            context.close()


# The one button of JupyterLab's "Server Connection Error": "Close" in JupyterLab 4 (its ConnectionLost dialog's
# cancel button); "Dismiss" in earlier ones. A handler that looked for "Dismiss" alone hung on the real dialog for its
# whole timeout (a make test run failed so); test_learner_lab raises the real dialog to keep this honest.
CLOSE_CONNECTION_ERROR = re.compile(r"^\s*(Close|Dismiss)\s*$")


def connection_error(page: Any) -> Any:
    """JupyterLab's "Server Connection Error" dialog on ``page`` (a locator; it may match none)."""
    return page.locator(".jp-Dialog", has_text="Server Connection Error")


def dismiss_connection_errors(page: Any) -> None:
    """On a busy machine a request of the lab's can time out, and JupyterLab says "Server Connection Error" in a
    modal dialog while it reconnects by itself; the dialog can come up at any moment and stops every click. Closed
    (its one button) whenever it stands in the way of an action, as a learner would close it."""
    page.add_locator_handler(connection_error(page),
                             lambda dialog: dialog.locator("button", has_text=CLOSE_CONNECTION_ERROR).first.click())


# The notebook on screen (a notebook in a background tab is hidden, not gone).
NOTEBOOK = ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook"


# A lab and its kernel starting: under make test other workers' Docker tests share the cores.
KERNEL_START_MS = 180_000
_IDLE = ".jp-StatusBar-Widget"
# The dialogs a busy machine can raise while a lab opens a notebook, and what goes on: a request that timed out
# ("Server Connection Error": the server answers again once it has started), the kernel chooser JupyterLab raises
# when it could not start the notebook's kernel by itself (its session request failed), and the theme's stylesheet
# that did not come in time (the page is reloaded, as a learner would, so it is drawn as a learner sees it;
# ``wait_idle`` reloads twice at most).
RELOAD = ""
# "Failed to fetch": a request the browser never got an answer to (a loaded machine), in a "File Load Error": reloaded
_GO_ON: dict[str, Any] = {"Server Connection Error": CLOSE_CONNECTION_ERROR, "Select Kernel": "Select", "Error Loading Theme": RELOAD, "Failed to fetch": RELOAD}


def _dialogs(page: Any) -> list[str]:
    return [d.inner_text().strip().replace("\n", " | ")[:300] for d in page.locator(".jp-Dialog").all()]


def wait_idle(page: Any, lab: Optional[Lab] = None, *, timeout_ms: int = KERNEL_START_MS, url: str = "") -> None:
    """Until the notebook's kernel says Idle in the status bar. A dialog in ``_GO_ON`` is answered on the way, as
    a learner would; a page whose notebook is not on screen (the lab opened its Launcher instead: a request that
    failed under load) is opened again (``url``, the notebook's; else reloaded), twice at most. Any other dialog, or no Idle by ``timeout_ms``, fails with what
    the page, the server and its log said (the status bar, the dialogs, the kernels and sessions, the log's tail)."""
    idle = page.locator(_IDLE, has_text="Idle").first
    deadline = time.monotonic() + timeout_ms / 1000
    answered: list[str] = []
    reloaded = time.monotonic() - 60  # none yet
    while True:
        try:
            idle.wait_for(timeout=2_000)
            break
        except Exception as e:  # playwright's TimeoutError; the page is asked again below
            if "Timeout" not in type(e).__name__:
                raise
        reload = not page.locator(f"{NOTEBOOK} .jp-Cell").count()
        for dialog in reversed(page.locator(".jp-Dialog").all()):  # the newest is on top
            text = dialog.inner_text()
            title = next((t for t in _GO_ON if t in text), None)
            if title is None:
                pytest.fail(f"a dialog stopped the kernel's start: {text.strip()[:600]}\n{diagnosis(page, lab)}",
                            pytrace=False)
            if _GO_ON[title] == RELOAD:
                reload = True
                continue
            try:
                dialog.locator("button", has_text=_GO_ON[title]).first.click(timeout=5_000)
                answered.append(title)
            except Exception as e:  # gone meanwhile, or under another dialog: the page is asked again
                if "Timeout" not in type(e).__name__:
                    raise
        # a reload takes its time on a loaded machine: the next is allowed only 30 s after the last
        if reload and answered.count("reloaded") < 2 and time.monotonic() - reloaded > 30:
            if url:  # the lab rewrites its address once loaded: a reload would open its Launcher again
                page.goto(url, wait_until="commit")  # not its load: the loop goes on waiting
            else:
                page.reload(wait_until="commit")
            reloaded = time.monotonic()
            answered.append("reloaded")
        if time.monotonic() > deadline:
            pytest.fail(f"the kernel was not Idle in {timeout_ms // 1000} s (dialogs answered on the way: "
                        f"{answered or 'none'})\n{diagnosis(page, lab)}", pytrace=False)
    # A stale "Server Connection Error" can still be up once the kernel answers: close it.
    stale = connection_error(page).locator("button", has_text=CLOSE_CONNECTION_ERROR)
    if stale.count():
        stale.first.click()


def diagnosis(page: Any, lab: Optional[Lab]) -> str:
    """What the page and the server said: the status bar, the dialogs, the server's kernels and sessions, its log."""
    lines = [f"status bar: {[w.strip() for w in page.locator(_IDLE).all_inner_texts() if w.strip()]}",
             f"dialogs: {_dialogs(page)}"]
    if lab is not None:
        for api in ("kernels", "sessions"):
            try:
                with urllib.request.urlopen(f"{lab.base}/api/{api}?token={lab.token}", timeout=10) as r:
                    lines.append(f"/api/{api}: {r.read().decode()[:1500]}")
            except OSError as e:
                lines.append(f"/api/{api}: {e}")
        if lab.log is not None and lab.log.is_file():
            lines.append("server log, last lines:\n" + lab.log.read_text(errors="replace")[-4000:])
    return "\n".join(lines)


def open_notebook(page: Any, url: str, lab: Optional[Lab] = None) -> None:
    """Open a notebook and wait until its kernel is idle (``wait_idle``). A notebook still not on screen after a
    minute (the lab showed its Launcher, or a request failed on a loaded machine) is left to ``wait_idle``, which
    opens it again; it must be on screen in the end, or the test fails with what the page and the server said."""
    page.goto(url)
    cell = page.locator(f"{NOTEBOOK} .jp-Cell").first
    try:
        cell.wait_for(timeout=60_000)
    except Exception as e:  # playwright's TimeoutError: wait_idle opens the notebook again
        if "Timeout" not in type(e).__name__:
            raise
    wait_idle(page, lab, url=url)
    try:
        cell.wait_for(timeout=30_000)
    except Exception as e:
        if "Timeout" not in type(e).__name__:
            raise
        pytest.fail(f"the notebook was not on screen: {url}\n{diagnosis(page, lab)}", pytrace=False)


# Every code cell's prompt: "[*]" while queued or running, "[n]" once run, "[ ]" when never run.
_PROMPTS = f"[...document.querySelectorAll('{NOTEBOOK} .jp-CodeCell .jp-InputPrompt')].map(p => p.textContent.trim())"


def run_all(page: Any) -> None:
    """Run every cell from the Run menu and wait until none is queued or running any more (finished, or stopped)."""
    page.locator(".lm-MenuBar-item", has_text="Run").first.click()
    page.locator(".lm-Menu-item:visible", has_text="Run All Cells").first.click()
    # Started: a cell is queued or has run (a notebook that runs in no time is done at once).
    page.wait_for_function(f"() => {_PROMPTS}.some(t => t.includes('*') || /\\d/.test(t))", timeout=60_000)
    page.wait_for_function(f"() => {_PROMPTS}.every(t => !t.includes('*'))", timeout=RUN_ALL_MS, polling=500)
    wait_idle(page, timeout_ms=60_000)


def never_run(page: Any) -> list[str]:
    """The first line of every code cell Run All left unexecuted (a cell above it stopped the run), and the error."""
    return list(page.evaluate(
        """notebook => {
          const out = [];
          let error = '';
          for (const cell of document.querySelectorAll(notebook + ' .jp-CodeCell')) {
            const prompt = cell.querySelector('.jp-InputPrompt').textContent;
            const err = [...cell.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
              .map(o => o.textContent).find(t => /Error|Traceback/.test(t));
            if (err && !error) error = 'stopped by: ' + err.trim().split('\\n').slice(-1)[0].slice(0, 200);
            if (!/\\d/.test(prompt)) {
              const src = cell.querySelector('.jp-InputArea-editor .cm-line');
              out.push('never ran: ' + (src ? src.textContent.slice(0, 80) : '?'));
            }
          }
          return out.length && error ? [error, ...out] : out;
        }""",
        NOTEBOOK,
    ))


# What a lesson owns on the page: its text (rendered Markdown) and every output its cells wrote. The rest
# (cell editors, prompts, toolbars) is JupyterLab's own.
LESSON_OWNED = ".jp-OutputArea, .jp-RenderedMarkdown"


def axe_violations(page: Any, context: Optional[str] = None) -> list[dict[str, Any]]:
    """axe-core's WCAG 2 A/AA violations on the page (or under ``context``), every ``<details>`` opened first.

    Opened, so nothing escapes the check by sitting in a closed box the learner can open.
    Each violation: rule id, impact, help text, and the CSS targets of its nodes split by owner:
    ``targets`` inside a lesson's text or outputs (``LESSON_OWNED``), ``jupyterlab`` elsewhere.
    """
    page.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    return list(page.evaluate(
        """async ([context, tags, owned]) => {
          const r = await axe.run(context ? {include: [context]} : document,
                                  {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']});
          const lesson = n => { const el = document.querySelector(n.target[0]); return !!el && !!el.closest(owned); };
          return r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                                         targets: v.nodes.filter(lesson).map(n => n.target.join(' ')),
                                         jupyterlab: v.nodes.filter(n => !lesson(n)).map(n => n.target.join(' '))}));
        }""",
        [context, WCAG_TAGS, LESSON_OWNED],
    ))


def serious(violations: list[dict[str, Any]]) -> list[str]:
    """One line per serious or critical violation in a lesson's own content: rule id, impact, help, up to five targets."""
    lines = []
    for v in violations:
        if v["impact"] in SERIOUS and v["targets"]:
            more = f" (+{len(v['targets']) - 5} more)" if len(v["targets"]) > 5 else ""
            lines.append(f"{v['id']} [{v['impact']}] {v['help']}: {', '.join(v['targets'][:5])}{more}")
    return lines
