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
    from grader.backends.docker import LABEL, runs_root

    def snapshot() -> tuple[set[str], set[str], set[str]]:
        cs = {c.name for c in docker_client.containers.list(all=True, filters={"label": LABEL})}
        ns = {n.name for n in docker_client.networks.list(filters={"label": LABEL})}
        root = runs_root()
        ds = {p.name for p in root.iterdir()} if root.is_dir() else set()
        return cs, ns, ds

    before = snapshot()
    yield
    after = snapshot()
    for kind, b, a in zip(("containers", "networks", "run directories"), before, after):
        assert a - b == set(), f"{kind} left behind: {sorted(a - b)}"
