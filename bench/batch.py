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

Targets on a 2-core machine (issue 4): 200 in under 60 s with de-duplication,
under 180 s without. Not part of the test suite.
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
from grader.batch import ProgressBar, Submission, grade_batch, read_submissions  # noqa: E402
from grader.tasks import load_task  # noqa: E402


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
    args = ap.parse_args()

    backend = get("docker", progress=lambda s: print(s, file=sys.stderr))
    with tempfile.TemporaryDirectory(prefix="sandbox-lab-class-") as tmp:
        counts = make_class(Path(tmp), args.n, args.task, args.seed)
        subs = read_submissions(tmp)
    print(f"{args.n} submissions for {args.task}: " + ", ".join(f"{v} {k}" for k, v in counts.items()))

    # warm-up: the first run pays for image checks and cold caches
    _run(args.task, subs[:1], backend, workers=1, dedupe=True, label="warm-up")

    from grader.errors import PolicyError
    from grader.policy import load_policy

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
        secs, runs, book = _run(args.task, subs, backend, workers=args.workers, dedupe=dedupe, label=name)
        c = book.counts()  # type: ignore[attr-defined]
        target = 60 if dedupe else 180
        print(
            f"{name:9}  workers={args.workers}: {args.n} submissions in {secs:.1f} s = {args.n / secs:.2f} submissions/s, "
            f"{runs} sandbox runs; {baseline / secs:.1f}x faster than the naive baseline; "
            f"target {target} s: {'met' if secs <= target else 'MISSED'}  "
            f"(rows: {c['ok']} ok, {c['invalid']} invalid, {c['error']} error)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
