"""The package outside the repository: a wheel, installed into a fresh venv, run from a temporary directory.

Nothing in it may reach into a checkout (``solutions/``, ``tools/srt``,
``scripts/``): what it needs is packaged, and what it cannot have (srt, a
Docker engine) fails with a message that says what to install.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
POLICY = {"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(root / "dist"), str(REPO)],
                   check=True, capture_output=True, timeout=600)
    wheels = list((root / "dist").glob("sandbox_lab-*.whl"))
    assert len(wheels) == 1
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True, timeout=300)
    subprocess.run([str(root / "venv" / "bin" / "pip"), "install", "-q", str(wheels[0])], check=True, capture_output=True, timeout=600)
    return root


def _cli(installed: Path, cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {"PATH": f"{installed / 'venv' / 'bin'}:/usr/bin:/bin", "HOME": str(cwd), **(env or {})}
    return subprocess.run([str(installed / "venv" / "bin" / "sandbox-lab"), *args], cwd=cwd, env=clean,
                          capture_output=True, text=True, timeout=300)


def test_the_wheel_carries_no_solutions_and_no_checkout_paths(installed: Path) -> None:
    import zipfile

    names = zipfile.ZipFile(next((installed / "dist").glob("*.whl"))).namelist()
    assert not [n for n in names if n.startswith(("solutions/", "tools/", "scripts/", "tests/", "lessons/"))]
    assert "grader/world.json" in names and "grader/services/probe_runner.py" in names


def test_check_probe_grade_and_tasks_work_from_anywhere(installed: Path, tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text(json.dumps(POLICY))
    check = _cli(installed, tmp_path, "check", "p.json")
    assert check.returncode == 0, check.stderr
    probe = _cli(installed, tmp_path, "probe", "p.json", "--backend", "static", "--json")
    assert probe.returncode == 0, probe.stderr
    assert json.loads(probe.stdout)["backend"] == "static"
    tasks = _cli(installed, tmp_path, "tasks", "--json")
    assert tasks.returncode == 0 and "scope-secure-sandbox" in tasks.stdout
    graded = _cli(installed, tmp_path, "grade", "--task", "scope-secure-sandbox", "p.json", "--backend", "static", "--json")
    assert graded.returncode in (0, 1), graded.stderr
    assert json.loads(graded.stdout)["task"] == "scope-secure-sandbox"


def test_what_a_wheel_cannot_have_is_named_with_its_install_command(installed: Path, tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text(json.dumps(POLICY))
    srt = _cli(installed, tmp_path, "probe", "p.json", "--backend", "srt", env={"SANDBOX_LAB_SRT_DIR": str(tmp_path / "none")})
    assert srt.returncode == 3, srt.stdout + srt.stderr
    assert "npm install" in srt.stderr and "Traceback" not in srt.stderr
    docker = _cli(installed, tmp_path, "probe", "p.json", "--backend", "docker", env={"DOCKER_HOST": f"unix://{tmp_path}/no.sock"})
    assert docker.returncode == 3, docker.stdout + docker.stderr
    assert "Install and start Docker" in docker.stderr and "scripts/" not in docker.stderr
    assert "Traceback" not in docker.stderr
