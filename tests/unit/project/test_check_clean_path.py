"""scripts/check-clean-path: CI stops when `python3` on its PATH is not the distribution's.

`make` makes .venv with the first python3 on PATH; a user's machine has its distribution's. A pyenv
Python first on CI's PATH once hid a lock that Debian 12's python3 cannot install (issue 37). Each
case puts a stand-in python3 (a file no package owns) first on a stock PATH and runs the script
with nothing else from this environment.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CHECK = ROOT / "scripts" / "check-clean-path"
STOCK_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def run(tmp_path: Path, path: str, **env: str) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    return subprocess.run(
        ["/bin/bash", str(CHECK)], env={"PATH": path, "HOME": str(home), **env},
        capture_output=True, text=True, timeout=60,
    )


def stand_in(directory: Path) -> Path:
    """A python3 in `directory` that no package of the distribution owns."""
    directory.mkdir(parents=True)
    python = directory / "python3"
    python.write_text("#!/bin/sh\nexit 0\n")
    python.chmod(0o755)
    return python


def _distribution_python() -> bool:
    python = shutil.which("python3", path=STOCK_PATH)
    if python is None or shutil.which("dpkg") is None:
        return False
    return subprocess.run(["dpkg", "-S", python], capture_output=True).returncode == 0


def test_a_pyenv_shim_is_refused_with_where_it_came_from(tmp_path: Path) -> None:
    shims = tmp_path / ".pyenv" / "shims"
    stand_in(shims)
    result = run(tmp_path, f"{shims}:{STOCK_PATH}")
    assert result.returncode == 1
    assert f"`python3` resolves to {shims}/python3" in result.stderr
    assert f"It is pyenv's ({shims}/python3): take pyenv's {shims} off PATH" in result.stderr


def test_a_virtualenv_is_refused(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    stand_in(venv / "bin")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    result = run(tmp_path, f"{venv / 'bin'}:{STOCK_PATH}")
    assert result.returncode == 1
    assert f"It is a virtualenv's ({venv}): take {venv / 'bin'} off PATH" in result.stderr


def test_a_python_no_package_owns_is_refused(tmp_path: Path) -> None:
    local = tmp_path / "local" / "bin"
    stand_in(local)
    result = run(tmp_path, f"{local}:{STOCK_PATH}")
    assert result.returncode == 1
    assert f"No package of the distribution owns it ({local}/python3;" in result.stderr


@pytest.mark.skipif(not _distribution_python(), reason="needs a python3 on the stock PATH that dpkg says a package owns")
def test_the_distributions_python_passes(tmp_path: Path) -> None:
    result = run(tmp_path, STOCK_PATH)
    assert "python3" not in result.stderr
