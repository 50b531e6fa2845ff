"""Warm proxies: a proxy already running in front of the shared internet on its own empty sandbox network, and the
backend's own pool of them (``ProxyPool``), which keeps proxies started ahead of need and takes a clean run's proxy
back for the next run (at most ``simnet.PROXY_RUNS`` runs each).

A pool may seat its proxies (``Seating``, made by ``seats.PoolSeats``): each proxy's network gets a seat whose
network namespace the sandbox joins at its start instead of making its own, and the seat is checked before each
run after the first (``seats.quiet``). The hub's keeper lists proxies of its own (``hub``, ``hubpool``) built
here too.

Talks to Docker through the engine adapter (``engine.DockerEngine``).
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Protocol

from grader.core.errors import BackendError
from grader.core.world import World
from grader.protocol.common import DNS_PORT, PROXY_PORT
from grader.protocol.configs import AllowLists, ProxyConfig, dump_config
from grader.backends.files import Files
from grader.backends.docker.engine import ContainerRef, DockerEngine, EngineError, NetworkRef
from grader.backends.docker.enginedisk import Disk, HostDisk
from grader.backends.docker.liveness import beat_after, poke, wait_ready
from grader.backends.docker.simnet import (
    KEEP_WARM, PROXY_RUNS, Internet, Leftovers, SharedInternet, container_ip, create_network, service_container,
)
from grader.backends.owners import make_run_dir
from grader.backends.runs import world_ports

__all__ = ["ProxyPool", "Seating", "WarmProxy", "build_proxy", "running"]


@dataclass
class WarmProxy:
    """A proxy already running in front of the shared internet, with its empty sandbox network; it refuses
    everything until ``hand_over`` writes its run's lists."""

    container: Optional[ContainerRef]
    network: NetworkRef
    workdir: Files
    ip: str
    internet: Internet
    claim: Optional[Path] = None  # its claim in a hub's directory, dropped with it (``lease.HubDir.claim``)
    runs: int = 0  # runs it has served and was given back from (the backend's own pool only)
    seat: str = ""  # its network's seat for the sandbox (``seats``), the id of a container; "": none
    seat_name: str = ""  # a pool's seat: its name (``ProxyPool.standing``)

    def hand_over(self, allowed: list[str], denied: list[str]) -> None:
        """Give the proxy its run's lists, atomically: it reads them on the next connection."""
        self.workdir.write("policy.json", dump_config(AllowLists(tuple(allowed), tuple(denied))).encode())

    def remove(self, leftovers: Leftovers) -> None:
        if self.seat:  # before its network (a hub's run removes its taken seat itself: gone twice is gone)
            leftovers.remove(ContainerRef(self.seat, self.seat_name))
        if self.container is not None:
            leftovers.remove(self.container)
        leftovers.remove(self.network)
        self.workdir.remove()
        if self.claim is not None:
            self.claim.unlink(missing_ok=True)


class Seating(Protocol):
    """Seats for a pool's proxies (``seats.PoolSeats``): one per proxy, kept while it serves."""

    def seat(self, w: WarmProxy) -> None:
        """Give ``w`` a new seat on its network (``w.seat``, ``w.seat_name``; left empty when none could be made)."""
        ...

    def fit(self, w: WarmProxy) -> Optional[ContainerRef]:
        """``w``'s seat for the run that took it, if its sandbox may join it; None: the sandbox joins the bridge."""
        ...

    def reseat(self, w: WarmProxy) -> None:
        """Before ``w`` serves again: its seat stays only if the last run left nothing in it, else a new one."""
        ...


class ProxyPool:
    """Keeps proxies started ahead of need, so a run behind a proxy does not wait for one to boot.

    A run takes one, hands it its lists and owns it from then on; once its
    sandbox has finished, it asks the pool to refill in the background. A proxy made for an internet that has since been
    replaced is thrown away, never handed out. With ``seating``, each proxy has a seat (``seat_of``).
    """

    def __init__(
        self, engine: DockerEngine, image: str, shared: SharedInternet, leftovers: Leftovers, size: int = 2, *,
        disk: Optional[Disk] = None, seating: Optional[Seating] = None,
    ) -> None:
        self._seating = seating
        self._engine = engine
        self._disk: Disk = disk if disk is not None else HostDisk()
        self._leftovers = leftovers
        self._image = image
        self._shared = shared
        self._size = size
        self._lock = threading.Lock()
        self._warm: list[WarmProxy] = []
        self._refilling = False
        self._closed = False

    def take(self, world: Optional[World] = None) -> WarmProxy:
        """A running proxy for one run in ``world`` (None: the shared internet's), warm if one is."""
        internet = self._shared.get(world)
        stale: list[WarmProxy] = []
        got: Optional[WarmProxy] = None
        with self._lock:
            while self._warm and got is None:
                w = self._warm.pop(0)
                if w.internet is internet and running(self._engine, w.container):
                    got = w
                else:
                    stale.append(w)
        for w in stale:
            w.remove(self._leftovers)
        if got is None:
            got = self._build(internet)
        return got

    def seat_of(self, w: WarmProxy) -> Optional[ContainerRef]:
        """The seat of a proxy this pool handed out, for its run's sandbox to join; None: it joins the bridge."""
        return self._seating.fit(w) if self._seating is not None and w.seat else None

    def settle(self, timeout: float = 60.0) -> None:
        """Wait until no refill is in progress (so everything the pool made is in ``standing``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._refilling:
                    return
            time.sleep(0.02)

    def standing(self) -> set[str]:
        """Names of what the pool holds now: proxies not yet handed to a run."""
        with self._lock:
            return {n for w in self._warm
                    for n in (w.container.name if w.container else "", w.network.name, w.workdir.name, w.seat_name) if n}

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self.settle()  # a build in progress finishes (and removes what it made) before the client can go
        with self._lock:
            warm, self._warm = self._warm, []
        for w in warm:
            w.remove(self._leftovers)

    def refill(self) -> None:
        """Start building proxies in the background up to the pool's size.

        Called by a run once its sandbox has finished, so the building never
        competes with a sandbox's start for the engine.
        """
        with self._lock:
            if self._refilling or self._closed or len(self._warm) >= self._size:
                return
            self._refilling = True
        # not a daemon: at exit the interpreter waits for it, then close() removes what it made
        threading.Thread(target=self._refill_loop, name="sandbox-lab-proxy-pool").start()

    def _refill_loop(self) -> None:
        try:
            while True:
                with self._lock:
                    if self._closed or len(self._warm) >= self._size:
                        return
                try:
                    w = self._build(self._shared.get())
                # the engine's errors are BackendErrors, and so are a service that did not start
                # (InfrastructureError) and full address pools; OSError: the proxy's files on the grader's disk
                except (BackendError, OSError):  # a run that needs a proxy builds its own and reports
                    return
                with self._lock:
                    if self._closed:
                        extra: Optional[WarmProxy] = w
                    else:
                        self._warm.append(w)
                        extra = None
                if extra is not None:
                    extra.remove(self._leftovers)
                    return
        finally:
            with self._lock:
                self._refilling = False

    def give_back(self, w: WarmProxy) -> bool:
        """Keep a proxy whose run is over for the next run; remove it instead if it should not serve again.

        The caller has removed the run's sandbox first: the network is empty
        again but for the proxy. Kept only while it runs, beat within the last
        second or when poked now (it answers), has served fewer than ``PROXY_RUNS`` runs and the
        pool has room; its lists are emptied first, so it refuses everything
        until the next run's ``hand_over``, and its seat is kept only if the run left it quiet (``Seating.reseat``).
        ``take`` still throws it away if
        the internet behind it was replaced meanwhile. True if kept.
        """
        w.runs += 1
        keep = w.runs < PROXY_RUNS and running(self._engine, w.container)
        if keep and w.container is not None:
            asked = time.time()
            poke(self._engine, w.container)  # a self-check now, not at the end of its interval
            keep = beat_after(w.workdir.sub("out"), asked - 1.0, timeout=0.5)
        if keep:
            if self._seating is not None:
                self._seating.reseat(w)
            w.hand_over([], [])
            with self._lock:
                keep = not self._closed and len(self._warm) < max(self._size, KEEP_WARM)
                if keep:
                    self._warm.append(w)
        if not keep:
            w.remove(self._leftovers)
        return keep

    def _build(self, internet: Internet) -> WarmProxy:
        w = build_proxy(self._engine, self._image, internet, self._leftovers.labels, self._leftovers, self._disk)
        if self._seating is not None:
            self._seating.seat(w)
        return w


def build_proxy(
    engine: DockerEngine, image: str, internet: Internet, labels_for: Callable[[str], dict[str, str]], leftovers: Leftovers,
    disk: Optional[Disk] = None,
) -> WarmProxy:
    """A proxy in front of ``internet``, running and refusing everything, on a new empty sandbox network.

    ``disk`` says where its files live for the engine (the grader's disk when None)."""
    name = "sl-proxy-" + secrets.token_hex(4)
    labels = labels_for(name)
    workdir = (disk or HostDisk()).files(name, lambda: make_run_dir(name))
    workdir.mkdir("out")
    workdir.write("proxy.json", dump_config(ProxyConfig(
        allowed=(), policy_file="/run/sandbox-lab/policy.json",
        listen_port=PROXY_PORT, dns_server=internet.ip, dns_port=DNS_PORT, out_dir="/run/sandbox-lab/out",
        world=world_ports(internet.world),
    )).encode())
    try:
        network = create_network(engine, f"{name}-sbx", labels)
    except BaseException:
        workdir.remove()  # nothing else was made yet
        raise
    w = WarmProxy(None, network, workdir, "", internet)
    try:
        w.container = container = service_container(engine, image, "proxy", f"{name}-proxy", labels, internet.network, workdir,
                                                    "proxy.py")
        engine.connect(network, container)
        engine.start(container)
        w.ip = container_ip(engine, container, network)
        wait_ready(engine, container, workdir.sub("out"))
    except BaseException:
        w.remove(leftovers)
        raise
    return w


def running(engine: DockerEngine, container: Optional[ContainerRef]) -> bool:
    """Whether ``container`` runs now; gone, or an engine that does not answer, is not running."""
    if container is None:
        return False
    try:
        return engine.inspect(container).status == "running"
    except EngineError:
        return False
