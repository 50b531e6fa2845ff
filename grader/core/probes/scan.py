"""The scope scan's orders: the same kind of orders as the probes', trying every world path and host
instead of a sample.

Its markers are in ``evidence.Markers`` beside the probes'; what it covers is
``scope``'s; ``verdicts.measure_scope`` judges it.

Pure.
"""

from __future__ import annotations

from grader.core.access import Access
from grader.core.probes.record import OrderContext, Step
from grader.protocol.wire import DnsStep, HttpStep, ProbeOrders, ReadStep, WriteStep
from grader.core.scope import SCAN_IDS, asked_hosts, new_file, scan_name, scan_url, scanned_dirs, scanned_files

__all__ = ["SCAN_WIDTH", "scan_orders"]

# How many of one scan entry's steps the runner carries out at once: enough to hide
# the network's round trips, few enough that the scan's threads stay far below
# the sandbox's pids limit next to the probes' own.
SCAN_WIDTH = 8


def scan_orders(access: Access, ctx: OrderContext) -> list[ProbeOrders]:
    """The scope scan's orders: read every world file, append to it, create a file in every world
    directory, and ask every world host and one allowed name of each kind (``scope.asked_hosts``) for the
    scan's path through the proxy and directly, and look a name under it up with the sandbox's own resolver.

    One entry per kind of attempt (``scope.SCAN_IDS``), so an unfinished part is told apart.
    """
    m, world = ctx.markers, access.world
    files = scanned_files(world)
    reads: list[Step] = [ReadStep(path=ctx.rebase(p)) for p in files]
    writes: list[Step] = [WriteStep(path=ctx.rebase(p), text=m.scan_text, append=True)
                          for p in [*files, *map(new_file, scanned_dirs(world))]]
    net: list[Step] = []
    for host in asked_hosts(access):
        name = scan_name(m.scan_label, host)
        url = scan_url(access, name, m.scan_path)
        # once more after a timeout: a request lost to a busy machine proves nothing either way
        net += [HttpStep(method="GET", url=url, via="proxy", retries=1),
                HttpStep(method="GET", url=url, via="direct", retries=1),
                DnsStep(name=m.scan_dns(name))]
    steps = dict(zip(SCAN_IDS, (reads, writes, net)))
    return [ProbeOrders(id=sid, steps=tuple(steps[sid]), parallel=SCAN_WIDTH) for sid in SCAN_IDS]
