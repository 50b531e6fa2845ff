"""The run service as processes (Redis and the API; no worker, no Docker): a token revoked with the CLI is refused
by the running API at once, and a learner's progress outlives a session (grader/hosted/tokens.py, progress_store.py,
grader/course/progress.py), each side in a process of its own as on Binder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from service_stack import REPO, ServiceStack

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def stack() -> Iterator[ServiceStack]:
    s = ServiceStack(workers=0)
    try:
        yield s
    finally:
        s.close()


def _session(stack: ServiceStack, progress: Path, code: str) -> subprocess.CompletedProcess[str]:
    """A learner's kernel: its own progress file, the service and the token in its environment (as binder/start sets them)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "SANDBOX_LAB_PROGRESS": str(progress), "SANDBOX_LAB_BACKEND": "remote",
           "SANDBOX_LAB_SERVICE_URL": stack.url, "SANDBOX_LAB_TOKEN": stack.token}
    done = subprocess.run([sys.executable, "-c", "from grader.course.progress import *\n" + code], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def _cli(stack: ServiceStack, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "grader", *argv], env=stack.env, cwd=REPO, capture_output=True,
                          text=True, timeout=120)


def test_progress_outlives_a_session_until_the_token_is_revoked(stack: ServiceStack, tmp_path: Path) -> None:
    first = _session(stack, tmp_path / "one.json", "mark_done('l01', now=100.0); record_attempt('q1', 'right', 1.0, now=110.0)")
    assert first.stderr == ""
    second = _session(stack, tmp_path / "two.json", "import json; p = load_progress(); "
                      "print(json.dumps([p.done, p.first_attempt('q1').result]))")
    assert json.loads(second.stdout) == [{"l01": 100.0}, "right"] and second.stderr == ""
    status, record = stack.request("GET", "/v1/progress")
    assert status == 200 and record["done"] == {"l01": 100.0}

    listed = _cli(stack, "tokens", "list")
    assert listed.returncode == 0 and listed.stdout.startswith("tester  id ") and stack.token not in listed.stdout
    unknown = _cli(stack, "tokens", "revoke", "nobody")
    assert unknown.returncode == 2 and "no token named 'nobody'" in unknown.stderr
    assert stack.request("GET", "/v1/progress")[0] == 200
    assert _cli(stack, "tokens", "revoke", "tester").returncode == 0
    status, body = stack.request("GET", "/v1/progress")  # the running API refuses it from the next request on
    assert status == 401 and body["error"]["code"] == "unauthorized" and "revoked" in body["error"]["message"]

    third = _session(stack, tmp_path / "two.json", "mark_done('l02', now=200.0); print(sorted(load_progress().done))")
    assert third.stdout.strip() == "['l01', 'l02']"  # the learner keeps working on this machine's file
    assert third.stderr and all(line.startswith("progress: ") and "HTTP 401" in line for line in third.stderr.splitlines())
