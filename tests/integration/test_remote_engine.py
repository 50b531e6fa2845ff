"""The Docker backend against an engine it reaches over TCP, as if the engine ran on another machine.

The local engine is exposed on a loopback TCP port by a forwarder in this test
(dockerd itself is left alone), ``DOCKER_HOST`` points there and the engine
disk is forced remote. Each policy then runs three ways -- predicted, on the
remote engine, on the local one -- and the outcomes must be the same. The
engine must never be told a path of the grader's disk: every container's mount
sources are inspected, and every byte sent to the engine is searched for the
runs directory. Closing the backend leaves no container, network, volume or
run directory.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlparse

import pytest

from grader import load_policy, predict
from grader.core.outcomes import RunResult
from grader.core.plan import build_plan

pytestmark = pytest.mark.docker

CORPUS: dict[str, Optional[dict[str, Any]]] = json.loads(
    (Path(__file__).parent.parent / "fixtures" / "corpus.json").read_text()
)["policies"]
# no network; a proxy with allowed domains (and one that lists the host); the plain container;
# nested read-only, writable and hidden paths (the world copy must come back exactly as left)
POLICIES = ("practice-solution", "seed-naive", "docker-host-allowed", "plain-container", "project-writable-hooks-and-env-protected")


@dataclass
class Forwarder:
    """127.0.0.1:<port> → the local engine's socket; remembers whether the client ever sent ``needle``."""

    needle: bytes
    port: int = 0
    seen: list[str] = field(default_factory=list)  # where the needle was found, if anywhere
    connections: int = 0
    _server: Optional[socket.socket] = None
    _target: str = ""
    _pairs: list[threading.Thread] = field(default_factory=list)

    def start(self) -> None:
        # the engine DOCKER_HOST names now, before the test points DOCKER_HOST at this forwarder
        self._target = os.environ.get("DOCKER_HOST", "") or "unix:///var/run/docker.sock"
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.bind(("127.0.0.1", 0))
        self._server.listen(64)
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._pairs):
            t.join(timeout=10)

    def _engine(self) -> socket.socket:
        url = urlparse(self._target)
        if url.scheme == "unix":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(url.path)
            return s
        assert url.scheme == "tcp" and url.hostname, f"cannot forward to DOCKER_HOST={url.geturl()}"
        return socket.create_connection((url.hostname, url.port or 2375))

    def _serve(self) -> None:
        assert self._server is not None
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            try:
                engine = self._engine()
            except OSError:
                client.close()
                continue
            self.connections += 1
            pair = threading.Thread(target=self._pair, args=(client, engine), daemon=True)
            self._pairs.append(pair)
            pair.start()

    def _pair(self, client: socket.socket, engine: socket.socket) -> None:
        back = threading.Thread(target=self._relay, args=(engine, client, False), daemon=True)
        back.start()
        self._relay(client, engine, True)
        back.join()
        client.close()
        engine.close()

    def _relay(self, src: socket.socket, dst: socket.socket, to_engine: bool) -> None:
        tail = b""
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if to_engine:
                    window = tail + data
                    if self.needle in window:
                        at = window.index(self.needle)
                        self.seen.append(window[max(0, at - 200): at + 200].decode("utf-8", "replace"))
                    tail = window[-len(self.needle):]
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
                try:
                    s.shutdown(how)
                except OSError:
                    pass


@dataclass
class Remote:
    forwarder: Forwarder
    runs: Path
    results: dict[str, RunResult]
    created: list[dict[str, Any]]  # the inspected attributes of every container made on the remote engine
    owner: str  # the backend's label value
    roles: set[str]


@pytest.fixture(scope="module")
def remote(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Remote]:
    """Every policy run on the engine over TCP with the disk forced remote; the backend closed after."""
    from docker.models.containers import ContainerCollection

    from grader.backends.docker import enginedisk
    from grader.backends.docker.backend import DockerBackend, client_from_env
    from grader.backends.docker.images import ensure_images
    from grader.backends.docker.engine import DockerEngine
    from grader.backends.docker.simnet import LABEL_ROLE

    runs = tmp_path_factory.mktemp("remote-runs")
    fwd = Forwarder(needle=str(runs).encode())
    fwd.start()
    created: list[dict[str, Any]] = []
    original = ContainerCollection.create

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SANDBOX_LAB_RUNS", str(runs))  # a name found nowhere else: any byte of it sent to the engine is a leak
        # the engine the forwarder reaches is whatever DOCKER_HOST named before; the backend sees only the TCP port
        images = ensure_images(DockerEngine(docker_client), lambda s: None)
        mp.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{fwd.port}")
        mp.setenv(enginedisk.ENV, "remote")
        client = client_from_env()
        assert client.base_url().startswith("http://127.0.0.1:"), client.base_url()

        def recording(self: Any, *args: Any, **kwargs: Any) -> Any:
            container = original(self, *args, **kwargs)
            if self.client.api.base_url == client.base_url():
                created.append(container.attrs)  # from the engine's own inspect, right after the create
            return container

        mp.setattr(ContainerCollection, "create", recording)
        backend = DockerBackend(client, images)
        assert isinstance(backend.disk, enginedisk.EngineDisk)
        results: dict[str, RunResult] = {}
        try:
            for name in POLICIES:
                raw = CORPUS[name]
                results[name] = backend.run(build_plan(load_policy(raw) if raw is not None else None))
        finally:
            owner = backend.leftovers.owner
            backend.close()
            client.close()
        roles = {str((a.get("Config", {}).get("Labels") or {}).get(LABEL_ROLE, "")) for a in created}
        yield Remote(fwd, runs, results, created, owner, roles)
    fwd.close()


UNMEASURED = "scope not measured: "  # run_result's note for a scan that could not prove it was whole


@pytest.mark.parametrize("name", POLICIES)
def test_a_remote_run_agrees_with_the_prediction_and_the_local_engine(name: str, remote: Remote, docker_backend: Any) -> None:
    raw = CORPUS[name]
    policy = load_policy(raw) if raw is not None else None
    static = predict(policy)
    far = remote.results[name]
    near = docker_backend.run(build_plan(policy))
    for where, run in (("remote", far), ("local", near)):
        assert run.backend == "docker" and [n for n in run.notes if not n.startswith(UNMEASURED)] == [], (where, run.notes)
        # no scope only with the reason, never a scope beside a reason
        assert (run.scope is None) == any(n.startswith(UNMEASURED) for n in run.notes), (where, run.notes)
    rows = [(o.id, static.outcome(o.id).outcome, o.outcome, near.outcome(o.id).outcome, o.evidence) for o in far.probes]
    assert [r for r in rows if not r[1] == r[2] == r[3]] == []
    assert all(o.evidence for o in far.probes), [o.id for o in far.probes if not o.evidence]
    # A measured scope is the predicted one, file by file and host by host: a scan that came back short and
    # still called itself whole (a lost line, a read cut by a rewrite) shows here as a set smaller than predicted.
    for where, run in (("remote", far), ("local", near)):
        if run.scope is not None:
            assert run.scope.to_json() == static.scope.to_json(), f"the {where} run's measured scope is not the predicted one"
    unmeasured = [f"{where}: {n}" for where, run in (("remote", far), ("local", near)) for n in run.notes if n.startswith(UNMEASURED)]
    if unmeasured:  # said, not shrunk: the two cannot be compared, and nothing else of the test is lost
        pytest.skip("; ".join(unmeasured))
    # the scope scan measured the same files and hosts through the engine's disk as through the grader's
    assert far.scope is not None and near.scope is not None
    assert far.scope.to_json() == near.scope.to_json()


def test_the_engine_is_never_given_a_path_of_the_graders_disk(remote: Remote) -> None:
    from grader.backends.docker.volumes import COPY_ROOT

    assert remote.forwarder.connections > 0
    # every kind of container really went through the remote engine: sandbox, its disk, the host listener, services
    assert {"sandbox", "disk", "host-listener", "internet", "proxy"} <= remote.roles, remote.roles
    volumes = {m["Source"] for a in remote.created for m in a.get("Mounts") or [] if m.get("Destination") == COPY_ROOT}
    # one run's copy per policy at least; a run whose next session starts a sandbox again gets a copy of its own
    assert len(volumes) >= len(POLICIES)
    for attrs in remote.created:
        host = attrs.get("HostConfig", {})
        sources = [m.get("Source", "") for m in host.get("Mounts") or []] + [b.split(":")[0] for b in host.get("Binds") or []]
        sources += [m.get("Source", "") for m in attrs.get("Mounts") or []]
        for src in filter(None, sources):
            assert not Path(src).is_relative_to(remote.runs), (attrs["Name"], src)
        if (attrs.get("Config", {}).get("Labels") or {}).get("org.sandbox-lab.role") == "sandbox":
            binds = [m["Source"] for m in host.get("Mounts") or [] if m.get("Type") == "bind"]
            # the world copy, the runner's config and resolv.conf: all inside the run's volume on the engine
            assert binds and all(any(b.startswith(v + "/") for v in volumes) for b in binds), binds
    assert remote.forwarder.seen == [], remote.forwarder.seen[:3]


def test_a_remote_backend_leaves_nothing_behind(remote: Remote, docker_client: Any, docker_backend: Any) -> None:
    import docker

    from grader.backends.docker.simnet import LABEL_BACKEND

    mine = {"label": f"{LABEL_BACKEND}={remote.owner}"}
    assert docker_client.api.containers(all=True, filters=mine) == []
    assert docker_client.api.networks(filters=mine) == []
    for attrs in remote.created:
        with pytest.raises(docker.errors.NotFound):
            docker_client.containers.get(attrs["Id"])
        for m in attrs.get("Mounts") or []:
            if m.get("Type") == "volume":
                with pytest.raises(docker.errors.NotFound):
                    docker_client.volumes.get(m["Name"])
    assert [r.run_id for r in remote.results.values() if (remote.runs / r.run_id).exists()] == []
    # the local backend of the comparison runs keeps its shared internet and warm proxies there; nothing else stays
    docker_backend.drain()
    assert sorted({p.name for p in remote.runs.iterdir()} - docker_backend.standing()) == []


def test_the_listener_on_the_engines_host_hears_a_connection(docker_client: Any) -> None:
    """The stand-in for the grader's HostListener on a remote engine really listens: its silence means something."""
    import secrets

    from grader.backends.docker.enginedisk import EngineDisk
    from grader.backends.docker.images import ensure_images
    from grader.backends.docker.engine import DockerEngine
    from grader.backends.docker.simnet import Leftovers

    images = ensure_images(DockerEngine(docker_client), lambda s: None)
    name = "sl-" + secrets.token_hex(5)
    listener = EngineDisk(DockerEngine(docker_client)).listener(images.services, name, Leftovers().labels(name))
    try:
        assert listener.problem() == ""
        # the engine's host is this machine here: connect to it as a sandbox that reached its host would
        with socket.create_connection(("127.0.0.1", listener.port), timeout=5) as s:
            s.sendall(b"token-123\n")
        deadline = time.monotonic() + 5
        while not listener.hits and time.monotonic() < deadline:
            time.sleep(0.05)
        assert listener.hits == ["token-123\n"]
        assert listener.container is not None
        docker_client.api.kill(listener.container.id)
        assert "stopped" in listener.problem()
    finally:
        assert listener.container is not None
        docker_client.api.remove_container(listener.container.id, force=True, v=True)
