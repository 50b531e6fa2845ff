"""A backend's own pool (the service's kept workers, ``grade-batch``) seats its proxies: a run's sandbox joins the
seat's network namespace, the seat serves the proxy's next runs only while each run leaves it quiet, and the
verdicts are the prediction's throughout (``seats.PoolSeats``, ``proxies.ProxyPool``).

Builds that would pass a weaker test, and why these fail them:

* a pool that never seats its proxies (the speed lost): each sandbox's network mode is checked;
* one that hands a run a seat without asking whether the last run left it quiet: a process joined to the seat's
  namespace holds a connection open to the proxy, the seat must be found noisy and replaced, and the next run must
  join the new one;
* one that never asks whether the seat still runs after its sandbox: ``test_seats_docker`` kills a pool's seat
  under its held run too.
"""

from __future__ import annotations

import time
from typing import Any, Iterator

import pytest

from grader import load_policy
from grader.backends.docker import seats
from grader.backends.docker.backend import DockerBackend
from grader.backends.docker.engine import DockerEngine
from grader.backends.docker.images import find_images
from grader.backends.docker.proxies import WarmProxy
from grader.core.plan import build_plan
from grader.protocol.common import PROXY_PORT

from faultkit import assert_as_predicted, sandbox_creates

pytestmark = pytest.mark.docker

SECURE = {"filesystem": {"allowWrite": ["/app/workspace/build"]}, "network": {"allowedDomains": ["registry.npmjs.org"]}}
NAIVE = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}


@pytest.fixture()
def backend(docker_client: Any) -> Iterator[DockerBackend]:
    images = find_images(DockerEngine(docker_client))
    assert images is not None
    b = DockerBackend(DockerEngine(docker_client), images, shared_idle=0)  # its own internet and pool: no hub
    yield b
    b.close()


@pytest.fixture()
def created(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The create keywords of every sandbox, in order."""
    return sandbox_creates(monkeypatch)


def _seat_of(kw: dict[str, Any]) -> str:
    mode = str(kw.get("network_mode", ""))
    assert mode.startswith("container:"), kw
    assert "hostname" not in kw and "sysctls" not in kw, "the seat holds both"
    return mode.removeprefix("container:")


def _pooled(backend: DockerBackend) -> list[WarmProxy]:
    backend.drain()
    return list(backend.sharing.pool._warm)  # type: ignore[attr-defined]


def test_a_pools_seat_serves_its_proxys_runs_one_after_another_with_the_predicted_verdicts(
        backend: DockerBackend, docker_client: Any, created: list[dict[str, Any]]) -> None:
    for raw in (SECURE, NAIVE, SECURE, NAIVE):
        r = backend.run(build_plan(load_policy(raw)))
        assert_as_predicted(r, raw)
    used = [_seat_of(kw) for kw in created]  # a naive run's next session is seated too
    assert len(used) == 6, created
    assert len(set(used)) < len(used), f"no seat served a second run: {used}"
    for w in _pooled(backend):
        assert w.seat and docker_client.api.inspect_container(w.seat)["State"]["Running"], w
        assert seats.quiet(backend.engine, w.seat) == "", "a seat whose runs are over is quiet"
    backend.close()
    assert all(docker_client.api.containers(all=True, filters={"id": s}) == [] for s in set(used)), "seats go with the pool"


def test_a_seat_left_noisy_is_replaced_before_its_next_run(backend: DockerBackend, docker_client: Any,
                                                           created: list[dict[str, Any]]) -> None:
    r = backend.run(build_plan(load_policy(SECURE)))
    assert_as_predicted(r, SECURE)
    (w, *_) = [w for w in _pooled(backend) if w.seat == _seat_of(created[-1])]
    noisy = w.seat
    # what a sandbox's leftover connection would be: a socket in the seat's namespace, open to the proxy
    holder = docker_client.containers.run(
        backend.images.sandbox, ["python3", "-c", "import socket, time\n"
                                 f"s = socket.create_connection(('{w.ip}', {PROXY_PORT}))\nprint('open', flush=True)\n"
                                 "time.sleep(120)"],
        detach=True, network_mode=f"container:{noisy}", user="65534:65534", labels={"org.sandbox-lab.test": "holder"})
    try:
        deadline = time.monotonic() + 30
        while b"open" not in holder.logs():
            assert time.monotonic() < deadline, holder.logs()
            time.sleep(0.05)
        why = seats.quiet(backend.engine, noisy)
        assert why.startswith("its network namespace still holds tcp: "), why
        holder.remove(force=True)  # its process is gone, its connection closes: quiet again
        assert seats.quiet(backend.engine, noisy) == ""
        holder = docker_client.containers.run(  # and open again, for the pool to find
            backend.images.sandbox, ["python3", "-c", "import socket, time\n"
                                     f"s = socket.create_connection(('{w.ip}', {PROXY_PORT}))\ntime.sleep(120)"],
            detach=True, network_mode=f"container:{noisy}", user="65534:65534")
        time.sleep(0.5)
        backend.sharing.pool._seating.reseat(w)  # type: ignore[attr-defined]  # what give_back asks before the next run
        assert w.seat and w.seat != noisy, "a noisy seat must not serve again"
    finally:
        holder.remove(force=True)
    r = backend.run(build_plan(load_policy(SECURE)))
    assert_as_predicted(r, SECURE)
    assert _seat_of(created[-1]) != noisy
    backend.drain()
    assert docker_client.api.containers(all=True, filters={"id": noisy}) == [], "the noisy seat was removed"
