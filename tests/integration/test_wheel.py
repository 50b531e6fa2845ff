"""The package outside the repository: a wheel, installed into a fresh venv, run from a temporary directory.

Nothing in it may reach into a checkout (``solutions/``, ``tools/srt``,
``scripts/``): what it needs is packaged, and what it cannot have (srt, a
Docker engine) fails with a message that says what to install.

The install is the static-only one a learner without Docker gets: the wheel
with its ``lab`` extra and without the ``docker`` extra, installed for real by
pip (dependencies from the index, at the versions of constraints/test.txt). The
Docker SDK must be absent there, and ``check``, ``probe``/``grade --backend
static`` and a lesson notebook must work all the same.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import kernels
from grader.protocol.common import install_hint

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
POLICY = {"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}}
SOLVED_TASK = "scope-secure-sandbox"
LESSON = REPO / "lessons" / "01-why-sandbox"  # runs probes and shows the board: the backend is visible in it


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(root / "dist"), str(REPO)],
                   check=True, capture_output=True, timeout=600)
    wheels = list((root / "dist").glob("sandbox_lab-*.whl"))
    assert len(wheels) == 1
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True, timeout=300)
    # The lab extra (the lessons), not the docker extra; pinned like CI's own environment.
    pip = subprocess.run([str(root / "venv" / "bin" / "pip"), "install", "-q", "-c", str(REPO / "constraints" / "test.txt"),
                          f"{wheels[0]}[lab]"], capture_output=True, text=True, timeout=900)
    assert pip.returncode == 0, pip.stderr[-3000:]
    return root


def _python(installed: Path, cwd: Path, code: str) -> subprocess.CompletedProcess[str]:
    clean = {"PATH": f"{installed / 'venv' / 'bin'}:/usr/bin:/bin", "HOME": str(cwd)}
    return subprocess.run([str(installed / "venv" / "bin" / "python"), "-c", code], cwd=cwd, env=clean,
                          capture_output=True, text=True, timeout=900)


def _cli(installed: Path, cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {"PATH": f"{installed / 'venv' / 'bin'}:/usr/bin:/bin", "HOME": str(cwd), **(env or {})}
    return subprocess.run([str(installed / "venv" / "bin" / "sandbox-lab"), *args], cwd=cwd, env=clean,
                          capture_output=True, text=True, timeout=300)


def test_the_wheel_carries_no_solutions_and_no_checkout_paths(installed: Path) -> None:
    import zipfile

    names = zipfile.ZipFile(next((installed / "dist").glob("*.whl"))).namelist()
    assert not [n for n in names if n.startswith(("solutions/", "tools/", "scripts/", "tests/", "lessons/"))]
    assert "grader/world.json" in names and "grader/services/probe_runner.py" in names and "grader/services/runner_http.py" in names


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


def test_the_static_install_has_no_docker_sdk(installed: Path, tmp_path: Path) -> None:
    probe = _python(installed, tmp_path, "import importlib.util, grader, grader.backends; print(importlib.util.find_spec('docker'))")
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip() == "None", "the docker SDK must come only with the docker extra"
    imported = _python(installed, tmp_path, "import docker")
    assert imported.returncode != 0 and "No module named 'docker'" in imported.stderr


def test_a_solution_scores_full_marks_with_the_static_backend(installed: Path, tmp_path: Path) -> None:
    from reference import solution_path

    (tmp_path / "solution.json").write_text(solution_path(SOLVED_TASK).read_text())
    graded = _cli(installed, tmp_path, "grade", "--task", SOLVED_TASK, "solution.json", "--backend", "static", "--json")
    assert graded.returncode == 0, graded.stdout + graded.stderr
    result = json.loads(graded.stdout)
    assert result["score"] == result["max_score"] > 0, result


@pytest.mark.notebook
def test_a_lesson_runs_without_the_docker_sdk(installed: Path, tmp_path: Path) -> None:
    # No SANDBOX_LAB_BACKEND: the lesson's own choice (auto) must find no SDK and say it predicts.
    shutil.copytree(LESSON, tmp_path / LESSON.name, ignore=shutil.ignore_patterns("*.md", ".ipynb_checkpoints"))
    nb_path = tmp_path / LESSON.name / f"{LESSON.name.split('-', 1)[1]}.ipynb"
    with kernels.client_config() as config:  # the kernel over ipc: no TCP port to lose to another kernel
        runner = textwrap.dedent(f"""
            import json, nbformat
            from nbclient import NotebookClient
            nb = nbformat.read({str(nb_path)!r}, as_version=4)
            NotebookClient(nb, timeout=600, kernel_name="python3", resources={{"metadata": {{"path": {str(nb_path.parent)!r}}}}},
                           config={config}).execute()
            errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
            assert not errors, f"{{errors[0]['ename']}}: {{errors[0]['evalue']}}"
            texts = [str(v) for c in nb.cells for o in c.get("outputs", []) for v in [o.get("text", ""), *o.get("data", {{}}).values()]]
            print(json.dumps(chr(10).join(texts)))
        """)
        run = _python(installed, tmp_path, runner)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    text = json.loads(run.stdout.strip().splitlines()[-1])
    assert "Backend: static" in text and install_hint("docker") in text


def test_what_a_wheel_cannot_have_is_named_with_its_install_command(installed: Path, tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text(json.dumps(POLICY))
    srt = _cli(installed, tmp_path, "probe", "p.json", "--backend", "srt", env={"SANDBOX_LAB_SRT_DIR": str(tmp_path / "none")})
    assert srt.returncode == 3, srt.stdout + srt.stderr
    assert "npm install" in srt.stderr and "Traceback" not in srt.stderr
    for command in (["probe", "p.json", "--backend", "docker"], ["setup"], ["cleanup"]):
        docker = _cli(installed, tmp_path, *command)
        assert docker.returncode == 3, docker.stdout + docker.stderr
        assert install_hint("docker") in docker.stderr and "scripts/" not in docker.stderr
        assert "Traceback" not in docker.stderr
