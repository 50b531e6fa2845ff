"""TEMPORARY: a minimal ``docker_client`` fixture until tests/conftest.py provides one.

Delete this file once tests/conftest.py defines ``docker_client``; a fixture
here would shadow that one for every integration test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def docker_client() -> Iterator[Any]:
    docker = pytest.importorskip("docker")
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        reason = f"no Docker engine answers ({exc}); start it with scripts/ensure-docker"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    yield client
    client.close()
