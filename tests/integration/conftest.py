"""Fixtures for tests that run real containers: one Docker backend per session, images built once."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(scope="session")
def docker_backend(docker_client: Any) -> Any:
    from grader.backends.docker import DockerBackend
    from grader.backends.images import ensure_images

    return DockerBackend(docker_client, ensure_images(docker_client, lambda s: None))


@pytest.fixture()
def no_leftovers(docker_client: Any) -> Any:
    """Asserts a test leaves no container, network or run directory of its own behind."""
    import json
    import os

    from grader.backends.docker import LABEL_PID, runs_root

    mine = {"label": f"{LABEL_PID}={os.getpid()}"}  # other processes may be running their own

    def owned(d: Any) -> bool:
        try:
            return bool(json.loads((d / "owner.json").read_text()).get("pid") == os.getpid())
        except (OSError, ValueError):
            return False

    def snapshot() -> tuple[set[str], set[str], set[str]]:
        cs = {c.name for c in docker_client.containers.list(all=True, filters=mine)}
        ns = {n.name for n in docker_client.networks.list(filters=mine)}
        root = runs_root()
        ds = {p.name for p in root.iterdir() if owned(p)} if root.is_dir() else set()
        return cs, ns, ds

    before = snapshot()
    yield
    after = snapshot()
    for kind, b, a in zip(("containers", "networks", "run directories"), before, after):
        assert a - b == set(), f"{kind} left behind: {sorted(a - b)}"
