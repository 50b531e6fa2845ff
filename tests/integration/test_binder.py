"""The Binder configuration in ``binder/``, checked as far as this machine allows without building an image.

Fast checks: the files repo2docker reads are well-formed (every requirement
pinned, ``postBuild`` and ``start`` executable shell scripts), the start
script chooses the remote backend when ``binder/service.env`` names a run
service and the static one otherwise (reading that file, never running it),
and ``repo2docker --no-build`` accepts the repository and wires them in. Slow
check: a fresh virtual environment built only from ``binder/requirements.txt``
plus ``postBuild`` produces learner notebooks without solutions, and runs the
first two lessons top to bottom.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Optional

import pytest

import kernels

ROOT = Path(__file__).resolve().parents[2]
BINDER = ROOT / "binder"
# What a learner's notebook needs; the package itself is installed by postBuild.
REQUIRED = {"jupyterlab", "ipywidgets", "nbgrader", "pydantic", "nbclient"}
NOT_ON_BINDER = {"docker"}  # no engine there: the static backend needs no Docker SDK
FIRST_LESSONS = ["00-start-here/start-here.ipynb", "01-why-sandbox/why-sandbox.ipynb"]
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][0-9A-Za-z.+!-]*)$")


def _requirements() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (BINDER / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = _PIN.match(line)
        assert m, f"binder/requirements.txt: {line!r} is not pinned as name==version"
        pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def test_requirements_pin_every_package_the_lessons_need() -> None:
    pins = _requirements()
    assert REQUIRED <= set(pins), f"missing from binder/requirements.txt: {sorted(REQUIRED - set(pins))}"


def test_requirements_carry_nothing_binder_cannot_use_and_match_the_tested_versions() -> None:
    pins = _requirements()
    assert not NOT_ON_BINDER & set(pins), f"binder/requirements.txt pins {sorted(NOT_ON_BINDER & set(pins))}: Binder has no Docker engine"
    tested: dict[str, str] = {}
    for line in (ROOT / "constraints" / "test.txt").read_text().splitlines():
        m = _PIN.match(line.split("#", 1)[0].strip())
        if m:
            tested[m.group(1).lower().replace("_", "-")] = m.group(2)
    differ = {name: (pin, tested[name]) for name, pin in pins.items() if name in tested and tested[name] != pin}
    assert not differ, f"binder/requirements.txt and constraints/test.txt disagree (binder, tested): {differ}"


def test_requirements_satisfy_the_package_dependencies() -> None:
    # A pin outside pyproject's range would make postBuild's --no-deps install a broken package.
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = _requirements()
    for spec in project["dependencies"] + project["optional-dependencies"]["lab"]:
        req = Requirement(spec)
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"{name} (a dependency of sandbox-lab) is not pinned in binder/requirements.txt"
        assert req.specifier.contains(pins[name]), f"{name}=={pins[name]} is outside sandbox-lab's {req.specifier}"


@pytest.mark.parametrize("name", ["postBuild", "start"])
def test_scripts_are_executable_shell_scripts(name: str) -> None:
    path = BINDER / name
    assert os.access(path, os.X_OK), f"binder/{name} is not executable (chmod +x binder/{name})"
    text = path.read_text()
    assert text.startswith("#!/usr/bin/env bash\n") or text.startswith("#!/bin/bash\n"), f"binder/{name} has no bash shebang"
    subprocess.run(["bash", "-n", str(path)], check=True)  # syntax only


def test_start_forces_the_static_backend_and_hands_over() -> None:
    out = subprocess.run([str(BINDER / "start"), "sh", "-c", 'printf %s "$SANDBOX_LAB_BACKEND"'],
                         capture_output=True, text=True, check=True, env={"PATH": os.environ["PATH"]})
    assert out.stdout == "static"


_SHOW = 'printf "%s|%s|%s|%s" "$SANDBOX_LAB_BACKEND" "${SANDBOX_LAB_SERVICE_URL-unset}" "${SANDBOX_LAB_TOKEN-unset}" "$JUPYTER_CONFIG_PATH"'


def _start_with(tmp_path: Path, service_env: Optional[str]) -> list[str]:
    """binder/start run from a copy of binder/ whose service.env is ``service_env`` (None: no file)."""
    copy = tmp_path / "binder"
    copy.mkdir()
    shutil.copy2(BINDER / "start", copy / "start")
    if service_env is not None:
        (copy / "service.env").write_text(service_env)
    out = subprocess.run([str(copy / "start"), "sh", "-c", _SHOW], capture_output=True, text=True, check=True,
                         env={"PATH": os.environ["PATH"]}, cwd=tmp_path)
    return out.stdout.split("|")


def test_the_committed_service_file_names_no_service_and_documents_both_variables() -> None:
    text = (BINDER / "service.env").read_text()
    assert "SANDBOX_LAB_SERVICE_URL=\n" in text and "SANDBOX_LAB_TOKEN=\n" in text
    for doc in (ROOT / "README.md", ROOT / "docs" / "operators.md", ROOT / "docs" / "service-api.md"):
        assert "binder/service.env" in doc.read_text(), f"{doc.name} does not say where Binder's run service is set"


def test_start_picks_up_the_service_an_operator_names(tmp_path: Path) -> None:
    env = "# the class's service\r\nSANDBOX_LAB_SERVICE_URL=https://runs.example.org\r\nSANDBOX_LAB_TOKEN=tok-123\r\n"
    backend, url, token, config = _start_with(tmp_path, env)
    assert (backend, url, token) == ("remote", "https://runs.example.org", "tok-123")
    assert config == f"{tmp_path / 'binder' / 'learner-lab'}"


@pytest.mark.parametrize("env", [None, "", "SANDBOX_LAB_SERVICE_URL=\nSANDBOX_LAB_TOKEN=tok\n",
                                 "# SANDBOX_LAB_SERVICE_URL=https://runs.example.org\n",
                                 "SANDBOX_LAB_BACKEND=docker\n"])
def test_start_without_a_service_stays_static(tmp_path: Path, env: Optional[str]) -> None:
    backend, url, token, _ = _start_with(tmp_path, env)
    assert (backend, url, token) == ("static", "unset", "unset")


def test_the_service_file_is_read_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    backend, url, _, _ = _start_with(tmp_path, f"SANDBOX_LAB_SERVICE_URL=$(touch {marker})\n`touch {marker}`\n")
    assert not marker.exists()
    assert (backend, url) == ("remote", f"$(touch {marker})")  # taken as written: the backend then refuses it


def test_runtime_names_a_python_the_package_supports() -> None:
    m = re.fullmatch(r"python-3\.(\d+)\s*", (BINDER / "runtime.txt").read_text())
    assert m and int(m.group(1)) >= 10, "binder/runtime.txt must say python-3.N with N >= 10 (requires-python)"


@pytest.mark.skipif(importlib.util.find_spec("repo2docker") is None,
                    reason="jupyter-repo2docker is not installed: pip install jupyter-repo2docker")
def test_repo2docker_accepts_the_repository() -> None:
    # --no-build: repo2docker only detects the configuration and writes its Dockerfile; no engine is used.
    out = subprocess.run([sys.executable, "-m", "repo2docker", "--no-build", "--no-run", "--debug", str(ROOT)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    dockerfile = out.stdout + out.stderr
    assert 'pip install --no-cache-dir -r "binder/requirements.txt"' in dockerfile
    assert "./binder/postBuild" in dockerfile
    assert 'R2D_ENTRYPOINT="${REPO_DIR}/binder/start"' in dockerfile
    runtime = (BINDER / "runtime.txt").read_text().strip().removeprefix("python-")
    assert f"python={runtime}" in dockerfile


def _copy_repo(dest: Path) -> None:
    """The files a Binder build sees: the repository without local state (venvs, builds, caches)."""
    ignore = shutil.ignore_patterns(".git", ".venv", "build", "dist", "release", "artifacts", "*.egg-info",
                                    "__pycache__", ".pytest_cache", ".mypy_cache", ".hypothesis", ".benchmarks",
                                    "gradebook.db", "autograded", "submitted", "feedback")
    shutil.copytree(ROOT, dest, ignore=ignore)


@pytest.mark.slow
@pytest.mark.notebook
def test_fresh_binder_environment_runs_the_first_lessons(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _copy_repo(repo)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    bindir = venv / "bin"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "JUPYTER", "SANDBOX_LAB"))}
    env.update(PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(venv), HOME=str(tmp_path / "home"),
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    (tmp_path / "home").mkdir()
    # ipykernel comes with jupyterlab: nothing but binder/requirements.txt is installed before postBuild.
    subprocess.run([bindir / "python", "-m", "pip", "install", "-q", "-r", str(repo / "binder" / "requirements.txt")],
                   check=True, env=env, cwd=repo, timeout=900)
    subprocess.run([str(repo / "binder" / "postBuild")], check=True, env=env, cwd=repo, timeout=600)

    lessons = sorted(str(p.relative_to(repo)) for p in (repo / "lessons").glob("*/*.ipynb"))
    assert lessons, "postBuild left no lessons"
    for nb in lessons:
        text = (repo / nb).read_text()
        assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text, f"{nb} still holds a solution"
    assert not (repo / "solutions").exists(), "the learner image must not carry the reference solutions"

    # Run inside the venv, through binder/start, as Binder would: only there is the environment "Binder's".
    runner = textwrap.dedent("""
        import sys
        from pathlib import Path
        import nbformat
        from nbclient import NotebookClient
        for path in sys.argv[1:]:
            nb = nbformat.read(path, as_version=4)
            NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(Path(path).parent)}},
                           config=KERNEL_CONFIG).execute()
            errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.get("output_type") == "error"]
            assert not errors, f"{path}: {errors[0].get('ename')}: {errors[0].get('evalue')}"
            text = "".join(str(o) for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
            assert "Backend: static" in text, f"{path} does not say it runs on the static backend"
            print(path, "ran")
    """)
    with kernels.client_config() as config:  # the kernels over ipc: no TCP port to lose to another kernel
        out = subprocess.run([str(repo / "binder" / "start"), str(bindir / "python"), "-c", runner.replace("KERNEL_CONFIG", config),
                              *(str(repo / "lessons" / rel) for rel in FIRST_LESSONS)],
                             capture_output=True, text=True, env=env, cwd=repo, timeout=900)
    assert out.returncode == 0, (out.stdout + out.stderr)[-5000:]
    assert out.stdout.count(" ran\n") == len(FIRST_LESSONS), out.stdout
