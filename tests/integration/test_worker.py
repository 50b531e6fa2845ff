"""The run service end to end: Redis, two workers on the Docker engine and the API as processes (grader/hosted/worker.py).

A probe through the service is the local ``probe --json``; a worker killed
mid-job leaves its job retried or failed as ``worker_lost``, never ``started``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from service_stack import REPO, ServiceStack

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def stack() -> Iterator[ServiceStack]:
    s = ServiceStack(workers=2)
    try:
        yield s
    finally:
        s.close()


def _local_probe(path: Path) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-m", "grader", "probe", str(path), "--json", "--backend", "docker"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    data: dict[str, object] = json.loads(done.stdout)
    return data


@pytest.mark.parametrize("policy", ["examples/naive.json", "solutions/scope-secure-sandbox.json"])
def test_a_probe_through_the_service_is_the_local_probe_json(stack: ServiceStack, policy: str) -> None:
    path = REPO / policy
    status, accepted = stack.request("POST", "/v1/probe", {"policy": json.loads(path.read_text())})
    assert status == 202, accepted
    answer = stack.wait(accepted["url"])
    assert answer["status"] == "finished" and answer["error"] is None and answer["ran_at"] == "test-stack", answer
    remote, local = answer["result"], _local_probe(path)
    assert remote["backend"] == local["backend"] == "docker"
    assert set(remote) == set(local)
    assert {p["id"]: p["outcome"] for p in remote["probes"]} == {p["id"]: p["outcome"] for p in local["probes"]}  # type: ignore[union-attr]
    # a second identical request: from the cache, no run
    status, again = stack.request("POST", "/v1/probe", {"policy": json.loads(path.read_text())})
    assert status == 202 and again["status"] == "finished"
    cached = stack.wait(again["url"])
    assert cached["cached"] is True and cached["result"] == remote


def test_a_worker_killed_mid_job_leaves_the_job_retried_or_failed(stack: ServiceStack) -> None:
    from rq.job import Job
    from rq.serializers import JSONSerializer

    from grader.hosted.jobs import open_redis
    from grader.hosted.settings import service_settings

    settings = service_settings(stack.env)
    policy = {"filesystem": {"allowWrite": ["/tmp"]}, "network": {"allowedDomains": [f"k{time.time_ns()}.example.com"]}}
    stack.arm()  # the run waits on its sandbox until the kill: a quick run cannot end first
    status, accepted = stack.request("POST", "/v1/probe", {"policy": policy})
    assert status == 202, accepted
    stack.wait_held()
    seen = stack.wait(accepted["url"], timeout=120, until=("started", "finished", "failed"))
    assert seen["status"] == "started", f"the run ended before it could be killed: {seen}"
    job = Job.fetch(accepted["job"], connection=open_redis(settings), serializer=JSONSerializer)
    holder = job.worker_name
    assert holder in stack.workers, (holder, list(stack.workers))
    stack.kill_worker(holder)  # the worker runs its jobs itself (kept mode): no horse, and no clean-up of any kind
    stack.release()  # the retry is not held
    stack.start_worker(f"replacement-{time.time_ns()}")  # capacity back to two, as a supervisor would restart it
    # RQ counts a job abandoned a minute after its worker's last heartbeat; the retry then runs on a live worker
    assert stack.request("GET", accepted["url"])[1]["status"] == "started"  # until then, it is honestly still started
    answer = stack.wait(accepted["url"], timeout=400)
    assert answer["status"] in ("finished", "failed"), answer
    if answer["status"] == "failed":
        assert answer["error"]["code"] == "worker_lost", answer
    else:
        assert answer["result"]["backend"] == "docker"


def test_an_attack_through_the_service_is_the_local_attack_json(stack: ServiceStack) -> None:
    script = REPO / "solutions" / "attacks" / "naive-gist.py"
    status, accepted = stack.request("POST", "/v1/attack", {"level": "naive-gist", "source": script.read_text()})
    assert status == 202, accepted
    answer = stack.wait(accepted["url"])
    assert answer["status"] == "finished", answer
    done = subprocess.run([sys.executable, "-m", "grader", "attack", "--level", "naive-gist", str(script), "--json",
                           "--backend", "docker"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    remote, local = answer["result"], json.loads(done.stdout)
    assert set(remote) == set(local)
    assert remote["captured"] is local["captured"] is True
    assert (remote["level"], remote["lesson"], remote["hint"]) == (local["level"], local["lesson"], local["hint"])
    assert [s["host"] for s in remote["sinks"]] == [s["host"] for s in local["sinks"]]


@pytest.mark.parametrize("name", ["seed-naive", "seed-secure"])
def test_the_remote_backend_through_the_real_service_matches_local_docker(stack: ServiceStack, name: str) -> None:
    # the whole path a Binder learner takes: RemoteBackend -> API -> Redis -> a worker -> Docker, read back strictly
    from grader import backends
    from grader.backends.remote import RemoteBackend
    from grader.core.plan import build_plan
    from grader.core.policy import load_policy

    corpus = json.loads((REPO / "tests" / "fixtures" / "corpus.json").read_text())["policies"]
    raw = corpus[name]
    plan = build_plan(None if raw is None else load_policy(raw))
    with RemoteBackend(stack.url, stack.token) as remote, backends.get("docker") as local:
        there, here = remote.run(plan), local.run(plan)
    assert there.backend == "docker" and there.extra["ran_at"] == stack.url, there.notes
    assert [(p.id, p.outcome) for p in there.probes] == [(p.id, p.outcome) for p in here.probes]
    assert all(p.evidence for p in there.probes if p.outcome != "error")


def test_an_attack_through_the_remote_backend_is_caught_from_its_evidence(stack: ServiceStack) -> None:
    from grader.backends.remote import RemoteBackend
    from grader.course.ladder import attack, level

    lvl = level(1)
    source = (REPO / "solutions" / "attacks" / f"{lvl.id}.py").read_text()
    with RemoteBackend(stack.url, stack.token) as remote:
        result = attack(lvl, source, remote, attempts_before=0)
    assert result.to_json()["captured"] is True, result.to_json()


def test_a_job_timed_out_mid_run_fails_closes_its_kept_backend_and_the_next_job_runs_fresh(stack: ServiceStack,
                                                                                          docker_client: object) -> None:
    """Kept mode runs jobs in the worker: RQ's timeout (SIGALRM) lands inside the backend's run. The job fails as a
    timeout, the kept backend it used is closed with whatever the run had made (no sandbox of the worker's is left),
    and the next job on that worker runs and finishes on a new backend (``hosted.kept``)."""
    from rq import Queue
    from rq.serializers import JSONSerializer

    from grader.backends.docker.backend import LABEL_PID, LABEL_ROLE
    from grader.hosted.jobs import open_redis
    from grader.hosted.settings import service_settings

    settings = service_settings(stack.env)
    conn = open_redis(settings)
    queue = Queue(settings.queue_name, connection=conn, serializer=JSONSerializer)
    policy = json.loads((REPO / "examples" / "naive.json").read_text())
    # an attack that outlives its 1 s for certain (a probe no longer does: a warm backend's naive run can end
    # within the second), so the alarm lands while the backend waits on the sandbox
    slow = {"level": "naive-gist", "source": "import time\ntime.sleep(60)\n"}
    job = queue.enqueue("grader.hosted.jobs.perform", "attack", slow, f"k-timeout-{time.time_ns()}",
                        settings.prefix, job_timeout=1)
    deadline = time.monotonic() + 180
    while job.get_status(refresh=True) not in ("finished", "failed"):
        assert time.monotonic() < deadline, f"the timed-out job is still {job.get_status()}"
        time.sleep(0.2)
    latest = job.latest_result()
    assert job.get_status() == "failed" and latest is not None and "JobTimeoutException" in (latest.exc_string or "")
    pids = {str(stack.worker_pid(name)) for name in stack.workers}  # RQ forgets the job's worker once it ends
    deadline = time.monotonic() + 30
    while True:  # the backend's close removes the run's sandbox; a moment for the engine
        left = [c for c in docker_client.api.containers(all=True, filters={"label": LABEL_PID})  # type: ignore[attr-defined]
                if (c.get("Labels") or {}).get(LABEL_ROLE) == "sandbox" and c["Labels"].get(LABEL_PID) in pids]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not left, f"the timed-out run's sandbox outlived its closed backend: {[c['Names'] for c in left]}"
    status, accepted = stack.request("POST", "/v1/probe", {"policy": {**policy, "network": {"allowedDomains": [f"t{time.time_ns()}.example.com"]}}})
    assert status == 202, accepted
    answer = stack.wait(accepted["url"])
    assert answer["status"] == "finished" and answer["result"]["backend"] == "docker", answer
