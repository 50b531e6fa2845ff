"""Choosing a backend: names, the environment variable, and the fallback when Docker is missing."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from grader import backends, load_policy
from grader.backends import Backend, StaticBackend
from grader.core.errors import DockerUnavailable
from grader.core.plan import build_plan
from grader.protocol.common import install_hint


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(backends.BACKEND_ENV, raising=False)


def _import_failing(monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    real = importlib.import_module

    def fake(name: str, package: Any = None) -> ModuleType:
        if name == "grader.backends.docker.backend":
            raise ModuleNotFoundError(f"No module named {missing!r}", name=missing)
        return real(name, package)

    monkeypatch.setattr(backends.importlib, "import_module", fake)


def test_static_is_always_there() -> None:
    b = backends.get("static")
    assert isinstance(b, StaticBackend) and isinstance(b, Backend)
    assert b.name == "static"
    result = b.run(build_plan(load_policy({})))
    assert result.backend == "static" and result.notes == ()


def test_missing_docker_sdk_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    _import_failing(monkeypatch, "docker")
    with pytest.raises(DockerUnavailable) as info:
        backends.get("docker")
    assert install_hint("docker") in str(info.value)
    assert install_hint("docker") == "install the docker extra: pip install '.[docker]' in a Sandbox Lab checkout"


def test_every_install_command_the_package_prints_is_install_hints_own() -> None:
    """No package named sandbox-lab is published, so no message may tell anyone to ``pip install sandbox-lab``:
    the one wording (a checkout's extra) lives in ``install_hint`` and every message calls it."""
    package = Path(backends.__file__).resolve().parents[1]
    spelled = [f"{p.relative_to(package)}:{n}" for p in sorted(package.rglob("*.py")) if p.name != "common.py"
               for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
               if "pip install" in line and "sandbox-lab" in line]
    assert spelled == [], f"an install command spelt outside install_hint: {spelled}"


@pytest.mark.parametrize("module, library", [("http1", "h11"), ("nameserver", "dnslib")])
def test_a_service_without_its_library_names_the_docker_extra(monkeypatch: pytest.MonkeyPatch, module: str, library: str) -> None:
    import sys

    monkeypatch.setitem(sys.modules, library, None)  # import now raises ImportError
    monkeypatch.delitem(sys.modules, f"grader.services.{module}", raising=False)
    with pytest.raises(ImportError) as info:
        importlib.import_module(f"grader.services.{module}")
    assert install_hint("docker") in str(info.value)


def test_missing_backend_module_is_docker_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    _import_failing(monkeypatch, "grader.backends.docker.backend")
    with pytest.raises(DockerUnavailable):
        backends.get("docker")


def test_auto_falls_back_to_static_with_a_notice(monkeypatch: pytest.MonkeyPatch) -> None:
    _import_failing(monkeypatch, "docker")
    b = backends.get("auto")
    assert isinstance(b, StaticBackend)
    result = b.run(build_plan(None))
    assert len(result.notes) == 1
    note = result.notes[0]
    assert note.startswith("predicted, not run: no Docker engine answers (")
    assert install_hint("docker") in note


def test_auto_uses_docker_when_it_works(monkeypatch: pytest.MonkeyPatch) -> None:
    sentinel = StaticBackend(name="docker")
    monkeypatch.setattr(backends, "_docker", lambda progress, shared=False, runtime=None: sentinel)
    assert backends.get("auto") is sentinel
    assert backends.default() is sentinel


def test_a_kernels_default_backend_adopts_the_machines_hub_and_a_named_one_keeps_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """``default()`` (the notebooks' widgets, ``run_probes``) shares the machine's hub, as a terminal's commands and
    its warm engine do: one internet and one pool of proxies per machine. ``get`` (a batch, a library) asks for
    sharing only when told."""
    asked: list[bool] = []
    monkeypatch.setattr(backends, "_docker", lambda progress, shared=False, runtime=None: asked.append(shared) or StaticBackend())
    backends.default()
    backends.default(prefer="docker")
    backends.default(shared=False)
    backends.get("docker")
    assert asked == [True, True, False, False]


def test_progress_reaches_the_docker_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(backends, "_docker",
                        lambda progress, shared=False, runtime=None: seen.append((progress, runtime)) or StaticBackend())
    lines: list[str] = []
    backends.get("docker", progress=lines.append)
    backends.get("docker", runtime="runsc")  # the run service's choice for a tenant's code reaches the backend
    backends.get("auto", runtime="runsc")  # and is never dropped on the way when auto finds an engine
    assert seen == [(lines.append, None), (None, "runsc"), (None, "runsc")]


def test_environment_variable_overrides_the_default_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "_docker", lambda progress, shared=False, runtime=None: pytest.fail("docker must not be tried"))
    monkeypatch.setenv(backends.BACKEND_ENV, "static")
    assert isinstance(backends.default(), StaticBackend)
    assert isinstance(backends.default(prefer="docker"), StaticBackend)


def test_default_prefers_what_the_caller_says(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backends, "_docker", lambda progress, shared=False, runtime=None: pytest.fail("docker must not be tried"))
    assert isinstance(backends.default(prefer="static"), StaticBackend)


def test_unknown_name() -> None:
    with pytest.raises(ValueError) as info:
        backends.get("podman")
    assert "static, docker, auto" in str(info.value)


def test_reason_is_extracted_from_the_message() -> None:
    assert backends._reason(DockerUnavailable("socket refused")) == "socket refused"
    assert backends._reason(DockerUnavailable()) == "No Docker engine answers"


def test_cleanup_ends_only_the_listed_processes_that_name_the_run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A killed srt run leaves host processes; cleanup ends those listed in <run>/pids that name its directory."""
    import json
    import subprocess
    import sys
    from types import SimpleNamespace

    from grader.backends.docker.backend import cleanup
    from grader.backends.docker.engine import DockerEngine

    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(tmp_path))
    run = tmp_path / "srt-0123456789"
    run.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (run / "owner.json").write_text(json.dumps({"pid": dead.pid, "run": run.name}))
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    ours = subprocess.Popen([*sleep, str(run / "internet" / "internet.json")], start_new_session=True)
    other = subprocess.Popen([*sleep, str(tmp_path / "srt-0123456789x")])  # a neighbour's path: spared
    (run / "pids").write_text(f"{ours.pid}\n{other.pid}\n999999999\n1\n")
    api = SimpleNamespace(containers=lambda **k: [], networks=lambda **k: [])
    try:
        removed = cleanup(DockerEngine(SimpleNamespace(api=api)))
        assert ours.wait(timeout=5) == -9
        assert other.poll() is None
        assert f"process {ours.pid}" in removed and f"directory {run}" in removed
        assert not run.exists()
    finally:
        other.kill()
        other.wait()
        if ours.poll() is None:
            ours.kill()
            ours.wait()
