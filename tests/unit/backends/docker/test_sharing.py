"""The shared internet answers for the world of the runs' plans, handed in by them, and for no other (no Docker).

A run behind a proxy borrows an internet that other runs share. Its plan
carries its world; the internet must answer for that world (its hosts, their
ports, the attacker's zone), so a plan of another world is refused, never
served by an internet that answers for a different machine and internet.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from grader.backends.docker import proxies, simnet
from grader.backends.docker.engine import ContainerRef, NetworkRef
from grader.backends.docker.hub import Hub
from grader.backends.docker.resources import Resources
from grader.backends.docker.sharing import InProcess
from grader.backends.docker.proxies import ProxyPool
from grader.backends.docker.simnet import Internet, Leftovers, SharedInternet
from grader.backends.files import host_files
from grader.core.errors import BackendError
from grader.core.world import World, load_world


class _Running:
    """The engine adapter as the shared internet asks it: every service runs."""

    def inspect(self, c: ContainerRef) -> ContainerRef:
        return dataclasses.replace(c, status="running")


def _fake_start(started: list[World]) -> Any:
    def start(client: Any, image: str, world: World, workdir: Any, *a: Any, **k: Any) -> Internet:
        started.append(world)
        return Internet(_Running(), ContainerRef("c1", "sl-shared-test"), NetworkRef("n1", "sl-shared-test"),  # type: ignore[arg-type]
                        "10.0.0.2", workdir.sub("out"), world)

    return start


def _other_world() -> World:
    world = load_world()
    return dataclasses.replace(world, hosts=tuple(h for h in world.hosts if h.name != "pypi.org"))


def test_the_shared_internet_starts_for_the_first_runs_world_and_refuses_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[World] = []
    monkeypatch.setattr(simnet, "start_internet", _fake_start(started))
    monkeypatch.setattr(simnet, "make_run_dir", lambda name: tmp_path / name)
    shared = SharedInternet(None, "sandbox-lab/services:test", Leftovers())
    with pytest.raises(BackendError, match="answers for no world yet"):
        shared.get()  # the pool's refill before any run: nothing to start it for
    world = _other_world()  # not Sandbox Lab's own: the plan's world is the one served, never a default
    net = shared.get(world)
    assert started == [world] and net.world is world
    assert shared.get() is net and shared.get(world) is net and shared.get(dataclasses.replace(world)) is net
    with pytest.raises(BackendError, match="another world"):
        shared.get(load_world())
    assert started == [world], "a run of another world starts nothing and is served by nothing"


def test_a_run_takes_its_proxy_for_its_plans_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[World] = []
    monkeypatch.setattr(simnet, "start_internet", _fake_start(started))
    monkeypatch.setattr(simnet, "make_run_dir", lambda name: tmp_path / name)
    built: list[Internet] = []

    def build(self: ProxyPool, internet: Internet) -> proxies.WarmProxy:
        built.append(internet)
        return proxies.WarmProxy(ContainerRef("c2", "sl-proxy-test"), NetworkRef("n2", "sl-proxy-test"), host_files(tmp_path / "proxy"),
                                "10.0.1.2", internet)

    monkeypatch.setattr(ProxyPool, "_build", build)
    shared = SharedInternet(None, "sandbox-lab/services:test", Leftovers())
    sharing = InProcess(shared, ProxyPool(None, "sandbox-lab/services:test", shared, Leftovers()))
    world = _other_world()
    taken = sharing.take(Resources(), world)
    assert taken.proxy.internet.world is world and started == [world] and sharing.internet() is built[0]
    with pytest.raises(BackendError, match="another world"):
        sharing.take(Resources(), load_world())


def test_the_hub_serves_sandbox_labs_own_world_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(tmp_path))
    hub = Hub(None, "sandbox-lab/services:test", Leftovers())
    assert hub.world == load_world()
    with pytest.raises(BackendError, match="Sandbox Lab's own world"):
        hub.internet(_other_world())  # refused before any keeper is looked for or started
    assert not any(tmp_path.iterdir()), "nothing was made for a run it refused"
