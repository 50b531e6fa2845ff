"""The hub's pool of warm proxies, as its keeper tends it: what finished runs hand back, and the pool's size.

A run claims a warm proxy from the pool (``lease.HubDir.claim``) and, after a
clean run, hands it back with its trash. The keeper removes the run's things
first, then re-lists the proxy on ``ProxyPool.give_back``'s terms (``relist``)
or removes it (``empty_trash``).

The pool's size is kept two ways, and they must not fight:

* the keeper **refills** to ``size`` whenever the hub is ``quiet``: no proxy
  claimed in the last ``SETTLING`` seconds (a sandbox may be starting against
  the same engine) and no trash waiting. A run held ready for longer (the
  terminal's warm engine holds one per file it watches, for up to minutes) is
  past its start, so it no longer stops a refill, and the next file's run
  finds a proxy waiting. A **dry** pool is refilled at once, quiet or not
  (``refill_now``): under a stream of runs (a service's workers, a class) the
  hub is never quiet, and a run that finds the pool empty builds a proxy on
  its own path, one the pool never took in and so never re-lists. Measured
  with three service workers on the hub, 0.88 proxies were built a run where
  a worker's own pool built 0.24;
* a proxy a run hands back is **re-listed** while the pool holds fewer than
  ``room(size)``, twice its size: a pool refilled behind a run still has room
  for that run's proxy, which would otherwise be removed and rebuilt. Above
  ``size`` the keeper ``trim``s one proxy at a time once no run holds a claim,
  the one that has served most first, so the pool settles back to ``size``
  and never holds more than ``room(size)``.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Callable, Optional, Union

from grader.backends.quota import remove_dir
from grader.protocol.configs import AllowLists, dump_config
from grader.backends.files import host_files
from grader.backends.docker.engine import ContainerRef, DockerEngine, EngineError, Missing, NetworkRef
from grader.backends.docker.lease import HubDir, ProxyEntry, Trash
from grader.backends.docker.liveness import beat_after, poke
from grader.backends.owners import runs_root
from grader.backends.docker.simnet import KEEP_WARM, LABEL, PROXY_RUNS, Leftovers

__all__ = ["POOL_SIZE", "SETTLING", "empty_trash", "refill_now", "relist", "remove_listed", "retry_once", "room", "trim"]

# warm proxies: the warm engine holds a run, with its proxy, for each of up to 4 files it watches
# (``cli.ahead.WATCH_MAX``); with 4, a new file's run took the pool's last, and the dry pool's refill (a network
# and a container) started beside that run's sandbox, 60-90 ms later to start. 6 leaves two: no refill on its path
POOL_SIZE = 6
SETTLING = 3.0  # seconds after a run claims its proxy in which its sandbox may still be starting


def room(size: int) -> int:
    """How many proxies the pool may hold when a run hands one back: twice its size (``KEEP_WARM`` at least)."""
    return 2 * max(size, KEEP_WARM)


def refill_now(pooled: int, size: int, quiet: Callable[[], bool]) -> bool:
    """Whether the keeper builds a proxy for its pool now: below ``size``, and the pool dry or the hub ``quiet``
    (asked only then: it reads the hub's claims)."""
    return pooled < size and (pooled == 0 or quiet())


def remove_listed(engine: DockerEngine, entry: Trash, leftovers: Leftovers) -> None:
    """Remove the containers, networks and directories a run listed; only what carries our label, only under runs_root."""
    root = runs_root().resolve()

    def ours(kind: str, ident: str) -> Optional[Union[ContainerRef, NetworkRef]]:
        try:
            thing: Union[ContainerRef, NetworkRef] = engine.inspect(ident) if kind == "c" else engine.network(ident)
        except Missing:
            return None
        return thing if LABEL in thing.labels else None  # never anything that is not Sandbox Lab's

    containers = [c for c in (ours("c", i) for i in entry.containers) if c is not None]
    threads = [threading.Thread(target=leftovers.remove, args=(c,)) for c in containers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for n in (ours("n", i) for i in entry.networks):
        if n is not None:
            leftovers.remove(n)
    for d in entry.dirs:
        p = Path(d).resolve()
        if p.parent == root:
            remove_dir(p)  # its world quota unmounted first


def empty_trash(engine: DockerEngine, hub: HubDir, leftovers: Leftovers, gen: Optional[str] = None,
                 size: int = POOL_SIZE, seat: Callable[[NetworkRef, str], str] = lambda _n, _s: "") -> None:
    """Remove what finished runs listed. Only the serving keeper passes its internet's ``gen``: then a clean run's
    proxy goes back to its pool of ``size`` if it may serve again (``relist``, with the ``seat`` it gives), once
    the run's things are gone.
    Anyone else (a keeper stopping, a grader retiring a hub) removes everything for good. A run's file goes last:
    a grader's ``Hub.settle`` waits for it."""
    for path, entry in hub.trash():
        proxy = entry.relist if gen is not None else None
        remove_listed(engine, entry if proxy is not None else entry.for_good(), leftovers)
        retry_once(leftovers)
        if proxy is not None and gen is not None and not relist(engine, hub, proxy, gen, size, leftovers, seat):
            remove_listed(engine, proxy.things(), leftovers)
            retry_once(leftovers)
        path.unlink(missing_ok=True)


def retry_once(leftovers: Leftovers) -> None:
    if len(leftovers):
        # A network whose killed container is still being torn down refuses once: the grader's
        # own removal tried again at once too (``drain``); what still fails is retried each second.
        time.sleep(0.2)
        leftovers.retry()


def relist(engine: DockerEngine, hub: HubDir, entry: ProxyEntry, gen: str, size: int, leftovers: Leftovers,
           seat: Callable[[NetworkRef, str], str] = lambda _n, _s: "") -> bool:
    """Put a clean run's proxy back in the pool for the next run of any grader; False: it is to be removed.

    The run's own things are removed first, so its sandbox has left the proxy's network. Kept on the terms of
    ``ProxyPool.give_back``, each failing closed: nothing of the removal was left over; it stands in front of this
    keeper's internet (``gen``); it has served fewer than ``PROXY_RUNS`` runs with this one; it is ours and runs,
    alone on its network; it answers a poke with a fresh heartbeat; its lists are emptied first (it refuses
    everything until the next run's ``hand_over``); and the pool has ``room``. Its network may hold the seat its
    run used besides (``entry.seat``, kept out of the run's things after a clean run): ``seat(network, used)``
    says which seat the proxy is listed with (``seats.relisted_seat``: the used one while it is quiet, else a new
    one; "" when none could be made).
    """
    if len(leftovers) or entry.gen != gen or entry.runs + 1 >= PROXY_RUNS:
        return False
    workdir = Path(entry.workdir)
    if workdir.resolve().parent != runs_root().resolve():
        return False  # never a directory the keeper would not remove
    try:
        container = engine.inspect(entry.container)
        network = engine.network(entry.network)
    except EngineError:  # gone (Missing), or an engine that does not answer
        return False
    if (LABEL not in container.labels or LABEL not in network.labels or container.status != "running"
            or set(network.containers) - {entry.seat} != {container.id}):
        return False
    files = host_files(workdir)
    asked = time.time()
    poke(engine, container)  # a self-check now, not at the end of its interval
    if not beat_after(files.sub("out"), asked - 1.0, timeout=0.5):
        return False
    files.write("policy.json", dump_config(AllowLists((), ())).encode())  # as ``WarmProxy.hand_over([], [])``
    if len(hub.pooled()) >= room(size):
        return False
    hub.offer(workdir.name, dataclasses.replace(entry, runs=entry.runs + 1, seat=seat(network, entry.seat)))
    return True


def trim(engine: DockerEngine, hub: HubDir, size: int, leftovers: Leftovers) -> bool:
    """Take one proxy out of a pool holding more than ``size`` and remove it: the one that has served most runs.
    Only when no run holds a claim and no trash waits (a run handing its proxy back is never raced). False when
    there was nothing to trim, or a grader claimed that proxy first."""
    pooled = hub.pooled()
    if len(pooled) <= size or hub.claims() or hub.trash():
        return False
    name, entry = max(pooled, key=lambda p: (p[1].runs, p[0]))
    if not hub.withdraw(name):
        return False
    remove_listed(engine, entry.things(), leftovers)
    retry_once(leftovers)
    return True
