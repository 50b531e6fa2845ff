"""How long a full probe run takes, against a bare container start of the same image.

Measures, in one run, the median wall time of a full Docker probe run (every
probe and the scope scan) for the seed's naive setup, its secure setup and the
practice solution, and of a bare
`docker run --rm --network none <sandbox image> python3 -c pass`, and prints
each ratio. Target on a 2-core machine with images built: within 4x. Each
policy also runs alone (on a settled backend) with and without the scope scan,
alternating, so the scan's share of a run is shown beside it (the difference
over the run with the scan).

    python bench/probe_speed.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import subprocess
import time

from grader import load_policy
from grader.backends.docker import DockerBackend
from grader.plan import RunPlan, build_plan

POLICIES = {
    "naive": {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}},
    "secure": {"filesystem": {"allowWrite": ["/app/workspace/build"]}, "network": {"allowedDomains": ["registry.npmjs.org"]}},
    "practice": {"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}},
}
TARGET = 4.0


def _median(f: "callable[[], None]", n: int) -> float:  # type: ignore[valid-type]
    times = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _medians(fs: "list[callable[[], object]]", n: int) -> "tuple[float, ...]":  # type: ignore[valid-type]
    times: list[list[float]] = [[] for _ in fs]
    for _ in range(n):
        for f, out in zip(fs, times):
            t = time.perf_counter()
            f()  # type: ignore[operator]
            out.append(time.perf_counter() - t)
    return tuple(statistics.median(x) for x in times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    backend = DockerBackend.from_env()
    image = backend.images.sandbox
    bare = _median(lambda: subprocess.run(["docker", "run", "--rm", "--network", "none", image, "python3", "-c", "pass"], check=True), args.repeat)
    print(f"bare docker run of {image}: median {bare:.2f} s over {args.repeat}")
    worst = 0.0
    for name, raw in POLICIES.items():
        plan = build_plan(load_policy(raw))
        t = _median(lambda: backend.run(plan), args.repeat)
        # The scan's share: the same run with and without the scan, alternating, each started on a
        # settled backend (back to back, a run's time depends on what the previous one left to tidy).
        def alone(p: RunPlan) -> None:
            backend.drain()
            backend.run(p)

        with_scan, bare_probes = _medians([lambda: alone(plan), lambda: alone(dataclasses.replace(plan, scan=False))], args.repeat)
        ratio = t / bare
        worst = max(worst, ratio)
        share = max(0.0, with_scan - bare_probes) / with_scan
        print(f"{name:9} full probe run ({len(plan.probes)} probes + scope scan, network={plan.network}): median {t:.2f} s "
              f"= {ratio:.1f}x bare | one run alone: {with_scan:.2f} s, without the scan {bare_probes:.2f} s: scan's share {share:.0%}")
    print(f"worst ratio {worst:.1f}x (target <= {TARGET:.0f}x): {'met' if worst <= TARGET else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
