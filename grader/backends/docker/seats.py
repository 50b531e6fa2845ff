"""A seat: a warm proxy's network namespace, held open ahead of its run, for the sandbox to join at its start.

Starting a container on a bridge makes its network namespace, its veth pair and its place on the bridge: on this
machine about 0.29 s of a 0.29 s start, against 0.08 s for a container that joins a namespace already made
(``network_mode="container:<seat>"``). The hub's keeper makes one seat beside each proxy it lists, off every
run's path; the run that takes the proxy starts its sandbox in the seat's namespace, and removes the seat with
its own things. A seat never serves a second run: the keeper makes a new one when it re-lists the proxy.

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
from typing import Callable, Mapping, Optional

from grader.core.errors import BackendError

from grader.backends.docker.engine import ContainerRef, DockerEngine, EngineError, NetworkRef, log_config, ulimit
from grader.backends.docker.resources import Resources
from grader.backends.docker.simnet import LABEL, LABEL_ROLE, WarmProxy

__all__ = ["ROLE", "SANDBOX_HOSTNAME", "SANDBOX_SYSCTLS", "gone", "make_seat", "seat_for", "take_seat", "unfit"]

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
    """The id of a new seat on a proxy's sandbox network (``simnet.build_proxy`` names it ``<proxy>-sbx``), labelled
    as its proxy; "" when none could be made (the engine refused, or is away): its run's sandbox joins the bridge."""
    proxy = network.name.removesuffix("-sbx")
    try:
        return make_seat(engine, image, network, labels_for(proxy), f"{proxy}-seat-{secrets.token_hex(3)}").id
    except BackendError:
        return ""


def take_seat(engine: DockerEngine, w: WarmProxy, made: Resources) -> Optional[ContainerRef]:
    """A taken proxy's seat, the run's to remove whatever it is (added to ``made``); for its sandbox only if it fits
    (``unfit``), else None: the sandbox joins the bridge."""
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
