"""Shared by the run service's unit tests: a Redis of their own, a service on it, and tokens."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import pytest

from redis_server import RedisServer


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture()
def settings(redis_server: RedisServer, tmp_path: Path) -> Any:
    from grader.hosted.settings import service_settings

    # a directory of its own per test: every key under its own prefix, so tests share one Redis and no state
    return service_settings({"SANDBOX_LAB_SERVICE_DIR": str(tmp_path / "service"), "SANDBOX_LAB_REDIS_URL": redis_server.url,
                             "SANDBOX_LAB_SERVICE_NAME": "test-service", "HOME": os.environ.get("HOME", "/root")})
