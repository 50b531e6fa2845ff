"""The shared internet's on-disk record: leases, the pool's claims, the trash, the lock (no Docker)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from grader.backends.docker.lease import DEFAULT_IDLE, IDLE_ENV, HubDir, hub_dir, idle_seconds, process_alive
from owned import dead_pid


@pytest.fixture()
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> HubDir:
    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(tmp_path))
    h = hub_dir("services:abc", "{}")
    h.make()
    return h


def test_the_idle_period_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(IDLE_ENV, raising=False)
    assert idle_seconds() == DEFAULT_IDLE
    monkeypatch.setenv(IDLE_ENV, "2.5")
    assert idle_seconds() == 2.5
    monkeypatch.setenv(IDLE_ENV, "0")
    assert idle_seconds() == 0.0  # sharing between processes off
    monkeypatch.setenv(IDLE_ENV, "soon")
    assert idle_seconds() == DEFAULT_IDLE


def test_a_hub_is_shared_only_for_the_same_image_world_and_runs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(tmp_path / "a"))
    a = hub_dir("img:1", "world")
    assert a == hub_dir("img:1", "world") and a.path.parent == tmp_path / "a"
    assert a != hub_dir("img:2", "world") and a != hub_dir("img:1", "other world")
    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(tmp_path / "b"))
    assert hub_dir("img:1", "world").name != a.name


def test_a_keeper_is_recognised_by_its_pid_and_its_hub_name(hub: HubDir) -> None:
    assert process_alive(os.getpid())
    assert not process_alive(dead_pid())
    assert not process_alive(0)
    assert not process_alive(os.getpid(), "sl-hub-not-in-my-command-line")  # a recycled pid is not the keeper
    hub.set_keeper(dead_pid())
    assert not hub.keeper_alive()


def test_a_zombie_keeper_is_dead() -> None:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = 0
    while deadline < 200 and Path(f"/proc/{p.pid}/stat").read_text().split(") ")[1][0] != "Z":
        threading.Event().wait(0.02)
        deadline += 1
    try:
        assert not process_alive(p.pid)
    finally:
        p.wait()


def test_a_lease_holds_while_its_grader_lives_and_for_the_idle_period_after(hub: HubDir) -> None:
    assert not hub.holds(idle=60)
    hub.lease(os.getpid())
    assert hub.holds(idle=60)
    assert hub.holds(idle=60, now=1e12), "held by a live grader: no idle period ends it"
    hub.lease(os.getpid(), held=False)  # released: only the idle period is left
    assert hub.holds(idle=60)
    assert not hub.holds(idle=60, now=1e12)
    assert not list((hub.path / "leases").iterdir()), "a lapsed lease is removed"


def test_a_dead_graders_lease_lapses_after_the_idle_period(hub: HubDir) -> None:
    hub.lease(dead_pid())  # killed while holding it
    assert hub.holds(idle=60)
    assert not hub.holds(idle=60, now=1e12)


def test_a_warm_proxy_is_claimed_by_exactly_one_run(hub: HubDir) -> None:
    for i in range(3):
        hub.offer(f"sl-proxy-{i}", {"container": f"c{i}", "network": f"n{i}", "workdir": f"/w{i}", "ip": "10.0.0.2", "gen": "g"})
    got: list[str] = []
    lock = threading.Lock()

    def grab() -> None:
        while (c := hub.claim(os.getpid())) is not None:
            with lock:
                got.append(c[1]["container"])

    threads = [threading.Thread(target=grab) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == ["c0", "c1", "c2"], got
    assert hub.pooled() == [] and hub.claim(os.getpid()) is None
    assert sorted(pid for _, pid, _ in hub.claims()) == [os.getpid()] * 3
    assert not hub.withdraw("sl-proxy-0"), "a claimed proxy is no longer the keeper's to withdraw"


def test_the_trash_lists_what_a_run_made(hub: HubDir) -> None:
    path = hub.discard("sl-run", {"containers": ["c"], "networks": ["n"], "dirs": ["/d"]})
    assert hub.trash() == [(path, {"containers": ["c"], "networks": ["n"], "dirs": ["/d"]})]


def test_the_keeper_never_waits_for_the_lock(hub: HubDir) -> None:
    got: list[bool] = []

    def attempt() -> None:
        with hub.try_lock() as free:
            got.append(free)

    with hub.lock():
        t = threading.Thread(target=attempt)
        t.start()
        t.join(timeout=5)
        assert got == [False]
    with hub.try_lock() as free:
        assert free


def test_a_hubs_directory_is_the_graders_users_alone(hub: HubDir) -> None:
    """Its internet's logs carry every tenant's traffic, its trash names what the keeper removes: nobody else's to read or change."""
    assert (hub.path.stat().st_mode & 0o777) == 0o700
    with hub.lock():
        assert (hub.path.parent.stat().st_mode & 0o022) == 0
