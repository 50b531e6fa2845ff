"""The environment the project sets up for itself: make's PATH, the lab's settings, and the host check.

- Every ``make`` recipe runs with ``.venv/bin`` first on ``PATH`` and
  ``VIRTUAL_ENV`` set, so the tools called by name (nbgrader's ``alembic``)
  are the project's, even from a shell that never activated the virtualenv.
- The project's JupyterLab reads a settings override that turns off the
  "official Jupyter news" pop-up and the update check; ``binder/postBuild``
  installs the same file.
- The session-wide host check (``hostcheck.py``) notices a watched path that
  appeared, names it, and ignores what was already there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import hostcheck

REPO = Path(__file__).resolve().parents[1]
VENV = REPO / ".venv"
LAB_SETTINGS = REPO / "binder" / "lab-settings.json"
NOTIFICATION = "@jupyterlab/apputils-extension:notification"


def _make_env() -> dict[str, str]:
    """A shell that never activated the virtualenv: no VIRTUAL_ENV, no venv on PATH."""
    venv_bins = {os.path.realpath(p) for p in (VENV / "bin", os.path.dirname(sys.executable))}
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and os.path.realpath(p) not in venv_bins]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    env["PATH"] = os.pathsep.join(path)
    return env


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed (apt-get install make)")
def test_every_make_recipe_runs_with_the_virtualenv_first_on_path() -> None:
    rule = 'print-env: ; @printf "%s\\n%s\\n%s\\n" "$$PATH" "$$VIRTUAL_ENV" "$$(command -v alembic || echo none)"'
    out = subprocess.run(["make", "-s", "--no-print-directory", "-C", str(REPO), "--eval", rule, "print-env"],
                         env=_make_env(), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    path, virtual_env, alembic = out.stdout.splitlines()
    assert path.split(os.pathsep)[0] == str(VENV / "bin"), path
    assert virtual_env == str(VENV)
    if (VENV / "bin" / "alembic").exists():
        assert alembic == str(VENV / "bin" / "alembic"), "nbgrader's alembic must be the project's"


def test_lab_settings_turn_off_news_and_update_checks() -> None:
    settings = json.loads(LAB_SETTINGS.read_text())
    assert settings == {NOTIFICATION: {"fetchNews": "false", "checkForUpdates": False}}
    # The values are valid for the installed JupyterLab's own schema of that plugin.
    jsonschema = pytest.importorskip("jsonschema")
    from jupyterlab.commands import get_app_dir

    schema_file = Path(get_app_dir()) / "schemas" / "@jupyterlab" / "apputils-extension" / "notification.json"
    if not schema_file.is_file():
        pytest.skip(f"this Python has no JupyterLab schemas at {schema_file}")
    jsonschema.validate(settings[NOTIFICATION], json.loads(schema_file.read_text()))


@pytest.mark.skipif(Path(sys.prefix).resolve() != VENV.resolve(), reason="only the project's .venv is set up by `make venv`")
def test_the_project_lab_reads_the_settings_override() -> None:
    from jupyterlab.commands import get_app_dir
    from jupyterlab_server.settings_utils import _get_overrides

    overrides, error = _get_overrides(os.path.join(get_app_dir(), "settings"))
    assert not error, error
    assert overrides.get(NOTIFICATION) == json.loads(LAB_SETTINGS.read_text())[NOTIFICATION], (
        "the lab of .venv still asks to fetch Jupyter news: run `make venv` (it installs binder/lab-settings.json)")


def test_postbuild_installs_the_same_settings() -> None:
    text = (REPO / "binder" / "postBuild").read_text()
    assert "binder/lab-settings.json" in text and "overrides.d/" in text


def _machine(root: Path) -> None:
    for d in ("bin", "etc", "home/cloudsdk", "tmp"):
        (root / d).mkdir(parents=True)


def test_host_check_names_every_watched_path_that_appeared(tmp_path: Path) -> None:
    _machine(tmp_path)
    before = hostcheck.snapshot(tmp_path)
    assert before == {"/bin", "/etc", "/home", "/tmp", "/home/cloudsdk"}
    (tmp_path / "home" / "user").mkdir()          # a world root, and a new entry of /home
    (tmp_path / "project").mkdir()                # a world root, and a new entry of /
    (tmp_path / "etc" / "secrets").mkdir()        # a world root deeper down
    (tmp_path / "app" / "workspace").mkdir(parents=True)
    (tmp_path / "stray.txt").write_text("x")      # anything new at the top of /
    (tmp_path / "tmp" / "pytest-of-root").mkdir()  # temporary directories are not watched
    (tmp_path / "etc" / "hosts").write_text("x")   # nor the inside of existing system directories
    new = hostcheck.appeared(before, hostcheck.snapshot(tmp_path))
    assert new == ["/app", "/app/workspace", "/etc/secrets", "/home/user", "/project", "/stray.txt"]
    message = hostcheck.message(new)
    assert all(p in message for p in new)


def test_host_check_accepts_what_was_there_before(tmp_path: Path) -> None:
    _machine(tmp_path)
    (tmp_path / "home" / "user").mkdir()
    (tmp_path / "project").mkdir()
    before = hostcheck.snapshot(tmp_path)
    (tmp_path / "home" / "user" / ".bashrc").write_text("x")  # inside a root that existed: a test's own canary
    assert hostcheck.appeared(before, hostcheck.snapshot(tmp_path)) == []
    (tmp_path / "project").rmdir()  # a path that went away is not a leftover
    assert hostcheck.appeared(before, hostcheck.snapshot(tmp_path)) == []
