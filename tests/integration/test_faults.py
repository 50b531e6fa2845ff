"""The grader under faults: dead and hung services, killed sandboxes, the grader killed mid-batch, the engine going away, eight runs at once.

Every test here runs real containers through the real Docker backend. A fault
may make a verdict an ``error`` or the run a loud failure; it must never make
a verdict ``blocked`` without evidence, lose or regrade a gradebook row, or
leave containers behind. Hostile code inside the sandbox is
``test_hostile_code.py``'s.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional

import pytest

from grader import load_policy, predict
from grader.backends.docker.backend import LABEL, LABEL_PID, LABEL_ROLE, DockerBackend, cleanup
from grader.backends.docker import run as run_module
from grader.backends.docker.engine import DockerEngine
from grader.backends.static import StaticBackend
from grader.grading.batch import grade_batch
from grader.core.errors import InfrastructureError
from grader.core.outcomes import RunResult
from grader.core.plan import RunPlan, build_plan
from grader.grading.tasks import load_task

from faultkit import LOG_FAULTS, PROXIED, PROXY_FAULTS, assert_as_predicted, corrupted_logs, corrupted_proxy_log, outcomes_of

pytestmark = [pytest.mark.docker, pytest.mark.slow]

CORPUS: dict[str, Any] = json.loads((Path(__file__).parent.parent / "fixtures" / "corpus.json").read_text())["policies"]
NETWORK_PROBES = ("net-direct-ip", "net-dns-exfil", "net-attacker-domain", "net-host-gateway",
                  "exfil-via-allowed-domain", "exfil-secret", "job-fetch-npm", "job-fetch-pypi")
MINE = f"{LABEL_PID}={os.getpid()}"  # other engineers' runs share this engine: only ever touch our own


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
        self.hit = threading.Event()  # the first kill landed (``held_until_hit`` holds the run's wait until then)
        self._stale: set[str] = set()  # runs whose sandboxes stood before this killer started
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> "_ServiceKiller":
        # an earlier test's sandbox still being removed is not this test's run (first_only would take it)
        self._stale = {(c.get("Labels") or {}).get(LABEL, "") for c in self.client.api.containers(
            all=True, filters={"label": [f"{LABEL_ROLE}=sandbox", MINE]})}
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
                if run in self._stale:
                    continue
                if run not in self.runs_seen:
                    self.runs_seen.append(run)
                if run in done or (self.first_only and self.runs_seen.index(run) > 0):
                    continue
                try:
                    if self._kill_services_of(c["Id"]):
                        done.add(run)
                        self.hit.set()
                except Exception:  # noqa: BLE001 - a container vanished between list and inspect: try again
                    pass
            time.sleep(0.01)

    def _neighbours(self, container_id: str) -> set[str]:
        out: set[str] = set()
        found = self.client.api.inspect_container(container_id)
        mode = found["HostConfig"].get("NetworkMode") or ""
        if mode.startswith("container:"):  # a sandbox in its proxy's seat: the seat's networks are its own
            found = self.client.api.inspect_container(mode.removeprefix("container:"))
        for net in found["NetworkSettings"]["Networks"]:
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


def held_until_hit(monkeypatch: pytest.MonkeyPatch, killer: _ServiceKiller) -> None:
    """No run reads its runner's end until the killer's first kill landed: the fault always meets a run that still
    waits on its sandbox, before it asks its recorders (a quick runner could end before a loaded engine listed it)."""
    real = run_module.runner_end
    waited: list[bool] = []

    def held(raw: bytes) -> bool:
        if not waited:  # once: a killer that never hits fails the test on its own assertion, it never hangs it
            waited.append(killer.hit.wait(60))
        return real(raw)

    monkeypatch.setattr(run_module, "runner_end", held)


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
                                                              policy: Any, roles: tuple[str, ...], sig: str,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    backend = DockerBackend(DockerEngine(docker_client), docker_backend.images, retries=0)
    plan = build_plan(load_policy(policy) if policy is not None else None)
    try:
        with _ServiceKiller(docker_client, roles, first_only=False, signal=sig) as killer:
            held_until_hit(monkeypatch, killer)
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
    got = outcomes_of(r)
    silent = {p: got[p] for p in NETWORK_PROBES if got[p] not in ("error", "succeeded")}
    assert silent == {}, f"blocked without a live recorder: {silent}"
    # and no host is called unreachable on a dead recorder's silence: no scope at all, said so
    assert r.scope is None and any("scope not measured" in n for n in r.notes), (r.scope, r.notes)


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGSTOP"])  # dead, or running and silent (hung): either is replaced
def test_a_service_that_dies_once_is_retried_and_the_retry_is_right(docker_client: Any, docker_backend: Any, no_leftovers: None,
                                                                     sig: str, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = DockerBackend(DockerEngine(docker_client), docker_backend.images, retries=1)
    try:
        with _ServiceKiller(docker_client, ("internet",), first_only=True, signal=sig) as killer:
            held_until_hit(monkeypatch, killer)  # the retry is not held: the kill landed before it
            r = backend.run(build_plan(load_policy(PROXIED)))
    finally:
        _close(backend)
    assert killer.killed and len(killer.runs_seen) >= 2, (killer.killed, killer.runs_seen)
    assert_as_predicted(r, PROXIED)
    assert r.run_id != killer.runs_seen[0]


def test_a_sandbox_killed_mid_run_gives_errors_never_blocked(docker_client: Any, docker_backend: Any, no_leftovers: None,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """What a dockerd restart does to a run in flight: its sandbox dies. Unfinished probes are errors.

    The kill follows the go at once, while the probes (0.15-0.3 s of them) run: watching the engine for a running
    sandbox instead raced a quick runner under load (too late: every probe done; too early: a clean retry)."""
    killed: list[str] = []
    engine = docker_backend.engine
    real_send = engine.send_stdin

    def go_then_kill(c: Any, data: bytes) -> None:
        real_send(c, data)
        if not killed:
            docker_client.api.kill(c.id)
            killed.append(c.name)

    monkeypatch.setattr(engine, "send_stdin", go_then_kill)
    r = docker_backend.run(build_plan(load_policy(PROXIED)))
    assert killed, "the sandbox was never sent its go: this test proves nothing"
    static = predict(load_policy(PROXIED))
    assert any(o.outcome == "error" for o in r.probes), "every probe finished before the kill: this test proves nothing"
    for o in r.probes:
        assert o.outcome in (static.outcome(o.id).outcome, "error"), (o.id, o.outcome, o.evidence)
        if o.outcome != "error":
            assert o.evidence, o.id
    # a scan cut short measures nothing rather than too little
    assert r.scope is None or r.scope == static.scope, r.scope


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
        assert_as_predicted(alone[name], CORPUS[name])
        assert_as_predicted(together[name], CORPUS[name])
        assert outcomes_of(together[name]) == outcomes_of(alone[name]), name
        assert together[name].scope == alone[name].scope, name


# --- the grader killed mid-batch ---------------------------------------------------------------

BATCH_SCRIPT = """
import sys
from grader.backends.docker.backend import DockerBackend
from grader.grading.batch import grade_batch
from grader.grading.tasks import load_task
grade_batch(load_task(sys.argv[1]), sys.argv[2], DockerBackend.from_env(), workers=2, dedupe=False, journal=sys.argv[3])
print("finished", flush=True)
"""

_FS_POLICIES = [CORPUS[n] for n in (
    "stop-persistence", "write-everything", "read-root-only", "deny-every-data-root", "home-writable-rc-protected",
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

    cleanup(DockerEngine(docker_client))
    # a create the batch sent just before the kill may still land in the engine after that cleanup listed its
    # containers (seen in CI, under load): what lands is the dead grader's too, and the next cleanup removes it
    # (and a run directory whose quota mount that container held stays until then: the next cleanup removes it)
    deadline = time.monotonic() + 30
    while (docker_client.api.containers(all=True, filters={"label": child}) or any(runs.iterdir())) \
            and time.monotonic() < deadline:
        time.sleep(1)
        cleanup(DockerEngine(docker_client))
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
    backend = DockerBackend(DockerEngine(client), docker_backend.images, retries=0)
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

    from grader.core.errors import BackendError

    line = _engine_line(tmp_path)
    threads = _ThreadErrors(monkeypatch)
    before = _mine_now(docker_client)
    client = docker.DockerClient(base_url=f"unix://{line.path}", version=docker_client.api.api_version, timeout=60)
    backend = DockerBackend(DockerEngine(client), docker_backend.images, retries=0)
    outcome: list[BaseException] = []
    # The cut must land while the run waits on its sandbox. Watching the engine for the sandbox and cutting then
    # raced the run: a runner that ends quickly (about 0.3 s) could be done before a loaded engine listed it,
    # and a run whose sandbox already ended needs the engine only to remove it (retried after: a true verdict).
    # So the run is held inside its sandbox's output stream, at the first line it reads, until the line is cut,
    # and no line it read counts as the runner's end (one already in that first read would let it finish).
    reading, cut = threading.Event(), threading.Event()

    def held_end(raw: bytes) -> bool:
        reading.set()
        cut.wait(60)
        return False

    monkeypatch.setattr(run_module, "runner_end", held_end)

    def run() -> None:
        try:
            backend.run(build_plan(load_policy(PROXIED)))
        except BaseException as exc:  # noqa: BLE001 - kept for the assertion
            outcome.append(exc)

    t = threading.Thread(target=run, daemon=True)
    try:
        t.start()
        assert reading.wait(60) and t.is_alive(), f"the run never read its sandbox's output: {outcome}"
        assert docker_client.api.containers(all=True, filters={"label": [f"{LABEL_ROLE}=sandbox", MINE]}), "no sandbox"
        line.cut()  # the run is waiting on its sandbox: the engine goes away under it
        cut.set()
        time.sleep(2.0)
        line.restore()
        t.join(timeout=120)
        assert outcome and isinstance(outcome[0], BackendError), outcome
        # removals that failed while the engine was away are retried when the backend drains or closes
        # (a run behind a proxy hands its removal to the shared internet's keeper: drain waits for it, close does not)
        backend.drain()
        backend.close()
        left = _mine_now(docker_client)
        assert (left[0] - before[0], left[1] - before[1]) == (set(), set()), "the outage left containers or networks"
        assert threads.seen == [], threads.seen
    finally:
        cut.set()
        _close(backend)
        client.close()
        line.cut()
        after = _mine_now(docker_client)
        _remove(docker_client, after[0] - before[0], after[1] - before[1])
        outcome.clear()
        gc.collect()


@pytest.mark.parametrize("fault", sorted(LOG_FAULTS))
def test_a_real_runs_corrupted_log_gives_errors_never_a_verdict(docker_client: Any, docker_backend: Any, no_leftovers: None,
                                                                monkeypatch: pytest.MonkeyPatch, fault: str) -> None:
    """The run's own log at the internet, cut, renamed, repeated or unclosed: every outcome is error, with the reason."""
    backend = DockerBackend(DockerEngine(docker_client), docker_backend.images, retries=0)
    try:
        with corrupted_logs(monkeypatch, fault) as hit:
            r = backend.run(build_plan(load_policy(PROXIED)))
    finally:
        _close(backend)
    assert hit, "no log was corrupted: this test proves nothing"
    assert set(outcomes_of(r).values()) == {"error"}, outcomes_of(r)
    assert all("cannot be read whole" in o.explanation for o in r.probes), [o.explanation for o in r.probes][:3]
    assert r.scope is None and any("cannot be read whole" in n for n in r.notes), r.notes


@pytest.mark.parametrize("fault", sorted(PROXY_FAULTS))
def test_a_real_runs_cut_or_gapped_proxy_log_gives_errors_never_a_verdict(docker_client: Any, docker_backend: Any, no_leftovers: None,
                                                                         monkeypatch: pytest.MonkeyPatch, fault: str) -> None:
    """The run's window of its proxy's log, a line lost at its start or inside, repeated, or cut: every outcome the
    network decides is error, with the reason (the proxy numbers its records; ``evidence.log_window``)."""
    backend = DockerBackend(DockerEngine(docker_client), docker_backend.images, retries=0)
    try:
        with corrupted_proxy_log(monkeypatch, fault) as hit:
            r = backend.run(build_plan(load_policy(PROXIED)))
    finally:
        _close(backend)
    assert hit, "no proxy log was corrupted: this test proves nothing"
    got = outcomes_of(r)
    assert {p: got[p] for p in NETWORK_PROBES} == dict.fromkeys(NETWORK_PROBES, "error"), got
    assert set(got.values()) == {"error"}, got  # the scope and every read judged from a run whose evidence is cut: none
    assert r.scope is None and any("cannot be read whole" in n and "proxy.jsonl" in n for n in r.notes), r.notes


def test_grading_a_real_run_whose_log_was_cut_could_not_grade_never_full_marks(docker_client: Any, docker_backend: Any, no_leftovers: None,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference policy (full marks from a whole run: test_tasks_docker), graded from a run whose proxy log lost a
    line: every check the run decides could not be graded, 0 points with the reason, and no full marks
    (``sandbox-lab grade`` exits 3 on it: test_cli)."""
    from grader.grading.grade import grade
    from reference import solution_path

    task = load_task("fix-the-naive-setup")  # its reference goes through the proxy
    policy = load_policy(solution_path(task.id))
    backend = DockerBackend(DockerEngine(docker_client), docker_backend.images, retries=0)
    try:
        with corrupted_proxy_log(monkeypatch, "lost-middle-line") as hit:
            g = grade(task, policy, backend)
    finally:
        _close(backend)
    assert hit, "no log was corrupted: this test proves nothing"
    assert not g.full_marks and g.score < g.max_score
    run_checks = {c.id for c in task.checks if c.kind != "policy"}
    assert {c.id for c in g.could_not_grade} == run_checks, [(c.id, c.message[:120]) for c in g.checks]
    assert all(c.points == 0 and c.message.startswith("could not grade: ") for c in g.could_not_grade)
