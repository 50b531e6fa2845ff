"""scripts/check-size: a commit that adds a large file, or anything under node_modules/ or .venv/, fails.

Every case runs the script in a throw-away git repository of its own (never
this one), with git's global and system configuration switched off; so do the
cases of scripts/install-hooks, which sets core.hooksPath only where no hooks
are set up yet.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CHECK = ROOT / "scripts" / "check-size"
INSTALL = ROOT / "scripts" / "install-hooks"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    return {**os.environ, "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


@pytest.fixture
def repo(tmp_path: Path, env: dict[str, str]) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    git(path, env, "init", "-q", "-b", "main")
    commit(path, env, {"README.md": "hello\n"}, "first")
    return path


def git(repo: Path, env: dict[str, str], *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def commit(repo: Path, env: dict[str, str], files: dict[str, str | bytes], message: str) -> None:
    for name, content in files.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    git(repo, env, "add", "-A")
    git(repo, env, "commit", "-q", "--no-verify", "-m", message)


def check(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(CHECK), *args], cwd=repo, env=env, capture_output=True, text=True)


def test_a_normal_commit_passes(repo: Path, env: dict[str, str]) -> None:
    commit(repo, env, {"grader/x.py": "x = 1\n" * 1000, "data.json": "{}"}, "normal")
    done = check(repo, env)
    assert done.returncode == 0, done.stderr
    assert "HEAD^!" in done.stdout and "2 file(s)" in done.stdout  # the last commit, without origin/main


def test_a_commit_adding_a_megabyte_fails(repo: Path, env: dict[str, str]) -> None:
    commit(repo, env, {"blob.bin": os.urandom(1024 * 1024)}, "a large file")
    done = check(repo, env)
    assert done.returncode == 1
    assert "blob.bin: 1024 KiB, over the 512 KiB limit" in done.stderr and "a large file" in done.stderr
    assert "git rm --cached" in done.stderr  # the way out
    assert check(repo, env, "--limit", str(2 * 1024 * 1024)).returncode == 0


@pytest.mark.parametrize("folder", ["tools/srt/node_modules", "node_modules", ".venv"])
def test_anything_under_node_modules_or_venv_fails(repo: Path, env: dict[str, str], folder: str) -> None:
    commit(repo, env, {f"{folder}/pkg/index.js": "1", f"{folder}/pkg/lib.js": "2"}, "vendored")
    done = check(repo, env)
    assert done.returncode == 1
    assert f"{folder}/: 2 file(s)" in done.stderr  # one line per directory, not per file


def test_the_default_range_is_what_origin_main_lacks(repo: Path, env: dict[str, str]) -> None:
    commit(repo, env, {"big.bin": b"\0" * (600 * 1024)}, "large, then removed")
    git(repo, env, "rm", "-q", "big.bin")
    git(repo, env, "commit", "-q", "-m", "removed")
    assert check(repo, env).returncode == 0  # the last commit alone adds nothing
    git(repo, env, "update-ref", "refs/remotes/origin/main", "HEAD~2")
    done = check(repo, env)
    assert done.returncode == 1 and "origin/main..HEAD" in done.stderr and "big.bin" in done.stderr  # removal does not undo it
    git(repo, env, "update-ref", "refs/remotes/origin/main", "HEAD")
    assert check(repo, env).returncode == 0  # nothing new


def test_a_merge_is_judged_by_what_it_brings_in(repo: Path, env: dict[str, str]) -> None:
    git(repo, env, "checkout", "-q", "-b", "side")
    commit(repo, env, {"big.bin": os.urandom(700 * 1024)}, "on a side branch")
    git(repo, env, "checkout", "-q", "main")
    commit(repo, env, {"other.txt": "x"}, "on main")
    git(repo, env, "merge", "-q", "--no-edit", "--no-verify", "side")
    done = check(repo, env)
    assert done.returncode == 1 and "big.bin" in done.stderr


def test_staged_checks_what_the_next_commit_adds(repo: Path, env: dict[str, str]) -> None:
    (repo / "ok.txt").write_text("fine")
    git(repo, env, "add", "ok.txt")
    assert check(repo, env, "--staged", "--quiet").stdout == ""
    (repo / "big.bin").write_bytes(os.urandom(600 * 1024))
    git(repo, env, "add", "big.bin")
    done = check(repo, env, "--staged")
    assert done.returncode == 1 and "big.bin: 600 KiB" in done.stderr


def test_the_hook_blocks_the_commit(repo: Path, env: dict[str, str]) -> None:
    """hooks/pre-commit, as `make venv` installs it, stops a commit carrying a large file."""
    (repo / "hooks").mkdir()
    (repo / "scripts").mkdir()
    for rel in ("hooks/pre-commit", "scripts/check-size"):
        (repo / rel).write_bytes((ROOT / rel).read_bytes())
        (repo / rel).chmod(0o755)
    commit(repo, env, {}, "the hook and its script")
    git(repo, env, "config", "core.hooksPath", "hooks")
    (repo / "big.bin").write_bytes(os.urandom(600 * 1024))
    git(repo, env, "add", "big.bin")
    done = subprocess.run(["git", "commit", "-q", "-m", "large"], cwd=repo, env=env, capture_output=True, text=True)
    assert done.returncode != 0 and "big.bin" in done.stderr
    git(repo, env, "rm", "-q", "--cached", "big.bin")
    (repo / "small.txt").write_text("ok")
    git(repo, env, "add", "small.txt")
    git(repo, env, "commit", "-q", "-m", "small")  # passes the hook


def _install(repo: Path, env: dict[str, str]) -> str:
    (repo / "scripts").mkdir(exist_ok=True)
    (repo / "scripts" / "install-hooks").write_bytes(INSTALL.read_bytes())
    (repo / "scripts" / "install-hooks").chmod(0o755)
    subprocess.run([str(repo / "scripts" / "install-hooks")], cwd=repo, env=env, check=True, capture_output=True)
    return subprocess.run(["git", "config", "--get", "core.hooksPath"], cwd=repo, env=env,
                          capture_output=True, text=True).stdout.strip()


def test_install_hooks_sets_the_path_where_none_is_set(repo: Path, env: dict[str, str]) -> None:
    assert _install(repo, env) == "hooks"
    assert _install(repo, env) == "hooks"  # again: nothing changes


def test_install_hooks_leaves_the_users_own_alone(repo: Path, env: dict[str, str], tmp_path: Path) -> None:
    git(repo, env, "config", "core.hooksPath", "/somewhere/else")
    assert _install(repo, env) == "/somewhere/else"
    git(repo, env, "config", "--unset", "core.hooksPath")
    own = Path(git(repo, env, "rev-parse", "--git-path", "hooks").strip())
    if not own.is_absolute():
        own = repo / own
    own.mkdir(parents=True, exist_ok=True)
    (own / "pre-push").write_text("#!/bin/sh\nexit 0\n")  # a hook of the user's own: core.hooksPath would switch it off
    assert _install(repo, env) == ""
