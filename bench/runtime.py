#!/usr/bin/env python3
"""Benchmark: what a run costs under gVisor's runsc against the engine's default runc, measured in one run.

Two Docker backends on the same engine, one per runtime (``DockerBackend(...,
runtime=)``), each with its own internet and warm proxies; after one warm-up
run each, the same plan is run ``--rounds`` times on each, alternating (runc,
runsc, runc, ...) so load on a shared machine falls on both alike. Prints the
median wall time of a run and of each phase (``grader.core.timings``) for both,
and the ratios runsc / runc: the ratio is the figure to read, not the absolute
seconds. Every run's verdicts must agree between the two runtimes (a run
that differs is printed and the bench exits 1).

    SANDBOX_LAB_SHARED_IDLE=0 python bench/runtime.py [--rounds 5] [--policy examples/secure.json] [--runtime runsc]

Needs the runtime registered with the engine (``sudo scripts/ensure-docker --runtime runsc``).
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader import load_policy  # noqa: E402
from grader.backends.docker.backend import DockerBackend, client_from_env  # noqa: E402
from grader.backends.docker.images import ensure_images  # noqa: E402
from grader.core.outcomes import RunResult  # noqa: E402
from grader.core.plan import build_plan  # noqa: E402


def _verdicts(r: RunResult) -> dict[str, str]:
    return {o.id: o.outcome for o in r.probes}


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--policy", default=str(Path(__file__).resolve().parent.parent / "examples" / "secure.json"))
    ap.add_argument("--runtime", default="runsc")
    a = ap.parse_args(argv)
    client = client_from_env()
    images = ensure_images(client, lambda s: None)
    plan = build_plan(load_policy(a.policy))
    names = ("runc", a.runtime)
    backends = {"runc": DockerBackend(client, images, shared_idle=0, runtime=None),
                a.runtime: DockerBackend(client, images, shared_idle=0, runtime=a.runtime)}
    walls: dict[str, list[float]] = {n: [] for n in names}
    phases: dict[str, dict[str, list[float]]] = {n: {} for n in names}
    seen: dict[str, dict[str, str]] = {}
    mismatches = 0
    try:
        for n in names:  # warm-up: images in the page cache, the internet and proxies started
            seen[n] = _verdicts(backends[n].run(plan))
        if seen["runc"] != seen[a.runtime]:
            print(f"warm-up verdicts differ: runc {seen['runc']} vs {a.runtime} {seen[a.runtime]}")
            mismatches += 1
        for i in range(a.rounds):
            for n in names:
                started = time.perf_counter()
                r = backends[n].run(plan)
                walls[n].append(time.perf_counter() - started)
                for phase, s in (r.timings or {}).items():
                    phases[n].setdefault(phase, []).append(s)
                if _verdicts(r) != seen["runc"]:
                    print(f"round {i + 1}: {n}'s verdicts differ from runc's warm-up: {_verdicts(r)}")
                    mismatches += 1
                backends[n].drain()  # its removals done before the other runtime's run starts
    finally:
        for b in backends.values():
            b.close()
    print(f"{a.rounds} runs each of {Path(a.policy).name} ({len(plan.probes)} probes), alternating; medians in seconds")
    print(f"{'':12}{'runc':>9}{a.runtime:>9}{'ratio':>8}")

    def row(label: str, x: list[float], y: list[float]) -> None:
        mx, my = statistics.median(x), statistics.median(y)
        print(f"{label:12}{mx:9.3f}{my:9.3f}{my / mx if mx else float('nan'):8.2f}")

    row("run (wall)", walls["runc"], walls[a.runtime])
    for phase in phases["runc"]:
        if phase in phases[a.runtime]:
            row(phase, phases["runc"][phase], phases[a.runtime][phase])
    print("verdicts: " + ("the same under both runtimes" if not mismatches else f"{mismatches} run(s) differ"))
    return 1 if mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main())
