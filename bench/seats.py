#!/usr/bin/env python3
"""Benchmark: what a container's start and removal costs the machine, by how it is networked (``grader/backends/docker/seats.py``).

The sandbox image's ``python3 -c pass``, created, started, waited for and
removed, ``--n`` times in a row for each way of networking it, the ways
alternating over ``--rounds`` rounds so load on a shared machine falls on all
alike:

* ``none``: no network (``network_mode=none``): a network namespace of its own, loopback only;
* ``bridge``: an internal bridge, as a sandbox behind a proxy without a seat;
* ``seat``: joining a namespace another container holds (``network_mode=container:<seat>``), as a seated sandbox.

Prints, per way, the median over rounds of the machine's CPU a lifecycle
costs (``/proc/stat``: every process, the engine's, its shims and runc and
the kernel's included, so a quiet machine gives the truest figure) and its
wall time, and the ratios to ``bridge``. The seat itself is made once and
not counted: a pool's seat serves its proxy's runs one after another.

    python bench/seats.py [--n 15] [--rounds 3]

Not part of the test suite.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import docker  # noqa: E402

from grader.backends.docker.engine import DockerEngine  # noqa: E402
from grader.backends.docker.images import find_images  # noqa: E402

WAYS = ("none", "bridge", "seat")


def _busy() -> float:
    """Core-seconds the whole machine has been busy since boot (every state but idle and iowait)."""
    with open("/proc/stat", encoding="ascii") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    client = docker.from_env()
    images = find_images(DockerEngine(client))
    if images is None:
        print("the lab's images are missing: run `make images` first", file=sys.stderr)
        return 2
    labels = {"org.sandbox-lab.bench": "seats"}
    net = client.networks.create(f"sl-bench-seats-{os.getpid()}", internal=True, labels=labels)
    seat = client.containers.run(images.sandbox, ["sleep", "infinity"], detach=True, network=net.name, labels=labels)
    options: dict[str, dict[str, Any]] = {"none": {"network_mode": "none"}, "bridge": {"network": net.name},
                                          "seat": {"network_mode": f"container:{seat.id}"}}
    measured: dict[str, list[tuple[float, float]]] = {w: [] for w in WAYS}
    try:
        for _ in range(args.rounds):
            for way in WAYS:
                busy, wall = _busy(), time.perf_counter()
                for _ in range(args.n):
                    c = client.containers.create(images.sandbox, ["python3", "-c", "pass"], labels=labels, **options[way])
                    try:
                        c.start()
                        c.wait()
                    finally:
                        c.remove(force=True)
                measured[way].append(((_busy() - busy) / args.n, (time.perf_counter() - wall) / args.n))
    finally:
        seat.remove(force=True)
        net.remove()
    bridge = statistics.median(core for core, _ in measured["bridge"])
    print(f"a container's start and removal, median of {args.rounds} rounds of {args.n} (machine core-s, wall s):")
    for way in WAYS:
        core = statistics.median(c for c, _ in measured[way])
        wall = statistics.median(w for _, w in measured[way])
        print(f"  {way:7} {core:.3f} core-s  {wall:.3f} s  ({core / bridge:.2f}x the bridge's CPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
