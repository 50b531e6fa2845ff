"""A Docker engine of a test's own: its own dockerd, socket, directories, containerd and network namespace, started and removed by the test.

A test that must stop or restart dockerd (``test_dockerd_restart.py``) does it
to this engine, never to the machine's: stopping the machine's dockerd stops
every container on it, the user's database and other projects included.

What keeps it from touching the machine's engine, each seen on Debian's
docker.io 20.10:

* ``--config-file`` of its own: never ``/etc/docker/daemon.json``, whose pools
  and runtimes are the machine's.
* ``--host``, ``--data-root``, ``--exec-root``, ``--pidfile`` under one
  temporary directory; dockerd 20.10 then starts a containerd of its own under
  the exec-root (its own socket and state), which it stops when it stops.
* a network namespace of its own (held by the file ``netns`` in that
  directory; dockerd runs in it through ``nsenter``), so its bridges, routes,
  iptables rules and ``ip_forward`` are its own. In the machine's namespace a
  second dockerd cannot help touching the first one's: at start the bridge
  driver deletes and recreates the DOCKER chains (``removeIPChains``), and
  ``removeDefaultBridgeInterface`` deletes ``docker0`` by that name, under
  ``--bridge=none`` and again at every restart once ``default-address-pools``
  is set (both happened here, to the machine's ``docker0``, before this
  namespace). Nothing of the grader connects to a container's address: the
  engine's socket is a file, and a run's files are bind mounts, both reached
  from any namespace.

``stop`` ends dockerd (and so its containerd), unmounts whatever is left
mounted under the directory (the namespace's file included) and removes the
directory; ``leftovers`` says what of it is still there.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

__all__ = ["PrivateEngine", "engine_problem"]

START_SECONDS = 60.0
STOP_SECONDS = 60.0


def engine_problem() -> str:
    """"" when a private engine can be started here, else why not."""
    if os.geteuid() != 0:
        return "a private dockerd needs root"
    for tool in ("dockerd", "ip", "unshare", "nsenter"):
        if shutil.which(tool) is None and not Path(f"/usr/sbin/{tool}").exists() and not Path(f"/sbin/{tool}").exists():
            return f"no {tool} on this machine (Debian: apt-get install docker.io iproute2 util-linux)"
    return ""


@dataclass
class PrivateEngine:
    """One dockerd of a test's own under ``root``; ``host`` is its ``DOCKER_HOST``."""

    root: Path
    runtimes: dict[str, Any] = field(default_factory=dict)
    process: Optional[subprocess.Popen[bytes]] = None
    started_in: float = 0.0  # seconds from exec to the first answered ping, last start

    @classmethod
    def start(cls, runtimes: Optional[dict[str, Any]] = None) -> "PrivateEngine":
        """A new engine, answering; ``runtimes`` as daemon.json's (e.g. runsc with its arguments)."""
        # short: containerd's socket lives under the exec-root, and a unix socket's path has 108 bytes
        root = Path(tempfile.mkdtemp(prefix="sle-", dir="/tmp"))
        engine = cls(root, dict(runtimes or {}))
        try:
            (root / "daemon.json").write_text(json.dumps({"runtimes": engine.runtimes} if engine.runtimes else {}))
            (root / "netns").touch()
            subprocess.run(["unshare", f"--net={root / 'netns'}", "true"], check=True, capture_output=True)
            engine._in_netns(["ip", "link", "set", "lo", "up"])
            engine._launch()
        except BaseException:
            engine.stop()
            raise
        return engine

    @property
    def host(self) -> str:
        return f"unix://{self.root}/docker.sock"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def client(self) -> Any:
        import docker

        return docker.DockerClient(base_url=self.host, version="auto", timeout=120)

    def _in_netns(self, argv: list[str]) -> list[str]:
        cmd = ["nsenter", f"--net={self.root / 'netns'}", "--", *argv]
        if argv[0] != "dockerd":
            subprocess.run(cmd, check=True, capture_output=True)
        return cmd

    def _argv(self) -> list[str]:
        # Docker's defaults otherwise (iptables, docker0, its address pools): inside this namespace they are its own
        return self._in_netns([
            "dockerd", "--config-file", str(self.root / "daemon.json"), "--host", self.host,
            "--data-root", str(self.root / "data"), "--exec-root", str(self.root / "exec"),
            "--pidfile", str(self.root / "docker.pid"),
        ])

    def _launch(self) -> None:
        started = time.monotonic()
        with open(self.root / "dockerd.log", "ab") as log:
            # its own session: a Ctrl-C meant for pytest reaches pytest, which then stops this engine itself
            self.process = subprocess.Popen(self._argv(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                            start_new_session=True)
        import docker

        deadline = started + START_SECONDS
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the private dockerd exited ({self.process.returncode}): {self.log_tail()}")
            try:
                c = docker.DockerClient(base_url=self.host, version="1.41", timeout=5)
                try:
                    c.ping()
                finally:
                    c.close()
                break
            except Exception:  # noqa: BLE001 - not answering yet
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the private dockerd did not answer within {START_SECONDS:.0f}s: {self.log_tail()}")
                time.sleep(0.05)
        self.started_in = time.monotonic() - started

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join((self.root / "dockerd.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def terminate(self) -> None:
        """SIGTERM to this dockerd, as an operator's stop: it stops its containers and its containerd, then exits."""
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            # its containerd and shims die with it: they are this engine's, in its process group
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def restart(self) -> None:
        """Stop this dockerd with SIGTERM and start it again with the same settings.

        A dockerd started the moment the last one exited can find its containerd still letting go of the socket
        and exit at once: it is started again, up to three times, as a service manager would. Docker 20.10 stopped
        while it was creating a network keeps the half-made network and panics restoring it at every start
        (libnetwork's reservePools): its network store is moved aside, as scripts/ensure-docker does for the
        machine's engine, and it starts with its default networks (what the grader must survive too)."""
        self.terminate()
        for attempt in range(3):
            try:
                self._launch()
                return
            except RuntimeError:
                if attempt == 2:
                    raise
                store = self.root / "data" / "network" / "files" / "local-kv.db"
                log = (self.root / "dockerd.log").read_text(errors="replace")
                if "reservePools" in log.rsplit("API listen on", 1)[-1] and store.exists():
                    store.rename(store.with_name(f"local-kv.db.broken-{attempt}"))
                time.sleep(1.0)

    def load_images(self, source: Any, tags: list[str]) -> None:
        """Copy ``tags`` from the engine behind ``source`` into this one (docker save, streamed into docker load)."""
        target = self.client()
        try:
            # one archive for every tag: the layers they share (the Debian base) cross once
            res = source.api._get(source.api._url("/images/get"), params={"names": tags}, stream=True)
            source.api._raise_for_status(res)
            for line in target.api.load_image(res.iter_content(chunk_size=1 << 20), quiet=True):
                assert "error" not in line, line  # the engine's answer streams: read to its end
            missing = [t for t in tags if not target.images.list(name=t)]
            assert not missing, f"not loaded into the private engine: {missing}"
        finally:
            target.close()

    def mounts(self) -> list[str]:
        """Mount points under this engine's directory, as /proc/mounts lists them (deepest last)."""
        prefix = str(self.root) + "/"
        out = []
        for line in Path("/proc/mounts").read_text().splitlines():
            point = line.split()[1].encode().decode("unicode_escape")
            if point == str(self.root) or point.startswith(prefix):
                out.append(point)
        return out

    def leftovers(self) -> list[str]:
        """What of this engine is still on the machine: its processes, mounts and directory."""
        left = []
        left += [f"process {p} of {self.root}" for p in self._processes()]
        left += [f"mount {m}" for m in self.mounts()]
        if self.root.exists():
            left.append(f"directory {self.root}")
        return left

    def _processes(self) -> list[int]:
        """Processes whose command line names this engine's directory (its containerd, shims, a runtime's)."""
        out = subprocess.run(["pgrep", "-f", str(self.root) + "/"], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def stop(self) -> None:
        """Everything of this engine gone: dockerd (and so its containerd) stopped, mounts undone, directory removed."""
        self.terminate()
        # A container whose start failed can outlive its dockerd (seen: runsc refusing a start left its shim,
        # gofer and sandbox). They name this engine's unique directory: theirs, and no one else's, to end.
        for pid in self._processes():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while self._processes() and time.monotonic() < deadline:
            time.sleep(0.1)
        for point in reversed(self.mounts()):
            subprocess.run(["umount", "-l", point], capture_output=True)
        if not self.mounts():  # never rm -r through a mount that is still there
            shutil.rmtree(self.root, ignore_errors=True)
