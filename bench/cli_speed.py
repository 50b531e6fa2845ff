"""How long ``sandbox-lab --help`` and ``sandbox-lab check`` take to start, against a bare ``python -c pass``.

Measures, in one bench run and each in a fresh process (interleaved, so a
busy machine slows every command alike), the median wall time and the median
CPU time (user + system, the child's own) of

* ``python -c pass``: the interpreter alone, the floor every command pays;
* ``python -m grader --help``;
* ``python -m grader check POLICY`` (default: ``examples/naive.json``), the
  whole command: parse, analyse, print;

and prints each as seconds and as a ratio to ``python -c pass``. Target
(issue 26): ``--help`` and ``check`` under 0.2 s on a quiet machine. Ratios
are what to compare across machines and loads; the seconds are printed with
the load average before and after, since a loaded machine stretches them.

Two bytecode settings are measured, because they differ by a lot:

* ``cached``: the package's ``.pyc`` files exist, as after ``pip install``
  (written once into a temporary ``PYTHONPYCACHEPREFIX``, never the checkout);
* ``as-is``: this environment unchanged; with ``PYTHONDONTWRITEBYTECODE=1``
  every module of the checkout is compiled from source on every run.

Last, where ``check``'s import time goes (``python -X importtime``, the
modules' own time summed by owner, median of the runs): what the command
imports is the cost that laziness controls. Speed is measured here, never
asserted in a test; ``tests/unit/cli/test_cli.py`` pins which modules each command
imports, which holds on any machine.

    python bench/cli_speed.py [--repeat 15] [--policy FILE]
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_SECONDS = 0.2
_IMPORTTIME = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)")


def _commands(policy: str) -> dict[str, list[str]]:
    return {
        "python -c pass": ["-c", "pass"],
        "sandbox-lab --help": ["-m", "grader", "--help"],
        f"sandbox-lab check {policy}": ["-m", "grader", "check", policy],
    }


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one fresh process."""
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *argv], cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {err[-800:]}")
    return wall, usage.ru_utime + usage.ru_stime


def _environments(prefix: str) -> dict[str, dict[str, str]]:
    cached = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cached["PYTHONPYCACHEPREFIX"] = prefix
    return {"cached": cached, "as-is": dict(os.environ)}


def _measure(commands: dict[str, list[str]], env: dict[str, str], n: int) -> dict[str, tuple[float, float]]:
    """Median (wall, cpu) per command over ``n`` interleaved rounds."""
    for argv in commands.values():  # warm the disk cache and, where allowed, write the bytecode
        _run(argv, env)
    runs: dict[str, list[tuple[float, float]]] = {k: [] for k in commands}
    for _ in range(n):
        for name, argv in commands.items():
            runs[name].append(_run(argv, env))
    return {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in runs.items()}


def _owner(module: str) -> str:
    top = module.split(".")[0]
    if top == "grader":
        return ".".join(module.split(".")[:3]) if module.startswith(("grader.core.", "grader.services.")) else ".".join(module.split(".")[:2])
    if top in ("pydantic", "pydantic_core", "annotated_types", "typing_inspection", "typing_extensions"):
        return "pydantic (and its dependencies)"
    if top in sys.stdlib_module_names or top.startswith("_"):
        return "standard library"
    return top


def _import_breakdown(argv: list[str], env: dict[str, str], n: int) -> tuple[list[tuple[str, float]], float, int]:
    """Median self import time per owner (seconds), their total, and how many modules were imported."""
    per_run: list[dict[str, float]] = []
    count = 0
    for _ in range(n):
        done = subprocess.run([sys.executable, "-X", "importtime", *argv], cwd=REPO, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
        owners: dict[str, float] = collections.defaultdict(float)
        count = 0
        for line in done.stderr.splitlines():
            m = _IMPORTTIME.match(line)
            if m:
                owners[_owner(m[4])] += int(m[1]) / 1e6
                count += 1
        per_run.append(owners)
    names = {k for r in per_run for k in r}
    medians = sorted(((k, statistics.median(r.get(k, 0.0) for r in per_run)) for k in names), key=lambda x: -x[1])
    return medians, sum(v for _, v in medians), count


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--policy", default="examples/naive.json", help="the policy `check` reads (default: %(default)s)")
    args = ap.parse_args()
    commands = _commands(args.policy)
    load_before = os.getloadavg()
    print(f"{sys.executable} ({sys.version.split()[0]}), {os.cpu_count()} cores, load average "
          f"{load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}; median of {args.repeat} fresh processes each")
    verdicts = []
    with tempfile.TemporaryDirectory(prefix="cli-speed-pyc-") as prefix:
        envs = _environments(prefix)
        for mode, env in envs.items():
            note = "PYTHONDONTWRITEBYTECODE=" + env.get("PYTHONDONTWRITEBYTECODE", "unset")
            print(f"\n.pyc {mode} ({note}):")
            print(f"  {'command':44} {'wall':>8} {'x pass':>7} {'cpu':>8} {'x pass':>7}")
            medians = _measure(commands, env, args.repeat)
            base_wall, base_cpu = medians["python -c pass"]
            for name, (wall, cpu) in medians.items():
                print(f"  {name:44} {wall:6.3f} s {wall / base_wall:6.1f}x {cpu:6.3f} s {cpu / base_cpu:6.1f}x")
                if name != "python -c pass" and mode == "cached":
                    verdicts.append(wall < TARGET_SECONDS)
        check = commands[f"sandbox-lab check {args.policy}"]
        owners, total, count = _import_breakdown(check, envs["cached"], max(3, args.repeat // 3))
        print(f"\nwhere check's import time goes (.pyc cached, -X importtime, {count} modules, "
              f"{total:.3f} s of modules' own time; inflated by the measuring):")
        for name, seconds in owners[:14]:
            print(f"  {name:40} {seconds:6.3f} s {seconds / total:5.0%}")
    load_after = os.getloadavg()
    print(f"\ntarget: --help and check under {TARGET_SECONDS} s wall with .pyc cached (on a quiet machine): "
          f"{'met' if all(verdicts) else 'NOT met'}; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
