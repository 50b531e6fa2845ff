"""What a long network.allowedDomains costs a Docker run: 10 entries against 60, and the worst case at the cap.

The policy is a Claude Code-style list of package registries, code hosts and
APIs (tests/fixtures/policies/claude-code-60.json); the short one is its first
ten entries. The worst case fills the cap (``LIMITS["allowed_domains"]``) with
names the world does not know, each made its own kind (``scope.stand_ins``) by
a deniedDomains entry of its own, so the run asks every one of them. For each,
one warm-up run, then ``--rounds`` runs in turn; prints the orders the runner
gets (network steps, fronting attempts), each median wall time and its ratio
to the short list's, and fails (exit 1) when a run's verdicts or scope differ
from the static analyzer's or a run could not be judged. Before the fan-out
was narrowed to one attempt per kind, lists past 10 entries were refused at
load time; ``--raise-cap`` lifts the cap in this process alone, to time long
lists on a tree whose cap is still low.

    python bench/allowed_domains.py [--rounds 5] [--raise-cap]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from grader import load_policy, predict  # noqa: E402
from grader.backends.docker.backend import DockerBackend, client_from_env  # noqa: E402
from grader.backends.docker.images import ensure_images  # noqa: E402
from grader.backends.runs import runner_config  # noqa: E402
from grader.core import policy as policy_module  # noqa: E402
from grader.core.outcomes import RunResult  # noqa: E402
from grader.core.plan import RunPlan, build_plan  # noqa: E402
from grader.core.records import RawPorts  # noqa: E402

LONG = REPO / "tests" / "fixtures" / "policies" / "claude-code-60.json"


def _plans() -> dict[str, RunPlan]:
    raw = json.loads(LONG.read_text())
    entries = raw["network"]["allowedDomains"]
    short = {"network": {"allowedDomains": entries[:10]}}
    cap = policy_module.LIMITS["allowed_domains"] if policy_module.LIMITS["allowed_domains"] < 1_000 else 100
    worst = {"network": {"allowedDomains": [f"h{i}.example.net" for i in range(cap)],
                         "deniedDomains": [f"h{i}.example.net:80" for i in range(cap)]}}
    return {"10 entries": build_plan(load_policy(short)), f"{len(entries)} entries": build_plan(load_policy(raw)),
            f"{cap} entries, {cap} kinds": build_plan(load_policy(worst))}


def _orders(plan: RunPlan) -> tuple[int, int]:
    """(network steps, fronting attempts) the runner is told to make for ``plan``."""
    config = runner_config(plan, token="t0ken", timeout=1.0, connect_timeout=1.0, attacker_ip="192.0.2.1",
                           raw=RawPorts.same(plan.world.raw_ports), host_port=9, gateway_names=[], ca_file="")
    net = fronts = 0
    for entry in config["probes"]:
        for step in entry["steps"]:
            op = step["op"]
            if op in ("http", "dns", "tcp"):
                net += 1
            elif op == "steal":
                net += len(step["urls"]) + len(step["get_urls"])
            elif op == "front":
                fronts += max(1, len(step["attempts"]))
    return net, fronts


def _differences(result: RunResult, plan: RunPlan) -> list[str]:
    static = predict(plan.policy)
    out = [f"{o.id}: docker {o.outcome}, static {static.outcome(o.id).outcome}"
           for o in result.probes if o.outcome != static.outcome(o.id).outcome]
    if result.scope != static.scope:
        out.append("the measured scope differs from the predicted one")
    return out + [f"note: {n}" for n in result.notes]


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--raise-cap", action="store_true", help="lift the allowedDomains cap in this process")
    a = ap.parse_args(argv)
    if a.raise_cap:
        policy_module.LIMITS["allowed_domains"] = 1_000  # _plans builds the worst case at 100
    plans = _plans()
    for name, plan in plans.items():
        net, fronts = _orders(plan)
        print(f"{name}: {net} network steps, {fronts} fronting attempts")
    client = client_from_env()
    backend = DockerBackend(client, ensure_images(client, lambda s: None))
    walls: dict[str, list[float]] = {n: [] for n in plans}
    bad: list[str] = []
    try:
        for name, plan in plans.items():  # warm-up: the internet and proxies started
            bad += [f"warm-up {name}: {d}" for d in _differences(backend.run(plan), plan)]
        for i in range(a.rounds):
            for name, plan in plans.items():
                started = time.perf_counter()
                result = backend.run(plan)
                walls[name].append(time.perf_counter() - started)
                bad += [f"round {i + 1} {name}: {d}" for d in _differences(result, plan)]
                backend.drain()
    finally:
        backend.close()
    short = statistics.median(next(iter(walls.values())))
    for name, w in walls.items():
        med = statistics.median(w)
        print(f"{name}: median {med:.2f} s over {len(w)} runs ({', '.join(f'{x:.2f}' for x in w)}), {med / short:.2f}x the first")
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
