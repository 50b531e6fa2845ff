"""A hub's run starts its sandbox in the network namespace its proxy's seat holds open (``seats``): the same verdicts
as on the bridge, the proxy re-listed with the seat while the run left it quiet and with a new one when it did
not; a seat that does not fit is never joined, and one that stops under its sandbox makes the run an error, never
a verdict.

Builds that would pass a weaker test, and why these fail them:

* one that never joins a seat (the speed lost, the bridge kept): the sandbox's network mode is checked;
* one that joins any seat it is handed: a pooled entry is pointed at another proxy's seat, and the sandbox must
  then start on its own proxy's bridge;
* one that re-lists a proxy with another proxy's seat: every used seat is either gone or listed with its own proxy;
* one that re-lists a proxy with its seat without asking whether the run left it quiet: a process joined to the
  seat's namespace holds a connection to the proxy open while the run ends, and the proxy must come back with a
  new seat, the used one removed;
* one that never asks whether the seat still runs after its sandbox: the seat is killed while the run is held
  mid-wait, and the run's network verdicts must all be errors with the reason.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

from grader import load_policy, predict
from grader.backends.docker.backend import DockerBackend
from grader.backends.docker.engine import DockerEngine
from grader.backends.docker.hub import POOL_SIZE, stop_keepers
from grader.backends.docker.images import find_images
from grader.backends.docker.lease import IDLE_ENV, HubDir
from grader.backends.docker.simnet import LABEL_HUB
from grader.core.plan import build_plan
from grader.protocol.common import PROXY_PORT

from faultkit import HeldRun, sandbox_creates

pytestmark = pytest.mark.docker

SECURE = {"filesystem": {"allowWrite": ["/app/workspace/build"]}, "network": {"allowedDomains": ["registry.npmjs.org"]}}
NAIVE = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, docker_client: Any) -> Iterator[Path]:
    """One hub for the module (a runs root of its own): its pool is filled once, and the test that spoils its seats
    runs last."""
    runs = tmp_path_factory.mktemp("seats") / "runs"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SANDBOX_LAB_RUNS", str(runs))
        mp.setenv(IDLE_ENV, "60")
        yield runs
        stop_keepers()
    for hub in runs.glob("sl-hub-*"):
        left = docker_client.api.containers(all=True, filters={"label": f"{LABEL_HUB}={hub.name}"})
        assert left == [], f"{hub.name} left {[c['Names'] for c in left]}"


@pytest.fixture()
def created(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The create keywords of every sandbox, in order."""
    return sandbox_creates(monkeypatch)


def _backend(docker_client: Any, **kw: Any) -> DockerBackend:
    images = find_images(DockerEngine(docker_client))
    assert images is not None
    return DockerBackend(DockerEngine(docker_client), images, **{"shared_idle": 60, **kw})


def _pool(backend: DockerBackend, root: Path) -> HubDir:
    backend.sharing.internet()
    (path,) = root.glob("sl-hub-*")
    hub = HubDir(path)
    deadline = time.monotonic() + 120
    while not (len(hub.pooled()) >= POOL_SIZE and all(e.seat for _, e in hub.pooled())):
        assert time.monotonic() < deadline, f"the keeper never filled its pool with seated proxies: {hub.pooled()}"
        time.sleep(0.1)
    return hub


def _outcomes(r: Any) -> dict[str, str]:
    return {o.id: o.outcome for o in r.probes}


def _predicted(raw: dict[str, Any]) -> dict[str, str]:
    s = predict(load_policy(raw))
    return {o.id: o.outcome for o in s.probes}


def _running(docker_client: Any, cid: str) -> bool:
    found = docker_client.api.containers(all=True, filters={"id": cid})
    return bool(found) and found[0]["State"] == "running"


def test_a_hub_runs_sandbox_joins_its_proxys_seat_and_the_proxy_comes_back_with_it_while_quiet(
        root: Path, docker_client: Any, created: list[dict[str, Any]]) -> None:
    backend = _backend(docker_client)
    try:
        hub = _pool(backend, root)
        for _, entry in hub.pooled():
            seat = docker_client.api.inspect_container(entry.seat)
            assert seat["State"]["Running"] and seat["Config"]["Hostname"] == "sandbox", entry
            assert set(seat["NetworkSettings"]["Networks"]) == {docker_client.api.inspect_network(entry.network)["Name"]}
            assert seat["HostConfig"]["CapDrop"] == ["ALL"] and seat["HostConfig"]["ReadonlyRootfs"], seat["HostConfig"]
        seats_before = {e.seat for _, e in hub.pooled()}
        for raw in (SECURE, NAIVE):
            r = backend.run(build_plan(load_policy(raw)))
            assert _outcomes(r) == _predicted(raw), r.notes
            mode = created[-1].get("network_mode", "")
            assert mode.startswith("container:") and mode.removeprefix("container:") in seats_before, created[-1]
            assert "hostname" not in created[-1] and "sysctls" not in created[-1], "the seat holds both"
        backend.drain()
        used = {kw["network_mode"].removeprefix("container:") for kw in created if "network_mode" in kw}
        listed = {e.seat for _, e in hub.pooled()}
        assert used and all(s in listed or docker_client.api.containers(all=True, filters={"id": s}) == [] for s in used), \
            "a used seat is re-listed with its proxy, or gone"
        deadline = time.monotonic() + 60
        while not (hub.pooled() and all(e.seat and _running(docker_client, e.seat) for _, e in hub.pooled())):
            assert time.monotonic() < deadline, hub.pooled()
            time.sleep(0.1)
        assert any(e.runs > 0 for _, e in hub.pooled()), "a clean run's proxy was re-listed"
        for _, e in hub.pooled():
            if e.seat in used:
                on = docker_client.api.inspect_container(e.seat)["NetworkSettings"]["Networks"]
                assert set(on) == {docker_client.api.inspect_network(e.network)["Name"]}, "with its own proxy only"
        assert used & {e.seat for _, e in hub.pooled()}, "a clean run's quiet seat comes back with its proxy"
    finally:
        backend.close()


def test_a_seat_its_run_left_noisy_is_never_relisted(root: Path, docker_client: Any, monkeypatch: pytest.MonkeyPatch,
                                                      created: list[dict[str, Any]]) -> None:
    backend = _backend(docker_client)
    held: Optional[HeldRun] = None
    holder: Any = None
    try:
        hub = _pool(backend, root)
        held = HeldRun(monkeypatch, backend, build_plan(load_policy(SECURE)))
        seat = created[-1]["network_mode"].removeprefix("container:")
        (network,) = docker_client.api.inspect_container(seat)["NetworkSettings"]["Networks"]
        (proxy,) = [c["IPv4Address"].split("/")[0] for cid, c in docker_client.api.inspect_network(network)["Containers"].items()
                    if cid != seat]
        # what a sandbox's leftover connection would be: a socket in the seat's namespace, open to the proxy
        holder = docker_client.containers.run(
            backend.images.sandbox, ["python3", "-c", "import socket, time\n"
                                     f"s = socket.create_connection(('{proxy}', {PROXY_PORT}))\n"
                                     "print('open', flush=True)\ntime.sleep(120)"],
            detach=True, network_mode=f"container:{seat}", user="65534:65534")
        deadline = time.monotonic() + 30
        while b"open" not in holder.logs():
            assert time.monotonic() < deadline, holder.logs()
            time.sleep(0.05)
        r = held.release()
        assert _outcomes(r) == _predicted(SECURE), r.notes
        backend.drain()
        deadline = time.monotonic() + 60
        while docker_client.api.containers(all=True, filters={"id": seat}):
            assert time.monotonic() < deadline, "the noisy seat was never removed"
            time.sleep(0.1)
        assert seat not in {e.seat for _, e in hub.pooled()}
    finally:
        if held is not None:
            held.close()
        if holder is not None:
            holder.remove(force=True)
        backend.close()


@pytest.mark.parametrize("where", ["hub", "own pool"])
def test_a_seat_killed_under_its_sandbox_makes_every_network_verdict_an_error(
        root: Path, docker_client: Any, monkeypatch: pytest.MonkeyPatch, created: list[dict[str, Any]], where: str) -> None:
    backend = _backend(docker_client, retries=0, **({} if where == "hub" else {"shared_idle": 0}))
    held: Optional[HeldRun] = None
    try:
        if where == "hub":
            _pool(backend, root)
        else:
            backend.run(build_plan(load_policy(SECURE)))  # its pool's proxies are seated now
        held = HeldRun(monkeypatch, backend, build_plan(load_policy(SECURE)))
        docker_client.api.kill(created[-1]["network_mode"].removeprefix("container:"))
        r = held.release()
    finally:
        if held is not None:
            held.close()
        backend.close()
    assert any("seat stopped during the run" in n for n in r.notes), r.notes
    network = {o.id: o.outcome for o in r.probes if o.id.startswith(("net-", "exfil-"))}
    assert network and set(network.values()) == {"error"}, network


def test_a_seat_that_does_not_fit_is_never_joined(root: Path, docker_client: Any, created: list[dict[str, Any]]) -> None:
    """Every pooled proxy is listed with the seat of another proxy (on another network): each run must start its
    sandbox on its own proxy's bridge, and judge as the prediction says."""
    backend = _backend(docker_client)
    try:
        hub = _pool(backend, root)
        pooled = hub.pooled()
        for (name, entry), (_, other) in zip(pooled, pooled[1:] + pooled[:1]):
            (hub.path / "pool" / f"{name}.json").unlink()
            hub.offer(name, dataclasses.replace(entry, seat=other.seat))
        r = backend.run(build_plan(load_policy(SECURE)))
        assert _outcomes(r) == _predicted(SECURE), r.notes
        kw = created[-1]
        assert "network_mode" not in kw and kw.get("network", "").endswith("-sbx"), kw
        assert kw.get("hostname") == "sandbox" and kw.get("sysctls"), kw
    finally:
        backend.close()
