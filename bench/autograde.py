#!/usr/bin/env python3
"""Benchmark: what Sandbox Lab's grading step adds to ``nbgrader autograde`` at class scale.

Builds a temporary course with N submissions of one task (distinct policies by
default: the worst case for de-duplication), then runs ``nbgrader autograde``
twice on the same notebooks, in one run of this script:

* plain: nbgrader's own preprocessors only (``SANDBOX_LAB_AUTOGRADE_STEP=off``),
  so the scores come from the learner's kernel (the insecure way);
* enabled: with ``GradePolicies``, which grades the whole class in the
  grader's process (Docker when an engine answers), de-duplicated and parallel.

    python bench/autograde.py [--n 200] [--distinct | --mix] [--backend docker|static]

Target (issue 14): the step adds at most 50% to plain nbgrader's wall time.
Reported as a ratio measured in one run; not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from grader.grading.tasks import load_task  # noqa: E402

TASK = load_task("scope-secure-sandbox")
ASSIGNMENT = f"{TASK.order:02d}-task-{TASK.id}"
STUB = "# YOUR CODE HERE\nraise NotImplementedError()"
READS = ["/project/src", "/project", "/project/src/main.py", "/app/workspace", "/home/user/notes.txt", "/project/out"]
WRITES = ["/project/out", "/project/out/result.txt", "/project", "/tmp", "/home/user/.cache"]
HOSTS = ["registry.npmjs.org", "pypi.org", "files.pythonhosted.org", "raw.githubusercontent.com"]


def _policy(i: int, rng: random.Random, distinct: bool) -> str:
    if not distinct and rng.random() < 0.5:
        return json.dumps({"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}})
    reads = rng.sample(READS, rng.randint(1, 3))
    writes = rng.sample(WRITES, rng.randint(1, 2))
    hosts = rng.sample(HOSTS, rng.randint(0, 2))
    # a per-student denyRead of a path that exists nowhere keeps every policy distinct after normalization
    deny = [f"/home/user/.student-{i}"] if distinct else []
    return json.dumps({"filesystem": {"allowRead": reads, "allowWrite": writes, "denyRead": deny}, "network": {"allowedDomains": hosts}})


def _nbgrader(course: Path, env: dict[str, str], *args: str) -> float:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"nbgrader {' '.join(args)} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return time.monotonic() - started


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--mix", action="store_true", help="half the class submits the same policy (default: all distinct)")
    ap.add_argument("--backend", default="docker", choices=["docker", "static", "auto"])
    args = ap.parse_args()
    rng = random.Random(14)
    base_env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    base_env.pop("SANDBOX_LAB_BACKEND", None)
    with tempfile.TemporaryDirectory(prefix="sandbox-lab-autograde-bench-") as tmp:
        course = Path(tmp)
        shutil.copy(REPO / "nbgrader_config.py", course)
        shutil.copytree(REPO / "lessons" / ASSIGNMENT, course / "lessons" / ASSIGNMENT)
        _nbgrader(course, base_env, "generate_assignment", ASSIGNMENT, "--force", "--log-level=WARN")
        released = nbformat.read(course / "release" / ASSIGNMENT / "task.ipynb", as_version=4)
        policies = set()
        for i in range(args.n):
            nb = nbformat.from_dict(json.loads(json.dumps(released)))
            cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == f"{TASK.id}-policy")
            text = _policy(i, rng, not args.mix)
            policies.add(text)
            cell.source = cell.source.replace(STUB, f'policy_json = r"""{text}"""')
            folder = course / "submitted" / f"s{i:04d}" / ASSIGNMENT
            folder.mkdir(parents=True)
            nbformat.write(nb, folder / "task.ipynb")
        print(f"{args.n} submissions, {len(policies)} distinct policies, grading backend {args.backend}")
        plain = _nbgrader(course, {**base_env, "SANDBOX_LAB_AUTOGRADE_STEP": "off"}, "autograde", ASSIGNMENT, "--force", "--log-level=WARN")
        print(f"plain nbgrader autograde (scores from the kernel): {plain:7.1f} s  ({plain / args.n:.2f} s per submission)")
        env = {**base_env, "SANDBOX_LAB_AUTOGRADE_BACKEND": args.backend}
        enabled = _nbgrader(course, env, "autograde", ASSIGNMENT, "--force", "--log-level=WARN")
        print(f"with Sandbox Lab's grading step:                 {enabled:7.1f} s  ({enabled / args.n:.2f} s per submission)")
        added = (enabled - plain) / plain
        print(f"the step adds {added:+.0%} to plain nbgrader (target: at most +50%) -> {'met' if added <= 0.5 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
