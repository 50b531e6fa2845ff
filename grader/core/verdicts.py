"""A real run's result: every probe judged from evidence, then explained against the static prediction.

Each probe's judge lives in its record (``probes/``); this module runs them,
turns an unfinished probe into ``error`` (never ``blocked``), measures the
scope from the scope scan's evidence (``measure_scope``), and builds the
``RunResult`` every real backend returns, with its findings (``findings.find``,
from the plan's own access and world). One function for every backend, so
they cannot differ in how they read the same facts.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from grader.core.access import Access
from grader.core.analyzer import analyze
from grader.core.findings import find
from grader.core.evidence import Evidence, Markers, RunnerRecord, Verdict, finished, sha256
from grader.core.outcomes import ProbeOutcome, Reach, RunResult, Scope
from grader.core.plan import RunPlan
from grader.core.probes import PROBES
from grader.core.scope import SCAN_IDS, asked_for, new_file, scan_name, scan_url, scanned_dirs, scanned_files, uploads
from grader.core.world import World
from grader.protocol.wire import READ_LIMIT, Route

__all__ = ["judge", "measure_scope", "run_result"]


def judge(ev: Evidence, world: World, probe_ids: Iterable[str]) -> tuple[ProbeOutcome, ...]:
    """Every requested probe's verdict, from evidence alone."""
    wanted = set(probe_ids)
    out = []
    for p in PROBES:
        if p.id not in wanted:
            continue
        if ev.corrupt:
            # evidence read in part proves nothing either way: no verdict, whatever the judge would say
            out.append(ProbeOutcome(p.id, p.kind, "error", f"Cannot tell: {ev.corrupt}. Rerun; if it persists, report it.", ()))
            continue
        verdict = p.judge(p, ev, world)
        if ev.incomplete and verdict.outcome != "succeeded":
            # a success's trace cannot be faked; anything else read from a log that lost records proves nothing
            verdict = Verdict("error", f"Cannot tell: {ev.incomplete}. Rerun.", ())
        if not finished(ev, p.id) and verdict.outcome != "succeeded":
            # an unfinished probe proves nothing blocked; a success still counts: its trace cannot be faked
            late = " before the sandbox's time ran out." if ev.timed_out else "."
            verdict = Verdict("error", "The probe did not finish" + late + " Rerun; if it persists, report it.", ())
        out.append(ProbeOutcome(p.id, p.kind, verdict.outcome, verdict.why, verdict.proof))
    return tuple(out)


# --- the measured scope ----------------------------------------------------------------------


def _reached(ev: Evidence, markers: Markers, name: str) -> bool:
    """Did a scan attempt addressed to ``name`` get out of the sandbox? Only records made outside it count."""
    path = markers.scan_path
    if any(r.host == name and path in r.path and r.misdirected is None for r in ev.http):
        return True  # the sink answered for it: through the proxy or directly
    if any(r.decision == "allow" and r.host == name and path in (r.path or "") for r in ev.proxy):
        return True  # the run's own proxy let it through, whatever answers upstream
    asked = {q.qname.lower().rstrip(".") for q in ev.dns}
    # a per-run name reached a name server: the sandbox's own query, or its proxy's lookup for it
    return markers.scan_dns(name) in asked or (markers.scan_label in name and name in asked)


def _missing(records: list[RunnerRecord], step: str, wanted: list[str]) -> list[str]:
    tried = {r.target for r in records if r.step == step}
    return [w for w in wanted if w not in tried]


def _unaccounted(records: list[RunnerRecord]) -> str:
    """"" when an entry's records are all here, as many as its ``done`` record says came before it; else what is not.

    The runner counts what it printed for the entry; a line lost between it and here (a log cut at a line's end,
    an engine's output frames dropped over TCP) would otherwise read as an attempt that found nothing.
    """
    done = [r for r in records if r.step == "done"]
    said = done[-1].data if done else None
    if len(done) != 1 or said is None or not said.isdigit():
        return f"its closing record does not say how many records came before it ({said!r})"
    got = len(records) - 1
    if got != int(said):
        return f"{got} of the {said} records it printed arrived"
    return ""


def _proves_unreadable(r: RunnerRecord, path: str, ev: Evidence) -> bool:
    """Does the scan's read ``r`` of ``path``, which brought no canary out, prove the file unreadable?

    A refused open or read does; so does an empty read of a file the run left untouched (a hidden file is an
    empty one mounted over it); and so does a read of other bytes than the file's, while the file stayed
    untouched: the file always held its canary, so a read of it would have brought the canary out, or shown its
    first bytes if cut short. That is what srt shows behind a denyRead: its tmpfs over a hidden directory is
    writable by the sandboxed user, the scan's own append creates a private file there, and a later read sees
    that file, never the real one. Anything else is a file read while it was being rewritten (a probe's
    backdoor, the scan's own append): what the read saw then proves nothing about the file.
    """
    if not r.ok:
        return True
    after = ev.after.get(path)
    if after is None or sha256(after) != ev.before[path]:
        return False
    # what a read of the world copy's file would have recorded: its first READ_LIMIT bytes, decoded as the runner
    # does. A read that saw part of them (a file being rewritten to the same bytes) proves nothing: only bytes that
    # are no prefix of the file's (a cut multibyte character aside) prove the read saw another file.
    real = after[:READ_LIMIT].decode("utf-8", "replace")
    return not r.data or not real.startswith(r.data.rstrip("\ufffd"))


def measure_scope(ev: Evidence, access: Access) -> tuple[Optional[Scope], str]:
    """The scope a real run measured with its scan, or None and why it cannot be told.

    ``readable``: the file's per-run canary came out of the sandbox.
    ``writable``: the world copy's file changed (sha256 before and after) or
    carries the scan's text, or the scan's new file exists in the directory.
    ``reachable``: a recorder outside the sandbox saw the scan's marker for the
    host, or for the allowed name of its kind the scan asked instead
    (``scope.stand_ins``). Missing evidence never shrinks a set: an unfinished
    scan, one whose records did not all arrive (each entry's ``done`` counts them), a read that
    neither brought its canary out nor was refused, or a dead recorder gives no
    scope at all, since a wrong "not writable" misleads as much as a wrong
    "blocked".
    """
    world = access.world
    markers = Markers(ev.token, world.attacker.name)
    if ev.corrupt or ev.incomplete:
        return None, ev.corrupt or ev.incomplete
    unfinished = [s for s in SCAN_IDS if not any(r.probe == s and r.step == "done" for r in ev.records)]
    if unfinished:
        late = " before the sandbox's time ran out" if ev.timed_out else ""
        return None, f"the scope scan did not finish{late} ({', '.join(unfinished)})"
    files, dirs, stand_in = scanned_files(world), scanned_dirs(world), asked_for(access)
    hosts = list(dict.fromkeys(stand_in.values()))  # what the scan asked
    by = {s: [r for r in ev.records if r.probe == s] for s in SCAN_IDS}
    lost = [f"{s}: {why}" for s in SCAN_IDS for why in [_unaccounted(by[s])] if why]
    if lost:
        return None, f"the scope scan's output is not whole ({'; '.join(lost)})"
    gaps = _missing(by["scan-read"], "read", list(files)) + _missing(by["scan-write"], "write", [*files, *map(new_file, dirs)])
    urls = [scan_url(access, scan_name(markers.scan_label, h), markers.scan_path) for h in hosts]
    gaps += _missing(by["scan-net"], "http", urls) + _missing(by["scan-net"], "dns", [markers.scan_dns(scan_name(markers.scan_label, h)) for h in hosts])
    gaps += [f"{p} (no canary, no hash before the run)" for p in files if p not in ev.canaries or p not in ev.before]
    if gaps:
        return None, f"the scope scan left no record for {len(gaps)} attempt(s), e.g. {gaps[0]}"
    if ev.infra_problem and ev.network != "none":
        return None, f"the hosts cannot be told: {ev.infra_problem}"

    readable = [p for p in files if any(r.data and ev.canaries[p] in r.data for r in ev.records)]
    reads = {r.target: r for r in by["scan-read"] if r.step == "read"}
    unsure = [f"{p} ({reads[p].detail})" for p in files if p not in readable and not _proves_unreadable(reads[p], p, ev)]
    if unsure:
        return None, (f"the scope scan read {len(unsure)} file(s) without bringing the canary out, yet was not refused "
                      f"(a file read while it was being rewritten), e.g. {unsure[0]}")
    text = markers.scan_text.encode()

    def changed(p: str) -> bool:
        after = ev.after.get(p)
        return after is None or text in after or sha256(after) != ev.before[p]  # gone counts as changed

    writable = {p for p in files if changed(p)} | {d for d in dirs if new_file(d) in ev.after}
    reached = {h for h in hosts if _reached(ev, markers, scan_name(markers.scan_label, h))}
    # a request that timed out may have been on its way when the run ended: its silence proves nothing
    got_out = {scan_url(access, scan_name(markers.scan_label, h), markers.scan_path) for h in reached}
    # each way to each host (the record's route, never its words): its last attempt decides
    last: dict[tuple[Optional[str], Optional[Route]], RunnerRecord] = {}
    for r in by["scan-net"]:
        if r.step == "http":
            last[(r.target, r.route)] = r
    slow = [r.detail for r in last.values() if not r.ok and "timed out" in r.detail.lower() and r.target not in got_out]
    if slow:
        return None, f"{len(slow)} of the scan's requests timed out before any answer, e.g. {slow[0]}"
    reachable = [Reach(h, uploads(world, h)) for h, asked in stand_in.items() if asked in reached]
    return Scope(tuple(sorted(readable)), tuple(sorted(writable)), tuple(sorted(reachable, key=lambda r: r.host))), ""


def _explain(outcomes: tuple[ProbeOutcome, ...], access: Access, disagreement: str) -> tuple[ProbeOutcome, ...]:
    """Say why in the policy's terms when a run agrees with the prediction; flag it when not."""
    predicted = {p.id: p for p in analyze(access)}
    out = []
    for o in outcomes:
        pred = predicted[o.id]
        if o.outcome == pred.outcome:
            out.append(ProbeOutcome(o.id, o.kind, o.outcome, pred.explanation, o.evidence))
        else:
            note = f"{o.explanation} ({disagreement} {pred.outcome}: {pred.explanation})"
            out.append(ProbeOutcome(o.id, o.kind, o.outcome, note, o.evidence))
    return tuple(out)


def run_result(
    ev: Evidence, plan: RunPlan, *, backend: str, run_id: str, seconds: float, stopped: str,
    disagreement: str, extra: Optional[dict[str, Any]] = None,
) -> RunResult:
    """A real run's result: every probe judged from ``ev`` and explained against the static prediction.

    ``stopped`` names what the wall clock ended ("the sandbox was killed");
    ``disagreement`` introduces the prediction when the run differs from it.
    """
    notes = [f"infrastructure error, evidence incomplete: {ev.infra_problem}"] if ev.infra_problem else []
    if ev.timed_out:
        notes.append(f"{stopped} after {plan.hardening.timeout_s:.0f} s")
    access = plan.access
    scope, unmeasured = measure_scope(ev, access) if plan.scan else (None, "")
    if unmeasured:
        notes.append(f"scope not measured: {unmeasured}")
    return RunResult(
        backend=backend,
        sandbox=plan.sandbox,
        policy=plan.policy,
        probes=_explain(judge(ev, plan.world, plan.probes), access, disagreement),
        notes=tuple(notes),
        seconds=seconds,
        run_id=run_id,
        extra=extra or {},
        scope=scope,
        findings=find(access),
    )
