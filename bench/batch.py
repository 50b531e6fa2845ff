#!/usr/bin/env python3
"""Benchmark: grade a class's worth of submissions with the Docker backend.

Generates N submissions for one task (a realistic mix: many copies of the
reference solution in different spellings, the naive setup, the seed's
"secure" setup, individual attempts, broken JSON and invalid policies), grades
them with ``grade_batch`` (Docker backend, bounded pool, de-duplication on),
then again with de-duplication off, and compares both with the naive way: one
fresh sandbox per submission, run one at a time (``workers=1``, no
de-duplication). The naive baseline is measured on a random subsample of the
valid submissions and extrapolated to the whole set (invalid submissions cost
it nothing either): running it in full takes a quarter of an hour.

    python bench/batch.py [--n 200] [--workers 4] [--baseline-sample 12] [--only dedupe|no-dedupe]
    python bench/batch.py --distinct [--n 200] [--workers 4] [--ab 3]

Targets on a 2-core machine (issue 4): 200 in under 60 s with de-duplication,
under 180 s without. With ``--distinct`` every submission is a different valid
policy (the worst case for de-duplication: one run each), graded once with
the shared path; target (issue 17): at least 2.5 policies/s with 4 workers.
``--ab K`` then grades K more classes of N/K policies with proxies reused
between runs and K with single-use proxies (``proxies.PROXY_RUNS = 1``, the
earlier behaviour), alternating, and prints both rates: on a shared machine the
ratio measured this way is steadier than any absolute rate.

Each configuration prints the time per unique run broken down by phase
(``grader.core.timings.PHASES``: world copy, network, container start, probes,
evidence, removal), as measured by the Docker backend with ``workers`` runs at
once, so the phases include waiting for the other runs on the same cores.
Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from grader.backends import get  # noqa: E402
from grader.grading.batch import ProgressBar, Submission, grade_batch, read_submissions  # noqa: E402
from grader.grading.tasks import load_task  # noqa: E402
from grader.core.timings import Tally  # noqa: E402

DISTINCT_TARGET = 2.5  # policies/s for 200 distinct policies at 4 workers (issue 17)
PHASE_WORDS = {"world": "world copy", "network": "network", "start": "container start", "probes": "probes",
               "evidence": "evidence", "removal": "removal (reaper)"}


def solution_path(task_id: str) -> Path:
    return Path(__file__).resolve().parent.parent / "solutions" / f"{task_id}.json"

NAIVE = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}
SEED_SECURE = {"filesystem": {"allowWrite": ["/app/workspace/build"]}, "network": {"allowedDomains": ["registry.npmjs.org"]}}


def _spellings(policy: dict[str, object], rng: random.Random) -> str:
    """The same policy as a student might type it: key order, indentation, trailing slashes."""
    text = json.dumps(policy, indent=rng.choice([None, 2, 4]), sort_keys=rng.random() < 0.5)
    if rng.random() < 0.3:
        text = text.replace('build"', 'build/"')
    return text


def make_class(folder: Path, n: int, task_id: str, seed: int = 4) -> dict[str, int]:
    """Write n submissions into folder; return how many of each kind."""
    rng = random.Random(seed)
    reference = json.loads(solution_path(task_id).read_text())
    kinds = {"reference": 0.40, "naive": 0.15, "seed-secure": 0.12, "attempt": 0.23, "broken-json": 0.05, "invalid": 0.05}
    counts = dict.fromkeys(kinds, 0)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        kind = rng.choices(list(kinds), weights=list(kinds.values()))[0]
        counts[kind] += 1
        if kind == "reference":
            text = _spellings(reference, rng)
        elif kind == "naive":
            text = _spellings(NAIVE, rng)
        elif kind == "seed-secure":
            text = _spellings(SEED_SECURE, rng)
        elif kind == "attempt":
            # an individual attempt: a few plausible building blocks, so some attempts coincide
            fs: dict[str, list[str]] = {"allowWrite": ["/app/workspace/build"]}
            if rng.random() < 0.6:
                fs["allowRead"] = rng.choice([["/app/workspace"], ["/app/workspace", "/project/src"], ["/app"]])
            if rng.random() < 0.5:
                fs["denyRead"] = rng.sample(["/home/user/.ssh", "/home/user/.aws", "/etc/secrets", "/project/.env"], k=rng.randint(1, 4))
            if rng.random() < 0.3:
                fs["denyWrite"] = [f"/app/workspace/build/cache{rng.randint(0, 40)}"]
            domains = rng.choice([["registry.npmjs.org"], ["registry.npmjs.org", "github.com"], ["*.npmjs.org"], ["registry.npmjs.org", "pypi.org"]])
            text = json.dumps({"filesystem": fs, "network": {"allowedDomains": domains}})
        elif kind == "broken-json":
            text = _spellings(reference, rng)[: rng.randint(5, 40)]
        else:
            text = json.dumps({"filesystem": {"allowWrites": ["/app/workspace/build"]}, "network": {"allowedDomains": ["*"]}})
        (folder / f"student{i:03d}.json").write_text(text)
    return counts


def make_distinct_class(folder: Path, n: int, seed: int = 4) -> None:
    """Write n valid submissions that stay distinct after normalization: one sandbox run each."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        fs: dict[str, list[str]] = {"allowWrite": ["/app/workspace/build"]}
        if rng.random() < 0.6:
            fs["allowRead"] = rng.choice([["/app/workspace"], ["/app/workspace", "/project/src"], ["/app"]])
        # a per-student denyRead of a path that exists nowhere keeps every policy distinct
        fs["denyRead"] = rng.sample(["/home/user/.ssh", "/home/user/.aws", "/etc/secrets"], k=rng.randint(0, 3)) + [f"/home/user/.student-{i}"]
        domains = rng.choice([["registry.npmjs.org"], ["registry.npmjs.org", "github.com"], ["*.npmjs.org"], ["registry.npmjs.org", "pypi.org"], []])
        (folder / f"student{i:03d}.json").write_text(json.dumps({"filesystem": fs, "network": {"allowedDomains": domains}}))


def print_breakdown(tally: Tally, runs: int, secs: float, workers: int) -> None:
    """The time per unique run, phase by phase, and how much of it the runs overlapped."""
    stats = tally.stats()
    if not stats:
        print("  (no backend runs: nothing to break down)")
        return
    critical = sum(s.mean for s in stats if s.name != "removal")
    print(f"  time per unique run, mean over {max(s.runs for s in stats)} run(s), up to {workers} at once:")
    for s in stats:
        share = f"{s.mean / critical:5.0%} of the run" if s.name != "removal" and critical else "  off the critical path"
        print(f"    {PHASE_WORDS.get(s.name, s.name):18} {s.mean:6.3f} s  {share}")
    wall = secs / runs if runs else 0.0
    print(f"    {'run, end to end':18} {critical:6.3f} s; wall time per run {wall:.3f} s "
          f"({critical / wall if wall else 0:.1f} runs overlapped on average)")


def _run(task_id: str, subs: list[Submission], backend: object, *, workers: int, dedupe: bool, label: str) -> tuple[float, int, object]:
    out = Path(tempfile.mkdtemp(prefix="sandbox-lab-bench-"))
    try:
        t0 = time.monotonic()
        book = grade_batch(load_task(task_id), subs, backend, workers=workers, dedupe=dedupe, out=out,  # type: ignore[arg-type]
                           progress=ProgressBar(label))
        return time.monotonic() - t0, book.runs, book
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="submissions (default 200)")
    ap.add_argument("--task", default="fix-the-naive-setup")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--baseline-sample", type=int, default=12, help="valid submissions timed one at a time for the naive baseline")
    ap.add_argument("--only", choices=("dedupe", "no-dedupe"), help="measure one configuration only")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--distinct", action="store_true", help="every submission a different valid policy; graded once, no baseline")
    ap.add_argument("--ab", type=int, default=0, metavar="K", help="with --distinct: K alternating blocks each of proxy reuse and single use")
    args = ap.parse_args()

    backend = get("docker", progress=lambda s: print(s, file=sys.stderr))
    tally = Tally()
    backend.tally = tally  # type: ignore[attr-defined]
    if args.distinct:
        return distinct(args, backend, tally)
    with tempfile.TemporaryDirectory(prefix="sandbox-lab-class-") as tmp:
        counts = make_class(Path(tmp), args.n, args.task, args.seed)
        subs = read_submissions(tmp)
    print(f"{args.n} submissions for {args.task}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))

    # warm-up: the first run pays for image checks and cold caches
    _run(args.task, subs[:1], backend, workers=1, dedupe=True, label="warm-up")

    from grader.core.errors import PolicyError
    from grader.core.policy import load_policy

    valid = []
    for s in subs:
        try:
            load_policy(s.data or b"")
            valid.append(s)
        except PolicyError:
            pass
    sample = random.Random(args.seed).sample(valid, min(args.baseline_sample, len(valid)))
    t_sample, _, _ = _run(args.task, sample, backend, workers=1, dedupe=False, label="naive baseline sample")
    per_run = t_sample / len(sample)
    baseline = per_run * len(valid)
    print(f"naive baseline (one fresh sandbox per submission, one at a time): {per_run:.2f} s per valid submission "
          f"over a sample of {len(sample)}, extrapolated to {len(valid)} valid submissions: {baseline:.0f} s "
          f"({args.n / baseline:.2f} submissions/s)")

    configs = [("dedupe", True), ("no-dedupe", False)]
    for name, dedupe in configs:
        if args.only and args.only != name:
            continue
        tally.clear()
        secs, runs, book = _run(args.task, subs, backend, workers=args.workers, dedupe=dedupe, label=name)
        backend.drain()  # type: ignore[attr-defined]  # the reaper's removals are in the tally
        c = book.counts()  # type: ignore[attr-defined]
        target = 60 if dedupe else 180
        print(
            f"{name:9}  workers={args.workers}: {args.n} submissions in {secs:.1f} s = {args.n / secs:.2f} submissions/s, "
            f"{runs} sandbox runs; {baseline / secs:.1f}x faster than the naive baseline; "
            f"target {target} s: {'met' if secs <= target else 'MISSED'}  "
            f"(rows: {c['ok']} ok, {c['invalid']} invalid, {c['error']} error)"
        )
        print_breakdown(tally, runs, secs, args.workers)
    return 0


def compare_reuse(args: argparse.Namespace, backend: object, subs: list[Submission]) -> None:
    """Alternating blocks with proxies reused between runs and with single-use proxies: both rates, same conditions."""
    import os
    import statistics

    from grader.backends.docker import proxies

    keep = proxies.PROXY_RUNS
    size = max(1, len(subs) // (2 * args.ab))
    rates: dict[str, list[float]] = {"reused": [], "single-use": []}
    try:
        for k in range(2 * args.ab):
            mode = ("reused", "single-use")[(k + k // 2) % 2]  # ABBA order: neither mode always goes first
            proxies.PROXY_RUNS = keep if mode == "reused" else 1
            block = subs[k * size:(k + 1) * size]
            secs, _, _ = _run(args.task, block, backend, workers=args.workers, dedupe=True, label=mode)
            backend.drain()  # type: ignore[attr-defined]
            rates[mode].append(len(block) / secs)
            print(f"  {mode:10} {len(block)} policies: {len(block) / secs:.2f} policies/s (load average {os.getloadavg()[0]:.1f})")
    finally:
        proxies.PROXY_RUNS = keep
    a, b = statistics.median(rates["reused"]), statistics.median(rates["single-use"])
    print(f"  proxies reused: median {a:.2f} policies/s; single-use: {b:.2f}; ratio {a / b:.2f}")


def distinct(args: argparse.Namespace, backend: object, tally: Tally) -> int:
    """Grade N distinct policies once (warm backend), and compare the rate with the target."""
    with tempfile.TemporaryDirectory(prefix="sandbox-lab-class-") as tmp:
        make_distinct_class(Path(tmp), args.n * (2 if args.ab else 1), args.seed)
        subs = read_submissions(tmp)
    subs, spare = subs[:args.n], subs[args.n:]
    _run(args.task, subs[:args.workers], backend, workers=args.workers, dedupe=True, label="warm-up")
    backend.drain()  # type: ignore[attr-defined]
    tally.clear()
    secs, runs, book = _run(args.task, subs, backend, workers=args.workers, dedupe=True, label="distinct")
    backend.drain()  # type: ignore[attr-defined]
    c = book.counts()  # type: ignore[attr-defined]
    rate = args.n / secs
    print(f"distinct  workers={args.workers}: {args.n} distinct policies in {secs:.1f} s = {rate:.2f} policies/s, "
          f"{runs} sandbox runs (rows: {c['ok']} ok, {c['invalid']} invalid, {c['error']} error)")
    for r in [r for r in book.rows if r.status == "error"][:3]:  # type: ignore[attr-defined]
        print(f"  error row {r.student}: {r.feedback.splitlines()[0][:300]}")
    print_breakdown(tally, runs, secs, args.workers)
    print(f"  {rate:.2f} / {DISTINCT_TARGET} policies/s = {rate / DISTINCT_TARGET:.2f} of the target: "
          f"{'met' if rate >= DISTINCT_TARGET and not c['error'] else 'MISSED'}"
          + (f" ({c['error']} error rows: a rate with errors proves nothing)" if c["error"] else ""))
    if args.ab:
        compare_reuse(args, backend, spare)
    backend.close()  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    sys.exit(main())
