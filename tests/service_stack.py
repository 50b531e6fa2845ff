"""A run service of a test's own: redis-server, workers and the API as real processes; stopped and removed after."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Optional

from holds import Hold
from redis_server import RedisServer

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parent = int(fields[1])
        except (OSError, IndexError, ValueError):  # a process that ended between the listing and the read
            continue
        if parent == pid:
            found.append(int(stat.parent.name))
    return found


class ServiceStack:
    """Redis, ``workers`` workers and the API on 127.0.0.1, with their own state directory and one token."""

    def __init__(self, workers: int = 2, *, supervised: bool = False) -> None:
        self.supervised = supervised  # each worker under scripts/supervise.py, as `make serve` starts it
        self.redis = RedisServer()
        self.directory = Path(tempfile.mkdtemp(prefix="slservice-"))
        self.hold = Hold(self.directory / "hold")  # a run held mid-wait for a fault to meet (``arm``)
        self.env = {**os.environ, "SANDBOX_LAB_SERVICE_DIR": str(self.directory), "SANDBOX_LAB_REDIS_URL": self.redis.url,
                    "SANDBOX_LAB_SERVICE_NAME": "test-stack", **self.hold.env(str(REPO))}
        self.env.pop("SANDBOX_LAB_SERVICE_BACKEND", None)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.api: Optional[subprocess.Popen[bytes]] = None
        from grader.hosted.tokens import issue_token

        self.token = issue_token(self.directory / "tokens.json", "tester", rate=1000, jobs=50)
        for i in range(workers):
            self.start_worker(f"w{i}-{os.getpid()}")
        self.api = self._spawn("api", "serve", "--port", str(self.port))
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/healthz", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or self.api.poll() is not None:
                    self.close()
                    raise RuntimeError("the API did not start: " + (self.directory / "api.log").read_text(errors="replace")[-3000:])
                time.sleep(0.2)
        if workers:
            self._wait_ready()

    def arm(self) -> None:
        """The next run any worker fires is held while it waits on its sandbox, until ``release``."""
        self.hold.arm()

    def wait_held(self, timeout: float = 120.0) -> int:
        """Until a run is held (``arm``); the pid of the process that holds it."""
        return self.hold.wait_held(timeout, said=lambda: "".join(
            p.read_text(errors="replace")[-1500:] for p in self.directory.glob("*.log")))

    def release(self) -> None:
        self.hold.release()

    def _wait_ready(self, timeout: float = 120.0) -> None:
        """Until /readyz says a worker is live: the API answers before its workers register, and on a loaded
        machine a first job sent then was a 503 ("no worker is serving"), which no test's scenario judges."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                answer = self.request("GET", "/readyz")
            except OSError as exc:  # the API gone meanwhile: said, with the rest, at the deadline
                answer = (0, str(exc))
            if answer[0] == 200:
                return
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"the service was not ready in {timeout:.0f} s: /readyz {answer}")
            time.sleep(0.5)

    def _spawn(self, log: str, *argv: str) -> "subprocess.Popen[bytes]":
        with (self.directory / f"{log}.log").open("ab") as out:  # the child keeps its own copy of the descriptor
            # a session of its own: killing the group kills a worker and the work horse it forked
            return subprocess.Popen([sys.executable, "-m", "grader", *argv], env=self.env, cwd=str(REPO),
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def start_worker(self, name: str) -> None:
        if not self.supervised:
            self.workers[name] = self._spawn(name, "worker", "--name", name)
            return
        with (self.directory / f"{name}.log").open("ab") as out:
            self.workers[name] = subprocess.Popen(
                [sys.executable, str(REPO / "scripts" / "supervise.py"), "--name", name, "--",
                 sys.executable, "-m", "grader", "worker", "--name", name],
                env=self.env, cwd=str(REPO), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def worker_pid(self, name: str) -> int:
        """The worker's own pid: the supervisor's one child when supervised (waits up to 30 s for it)."""
        proc = self.workers[name]
        if not self.supervised:
            return proc.pid
        deadline = time.monotonic() + 30
        while True:
            found = _children(proc.pid)
            if len(found) == 1:
                return found[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"supervisor {proc.pid} of {name} has children {found}")
            time.sleep(0.1)

    def kill_worker(self, name: str) -> list[int]:
        """SIGKILL the worker and its work horses, if any (in fork mode RQ puts each horse in a process group of its
        own; in kept mode there are none): no clean-up of any kind runs. Returns the pids killed beside the worker's."""
        proc = self.workers.pop(name)
        try:
            horses = _children(proc.pid)
            for pid in horses:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:  # a child that leads no group of its own (a kept worker's helper), or gone
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
        finally:  # the worker goes, and is waited for, whatever its children did
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        return horses

    def request(self, method: str, path: str, body: Any = None, token: Optional[str] = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {token or self.token}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def wait(self, job_url: str, timeout: float = 300, until: tuple[str, ...] = ("finished", "failed")) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            status, body = self.request("GET", job_url)
            assert status == 200, body
            if body["status"] in until:
                return dict(body)
            if time.monotonic() > deadline:
                raise AssertionError(f"job still {body['status']} after {timeout} s: {body}")
            time.sleep(0.2)

    def close(self) -> None:
        procs = [p for p in (self.api, *self.workers.values()) if p is not None]
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(40)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        self.redis.close()
        import shutil

        shutil.rmtree(self.directory, ignore_errors=True)
