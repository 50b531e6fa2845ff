"""The grader under faults and hostile code: dead services, fork bombs, floods, kills, and what a sandbox can reach.

Every test here runs real containers. Hostile code cannot go through the probe
runner (it is fixed code in the image), so ``_Hostile`` starts the sandbox
image the way the Docker backend does for a plan (the plan's ``Hardening``:
read-only root, no capabilities, ``no-new-privileges``, uid 1000, PID, memory
and CPU limits, a small private ``/tmp``, the wall clock) with a command of
the test's own. Everything it makes carries the backend's labels, so
``no_leftovers`` and ``cleanup`` see it like any run's leftovers.

While a hostile container runs, a normal run goes on beside it and must give
the same verdicts as the static prediction: the machine stayed usable.
"""

from __future__ import annotations

import gc
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

from grader import load_policy, predict
from grader.backends.docker import LABEL, LABEL_PID, LABEL_ROLE, DockerBackend, cleanup
from grader.backends.static import StaticBackend
from grader.batch import grade_batch
from grader.errors import InfrastructureError
from grader.outcomes import RunResult
from grader.plan import Hardening, RunPlan, build_plan
from grader.tasks import load_task

pytestmark = [pytest.mark.docker, pytest.mark.slow]

CORPUS: dict[str, Any] = json.loads((Path(__file__).parent.parent / "fixtures" / "corpus.json").read_text())["policies"]
PROXIED = {"network": {"allowedDomains": ["github.com"]}}  # a proxy, an internet, readable secrets
NETWORK_PROBES = ("net-direct-ip", "net-dns-exfil", "net-attacker-domain", "net-host-gateway",
                  "exfil-via-allowed-domain", "exfil-secret", "job-fetch-npm", "job-fetch-pypi")
MINE = f"{LABEL_PID}={os.getpid()}"  # other engineers' runs share this engine: only ever touch our own


def _outcomes(r: RunResult) -> dict[str, str]:
    return {o.id: o.outcome for o in r.probes}


def _assert_as_predicted(r: RunResult, policy: Any) -> None:
    static = predict(load_policy(policy) if policy is not None else None)
    wrong = {k: f"docker={v} static={static.outcome(k).outcome} ({r.outcome(k).evidence})"
             for k, v in _outcomes(r).items() if v != static.outcome(k).outcome}
    assert wrong == {} and not r.notes, (wrong, r.notes)


class _Beside:
    """A normal run of ``policy`` in a thread, started now: it must still be right when the test is done."""

    def __init__(self, backend: Any, policy: Any = PROXIED) -> None:
        self.policy = policy
        self._pool = ThreadPoolExecutor(max_workers=1)
        self._fut = self._pool.submit(backend.run, build_plan(load_policy(policy) if policy is not None else None))

    def check(self) -> None:
        try:
            _assert_as_predicted(self._fut.result(timeout=180), self.policy)
        finally:
            self._pool.shutdown()


# --- hostile code in the hardened sandbox -------------------------------------------------


@dataclass
class _Ran:
    output: str
    seconds: float
    timed_out: bool
    exit_code: Optional[int]
    max_pids: int = 0

    def last_json(self) -> dict[str, Any]:
        for line in reversed(self.output.splitlines()):
            if line.startswith("{"):
                return dict(json.loads(line))
        raise AssertionError(f"no JSON line in the container's output: {self.output[-2000:]!r}")


@dataclass
class _Hostile:
    """Runs a command of the test's own in the sandbox image, hardened exactly as ``plan.hardening`` says."""

    client: Any
    image: str
    run_id: str = field(default_factory=lambda: "sl-test-" + secrets.token_hex(4))
    made: list[Any] = field(default_factory=list)

    @property
    def labels(self) -> dict[str, str]:
        return {LABEL: self.run_id, LABEL_PID: str(os.getpid())}

    def network(self, suffix: str) -> Any:
        """A network made as the backend makes a run's: internal, and no host address on the bridge."""
        n = self.client.networks.create(
            f"{self.run_id}-{suffix}", driver="bridge", internal=True, labels=self.labels,
            options={"com.docker.network.bridge.inhibit_ipv4": "true"},
        )
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
            watch_pids: bool = False) -> _Ran:
        h = hardening
        kwargs: dict[str, Any] = dict(
            name=f"{self.run_id}-{name}", labels={**self.labels, LABEL_ROLE: "sandbox"},
            user=h.user, read_only=h.read_only_root, tmpfs={"/tmp": f"size={h.tmp_bytes},mode=1777"},
            pids_limit=h.pids_limit, mem_limit=h.mem_bytes, memswap_limit=h.mem_bytes, nano_cpus=h.nano_cpus,
            working_dir="/home/user", environment={"HOME": "/home/user", "PYTHONDONTWRITEBYTECODE": "1"},
        )
        if h.cap_drop_all:
            kwargs["cap_drop"] = ["ALL"]
        if h.no_new_privileges:
            kwargs["security_opt"] = ["no-new-privileges"]
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
        timed_out = False
        try:
            # the backend's wall clock: wait, then kill
            status = c.wait(timeout=h.timeout_s)
            code: Optional[int] = int(status["StatusCode"])
        except Exception:  # noqa: BLE001 - requests' ReadTimeout: the wall clock ran out
            timed_out = True
            c.kill()
            code = int(c.wait(timeout=30)["StatusCode"])
        seconds = time.monotonic() - started
        stop.set()
        if watch_pids:
            sampler.join(timeout=5)
        out = c.logs(stdout=True, stderr=True)[: 1 << 20].decode("utf-8", "replace")
        return _Ran(out, seconds, timed_out, code, max_pids[0])

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
    ran = hostile.run(["python3", "-c", FORK_BOMB], h, watch_pids=True)
    beside.check()
    res = ran.last_json()
    assert res["error"].startswith("11 "), res  # EAGAIN: the PID limit, not our loop's own bound
    assert 0 < res["forked"] < h.pids_limit, res
    assert ran.max_pids <= h.pids_limit, ran.max_pids
    assert ran.timed_out and ran.exit_code == 137
    assert ran.seconds < h.timeout_s + 15, ran.seconds
    subprocess.run(["true"], check=True)  # the host can still fork


FILL = r"""
import errno, json, os
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
"""


def test_filling_tmp_stops_at_its_size_and_nothing_else_is_writable(hostile: _Hostile, docker_backend: Any) -> None:
    h = _hardening(30.0)
    beside = _Beside(docker_backend)
    ran = hostile.run(["python3", "-c", FILL], h)
    beside.check()
    res = ran.last_json()
    assert not ran.timed_out and ran.exit_code == 0, ran.output[-2000:]
    assert res["tmp"]["error"] == "ENOSPC" and h.tmp_bytes - (1 << 20) <= res["tmp"]["size"] <= h.tmp_bytes, res
    # /dev/shm is Docker's default 64 MiB tmpfs: bounded, and charged to the memory limit
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
    ran = hostile.run(["python3", "-c", FLOOD, "198.51.100.7", "5"], h, network=net)
    beside.check()
    res = ran.last_json()
    assert res["opened"] > 1000, res  # it really flooded...
    assert res["peak"] <= res["nofile"] and res["nofile"] <= 1 << 20, res  # ...within the open-files limit
    assert set(res["results"]) <= {"EINPROGRESS", "EMFILE", "ENETUNREACH", "EHOSTUNREACH", "EAGAIN"}, res
    assert ran.timed_out and ran.exit_code == 137 and ran.seconds < h.timeout_s + 15, (ran.seconds, ran.exit_code)


def test_endless_loop_is_killed_at_the_wall_clock(hostile: _Hostile, docker_backend: Any) -> None:
    h = _hardening(3.0)
    beside = _Beside(docker_backend)
    ran = hostile.run(["python3", "-c", "while True: pass"], h)
    beside.check()
    assert ran.timed_out and ran.exit_code == 137
    assert h.timeout_s <= ran.seconds < h.timeout_s + 10, ran.seconds


def test_the_backends_own_wall_clock_ends_a_run_and_no_unfinished_probe_is_blocked(docker_backend: Any, no_leftovers: None) -> None:
    """The real backend, with a wall clock too short for its probes: unfinished probes are errors, never blocked."""
    plan = build_plan(load_policy(PROXIED))
    short = replace(plan, hardening=replace(plan.hardening, timeout_s=0.5))
    started = time.monotonic()
    r = docker_backend.run(short)
    assert time.monotonic() - started < 60
    assert any("killed after" in n for n in r.notes), r.notes
    static = predict(plan.policy)
    unfinished = [o for o in r.probes if o.outcome == "error"]
    assert unfinished, "the run finished within 0.5 s: this test proves nothing"
    for o in r.probes:
        assert o.outcome in (static.outcome(o.id).outcome, "error"), (o.id, o.outcome, o.evidence)
        if o.outcome == "blocked":
            assert o.evidence, o.id


# --- a service dies mid-run ------------------------------------------------------------------


class _ServiceKiller:
    """Kills the ``roles`` services a run uses as soon as that run's sandbox container appears.

    Which services a run uses is read from the network topology, not from
    names or labels: the containers on the sandbox's networks (its proxy, or the
    plain container's internet) and on those containers' networks (the internet
    behind a proxy, which may be shared between runs). With ``first_only``,
    only the first run is hit.
    """

    def __init__(self, client: Any, roles: tuple[str, ...], *, first_only: bool, signal: str = "SIGKILL") -> None:
        self.client, self.roles, self.first_only, self.signal = client, roles, first_only, signal
        self.killed: list[str] = []
        self.runs_seen: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> "_ServiceKiller":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _watch(self) -> None:
        done: set[str] = set()
        while not self._stop.is_set():
            for c in self.client.api.containers(all=True, filters={"label": [f"{LABEL_ROLE}=sandbox", MINE]}):
                run = (c.get("Labels") or {}).get(LABEL, "")
                if run not in self.runs_seen:
                    self.runs_seen.append(run)
                if run in done or (self.first_only and self.runs_seen.index(run) > 0):
                    continue
                try:
                    if self._kill_services_of(c["Id"]):
                        done.add(run)
                except Exception:  # noqa: BLE001 - a container vanished between list and inspect: try again
                    pass
            time.sleep(0.01)

    def _neighbours(self, container_id: str) -> set[str]:
        out: set[str] = set()
        for net in self.client.api.inspect_container(container_id)["NetworkSettings"]["Networks"]:
            out |= set((self.client.api.inspect_network(net).get("Containers") or {}))
        return out - {container_id}

    def _kill_services_of(self, sandbox_id: str) -> bool:
        near = self._neighbours(sandbox_id)
        for cid in list(near):
            near |= self._neighbours(cid)
        hit = False
        for cid in near - {sandbox_id}:
            labels = self.client.api.inspect_container(cid)["Config"]["Labels"] or {}
            if labels.get(LABEL_ROLE) in self.roles:
                self.client.api.kill(cid, signal=self.signal)
                self.killed.append(f"{labels[LABEL_ROLE]} of {labels.get(LABEL)}")
                hit = True
        return hit


def _close(backend: Any) -> None:
    close = getattr(backend, "close", None)  # a backend may keep services between runs
    if close is not None:
        close()


@pytest.mark.parametrize(("policy", "roles", "sig"), [
    pytest.param(PROXIED, ("internet",), "SIGKILL", id="proxied-internet-dies"),
    pytest.param(PROXIED, ("proxy",), "SIGKILL", id="proxied-proxy-dies"),
    pytest.param(None, ("internet",), "SIGKILL", id="plain-internet-dies"),
    pytest.param(PROXIED, ("internet",), "SIGSTOP", id="proxied-internet-hangs"),
    pytest.param(None, ("internet",), "SIGSTOP", id="plain-internet-hangs"),
])
def test_a_dead_service_never_yields_blocked_without_evidence(docker_client: Any, docker_backend: Any, no_leftovers: None,
                                                              policy: Any, roles: tuple[str, ...], sig: str) -> None:
    backend = DockerBackend(docker_client, docker_backend.images, retries=0)
    plan = build_plan(load_policy(policy) if policy is not None else None)
    try:
        with _ServiceKiller(docker_client, roles, first_only=False, signal=sig) as killer:
            try:
                r: Optional[RunResult] = backend.run(plan)
            except InfrastructureError as exc:  # loud is fine; silent is not
                r = None
                assert str(exc)
    finally:
        _close(backend)
    assert killer.killed, f"no {roles} container was killed (saw runs {killer.runs_seen}): this test proves nothing"
    if r is None:
        return
    assert any("infrastructure" in n.lower() for n in r.notes), r.notes
    got = _outcomes(r)
    silent = {p: got[p] for p in NETWORK_PROBES if got[p] not in ("error", "succeeded")}
    assert silent == {}, f"blocked without a live recorder: {silent}"


def test_a_service_that_dies_once_is_retried_and_the_retry_is_right(docker_client: Any, docker_backend: Any, no_leftovers: None) -> None:
    backend = DockerBackend(docker_client, docker_backend.images, retries=1)
    try:
        with _ServiceKiller(docker_client, ("internet",), first_only=True) as killer:
            r = backend.run(build_plan(load_policy(PROXIED)))
    finally:
        _close(backend)
    assert killer.killed and len(killer.runs_seen) >= 2, (killer.killed, killer.runs_seen)
    _assert_as_predicted(r, PROXIED)
    assert r.run_id != killer.runs_seen[0]


def test_a_sandbox_killed_mid_run_gives_errors_never_blocked(docker_client: Any, docker_backend: Any, no_leftovers: None) -> None:
    """What a dockerd restart does to a run in flight: its sandbox dies. Unfinished probes are errors."""
    killed: list[str] = []
    stop = threading.Event()

    def kill_the_sandbox() -> None:
        while not stop.is_set() and not killed:
            for c in docker_client.api.containers(filters={"label": [f"{LABEL_ROLE}=sandbox", MINE]}):  # running ones
                try:
                    docker_client.api.kill(c["Id"])
                    killed.append(c["Names"][0])
                except Exception:  # noqa: BLE001 - it ended meanwhile
                    pass
            time.sleep(0.005)

    t = threading.Thread(target=kill_the_sandbox, daemon=True)
    t.start()
    try:
        r = docker_backend.run(build_plan(load_policy(PROXIED)))
    finally:
        stop.set()
        t.join(timeout=10)
    assert killed, "the sandbox was never seen running: this test proves nothing"
    static = predict(load_policy(PROXIED))
    assert any(o.outcome == "error" for o in r.probes), "every probe finished before the kill: this test proves nothing"
    for o in r.probes:
        assert o.outcome in (static.outcome(o.id).outcome, "error"), (o.id, o.outcome, o.evidence)
        if o.outcome != "error":
            assert o.evidence, o.id


# --- load: 8 runs at once --------------------------------------------------------------------

EIGHT = ("seed-naive", "seed-secure", "plain-container", "github-wildcard-minus-uploads",
         "pypi-download", "attacker-wildcard", "write-all-but-ssh", "project-writable-hooks-and-env-protected")


def test_eight_runs_at_once_match_each_run_alone(docker_backend: Any, no_leftovers: None) -> None:
    """Canaries and tokens are per run: cross-talk between concurrent runs would change a verdict."""
    def run(name: str) -> RunResult:
        raw = CORPUS[name]
        return docker_backend.run(build_plan(load_policy(raw) if raw is not None else None))

    alone = {name: run(name) for name in EIGHT}
    with ThreadPoolExecutor(max_workers=len(EIGHT)) as pool:
        together = dict(zip(EIGHT, pool.map(run, EIGHT)))
    assert len({r.run_id for r in together.values()} | {r.run_id for r in alone.values()}) == 2 * len(EIGHT)
    for name in EIGHT:
        _assert_as_predicted(alone[name], CORPUS[name])
        _assert_as_predicted(together[name], CORPUS[name])
        assert _outcomes(together[name]) == _outcomes(alone[name]), name


# --- the grader killed mid-batch ---------------------------------------------------------------

BATCH_SCRIPT = """
import sys
from grader.backends.docker import DockerBackend
from grader.batch import grade_batch
from grader.tasks import load_task
grade_batch(load_task(sys.argv[1]), sys.argv[2], DockerBackend.from_env(), workers=2, dedupe=False, journal=sys.argv[3])
print("finished", flush=True)
"""

_FS_POLICIES = [CORPUS[n] for n in (
    "stop-persistence", "write-everything", "read-root-only", "deny-read-root", "home-writable-rc-protected",
    "write-allow-deny-same-path", "project-writable-hooks-and-env-protected", "workspace-writable-src-protected",
    "hide-etc-secrets", "tilde-home-writable", "read-src-only", "empty-policy",
)]
_BROKEN = [b"", b"{", b'{"filesystem": {"allowWrites": []}}', b"\xff\xfe\x00bad", b'{"a": NaN}', b'{"network": 1, "network": 2}']


def _write_class(folder: Path, n_valid: int) -> int:
    folder.mkdir()
    for i in range(n_valid):
        (folder / f"s{i:03d}.json").write_text(json.dumps(_FS_POLICIES[i % len(_FS_POLICIES)], indent=i % 3))
    for j, data in enumerate(_BROKEN):
        (folder / f"broken{j}.json").write_bytes(data)
    return n_valid + len(_BROKEN)


class _Counting:
    """A backend wrapper that counts runs, to prove resumed rows are not graded again."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls, self._lock = inner, 0, threading.Lock()
        self.name = inner.name

    def run(self, plan: RunPlan) -> RunResult:
        with self._lock:
            self.calls += 1
        result: RunResult = self.inner.run(plan)
        return result


def test_grader_killed_mid_batch_resumes_without_loss_or_regrading(docker_client: Any, docker_backend: Any, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch, no_leftovers: None) -> None:
    runs = tmp_path / "runs"
    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(runs))  # this process's cleanup and runs look here, as the child's do
    task = load_task("stop-persistence")
    subs, journal = tmp_path / "class", tmp_path / "journal.jsonl"
    n_valid = 24
    total = _write_class(subs, n_valid)
    proc = subprocess.Popen([sys.executable, "-c", BATCH_SCRIPT, task.id, str(subs), str(journal)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "SANDBOX_LAB_RUNS": str(runs)})
    child = f"{LABEL_PID}={proc.pid}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            lines = journal.read_text().count("\n") if journal.exists() else 0
            # a few valid rows finished, and a run in flight: kill now
            if lines >= len(_BROKEN) + 4 and docker_client.api.containers(filters={"label": [child, f"{LABEL_ROLE}=sandbox"]}):
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.02)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        out, err = proc.communicate()
    assert proc.returncode == -signal.SIGKILL, f"the batch was not killed mid-way (rc {proc.returncode}): {out} {err[-2000:]}"
    left = docker_client.api.containers(all=True, filters={"label": child})
    assert left or any(runs.iterdir()), "the kill left nothing behind: this test proves nothing about cleanup"

    cleanup(docker_client)
    assert not docker_client.api.containers(all=True, filters={"label": child})
    assert not docker_client.api.networks(filters={"label": child})
    assert not any(runs.iterdir()), list(runs.iterdir())

    before = [json.loads(line)["row"] for line in journal.read_text().splitlines() if line.strip().startswith("{")]
    finished = {r["student"]: r for r in before if r["status"] != "error"}
    assert 0 < len(finished) < total, len(finished)

    counting = _Counting(docker_backend)
    book = grade_batch(task, subs, counting, workers=4, dedupe=False, journal=journal)
    students = [r.student for r in book.rows]
    assert len(students) == total and len(set(students)) == total
    assert book.resumed == len(finished)
    assert counting.calls == n_valid - sum(1 for s in finished if s.startswith("s")), (counting.calls, len(finished))
    for r in book.rows:
        if r.student in finished:
            assert r.to_json() == finished[r.student], r.student  # taken as it was, not regraded
    lines = [json.loads(line)["row"]["student"] for line in journal.read_text().splitlines() if line.strip().startswith("{")]
    assert sorted(lines) == sorted(students), "the journal holds each student exactly once"
    # and every row is right: the Docker grades equal the static ones (which the agreement corpus pins)
    static = grade_batch(task, subs, StaticBackend(), workers=1)
    assert [(r.student, r.score, r.status) for r in book.rows] == [(r.student, r.score, r.status) for r in static.rows]


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


def test_metadata_docker_socket_host_and_other_runs_are_unreachable(hostile: _Hostile, docker_backend: Any) -> None:
    token = secrets.token_hex(6)
    own, other = hostile.network("sbx"), hostile.network("other")
    own_sink, own_ip = hostile.service(docker_backend.images.services, ["python3", "-c", LISTEN], own, "internet")
    other_sink, other_ip = hostile.service(docker_backend.images.services, ["python3", "-c", LISTEN], other, "other-internet")
    _wait_listening(own_sink)
    _wait_listening(other_sink)
    host = socket.socket()
    host.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    host.bind(("0.0.0.0", 0))
    host.listen(16)
    host.settimeout(0.2)
    host_port = host.getsockname()[1]
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
    own.reload()
    gateway = ((own.attrs.get("IPAM") or {}).get("Config") or [{}])[0].get("Gateway")
    targets = [("own-run", own_ip, 8080), ("other-run", other_ip, 8080),
               ("metadata", "169.254.169.254", 80), ("metadata-https", "169.254.169.254", 443)]
    targets += [(f"host-{a}", a, host_port) for a in _host_addresses()]
    targets += [(f"jupyter-{a}", a, 8888) for a in _host_addresses()]
    if gateway:
        targets += [("gateway", gateway, host_port)]
    try:
        # sanity: the host's listener answers locally, so silence from the sandbox means something
        with socket.create_connection(("127.0.0.1", host_port), timeout=2) as s:
            s.sendall(b"local check\n")
        time.sleep(0.3)
        ran = hostile.run(["python3", "-c", REACH, token, json.dumps(targets)], _hardening(30.0), network=own)
    finally:
        stop.set()
        t.join(timeout=5)
        host.close()
    res = ran.last_json()
    # positive control: the sandbox's own network works, and the sink logs the token
    assert res["own-run"] == "connected" and token.encode() in own_sink.logs(), (res, own_sink.logs())
    for name, *_ in targets[1:]:
        assert res[name] != "connected", (name, res[name])
    for path in ("/var/run/docker.sock", "/run/docker.sock", "/var/run/docker/docker.sock"):
        assert res[path].startswith(("FileNotFoundError", "PermissionError")), (path, res[path])
    assert token.encode() not in other_sink.logs()
    assert hits == [b"local check\n"], hits


# --- the engine goes away mid-batch -----------------------------------------------------------


class _EngineLine:
    """A Unix socket that forwards to the engine's: cut it and this grader loses the engine; restore it and it is back.

    It stands for a ``dockerd`` restart as the grader sees it (every call fails,
    then the engine answers again) without restarting the engine that other
    runs on this machine share.
    """

    def __init__(self, path: Path, target: str) -> None:
        self.path, self.target = path, target
        self._live: list[socket.socket] = []
        self._lock = threading.Lock()
        self._server: Optional[socket.socket] = None

    def restore(self) -> None:
        self.path.unlink(missing_ok=True)
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(self.path))
        server.listen(64)
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def cut(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        with self._lock:
            live, self._live = self._live, []
        for s in live:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        self.path.unlink(missing_ok=True)

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                a, _ = server.accept()
            except OSError:
                return  # cut
            b = socket.socket(socket.AF_UNIX)
            try:
                b.connect(self.target)
            except OSError:
                a.close()
                b.close()
                continue
            with self._lock:
                self._live += [a, b]
            for src, dst in ((a, b), (b, a)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self._lock:  # the second pump of a pair closes both
            pair_done = src not in self._live
            for s in (src, dst):
                if s in self._live:
                    self._live.remove(s)
        if pair_done:
            src.close()
            dst.close()


def _engine_line(tmp_path: Path) -> _EngineLine:
    engine = (os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock").removeprefix("unix://")
    if not Path(engine).is_socket():
        pytest.skip(f"the engine is not on a local Unix socket ({engine}); there is no line to cut here")
    line = _EngineLine(tmp_path / "engine.sock", engine)
    line.restore()
    return line


class _ThreadErrors:
    """Collects exceptions that escape threads (a removal thread dying mid-outage) instead of losing them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[str] = []
        monkeypatch.setattr(threading, "excepthook", lambda a: self.seen.append(f"{a.thread.name if a.thread else '?'}: {a.exc_type.__name__}"))


def _mine_now(client: Any) -> tuple[set[str], set[str]]:
    return ({c["Id"] for c in client.api.containers(all=True, filters={"label": MINE})},
            {n["Id"] for n in client.api.networks(filters={"label": MINE})})


def _remove(client: Any, containers: set[str], networks: set[str]) -> None:
    for cid in containers:
        try:
            client.api.remove_container(cid, force=True, v=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
    for nid in networks:
        try:
            client.api.remove_network(nid)
        except Exception:  # noqa: BLE001
            pass


# docker-py does not close the socket of a connect() that fails (the engine's socket is gone): not ours to fix
DOCKER_PY_SOCKET_LEAK = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@DOCKER_PY_SOCKET_LEAK
def test_engine_gone_mid_batch_gives_error_rows_that_a_rerun_grades(docker_client: Any, docker_backend: Any, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """What the gradebook says when the engine goes away mid-batch. What the outage leaves behind is the next test's."""
    import docker

    line = _engine_line(tmp_path)
    _ThreadErrors(monkeypatch)  # removal threads die in the outage: that bug is the next test's, keep it off pytest's books
    before = _mine_now(docker_client)
    client = docker.DockerClient(base_url=f"unix://{line.path}", version=docker_client.api.api_version, timeout=60)
    backend = DockerBackend(client, docker_backend.images, retries=0)
    task = load_task("stop-persistence")
    subs, journal = tmp_path / "class", tmp_path / "journal.jsonl"
    total = _write_class(subs, 24)
    outage = threading.Event()

    def cut_for_a_while() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if journal.exists() and journal.read_text().count("\n") >= len(_BROKEN) + 4:
                break
            time.sleep(0.02)
        line.cut()
        outage.set()
        time.sleep(3.0)
        line.restore()

    cutter = threading.Thread(target=cut_for_a_while, daemon=True)
    cutter.start()
    try:
        first = grade_batch(task, subs, backend, workers=2, dedupe=False, journal=journal)
        cutter.join(timeout=30)
        assert outage.is_set()
        failed = {r.student for r in first.rows if r.status == "error"}
        assert failed, "no run met the outage: this test proves nothing"
        assert all("rerun" in r.feedback for r in first.rows if r.status == "error")
        static = {r.student: r for r in grade_batch(task, subs, StaticBackend(), workers=1).rows}
        for r in first.rows:  # graded during the outage: right, or an error; never a wrong score
            if r.status != "error":
                assert (r.score, r.status) == (static[r.student].score, static[r.student].status), r.student

        counting = _Counting(backend)
        second = grade_batch(task, subs, counting, workers=4, dedupe=False, journal=journal)
        assert counting.calls == len(failed)  # only the errors are graded again
        assert len(second.rows) == total
        assert [(r.student, r.score, r.status) for r in second.rows] == [
            (r.student, static[r.student].score, static[r.student].status) for r in second.rows]
    finally:
        _close(backend)
        client.close()
        line.cut()
        after = _mine_now(docker_client)
        _remove(docker_client, after[0] - before[0], after[1] - before[1])  # the outage's leftovers: see the next test
        gc.collect()  # the leaked sockets' warnings land here, under this test's filter, not at the session's end


@DOCKER_PY_SOCKET_LEAK
def test_engine_gone_mid_run_is_a_backend_error_and_leaves_nothing_once_it_is_back(
    docker_client: Any, docker_backend: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import docker

    from grader.errors import BackendError

    line = _engine_line(tmp_path)
    threads = _ThreadErrors(monkeypatch)
    before = _mine_now(docker_client)
    client = docker.DockerClient(base_url=f"unix://{line.path}", version=docker_client.api.api_version, timeout=60)
    backend = DockerBackend(client, docker_backend.images, retries=0)
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            backend.run(build_plan(load_policy(PROXIED)))
        except BaseException as exc:  # noqa: BLE001 - kept for the assertion
            outcome.append(exc)

    t = threading.Thread(target=run, daemon=True)
    try:
        t.start()
        deadline = time.monotonic() + 60
        while not docker_client.api.containers(filters={"label": [f"{LABEL_ROLE}=sandbox", MINE]}):
            assert time.monotonic() < deadline and t.is_alive(), "the run never started its sandbox"
            time.sleep(0.01)
        line.cut()  # the run is waiting on its sandbox: the engine goes away under it
        time.sleep(2.0)
        line.restore()
        t.join(timeout=120)
        assert outcome and isinstance(outcome[0], BackendError), outcome
        # removals that failed while the engine was away are retried when the backend drains or closes
        backend.close()
        left = _mine_now(docker_client)
        assert (left[0] - before[0], left[1] - before[1]) == (set(), set()), "the outage left containers or networks"
        assert threads.seen == [], threads.seen
    finally:
        _close(backend)
        client.close()
        line.cut()
        after = _mine_now(docker_client)
        _remove(docker_client, after[0] - before[0], after[1] - before[1])
        outcome.clear()
        gc.collect()
