"""The simulated internet's container: the sink and DNS server of the world's hosts, on an internal network.

A run either gets an internet of its own or borrows the backend's shared one:

* the plain container sits on the internet's network itself (ordinary
  networking), so it gets its own: no other run's traffic is ever beside it;
* a sandbox behind a proxy never touches the internet's network (only its
  proxy does), so those runs share one internet. That saves a network and a
  container start per run. By default it is the machine's (``hub.py``: kept by
  a keeper process for every grader, so a one-shot command from a terminal
  finds it running); with sharing between processes off, one per backend
  (``SharedInternet``, ``proxies.ProxyPool``).

Each run claims its clients at the internet (``runlogs``: its proxy's address
on a shared one, every client on its own), and the internet writes their
records to the run's own capped logs, closed with a record that counts them:
no other run's traffic can evict, hide or forge a run's evidence, and a log
that lost records or never closed is an error, never a verdict. If a shared internet dies it is replaced on the next run, and the run
that saw it die reports an infrastructure error, never a verdict.

A service's working directory (its config, ready file, heartbeat and logs) is
a ``files.Files``: a bound directory of the grader's disk, or, for an
engine on another machine, a volume reached through the engine's API.

Talks to Docker through the engine adapter (``engine.DockerEngine``: refs in, refs out, its errors mapped
there); the backend, the hub and the replay use it.
"""

from __future__ import annotations

import functools
import os
import random
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional, Union


from grader.core.errors import BackendError
from grader.protocol.common import DNS_PORT, HTTP_PORT, HTTPS_PORT
from grader.protocol.configs import InternetConfig, dump_config
from grader.core.world import World
from grader.backends.files import Files
from grader.backends.docker.engine import (
    ContainerRef, DockerEngine, EngineError, Missing, NetworkRef, NetworksExhausted, PoolsFull, Refused, log_config,
)
from grader.backends.docker.enginedisk import Disk, HostDisk
from grader.backends.docker.liveness import beat_after, poke, wait_ready
from grader.backends.docker.volumes import attach, service_mount
from grader.backends.owners import make_run_dir, namespace, process_start

__all__ = [
    "LABEL",
    "LABEL_BACKEND",
    "LABEL_HUB",
    "LABEL_NS",
    "Leftovers",
    "LABEL_PID",
    "LABEL_STARTED",
    "KEEP_WARM",
    "POOL_WAIT",
    "PROXY_RUNS",
    "LABEL_ROLE",
    "LOGS",
    "Internet",
    "SharedInternet",
    "container_ip",
    "create_network",
    "service_container",
    "start_internet",
]

LABEL = "org.sandbox-lab.run"
LABEL_ROLE = "org.sandbox-lab.role"
LABEL_PID = "org.sandbox-lab.pid"
LABEL_BACKEND = "org.sandbox-lab.backend"  # which backend object made it: close() sweeps its own
LABEL_HUB = "org.sandbox-lab.hub"  # kept by a hub's keeper for every grader on the machine (hub.py)
# where LABEL_PID means something (runs.namespace): another container's or machine's grader on the
# same engine has pids this process cannot judge, and a run's automatic sweep never touches its things
LABEL_NS = "org.sandbox-lab.ns"
# when the process LABEL_PID names started (owners.process_start): a pid reused by another process is not its maker
LABEL_STARTED = "org.sandbox-lab.started"

@functools.lru_cache(maxsize=8)
def _started(pid: int) -> str:  # per pid, never per import: a forked worker's horse is another process
    return str(process_start(pid) or "")
# A proxy (and its sandbox network) serves at most this many runs, one after another, then goes:
# what one run might leave in it (a slow connection, a full log) lives a bounded time.
PROXY_RUNS = 25
KEEP_WARM = 4  # proxies kept for the next runs (one per default worker): each holds a network, and an engine has few
LOGS = ("http.jsonl", "dns.jsonl", "tcp.jsonl")
# An engine with every address range in use: how long a run waits for another run to give one back, and the
# pauses between its asks (doubling). A run holds its networks for seconds, so a minute is a queue, not a hang.
POOL_WAIT, POOL_PAUSE, POOL_PAUSE_MAX = 60.0, 0.25, 4.0


Thing = Union[ContainerRef, NetworkRef]


class Leftovers:
    """Containers and networks whose removal failed (the engine was away), kept to try again.

    A removal that fails is never just dropped: the thing stays labelled with a
    live grader's pid, so ``cleanup`` would skip it. The backend retries these
    when it drains, before each run's removal and when it closes.
    """

    def __init__(self, engine: Optional[DockerEngine] = None) -> None:
        self._engine = engine  # where its things are removed (None: labels only, nothing to remove)
        self._lock = threading.Lock()
        self._items: list[Thing] = []
        self._handed: set[str] = set()  # ids a hub's keeper removes for us (``hand_off``)
        self.owner = secrets.token_hex(6)  # the backend's id, on every label it sets

    @property
    def engine(self) -> DockerEngine:
        """Where its things are removed; one made without an engine only labels."""
        if self._engine is None:
            raise TypeError("these Leftovers were made without an engine: they label, and remove nothing")
        return self._engine

    def labels(self, run: str) -> dict[str, str]:
        return {LABEL: run, LABEL_PID: str(os.getpid()), LABEL_NS: namespace(), LABEL_STARTED: _started(os.getpid()),
                LABEL_BACKEND: self.owner}

    def hand_off(self, ids: list[str]) -> None:
        """Containers and networks a hub's keeper now removes: ``sweep`` leaves them to it."""
        with self._lock:
            self._handed.update(ids)

    def sweep(self) -> None:
        """Remove everything labelled with this owner, even what a lost response never named.

        A container whose creation was under way when the engine went away
        exists without anyone holding it; the label finds it. What was handed
        to a hub's keeper is its to remove (a grader exiting does not wait for it).
        """
        mine = {"label": f"{LABEL_BACKEND}={self.owner}"}
        with self._lock:
            handed = set(self._handed)
        try:
            for c in self.engine.containers(mine):
                if c.id not in handed:
                    self.remove(c)
            for n in self.engine.networks(mine):
                if n.id not in handed:
                    self.remove(n)
        except EngineError:  # engine away: `sandbox-lab cleanup` finds them by pid later
            pass

    def remove(self, thing: Thing) -> None:
        try:
            _remove_one(self.engine, thing)
        except Missing:
            pass
        except EngineError:  # the engine may be away: keep it for the next try
            with self._lock:
                self._items.append(thing)

    def retry(self) -> None:
        with self._lock:
            items, self._items = self._items, []
        for thing in sorted(items, key=lambda t: isinstance(t, NetworkRef)):  # containers before their networks
            self.remove(thing)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)


def _remove_one(engine: DockerEngine, thing: Thing) -> None:
    if isinstance(thing, NetworkRef):
        # a network still holding containers (warm proxies of a dead internet) cannot go: detach them first
        for c in engine.network(thing).containers:
            try:
                engine.disconnect(thing, c)
            except Refused:
                pass
        engine.remove_network(thing)
    else:
        engine.remove_container(thing)


def create_network(
    engine: DockerEngine, name: str, labels: dict[str, str], *,
    patience: float = POOL_WAIT, sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
) -> NetworkRef:
    """An internal bridge with no host address: no route off the machine, nothing of the host reachable.

    Full address pools (``PoolsFull``) are a queue, not a failure: other runs give their networks back within
    seconds, so this asks again, pausing longer each time, for up to ``patience`` s; then ``NetworksExhausted``.
    """
    deadline, pause, conflicts = clock() + patience, POOL_PAUSE, 0
    while True:
        try:
            return engine.create_network(
                name, driver="bridge", internal=True, labels=labels,
                options={"com.docker.network.bridge.inhibit_ipv4": "true"},
            )
        except PoolsFull:
            left = deadline - clock()
            if left <= 0:
                raise NetworksExhausted(patience) from None
            # jittered, so graders waiting on one engine do not all ask again at the same moment
            sleep(min(left, pause * random.uniform(0.75, 1.25)))
            pause = min(pause * 2, POOL_PAUSE_MAX)
        except Refused as exc:
            # Two processes creating networks at once can be handed the same subnet
            # by the engine (Docker 20.10); the loser is refused and simply asks again.
            conflicts += 1
            if "conflicts with" not in str(exc) and "overlap" not in str(exc) or conflicts == 4:
                raise
            sleep(0.1 * conflicts)


def service_container(
    engine: DockerEngine, image: str, role: str, name: str, labels: dict[str, str], network: NetworkRef, workdir: Files,
    script: str,
) -> ContainerRef:
    """A created (not started) service container running ``script`` with ``workdir`` as /run/sandbox-lab."""
    container = engine.create_container(
        image, ["python3", f"/opt/sandbox-lab/{script}", f"/run/sandbox-lab/{script.replace('.py', '.json')}"],
        name=name, labels={**labels, LABEL_ROLE: role},
        network=network.name, mounts=[service_mount(workdir)],
        mem_limit="128m", pids_limit=256, nano_cpus=500_000_000,
        log_config=log_config("json-file", {"max-size": "1m"}),
    )
    try:
        attach(workdir, container)  # its config, when the directory is on the engine's disk
    except BaseException:
        engine.remove_container(container)  # not yet anyone's: the caller never saw it
        raise
    return container


def container_ip(engine: DockerEngine, container: ContainerRef, network: NetworkRef) -> str:
    return engine.inspect(container).addresses[network.name]


@dataclass
class Internet:
    """One running internet: its engine, its container, its network, its address and where it writes its logs."""

    engine: DockerEngine
    container: ContainerRef
    network: NetworkRef
    ip: str
    out: Files
    # the world it answers for: a proxy in front of it refuses the ports this world's hosts do not serve
    world: World
    # a run saw it running and silent: the next ``SharedInternet.get`` asks it again, and replaces it if it still is
    unanswered: bool = False

    def problem(self, answered_after: Optional[float] = None, *, poked: bool = False) -> str:
        """Empty while it runs (and answered after ``answered_after``; ``poked``: asked since), else what is wrong."""
        if answered_after is not None and not poked:
            poke(self.engine, self.container)  # first: its self-check runs while the status is read
        try:
            now = self.engine.inspect(self.container)
        except EngineError as exc:  # gone is a problem too, and so is an engine that does not answer
            return f"the internet service vanished ({type(exc).__name__})"
        if now.status != "running":
            return f"the internet service stopped during the run (status {now.status}, exit code {now.exit_code})"
        if answered_after is not None:
            self.unanswered = not beat_after(self.out, answered_after)
            if self.unanswered:
                return "the internet service stopped answering (no heartbeat after the sandbox finished)"
        return ""

    def remove(self, leftovers: Leftovers) -> None:
        leftovers.remove(self.container)
        leftovers.remove(self.network)


def start_internet(
    engine: DockerEngine, image: str, world: World, workdir: Files, name: str, labels: dict[str, str], leftovers: Leftovers, *,
    host_stand_in_port: Optional[int] = None,
) -> Internet:
    """Create the network and the internet container, and wait until every listener is up."""
    workdir.mkdir("out")
    workdir.mkdir("out/runs")  # made by the grader: only it writes the runs' requests there (``runlogs``)
    out = workdir.sub("out")
    # the attacker's raw listeners are the world's (each heard, so a port added there is a channel judged),
    # and the host's stand-in listens on its one port
    tcp_ports = list(world.raw_ports) + ([host_stand_in_port] if host_stand_in_port else [])
    workdir.write("internet.json", dump_config(InternetConfig(
        hosts=tuple(world.host_names),
        wildcard_zones=(world.attacker.name,),
        # a name under an operator's domain that the world lacks does not exist; every other name the
        # world does not know is the attacker's server (fail closed): an allowed webhook.site really lands
        operators=tuple(world.operators), catch_all=world.attacker.name,
        # only the plain container has a "host" to find, and here it is a stand-in
        extra_names=("host.docker.internal",) if host_stand_in_port else (),
        address=None, bind="0.0.0.0",
        dns_port=DNS_PORT, http_port=HTTP_PORT, https_port=HTTPS_PORT,
        tcp_ports=tuple(tcp_ports),
        # each server answers only on the ports the world gives it (here the ports are the world's own);
        # the host's stand-in answers on its one port, to the plain container's direct connections
        serves={**{h.name: tuple(h.ports) for h in world.hosts},
                **({"host.docker.internal": (host_stand_in_port,)} if host_stand_in_port else {})},
        out_dir="/run/sandbox-lab/out", nonce=secrets.token_hex(8),
    )).encode())
    network = create_network(engine, f"{name}-inet", labels)
    try:
        container = service_container(engine, image, "internet", f"{name}-internet", labels, network, workdir, "internet.py")
    except BaseException:
        leftovers.remove(network)
        raise
    net = Internet(engine, container, network, "", out, world)
    try:
        engine.start(container)
        net.ip = container_ip(engine, container, network)
        wait_ready(engine, container, out)
    except BaseException:
        net.remove(leftovers)
        raise
    return net


class SharedInternet:
    """The internet that runs behind a proxy borrow, started on first use and replaced if it dies.

    It answers for the world of the runs that use it, handed in by the first
    one (a run's plan carries its world): one shared internet, one world.
    """

    def __init__(self, engine: DockerEngine, image: str, leftovers: Leftovers, *, disk: Optional[Disk] = None) -> None:
        self._engine = engine
        self._disk: Disk = disk if disk is not None else HostDisk()
        self._leftovers = leftovers
        self._image = image
        self._world: Optional[World] = None
        self._lock = threading.Lock()
        self._net: Optional[Internet] = None
        self._dir: Optional[Files] = None

    def get(self, world: Optional[World] = None) -> Internet:
        """The running internet for ``world`` (None: the world it answers for, e.g. for the pool's refill).

        A run in another world is refused, never served by an internet that
        answers for this one: its hosts, ports and attacker would not be the run's.
        """
        with self._lock:
            world = self._serving(world)
            # one a run saw silent is asked again: kept if it answers now, replaced if not (hung, it fails every run)
            if self._net is not None and not self._net.problem(answered_after=time.time() if self._net.unanswered else None):
                return self._net
            self._close_locked()
            name = "sl-shared-" + secrets.token_hex(4)
            labels = self._leftovers.labels(name)
            self._dir = self._disk.files(name, lambda: make_run_dir(name))
            try:
                self._net = start_internet(self._engine, self._image, world, self._dir, name, labels, self._leftovers)
            except BaseException:
                self._close_locked()
                raise
            return self._net

    def _serving(self, world: Optional[World]) -> World:
        if world is None:
            if self._world is None:
                raise BackendError("the shared internet answers for no world yet: the first run behind a proxy starts it")
            return self._world
        if self._world is not None and world is not self._world and world != self._world:
            raise BackendError(
                "this backend's shared internet answers for another world than this run's plan; "
                "run plans of another world with a backend of their own (DockerBackend(..., shared_idle=0))"
            )
        self._world = world
        return world

    def close(self) -> None:
        with self._lock:
            self._close_locked()

    def standing(self) -> set[str]:
        """Names of what this shared internet holds now (container, network, directory)."""
        with self._lock:
            if self._net is None or self._dir is None:
                return set()
            return {self._net.container.name, self._net.network.name, self._dir.name}

    def _close_locked(self) -> None:
        if self._net is not None:
            self._net.remove(self._leftovers)
            self._net = None
        if self._dir is not None:
            self._dir.remove()
            self._dir = None
