"""Every shell command the README shows, run as written (or named here as one the suite itself runs).

A newcomer copies the README's commands; each one must work. This test reads
every ```sh block of README.md and of the docs pages its reference moved to
(``PAGES``: the install guide, the command line, capture the flag, the
tutorial), and every ``pip install`` they name (the install table), and
accounts for each command:

* ``make <target>``: ``make -n <target>`` must succeed from the repository's
  root (every prerequisite exists, the recipe parses). ``make test`` is what
  CI runs (``.ci/run``), so the suite runs it whole; ``make lab`` is every step
  of ``make test``'s set-up (``images``: the virtualenv, the engine, the images)
  plus the learner copies and a JupyterLab server, which
  tests/notebooks/test_learner_notebooks.py and tests/browser/ cover.
* ``pip install ...``: run as written with ``--dry-run --no-deps --report -``
  from the repository's root: pip builds the checkout's metadata, and every
  extra the command names must be one the package provides.
* ``sandbox-lab ...`` (bare or as ``.venv/bin/sandbox-lab``): run by bash in a
  scratch directory that is also ``HOME`` (its ``.venv`` the project's), on
  the static backend. A synopsis
  runs as one command per alternative (``--to srt|claude-code|docker``: three
  runs), with every ``[optional]`` part included; for ``--backend`` only
  ``static`` runs here (``docker``, ``srt`` and ``auto`` need an engine:
  tests/integration/test_docker_backend.py and test_srt.py run them), and every
  alternative shown must be one the command's ``--help`` offers. Placeholders
  are files put in place first (``POLICY.json``, ``attack.py``, the settings
  files under ``~``), and ``ID`` is a task id. ``setup`` and ``cleanup`` need
  an engine and run in their own test, marked ``docker``.

A command must end with the exit code the README gives for it ("exit 3 no
engine" for an attack on the static backend; 0 or 1 for a grade, which is "not
full marks"), and never with a traceback. A command the README gains that
none of these rules covers fails the test until it is covered here.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
# the README and the pages its commands moved to (docs/instructors.md's commands: tests/notebooks/test_readme_instructor.py)
PAGES = [README, *(REPO / "docs" / name for name in ("tutorial.md", "install.md", "cli.md", "ctf.md", "index.md",
                                                      "contributing.md", "how-a-run-works.md", "scaling.md"))]
# the pages whose ```sh blocks another test runs, line by line (tests/unit/project/test_docs.py holds that every
# page with a ```sh block is in PAGES or here)
RUN_ELSEWHERE = {"instructors.md": "tests/notebooks/test_readme_instructor.py"}
CLI = REPO / ".venv" / "bin" / "sandbox-lab"
TASK = "scope-secure-sandbox"
# what `make test` and `make lab` do beyond a dry run, and which part of the suite does it
RUN_BY_THE_SUITE = {
    "make test": "CI's run (.ci/run is `make test`): the whole suite, this test included",
    "make lab": "`make test` makes its prerequisites (venv, docker, images); the learner copies and the lab server "
                "are tests/notebooks/test_learner_notebooks.py and tests/browser/",
}
NEEDS_AN_ENGINE = ("setup", "cleanup")  # run by test_setup_and_cleanup_run_as_written
ENGINE_BACKENDS = ("auto", "docker", "srt")  # need an engine or srt: their own integration tests run them
CLAUDE_SETTINGS = {"sandbox": {"enabled": True, "network": {"allowedDomains": ["github.com"]},
                               "filesystem": {"allowWrite": ["."]}}}
SRT_SETTINGS = {"filesystem": {"denyRead": ["~/.ssh"], "allowWrite": ["."], "denyWrite": []},
                "network": {"allowedDomains": ["github.com"], "deniedDomains": []}}


def _text() -> str:
    return "\n".join(page.read_text() for page in PAGES)


def readme_commands(text: str) -> list[str]:
    """Each command line of the pages' ```sh blocks, with its comment (continuation lines joined)."""
    lines = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.S | re.M):
        lines += [ln.strip() for ln in block.replace("\\\n", " ").splitlines()
                  if ln.strip() and not ln.lstrip().startswith("#")]
    return lines


def pip_commands(text: str) -> list[str]:
    """Every ``pip install`` the README tells a reader to run, in code spans or blocks."""
    return sorted(set(re.findall(r"`(pip install [^`]+)`", text)) | {c for c in readme_commands(text) if c.startswith("pip ")})


def _code(command: str) -> str:
    return command.split("  #")[0].split(" # ")[0].strip()


def _expand(command: str) -> list[str]:
    """A synopsis as runnable commands: optional parts included, one command per alternative shown."""
    plain = re.sub(r"\[([^\]]+)\]", r"\1", _code(command))
    groups = list(re.finditer(r"(--[\w-]+) ([\w-]+(?:\|[\w-]+)+)", plain))
    choices = [[c for c in g.group(2).split("|") if g.group(1) != "--backend" or c not in ENGINE_BACKENDS]
               for g in groups]
    out = []
    for pick in itertools.product(*choices):
        text = plain
        for g, c in zip(reversed(groups), reversed(pick)):
            text = text[:g.start(2)] + c + text[g.end(2):]
        out.append(re.sub(r"--task ID\b", f"--task {TASK}", text))
    return out


def _alternatives(command: str) -> dict[str, list[str]]:
    plain = re.sub(r"\[([^\]]+)\]", r"\1", _code(command))
    return {m.group(1): m.group(2).split("|") for m in re.finditer(r"(--[\w-]+) ([\w-]+(?:\|[\w-]+)+)", plain)}


def _expected(command: str) -> set[int]:
    said = re.search(r"#.*\(exit (\d)\b", command)
    if said:
        return {int(said.group(1))}
    words = _code(command).split()
    if "attack" in words and "--level" in words:
        return {3}  # "3 no engine": the static backend cannot predict an attack, and says so
    if "grade" in words:
        return {0, 1}  # full marks, or not: both are a grade
    return {0}


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory that is the reader's HOME and working directory, with every file the README names."""
    home = tmp_path_factory.mktemp("reader")
    (home / ".venv").symlink_to(REPO / ".venv")  # the README's `.venv/bin/...` commands run from a checkout's root
    shutil.copy(REPO / "solutions" / f"{TASK}.json", home / "POLICY.json")
    shutil.copy(REPO / "solutions" / f"{TASK}.json", home / "my_policy.json")
    shutil.copy(REPO / "solutions" / f"{TASK}.json", home / "policy.json")  # how-a-run-works.md's
    (home / "attack.py").write_text("print(open('/home/user/.ssh/id_rsa').read())\n")
    app = home / "code" / "app"
    (app / ".claude").mkdir(parents=True)
    (app / "src").mkdir()
    (app / ".claude" / "settings.json").write_text(json.dumps(CLAUDE_SETTINGS))
    (home / ".srt-settings.json").write_text(json.dumps(SRT_SETTINGS))
    return home


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SANDBOX_LAB_", "VIRTUAL_ENV"))}
    env.update(HOME=str(home), SANDBOX_LAB_BACKEND="static", PATH=f"{CLI.parent}{os.pathsep}{env.get('PATH', '')}")
    return env


def _bash(command: str, cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _cli_commands() -> list[str]:
    return [c for c in readme_commands(_text()) if _code(c).split()[0] in ("sandbox-lab", ".venv/bin/sandbox-lab")]


def _on_an_engine(command: str) -> bool:
    """A command that names an engine's backend itself (``--backend docker``): run in the Docker test."""
    words = _code(command).split()
    return any(a == "--backend" and b in ENGINE_BACKENDS for a, b in zip(words, words[1:]))


def _bench_commands() -> list[str]:
    """The measurements the pages show (``.venv/bin/python bench/X.py ...``): minutes each, so their options are
    checked against each script's parser here, and the scripts are run by the benches, not the suite."""
    return [c for c in readme_commands(_text()) if re.match(r"(\.venv/bin/)?python3? bench/\w+\.py", _code(c))]


def test_every_readme_command_is_covered() -> None:
    text = _text()
    commands = readme_commands(text)
    assert {"make lab", "make test"} <= {_code(c) for c in readme_commands(README.read_text())}, \
        "the README starts with `make lab` and `make test`"
    uncovered = [c for c in commands
                 if not (_code(c).startswith(("make ", "pip install ")) or c in _cli_commands() or c in _bench_commands())]
    assert uncovered == [], f"README commands no test runs: cover them in {Path(__file__).name}: {uncovered}"
    assert set(RUN_BY_THE_SUITE) <= {_code(c) for c in commands}
    assert pip_commands(text), "the README names its installs"
    assert not re.search(r"pip install '?sandbox-lab", text), "no package named sandbox-lab is published: install a checkout"


@pytest.mark.parametrize("target", sorted({_code(c) for c in readme_commands(_text()) if c.startswith("make ")}))
def test_make_targets_the_readme_shows_exist_and_parse(target: str) -> None:
    done = subprocess.run(["make", "-n", *target.split()[1:]], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"`{target}` (as `make -n`): {done.stderr[-2000:]}"


@pytest.mark.parametrize("command", pip_commands(_text()))
def test_pip_installs_the_readme_names_work_from_a_checkout(command: str) -> None:
    extras = set(re.findall(r"\[([\w,]+)\]", command))
    done = subprocess.run([sys.executable, "-m", *command.split()[0:2], *[w.strip("'\"") for w in command.split()[2:]],
                           "--dry-run", "--no-deps", "--report", "-", "-q"], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"`{command}` from the repository's root: {done.stderr[-3000:]}"
    (item,) = json.loads(done.stdout)["install"]
    assert item["metadata"]["name"] == "sandbox-lab"
    provided = set(item["metadata"].get("provides_extra", []))
    named = {e for group in extras for e in group.split(",")}
    assert named <= provided, f"`{command}` names extras the package lacks: {named - provided}"


@pytest.mark.parametrize("command", _cli_commands())
def test_cli_commands_run_as_written(command: str, scratch: Path) -> None:
    words = _code(command).split()
    sub = words[1]
    if _on_an_engine(command):  # test_engine_commands_run_as_written runs it, on Docker
        helped = _bash(f"sandbox-lab {sub} --help", scratch, _env(scratch))
        assert helped.returncode == 0 and "--backend" in helped.stdout, helped.stderr
        return
    if sub in NEEDS_AN_ENGINE:
        helped = _bash(f"sandbox-lab {sub} --help", scratch, _env(scratch))
        assert helped.returncode == 0, helped.stderr
        return
    for option, shown in _alternatives(command).items():
        helped = _bash(f"sandbox-lab {sub} --help", scratch, _env(scratch))
        assert option in helped.stdout and all(c in helped.stdout for c in shown), (command, option, helped.stdout)
    for runnable in _expand(command):
        done = _bash(runnable, scratch, _env(scratch))
        output = done.stdout + done.stderr
        assert done.returncode in _expected(command), f"`{runnable}` ended with exit {done.returncode}: {output[-3000:]}"
        assert "Traceback" not in output, output[-3000:]


@pytest.mark.docker
def test_setup_and_cleanup_run_as_written(scratch: Path) -> None:
    shown = [c for c in _cli_commands() if _code(c).split()[1] in NEEDS_AN_ENGINE]
    assert {_code(c).split()[1] for c in shown} == set(NEEDS_AN_ENGINE), shown
    env = {**_env(scratch), "SANDBOX_LAB_BACKEND": "docker"}
    for command in shown:
        done = _bash(_code(command), scratch, env, timeout=1800)
        assert done.returncode == 0, f"`{_code(command)}`: {(done.stdout + done.stderr)[-3000:]}"


@pytest.mark.docker
def test_engine_commands_run_as_written(scratch: Path) -> None:
    """A command that names ``--backend docker`` (how-a-run-works.md's) runs as shown, on the engine."""
    shown = [c for c in _cli_commands() if _on_an_engine(c)]
    assert shown, "no page shows a command on an engine: drop this test"
    for command in shown:
        for runnable in _expand(command):
            done = _bash(runnable, scratch, _env(scratch), timeout=1800)
            output = done.stdout + done.stderr
            assert done.returncode in _expected(command), f"`{runnable}` ended with exit {done.returncode}: {output[-3000:]}"
            assert "Traceback" not in output, output[-3000:]


@pytest.mark.parametrize("command", _bench_commands())
def test_bench_commands_name_options_their_scripts_have(command: str) -> None:
    """Each bench command a page shows names a script that exists and only options its parser offers."""
    words = _code(command).split()
    script = REPO / words[1]
    assert script.is_file(), f"`{_code(command)}`: {words[1]} is not in the checkout"
    helped = subprocess.run([sys.executable, str(script), "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0, helped.stderr[-2000:]
    for option in (w.split("=")[0] for w in words[2:] if w.startswith("--")):
        assert option in helped.stdout, f"`{_code(command)}`: {words[1]} has no {option} ({helped.stdout[-1500:]})"
