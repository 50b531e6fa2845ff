"""The run service under faults (issue 39): Redis restarted, workers killed, no worker, Redis down; on the real stack.

One stack of the module's own (tests/service_stack.py): a redis-server on its
own socket, two workers each under scripts/supervise.py (as `make serve` starts
them) on the Docker engine, and the API. Each fault ends with every job
finished or failed with a reason, the status codes the contract names, and,
once the stack is closed, none of its processes or containers left.

Jobs are one-probe runs (``/v1/runs``), each with a policy of its own so that
none is answered from the cache. The figures (time to 503, to a job finished
after Redis is back) are printed with ``-s``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Any, Iterator

import pytest

from service_stack import ServiceStack, _children

pytestmark = [pytest.mark.docker, pytest.mark.slow]

OUTAGE_S = 7.0  # as the issue reproduced it


def _body() -> dict[str, Any]:
    policy = {"filesystem": {"allowWrite": ["/tmp"]}, "network": {"allowedDomains": [f"k{time.time_ns()}.example.com"]}}
    return {"sandbox": "policy", "policy": policy, "probes": ["read-ssh-key"]}


def _submit(stack: ServiceStack) -> str:
    status, accepted = stack.request("POST", "/v1/runs", _body())
    assert status == 202 and accepted["status"] == "queued", (status, accepted)
    return str(accepted["url"])


def _settle(stack: ServiceStack, urls: list[str], timeout: float, allowed: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Every job finished, or failed with one of the ``allowed`` codes: never left queued or started."""
    answers = [stack.wait(url, timeout=timeout) for url in urls]
    for answer in answers:
        if answer["status"] == "failed":
            assert answer["error"]["code"] in allowed, answer
        else:
            assert answer["result"]["backend"] == "docker", answer
    return answers


def _get(stack: ServiceStack, path: str) -> tuple[int, Any]:
    import json
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(stack.url + path, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _until_ready(stack: ServiceStack, live: int = 2, timeout: float = 60) -> float:
    """Seconds until /readyz is 200 with ``live`` live workers."""
    start = time.monotonic()
    while True:
        status, body = _get(stack, "/readyz")
        if status == 200 and body["workers"]["live"] >= live:
            return time.monotonic() - start
        assert time.monotonic() - start < timeout, (status, body)
        time.sleep(0.2)


def _holder(stack: ServiceStack, url: str) -> str:
    from rq.job import Job
    from rq.serializers import JSONSerializer

    from grader.hosted.jobs import open_redis
    from grader.hosted.settings import service_settings

    stack.wait_held()  # armed before the job was sent: it waits on its sandbox until ``release``
    seen = stack.wait(url, timeout=120, until=("started", "finished", "failed"))
    assert seen["status"] == "started", f"the run ended before the fault: {seen}"
    job = Job.fetch(seen["job"], connection=open_redis(service_settings(stack.env)), serializer=JSONSerializer)
    assert job.worker_name in stack.workers, job.worker_name
    return str(job.worker_name)


class _Watch:
    """Every pid under the stack's supervisors (workers and their work horses), sampled as the tests run."""

    def __init__(self, stack: ServiceStack) -> None:
        self.stack = stack
        self.pids: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for proc in list(self.stack.workers.values()):
                for worker in _children(proc.pid):
                    self.pids.add(worker)
                    self.pids.update(_children(worker))
            self._stop.wait(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def _restarts(stack: ServiceStack, name: str) -> int:
    return (stack.directory / f"{name}.log").read_text(errors="replace").count("restarting in")


def _unrestarted(stack: ServiceStack, pids: dict[str, int]) -> None:
    """No worker died: the same pids, no restart in the supervisors' logs (else their logs' ends, to say why)."""
    now = {name: stack.worker_pid(name) for name in stack.workers}
    logs = {name: (stack.directory / f"{name}.log").read_text(errors="replace") for name in stack.workers}
    assert now == pids and all(_restarts(stack, name) == 0 for name in stack.workers), \
        "\n".join(f"--- {name}\n{text[-4000:]}" for name, text in logs.items())


@pytest.fixture(scope="module")
def stack() -> Iterator[ServiceStack]:
    s = ServiceStack(workers=2, supervised=True)
    watch = _Watch(s)
    supervisors = [p.pid for p in s.workers.values()]
    try:
        _until_ready(s)
        yield s
    finally:
        watch.stop()
        pids = watch.pids | set(supervisors) | {p.pid for p in s.workers.values()}
        if s.api is not None:
            pids.add(s.api.pid)
        # as serve-stop does: one SIGTERM to each supervisor, which passes it on once and restarts nothing
        for proc in s.workers.values():
            proc.send_signal(signal.SIGTERM)
        lingering = []
        for name, proc in s.workers.items():
            try:
                proc.wait(40)
            except subprocess.TimeoutExpired:
                lingering.append(name)
        s.close()
        assert lingering == [], f"supervised workers that did not stop on SIGTERM: {lingering}"
        _nothing_left(pids)


def _nothing_left(pids: set[int]) -> None:
    """No process the stack ran is alive, and no container any of them made remains."""
    import docker

    from grader.backends.docker.simnet import LABEL_HUB, LABEL_PID

    deadline = time.monotonic() + 30
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = {p for p in pids if _exists(p)}
        time.sleep(0.2)
    assert not alive, "processes left behind: " + "; ".join(f"{p} {_cmdline(p)}" for p in sorted(alive))
    client = docker.from_env()
    try:
        # the list call alone (no inspect per container): the engine is shared, and others' containers come and go
        listed = client.api.containers(all=True, filters={"label": LABEL_PID})
        left = [c["Names"] for c in listed if (c.get("Labels") or {}).get(LABEL_PID, "").isdigit()
                and int(c["Labels"][LABEL_PID]) in pids and LABEL_HUB not in c["Labels"]]
    finally:
        client.close()
    assert left == [], f"containers left behind: {left}"


def _cmdline(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "(gone)"


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = f"/proc/{pid}/stat"
    try:
        with open(stat) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended: its parent just has not reaped it
    except OSError:
        return False


# --- the faults -----------------------------------------------------------------------------------


def test_no_worker_at_all_is_503_at_once() -> None:
    s = ServiceStack(workers=0)
    try:
        start = time.monotonic()
        status, body = s.request("POST", "/v1/runs", _body())
        elapsed = time.monotonic() - start
        print(f"\n[no worker] POST /v1/runs answered {status} in {elapsed:.3f} s")
        assert status == 503 and body["error"]["code"] == "unavailable" and "no worker" in body["error"]["message"]
        assert elapsed < 2
        assert _get(s, "/readyz")[0] == 503
        assert _get(s, "/healthz") == (200, {"ok": True})
    finally:
        s.close()


def test_redis_down_is_503_on_the_routes_and_a_restart_while_idle_is_served_again(stack: ServiceStack) -> None:
    pids = {name: stack.worker_pid(name) for name in stack.workers}
    stack.redis.stop()
    down = time.monotonic()
    try:
        status, body = stack.request("POST", "/v1/runs", _body())
        assert status == 503 and body["error"]["code"] == "unavailable" and "Redis" in body["error"]["message"], body
        assert stack.request("GET", "/v1/jobs/" + "a" * 32)[0] == 503
        assert stack.request("GET", "/v1/progress")[0] == 503
        assert _get(stack, "/readyz")[0] == 503
        assert _get(stack, "/healthz") == (200, {"ok": True})
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down)))
    finally:
        stack.redis.start()
    ready = _until_ready(stack)
    start = time.monotonic()
    _settle(stack, [_submit(stack)], timeout=120)
    print(f"\n[Redis restarted while idle] /readyz 200 {ready:.1f} s after Redis was back; a job then took "
          f"{time.monotonic() - start:.1f} s")
    _unrestarted(stack, pids)  # the workers waited, none died


def test_redis_restarted_mid_job_loses_no_job_and_no_worker(stack: ServiceStack) -> None:
    pids = {name: stack.worker_pid(name) for name in stack.workers}
    stack.arm()
    urls = [_submit(stack)]
    _holder(stack, urls[0])
    urls += [_submit(stack) for _ in range(2)]  # one more running, one queued
    stack.redis.stop()
    stack.release()  # the held job ends while Redis is away: its result waits for Redis
    time.sleep(OUTAGE_S)
    stack.redis.start()
    back = time.monotonic()
    answers = _settle(stack, urls, timeout=240)
    print(f"\n[Redis restarted mid-job] all {len(urls)} jobs ended {time.monotonic() - back:.1f} s after Redis was "
          f"back: {[a['status'] for a in answers]}")
    assert [a["status"] for a in answers] == ["finished"] * 3
    _unrestarted(stack, pids)
    _until_ready(stack)


def test_a_worker_sigtermed_mid_job_finishes_it_and_is_restarted(stack: ServiceStack) -> None:
    stack.arm()
    url = _submit(stack)
    name = _holder(stack, url)
    old = stack.worker_pid(name)
    os.kill(old, signal.SIGTERM)  # a warm shutdown: the job ends first
    stack.release()
    answer = _settle(stack, [url], timeout=120)[0]
    assert answer["status"] == "finished"
    deadline = time.monotonic() + 30
    while stack.worker_pid(name) == old:
        assert time.monotonic() < deadline, "the supervisor did not restart the worker"
        time.sleep(0.2)
    assert _restarts(stack, name) == 1
    print(f"\n[SIGTERM mid-job] job finished; worker {name} restarted ({old} -> {stack.worker_pid(name)})")
    _until_ready(stack)


def test_a_worker_sigkilled_mid_job_is_restarted_and_its_job_retried_or_failed(stack: ServiceStack) -> None:
    stack.arm()
    url = _submit(stack)
    name = _holder(stack, url)
    before = _restarts(stack, name)
    old = stack.worker_pid(name)
    for horse in _children(old):
        os.killpg(horse, signal.SIGKILL)  # RQ puts each horse in a process group of its own
    os.kill(old, signal.SIGKILL)
    stack.release()  # the retry is not held
    killed = time.monotonic()
    answer = _settle(stack, [url], timeout=200, allowed=("worker_lost",))[0]
    print(f"\n[SIGKILL mid-job] the job was {answer['status']} {time.monotonic() - killed:.1f} s after the kill")
    # run a second time, or failed, never silently: whoever found it abandoned (a worker, the API) logged it
    logs = "".join(p.read_text(errors="replace") for p in stack.directory.glob("*.log"))
    job = url.rsplit("/", 1)[1]
    said = "it runs once more" if answer["status"] == "finished" else "it fails as worker_lost"
    assert f"job {job}: its worker {name} was lost mid-run" in logs and said in logs, \
        "\n".join(line for line in logs.splitlines() if job in line or "lost" in line or "bandon" in line)
    assert _restarts(stack, name) == before + 1
    assert stack.worker_pid(name) != old
    _until_ready(stack)
