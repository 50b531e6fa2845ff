"""Where a run behind a proxy gets its proxy and the internet behind it: one interface, chosen in one place.

A sandbox behind a proxy never touches the internet's network (only its
proxy does), so those runs share one simulated internet, and take a proxy
already warm in front of it. Two ways to share, one interface (``Sharing``):

* ``InProcess``: the backend's own internet and pool of proxies
  (``simnet.SharedInternet``, ``proxies.ProxyPool``), removed when it closes;
* the machine's hub (``hub.HubSharing``): one internet and warm proxies kept by
  a keeper process for every grader on the machine, which also removes what
  finished runs hand it, so nobody waits, and puts a clean run's proxy back in
  its pool for the next run of any grader, as ``ProxyPool.give_back`` does.

The backend chooses once (``backend.sharing_for``). Sharing between processes
is one removable unit: ``hub``, ``lease`` and the branch that picks them there.
The plain container (``network == "open"``) shares nothing: it gets an
internet of its own, whatever the mode (``run.Run``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol

from grader.core.world import World

from grader.backends.files import Files
from grader.backends.docker.engine import ContainerRef
from grader.backends.docker.resources import Resources
from grader.backends.docker.proxies import ProxyPool, WarmProxy
from grader.backends.docker.simnet import Internet, Leftovers, SharedInternet

__all__ = ["InProcess", "Sharing", "Taken", "give_back"]


@dataclass(frozen=True)
class Taken:
    """The proxy one run took: borrowed from the pool (given back after the run), or the run's own (in its resources)."""

    proxy: WarmProxy
    borrowed: bool
    seat: Optional[ContainerRef] = None  # its network's seat, fit for the sandbox to join (``seats``): a hub's, the run's to remove

    @property
    def out(self) -> Files:
        return self.proxy.workdir.sub("out")

    def kept(self, clean: bool) -> frozenset[str]:
        """The ids of the proxy's container, network and the seat its sandbox sat in when they may serve another run
        after this one, so nothing of the run removes them early (the replay's release): a hub's claimed proxy after
        a clean run, which ``HubSharing.hand_off`` hands back for re-listing. Empty otherwise: whatever is in doubt
        goes."""
        w = self.proxy
        if not clean or self.borrowed or w.claim is None or w.container is None:
            return frozenset()
        return frozenset((w.container.id, w.network.id, *((self.seat.id,) if self.seat is not None else ())))


class Sharing(Protocol):
    """The shared internet and its proxies, as a backend's runs use them."""

    def internet(self, world: Optional[World] = None) -> Internet:
        """The shared internet for ``world`` (None: the one it answers for), running now (started, adopted
        or replaced as needed); ``BackendError`` if it answers for another world."""
        ...

    def take(self, made: Resources, world: World) -> Taken:
        """A running proxy in front of the shared internet of ``world`` (the run's plan's), refusing
        everything, for one run; what becomes the run's alone is added to ``made``."""
        ...

    def hand_off(self, run_id: str, made: Resources, taken: Optional[Taken], *, clean: bool) -> bool:
        """Give the things of a finished run behind a proxy to someone who removes them without anyone waiting;
        False: remove them here. ``taken``: the proxy it took, if it got that far; ``clean``: the run finished and
        every recorder answered (``run.Run.clean``), so a proxy it claimed may serve the next run."""
        ...

    def give_back(self, taken: Taken, *, clean: bool, leftovers: Leftovers) -> None:
        """A borrowed proxy after its run (whose sandbox is gone): kept for the next run only after a clean one."""
        ...

    def settle(self) -> None:
        """Wait until the pool has finished refilling and handed-off things are removed."""
        ...

    def standing(self) -> set[str]:
        """Names of the containers, networks and directories kept between runs."""
        ...

    def close(self) -> None:
        """Remove what this backend keeps (a hub's keeper keeps its own for the idle period)."""
        ...


class InProcess:
    """The backend's own internet and proxies, shared by its runs only; removed when it closes."""

    def __init__(self, shared: SharedInternet, pool: ProxyPool) -> None:
        self.shared = shared
        self.pool = pool

    def internet(self, world: Optional[World] = None) -> Internet:
        return self.shared.get(world)

    def take(self, made: Resources, world: World) -> Taken:
        w = self.pool.take(world)  # this run's alone until its removal gives it back, with its seat
        return Taken(w, borrowed=True, seat=self.pool.seat_of(w))

    def hand_off(self, run_id: str, made: Resources, taken: Optional[Taken], *, clean: bool) -> bool:
        return False

    def give_back(self, taken: Taken, *, clean: bool, leftovers: Leftovers) -> None:
        give_back(self.pool, taken, clean=clean, leftovers=leftovers)

    def settle(self) -> None:
        self.pool.settle()

    def standing(self) -> set[str]:
        return self.pool.standing() | self.shared.standing()

    def close(self) -> None:
        self.pool.close()  # settles first: a build in progress finishes, and what it made goes
        self.shared.close()


def give_back(pool: ProxyPool, taken: Taken, *, clean: bool, leftovers: Leftovers) -> None:
    """The proxy and its network serve the next run only after a clean run whose sandbox is gone; otherwise they go."""
    kept = pool.give_back(taken.proxy) if clean else False
    if not clean:
        taken.proxy.remove(leftovers)
    if not kept:
        pool.refill()  # now, not earlier: the build would compete with the sandbox's start
