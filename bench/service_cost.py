"""Where a run through the service spends its time and CPU, against the same plan in one process: issue 40's attribution.

Starts, in one bench run, two run services of its own on loopback (Redis, the
API, one worker each; ``tests/service_stack.py``), and sends them one job at
a time (no queue: the service's own cost per run), alternating per repeat and
kind with the same plan run by a ``DockerBackend`` in this process (its own
internet and warm proxy pool, as ``grade-batch`` keeps):

* ``service (fork)``: the service's worker in fork mode (``bench/service_worker.py
  fork``: RQ's ``Worker``, a work horse per job, a backend per job on the
  machine hub's internet), timed inside each job;
* ``service (kept)``: the service's worker as it runs by default
  (``bench/service_worker.py kept``: each job in the worker process, one
  backend kept for the worker's life, made again after a job that raised);
* ``in-process``: ``backend.run(plan)``.

For each job it splits the learner's wait into: the API and the queue (POST
to RQ's ``started_at``), the horse before the job's function (a fork, RQ's
bookkeeping), inside the job (the Docker modules' imports, the engine client
and images, the hub's internet and proxy, the run itself with its phases, the
close), RQ's bookkeeping after it (to ``ended_at``), and the client's polling
lag (``ended_at`` to the poll that saw it: ``backends.remote``'s schedule,
0.2 s then x1.5 up to 2 s). CPU by whose work (``bench/cpu.py``): the sandbox's
cgroup, the worker process with its reaped horses, the API process, Redis,
the proxy and internet containers, dockerd + containerd (shared: an upper bound).

    python bench/service_cost.py [--repeat 5] [--kinds secure,practice,naive]
    python bench/service_cost.py --burst 12 --workers 2 --repeat 3 --kinds naive   # N at once: throughput, CPU per run
    python bench/service_cost.py --fail-closed   # the kept worker: a timed-out job is failed, its backend rebuilt
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import timezone
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench"), str(REPO / "tests")]

import cpu  # noqa: E402 - bench/cpu.py
from probe_speed import POLICIES  # noqa: E402 - the same three kinds of run
from service_stack import ServiceStack  # noqa: E402 - tests/service_stack.py

from grader import load_policy  # noqa: E402
from grader.backends.docker.backend import DockerBackend  # noqa: E402
from grader.backends.remote import _FIRST_POLL_S, _MAX_POLL_S  # noqa: E402
from grader.core.plan import build_plan  # noqa: E402

RUN_PHASES = ("world", "network", "start", "probes", "evidence", "replay")
INSIDE = ("imports (docker backend)", "engine + images + internet", "hub internet (adopt)", "hub proxy (claim)", "backend close")
CPU_KEYS = ("sandbox", "worker", "api", "redis", "simnet", "engine")


class BenchStack(ServiceStack):
    """A ServiceStack whose worker is ``bench/service_worker.py MODE`` (the service's worker, timed)."""

    def __init__(self, mode: str, marks: Path, workers: int = 1) -> None:
        self.mode, self.marks = mode, marks
        super().__init__(workers=workers)

    def start_worker(self, name: str) -> None:
        env = {**self.env, "BENCH_MARKS": str(self.marks)}
        with (self.directory / f"{name}.log").open("ab") as out:
            self.workers[name] = subprocess.Popen([sys.executable, str(REPO / "bench" / "service_worker.py"), self.mode, name],
                                                  env=env, cwd=str(REPO), stdout=out, stderr=subprocess.STDOUT,
                                                  start_new_session=True)


def _stamp(dt: Any) -> float:
    return dt.replace(tzinfo=timezone.utc).timestamp() if dt.tzinfo is None else dt.timestamp()


def _job(stack: BenchStack, policy: dict[str, Any], watcher: cpu.Watcher, client: Any) -> dict[str, float]:
    """One job sent and polled as a learner's ``--backend remote`` does; its wait split up and its CPU by whose work."""
    from rq.job import Job
    from rq.serializers import JSONSerializer

    from grader.hosted.jobs import open_redis
    from grader.hosted.settings import service_settings

    os.environ["SANDBOX_LAB_SERVICE_DIR"], os.environ["SANDBOX_LAB_REDIS_URL"] = str(stack.directory), stack.redis.url
    conn = open_redis(service_settings())
    for key in conn.scan_iter("*cache:*"):  # the same policy each repeat: run it, never answer from the cache
        conn.delete(key)
    (worker,) = stack.workers.values()
    assert stack.api is not None and stack.redis.process is not None
    hub = stack.mode == "fork"
    mark, e0 = watcher.mark(), cpu.engine_cpu()
    s0 = 0.0 if hub else cpu.services_cpu(client, pid=worker.pid)
    w0, a0, r0 = (cpu.proc_cpu(worker.pid, children=True), cpu.proc_cpu(stack.api.pid), cpu.proc_cpu(stack.redis.process.pid))
    lines = stack.marks.read_text().count("\n") if stack.marks.exists() else 0
    t_post = time.time()
    status, accepted = stack.request("POST", "/v1/probe", {"policy": policy})
    assert status == 202, accepted
    delay = _FIRST_POLL_S
    while True:
        status, body = stack.request("GET", accepted["url"])
        if body["status"] in ("finished", "failed"):
            break
        time.sleep(delay)
        delay = min(delay * 1.5, _MAX_POLL_S)
    t_seen = time.time()
    if body["status"] != "finished":
        logs = "".join(p.read_text(errors="replace")[-3000:] for p in stack.directory.glob("w*.log"))
        raise SystemExit(f"the job failed: {body}\n{logs}")
    time.sleep(0.5)  # what the run handed the hub's keeper or its reaper is removed: count it
    w1, a1, r1 = (cpu.proc_cpu(worker.pid, children=True), cpu.proc_cpu(stack.api.pid), cpu.proc_cpu(stack.redis.process.pid))
    job = Job.fetch(accepted["job"], connection=conn, serializer=JSONSerializer)
    for _ in range(50):
        text = stack.marks.read_text()
        if text.count("\n") > lines:
            break
        time.sleep(0.05)
    marks = json.loads(text.splitlines()[lines])
    sandbox, _ = watcher.sandbox_cpu(mark, [worker.pid], expect=99, wait_s=0.5)
    row = {
        "wall": t_seen - t_post,
        "api + queue + fork": _stamp(job.started_at) - t_post,  # RQ stamps started_at in the horse, after the fork
        "horse before": marks["perform_entry"] - _stamp(job.started_at),
        **{k: marks.get(k, 0.0) for k in INSIDE},
        "run": marks.get("run (whole)", 0.0),
        **{p: marks.get("timings", {}).get(p, 0.0) for p in RUN_PHASES},
        "job other": marks["perform (whole)"] - marks.get("run (whole)", 0.0) - sum(marks.get(k, 0.0) for k in INSIDE),
        "horse after": _stamp(job.ended_at) - marks["perform_exit"],
        "poll lag": t_seen - _stamp(job.ended_at),
        "sandbox": sandbox, "worker": w1 - w0, "api": a1 - a0, "redis": r1 - r0,
        # the hub's proxies serve one run each and go with their CPU: not measurable from outside, so left out
        "simnet": float("nan") if hub else cpu.services_cpu(client, pid=worker.pid) - s0,
        "engine": cpu.engine_cpu() - e0,
    }
    return row


def _client(stack: BenchStack, policy: dict[str, Any]) -> float:
    """One learner: POST, then poll as ``--backend remote`` does; seconds until it saw the result."""
    t = time.monotonic()
    status, accepted = stack.request("POST", "/v1/probe", {"policy": policy})
    assert status == 202, accepted
    delay = _FIRST_POLL_S
    while True:
        status, body = stack.request("GET", accepted["url"])
        if body["status"] in ("finished", "failed"):
            if body["status"] != "finished":
                raise SystemExit(f"a job failed: {body}")
            return time.monotonic() - t
        time.sleep(delay)
        delay = min(delay * 1.5, _MAX_POLL_S)


def _burst(stack: Optional[BenchStack], backend: DockerBackend, policy: dict[str, Any], n: int, workers: int,
           watcher: cpu.Watcher) -> dict[str, float]:
    """``n`` runs of ``policy`` at once: through ``stack`` (n clients, its workers), or with none on ``backend`` with
    ``workers`` threads (as grade-batch runs a class). Throughput, median wait, and CPU per run by whose work."""
    from concurrent.futures import ThreadPoolExecutor

    me = os.getpid()
    pids = [me] if stack is None else [w.pid for w in stack.workers.values()]
    others = [] if stack is None else [stack.api.pid, stack.redis.process.pid]  # type: ignore[union-attr]
    if stack is not None:
        os.environ["SANDBOX_LAB_SERVICE_DIR"], os.environ["SANDBOX_LAB_REDIS_URL"] = str(stack.directory), stack.redis.url
        from grader.hosted.jobs import open_redis
        from grader.hosted.settings import service_settings

        conn = open_redis(service_settings())
        for key in conn.scan_iter("*cache:*"):
            conn.delete(key)
    backend.drain()
    import resource

    mark, e0 = watcher.mark(), cpu.engine_cpu()
    g0 = sum(cpu.proc_cpu(p, children=True) for p in pids if p != me)
    u0 = resource.getrusage(resource.RUSAGE_SELF)
    o0 = [cpu.proc_cpu(p) for p in others]
    t = time.monotonic()
    with ThreadPoolExecutor(max_workers=n if stack is not None else workers) as pool:
        if stack is not None:
            waits = list(pool.map(lambda _: _client(stack, policy), range(n)))
        else:
            plan = build_plan(load_policy(policy))

            def one(_: int) -> float:
                t1 = time.monotonic()
                backend.run(plan)
                return time.monotonic() - t1

            waits = list(pool.map(one, range(n)))
    wall = time.monotonic() - t
    backend.drain()
    time.sleep(0.5)
    u1 = resource.getrusage(resource.RUSAGE_SELF)
    grader = (sum(cpu.proc_cpu(p, children=True) for p in pids if p != me) - g0) if stack is not None \
        else u1.ru_utime + u1.ru_stime - u0.ru_utime - u0.ru_stime
    sandbox, count = watcher.sandbox_cpu(mark, pids, expect=n, wait_s=3)
    api_redis = sum(cpu.proc_cpu(p) for p in others) - sum(o0)
    return {"runs/s": n / wall, "p50 wait": statistics.median(waits), "wall": wall, "sandboxes": count,
            "sandbox/run": sandbox / n, "grader/run": grader / n, "api+redis/run": api_redis / n,
            "engine/run": (cpu.engine_cpu() - e0) / n}


def _inprocess(backend: DockerBackend, plan: Any, watcher: cpu.Watcher) -> dict[str, float]:
    import resource

    backend.drain()
    me = os.getpid()
    mark, e0, s0 = watcher.mark(), cpu.engine_cpu(), cpu.services_cpu(backend.engine, pid=me)
    u0 = resource.getrusage(resource.RUSAGE_SELF)
    t = time.perf_counter()
    result = backend.run(plan)
    wall = time.perf_counter() - t
    backend.drain()
    u1 = resource.getrusage(resource.RUSAGE_SELF)
    sandbox, _ = watcher.sandbox_cpu(mark, [me], expect=99, wait_s=0.5)
    return {"wall": wall, "run": wall, **{p: result.timings.get(p, 0.0) for p in RUN_PHASES},
            "sandbox": sandbox, "worker": u1.ru_utime + u1.ru_stime - u0.ru_utime - u0.ru_stime,
            "simnet": cpu.services_cpu(backend.engine, pid=me) - s0, "engine": cpu.engine_cpu() - e0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--kinds", default="secure,practice,naive")
    ap.add_argument("--modes", default="fork,kept,in-process")
    ap.add_argument("--burst", type=int, default=0, help="instead: N runs at once per mode (N clients; two workers)")
    ap.add_argument("--workers", type=int, default=2, help="with --burst: workers per service, threads in-process")
    ap.add_argument("--fail-closed", action="store_true", help="instead: check that the kept worker fails closed")
    args = ap.parse_args()
    if args.fail_closed:
        return _fail_closed()
    if args.burst:
        return _bursts(args)
    kinds = args.kinds.split(",")
    modes = args.modes.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="service-cost-"))
    load0 = os.getloadavg()[0]
    watcher = cpu.Watcher().start()
    backend = DockerBackend.from_env()  # should this fail, the watcher ends on its own when this process has gone
    stacks: dict[str, BenchStack] = {}
    rows: dict[tuple[str, str], list[dict[str, float]]] = {}
    try:  # stopped at any point (Ctrl-C too), whatever was started is stopped
        for m in modes:
            if m != "in-process":
                stacks[m] = BenchStack(m, tmp / f"{m}.jsonl")
        for kind in kinds:  # one unmeasured job per stack and kind: the first pays for images and internets
            for stack in stacks.values():
                _job(stack, POLICIES[kind], watcher, backend.engine)
            backend.run(build_plan(load_policy(POLICIES[kind])))
        for _ in range(args.repeat):
            for kind in kinds:
                for mode in modes:
                    if mode == "in-process":
                        row = _inprocess(backend, build_plan(load_policy(POLICIES[kind])), watcher)
                    else:
                        row = _job(stacks[mode], POLICIES[kind], watcher, backend.engine)
                    rows.setdefault((kind, mode), []).append(row)
    finally:
        for stack in stacks.values():
            stack.close()
        backend.close()
        watcher.close()
    load1 = os.getloadavg()[0]
    table = {k: {c: statistics.median(r.get(c, 0.0) for r in v) for c in {c for r in v for c in r}} for k, v in rows.items()}
    print(f"one job at a time, median of {args.repeat} each, modes alternating (load average {load0:.1f} before, {load1:.1f} after; "
          f"{os.cpu_count()} cores)")
    cols = ("wall", "api + queue + fork", "horse before", *INSIDE, "run", *RUN_PHASES, "job other", "horse after", "poll lag")
    for (kind, mode), m in table.items():
        core = sum(m[c] for c in CPU_KEYS if c in m and m[c] == m[c])  # nan: not measured
        print(f"\n{kind} / {mode}: wall {m['wall']:.2f} s, {core:.3f} core-s "
              f"(sandbox {m['sandbox']:.3f} = {m['sandbox'] / core if core else 0:.0%})")
        print("  time:  " + ", ".join(f"{c} {m[c]:.3f}" for c in cols[1:] if c in m))
        print("  CPU:   " + ", ".join(f"{c} {m[c]:.3f}" for c in CPU_KEYS if c in m))
    (tmp / "rows.json").write_text(json.dumps({f"{k[0]}/{k[1]}": v for k, v in rows.items()}, indent=1))
    print(f"\nevery row: {tmp / 'rows.json'}")
    return 0


def _fail_closed() -> int:
    """The kept worker fails closed: a job stopped by RQ's timeout mid-run is failed as ``timeout``, its backend is
    closed and rebuilt, nothing of its run is left on the engine, and the next job runs on a fresh backend."""
    from rq import Queue
    from rq.serializers import JSONSerializer

    from grader.backends.docker.backend import client_from_env
    from grader.hosted.jobs import open_redis
    from grader.hosted.settings import service_settings

    tmp = Path(tempfile.mkdtemp(prefix="service-failclosed-"))
    stack = BenchStack("kept", tmp / "kept.jsonl")
    client = client_from_env()
    try:
        (worker,) = stack.workers.values()
        _client(stack, POLICIES["secure"])  # the worker's backend, warm
        os.environ["SANDBOX_LAB_SERVICE_DIR"], os.environ["SANDBOX_LAB_REDIS_URL"] = str(stack.directory), stack.redis.url
        settings = service_settings()
        conn = open_redis(settings)
        queue = Queue(settings.queue_name, connection=conn, serializer=JSONSerializer)
        # the service's own job function, with a timeout shorter than a run: RQ's SIGALRM lands inside backend.run
        job = queue.enqueue("grader.hosted.jobs.perform", "probe", {"policy": POLICIES["naive"]}, "k-timeout",
                            settings.prefix, job_timeout=1)
        deadline = time.monotonic() + 120
        while job.get_status(refresh=True) not in ("finished", "failed") and time.monotonic() < deadline:
            time.sleep(0.2)
        latest = job.latest_result()
        text = (latest.exc_string or "") if latest is not None else ""
        marks = [json.loads(x) for x in stack.marks.read_text().splitlines()]
        rebuilt = any(m.get("job") == job.id and m.get("backend rebuilt") for m in marks)
        time.sleep(3)  # the closed backend's removals
        left = ["/" + c.name for c in client.containers({"label": f"{cpu.PID}={worker.pid}"})  # the engine adapter's
                if c.labels.get(cpu.ROLE) == "sandbox"]
        for key in conn.scan_iter("*cache:*"):  # the next job runs, not answered from the cache
            conn.delete(key)
        lines = len(stack.marks.read_text().splitlines())
        after = _client(stack, POLICIES["secure"])
        fresh = [json.loads(x) for x in stack.marks.read_text().splitlines()[lines:]]
        after_ran = bool(fresh) and "run (whole)" in fresh[-1] and not fresh[-1].get("backend rebuilt")
        print(f"timed-out job: status {job.get_status()}, JobTimeoutException in its failure: {'JobTimeoutException' in text}; "
              f"backend closed and rebuilt: {rebuilt}; sandboxes of the worker left on the engine: {left or 'none'}; "
              f"the next job ran on a new backend: {after_ran} ({after:.2f} s)")
        ok = job.get_status() == "failed" and "JobTimeoutException" in text and rebuilt and not left and after_ran
        return 0 if ok else 1
    finally:
        stack.close()


def _bursts(args: argparse.Namespace) -> int:
    """--burst: each mode's burst in turn, ``--repeat`` rounds; the median of each figure per kind and mode."""
    kinds, modes = args.kinds.split(","), args.modes.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="service-burst-"))
    load0 = os.getloadavg()[0]
    watcher = cpu.Watcher().start()
    backend = DockerBackend.from_env()  # should this fail, the watcher ends on its own when this process has gone
    stacks: dict[str, BenchStack] = {}
    rows: dict[tuple[str, str], list[dict[str, float]]] = {}
    try:
        for m in modes:
            if m != "in-process":
                stacks[m] = BenchStack(m, tmp / f"{m}.jsonl", workers=args.workers)
        for kind in kinds:  # one unmeasured job each: the first pays for images and internets
            for stack in stacks.values():
                _client(stack, POLICIES[kind])
        for _ in range(args.repeat):
            for kind in kinds:
                for mode in modes:
                    row = _burst(stacks.get(mode), backend, POLICIES[kind], args.burst, args.workers, watcher)
                    rows.setdefault((kind, mode), []).append(row)
                    print(kind, mode, {k: round(v, 3) for k, v in row.items()}, f"load {os.getloadavg()[0]:.1f}", flush=True)
    finally:
        for stack in stacks.values():
            stack.close()
        backend.close()
        watcher.close()
    print(f"\n{args.burst} runs at once, {args.workers} workers, median of {args.repeat} bursts "
          f"(load average {load0:.1f} before, {os.getloadavg()[0]:.1f} after; {os.cpu_count()} cores)")
    for (kind, mode), v in rows.items():
        m = {c: statistics.median(r[c] for r in v) for c in v[0]}
        core = m["sandbox/run"] + m["grader/run"] + m["api+redis/run"] + m["engine/run"]
        print(f"  {kind:8} {mode:10} " + ", ".join(f"{c} {x:.3f}" for c, x in m.items()) + f", core-s/run {core:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
