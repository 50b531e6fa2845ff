"""The console script's first step (grader/cli/launch.py): a command the warm engine serves is handed before the
command line's modules are imported."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from grader.cli import client
from grader.plumbing.terminal import EXIT_INTERRUPTED
from test_client import _fake_engine


@pytest.fixture()
def runs() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="sl-la-", dir="/tmp"))  # short: a Unix socket's path has 108 bytes
    yield root
    shutil.rmtree(root, ignore_errors=True)


def _imports(stderr: str) -> set[str]:
    return {line.rsplit("|", 1)[-1].strip() for line in stderr.splitlines() if line.startswith("import time:")}


def test_a_command_the_engine_serves_is_handed_before_the_command_line_is_imported(runs: Path) -> None:
    """``python -m grader probe`` with an engine up: the engine's exit code and output, and none of the parser,
    the backends or the terminal's helpers imported. The gamed version imports ``cli.main`` first and hands
    from there: the same exit code, 20 ms more of every handed command."""
    env = {**os.environ, client.ENGINE_ENV: "on", "SANDBOX_LAB_RUNS": str(runs)}
    path = client.socket_path(env)
    assert path is not None
    seen: list[dict[str, object]] = []
    t = _fake_engine(path, [{"out": "the engine's report\n"}, {"exit": 1}], seen)
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "grader", "probe", "p.json"], env=env,
                          capture_output=True, text=True, timeout=60)
    t.join(5)
    assert (done.returncode, done.stdout) == (1, "the engine's report\n"), done.stderr[-2000:]
    assert seen and seen[0]["argv"] == ["probe", "p.json"]
    imported = _imports(done.stderr)
    assert "grader.cli.client" in imported
    assert not {"grader.cli.main", "grader.backends", "grader.plumbing.terminal", "argparse", "typing"} & imported


def test_a_command_with_no_engine_runs_here_through_the_whole_command_line(runs: Path, tmp_path: Path) -> None:
    policy = tmp_path / "p.json"
    policy.write_text('{"filesystem": {"denyRead": ["~"]}}')
    env = {**os.environ, client.ENGINE_ENV: "on", "SANDBOX_LAB_RUNS": str(runs)}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "grader", "check", str(policy)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "valid" in done.stdout.lower(), done.stderr[-2000:]
    assert "grader.cli.main" in _imports(done.stderr)


def test_the_console_script_enters_here() -> None:
    text = (Path(__file__).resolve().parents[3] / "pyproject.toml").read_text()
    assert 'sandbox-lab = "grader.cli.launch:entry"' in text


def test_an_interrupted_wait_exits_with_the_terminals_code() -> None:
    assert client.INTERRUPTED == EXIT_INTERRUPTED
