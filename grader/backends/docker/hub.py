"""The machine's shared simulated internet (a hub): its keeper process, and a grader's handle on it.

A grader run from a terminal lives for one probe run. Starting an internet and
a proxy for it, and removing them afterwards, cost more than the run itself;
so every grader on the machine (terminal, kernel, test session) shares a hub:

* the first grader that needs one starts a **keeper**, a small process of its
  own (``python -m grader.backends.docker.hub``), detached so it outlives that grader.
  The keeper starts the internet, keeps a few proxies warm in front of it,
  removes what finished runs hand it (so no grader waits for a removal), and
  removes everything and exits once no lease has held for the idle period
  (``lease.idle_seconds``), when its internet dies or hangs, or on SIGTERM
  (``sandbox-lab cleanup --all``);
* every grader that finds a live keeper with a healthy internet adopts it
  (``Hub``); one that finds a dead or sick one retires it (stops its keeper,
  removes its leftovers), says why in its log, and starts another.

An internet whose beat is late (older than ``BEAT_STALE``) is poked and given
that long again before the keeper or a grader calls it hung (``_answers``): a
busy machine delays beats, and retiring a hub mid-burst fails every run on it.

The keeper is the owner of what it makes: the internet, its network and the
warm proxies carry the keeper's pid, so ``cleanup`` removes them once the
keeper is gone, and never while it runs. A proxy is handed to one run at a time
(``lease.HubDir.claim``), which gives it its own lists; after a clean run the
keeper puts it back in the pool for the next run of any grader once the run's
sandbox is gone (``hubpool.relist``, on ``ProxyPool.give_back``'s terms), else removes
it. The internet is shared exactly as inside one grader before: each run claims
its proxy's address and reads its own closed logs (``runlogs``) and the proxy's
log from where it ended at take, so runs in different processes never count,
hide or evict each other's traffic. A run gives its claim up (``Run.release``)
before it hands its proxy back, and a newer claim of an address wins at the
internet (``common.Recorder``): an old run's late close never takes the next's.

Talks to Docker through ``engine`` (its errors mapped there); only the backend uses it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from importlib import resources
from pathlib import Path
from typing import Callable, Optional

from grader.core.errors import BackendError, InfrastructureError
from grader.core.world import World, load_world, read_world
from grader.backends.files import Files, host_files, host_path
from grader.backends.docker.engine import DockerEngine, EngineError, Missing, open_engine
from grader.backends.docker.lease import (
    HubDir, KeeperState, ProxyEntry, Trash, hub_dir, idle_seconds, process_alive, stop_process,
)
from grader.backends.docker.liveness import beat_after, poke
from grader.backends.docker.hubpool import POOL_SIZE, SETTLING, empty_trash, refill_now, remove_listed, trim
from grader.backends.owners import make_dir, process_start, runs_root, write_owner
from grader.backends.quota import remove_dir
from grader.backends.docker.resources import Resources
from grader.backends.docker.seats import relisted_seat, seat_for, take_seat
from grader.backends.docker.sharing import Taken, give_back
from grader.backends.docker.simnet import (
    LABEL_HUB,
    LABEL_PID,
    LABEL_STARTED,
    Internet,
    Leftovers,
    SharedInternet,
    start_internet,
)
from grader.backends.docker.proxies import ProxyPool, WarmProxy, build_proxy, running

__all__ = ["POOL_SIZE", "Hub", "HubInternet", "HubPool", "HubSharing", "keep", "make_hub", "stop_keepers"]

START_TIMEOUT = 60.0  # the keeper's start: a Python start, a network and a container start
# an internet whose heartbeat is older than this is hung: it beats every HEARTBEAT_INTERVAL (1 s) unasked, and
# a check slowed by a busy machine must not retire a hub whose runs are going on
BEAT_STALE = 5.0
STALE = f"its internet's last heartbeat is older than {BEAT_STALE:.0f} s"
_log = logging.getLogger(__name__)
TICK = 0.05  # the keeper's pace: how soon a finished run's containers start going


def _world_text() -> str:
    return resources.files("grader").joinpath("world.json").read_text("utf-8")


def _beating(out: Files, within: float = BEAT_STALE) -> bool:
    beat = out.stat("heartbeat")
    return beat is not None and time.time() - beat.mtime < within


def _answers(engine: DockerEngine, net: Internet) -> bool:
    """Does an internet whose last beat is stale answer when asked for a self-check now, given ``BEAT_STALE`` more?
    A machine busy enough to delay its beats must not cost every grader on the hub its runs (a keeper that
    retires its internet, or a grader that retires the hub, removes every proxy with every run on it); a hung
    internet stays silent, and is retired all the same."""
    asked = time.time()
    poke(engine, net.container)
    return beat_after(net.out, asked - 1.0, timeout=BEAT_STALE)


def _proxy_entry(w: WarmProxy, gen: str) -> ProxyEntry:
    assert w.container is not None
    return ProxyEntry(container=w.container.id, network=w.network.id, workdir=str(host_path(w.workdir)), ip=w.ip, gen=gen,
                      runs=w.runs, seat=w.seat)


# --- a grader's handle ------------------------------------------------------------------------


class Hub:
    """A grader's handle on the machine's hub: adopts the running one, or starts a keeper for a new one."""

    def __init__(self, engine: DockerEngine, image: str, leftovers: Leftovers) -> None:
        self._engine = engine
        self._image = image
        self._leftovers = leftovers
        # The hub serves Sandbox Lab's own world, whose file keys it: key and world come from one read,
        # and its keeper (another process) loads that same file.
        text = _world_text()
        self.dir = hub_dir(image, text)
        self.world = read_world(text)
        self._lock = threading.Lock()
        self._net: Optional[Internet] = None
        self._gen = ""
        self._pending: list[tuple[Path, Trash]] = []  # our runs' trash, until the keeper has removed it
        self._claimed: dict[Path, ProxyEntry] = {}  # what each proxy our runs claimed was claimed as, until handed back

    # --- the internet ---------------------------------------------------------------

    def internet(self, world: Optional[World] = None) -> Internet:
        """The hub's internet, healthy now, with this grader's lease renewed; ``BackendError`` for a run
        in another ``world`` than the hub's (None: the hub's)."""
        if world is not None and world is not self.world and world != self.world:
            raise BackendError(
                "the machine's shared internet answers for Sandbox Lab's own world, not this run's plan's; "
                "run plans of another world with a backend of their own (DockerBackend(..., shared_idle=0))"
            )
        with self._lock:
            net = self._net
            if net is not None and self._current(net):
                self.dir.lease(os.getpid())
                return net
            self._net = None
            with self.dir.lock():
                state = self.dir.state()
                why = "it has no keeper's record" if state is None else "its keeper is not running"
                if state is not None and self.dir.keeper_alive():
                    net = self._adopt(state)
                    why = self._unwell(net) if net is not None else "its internet's container or network is gone"
                    if net is not None and why == STALE:
                        why = self._asked(net)
                    if net is not None and not why:
                        self.dir.lease(os.getpid())  # under the lock: the keeper cannot decide it is idle meanwhile
                        self._net = net
                        return net
                if self.dir.path.exists():
                    # a service worker's log keeps it (a terminal's command prints nothing below a warning)
                    _log.info("retiring the machine's hub %s: %s", self.dir.name, why)
                    self._retire()
                net = self._start()
                self.dir.lease(os.getpid())
                self._net = net
                return net

    def _current(self, net: Internet) -> bool:
        return not self._unwell(net)

    def _unwell(self, net: Internet) -> str:
        """Why ``net`` is not the hub's healthy internet now; "" when it is."""
        state = self.dir.state()
        if state is None or state.gen != self._gen:
            return "its keeper's record names another internet" if state is not None else "it has no keeper's record"
        if not self.dir.keeper_alive():
            return "its keeper is not running"
        if not _beating(net.out):
            return STALE
        if not running(self._engine, net.container):
            return "its internet is not running (or the engine did not answer)"
        return ""

    def _asked(self, net: Internet) -> str:
        """Why ``net`` is unwell once asked for a self-check now (``_answers``); "" when it answered."""
        if not _answers(self._engine, net):
            return f"{STALE}, and it did not answer a poke within {BEAT_STALE:.0f} s more"
        return self._unwell(net)

    def _adopt(self, state: KeeperState) -> Optional[Internet]:
        try:
            container = self._engine.inspect(state.container)
            network = self._engine.network(state.network)
        except Missing:
            return None
        self._gen = state.gen
        return Internet(self._engine, container, network, state.ip, host_files(Path(state.dir)).sub("out"), self.world)

    def _retire(self) -> None:
        """Stop the keeper of a dead or sick hub and remove everything it left (we hold the lock)."""
        pid = self.dir.keeper_pid()
        stop_keeper(pid, self.dir.name)
        empty_trash(self._engine, self.dir, self._leftovers)
        mine = {"label": f"{LABEL_HUB}={self.dir.name}"}
        for c in self._engine.containers(mine):
            self._leftovers.remove(c)  # one gone meanwhile is gone
        for n in self._engine.networks(mine):
            self._leftovers.remove(n)
        remove_dir(self.dir.path)  # renamed first, its record last: a kill leaves what a sweep takes

    def _start(self) -> Internet:
        """Start a keeper (detached: never our child, so never our zombie) and wait for its internet."""
        self.dir.make()
        env = dict(os.environ)
        # the keeper imports this very package, wherever the grader was started from
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[3]), env.get("PYTHONPATH")]))
        log = self.dir.path / "keeper.log"
        # a shim starts the keeper in a session of its own and exits at once: the keeper is re-parented
        shim = ("import subprocess,sys\n"
                "p=subprocess.Popen(sys.argv[2:],start_new_session=True,stdin=subprocess.DEVNULL,"
                "stdout=open(sys.argv[1],'ab'),stderr=subprocess.STDOUT,close_fds=True)\nprint(p.pid)")
        out = subprocess.run(
            [sys.executable, "-I", "-S", "-c", shim, str(log), sys.executable, "-m", "grader.backends.docker.hub",
             str(self.dir.path), self._image],
            capture_output=True, text=True, env=env, timeout=30, check=True,
        )
        pid = int(out.stdout.strip())
        self.dir.set_keeper(pid)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            state = self.dir.state()
            if state is not None:
                net = self._adopt(state)
                if net is not None:
                    return net
            if not process_alive(pid, self.dir.name):
                break
            time.sleep(0.02)
        tail = log.read_text(errors="replace")[-400:] if log.exists() else ""
        stop_keeper(pid, self.dir.name)
        raise InfrastructureError(f"the shared internet's keeper did not start: {tail.strip()}")

    # --- proxies ----------------------------------------------------------------------

    def take(self, internet: Internet) -> Optional[WarmProxy]:
        """A warm proxy of the hub's current internet, claimed for one run; None when the pool is empty."""
        while True:
            got = self.dir.claim(os.getpid())
            if got is None:
                return None
            claim, entry = got
            w: Optional[WarmProxy] = None
            if entry.gen == self._gen:
                try:
                    w = WarmProxy(self._engine.inspect(entry.container), self._engine.network(entry.network),
                                  host_files(Path(entry.workdir)), entry.ip, internet, claim)
                except Missing:
                    w = None
            if w is not None and running(self._engine, w.container):
                w.runs, w.seat = entry.runs, entry.seat
                with self._lock:
                    self._claimed[claim] = entry
                return w
            self.discard("stale-" + claim.stem.replace("@", "-"), entry.things(), claim)  # never handed out

    def build(self, internet: Internet) -> Optional[WarmProxy]:
        """A proxy for one run when the pool is dry, built here as the keeper builds its own, then claimed.

        Without this, a proxy a run built for itself went with its run: under a
        stream of runs (three service workers) the pool ran dry for most of them,
        and 0.88 proxies were built a run, against 0.24 on a worker's own pool.
        Built as the keeper's, it is one of the pool's from its start: labelled
        with the keeper's pid (no grader's sweep takes it while it serves
        another grader's run), its directory owned by the keeper, and claimed
        for this run (a grader dying mid-run leaves it to the keeper; a clean run
        hands it back to be re-listed). None when this hub has no current
        keeper, or its directory went meanwhile: the caller builds one of its
        own, as before. A grader killed between the build and the claim leaves
        one proxy the keeper does not list; its labels name the keeper, so the
        first sweep after the keeper stops removes it.
        """
        keeper = self.dir.keeper_pid()
        with self._lock:
            gen, current = self._gen, self._net
        if not keeper or not gen or internet is not current or not self.dir.keeper_alive():
            return None
        started = str(process_start(keeper) or "")

        def labels(name: str) -> dict[str, str]:
            return {**self._leftovers.labels(name), LABEL_PID: str(keeper), LABEL_STARTED: started,
                    LABEL_HUB: self.dir.name}

        w = build_proxy(self._engine, self._image, internet, labels, self._leftovers)
        try:
            write_owner(host_path(w.workdir), keeper)
            entry = _proxy_entry(w, gen)
            w.claim = self.dir.claim_built(w.workdir.name, os.getpid(), entry)
        except OSError:  # the hub's directory went (its keeper retired meanwhile): a proxy of the grader's own
            w.remove(self._leftovers)
            return None
        except BaseException:
            w.remove(self._leftovers)
            raise
        with self._lock:
            self._claimed[w.claim] = entry
        return w

    def relisting(self, w: WarmProxy) -> Optional[ProxyEntry]:
        """The entry to hand ``w`` back as, after a clean run, for its keeper to re-list (``hubpool.relist``): as it was
        claimed (its internet's gen), with the runs it had served; None when it is not one ``take`` handed out."""
        with self._lock:
            entry = self._claimed.pop(w.claim, None) if w.claim is not None else None
        if entry is None or w.container is None:
            return None
        return entry if entry == _proxy_entry(w, entry.gen) else None

    # --- removal ----------------------------------------------------------------------

    def discard(self, run: str, things: Trash, claim: Optional[Path] = None) -> bool:
        """Hand a finished run's things to the keeper; False (nothing handed) when no keeper runs."""
        if not self.dir.keeper_alive():
            return False
        try:
            path = self.dir.discard(run, things)
        except OSError:
            return False
        every = things.for_good()
        self._leftovers.hand_off([*every.containers, *every.networks])
        if claim is not None:
            claim.unlink(missing_ok=True)
        with self._lock:
            self._pending.append((path, things))
        return True

    def settle(self, timeout: float = 60.0) -> None:
        """Wait until the keeper has removed everything this grader handed it; remove here whatever it left.

        A keeper that stops (its internet died, ``cleanup``) between taking a
        run's list and removing all of it leaves the rest: removing again is a
        no-op for what is gone. A run's proxy is removed here only while its
        file is still there (the keeper never finished it); once the keeper
        has, the proxy is back in its pool, or gone.
        """
        with self._lock:
            pending, self._pending = self._pending, []
        deadline = time.monotonic() + timeout
        for path, entry in pending:
            while path.exists() and self.dir.keeper_alive() and time.monotonic() < deadline:
                time.sleep(0.02)
            remove_listed(self._engine, entry.for_good() if path.exists() else entry, self._leftovers)
            path.unlink(missing_ok=True)
        # and what other backends handed it (a closed backend does not wait for its own): the hub is settled
        while self.dir.trash() and self.dir.keeper_alive() and time.monotonic() < deadline:
            time.sleep(0.02)
        self._leftovers.retry()

    def release(self) -> None:
        """This grader is done with the hub: its lease now lasts only the idle period."""
        with self._lock:
            if self._net is not None:
                self.dir.lease(os.getpid(), held=False)
            self._net = None

    def standing(self) -> set[str]:
        with self._lock:
            net = self._net
        if net is None:
            return set()
        return {net.container.name, net.network.name, self.dir.name} | {e.workdir.rsplit("/", 1)[-1] for _, e in self.dir.pooled()}


class HubInternet(SharedInternet):
    """The backend's shared internet, when graders share one between processes: the hub's."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub

    def get(self, world: Optional[World] = None) -> Internet:
        return self.hub.internet(world)

    def close(self) -> None:
        self.hub.release()

    def standing(self) -> set[str]:
        return self.hub.standing()


class HubPool(ProxyPool):
    """The backend's proxy pool, when graders share one hub: claims the keeper's warm proxies.

    When the pool is empty (several runs at once), the run builds a proxy of its
    own in front of the same internet, as a grader without a hub does.
    """

    def __init__(self, engine: DockerEngine, image: str, hub: Hub, leftovers: Leftovers) -> None:
        super().__init__(engine, image, HubInternet(hub), leftovers, size=0)
        self.hub = hub

    def take(self, world: Optional[World] = None) -> WarmProxy:
        internet = self.hub.internet(world)
        return self.hub.take(internet) or self.hub.build(internet) or self._build(internet)

    def refill(self) -> None:
        """The keeper refills the pool, not the grader."""


class HubSharing:
    """The machine's hub as a backend's ``sharing.Sharing``: its internet and warm proxies; a finished run's
    things go to its keeper, so nobody waits for their removal."""

    def __init__(self, engine: DockerEngine, image: str, hub: Hub, leftovers: Leftovers) -> None:
        self.hub = hub
        self._engine = engine
        self.pool = HubPool(engine, image, hub, leftovers)
        self._shared = HubInternet(hub)

    def internet(self, world: Optional[World] = None) -> Internet:
        return self.hub.internet(world)

    def take(self, made: Resources, world: World) -> Taken:
        w = self.pool.take(world)
        if w.claim is None:
            return Taken(w, borrowed=True)  # none warm: built by this process, given back (or handed off) after
        # a hub's proxy (shared between processes): this run's alone, removed with it
        assert w.container is not None
        made.container(w.container)
        made.network(w.network)
        made.directory(w.workdir)
        return Taken(w, borrowed=False, seat=take_seat(self._engine, w, made))

    def hand_off(self, run_id: str, made: Resources, taken: Optional[Taken], *, clean: bool) -> bool:
        """The run's things to the keeper; a hub's proxy it claimed goes back to the pool after a clean run, if the
        keeper finds it may serve again (``hubpool.relist``), and with the rest otherwise."""
        things = made.listing()
        w = taken.proxy if taken is not None else None
        relist: Optional[ProxyEntry] = None
        if taken is not None and taken.borrowed and taken.proxy.container is not None:
            # one the pool could not give (none warm), built by this process: it goes with the rest
            things["containers"].append(taken.proxy.container.id)
            things["networks"].append(taken.proxy.network.id)
            things["dirs"].append(str(host_path(taken.proxy.workdir)))
        elif w is not None and w.claim is not None:
            entry = self.hub.relisting(w)  # (always asked: it forgets the claim)
            if clean and entry is not None:
                # not among the things to remove: the keeper decides; so is the seat, if the sandbox sat in it
                relist = entry if taken is not None and taken.seat is not None else dataclasses.replace(entry, seat="")
                things = {"containers": [c for c in things["containers"] if c not in (entry.container, relist.seat)],
                          "networks": [n for n in things["networks"] if n != entry.network],
                          "dirs": [d for d in things["dirs"] if d != entry.workdir]}
        trash = Trash(tuple(things["containers"]), tuple(things["networks"]), tuple(things["dirs"]), relist=relist)
        return self.hub.discard(run_id, trash, w.claim if w is not None else None)

    def give_back(self, taken: Taken, *, clean: bool, leftovers: Leftovers) -> None:
        give_back(self.pool, taken, clean=clean, leftovers=leftovers)

    def settle(self) -> None:
        self.hub.settle()  # what the runs handed the hub's keeper is gone too
        self.pool.settle()

    def standing(self) -> set[str]:
        return self.pool.standing() | self._shared.standing()

    def close(self) -> None:
        """This backend's lease on the hub lapses after the idle period; its things stay the keeper's."""
        self.pool.close()
        self._shared.close()


def make_hub(engine: DockerEngine, image: str, leftovers: Leftovers, idle: Optional[float]) -> Optional[Hub]:
    """A hub handle when sharing between processes is on (an idle period above 0), else None."""
    return Hub(engine, image, leftovers) if (idle_seconds() if idle is None else idle) > 0 else None


# --- stopping keepers --------------------------------------------------------------------------


def stop_keeper(pid: int, name: str, timeout: float = 30.0) -> None:
    """SIGTERM the keeper ``pid`` of hub ``name`` (it removes what it keeps), then SIGKILL if it lingers (what it
    kept is then the next sweep's)."""
    stop_process(pid, name, timeout)


def stop_keepers() -> list[str]:
    """Stop every keeper of a hub under ``runs_root()`` (``cleanup --all``); say which."""
    root = runs_root()
    stopped = []
    for d in sorted(root.glob("sl-hub-*")) if root.is_dir() else []:
        hub = HubDir(d)
        pid = hub.keeper_pid()
        if hub.keeper_alive():
            stop_keeper(pid, hub.name)
            stopped.append(f"keeper {pid} of {hub.name}")
    return stopped


# --- the keeper --------------------------------------------------------------------------------


def keep(hub: HubDir, image: str, world: World, *, size: int = POOL_SIZE, engine: Optional[DockerEngine] = None) -> int:
    """The keeper's life: start the internet of ``world``, keep proxies warm, remove trash, exit when idle, dead or told to."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C in the terminal that started it is not for the keeper
    hub.set_keeper(os.getpid())
    engine = engine if engine is not None else open_engine()
    leftovers = Leftovers(engine)

    def labels(name: str) -> dict[str, str]:
        return {**leftovers.labels(name), LABEL_HUB: hub.name}

    gen = secrets.token_hex(4)
    workdir = hub.path / "internet"
    make_dir(workdir)
    net = start_internet(engine, image, world, host_files(workdir), f"{hub.name}-{gen}", labels(hub.name), leftovers)
    try:
        hub.write_state(KeeperState(gen=gen, container=net.container.id, network=net.network.id, ip=net.ip, dir=str(workdir)))
        _serve(engine, hub, image, net, gen, size, labels, leftovers, stop)
    finally:
        with contextlib.suppress(OSError):
            (hub.path / "state.json").unlink()  # no grader adopts what is going
        # remove what can be removed; cleanup finds the rest. An engine away or refusing (EngineError is a
        # BackendError) or a file that will not go (OSError) ends the removal here; anything else is a bug, said
        with contextlib.suppress(BackendError, OSError):
            # every proxy and seat at once: one by one, a loaded engine outlasted the stop's wait (stop_keeper)
            remove_listed(engine, Trash.of([e for _, e in hub.pooled()] + [e for _, _, e in hub.claims()]), leftovers)
            empty_trash(engine, hub, leftovers)
            net.remove(leftovers)
            leftovers.retry()
            leftovers.sweep()
        if hub.keeper_pid() == os.getpid():
            with contextlib.suppress(BackendError, OSError):  # a run that finished meanwhile: as above
                empty_trash(engine, hub, leftovers)
            remove_dir(hub.path)
    return 0


def _serve(engine: DockerEngine, hub: HubDir, image: str, net: Internet, gen: str, size: int,
           labels: Callable[[str], dict[str, str]], leftovers: Leftovers, stop: threading.Event) -> None:
    idle = idle_seconds()
    checked = time.monotonic()
    while not stop.is_set() and hub.path.is_dir():
        # a clean run's proxy back in the pool, if it may serve again, with its seat if that is quiet, else a new one
        empty_trash(engine, hub, leftovers, gen, size, lambda n, used: relisted_seat(engine, image, n, labels, leftovers, used))
        claims = hub.claims()
        for claim, pid, entry in claims:
            if not process_alive(pid):  # its grader died mid-run: the proxy is nobody's
                remove_listed(engine, entry.things(), leftovers)
                claim.unlink(missing_ok=True)
        if time.monotonic() - checked > 1.0:
            checked = time.monotonic()
            if net.problem() or not (_beating(net.out) or _answers(engine, net)):
                return  # dead or hung: graders adopt a new hub, never this one
            if not _idle_check(hub, idle):
                return
            leftovers.retry()
        # refill behind runs: not while a run's sandbox is starting against the same engine (``quiet``), unless the
        # pool is dry and the next run would build a proxy on its own path (``refill_now``)
        pooled = len(hub.pooled())  # read once a tick, for the refill and the trim
        if refill_now(pooled, size, lambda: hub.quiet(SETTLING)):
            try:
                w = build_proxy(engine, image, net, labels, leftovers)
                w.seat = seat_for(engine, image, w.network, labels)  # "": its run's sandbox joins the bridge
            # the engine (EngineError, NetworksExhausted: BackendErrors), a proxy that never got ready
            # (InfrastructureError) or its files (OSError): a grader finding the pool empty builds its own
            except (BackendError, OSError):
                time.sleep(1.0)
                continue
            hub.offer(w.workdir.name, _proxy_entry(w, gen))
            continue
        if pooled > size and trim(engine, hub, size, leftovers):  # re-listed above its size (``hubpool.room``)
            continue
        stop.wait(TICK)


def _idle_check(hub: HubDir, idle: float) -> bool:
    """True while the hub is to stay. Decided under the lock, so a grader adopting it now is seen;
    while a grader holds the lock (adopting, or retiring this very keeper) it stays for now."""
    with hub.try_lock() as locked:
        if not locked or hub.holds(idle):
            return True
        (hub.path / "state.json").unlink(missing_ok=True)  # still under the lock: nobody adopts it from now on
        return False


def main(argv: Optional[list[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    return keep(HubDir(Path(args[0])), args[1], load_world())  # the keeper's own process: it loads the hub's world


if __name__ == "__main__":
    raise SystemExit(main())
