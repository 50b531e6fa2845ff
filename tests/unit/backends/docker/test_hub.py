"""The hub's keeper puts a clean run's proxy back in the pool only when it may serve again (no Docker).

After a clean run a grader hands its claimed proxy back with its trash
(``HubSharing.hand_off``); the keeper removes the run's things first, then
re-lists the proxy (``hubpool.relist``) on ``ProxyPool.give_back``'s terms, or
removes it. The engine here is a fake of the adapter's calls the keeper
makes: containers and networks in dicts, a poke that makes a proxy beat (or
not: a hung one), removals that detach from networks. The hub's directory is
real, under a runs root of the test's own.

A keeper that gamed the integration test (re-list whatever a run hands back)
fails here: each condition is broken alone and the proxy must go, with its
network and directory, and nothing of it left in the pool.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import time
from pathlib import Path
from typing import Optional, Union

import pytest

from grader.backends.docker.engine import ContainerRef, EngineError, Missing, NetworkRef, Refused
from grader.backends.docker.hub import Hub, HubSharing
from grader.backends.docker.hubpool import empty_trash as _empty_trash, room, trim
from grader.backends.docker.lease import HubDir, ProxyEntry, Trash, hub_dir
from grader.backends.docker.resources import Resources
from grader.backends.docker.sharing import Taken
from grader.backends.docker.simnet import KEEP_WARM, LABEL, PROXY_RUNS, Leftovers
from grader.backends.files import host_files
from grader.core.world import load_world
from grader.protocol.common import POKE_SIGNAL

GEN = "g1"


class _Engine:
    """The adapter as the keeper asks it. ``hung``: proxies that ignore a poke; ``stuck``: containers whose removal
    the engine refuses (it was away)."""

    def __init__(self) -> None:
        self.containers: dict[str, ContainerRef] = {}
        self.nets: dict[str, NetworkRef] = {}
        self.attached: dict[str, set[str]] = {}  # network id -> container ids
        self.outs: dict[str, Path] = {}  # proxy container id -> its out directory (a poke makes it beat)
        self.hung: set[str] = set()
        self.stuck: set[str] = set()
        self.poked: list[str] = []

    def add_container(self, ident: str, status: str = "running", network: str = "", out: Optional[Path] = None) -> None:
        self.containers[ident] = ContainerRef(ident, f"{ident}-name", {LABEL: "sl-x"}, status=status)
        if network:
            self.attached.setdefault(network, set()).add(ident)
        if out is not None:
            self.outs[ident] = out

    def add_network(self, ident: str) -> None:
        self.nets[ident] = NetworkRef(ident, f"{ident}-name", {LABEL: "sl-x"})
        self.attached.setdefault(ident, set())

    @staticmethod
    def _id(thing: Union[str, ContainerRef, NetworkRef]) -> str:
        return thing if isinstance(thing, str) else thing.id

    def inspect(self, c: Union[str, ContainerRef]) -> ContainerRef:
        try:
            return self.containers[self._id(c)]
        except KeyError:
            raise Missing(f"no container {self._id(c)}") from None

    def network(self, n: Union[str, NetworkRef]) -> NetworkRef:
        try:
            net = self.nets[self._id(n)]
        except KeyError:
            raise Missing(f"no network {self._id(n)}") from None
        return dataclasses.replace(net, containers=tuple(sorted(self.attached[net.id])))

    def kill(self, c: ContainerRef, signal: Optional[str] = None) -> None:
        self.poked.append(c.id)
        assert signal == POKE_SIGNAL.name
        if c.id in self.outs and c.id not in self.hung:
            (self.outs[c.id] / "heartbeat").write_text(repr(time.time()))

    def remove_container(self, c: Union[str, ContainerRef]) -> None:
        ident = self._id(c)
        if ident in self.stuck:
            raise EngineError("the engine is away")
        self.inspect(ident)
        del self.containers[ident]
        for on in self.attached.values():
            on.discard(ident)

    def disconnect(self, n: NetworkRef, c: Union[str, ContainerRef]) -> None:
        if self._id(c) in self.stuck:
            raise Refused("not yet")  # the engine would not let it go
        self.attached[n.id].discard(self._id(c))

    def remove_network(self, n: Union[str, NetworkRef]) -> None:
        net = self.network(n)
        if net.containers:
            raise Refused(f"network {net.id} has active endpoints")
        del self.nets[net.id]


@pytest.fixture()
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "runs"
    root.mkdir(mode=0o700)
    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(root))
    return root


@pytest.fixture()
def hub(runs: Path) -> HubDir:
    h = hub_dir("services:test", "{}")
    h.make()
    return h


def _proxy(engine: _Engine, runs: Path, name: str = "sl-proxy-1", *, served: int = 0, gen: str = GEN,
           status: str = "running") -> ProxyEntry:
    """A hub proxy and its network, as a run leaves them: its last beat long ago, its run's lists still in place."""
    workdir = runs / name
    (workdir / "out").mkdir(parents=True)
    (workdir / "out" / "heartbeat").write_text("")
    os.utime(workdir / "out" / "heartbeat", (time.time() - 30, time.time() - 30))
    (workdir / "policy.json").write_text(json.dumps({"allowed": ["*.github.com"], "denied": []}))
    engine.add_network(f"{name}-net")
    engine.add_container(f"{name}-c", status, f"{name}-net", workdir / "out")
    return ProxyEntry(container=f"{name}-c", network=f"{name}-net", workdir=str(workdir), ip="10.0.1.2", gen=gen, runs=served)


def _run(engine: _Engine, runs: Path, hub: HubDir, proxy: ProxyEntry, run: str = "sl-run-1") -> Path:
    """A finished run: its sandbox on the proxy's network and its directory, handed to the keeper with the proxy."""
    engine.add_container(f"{run}-sandbox", "exited", proxy.network)
    (runs / run).mkdir()
    return hub.discard(run, Trash((f"{run}-sandbox",), (), (str(runs / run),), relist=proxy))


def _gone(engine: _Engine, proxy: ProxyEntry) -> bool:
    return (proxy.container not in engine.containers and proxy.network not in engine.nets
            and not Path(proxy.workdir).exists())


def test_a_clean_runs_proxy_is_relisted_with_one_more_run_its_lists_emptied(runs: Path, hub: HubDir) -> None:
    engine = _Engine()
    proxy = _proxy(engine, runs, served=3)
    path = _run(engine, runs, hub, proxy)
    _empty_trash(engine, hub, Leftovers(engine), GEN, 2)  # type: ignore[arg-type]
    assert hub.pooled() == [("sl-proxy-1", dataclasses.replace(proxy, runs=4))]
    assert "sl-run-1-sandbox" not in engine.containers and not (runs / "sl-run-1").exists(), "the run's things went"
    assert proxy.container in engine.containers and engine.network(proxy.network).containers == (proxy.container,)
    assert engine.poked == [proxy.container], "asked for a fresh self-check"
    assert json.loads((Path(proxy.workdir) / "policy.json").read_text()) == {"allowed": [], "denied": []}, \
        "it refuses everything until the next run's hand_over"
    assert not path.exists(), "the run's file goes once the keeper is done with it (a grader's settle waits for that)"



def test_a_clean_runs_proxy_is_relisted_with_the_seat_its_keeper_gives_for_the_one_its_sandbox_sat_in(
        runs: Path, hub: HubDir) -> None:
    """The seat a clean run's sandbox sat in stays on the proxy's network for the keeper to judge
    (``seats.relisted_seat``): it is no stranger there, and the keeper is asked with it; another container is."""
    engine = _Engine()
    proxy = dataclasses.replace(_proxy(engine, runs), seat="seat-1")
    engine.add_container("seat-1", "running", proxy.network)
    _run(engine, runs, hub, proxy)
    asked: list[tuple[str, str]] = []

    def seat(network: NetworkRef, used: str) -> str:
        asked.append((network.id, used))
        return used

    _empty_trash(engine, hub, Leftovers(engine), GEN, 2, seat)  # type: ignore[arg-type]
    assert asked == [(proxy.network, "seat-1")]
    assert hub.pooled() == [("sl-proxy-1", dataclasses.replace(proxy, runs=1))]
    # a seat the entry does not name is a stranger on the network: never re-listed
    other = dataclasses.replace(_proxy(engine, runs, "sl-proxy-2"), seat="seat-2")
    engine.add_container("seat-3", "running", other.network)
    _run(engine, runs, hub, other, run="sl-run-2")
    _empty_trash(engine, hub, Leftovers(engine), GEN, 2, seat)  # type: ignore[arg-type]
    assert [n for n, _ in hub.pooled()] == ["sl-proxy-1"] and _gone(engine, other)


def _broken(case: str, engine: _Engine, runs: Path, hub: HubDir) -> tuple[ProxyEntry, Leftovers]:
    """Each case breaks one of the keeper's conditions for re-listing, all others met."""
    leftovers = Leftovers(engine)  # type: ignore[arg-type]
    proxy = _proxy(engine, runs, served=PROXY_RUNS - 1 if case == "its-last-run" else 0,
                   gen="g0" if case == "another-internet" else GEN, status="exited" if case == "stopped" else "running")
    if case == "hung":
        engine.hung.add(proxy.container)
    if case == "pool-full":
        for i in range(room(2)):
            hub.offer(f"sl-proxy-w{i}", dataclasses.replace(proxy, container=f"w{i}", runs=0))
    if case == "sandbox-left":  # its removal failed: the proxy's network still holds it
        engine.stuck.add("sl-run-1-sandbox")
    if case == "a-stranger-on-its-network":
        engine.add_container("other", "running", proxy.network)
    if case == "its-network-gone":
        del engine.nets[proxy.network]
    if case == "outside-the-runs-root":
        proxy = dataclasses.replace(proxy, workdir=str(runs.parent / "elsewhere" / "sl-proxy-1"))
    return proxy, leftovers


CASES = ["its-last-run", "another-internet", "stopped", "hung", "pool-full", "sandbox-left",
         "a-stranger-on-its-network", "its-network-gone", "outside-the-runs-root"]


@pytest.mark.parametrize("case", CASES)
def test_a_proxy_that_should_not_serve_again_is_removed_never_relisted(runs: Path, hub: HubDir, case: str) -> None:
    engine = _Engine()
    proxy, leftovers = _broken(case, engine, runs, hub)
    before = hub.pooled()
    path = _run(engine, runs, hub, proxy)
    _empty_trash(engine, hub, leftovers, GEN, 2)  # type: ignore[arg-type]
    assert hub.pooled() == before, f"{case}: nothing was added to the pool"
    assert not path.exists()
    if case == "sandbox-left":  # the engine refused: kept in the keeper's leftovers, retried, never dropped
        assert proxy.container not in engine.containers and len(leftovers) > 0
    elif case == "outside-the-runs-root":
        assert proxy.container not in engine.containers and proxy.network not in engine.nets
    else:
        assert _gone(engine, proxy), f"{case}: the proxy, its network and its directory went"


@pytest.mark.parametrize("who", ["a keeper stopping", "a grader retiring the hub"])
def test_whoever_else_empties_the_trash_removes_the_proxy_for_good(runs: Path, hub: HubDir, who: str) -> None:
    """No gen: the keeper's shutdown (``keep``'s finally) and a grader's ``_retire`` re-list nothing."""
    engine = _Engine()
    proxy = _proxy(engine, runs)
    _run(engine, runs, hub, proxy)
    _empty_trash(engine, hub, Leftovers(engine))  # type: ignore[arg-type]
    assert hub.pooled() == [] and _gone(engine, proxy) and hub.trash() == []
    assert engine.poked == [], "not even asked"


def test_a_proxy_serves_proxy_runs_runs_then_is_retired(runs: Path, hub: HubDir) -> None:
    """Claimed, run, handed back, over and over: the same proxy serves exactly ``PROXY_RUNS`` runs, then goes."""
    engine = _Engine()
    hub.offer("sl-proxy-1", _proxy(engine, runs))
    served = 0
    while (got := hub.claim(os.getpid())) is not None:
        claim, entry = got
        served += 1
        _run(engine, runs, hub, entry, run=f"sl-run-{served}")
        claim.unlink()
        (Path(entry.workdir) / "out" / "heartbeat").touch()
        os.utime(Path(entry.workdir) / "out" / "heartbeat", (time.time() - 30, time.time() - 30))
        _empty_trash(engine, hub, Leftovers(engine), GEN, 2)  # type: ignore[arg-type]
        assert served <= PROXY_RUNS
    assert served == PROXY_RUNS and _gone(engine, entry)


def test_a_proxy_handed_back_to_a_pool_refilled_behind_its_run_is_still_relisted(runs: Path, hub: HubDir) -> None:
    """The keeper refills while a run holds its proxy ready (``HubDir.quiet``), so the pool can be full when the run
    hands its proxy back. A keeper re-listing only below the pool's size removed that clean proxy, and the run
    after it built one on its path: it is re-listed up to ``room``, never beyond."""
    engine = _Engine()
    proxy = _proxy(engine, runs)
    for i in range(KEEP_WARM):  # refilled to its size while the run went on
        hub.offer(f"sl-proxy-w{i}", dataclasses.replace(proxy, container=f"w{i}", runs=0))
    _run(engine, runs, hub, proxy)
    _empty_trash(engine, hub, Leftovers(engine), GEN, KEEP_WARM)  # type: ignore[arg-type]
    assert ("sl-proxy-1", dataclasses.replace(proxy, runs=1)) in hub.pooled() and len(hub.pooled()) == KEEP_WARM + 1
    assert room(KEEP_WARM) == 2 * KEEP_WARM and room(1) == 2 * KEEP_WARM, "room: twice the size, KEEP_WARM at least"


def test_the_keeper_trims_a_pool_above_its_size_once_no_run_holds_a_claim(runs: Path, hub: HubDir) -> None:
    """Back to ``size``, one proxy at a time, the one that served most first; never while a run holds a claim or
    hands a proxy back (the run's proxy may be the next to come home), and never below the size."""
    engine = _Engine()
    size = 2
    for i, served in enumerate([3, 9, 1]):
        hub.offer(f"sl-proxy-{i}", _proxy(engine, runs, f"sl-proxy-{i}", served=served))
    got = hub.claim(os.getpid())
    assert got is not None
    assert not trim(engine, hub, size, Leftovers(engine)), "a claim is held: nothing is trimmed"  # type: ignore[arg-type]
    got[0].rename(hub.path / "pool" / got[0].name.replace(f"@{os.getpid()}", ""))  # back unclaimed
    path = hub.discard("sl-run-x", Trash((), (), (), relist=None))
    assert not trim(engine, hub, size, Leftovers(engine)), "trash waits: nothing is trimmed"  # type: ignore[arg-type]
    path.unlink()
    assert trim(engine, hub, size, Leftovers(engine))  # type: ignore[arg-type]
    assert sorted(name for name, _ in hub.pooled()) == ["sl-proxy-0", "sl-proxy-2"], "the one with most runs went"
    assert "sl-proxy-1-c" not in engine.containers and "sl-proxy-1-net" not in engine.nets
    assert not (runs / "sl-proxy-1").exists()
    assert not trim(engine, hub, size, Leftovers(engine)), "at its size: nothing more"  # type: ignore[arg-type]
    assert len(hub.pooled()) == size


# --- the grader's side: what a run hands back ------------------------------------------------------------------


class _Internet:
    world = load_world()


@pytest.fixture()
def claimed(runs: Path, hub: HubDir, monkeypatch: pytest.MonkeyPatch) -> tuple[_Engine, HubSharing, Taken, Resources, ProxyEntry]:
    """A grader's run that claimed the keeper's warm proxy (served twice before), and made a sandbox."""
    engine = _Engine()
    proxy = _proxy(engine, runs, served=2)
    monkeypatch.setattr(HubDir, "keeper_alive", lambda self: True)
    leftovers = Leftovers(engine)  # type: ignore[arg-type]
    h = Hub(engine, "services:test", leftovers)  # type: ignore[arg-type]
    h._gen = GEN
    h.dir.make()
    h.dir.offer("sl-proxy-1", proxy)
    monkeypatch.setattr(h, "internet", lambda world=None: _Internet())
    sharing = HubSharing(engine, "services:test", h, leftovers)  # type: ignore[arg-type]
    made = Resources()
    taken = sharing.take(made, load_world())
    assert not taken.borrowed and taken.proxy.runs == 2, "its runs come from the claimed entry"
    made.container(ContainerRef("sbx", "sbx-name"))
    made.directory(host_files(runs / "sl-run-1"))
    return engine, sharing, taken, made, proxy


def test_a_clean_run_hands_its_proxy_back_to_relist_and_an_unclean_one_everything_to_remove(
        claimed: tuple[_Engine, HubSharing, Taken, Resources, ProxyEntry]) -> None:
    engine, sharing, taken, made, proxy = claimed
    assert sharing.hand_off("sl-run-1", made, taken, clean=True)
    ((_, clean),) = sharing.hub.dir.trash()
    assert clean == Trash(("sbx",), (), (str(Path(proxy.workdir).parent / "sl-run-1"),), relist=proxy), \
        "the proxy is not among the things to remove: the keeper decides, knowing the runs it served"
    assert sharing.hub.dir.claims() == [], "the claim is given up"
    assert taken.kept(True) == {proxy.container, proxy.network} and taken.kept(False) == frozenset()


def test_an_unclean_run_hands_its_proxy_over_to_be_removed(claimed: tuple[_Engine, HubSharing, Taken, Resources, ProxyEntry]) -> None:
    engine, sharing, taken, made, proxy = claimed
    assert sharing.hand_off("sl-run-1", made, taken, clean=False)
    ((_, unclean),) = sharing.hub.dir.trash()
    assert unclean.relist is None
    assert set(unclean.containers) == {"sbx", proxy.container} and unclean.networks == (proxy.network,)
    assert proxy.workdir in unclean.dirs


def test_a_proxy_this_hub_never_handed_out_is_never_handed_back_to_relist(
        claimed: tuple[_Engine, HubSharing, Taken, Resources, ProxyEntry]) -> None:
    """Fail closed: a proxy whose container is not the one claimed (or claimed twice over) goes with the rest."""
    engine, sharing, taken, made, proxy = claimed
    other = Taken(dataclasses.replace(taken.proxy, container=ContainerRef("not-it", "x")), borrowed=False)
    assert sharing.hand_off("sl-run-1", made, other, clean=True)
    ((_, trash),) = sharing.hub.dir.trash()
    assert trash.relist is None and proxy.container in trash.containers
    assert sharing.hub.relisting(taken.proxy) is None, "a claim is handed back once"


def test_a_graders_settle_removes_the_proxy_only_if_the_keeper_never_finished_its_run(
        claimed: tuple[_Engine, HubSharing, Taken, Resources, ProxyEntry], monkeypatch: pytest.MonkeyPatch) -> None:
    engine, sharing, taken, made, proxy = claimed
    assert sharing.hand_off("sl-run-1", made, taken, clean=True)
    _empty_trash(engine, sharing.hub.dir, Leftovers(engine), GEN, 2)  # type: ignore[arg-type]
    assert [e.container for _, e in sharing.hub.dir.pooled()] == [proxy.container]
    sharing.hub.settle(timeout=1)
    assert proxy.container in engine.containers, "re-listed by the keeper: the grader's settle leaves it"
    # the next run's keeper dies before it gets to the run's file: the grader removes it all, the proxy too
    got = sharing.take(Resources(), load_world())
    assert got.proxy.container is not None and got.proxy.container.id == proxy.container and got.proxy.runs == 3
    assert sharing.hand_off("sl-run-2", Resources(), got, clean=True)
    monkeypatch.setattr(HubDir, "keeper_alive", lambda self: False)
    sharing.hub.settle(timeout=1)
    assert proxy.container not in engine.containers and sharing.hub.dir.trash() == []


def test_the_replay_leaves_a_proxy_that_may_serve_again_and_removes_the_rest(
        claimed: tuple[_Engine, HubSharing, Taken, Resources, ProxyEntry]) -> None:
    """The replay removes the run's sandbox, proxy and networks while it plays (``replay._releasing``); a hub's proxy
    of a clean run is to be handed back for re-listing, so it and its network stay. After an unclean run (or one
    whose proxy is not a hub's claimed one) they go as before."""
    from types import SimpleNamespace

    from grader.backends.docker import replay
    from grader.backends.docker.simnet import LABEL_ROLE

    engine, sharing, taken, made, proxy = claimed
    made.containers[:] = [ContainerRef(proxy.container, "p", {LABEL_ROLE: "proxy"}), ContainerRef("sbx", "s", {LABEL_ROLE: "sandbox"}),
                          ContainerRef("holder", "h"), ContainerRef("replay-internet", "i", {LABEL_ROLE: "internet"})]
    made.networks[:] = [NetworkRef(proxy.network, "pn"), NetworkRef("other", "o")]
    session = SimpleNamespace(copy=SimpleNamespace(container=ContainerRef("holder", "h")))
    for clean, stays in [(True, {proxy.container, proxy.network}), (False, set())]:
        removed: list[str] = []
        gone = SimpleNamespace(remove=lambda thing: removed.append(thing.id))
        assert replay._releasing(session, made, gone, taken.kept(clean))()  # type: ignore[arg-type]
        assert set(removed) == {proxy.container, "sbx", "holder", proxy.network, "other"} - stays, clean
        assert removed.index("holder") < removed.index("other"), "containers before networks"
    assert Taken(taken.proxy, borrowed=True).kept(True) == frozenset(), "a borrowed proxy is never in made: nothing to keep"


# --- a dry pool: the run builds its proxy as the keeper's ------------------------------------------------------


@pytest.fixture()
def dry(runs: Path, hub: HubDir, monkeypatch: pytest.MonkeyPatch) -> tuple[_Engine, HubSharing, object]:
    """A grader on a hub whose keeper (here: this test's parent process) runs and whose pool is empty; building a
    proxy makes its container, network and directory as ``proxies.build_proxy`` would, with the labels it is given."""
    from grader.backends import owners
    from grader.backends.docker import hub as hub_module
    from grader.backends.docker.proxies import WarmProxy

    engine = _Engine()
    leftovers = Leftovers(engine)  # type: ignore[arg-type]
    h = Hub(engine, "services:test", leftovers)  # type: ignore[arg-type]
    h.dir.make()
    h.dir.set_keeper(os.getppid())
    internet = _Internet()
    h._gen, h._net = GEN, internet  # type: ignore[assignment]
    monkeypatch.setattr(h, "internet", lambda world=None: internet)

    def build_proxy(engine_: _Engine, image: str, net: object, labels_for: object, leftovers_: Leftovers,
                    disk: object = None) -> WarmProxy:
        name = f"sl-proxy-built{len(engine_.containers)}"
        workdir = owners.make_run_dir(name)
        (workdir / "out").mkdir()
        labels = labels_for(name)  # type: ignore[operator]
        engine_.nets[f"{name}-net"] = NetworkRef(f"{name}-net", f"{name}-sbx", labels)
        engine_.attached[f"{name}-net"] = {f"{name}-c"}
        engine_.containers[f"{name}-c"] = ContainerRef(f"{name}-c", f"{name}-proxy", labels, status="running")
        engine_.outs[f"{name}-c"] = workdir / "out"
        return WarmProxy(engine_.containers[f"{name}-c"], engine_.nets[f"{name}-net"], host_files(workdir), "10.0.9.2",
                         net)  # type: ignore[arg-type]

    monkeypatch.setattr(hub_module, "build_proxy", build_proxy)
    return engine, HubSharing(engine, "services:test", h, leftovers), internet  # type: ignore[arg-type]


def test_a_proxy_a_run_builds_on_a_dry_pool_is_the_keepers_claimed_and_relisted_after_a_clean_run(
        dry: tuple[_Engine, HubSharing, object], monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a stream of runs the pool runs dry; a proxy a run then built for itself used to go with its run (0.88
    proxies built a run with three service workers on the hub, against 0.24 on a worker's own pool). Built as the
    keeper's and claimed, it serves the next runs of any grader, and a grader dying mid-run leaves it to the keeper."""
    from grader.backends.docker.simnet import LABEL_HUB, LABEL_PID, LABEL_STARTED
    from grader.backends.files import host_path
    from grader.backends.owners import process_start, read_owner

    engine, sharing, _ = dry
    monkeypatch.setattr(HubDir, "keeper_alive", lambda self: True)
    made = Resources()
    taken = sharing.take(made, load_world())
    w = taken.proxy
    assert not taken.borrowed and w.claim is not None and w.container is not None, "claimed, as one from the pool"
    keeper = os.getppid()
    assert w.container.labels[LABEL_PID] == str(keeper) and w.container.labels[LABEL_STARTED] == str(process_start(keeper))
    assert w.container.labels[LABEL_HUB] == sharing.hub.dir.name
    assert engine.nets[w.network.id].labels[LABEL_PID] == str(keeper), "its network is the keeper's too"
    owner = read_owner(host_path(w.workdir))
    assert owner is not None and owner.pid == keeper, "its directory is the keeper's: no sweep takes it with this grader"
    ((claim, pid, entry),) = sharing.hub.dir.claims()
    assert claim == w.claim and pid == os.getpid() and entry.container == w.container.id and entry.gen == GEN
    assert {w.container.id, w.network.id} <= {c.id for c in made.containers} | {n.id for n in made.networks}

    assert sharing.hand_off("sl-run-1", made, taken, clean=True)
    ((_, trash),) = sharing.hub.dir.trash()
    assert trash.relist == entry and w.container.id not in trash.containers
    _empty_trash(engine, sharing.hub.dir, Leftovers(engine), GEN, 2)  # type: ignore[arg-type]
    assert [e.container for _, e in sharing.hub.dir.pooled()] == [w.container.id], "re-listed for the next run"
    again = sharing.take(Resources(), load_world())
    assert again.proxy.container is not None and again.proxy.container.id == w.container.id and again.proxy.runs == 1


def test_without_a_live_keeper_a_run_on_a_dry_pool_builds_a_proxy_of_its_own_that_goes_with_it(
        dry: tuple[_Engine, HubSharing, object], monkeypatch: pytest.MonkeyPatch) -> None:
    """No keeper to own it: the proxy is this grader's (its own labels, no claim) and is removed after its run."""
    from grader.backends.docker import hub as hub_module
    from grader.backends.docker.simnet import LABEL_PID

    engine, sharing, _ = dry
    monkeypatch.setattr(HubDir, "keeper_alive", lambda self: False)
    built: list[dict[str, str]] = []
    real = hub_module.build_proxy

    def own_build(*args: object, **kwargs: object) -> object:
        w = real(*args, **kwargs)  # type: ignore[arg-type]
        built.append(dict(w.container.labels))
        return w

    monkeypatch.setattr("grader.backends.docker.proxies.build_proxy", own_build)
    taken = sharing.take(Resources(), load_world())
    assert taken.borrowed and taken.proxy.claim is None and sharing.hub.dir.claims() == []
    assert built and built[0][LABEL_PID] == str(os.getpid()), "built by the grader's own pool, as before"


def test_the_keeper_refills_a_dry_pool_at_once_and_a_short_one_only_when_quiet() -> None:
    """A stream of runs keeps the hub from ever being quiet: a dry pool is refilled anyway (each run finding it empty
    builds a proxy on its own path); a pool with proxies left waits until no sandbox may be starting."""
    from grader.backends.docker.hubpool import refill_now

    asked: list[int] = []

    def quiet(answer: bool) -> object:
        return lambda: asked.append(1) or answer

    assert refill_now(0, 4, quiet(False)) and not asked, "dry: at once, without asking"  # type: ignore[arg-type]
    assert not refill_now(2, 4, quiet(False)) and refill_now(2, 4, quiet(True))  # type: ignore[arg-type]
    assert not refill_now(4, 4, quiet(True)) and not refill_now(5, 4, quiet(True)), "at or above its size: never"  # type: ignore[arg-type]


def test_a_proxy_built_for_a_hub_whose_directory_went_is_removed_and_the_run_builds_its_own(
        dry: tuple[_Engine, HubSharing, object], monkeypatch: pytest.MonkeyPatch) -> None:
    """The keeper retired between the run's check and its claim: nothing of the keeper's proxy is left behind."""
    import shutil

    engine, sharing, _ = dry
    monkeypatch.setattr(HubDir, "keeper_alive", lambda self: True)
    real = HubDir.claim_built

    def gone(self: HubDir, name: str, pid: int, entry: ProxyEntry) -> Path:
        shutil.rmtree(self.path / "claimed")
        return real(self, name, pid, entry)

    from grader.backends.docker import hub as hub_module

    monkeypatch.setattr(HubDir, "claim_built", gone)
    monkeypatch.setattr("grader.backends.docker.proxies.build_proxy", hub_module.build_proxy)  # the fixture's, for both
    taken = sharing.take(Resources(), load_world())
    assert taken.borrowed and taken.proxy.claim is None
    assert [c for c in engine.containers if c != taken.proxy.container.id] == [], "the keeper's one was removed"  # type: ignore[union-attr]


def test_a_grader_names_why_it_would_retire_a_hub(runs: Path) -> None:
    """What a grader logs before it retires a hub (``Hub._unwell``, in a service worker's log): each reason alone,
    and "" only when the record, the keeper, the heartbeat and the container all hold."""
    import subprocess
    import sys

    from grader.backends.docker.lease import KeeperState
    from grader.backends.docker.simnet import Internet

    engine = _Engine()
    h = Hub(engine, "services:test", Leftovers(engine))  # type: ignore[arg-type]
    h.dir.make()
    workdir = runs / "inet"
    (workdir / "out").mkdir(parents=True)
    engine.add_container("inet", out=workdir / "out")
    net = Internet(engine, engine.containers["inet"], NetworkRef("n", "n-inet", {}), "10.0.9.1",  # type: ignore[arg-type]
                   host_files(workdir).sub("out"), load_world())
    assert h._unwell(net) == "it has no keeper's record"
    h.dir.write_state(KeeperState(gen=GEN, container="inet", network="n", ip="10.0.9.1", dir=str(workdir)))
    h._gen = "another"
    assert h._unwell(net) == "its keeper's record names another internet"
    h._gen = GEN
    assert h._unwell(net) == "its keeper is not running"
    keeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", h.dir.name])  # its name: a keeper's
    try:
        h.dir.set_keeper(keeper.pid)
        assert h._unwell(net) == "its internet's last heartbeat is older than 5 s"
        beat = workdir / "out" / "heartbeat"
        beat.write_text(repr(time.time()))
        assert h._unwell(net) == ""
        os.utime(beat, (time.time() - 6, time.time() - 6))
        assert h._unwell(net) == "its internet's last heartbeat is older than 5 s"
        beat.write_text(repr(time.time()))
        engine.containers["inet"] = dataclasses.replace(engine.containers["inet"], status="exited")
        assert h._unwell(net) == "its internet is not running (or the engine did not answer)"
    finally:
        keeper.kill()
        keeper.wait()


@pytest.mark.parametrize("answers", [True, False])
def test_a_hub_whose_beat_is_late_is_asked_before_it_is_retired(runs: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  caplog: pytest.LogCaptureFixture, answers: bool) -> None:
    """A machine busy enough to delay an internet's beats must not cost every grader on the hub its runs: a grader
    that finds the beat stale pokes the internet and adopts it if it answers; one that stays silent (hung) is
    retired, with that said in the log."""
    import subprocess
    import sys

    from grader.backends.docker import hub as hub_module
    from grader.backends.docker.lease import KeeperState

    monkeypatch.setattr(hub_module, "BEAT_STALE", 0.5)  # how long the poke's answer is waited for, here
    engine = _Engine()
    h = Hub(engine, "services:test", Leftovers(engine))  # type: ignore[arg-type]
    h.dir.make()
    workdir = runs / "inet"
    (workdir / "out").mkdir(parents=True)
    beat = workdir / "out" / "heartbeat"
    beat.write_text("")
    os.utime(beat, (time.time() - 6, time.time() - 6))
    engine.add_container("inet", out=workdir / "out")
    engine.add_network("n")
    if not answers:
        engine.hung.add("inet")
    h.dir.write_state(KeeperState(gen=GEN, container="inet", network="n", ip="10.0.9.1", dir=str(workdir)))
    retired: list[str] = []
    monkeypatch.setattr(h, "_retire", lambda: retired.append("retired"))
    monkeypatch.setattr(h, "_start", lambda: "a new hub")
    keeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", h.dir.name])
    try:
        h.dir.set_keeper(keeper.pid)
        with caplog.at_level(logging.INFO, logger="grader.backends.docker.hub"):
            got = h.internet()
    finally:
        keeper.kill()
        keeper.wait()
    assert engine.poked == ["inet"]
    logged = [r.getMessage() for r in caplog.records if r.name == "grader.backends.docker.hub"]
    if answers:
        assert retired == [] and got.container.id == "inet" and logged == []
    else:
        assert retired == ["retired"] and got == "a new hub"
        assert logged == [f"retiring the machine's hub {h.dir.name}: its internet's last heartbeat is older than 5 s, "
                          f"and it did not answer a poke within 0 s more"]
