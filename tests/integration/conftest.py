"""Fixtures for tests that run real containers: one Docker backend per session, images built once."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def docker_backend(docker_client: Any) -> Any:
    from grader.backends.docker.backend import DockerBackend
    from grader.backends.docker.images import ensure_images

    backend = DockerBackend(docker_client, ensure_images(docker_client, lambda s: None))
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
