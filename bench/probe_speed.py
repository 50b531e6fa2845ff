"""How long a probe run takes from a terminal and inside a kernel, against a bare container start of the same image.

Measures, in one bench run, the median wall time of

* a bare hardened ``docker run --rm --network none <sandbox image> python3 -c pass``;
* ``python -m grader probe POLICY --backend docker`` from a terminal: one
  process per run, so everything a one-shot command pays is in it (the
  interpreter, imports, finding the shared internet, the run, the exit);
* the same command handed to the warm engine (``sandbox-lab engine``, issue 40):
  on a file it never saw (cold, the honest worst case), on a new file saved
  beside the one it just probed (prepared by the engine in the second the
  learner takes to type the command), and on that file again (its rerun);
  each timed probe follows one second's pause, the learner typing; and the
  rerun once more after a pause past the engine's ``QUIET_S`` (the learner
  read the report first), by when the held rerun was made whole;
* the same full run inside one long-lived process (``backend.run(plan)``),

for the seed's naive setup, its secure setup (both behind a proxy) and the
practice solution (no network), and prints each ratio to the bare run. Target
for a run behind a proxy from a terminal: at most 1.5 s and at most 5x bare.
Then it breaks one-shot runs down by phase (a fresh process per run, timed
inside), prints where the time goes, and says of each speed target (naive at
most 4x bare in the kernel and 5x from a terminal, secure at most 4x from a
terminal, practice at most 1.5x in the kernel, a one-shot command's imports at
most 0.2 s) whether this run met it. ``--scan-share`` also shows the scope
scan's share of an in-process run.

Then, per kind of run, terminal and in-process alternating, each run's own
phases (``RunResult.timings``) beside its CPU by whose work it is
(``bench/cpu.py``: the sandbox's cgroup, the grader process, the proxy and
internet containers, dockerd + containerd), its core-seconds, the sandbox's
share of them and the phase that dominates. ``--costs-only`` prints the bare
run and that table alone.

Last, lesson 02's Run All (the first lesson that runs the naive policy: the
time a learner waits there), with nbclient in a fresh kernel on the Docker
backend, exactly as ``bench/lesson_times.py`` measures every stop (target: at
most 15 s on a quiet machine). ``--write-route`` writes that time into
``grader/route.json`` (lesson 02's ``run_seconds`` and minutes, and how it was
measured, with the load) and renders the README's and lesson 00's route from
it; ``--no-lesson`` leaves the lesson out.

    python bench/probe_speed.py [--repeat 5] [--scan-share] [--no-lesson | --write-route] [--costs-only | --editor-only]
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's grader, as the one-shot runs (cwd=REPO) import it

from grader import load_policy  # noqa: E402 - after the path is set
from grader.backends.docker.backend import DockerBackend  # noqa: E402
from grader.backends.docker.hub import POOL_SIZE, HubSharing  # noqa: E402
from grader.backends.docker.lease import idle_seconds  # noqa: E402
from grader.core.plan import RunPlan, build_plan  # noqa: E402
from grader.cli.ahead import QUIET_S  # noqa: E402

sys.path.insert(0, str(REPO / "bench"))
import cpu  # noqa: E402 - bench/cpu.py, beside this file

POLICIES = {
    "naive": {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}},
    "secure": {"filesystem": {"allowWrite": ["/app/workspace/build"]}, "network": {"allowedDomains": ["registry.npmjs.org"]}},
    "practice": {"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}},
}
TARGET_SECONDS = 1.5
TARGET_RATIO = 5.0
# The speed targets, as ratios to the bare run in this one bench run: (policy, where, at most this many times bare)
RATIO_TARGETS = (("naive", "in the kernel", 4.0), ("naive", "terminal", 5.0), ("secure", "terminal", 4.0),
                 ("practice", "in the kernel", 1.5))
IMPORTS_TARGET_SECONDS = 0.2
# issue 40: a terminal's probe with the warm engine running (grader/cli/engine.py), and the grader's own time
# around a secure run's sandbox (the in-process run's wall less its probes phase, the sandbox's own work)
ENGINE_TARGETS = {"secure": 2.5, "naive": 5.0}
AROUND_TARGET_SECONDS = 0.1
# issue 40: the editor's Probe with the policy typed before the press (in the kernel, the sandbox pre-started)
EDITOR_TARGETS = {"secure": 1.5, "practice": 1.5, "naive": 3.5}
LESSON = "02-naive-vs-secure"
LESSON_TARGET_SECONDS = 15.0

# Runs in a fresh interpreter, as `sandbox-lab probe` does, and times each phase from inside it.
# The wrappers only read the clock: what runs is the command's own code.
PHASES = r'''
import json, sys, time
t_start = float(sys.argv[2])
marks = {"interpreter start": time.time() - t_start}
t = time.perf_counter()
from grader.cli.main import main
import grader.backends.docker.backend as d, grader.backends.docker.hub as h, grader.backends.runs as r
import grader.backends.docker.run as u
marks["imports"] = time.perf_counter() - t

def timed(owner, name, label):
    f = getattr(owner, name)
    def wrapper(*a, **k):
        t0 = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            marks[label] = marks.get(label, 0.0) + time.perf_counter() - t0
    setattr(owner, name, wrapper)

timed(d.DockerBackend, "from_env", "engine + images")
timed(h.Hub, "internet", "shared internet (adopt)")
timed(h.Hub, "take", "warm proxy (claim)")
timed(d.DockerBackend, "close", "close (hand-offs)")
timed(r.RunDir, "lay_out", "world copy")
timed(u.Run, "_start_sandbox", "sandbox create+start")
timed(u.Run, "_go_and_wait", "sandbox go+wait")
timed(u.Run, "_infra_problem", "recorders' heartbeat")
timed(u.Run, "_output", "sandbox output")
timed(u, "gather_evidence", "evidence")
timed(d.DockerBackend, "run", "run (whole)")
_run = d.DockerBackend.run
def _keep(self, plan):
    result = _run(self, plan)
    marks["_timings"] = dict(result.timings)  # the run's own phases, as RunResult carries them
    return result
d.DockerBackend.run = _keep
t = time.perf_counter()
code = main(["probe", sys.argv[1], "--backend", "docker", "--json"])
marks["command (whole)"] = time.perf_counter() - t
marks["_t_end"] = time.time()
sys.stderr.write("PHASES " + json.dumps(marks) + "\n")
import gc
gc.freeze()  # as the console script's entry() does before it exits
sys.exit(code)
'''


def _median(f: Callable[[], object], n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _medians(fs: list[Callable[[], object]], n: int) -> tuple[float, ...]:
    times: list[list[float]] = [[] for _ in fs]
    for _ in range(n):
        for f, out in zip(fs, times):
            t = time.perf_counter()
            f()
            out.append(time.perf_counter() - t)
    return tuple(statistics.median(x) for x in times)


def _editor_probe(backend: DockerBackend, name: str, n: int) -> tuple[float, float, float]:
    """The editor's Probe on ``name``'s policy, typed before the press: (pre-started, cold, pre-started less its
    probes phase: the grader's own time on the press's path) medians of ``n``.

    Pre-started: the editor's own ``Prestart`` is offered the policy (as an edit does), the preparation is
    awaited, the next session's behind it too (``Prepared.settled``: the naive policy's), and everything settled
    (the learner reads before pressing), then only its ``run`` (Probe) is timed.
    Cold: the same plan by ``backend.run``, alternating with it."""
    from grader.course.prestart import Prestart, lesson_plan

    policy = load_policy(POLICIES[name])
    plan = lesson_plan(policy)
    warm, cold, around = [], [], []
    for _ in range(n):
        pre = Prestart(lambda: backend, settle_s=0.0)
        pre.offer(policy)
        deadline = time.monotonic() + 60
        while pre.held is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if pre.held is None or not pre.held.settled(60):  # the run, and its next session made ready behind it
            raise SystemExit(f"{name}: the editor prepared nothing in 60 s")
        backend.drain()
        t = time.perf_counter()
        result = pre.run(plan)
        warm.append(time.perf_counter() - t)
        around.append(warm[-1] - result.timings.get("probes", 0.0))
        assert result.run_id and all(p.outcome != "error" for p in result.probes), f"{name}: an error outcome"
        pre.close()
        backend.drain()
        t = time.perf_counter()
        backend.run(plan)
        cold.append(time.perf_counter() - t)
        backend.drain()
    return statistics.median(warm), statistics.median(cold), statistics.median(around)


def _editor_rows(backend: DockerBackend, bare: float, n: int) -> None:
    load = os.getloadavg()
    print(f"editor Probe, policy typed before the press (in the kernel), medians of {n} "
          f"(load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}):")
    for name, most in EDITOR_TARGETS.items():
        warm, cold, around = _editor_probe(backend, name, n)
        print(f"  {name:9} pre-started {warm:5.2f} s = {warm / bare:4.1f}x bare (cold {cold:5.2f} s = {cold / bare:4.1f}x)"
              f"  target <= {most:.1f}x: {'met' if warm / bare <= most else 'NOT met'}")
        if name == "secure":  # the sandbox is up before the press: what is left of the grader's is the go and the evidence
            print(f"  {'':9} the grader's own time on the press's path (pre-started wall less its probes phase) "
                  f"<= {AROUND_TARGET_SECONDS} s: {around:.3f} s  {'met' if around <= AROUND_TARGET_SECONDS else 'NOT met'}")


def _cli(policy_file: Path, engine: str = "off") -> None:
    """``sandbox-lab probe`` as a terminal runs it: in a fresh process (engine off), or handed to the warm engine."""
    subprocess.run([sys.executable, "-m", "grader", "probe", str(policy_file), "--backend", "docker", "--json"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO,
                   env={**os.environ, "SANDBOX_LAB_ENGINE": engine})


def _beside(policy_file: Path, i: int) -> Path:
    """A copy of ``policy_file`` under a new name in its own directory, as ``cp naive.json mine.json`` and an edit
    make it. The edit is a ``$schema`` of its own: the sandbox and its verdicts are the same, but the plan is
    new, so what fires is what the engine prepared for this file, never the rerun it holds for ``policy_file``."""
    copy = policy_file.with_name(f"{policy_file.stem}-mine-{i}.json")
    raw = json.loads(policy_file.read_text())
    copy.write_text(json.dumps({"$schema": f"https://example.invalid/sandbox-lab/mine-{i}.json", **raw}))
    return copy


def _beside_runs(policy_file: Path, n: int) -> float:
    """Median of ``n`` probes of a new file saved beside ``policy_file`` (which the engine has just probed): each
    written, then 1.0 s of sleep (the learner typing the command), then the timed ``probe``."""
    times = []
    for i in range(n):
        copy = _beside(policy_file, i)
        time.sleep(1.0)
        t = time.perf_counter()
        _cli(copy, engine="on")
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _reruns(policy_file: Path, n: int, pause: float) -> float:
    """Median of ``n`` probes of the same file again through the warm engine, each after ``pause`` s."""
    times = []
    for _ in range(n):
        time.sleep(pause)
        t = time.perf_counter()
        _cli(policy_file, engine="on")
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _fresh_runs(policy_file: Path, n: int) -> float:
    """Median of ``n`` probes of a file the engine never saw, each in a new directory: each written, then 1.0 s of
    sleep (the learner typing the command, as for ``_beside_runs`` and the reruns), then the timed ``probe``. Run
    back to back, each cold run also met the last one's aftermath (its removal, the rerun made ready for it)."""
    times = []
    for _ in range(n):
        fresh = _fresh(policy_file)
        time.sleep(1.0)
        t = time.perf_counter()
        _cli(fresh, engine="on")
        times.append(time.perf_counter() - t)
    return statistics.median(times)


_COLD = iter(range(1_000_000))


def _fresh(policy_file: Path) -> Path:
    """A copy of ``policy_file`` the engine can have prepared nothing for: in a new directory outside every one it
    watches, with a ``$schema`` of its own, so its plan is new too (an exact copy's plan is the probed file's, and
    the engine's held rerun of that plan would fire: not a cold run)."""
    i = next(_COLD)
    fresh = Path(tempfile.mkdtemp(prefix="sl-cold-")) / policy_file.name
    atexit.register(shutil.rmtree, fresh.parent, True)
    raw = json.loads(policy_file.read_text())
    fresh.write_text(json.dumps({"$schema": f"https://example.invalid/sandbox-lab/cold-{os.getpid()}-{i}.json", **raw}))
    return fresh


def _pool_full(backend: DockerBackend, timeout: float = 90.0) -> None:
    """Wait until the hub's keeper has filled its pool of warm proxies (``hubpool.POOL_SIZE``), started by the first
    run: a bare run timed while the keeper builds them meets that work (0.44 s against 0.31 s, measured), and so
    would the rows after it."""
    hub = getattr(backend.sharing, "hub", None)
    deadline = time.monotonic() + timeout
    while hub is not None and len(hub.dir.pooled()) < POOL_SIZE and time.monotonic() < deadline:
        time.sleep(0.2)


def _engine(action: str) -> None:
    subprocess.run([sys.executable, "-m", "grader", "engine", action], check=True, stdout=subprocess.DEVNULL, cwd=REPO,
                   env={**os.environ, "SANDBOX_LAB_ENGINE": "on"})


def _phases(policy_file: Path, n: int) -> dict[str, float]:
    """Median seconds per phase of a one-shot run, each in a fresh process."""
    runs: list[dict[str, float]] = []
    for _ in range(n):
        t0 = time.time()
        out = subprocess.run([sys.executable, "-c", PHASES, str(policy_file), repr(t0)], capture_output=True, text=True, cwd=REPO)
        t_exit = time.time()
        line = next((x for x in out.stderr.splitlines() if x.startswith("PHASES ")), None)
        if out.returncode != 0 or line is None:
            raise SystemExit(f"phase run failed: {out.stderr[-800:]}")
        marks = json.loads(line[len("PHASES "):])
        marks.pop("_timings", None)
        marks["interpreter exit"] = t_exit - marks.pop("_t_end")
        marks["total (wall)"] = t_exit - t0
        runs.append(marks)
    return {k: statistics.median(m.get(k, 0.0) for m in runs) for k in runs[0]}


RUN_PHASES = ("world", "network", "start", "probes", "evidence", "replay")
# the cost columns, in order: CPU seconds by whose work it is (bench/cpu.py), then the run's wall seconds
COST_KEYS = ("sandbox", "grader", "simnet", "engine")


def _cost_row(wall: float, timings: dict[str, float], cpu_s: dict[str, float]) -> dict[str, float]:
    return {"wall": wall, **{p: timings.get(p, 0.0) for p in RUN_PHASES}, **cpu_s}


def _terminal_cost(policy_file: Path, watcher: "cpu.Watcher") -> dict[str, float]:
    """One one-shot run (a fresh process, as `sandbox-lab probe`): its wall, its run's phases, its CPU by whose work."""
    mark, e0 = watcher.mark(), cpu.engine_cpu()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", PHASES, str(policy_file), repr(t0)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)
    _, err = proc.communicate()
    wall = time.perf_counter() - start
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    line = next((x for x in err.splitlines() if x.startswith("PHASES ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"phase run failed: {err[-800:]}")
    time.sleep(0.5)  # the hub's keeper removes what the run handed it: count that in the engine's and the internet's CPU
    sandbox, _ = watcher.sandbox_cpu(mark, [proc.pid], expect=99, wait_s=0.5)
    grader = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    return _cost_row(wall, json.loads(line[len("PHASES "):])["_timings"],
                     # the hub's proxies serve one run each and go with their CPU: not measurable from outside (nan)
                     {"sandbox": sandbox, "grader": grader, "simnet": float("nan"), "engine": cpu.engine_cpu() - e0})


def _inprocess_cost(backend: DockerBackend, plan: RunPlan, watcher: "cpu.Watcher") -> dict[str, float]:
    """One run in this long-lived process (its own internet and warm proxy pool), removal included in the CPU."""
    backend.drain()
    me = os.getpid()
    mark, e0, s0 = watcher.mark(), cpu.engine_cpu(), cpu.services_cpu(backend.engine, pid=me)
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    result = backend.run(plan)
    wall = time.perf_counter() - start
    backend.drain()
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    sandbox, _ = watcher.sandbox_cpu(mark, [me], expect=99, wait_s=0.5)
    grader = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    # on the hub (a kernel's backend) the proxies and the internet are the keeper's, shared with other runs: not counted
    simnet = float("nan") if isinstance(backend.sharing, HubSharing) else cpu.services_cpu(backend.engine, pid=me) - s0
    return _cost_row(wall, result.timings, {"sandbox": sandbox, "grader": grader, "simnet": simnet,
                                            "engine": cpu.engine_cpu() - e0})


def _costs(backend: DockerBackend, files: dict[str, Path], n: int) -> dict[tuple[str, str], dict[str, float]]:
    """Per kind and place, the median of each phase and each CPU figure over ``n`` runs, terminal and in-process
    alternating (so the machine's load falls on both alike). Prints the table and returns it."""
    watcher = cpu.Watcher().start()
    rows: dict[tuple[str, str], list[dict[str, float]]] = {}
    try:
        for name in POLICIES:
            plan = build_plan(load_policy(POLICIES[name]))
            for _ in range(n):
                rows.setdefault((name, "terminal"), []).append(_terminal_cost(files[name], watcher))
                rows.setdefault((name, "in-process"), []).append(_inprocess_cost(backend, plan, watcher))
    finally:
        watcher.close()
    table = {k: {c: statistics.median(r[c] for r in v) for c in v[0]} for k, v in rows.items()}
    print(f"where the time and the CPU of a run go (median of {n} each, terminal and in-process alternating; "
          f"CPU in core-seconds: sandbox = its container's cgroup, grader = the grader process, simnet = proxy and "
          f"internet containers, engine = dockerd + containerd, shared with others: an upper bound):")
    print(f"  {'kind':8} {'where':10} {'wall':>6} " + " ".join(f"{p:>8}" for p in RUN_PHASES)
          + " | " + " ".join(f"{c:>7}" for c in COST_KEYS) + f" {'core-s':>7} {'sandbox%':>8}  dominant phase")
    for (name, where), m in table.items():
        core = sum(m[c] for c in COST_KEYS if m[c] == m[c])  # nan: not measured
        top = max(RUN_PHASES, key=lambda p: m[p])
        print(f"  {name:8} {where:10} {m['wall']:6.2f} " + " ".join(f"{m[p]:8.3f}" for p in RUN_PHASES)
              + " | " + " ".join(f"{m[c]:7.3f}" if m[c] == m[c] else f"{'n/a':>7}" for c in COST_KEYS)
              + f" {core:7.3f} {m['sandbox'] / core if core else 0:8.0%}  {top} ({m[top] / m['wall']:.0%} of the wall)")
    print(f"  (load average {os.getloadavg()[0]:.1f} at the end; n/a: the proxies and the internet are the machine hub's, "
          "shared with other runs (one run's share is not measured); a terminal run's wall and grader CPU include its "
          "interpreter, imports and exit; the phases are the run's own, inside backend.run)")
    return table


def _lesson_run_all(write_route: bool) -> None:
    """Time lesson 02's Run All (nbclient, fresh kernel, Docker) as lesson_times does; optionally write it to the route."""
    import platform
    from datetime import datetime, timezone

    import lesson_times  # bench/lesson_times.py, beside this file

    from grader.course.route import ROUTE_FILE, minutes_for

    load_before = os.getloadavg()[0]
    seconds = round(lesson_times.run_all(REPO / "lessons" / LESSON / "naive-vs-secure.ipynb", "docker"), 1)
    load_after = os.getloadavg()[0]
    met = "met" if seconds <= LESSON_TARGET_SECONDS else "NOT met"
    print(f"lesson {LESSON} Run All (nbclient, fresh kernel, docker backend): {seconds:.1f} s "
          f"(load average {load_before:.1f} before, {load_after:.1f} after); target <= {LESSON_TARGET_SECONDS:.0f} s "
          f"on a quiet machine: {met}")
    if not write_route:
        return
    data = json.loads(ROUTE_FILE.read_text(encoding="utf-8"))
    stop = next(s for s in data["stops"] if s["folder"] == LESSON)
    stop.update(run_seconds=seconds, minutes=minutes_for(seconds, stop["words"], stop["questions"], stop["hands_on"]),
                measured_by=f"`bench/probe_speed.py --write-route` (nbclient, fresh kernel, docker backend, "
                f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, load average {load_before:.1f} "
                f"before and {load_after:.1f} after, {datetime.now(timezone.utc):%Y-%m-%d})")
    ROUTE_FILE.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    lesson_times.main(["--render"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--scan-share", action="store_true", help="also time each policy without the scope scan")
    ap.add_argument("--no-lesson", action="store_true", help=f"leave out lesson {LESSON}'s Run All")
    ap.add_argument("--write-route", action="store_true",
                    help=f"write lesson {LESSON}'s Run All into grader/route.json and render the route tables")
    ap.add_argument("--editor-only", action="store_true",
                    help="only the editor's pre-started Probe (issue 40) and its cold run, after the bare run")
    ap.add_argument("--costs-only", action="store_true",
                    help="only the table of phases and CPU per kind of run (terminal and in-process), after the bare run")
    args = ap.parse_args()
    n = args.repeat
    backend = DockerBackend.from_env(shared_idle=idle_seconds())  # as a kernel's ``backends.default()``: on the hub
    image = backend.images.sandbox
    tmp = Path(tempfile.mkdtemp(prefix="probe-speed-"))
    atexit.register(shutil.rmtree, tmp, True)  # the policy files go with the bench, whatever way it ends
    files = {}
    for name, raw in POLICIES.items():
        files[name] = tmp / f"{name}.json"
        files[name].write_text(json.dumps(raw))
    _cli(files["secure"])  # the first one-shot run may start the shared internet: not what is measured
    _pool_full(backend)
    bare = _median(lambda: subprocess.run(["docker", "run", "--rm", "--network", "none", image, "python3", "-c", "pass"], check=True), n)
    print(f"bare docker run of {image}: median {bare:.2f} s over {n} (cores: {os.cpu_count()}, "
          f"SANDBOX_LAB_SHARED_IDLE={os.environ.get('SANDBOX_LAB_SHARED_IDLE', 'unset')})")
    if args.costs_only:
        _costs(backend, files, n)
        backend.close()
        return 0
    if args.editor_only:
        _editor_rows(backend, bare, n)
        backend.close()
        return 0
    _engine("start")
    atexit.register(_engine, "stop")
    _cli(files["secure"], engine="on")  # the engine's first command: what it has not warmed yet is not measured
    print(f"{'policy':9} {'network':7} {'terminal (1 process/run)':>26} {'warm engine, new file':>24} "
          f"{'warm engine, new file saved beside':>36} {'warm engine, rerun':>24} "
          f"{f'rerun after {QUIET_S + 1.0:.0f} s':>24} {'in-process':>18}")
    verdicts = []
    ratios: dict[tuple[str, str], float] = {}
    for name, raw in POLICIES.items():
        plan = build_plan(load_policy(raw))
        backend.drain()
        cli = _median(lambda: _cli(files[name]), n)
        warm = _fresh_runs(files[name], n)  # a file it never saw: cold in the engine
        rerun = _reruns(files[name], n, 1.0)  # the learner reading the last report for a second first
        # and for longer than the engine's QUIET_S: the held rerun was made whole meanwhile
        reread = _reruns(files[name], n, QUIET_S + 1.0)
        beside = _beside_runs(files[name], n)  # the engine watches files[name]'s directory: it has just probed it
        backend.drain()
        inproc = _median(lambda: backend.run(plan), n)
        print(f"{name:9} {plan.network:7} {cli:8.2f} s = {cli / bare:4.1f}x bare {warm:8.2f} s = {warm / bare:4.1f}x bare "
              f"{beside:22.2f} s = {beside / bare:4.1f}x bare {rerun:8.2f} s = {rerun / bare:4.1f}x bare "
              f"{reread:8.2f} s = {reread / bare:4.1f}x bare {inproc:8.2f} s = {inproc / bare:4.1f}x")
        ratios[name, "terminal"], ratios[name, "in the kernel"] = cli / bare, inproc / bare
        ratios[name, "warm engine"], ratios[name, "warm engine, rerun"] = warm / bare, rerun / bare
        ratios[name, "warm engine, new file saved beside"] = beside / bare
        ratios[name, "warm engine, rerun after a read"] = reread / bare
        if plan.network == "proxy":
            verdicts.append(cli <= TARGET_SECONDS and cli / bare <= TARGET_RATIO)
        if args.scan_share:
            def alone(p: RunPlan) -> None:
                backend.drain()
                backend.run(p)

            with_scan, no_scan = _medians([lambda: alone(plan), lambda: alone(dataclasses.replace(plan, scan=False))], n)
            print(f"{'':9} one run alone: {with_scan:.2f} s, without the scope scan {no_scan:.2f} s: "
                  f"scan's share {max(0.0, with_scan - no_scan) / with_scan:.0%}")
    met = all(verdicts)
    print(f"target for a proxy run from a terminal: <= {TARGET_SECONDS} s and <= {TARGET_RATIO:.0f}x bare: {'met' if met else 'NOT met'}")
    phases = _phases(files["secure"], n)
    print(f"where a one-shot proxy run's time goes (secure, median of {n} fresh processes):")
    for k, v in phases.items():
        print(f"  {k:28} {v:6.3f} s")
    load = os.getloadavg()[0]
    print(f"speed targets, as ratios to the bare run above (load average {load:.1f} now):")
    for name, where, most in RATIO_TARGETS:
        got = ratios[name, where]
        print(f"  {name:9} {where:14} <= {most:.1f}x bare: {got:4.1f}x  {'met' if got <= most else 'NOT met'}")
    for name, most in ENGINE_TARGETS.items():
        for where in ("warm engine", "warm engine, new file saved beside", "warm engine, rerun",
                      "warm engine, rerun after a read"):
            got = ratios[name, where]
            print(f"  {name:9} {'terminal, ' + where:46} <= {most:.1f}x bare: {got:4.1f}x  {'met' if got <= most else 'NOT met'}")
    imports = phases["imports"]
    print(f"  a one-shot command's imports <= {IMPORTS_TARGET_SECONDS} s: {imports:.3f} s  "
          f"{'met' if imports <= IMPORTS_TARGET_SECONDS else 'NOT met'}")
    _editor_rows(backend, bare, n)
    table = _costs(backend, files, n)
    secure = table["secure", "in-process"]
    around = secure["wall"] - secure["probes"]
    print(f"the grader's own time around a secure run's sandbox (in-process wall {secure['wall']:.2f} s less its probes "
          f"phase {secure['probes']:.2f} s) <= {AROUND_TARGET_SECONDS} s: {around:.2f} s  "
          f"{'met' if around <= AROUND_TARGET_SECONDS else 'NOT met'}")
    backend.close()
    if not args.no_lesson:
        _lesson_run_all(args.write_route)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
