"""What one run made on the engine and on disk: a value the run owns, that its removal consumes.

A run (``run.Run``) and its next session (``replay.play``) add each
container, network, service directory and internet to the run's
``Resources`` as soon as it exists, so that whatever fails afterwards, the
removal finds it; nobody appends to a list of someone else's. The removal
(``remove``) takes it whole: containers first (they hold the networks and
mount the directories), then networks, internets and directories. A failed
removal is never dropped: it is kept in the backend's ``Leftovers`` and retried.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TypeVar

from grader.backends.files import Files, host_path
from grader.backends.docker.engine import ContainerRef, Missing, NetworkRef
from grader.backends.docker.simnet import Internet, Leftovers

__all__ = ["Resources", "gone"]

C = TypeVar("C", bound=ContainerRef)
N = TypeVar("N", bound=NetworkRef)


@dataclass
class Resources:
    """The containers, networks, service directories and internets one run made, in the order it made them."""

    containers: list[ContainerRef] = field(default_factory=list)
    networks: list[NetworkRef] = field(default_factory=list)
    dirs: list[Files] = field(default_factory=list)
    internets: list[Internet] = field(default_factory=list)  # whole internets of the run's own (container and network)

    def container(self, c: C) -> C:
        """Add ``c`` (once: a run copy placed twice holds one container); return it."""
        if not any(c.id == x.id for x in self.containers):
            self.containers.append(c)
        return c

    def network(self, n: N) -> N:
        self.networks.append(n)
        return n

    def directory(self, d: Files) -> Files:
        self.dirs.append(d)
        return d

    def internet(self, net: Internet) -> Internet:
        self.internets.append(net)
        return net

    def listing(self) -> dict[str, list[str]]:
        """Ids and paths, for a hub's keeper to remove (``hub.Hub.discard``); directories on the grader's disk only."""
        return {
            "containers": [c.id for c in self.containers] + [i.container.id for i in self.internets],
            "networks": [n.id for n in self.networks] + [i.network.id for i in self.internets],
            "dirs": [str(host_path(d)) for d in self.dirs],
        }

    def remove_containers(self, leftovers: Leftovers) -> bool:
        """Remove the containers, all at once (each takes a few hundred milliseconds); True once every one is gone."""
        done: list[bool] = []
        threads = [threading.Thread(target=lambda c=c: done.append(gone(leftovers, c))) for c in self.containers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return all(done)

    def remove_rest(self, leftovers: Leftovers) -> None:
        """After the containers: the networks, the run's own internets, the directories."""
        for n in self.networks:
            leftovers.remove(n)
        for net in self.internets:
            net.remove(leftovers)
        for d in self.dirs:
            d.remove()


def gone(leftovers: Leftovers, container: ContainerRef) -> bool:
    """Remove ``container``; True once it is gone. A failed removal is kept in ``leftovers`` to try again."""
    try:
        leftovers.engine.remove_container(container)
        return True
    except Missing:
        return True
    # Any failure, not only the engine's (EngineError): this runs in one of ``remove_containers``' threads, and an
    # error escaping it would leave no answer there, so that ``all(done)`` would call a container gone that is not.
    except Exception:  # noqa: BLE001 - the engine may be away: kept and retried, and not gone
        leftovers.remove(container)
        return False
