"""dockerd itself restarted in the middle of a batch: no grade is lost, nothing is left behind.

Named to run last among the integration tests: a restart stops every container
on the engine, so it must not run beside other runs. Later tests get a working
engine again (the backend replaces a dead shared internet and stale warm proxies).
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from grader.backends.docker.backend import LABEL, LABEL_PID, DockerBackend
from grader.backends.static import StaticBackend
from grader.grading.batch import grade_batch
from grader.grading.tasks import load_task

pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    # docker-py leaks a socket on each connect that fails while the engine is down (upstream);
    # its ResourceWarning surfaces at garbage collection, not as a failure of ours
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
]

REPO = Path(__file__).resolve().parents[2]
POLICIES = [
    {"filesystem": {"allowWrite": ["/project"], "denyWrite": ["/project/.git/hooks"], "denyRead": ["/home/user", "/etc/secrets", "/project/.env"]}},
    {"filesystem": {"allowWrite": ["/project", "/home/user"]}},
    {"filesystem": {"allowWrite": ["/project"]}, "network": {"allowedDomains": ["github.com"]}},
    {},
]


def _dockerd_pid() -> int:
    out = subprocess.run(["pidof", "dockerd"], capture_output=True, text=True)
    pids = out.stdout.split()
    return int(pids[0]) if len(pids) == 1 else 0


@pytest.fixture()
def restartable() -> int:
    pid = _dockerd_pid()
    problem = ""
    if os.geteuid() != 0:
        problem = "restarting dockerd needs root"
    elif not pid or shutil.which("dockerd") is None:
        problem = "no single local dockerd process to restart (remote engine or Docker Desktop)"
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"{problem}; CI is set, so this fails instead of skipping", pytrace=False)
        pytest.skip(problem)
    return pid


def _restart(pid: int) -> None:
    os.kill(pid, 15)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists(), "dockerd did not stop"
    subprocess.run([str(REPO / "scripts" / "ensure-docker")], check=True, timeout=180, capture_output=True)


def test_dockerd_restarted_mid_batch_loses_no_grade(docker_client: Any, docker_backend: Any, tmp_path: Path, restartable: int) -> None:
    task = load_task("stop-persistence")
    subs, journal = tmp_path / "class", tmp_path / "journal.jsonl"
    subs.mkdir()
    for i in range(20):
        (subs / f"s{i:02d}.json").write_text(json.dumps(POLICIES[i % len(POLICIES)], indent=i % 3))
    (subs / "broken.json").write_text("{")
    # what other backends of this session (same pid) hold already is theirs, not this test's
    before = {c["Names"][0].lstrip("/") for c in docker_client.api.containers(
        all=True, filters={"label": f"{LABEL_PID}={os.getpid()}"})}
    restarted = threading.Event()

    def restart_when_under_way() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if journal.exists() and journal.read_text().count("\n") >= 4:
                break
            time.sleep(0.02)
        _restart(restartable)
        restarted.set()

    backend = DockerBackend(docker_client, docker_backend.images, retries=0)
    restarter = threading.Thread(target=restart_when_under_way, daemon=True)
    restarter.start()
    try:
        first = grade_batch(task, subs, backend, workers=2, dedupe=False, journal=journal)
        restarter.join(timeout=240)
        assert restarted.is_set(), "dockerd was never restarted: this test proves nothing"
    finally:
        backend.close()
    static = {r.student: r for r in grade_batch(task, subs, StaticBackend(), workers=1).rows}
    failed = {r.student for r in first.rows if r.status == "error"}
    assert len(first.rows) == 21
    for r in first.rows:  # a row is right or an error saying to rerun; never a wrong score
        if r.status == "error":
            assert "rerun" in r.feedback.lower(), r.feedback  # "rerun the batch", or a check's "Rerun the grader"
        else:
            assert (r.score, r.status) == (static[r.student].score, static[r.student].status), r.student

    fresh = DockerBackend.from_env()
    try:
        second = grade_batch(task, subs, fresh, workers=2, dedupe=False, journal=journal)
    finally:
        fresh.close()
    assert second.resumed == len(first.rows) - len(failed)
    assert [(r.student, r.score, r.status) for r in second.rows] == [
        (r.student, static[r.student].score, static[r.student].status) for r in second.rows]

    # nothing of these two backends is left: only what the session's backend keeps between runs
    mine = docker_client.api.containers(all=True, filters={"label": f"{LABEL_PID}={os.getpid()}"})
    names = {c["Names"][0].lstrip("/") for c in mine} - docker_backend.standing() - before
    assert names == set(), names
    assert all(LABEL in (c.get("Labels") or {}) for c in mine)
    gc.collect()  # the leaked sockets' warnings land here, under this module's filter
