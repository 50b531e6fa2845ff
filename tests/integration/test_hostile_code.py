"""Hostile code in the hardened sandbox: fork bombs, a full ``/tmp``, floods, endless loops, and what a sandbox can reach.

Every test here runs real containers. Hostile code cannot go through the probe
runner (it is fixed code in the image), so ``_Hostile`` starts the sandbox
image with a command of the test's own, hardened by the backend's own
``hardened_options`` for the plan's ``Hardening`` (read-only root, no
capabilities, ``no-new-privileges``, uid 1000, PID, memory, CPU and open-file
limits, a small private ``/tmp``), under the backend's wall clock, and under
the runtime ``SANDBOX_LAB_RUNTIME`` names (e.g. gVisor's runsc), as the backend's. Everything
it makes carries the backend's labels, so ``no_leftovers`` and ``cleanup`` see
it like any run's leftovers.

While a hostile container runs, a normal run goes on beside it and must give
the same verdicts as the static prediction: the machine stayed usable.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Iterator, Optional

import pytest

from grader import load_policy, predict
from grader.backends.docker.backend import LABEL, LABEL_PID, LABEL_ROLE, hardened_options
from grader.backends.docker.resources import Resources
from grader.backends.docker.runtimes import process_limits, runtime_from_env, sandbox_runtime
from grader.backends.docker.engine import DockerEngine
from grader.core.plan import Hardening, build_plan
from grader.core.world import load_world

from faultkit import PROXIED, assert_as_predicted

pytestmark = [pytest.mark.docker, pytest.mark.slow]


class _Beside:
    """A normal run of ``policy`` in a thread, started by ``_Hostile.run`` once the attack is under way: it must start
    before the attack ends (a neighbour that ran before or after it proves nothing) and still be right."""

    def __init__(self, backend: Any, policy: Any = PROXIED) -> None:
        self.policy = policy
        self._backend = backend
        self._pool = ThreadPoolExecutor(max_workers=1)
        self._fut: Optional[Future[Any]] = None
        self.started = 0.0

    def start(self) -> None:
        self.started = time.monotonic()
        self._fut = self._pool.submit(self._backend.run, build_plan(load_policy(self.policy) if self.policy is not None else None))

    def check(self, ran: _Ran) -> None:
        try:
            assert self._fut is not None, "the neighbour run was never started"
            result = self._fut.result(timeout=180)
        finally:
            self._pool.shutdown()
        assert ran.started < self.started < ran.ended, "the neighbour run did not start while the attack ran"
        assert_as_predicted(result, self.policy)


# --- hostile code in the hardened sandbox -------------------------------------------------


@dataclass
class _Ran:
    output: str
    seconds: float
    timed_out: bool
    exit_code: Optional[int]
    max_pids: int = 0
    started: float = 0.0  # time.monotonic() when the container was started, and when it had ended
    ended: float = 0.0

    def last_json(self) -> dict[str, Any]:
        for line in reversed(self.output.splitlines()):
            if line.startswith("{"):
                return dict(json.loads(line))
        raise AssertionError(f"no JSON line in the container's output: {self.output[-2000:]!r}")


@dataclass
class _Hostile:
    """Runs a command of the test's own in the sandbox image, hardened by ``hardened_options`` as the backend hardens a run."""

    client: Any
    image: str
    run_id: str = field(default_factory=lambda: "sl-test-" + secrets.token_hex(4))
    made: list[Any] = field(default_factory=list)

    @property
    def labels(self) -> dict[str, str]:
        return {LABEL: self.run_id, LABEL_PID: str(os.getpid())}

    def network(self, suffix: str) -> Any:
        """A network made as the backend makes a run's: internal, and no host address on the bridge."""
        from grader.backends.docker.simnet import create_network

        n = self.client.networks.get(create_network(DockerEngine(self.client), f"{self.run_id}-{suffix}", self.labels).id)  # the backend's own way
        self.made.append(n)
        return n

    def service(self, image: str, cmd: list[str], network: Any, role: str) -> tuple[Any, str]:
        c = self.client.containers.create(image, cmd, name=f"{self.run_id}-{role}", labels={**self.labels, LABEL_ROLE: role},
                                          network=network.name, mem_limit="64m", pids_limit=64)
        self.made.append(c)
        c.start()
        c.reload()
        return c, c.attrs["NetworkSettings"]["Networks"][network.name]["IPAddress"]

    def run(self, cmd: list[str], hardening: Hardening, *, network: Any = None, name: str = "sandbox",
            watch_pids: bool = False, beside: Optional[_Beside] = None, beside_after: str = "") -> _Ran:
        """Run ``cmd`` hardened; ``beside`` is started once the container runs (and has printed ``beside_after``)."""
        h = hardening
        kwargs: dict[str, Any] = dict(
            # the backend's own settings, under the runtime SANDBOX_LAB_RUNTIME names (as the backend's): the two cannot drift apart
            hardened_options(h, sandbox_runtime(DockerEngine(self.client), runtime_from_env(os.environ))),
            name=f"{self.run_id}-{name}", labels={**self.labels, LABEL_ROLE: "sandbox"},
            working_dir="/home/user", environment={"HOME": "/home/user", "PYTHONDONTWRITEBYTECODE": "1"},
        )
        if network is None:
            kwargs["network_mode"] = "none"
        else:
            kwargs["network"] = network.name
        c = self.client.containers.create(self.image, cmd, **kwargs)
        self.made.append(c)
        max_pids = [0]
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                try:
                    s = self.client.api.stats(c.id, stream=False, one_shot=True)
                    max_pids[0] = max(max_pids[0], int((s.get("pids_stats") or {}).get("current") or 0))
                except Exception:  # noqa: BLE001 - the container may be gone between two samples
                    pass
                stop.wait(0.2)

        started = time.monotonic()
        c.start()
        sampler = threading.Thread(target=sample, daemon=True)
        if watch_pids:
            sampler.start()
        if beside is not None:
            deadline = started + h.timeout_s
            while beside_after and time.monotonic() < deadline and beside_after.encode() not in c.logs(stdout=True, stderr=False):
                time.sleep(0.05)
            beside.start()
        timed_out = False
        try:
            # the backend's wall clock: wait, then kill
            status = c.wait(timeout=h.timeout_s)
            code: Optional[int] = int(status["StatusCode"])
        except Exception:  # noqa: BLE001 - requests' ReadTimeout: the wall clock ran out
            timed_out = True
            c.kill()
            code = int(c.wait(timeout=30)["StatusCode"])
        ended = time.monotonic()
        seconds = ended - started
        stop.set()
        if watch_pids:
            sampler.join(timeout=5)
        out = c.logs(stdout=True, stderr=True)[: 1 << 20].decode("utf-8", "replace")
        return _Ran(out, seconds, timed_out, code, max_pids[0], started, ended)

    def remove_all(self) -> None:
        for obj in reversed(self.made):
            try:
                if hasattr(obj, "kill"):
                    obj.remove(force=True, v=True)
                else:
                    obj.remove()
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.made.clear()


@pytest.fixture()
def hostile(docker_client: Any, docker_backend: Any, no_leftovers: None) -> Iterator[_Hostile]:
    h = _Hostile(docker_client, docker_backend.images.sandbox)
    try:
        yield h
    finally:
        h.remove_all()


def _hardening(timeout_s: float, policy: Any = PROXIED) -> Hardening:
    return replace(build_plan(load_policy(policy)).hardening, timeout_s=timeout_s)


FORK_BOMB = r"""
import json, os, signal, sys, time
kids, error = 0, ""
while True:
    try:
        pid = os.fork()
    except OSError as exc:
        error = f"{exc.errno} {exc.strerror}"
        break
    if pid == 0:
        signal.pause()
        os._exit(0)
    kids += 1
    if kids > 100000:
        break
print(json.dumps({"forked": kids, "error": error}), flush=True)
while True:  # keep pressing on the limit until the wall clock ends it
    try:
        if os.fork() == 0:
            os._exit(0)
    except OSError:
        time.sleep(0.001)
"""


def test_fork_bomb_hits_the_pid_limit_and_dies_at_the_wall_clock(hostile: _Hostile, docker_backend: Any) -> None:
    h = _hardening(8.0)
    beside = _Beside(docker_backend)
    ran = hostile.run(["python3", "-c", FORK_BOMB], h, watch_pids=True, beside=beside, beside_after='"forked"')
    beside.check(ran)  # run while the bomb pressed on its limit
    res = ran.last_json()
    assert res["error"].startswith("11 "), res  # EAGAIN: the PID limit, not our loop's own bound
    assert 0 < res["forked"] < h.pids_limit, res
    # what the engine's pids cgroup holds: the sandbox's processes, or under gVisor its kernel's threads
    assert ran.max_pids <= process_limits(h.pids_limit, h.mem_bytes, runtime_from_env(os.environ)).cgroup_pids, ran.max_pids
    assert ran.timed_out and ran.exit_code == 137
    assert ran.seconds < h.timeout_s + 15, ran.seconds
    subprocess.run(["true"], check=True)  # the host can still fork


FILL = r"""
import errno, json, os, sys, time
def fill(path, limit):
    chunk, size, err = b"x" * (1 << 20), 0, ""
    try:
        with open(path, "wb") as fh:
            while size < limit:
                fh.write(chunk)
                fh.flush()
                size += len(chunk)
    except OSError as exc:
        err = errno.errorcode.get(exc.errno, str(exc.errno))
    try:
        size = os.path.getsize(path)
    except OSError:
        pass
    return {"size": size, "error": err}
out = {"tmp": fill("/tmp/fill", 1 << 30), "shm": fill("/dev/shm/fill", 1 << 30)}
for p in ("/fill", "/home/user/fill", "/opt/sandbox-lab/fill", "/var/tmp/fill"):
    try:
        open(p, "wb").close()
        out[p] = "written"
    except OSError as exc:
        out[p] = errno.errorcode.get(exc.errno, str(exc.errno))
print(json.dumps(out), flush=True)
time.sleep(float(sys.argv[1]))  # full, for the neighbour run beside it
"""


def test_filling_tmp_stops_at_its_size_and_nothing_else_is_writable(hostile: _Hostile, docker_backend: Any) -> None:
    h = _hardening(30.0)
    beside = _Beside(docker_backend)
    ran = hostile.run(["python3", "-c", FILL, "3"], h, beside=beside, beside_after='"tmp"')
    beside.check(ran)  # run while the sandbox's tmpfs and shm were full
    res = ran.last_json()
    assert not ran.timed_out and ran.exit_code == 0, ran.output[-2000:]
    assert res["tmp"]["error"] == "ENOSPC" and h.tmp_bytes - (1 << 20) <= res["tmp"]["size"] <= h.tmp_bytes, res
    # /dev/shm is another tmpfs (the plan's shm size, never above Docker's 64 MiB default): bounded, and charged to the memory limit
    assert res["shm"]["error"] == "ENOSPC" and res["shm"]["size"] <= 64 << 20, res
    for p in ("/fill", "/home/user/fill", "/opt/sandbox-lab/fill", "/var/tmp/fill"):
        assert res[p] in ("EROFS", "EACCES"), (p, res[p])


FLOOD = r"""
import errno, json, os, resource, socket, sys, time
target = (sys.argv[1], 80)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
opened, peak, errors, deadline = 0, 0, {}, time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    socks = []
    while time.monotonic() < deadline:
        try:
            s = socket.socket()
            s.setblocking(False)
        except OSError as exc:
            errors[errno.errorcode.get(exc.errno, "?")] = errors.get(errno.errorcode.get(exc.errno, "?"), 0) + 1
            break
        rc = s.connect_ex(target)
        errors[errno.errorcode.get(rc, str(rc))] = errors.get(errno.errorcode.get(rc, str(rc)), 0) + 1
        socks.append(s)
        opened += 1
    peak = max(peak, len(socks))
    for s in socks:
        s.close()
print(json.dumps({"opened": opened, "peak": peak, "nofile": soft, "results": errors}), flush=True)
while True:
    time.sleep(1)  # then hang: the wall clock ends it
"""


def test_connection_flood_to_a_missing_address_is_bounded_and_dies_at_the_wall_clock(hostile: _Hostile, docker_backend: Any) -> None:
    h = _hardening(10.0)
    net = hostile.network("sbx")
    beside = _Beside(docker_backend)
    # TEST-NET-2: assigned to nobody, and not this machine's uplink subnet
    ran = hostile.run(["python3", "-c", FLOOD, "198.51.100.7", "5"], h, network=net, beside=beside)
    beside.check(ran)
    res = ran.last_json()
    assert res["opened"] > 1000, res  # it really flooded...
    assert res["peak"] <= res["nofile"] and res["nofile"] <= 1 << 20, res  # ...within the open-files limit
    assert set(res["results"]) <= {"EINPROGRESS", "EMFILE", "ENETUNREACH", "EHOSTUNREACH", "EAGAIN"}, res
    assert ran.timed_out and ran.exit_code == 137 and ran.seconds < h.timeout_s + 15, (ran.seconds, ran.exit_code)


def test_endless_loop_is_killed_at_the_wall_clock(hostile: _Hostile, docker_backend: Any) -> None:
    h = _hardening(3.0)
    beside = _Beside(docker_backend)
    ran = hostile.run(["python3", "-c", "while True: pass"], h, beside=beside)
    beside.check(ran)
    assert ran.timed_out and ran.exit_code == 137
    assert h.timeout_s <= ran.seconds < h.timeout_s + 10, ran.seconds


def test_the_backends_own_wall_clock_ends_a_run_and_no_unfinished_probe_is_blocked(
        docker_backend: Any, docker_client: Any, no_leftovers: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real backend, with a wall clock too short for its probes: unfinished probes are errors, never blocked."""
    plan = build_plan(load_policy(PROXIED))
    # far shorter than the probes take, so the clock nearly always wins. Not always: a sandbox prepared ahead runs
    # its probes from the go, while a loaded machine's engine can take that long to answer the grader's requests
    # (seen once in CI: every probe ran). So the sandbox is stopped (SIGSTOP, from outside: it still "runs" for the
    # engine) right after its go: only the clock ends it. A run that still finished is made again.
    engine = docker_backend.engine
    real_send = engine.send_stdin
    armed = [False]  # the run's own sandbox only (its first go), never a next session's

    def go_then_stop(c: Any, data: bytes) -> None:
        real_send(c, data)
        if armed[0]:
            armed[0] = False
            docker_client.api.kill(c.id, signal="SIGSTOP")

    monkeypatch.setattr(engine, "send_stdin", go_then_stop)
    short = replace(plan, hardening=replace(plan.hardening, timeout_s=0.02))
    static = predict(plan.policy)
    unfinished = []
    for _ in range(3):
        started = time.monotonic()
        armed[0] = True
        r = docker_backend.run(short)
        assert time.monotonic() - started < 60
        for o in r.probes:  # every run, cut short or not, says only what it saw
            assert o.outcome in (static.outcome(o.id).outcome, "error"), (o.id, o.outcome, o.evidence)
            if o.outcome == "blocked":
                assert o.evidence, o.id
        unfinished = [o for o in r.probes if o.outcome == "error"]
        if unfinished:
            assert any("killed after" in n for n in r.notes), r.notes
            break
    assert unfinished, "three runs finished within 0.02 s: this test proves nothing"


# --- what the sandbox can reach ----------------------------------------------------------------

REACH = r"""
import json, os, socket, sys, threading
token, targets = sys.argv[1], json.loads(sys.argv[2])
out = {}
def attempt(name, host, port):
    s = socket.socket()
    s.settimeout(2.0)
    try:
        s.connect((host, port))
        s.sendall(f"{token} {name}\n".encode())
        out[name] = "connected"
    except OSError as exc:
        out[name] = f"{type(exc).__name__}: {exc}"
    finally:
        s.close()
threads = [threading.Thread(target=attempt, args=t) for t in targets]
for t in threads: t.start()
for t in threads: t.join()
for path in ("/var/run/docker.sock", "/run/docker.sock", "/var/run/docker/docker.sock"):
    u = socket.socket(socket.AF_UNIX)
    try:
        u.connect(path)
        out[path] = "connected"
    except OSError as exc:
        out[path] = f"{type(exc).__name__}: {exc}"
    finally:
        u.close()
print(json.dumps(out), flush=True)
"""

LISTEN = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 8080)); s.listen(16)
print("listening", flush=True)
while True:
    c, a = s.accept(); c.settimeout(2)
    try: print("got", a[0], c.recv(200).decode("utf-8", "replace").strip(), flush=True)
    except OSError: pass
    c.close()
"""


def _host_addresses() -> list[str]:
    out = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True).stdout
    return [line.split()[3].split("/")[0] for line in out.splitlines() if " lo " not in f" {line.split()[1]} "]


def _wait_listening(container: Any) -> None:
    deadline = time.monotonic() + 20
    while b"listening" not in container.logs():
        assert time.monotonic() < deadline, container.logs()
        time.sleep(0.05)


@contextmanager
def _host_listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP listener on the real host (all addresses): yields its port and what it received.

    It has already heard a local "local check" line when the body starts, so its
    silence towards the sandbox means something (the positive control).
    """
    host = socket.socket()
    host.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    host.bind(("0.0.0.0", 0))
    host.listen(16)
    host.settimeout(0.2)
    hits: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                c, _ = host.accept()
            except OSError:
                continue
            with c:
                c.settimeout(1)
                try:
                    hits.append(c.recv(200))
                except OSError:
                    pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        with socket.create_connection(("127.0.0.1", host.getsockname()[1]), timeout=2) as s:
            s.sendall(b"local check\n")
        time.sleep(0.3)
        yield host.getsockname()[1], hits
    finally:
        stop.set()
        t.join(timeout=5)
        host.close()


def test_metadata_docker_socket_host_and_other_runs_are_unreachable(hostile: _Hostile, docker_backend: Any) -> None:
    token = secrets.token_hex(6)
    own, other = hostile.network("sbx"), hostile.network("other")
    own_sink, own_ip = hostile.service(docker_backend.images.services, ["python3", "-c", LISTEN], own, "internet")
    other_sink, other_ip = hostile.service(docker_backend.images.services, ["python3", "-c", LISTEN], other, "other-internet")
    _wait_listening(own_sink)
    _wait_listening(other_sink)
    with _host_listener() as (host_port, hits):
        own.reload()
        gateway = ((own.attrs.get("IPAM") or {}).get("Config") or [{}])[0].get("Gateway")
        targets = [("own-run", own_ip, 8080), ("other-run", other_ip, 8080),
                   ("metadata", "169.254.169.254", 80), ("metadata-https", "169.254.169.254", 443)]
        targets += [(f"host-{a}", a, host_port) for a in _host_addresses()]
        targets += [(f"jupyter-{a}", a, 8888) for a in _host_addresses()]
        if gateway:
            targets += [("gateway", gateway, host_port)]
        ran = hostile.run(["python3", "-c", REACH, token, json.dumps(targets)], _hardening(30.0), network=own)
    res = ran.last_json()
    # positive control: the sandbox's own network works, and the sink logs the token
    assert res["own-run"] == "connected" and token.encode() in own_sink.logs(), (res, own_sink.logs())
    for name, *_ in targets[1:]:
        assert res[name] != "connected", (name, res[name])
    for path in ("/var/run/docker.sock", "/run/docker.sock", "/var/run/docker/docker.sock"):
        assert res[path].startswith(("FileNotFoundError", "PermissionError")), (path, res[path])
    assert token.encode() not in other_sink.logs()
    assert hits == [b"local check\n"], hits



# --- allowed names that mean the machine itself -----------------------------------------------

THROUGH_PROXY = r"""
import json, socket, sys, threading
proxy, token, targets = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
host, port = proxy.split(":")
out = {}
def attempt(name, target, tport):
    s = socket.create_connection((host, int(port)), timeout=5)
    try:
        s.sendall(f"CONNECT {target}:{tport} HTTP/1.1\r\nHost: {target}:{tport}\r\n\r\n".encode())
        head = s.recv(200).split(b"\r\n", 1)[0].decode()
        if head.startswith("HTTP/1.1 200"):
            s.sendall(f"{token} {name}\n".encode())
        out[name] = head
    except OSError as exc:
        out[name] = f"{type(exc).__name__}: {exc}"
    finally:
        s.close()
threads = [threading.Thread(target=attempt, args=t) for t in targets]
for t in threads: t.start()
for t in threads: t.join()
s = socket.create_connection((host, int(port)), timeout=5)
s.sendall(f"GET http://169.254.169.254/latest/meta-data/{token} HTTP/1.1\r\n\r\n".encode())
out["metadata-get"] = s.recv(200).split(b"\r\n", 1)[0].decode()
s.close()
print(json.dumps(out), flush=True)
"""


def test_allowed_localhost_metadata_and_host_names_never_reach_the_real_host(hostile: _Hostile, docker_backend: Any) -> None:
    """A policy may list localhost, host.docker.internal, 169.254.169.254 or the host's own addresses: the proxy
    sends every one to the simulated internet (the attacker's server), never to the machine or its metadata service."""
    token = secrets.token_hex(6)
    with _host_listener() as (host_port, hits):
        names = ["localhost", "127.0.0.1", "host.docker.internal", "169.254.169.254", *_host_addresses()]
        warm = docker_backend.sharing.take(Resources(), load_world()).proxy
        # a warm proxy may have served earlier runs (the pool reuses them): read only what this test caused
        since = len(warm.workdir.read("out/proxy.jsonl"))
        try:
            warm.hand_over(names, [])
            targets = [(f"{n}:{p}", n, p) for n in names for p in (host_port, 80, 443)]
            ran = hostile.run(["python3", "-c", THROUGH_PROXY, f"{warm.ip}:3128", token, json.dumps(targets)],
                              _hardening(30.0), network=warm.network)
            time.sleep(0.5)
        finally:
            proxy_log = warm.workdir.read("out/proxy.jsonl", since).decode()
            sink_log = warm.internet.out.read("http.jsonl").decode()
            warm.remove(docker_backend.leftovers)
    res = ran.last_json()
    assert hits == [b"local check\n"], hits  # nothing of the sandbox's reached the real host
    # the names were allowed and went to the simulated internet: the attacker's server answered the metadata GET
    assert res["metadata-get"].startswith("HTTP/1.1 200"), res
    assert any(token in line and '"host": "169.254.169.254"' in line for line in sink_log.splitlines()), sink_log[-2000:]
    for name, _, port in targets:
        if port == host_port:  # only the sinks' ports exist there: a host service's port finds nothing
            assert not res[name].startswith("HTTP/1.1 200"), (name, res[name])
    decisions = [json.loads(line) for line in proxy_log.splitlines() if token not in line and '"CONNECT"' in line]
    assert decisions and all(d["decision"] == "allow" for d in decisions if d["port"] != host_port), decisions
    # a host service's port is no port the attacker's server serves: refused before any lookup, never dialled
    from grader.services.proxy import NOT_SERVED

    assert all(d["decision"] == "deny" and d["reason"].startswith(NOT_SERVED) for d in decisions if d["port"] == host_port), decisions


# --- the same hostile programs, as a learner's attack -----------------------------------------
# Learner code is hostile code: `sandbox-lab attack` runs it through the backend's own execute, in the
# sandbox of a level, with a fresh flag. The weakest sandbox (level 1, the plain container: Docker's
# defaults, but the backend's limits) and a policy's sandbox (level 2, behind the proxy) must both hold.

from grader.course.ladder import ATTACK_TIMEOUT_S, attack, level  # noqa: E402 - this section's own imports


def _as_attack(program: str, *argv: str) -> str:
    """A hostile program as an attack file: the same code, its arguments set as if given on the command line."""
    return f"import sys\nsys.argv = {['attack.py', *argv]!r}\n" + program


def _last_json(output: str) -> dict[str, Any]:
    return _Ran(output, 0.0, False, None).last_json()


ATTACK_LEVELS = [pytest.param(1, id="plain-container"), pytest.param(2, id="policy")]


@pytest.mark.parametrize("number", ATTACK_LEVELS)
def test_a_fork_bomb_attack_hits_the_pid_limit_and_dies_at_the_wall_clock(number: int, docker_backend: Any, no_leftovers: None) -> None:
    lv = level(number)
    started = time.monotonic()
    result = attack(lv, _as_attack(FORK_BOMB), docker_backend)
    res = _last_json(result.output)
    assert res["error"].startswith("11 ") and 0 < res["forked"] < lv.plan().hardening.pids_limit, res
    assert result.timed_out and result.exit_code is None and not result.captured
    assert time.monotonic() - started < ATTACK_TIMEOUT_S + 30
    subprocess.run(["true"], check=True)  # the host can still fork


@pytest.mark.parametrize("number", ATTACK_LEVELS)
def test_a_disk_filling_attack_stops_at_its_tmpfs(number: int, docker_backend: Any, no_leftovers: None) -> None:
    lv = level(number)
    result = attack(lv, _as_attack(FILL), docker_backend)
    res = _last_json(result.output)
    h = lv.plan().hardening
    assert res["tmp"]["error"] == "ENOSPC" and res["tmp"]["size"] <= h.tmp_bytes, res
    assert res["shm"]["error"] == "ENOSPC" and res["shm"]["size"] <= 64 << 20, res
    assert res["/opt/sandbox-lab/fill"] in ("EROFS", "EACCES"), res  # the runner's own files stay as they were
    if lv.policy is not None:  # the hardened sandbox: a read-only root
        assert all(res[p] in ("EROFS", "EACCES") for p in ("/fill", "/var/tmp/fill")), res
    assert not result.captured and not result.timed_out


@pytest.mark.parametrize("number", ATTACK_LEVELS)
def test_a_connection_flood_attack_is_bounded_by_the_open_files_limit(number: int, docker_backend: Any, no_leftovers: None) -> None:
    result = attack(level(number), _as_attack(FLOOD, "198.51.100.7", "5"), docker_backend)
    res = _last_json(result.output)
    assert res["opened"] > 1000 and res["peak"] <= res["nofile"] <= 1 << 20, res
    assert result.timed_out and not result.captured


@pytest.mark.parametrize("number", ATTACK_LEVELS)
def test_an_attack_reaches_neither_the_host_nor_the_metadata_address_nor_other_runs(
    number: int, hostile: _Hostile, docker_backend: Any
) -> None:
    token = secrets.token_hex(6)
    other = hostile.network("other")
    other_sink, other_ip = hostile.service(docker_backend.images.services, ["python3", "-c", LISTEN], other, "other-internet")
    _wait_listening(other_sink)
    with _host_listener() as (host_port, hits):
        targets = [("other-run", other_ip, 8080), ("metadata", "169.254.169.254", 80), ("metadata-https", "169.254.169.254", 443)]
        targets += [(f"host-{a}", a, host_port) for a in _host_addresses()]
        targets += [(f"jupyter-{a}", a, 8888) for a in _host_addresses()]
        result = attack(level(number), _as_attack(REACH, token, json.dumps(targets)), docker_backend)
    res = _last_json(result.output)
    for name, *_ in targets:
        assert res[name] != "connected", (name, res[name])
    for path in ("/var/run/docker.sock", "/run/docker.sock", "/var/run/docker/docker.sock"):
        assert res[path].startswith(("FileNotFoundError", "PermissionError")), (path, res[path])
    assert token.encode() not in other_sink.logs()
    assert hits == [b"local check\n"], hits
    assert not result.captured
