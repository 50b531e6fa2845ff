"""Cross-check: every corpus policy through the Docker backend and the real sandbox-runtime, probe by probe.

Runs tests/fixtures/corpus.json through ``docker`` and ``srt`` (the plain
container is Docker's own baseline and has no srt counterpart), prints a
policy x probe grid ("." same verdict, "D" documented difference, "!" a
difference nobody has explained yet, "-" not run), then every difference with
both verdicts and its documented cause from docs/srt-differences.json; then
the same for the measured scope, item by item (a path readable or writable on
one side only, a host reachable on one side only).
Exits 1 if any difference is undocumented, or a documented one did not occur.

    python bench/srt_crosscheck.py [--jobs 4] [--json results.json] [--only NAME ...]
    python bench/srt_crosscheck.py --static   # compare srt with the static prediction (no Docker)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader import load_policy, predict  # noqa: E402
from grader.core.outcomes import RunResult  # noqa: E402
from grader.core.plan import build_plan  # noqa: E402
from grader.core.probes import PROBES  # noqa: E402

CORPUS = ROOT / "tests" / "fixtures" / "corpus.json"
DOCUMENTED = ROOT / "docs" / "srt-differences.json"


def load_corpus() -> dict[str, Optional[dict[str, Any]]]:
    policies: dict[str, Optional[dict[str, Any]]] = json.loads(CORPUS.read_text())["policies"]
    return policies


def load_documented() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DOCUMENTED.read_text())
    return data


def differences(reference: dict[str, RunResult], srt: dict[str, RunResult]) -> list[dict[str, str]]:
    """Every (policy, probe) where srt's verdict is not the reference's, in corpus and probe order."""
    out = []
    for name, r in srt.items():
        ref = reference[name]
        for o in r.probes:
            theirs = ref.outcome(o.id).outcome
            if o.outcome != theirs:
                out.append({"policy": name, "probe": o.id, "docker": theirs, "srt": o.outcome,
                            "srt_evidence": "; ".join(o.evidence[:2])})
    return out


def scope_differences(reference: dict[str, RunResult], srt: dict[str, RunResult]) -> list[dict[str, Any]]:
    """Every (policy, set, item) in one side's measured scope only: a path or host granted on one side."""
    out: list[dict[str, Any]] = []
    for name, r in srt.items():
        ref = reference[name]
        if r.scope is None or ref.scope is None:
            continue  # a run without a scope says so in its notes
        for key in ("readable", "writable", "reachable"):
            def items(scope: Any) -> set[str]:
                return {x.host if hasattr(x, "host") else x for x in getattr(scope, key)}
            theirs, ours = items(ref.scope), items(r.scope)
            for item in sorted(theirs ^ ours):
                out.append({"policy": name, "set": key, "item": item, "docker": item in theirs, "srt": item in ours})
    return out


def compare_scope(observed: list[dict[str, Any]], documented: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(scope differences nobody documented, documented scope differences that did not occur)."""
    key = lambda d: (d["policy"], d["set"], d["item"], d["docker"], d["srt"])  # noqa: E731
    rows = [{**d, "item": item} for d in documented.get("scope_differences", []) for item in d["items"]]
    doc = {key(d): d for d in rows}
    seen = {key(d) for d in observed}
    return [d for d in observed if key(d) not in doc], [d for k, d in doc.items() if k not in seen]


def compare(observed: list[dict[str, str]], documented: dict[str, Any]) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(observed differences nobody documented, documented differences that did not occur)."""
    key = lambda d: (d["policy"], d["probe"], d["docker"], d["srt"])  # noqa: E731
    doc = {key(d): d for d in documented["differences"]}
    seen = {key(d) for d in observed}
    undocumented = [d for d in observed if key(d) not in doc]
    missing = [d for k, d in doc.items() if k not in seen]
    return undocumented, missing


def run_all(names: list[str], corpus: dict[str, Optional[dict[str, Any]]], backend: Any, jobs: int,
            progress: Callable[[str], None]) -> dict[str, RunResult]:
    def one(name: str) -> tuple[str, RunResult]:
        raw = corpus[name]
        r = backend.run(build_plan(load_policy(raw) if raw is not None else None))
        progress(f"{backend.name:6} {name} ({r.seconds:.1f} s)")
        return name, r

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return dict(pool.map(one, names))


def grid(names: list[str], reference: dict[str, RunResult], srt: dict[str, RunResult], documented: dict[str, Any]) -> str:
    probes = [p.id for p in PROBES]
    doc = {(d["policy"], d["probe"]) for d in documented["differences"]}
    width = max(len(n) for n in names)
    lines = [" " * width + "  " + " ".join(f"{i:>2}" for i in range(1, len(probes) + 1))]
    for n in names:
        cells = []
        for pid in probes:
            if n not in srt:
                cells.append(" -")
            elif srt[n].outcome(pid).outcome == reference[n].outcome(pid).outcome:
                cells.append(" .")
            else:
                cells.append(" D" if (n, pid) in doc else " !")
        lines.append(f"{n:<{width}}  " + " ".join(cells))
    lines.append("")
    lines += [f"  {i:>2} {pid}" for i, pid in enumerate(probes, 1)]
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=4, help="runs at once per backend (default 4)")
    ap.add_argument("--json", type=Path, help="also write every verdict and difference here")
    ap.add_argument("--only", nargs="*", help="only these corpus policies")
    ap.add_argument("--static", action="store_true", help="compare srt with the static prediction instead of a Docker run")
    args = ap.parse_args(argv)

    from grader.backends.srt import SrtBackend

    corpus = load_corpus()
    names = args.only or list(corpus)
    documented = load_documented()
    not_run = {d["policy"] for d in documented.get("not_run", [])}  # srt would dial the machine itself
    # the plain container is Docker's baseline only
    srt_names = [n for n in names if corpus[n] is not None and n not in not_run]
    say = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    started = time.monotonic()
    srt = run_all(srt_names, corpus, SrtBackend.from_env(), args.jobs, say)
    if args.static:
        reference = {n: predict(load_policy(corpus[n]) if corpus[n] is not None else None) for n in names}
        ref_name = "static"
    else:
        from grader.backends.docker.backend import DockerBackend

        reference = run_all(names, corpus, DockerBackend.from_env(), args.jobs, say)
        ref_name = "docker"
    for n, r in {**reference, **srt}.items():
        if r.notes:
            say(f"warning: {n}: {'; '.join(r.notes)}")

    observed = differences(reference, srt)
    undocumented, missing = compare(observed, documented)
    causes = documented["causes"]
    doc_cause = {(d["policy"], d["probe"]): d["cause"] for d in documented["differences"]}
    print(f"srt {documented.get('srt_version', '?')} vs {ref_name}: {len(srt_names)} policies x {len(PROBES)} probes, "
          f"{len(observed)} differences ({len(undocumented)} undocumented), {time.monotonic() - started:.0f} s")
    print()
    print(grid(names, reference, srt, documented))
    print()
    print(f"{'policy':<42} {'probe':<26} {ref_name:>9} {'srt':>9}  cause")
    for d in observed:
        cause = doc_cause.get((d["policy"], d["probe"]))
        text = f"{cause}: {causes[cause]['summary']}" if cause else f"UNDOCUMENTED ({d['srt_evidence'][:160]})"
        print(f"{d['policy']:<42} {d['probe']:<26} {d['docker']:>9} {d['srt']:>9}  {text}")
    for d in missing:
        print(f"documented but not observed: {d['policy']} {d['probe']} ({d['docker']} -> {d['srt']}, {d['cause']})")
    scoped = scope_differences(reference, srt)
    s_undoc, s_missing = compare_scope(scoped, documented)
    s_cause = {(d["policy"], d["set"], item): d["cause"] for d in documented.get("scope_differences", []) for item in d["items"]}
    print()
    print(f"scope: {len(scoped)} differences ({len(s_undoc)} undocumented)")
    yes = lambda b: "yes" if b else "no"  # noqa: E731
    for d in scoped:
        cause = s_cause.get((d["policy"], d["set"], d["item"]))
        print(f"{d['policy']:<42} {d['set']:<9} {d['item']:<34} {ref_name} {yes(d['docker']):>3} srt {yes(d['srt']):>3}  "
              f"{cause or 'UNDOCUMENTED'}")
    for d in s_missing:
        print(f"documented but not observed: {d['policy']} {d['set']} {d['item']} ({d['cause']})")
    if args.json:
        args.json.write_text(json.dumps({
            "reference": ref_name,
            "verdicts": {n: {"srt": {o.id: o.outcome for o in srt[n].probes} if n in srt else None,
                             ref_name: {o.id: o.outcome for o in reference[n].probes}} for n in names},
            "differences": observed,
            "scope_differences": scoped,
        }, indent=1))
    return 1 if undocumented or missing or s_undoc or s_missing else 0


if __name__ == "__main__":
    sys.exit(main())
