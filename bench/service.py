"""The run service under load: N concurrent clients on loopback against a running service (``make serve``).

Measures, in one bench run,

* **fresh runs**: N clients at once, each sending a policy of its own (no
  cache hit), each polling its job until it ends: p50/p95 latency from POST to
  the result, throughput (runs a second over the whole burst), errors (any
  answer other than 202 then ``finished``: must be 0);
* **cache hits**: N clients at once sending a policy the service already ran:
  p50/p95 from POST to the cached result;
* **one client alone**: ``--single`` fresh runs sent one after another, so no
  job waits in the queue: the service's own cost per run (HTTP, Redis, a work
  horse, polling) on top of the run itself;
* the **phases** of each fresh and lone job (``phases_p50_s``), from RQ's own
  stamps in this machine's Redis: the queue (API, queue, fork), the job in its
  horse, the run itself (the result's ``seconds``), the horse's cost around the
  run (imports, engine, the hub), and the client's polling lag; the run's own
  phases (world, start, probes...) are not in the service's JSON:
  ``bench/service_cost.py`` times them inside the job, with the CPU of each;
* a **local CLI probe** of the same kind of policy (``python -m grader probe
  POLICY --json --backend docker``, a fresh process, median of ``--local-repeat``)
  and the ratio of each remote p50 to it. The target (at most 1.5) is the lone
  client's: with N clients on two workers a run waits for about N/4 others
  (``fresh.p50_s`` is mostly queue), which only more workers shorten.

The token needs limits above N (the operator token ``make serve`` prints has
30 runs a minute and 4 jobs): without ``--token``, the bench issues its own in
``$SANDBOX_LAB_SERVICE_DIR`` (the same machine's service), with room for N.

    python bench/service.py [--url http://127.0.0.1:8000] [--clients 50] [--token TOKEN] [--local-repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

NAIVE = json.loads((REPO / "examples" / "naive.json").read_text())


def _request(url: str, token: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method,
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


# per job, for the phases: (job id, wall clock at the POST, wall clock when the client saw its end, the run's own seconds)
_SEEN: list[tuple[str, float, float, Optional[float]]] = []
_SEEN_LOCK = threading.Lock()


def _one(url: str, token: str, policy: dict[str, Any], timeout: float) -> tuple[float, Optional[str], bool]:
    """(seconds from POST to the result, an error or None, whether it was cached).

    Polls as ``--backend remote`` does (``backends.remote``: the first poll after
    0.2 s, each wait 1.5x the last, at most 2 s), so the latency is what a
    learner waits, and 50 clients load the API as 50 learners would."""
    from grader.backends.remote import _FIRST_POLL_S, _MAX_POLL_S

    delay = _FIRST_POLL_S
    start = time.monotonic()
    posted = time.time()
    status, accepted = _request(url, token, "POST", "/v1/probe", {"policy": policy})
    if status != 202:
        return time.monotonic() - start, f"POST {status} {accepted.get('error', {}).get('code')}", False
    while True:
        status, job = _request(url, token, "GET", accepted["url"])
        if status != 200:
            return time.monotonic() - start, f"GET {status}", False
        if job["status"] == "finished":
            if not job["cached"]:
                with _SEEN_LOCK:
                    _SEEN.append((accepted["job"], posted, time.time(), (job.get("result") or {}).get("seconds")))
            return time.monotonic() - start, None, bool(job["cached"])
        if job["status"] == "failed":
            return time.monotonic() - start, f"failed {job['error']['code']}", False
        if time.monotonic() - start > timeout:
            return time.monotonic() - start, "timeout", False
        time.sleep(delay)
        delay = min(delay * 1.5, _MAX_POLL_S)


def _burst(url: str, token: str, policies: list[dict[str, Any]], timeout: float) -> tuple[list[tuple[float, Optional[str], bool]], float]:
    results: list[Optional[tuple[float, Optional[str], bool]]] = [None] * len(policies)
    gate = threading.Barrier(len(policies))

    def client(i: int) -> None:
        gate.wait()  # every client starts at once
        results[i] = _one(url, token, policies[i], timeout)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(len(policies))]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r for r in results if r is not None], time.monotonic() - start


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _phases(seen: list[tuple[str, float, float, Optional[float]]]) -> Optional[dict[str, float]]:
    """Median seconds of each part of a job's wait, from RQ's own stamps (this machine's Redis,
    ``$SANDBOX_LAB_REDIS_URL`` as ``make serve`` sets it): waiting in the queue (POST to the horse's start: the API,
    the queue, the fork), the job in its horse, the run itself (the result's ``seconds``: the Docker run, without
    the horse's imports and backend), the horse's own cost around the run, and the client's polling lag (the job's
    end to the poll that saw it). None when Redis cannot be read from here."""
    from datetime import timezone

    from rq.job import Job
    from rq.serializers import JSONSerializer

    from grader.hosted.jobs import open_redis
    from grader.hosted.settings import service_settings

    def stamp(dt: Any) -> float:
        return (dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt).timestamp()

    try:
        conn = open_redis(service_settings())
        rows = []
        for job_id, posted, saw, run_s in seen:
            job = Job.fetch(job_id, connection=conn, serializer=JSONSerializer)
            started, ended = stamp(job.started_at), stamp(job.ended_at)
            rows.append({"queue (API, queue, fork)": started - posted, "in the horse": ended - started,
                         "run (result seconds)": run_s or 0.0, "horse around the run": ended - started - (run_s or 0.0),
                         "poll lag": saw - ended})
    except Exception as exc:  # noqa: BLE001 - the phases are extra; the bench's figures stand without them
        print(f"(no phases: this machine's Redis cannot be read: {exc})", file=sys.stderr)
        return None
    return {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]} if rows else None


def _local_probe(repeat: int) -> float:
    times = []
    with tempfile.TemporaryDirectory() as d:
        for i in range(repeat):
            path = Path(d) / f"p{i}.json"
            path.write_text(json.dumps({**NAIVE, "network": {"allowedDomains": [*NAIVE["network"]["allowedDomains"], f"local{i}-{time.time_ns()}.example.com"]}}))
            start = time.monotonic()
            done = subprocess.run([sys.executable, "-m", "grader", "probe", str(path), "--json", "--backend", "docker"],
                                  cwd=REPO, capture_output=True, text=True)
            times.append(time.monotonic() - start)
            if done.returncode != 0:
                raise SystemExit(f"the local probe failed (exit {done.returncode}): {(done.stderr or done.stdout)[-800:]}")
    return statistics.median(times)


def _bench_token(clients: int) -> str:
    from grader.hosted.settings import service_settings
    from grader.hosted.tokens import issue_token

    return issue_token(service_settings().tokens_file, f"bench-{time.strftime('%Y%m%dT%H%M%S')}",
                       rate=max(60, 4 * clients), jobs=max(4, 2 * clients), expires_days=1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--token", default=None)
    ap.add_argument("--local-repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--single", type=int, default=5, help="fresh runs sent one at a time (0: skip)")
    args = ap.parse_args()
    token = args.token or _bench_token(args.clients)
    tag = time.time_ns()
    fresh_policies = [{**NAIVE, "network": {"allowedDomains": [*NAIVE["network"]["allowedDomains"], f"c{i}-{tag}.example.com"]}}
                      for i in range(args.clients)]
    fresh, wall = _burst(args.url, token, fresh_policies, args.timeout)
    fresh_phases = _phases(list(_SEEN))
    _SEEN.clear()
    ok = [s for s, err, _ in fresh if err is None]
    errors = [err for _, err, _ in fresh if err is not None]
    cached, cached_wall = _burst(args.url, token, [fresh_policies[0]] * args.clients, args.timeout)
    hits = [s for s, err, was in cached if err is None and was]
    alone = [_one(args.url, token, {**NAIVE, "network": {"allowedDomains": [*NAIVE["network"]["allowedDomains"], f"s{i}-{tag}.example.com"]}},
                  args.timeout) for i in range(args.single)]
    alone_phases = _phases(list(_SEEN))
    alone_ok = [s for s, err, _ in alone if err is None]
    alone_errors = [err for _, err, _ in alone if err is not None]
    local = _local_probe(args.local_repeat)
    p50 = _pct(ok, 0.5)
    report = {
        "clients": args.clients,
        "fresh": {"p50_s": round(p50, 3), "p95_s": round(_pct(ok, 0.95), 3), "runs_per_s": round(len(ok) / wall, 3),
                  "wall_s": round(wall, 2), "errors": len(errors), "error_kinds": sorted(set(errors)),
                  "phases_p50_s": fresh_phases},
        "cached": {"p50_s": round(_pct(hits, 0.5), 4), "p95_s": round(_pct(hits, 0.95), 4), "hits": len(hits),
                   "errors": sum(1 for _, err, _ in cached if err is not None), "wall_s": round(cached_wall, 2)},
        "alone": {"runs": len(alone_ok), "errors": len(alone_errors), "p50_s": round(_pct(alone_ok, 0.5), 3),
                  "phases_p50_s": alone_phases,
                  "p50_over_local": round(_pct(alone_ok, 0.5) / local, 2) if alone_ok else None},
        "local_cli_probe_s": round(local, 3),
        "remote_p50_over_local": round(p50 / local, 2),
    }
    print(json.dumps(report, indent=2))
    return 0 if not errors and not alone_errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
