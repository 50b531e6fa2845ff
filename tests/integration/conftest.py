"""Fixtures for tests that run real containers (one Docker backend per session, images built once) and the real srt."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Callable

import pytest

SRT_UID = 1000  # srt and the command run unprivileged, as the srt backend runs them


@pytest.fixture(scope="session")
def srt_cli_path() -> Path:
    """sandbox-runtime, ready to start: its CLI script (``scripts/ensure-srt`` installs it).

    Where it cannot run, a test that asks for it skips with the reason; with ``CI`` set it fails instead, as the
    Docker tests do.
    """
    from grader.backends.srt import srt_cli, srt_problem

    problem = srt_problem()
    if problem:
        msg = f"sandbox-runtime cannot run here: {problem}; run scripts/ensure-srt"
        if os.environ.get("CI"):
            pytest.fail(f"{msg}; CI is set, so this fails instead of skipping", pytrace=False)
        pytest.skip(msg)
    return srt_cli()


@pytest.fixture(scope="session")
def srt_backend(srt_cli_path: Path) -> Any:
    from grader.backends.srt import SrtBackend

    return SrtBackend.from_env()


RunSrt = Callable[[Path, str, Path, Path, Path], "subprocess.CompletedProcess[str]"]


@pytest.fixture(scope="session")
def run_srt(srt_cli_path: Path) -> RunSrt:
    """``run_srt(settings, script, cwd, home, tmp)``: ``srt --settings SETTINGS -c SCRIPT``, unprivileged, in ``cwd``."""

    def run(settings: Path, script: str, cwd: Path, home: Path, tmp: Path) -> "subprocess.CompletedProcess[str]":
        kwargs: dict[str, Any] = {}
        if os.geteuid() == 0:
            kwargs.update(user=SRT_UID, group=SRT_UID, extra_groups=[])
        node = shutil.which("node")
        assert node is not None
        return subprocess.run(
            [node, str(srt_cli_path), "--settings", str(settings), "-c", script],
            cwd=cwd, env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(tmp), "LANG": "C.UTF-8"},
            capture_output=True, text=True, timeout=120, **kwargs,
        )

    return run


@pytest.fixture(scope="session")
def docker_backend(docker_client: Any) -> Any:
    from grader.backends.docker.backend import DockerBackend
    from grader.backends.docker.images import ensure_images
    from grader.backends.docker.engine import DockerEngine

    backend = DockerBackend(DockerEngine(docker_client), ensure_images(DockerEngine(docker_client), lambda s: None))
    yield backend
    backend.close()


@pytest.fixture()
def no_leftovers(docker_client: Any, docker_backend: Any) -> Any:
    """Asserts a test leaves no container, network or run directory of its own behind.

    What the backend keeps between runs (its shared internet, its warm proxies)
    belongs to no one test; finished runs are drained first.
    """
    import json
    import os

    from grader.backends.docker.backend import LABEL_PID, runs_root

    mine = {"label": f"{LABEL_PID}={os.getpid()}"}  # other processes may be running their own

    def owned(d: Any) -> bool:
        try:
            return bool(json.loads((d / "owner.json").read_text()).get("pid") == os.getpid())
        except (OSError, ValueError):
            return False

    def snapshot() -> tuple[set[str], set[str], set[str]]:
        docker_backend.drain()
        keep = docker_backend.standing()
        cs = {c["Names"][0].lstrip("/") for c in docker_client.api.containers(all=True, filters=mine)}
        ns = {n["Name"] for n in docker_client.api.networks(filters=mine)}
        root = runs_root()
        ds = {p.name for p in root.iterdir() if owned(p)} if root.is_dir() else set()
        return cs - keep, ns - keep, ds - keep

    before = snapshot()
    yield
    after = snapshot()
    for kind, b, a in zip(("containers", "networks", "run directories"), before, after):
        assert a - b == set(), f"{kind} left behind: {sorted(a - b)}"
