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


@pytest.fixture()
def store(settings: Any) -> Any:
    """The API's job store on the test's Redis; no worker needed to accept a job."""
    from grader.hosted.jobs import JobStore, open_redis

    return JobStore(settings, open_redis(settings), require_workers=False)


@pytest.fixture()
def client(settings: Any, store: Any) -> Iterator[Any]:
    """The API in process (Starlette's test client); a server error is a 500 answer, as a client sees it."""
    import warnings

    from starlette.exceptions import StarletteDeprecationWarning

    from grader.hosted.app import create_app

    with warnings.catch_warnings():
        # Starlette 1.x asks for httpx2 under its test client; httpx (already pinned for the project) still works
        warnings.simplefilter("ignore", StarletteDeprecationWarning)
        from starlette.testclient import TestClient
    with TestClient(create_app(settings, store), raise_server_exceptions=False) as c:
        yield c


def auth(settings: Any, name: str = "alice", **limits: Any) -> dict[str, str]:
    """The header of a fresh token issued to ``name`` (with the rate and job limits given)."""
    from grader.hosted.tokens import issue_token

    return {"Authorization": f"Bearer {issue_token(settings.tokens_file, name, **limits)}"}
