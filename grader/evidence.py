"""Verdicts from evidence: what a real run left behind → the outcome of every probe.

Pure: a backend collects the evidence (the runner's output, the world copy
before and after, the sink's, DNS server's, proxy's and host listener's logs)
and this module judges it. The same judgement serves every real backend, so
they cannot differ in how they read the same facts.

The rules that keep a verdict honest:

* ``succeeded`` needs an unforgeable trace: a per-run canary or marker where
  only a successful attack could put it.
* ``blocked`` needs the attempt to be on record AND the recorders to have been
  alive; otherwise the verdict is ``error``, never a guess.
* The probe's own claims ("I read it", "I sent it") decide nothing.
"""

from __future__ import annotations

import binascii
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from pydantic import BaseModel, ConfigDict, ValidationError

from .access import Network
from .domains import matches
from .analyzer import predict
from .outcomes import ProbeOutcome, RunResult
from .plan import RunPlan
from .probes import PROBES, Probe
from .world import World

__all__ = ["Evidence", "RunnerRecord", "judge", "parse_jsonl", "parse_runner_output", "run_result", "write_marker"]

MAX_LOG_LINES = 20_000  # a flood from inside the sandbox is cut here, not in the grader's memory


class RunnerRecord(BaseModel):
    """One line the probe runner printed. Untrusted: parsed as JSON by a model, never unpickled."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    probe: str
    step: str
    ok: bool
    detail: str = ""
    target: Optional[str] = None
    data: Optional[str] = None


def parse_runner_output(text: str) -> tuple[RunnerRecord, ...]:
    out = []
    for line in text.splitlines()[:MAX_LOG_LINES]:
        try:
            out.append(RunnerRecord.model_validate_json(line))
        except ValidationError:
            continue  # a line that is not a record is noise, and proves nothing either way
    return tuple(out)


def parse_jsonl(text: str) -> tuple[dict[str, Any], ...]:
    out = []
    for line in text.splitlines()[:MAX_LOG_LINES]:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return tuple(out)


def write_marker(token: str, probe_id: str) -> str:
    """What a write probe writes: only a write that reached the world copy leaves it there."""
    return f"sandbox-lab-write {token} {probe_id}"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Evidence:
    """Everything a real run left behind, collected outside the sandbox."""

    token: str
    canaries: dict[str, str]  # world path → its per-run canary
    records: tuple[RunnerRecord, ...]
    before: dict[str, str]  # world path → sha256 before the run
    after: dict[str, bytes]  # world path → content after the run
    network: Network
    http: tuple[dict[str, Any], ...] = ()
    dns: tuple[dict[str, Any], ...] = ()
    tcp: tuple[dict[str, Any], ...] = ()
    proxy: tuple[dict[str, Any], ...] = ()
    host_hits: tuple[str, ...] = ()  # what the real host's listener received
    tcp_port: int = 4444
    host_port: int = 0
    infra_problem: str = ""  # non-empty: a recorder died, its silence proves nothing
    timed_out: bool = False
    notes: tuple[str, ...] = field(default=())


def _attempts(ev: Evidence, pid: str) -> list[RunnerRecord]:
    return [r for r in ev.records if r.probe == pid and r.step not in ("done",)]


def _finished(ev: Evidence, pid: str) -> bool:
    return any(r.probe == pid and r.step == "done" for r in ev.records)


def _failures(ev: Evidence, pid: str, limit: int = 2) -> str:
    fails = [r.detail for r in _attempts(ev, pid) if not r.ok][:limit]
    return "; ".join(fails)


def _in_zone(host: str, zone: str) -> bool:
    return host == zone or matches(f"*.{zone}", host)


def _attacker_reads(world: World, host: str) -> bool:
    """Can the attacker read what was sent to ``host``? Their own server, or any host that stores uploads."""
    if _in_zone(host, world.attacker.name):
        return True
    return any(h.name == host and h.uploads for h in world.hosts)


def _dns_payloads(ev: Evidence, zone: str) -> dict[str, bytes]:
    """Reassemble data spelled into query names ``<hex>.<seq>.<label>.<token>.<zone>``."""
    parts: dict[str, dict[int, str]] = {}
    suffix = f".{ev.token}.{zone}"
    for q in ev.dns:
        name = str(q.get("qname", "")).lower().rstrip(".")
        if not name.endswith(suffix):
            continue
        labels = name[: -len(suffix)].split(".")
        if len(labels) == 3 and labels[1].isdigit():
            parts.setdefault(labels[2], {})[int(labels[1])] = labels[0]
    out = {}
    for label, chunks in parts.items():
        hexdata = "".join(chunks[i] for i in sorted(chunks))
        try:
            out[label] = binascii.unhexlify(hexdata[: len(hexdata) // 2 * 2])
        except binascii.Error:
            continue
    return out


def _canary_sightings(ev: Evidence, world: World, paths: Iterable[str]) -> list[str]:
    """Where a canary of these files arrived somewhere the attacker can read it."""
    found = []
    wanted = {p: ev.canaries[p] for p in paths if p in ev.canaries}
    for p, c in wanted.items():
        for r in ev.tcp:
            if r.get("port") == ev.tcp_port and c in str(r.get("data", "")):
                found.append(f"canary of {p} received by the attacker's server over raw TCP (port {ev.tcp_port})")
                break
        for label, payload in _dns_payloads(ev, world.attacker.name).items():
            if c.encode() in payload:
                found.append(f"canary of {p} spelled into DNS queries answered by the attacker's nameserver ({label})")
                break
        for r in ev.http:
            host = str(r.get("host", ""))
            if c in str(r.get("body", "")) and _attacker_reads(world, host):
                found.append(f"canary of {p} received by {host}: {r.get('method')} {r.get('path')}")
                break
    return found


def _judge_read(p: Probe, ev: Evidence, world: World) -> tuple[str, str, tuple[str, ...]]:
    assert p.target
    canary = ev.canaries[p.target]
    seen = [r for r in ev.records if r.data and canary in r.data]
    if seen:
        return "succeeded", f"The sandbox read {p.target}.", (f"the run's canary of {p.target} appeared in the sandbox's output ({seen[0].detail})",)
    tries = [r for r in _attempts(ev, p.id) if r.step == "read"]
    if not tries:
        return "error", "The read was never attempted (the probe did not run).", ()
    r = tries[0]
    if r.ok:
        return "blocked", f"{p.target} is hidden from the sandbox.", (f"read {p.target}: {r.detail}, without the run's canary (an empty stand-in file)",)
    return "blocked", f"{p.target} is unreadable in the sandbox.", (f"read {p.target} failed: {r.detail}; its canary appeared nowhere",)


def _judge_write(p: Probe, ev: Evidence) -> tuple[str, str, tuple[str, ...]]:
    assert p.target
    before = ev.before.get(p.target)
    after = ev.after.get(p.target)
    marker = write_marker(ev.token, p.id).encode()
    if after is not None and (marker in after or (before is not None and sha256(after) != before) or (before is None)):
        how = "now contains the probe's marker" if marker in after else "changed"
        return "succeeded", f"The sandbox changed {p.target}.", (f"{p.target} in the world copy {how} after the run",)
    tries = [r for r in _attempts(ev, p.id) if r.step == "write"]
    if not tries:
        return "error", "The write was never attempted (the probe did not run).", ()
    state = "unchanged (same sha256 before and after)" if before is not None else "still absent"
    detail = tries[0].detail if not tries[0].ok else f"{tries[0].detail}, into a private stand-in that is thrown away"
    return "blocked", f"{p.target} was not changed.", (f"{p.target} in the world copy is {state}; the write: {detail}",)


def _http_hits(ev: Evidence, pred: Any) -> list[dict[str, Any]]:
    return [r for r in ev.http if pred(r)]


def _net_blocked(p: Probe, ev: Evidence, what: str) -> tuple[str, str, tuple[str, ...]]:
    if not _attempts(ev, p.id):
        return "error", "The probe did not run.", ()
    if ev.network == "none":
        return "blocked", f"{what} went nowhere.", (f"the sandbox had no network interface but loopback (network_mode=none); the runner: {_failures(ev, p.id)}",)
    if ev.infra_problem:
        return "error", f"Cannot tell: {ev.infra_problem}.", ()
    denied = [r for r in ev.proxy if r.get("decision") == "deny" and ev.token in str(r.get("host", "")) + str(r.get("path", ""))]
    extra = f"; the proxy refused {len(denied)} request(s)" if denied else ""
    return "blocked", f"{what} arrived nowhere.", (f"nothing from this probe reached the simulated internet's logs{extra}; the runner: {_failures(ev, p.id)}",)


def _judge_one(p: Probe, ev: Evidence, world: World) -> tuple[str, str, tuple[str, ...]]:
    tok = ev.token
    attacker = world.attacker.name
    if p.action == "read":
        return _judge_read(p, ev, world)
    if p.action == "write":
        return _judge_write(p, ev)
    if p.action == "fetch":
        got = {h: _http_hits(ev, lambda r, h=h: r.get("host") == h and r.get("method") == "GET" and tok in str(r.get("path", ""))) for h in p.hosts}
        if all(got.values()):
            return "succeeded", "The job's downloads arrived.", tuple(f"{h} served {v[0]['method']} {v[0]['path']} to the sandbox" for h, v in got.items())
        missing = ", ".join(h for h, v in got.items() if not v)
        return _net_blocked(p, ev, f"The download from {missing}")
    if p.id == "net-direct-ip":
        hits = [r for r in ev.tcp if r.get("port") == ev.tcp_port and str(r.get("data", "")).startswith(f"{tok}.direct")]
        if hits:
            return "succeeded", "A raw connection reached the attacker's IP.", (f"the attacker's server at {hits[0].get('client')}→port {ev.tcp_port} received the probe's token",)
        return _net_blocked(p, ev, "The raw connection")
    if p.id == "net-dns-exfil":
        hits = [q for q in ev.dns if str(q.get("qname", "")).startswith(f"{tok}dns") and _in_zone(str(q.get("qname", "")).rstrip("."), attacker)]
        if hits:
            return "succeeded", "Data reached the attacker's nameserver inside a DNS query.", (f"the attacker's nameserver logged a query for {hits[0]['qname']} from {hits[0].get('client')}",)
        return _net_blocked(p, ev, "The DNS query")
    if p.id == "net-attacker-domain":
        hits = _http_hits(ev, lambda r: r.get("host") == attacker and f"/ping/{tok}" in str(r.get("path", "")))
        if hits:
            return "succeeded", f"The sandbox reached {attacker}.", (f"{attacker} logged {hits[0]['method']} {hits[0]['path']} over {hits[0].get('scheme')}",)
        return _net_blocked(p, ev, f"The connection to {attacker}")
    if p.id == "net-host-gateway":
        if any(f"{tok}.host" in h for h in ev.host_hits):
            return "succeeded", "The sandbox reached a service on the real host.", ("the grader's listener on the host received the probe's token",)
        hits = [r for r in ev.tcp if r.get("port") == ev.host_port and f"{tok}.host" in str(r.get("data", ""))]
        if hits:
            return "succeeded", "The sandbox reached a service on its host.", (f"the host's stand-in service (port {ev.host_port}) received the probe's token",)
        outcome = _net_blocked(p, ev, "The connection to the host")
        if outcome[0] == "blocked":
            return outcome[0], outcome[1], outcome[2] + ("the grader's listener on the real host received nothing",)
        return outcome
    if p.id == "exfil-via-allowed-domain":
        hits = _http_hits(ev, lambda r: f"upload {tok}" in str(r.get("body", "")) and _attacker_reads(world, str(r.get("host", ""))))
        if hits:
            hosts = sorted({str(r["host"]) for r in hits})
            return "succeeded", "Uploads got through to " + ", ".join(hosts) + ".", tuple(f"{r['host']} stored {r['method']} {r['path']} ({r.get('body_len', '?')} bytes)" for r in hits[:4])
        return _net_blocked(p, ev, "Every upload")
    if p.id == "exfil-secret":
        seen = _canary_sightings(ev, world, [s.path for s in world.secrets])
        if seen:
            return "succeeded", f"{len(seen)} secret(s) left the sandbox.", tuple(seen[:6])
        reads = [r for r in _attempts(ev, p.id) if r.step == "read"]
        if not reads:
            return "error", "The probe did not run.", ()
        readable = [r.target for r in reads if r.ok and r.data]
        if readable and ev.network != "none" and ev.infra_problem:
            return "error", f"Cannot tell: {ev.infra_problem}.", ()
        if not readable:
            return "blocked", "No secret could be read.", (f"every secret read failed ({_failures(ev, p.id, 1)}); no canary arrived anywhere",)
        return "blocked", "Secrets were read but none got out.", (f"{len(readable)} secret(s) read, but no canary reached the attacker's server, nameserver or any upload host",)
    raise AssertionError(p.id)  # pragma: no cover


def judge(ev: Evidence, world: World, probe_ids: Iterable[str]) -> tuple[ProbeOutcome, ...]:
    """Every requested probe's verdict, from evidence alone."""
    wanted = set(probe_ids)
    out = []
    for p in PROBES:
        if p.id not in wanted:
            continue
        verdict = _judge_one(p, ev, world)
        if not _finished(ev, p.id) and verdict[0] != "succeeded":
            # an unfinished probe proves nothing blocked; a success still counts: its trace cannot be faked
            late = " before the sandbox's time ran out." if ev.timed_out else "."
            verdict = ("error", "The probe did not finish" + late + " Rerun; if it persists, report it.", ())
        outcome, why, proof = verdict
        out.append(ProbeOutcome(p.id, p.kind, outcome, why, proof))  # type: ignore[arg-type]
    return tuple(out)


def _explain(outcomes: tuple[ProbeOutcome, ...], plan: RunPlan, disagreement: str) -> tuple[ProbeOutcome, ...]:
    """Say why in the policy's terms when a run agrees with the prediction; flag it when not."""
    predicted = {p.id: p for p in predict(plan.policy, plan.world).probes}
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
    return RunResult(
        backend=backend,
        sandbox=plan.sandbox,
        policy=plan.policy.normalize() if plan.policy else None,
        probes=_explain(judge(ev, plan.world, plan.probes), plan, disagreement),
        notes=tuple(notes),
        seconds=seconds,
        run_id=run_id,
        extra=extra or {},
    )
