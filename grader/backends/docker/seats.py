"""A seat: a warm proxy's network namespace, held open ahead of its run, for the sandbox to join at its start.

Starting a container on a bridge makes its network namespace, its veth pair and its place on the bridge: on this
machine about 0.29 s of a 0.29 s start, against 0.08 s for a container that joins a namespace already made
(``network_mode="container:<seat>"``). Counted in the machine's CPU, a start and removal costs 0.14 core-s
in a seat against 0.36 on a bridge (``bench/seats.py``): a network namespace is costly to make and to tear down.

* The hub's keeper makes one seat beside each proxy it lists, off every run's path; the run that takes the proxy
  starts its sandbox in the seat's namespace. After a clean run the seat stays with the proxy, and the keeper
  re-lists the proxy with it if it is ``quiet`` (``relisted_seat``), else with a new one; after any other run it
  goes with the run's things.
* A backend's own pool (``proxies.ProxyPool``, the service's kept workers and ``grade-batch``) gives each proxy a
  seat that serves the proxy's runs one after another (``PoolSeats``). Either way, before each run after the
  first, the seat must be ``quiet``: it runs, and its namespace holds no socket of the last run's sandbox but closed TCP
  connections whose data the proxy has acknowledged. That is what a run on the bridge leaves the next one: its
  sandbox's veth goes with it, and whatever it had sent is at the proxy already (the proxy's log offset,
  ``run.Run``, separates the runs' records either way). A seat in doubt is removed and a new one made.

What the sandbox gets is what it got on the bridge: the proxy's sandbox network and nothing else, its hostname
(``sandbox``), and the fast ARP give-up on its interface. The seat holds nothing the sandbox could use: it runs
``sleep`` as nobody, with no capabilities, on a read-only root, and listens on nothing; the sandbox shares its
network namespace only (not its processes, files or hostname namespace).

Where a seat is missing, in doubt or does not fit (``unfit``), the sandbox joins the bridge as before. A seat that
stopped while its sandbox ran may have taken the sandbox's network with it: ``gone`` says so, and the run's
evidence is then not trusted (``run.Run._infra_problem``).
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Callable, Mapping, Optional

from grader.core.errors import BackendError

from grader.backends.docker.engine import ContainerRef, DockerEngine, EngineError, NetworkRef, log_config, ulimit
from grader.backends.docker.resources import Resources
from grader.backends.docker.liveness import NotHere, held_process
from grader.backends.docker.proxies import WarmProxy
from grader.backends.docker.simnet import LABEL, LABEL_ROLE, Leftovers

__all__ = ["ROLE", "SANDBOX_HOSTNAME", "SANDBOX_SYSCTLS", "PoolSeats", "gone", "make_seat", "open_sockets", "quiet",
           "relisted_seat", "seat_for", "take_seat", "unfit"]

ROLE = "seat"
SANDBOX_HOSTNAME = "sandbox"
# An address no one answers on the sandbox's bridge (the phantom gateway, other networks) fails after one
# 100 ms ARP try instead of three 1 s tries: the kernel says "no route to host" sooner; nothing becomes reachable.
SANDBOX_SYSCTLS: Mapping[str, str] = {"net.ipv4.neigh.eth0.retrans_time_ms": "100", "net.ipv4.neigh.eth0.mcast_solicit": "1"}


def make_seat(engine: DockerEngine, image: str, network: NetworkRef, labels: dict[str, str], name: str) -> ContainerRef:
    """Create and start a seat on ``network`` (a proxy's sandbox network); removed again if it does not start."""
    seat = engine.create_container(
        image, ["sleep", "infinity"],
        name=name, labels={**labels, LABEL_ROLE: ROLE},
        network=network.name, hostname=SANDBOX_HOSTNAME, sysctls=dict(SANDBOX_SYSCTLS),
        user="65534:65534", read_only=True, cap_drop=["ALL"], security_opt=["no-new-privileges"],
        pids_limit=4, mem_limit="16m", memswap_limit="16m", nano_cpus=100_000_000,
        ulimits=[ulimit("nofile", 64, 64), ulimit("core", 0, 0)],
        log_config=log_config("json-file", {"max-size": "64k"}),
    )
    try:
        engine.start(seat)
    except BaseException:
        engine.remove_container(seat)
        raise
    return seat


def seat_for(engine: DockerEngine, image: str, network: NetworkRef, labels_for: Callable[[str], dict[str, str]]) -> str:
    """The id of a new seat on a proxy's sandbox network (``proxies.build_proxy`` names it ``<proxy>-sbx``), labelled
    as its proxy; "" when none could be made (the engine refused, or is away): its run's sandbox joins the bridge."""
    seat = _new_seat(engine, image, network, labels_for)
    return seat.id if seat is not None else ""


def relisted_seat(engine: DockerEngine, image: str, network: NetworkRef, labels_for: Callable[[str], dict[str, str]],
                  leftovers: Leftovers, used: str) -> str:
    """The seat a hub's keeper re-lists a clean run's proxy with: ``used`` (the seat its sandbox sat in, "" none)
    while it is still on ``network`` (as inspected now) and ``quiet``, else a new one, the used one removed."""
    if used and used in network.containers and not quiet(engine, used):
        return used
    if used:
        leftovers.remove(ContainerRef(used, ""))
    return seat_for(engine, image, network, labels_for)


def _new_seat(engine: DockerEngine, image: str, network: NetworkRef,
              labels_for: Callable[[str], dict[str, str]]) -> Optional[ContainerRef]:
    proxy = network.name.removesuffix("-sbx")
    try:
        return make_seat(engine, image, network, labels_for(proxy), f"{proxy}-seat-{secrets.token_hex(3)}")
    except BackendError:
        return None


class PoolSeats:
    """Seats for a backend's own pool (``proxies.Seating``): one per proxy, serving its runs one after another."""

    def __init__(self, engine: DockerEngine, image: str, leftovers: Leftovers) -> None:
        self._engine = engine
        self._image = image
        self._leftovers = leftovers

    def seat(self, w: WarmProxy) -> None:
        seat = _new_seat(self._engine, self._image, w.network, self._leftovers.labels)
        w.seat, w.seat_name = (seat.id, seat.name) if seat is not None else ("", "")

    def fit(self, w: WarmProxy) -> Optional[ContainerRef]:
        if not w.seat or w.container is None:
            return None
        try:  # as they are now: the pool's network was described when it was made, before its seat joined it
            seat, network = self._engine.inspect(w.seat), self._engine.network(w.network)
        except EngineError:
            return None
        return None if unfit(seat, network, w.container) else seat

    def reseat(self, w: WarmProxy) -> None:
        if w.seat and not quiet(self._engine, w.seat):
            return
        if w.seat:
            self._leftovers.remove(ContainerRef(w.seat, w.seat_name))
        self.seat(w)


def take_seat(engine: DockerEngine, w: WarmProxy, made: Resources) -> Optional[ContainerRef]:
    """A taken hub proxy's seat, the run's to remove whatever it is (added to ``made``; after a clean run whose
    sandbox sat in it, ``HubSharing.hand_off`` hands it back with the proxy instead); for its sandbox only if it
    fits (``unfit``), else None: the sandbox joins the bridge."""
    if not w.seat or w.container is None:
        return None
    try:
        seat = made.container(engine.inspect(w.seat))
    except EngineError:  # gone, or an engine away: the sandbox joins the bridge (and meets the engine there)
        return None
    return None if unfit(seat, w.network, w.container) else seat


def unfit(seat: ContainerRef, network: NetworkRef, proxy: ContainerRef) -> str:
    """Why ``seat`` (as inspected now) must not hold a sandbox behind ``proxy`` on ``network`` (as inspected when the
    proxy was taken); empty when it may: ours and a seat, running, on that network alone, which holds the proxy and
    the seat and nothing else."""
    if LABEL not in seat.labels or seat.labels.get(LABEL_ROLE) != ROLE:
        return "not one of this lab's seats"
    if seat.status != "running":
        return f"not running ({seat.status or 'unknown'})"
    if set(seat.addresses) != {network.name}:
        return f"on {sorted(seat.addresses)}, not on {network.name} alone"
    if set(network.containers) != {proxy.id, seat.id}:
        return "its network holds something besides its proxy and itself"
    return ""


def gone(engine: DockerEngine, seat: ContainerRef) -> str:
    """Why a seat is no longer what its sandbox's network stood on, asked once the sandbox finished; empty while it
    runs as it did (a stopped container never runs again by itself: no seat is started twice)."""
    try:
        now = engine.inspect(seat)
    except EngineError as exc:  # gone, or an engine that does not answer: in doubt either way
        return f"the sandbox's network seat could not be asked ({exc})"
    if now.status != "running":
        return f"the sandbox's network seat stopped during the run (status {now.status}, exit code {now.exit_code})"
    return ""


QUIET_WAIT = 0.25  # how long a seat's closing connections may take to close (the proxy acknowledges in milliseconds)
# /proc/<pid>/net tables of a network namespace's sockets; TCP's own states that carry nothing more to the proxy:
# FIN_WAIT2 (its FIN acknowledged, so every byte before it), TIME_WAIT, CLOSE
_TABLES = ("tcp", "tcp6", "udp", "udp6", "udplite", "udplite6", "raw", "raw6", "unix", "packet")
_CLOSED = frozenset({"05", "06", "07"})


def quiet(engine: DockerEngine, seat: str, *, wait: float = QUIET_WAIT) -> str:
    """Why the seat ``seat`` (an id) must not hold another run's sandbox; empty when it may: it runs here (its first
    process is this machine's, ``liveness.held_process``), and its network namespace holds no socket but the
    engine's own resolver's on loopback and closed TCP connections. Waits up to ``wait`` for the last run's
    connections to close."""
    try:
        with held_process(engine, ContainerRef(seat, "")) as (pid, _):
            net, deadline = Path(f"/proc/{pid}/net"), time.monotonic() + wait
            while True:
                left = open_sockets(net)
                if not left or time.monotonic() > deadline:
                    return f"its network namespace still holds {left}" if left else ""
                time.sleep(0.01)
    except NotHere as exc:
        return str(exc)
    except OSError as exc:
        return f"its network namespace could not be read ({exc})"


def open_sockets(net: Path) -> str:
    """What of a network namespace's sockets may still carry something to its proxy (the first three, table and
    row), read from its tables (``/proc/<pid>/net``); empty: none."""
    left: list[str] = []
    for table in _TABLES:
        try:
            rows = (net / table).read_text(encoding="ascii", errors="replace").splitlines()[1:]
        except FileNotFoundError:  # a table this kernel does not have (IPv6 off): no socket of it either
            continue
        left += [f"{table}: {row.strip()}" for row in rows if row.strip() and not _harmless(table, row.split())]
    return "; ".join(left[:3])


def _harmless(table: str, fields: list[str]) -> bool:
    """A socket that can carry nothing of a run to its proxy: a closed TCP connection, or one on loopback alone
    (the engine's resolver listens on 127.0.0.11 in every container's namespace)."""
    if not table.startswith(("tcp", "udp")) or table.startswith("udplite") or len(fields) < 4:
        return False
    if table.startswith("tcp") and fields[3] in _CLOSED:
        return True
    return all(_loopback(address.split(":")[0]) for address in fields[1:3])


def _loopback(hexaddr: str) -> bool:
    """An address of /proc's tables (hex, in the kernel's byte order) that is 127.0.0.0/8, ::1 or unspecified."""
    if len(hexaddr) == 8:
        return hexaddr == "00000000" or hexaddr[6:8] == "7F"
    return hexaddr in ("0" * 32, "0" * 24 + "01000000")
