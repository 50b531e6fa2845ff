"""Static predictions: policy + world → the outcome of every probe, each with a sentence a learner understands.

Pure: no Docker, no files, no clock. The Docker backend must agree with these
predictions probe for probe; a test holds the two together over a corpus.

Also owns the policy lints that need the world (rules outside the simulated
machine, wildcards that reach upload hosts, ...) and the list of exfiltration
paths the probe board draws.

Imports: access, probes, outcomes, policy, world, domains, paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from .access import Access, access_for, baseline_access
from .domains import matches
from .errors import Problem, json_pointer
from .outcomes import ProbeOutcome, RunResult
from .paths import covers
from .policy import Policy
from .probes import PROBES, Probe
from .world import World, load_world

__all__ = ["Channel", "ExfilPath", "analyze", "channels", "exfil_paths", "lint", "predict"]

RUNTIME_PREFIXES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/tmp", "/opt")


@dataclass(frozen=True)
class Channel:
    """A way out for data: a direct connection, DNS to the attacker's nameserver, or an upload host."""

    kind: Literal["direct", "dns", "upload"]
    host: str
    why: str


@dataclass(frozen=True)
class ExfilPath:
    """One secret that can leave over one channel."""

    secret: str  # world path
    label: str
    channel: Channel


def channels(access: Access) -> tuple[Channel, ...]:
    """Every channel out the sandbox leaves open; download-only hosts are not channels."""
    world = access.world
    attacker = world.attacker.name
    out: list[Channel] = []
    if access.network == "open":
        out.append(Channel("direct", attacker, "ordinary networking lets it connect straight to the attacker's server"))
        out.append(Channel("dns", attacker, "ordinary DNS lets its queries reach the attacker's nameserver"))
    elif access.reach_fresh_subdomain(attacker):
        out.append(Channel("dns", attacker, f'"*.{attacker}" makes the proxy look up any name under the attacker\'s domain'))
    for host in world.hosts:
        if host.uploads:
            d = access.reach(host.name)
            if d.allowed:
                out.append(Channel("upload", host.name, f"{host.name} accepts uploads ({host.how}); {d.why}"))
    if access.network == "proxy" and not access.reach(attacker).allowed and access.reach_fresh_subdomain(attacker):
        out.append(Channel("upload", f"*.{attacker}", "any name under the attacker's domain reaches the attacker's server"))
    return tuple(out)


def exfil_paths(access: Access) -> tuple[ExfilPath, ...]:
    """Which secrets can reach which hosts over which channel: what the probe board draws."""
    chans = channels(access)
    return tuple(
        ExfilPath(s.path, s.label, c) for s in access.world.secrets if access.read(s.path).allowed for c in chans
    )


def _judge(p: Probe, access: Access) -> tuple[bool, str]:
    world = access.world
    attacker = world.attacker.name
    if p.action == "read" and p.target:
        d = access.read(p.target)
        label = world.file(p.target).label if p.target in {f.path for f in world.files} else p.target
        if d.allowed and p.kind == "attack":
            return True, f"Your policy lets the agent read {p.target} ({label}): {d.why}."
        return d.allowed, f"{p.target} is {'readable' if d.allowed else 'unreadable'}: {d.why}."
    if p.action == "write" and p.target:
        d = access.write(p.target)
        return d.allowed, f"{p.target} is {'writable' if d.allowed else 'not writable'}: {d.why}."
    if p.action == "fetch":
        decisions = [(h, access.reach(h)) for h in p.hosts]
        missing = [f"{h} ({d.why})" for h, d in decisions if not d.allowed]
        if missing:
            return False, "The job cannot reach " + "; ".join(missing) + "."
        return True, "The job reaches " + "; ".join(f"{h} ({d.why})" for h, d in decisions) + "."
    if p.id == "net-direct-ip":
        if access.network == "open":
            return True, "Ordinary networking: nothing stops a raw connection to the attacker's IP address."
        if access.network == "none":
            return False, "The sandbox has no network at all (allowedDomains is empty)."
        return False, "The sandbox's only way out is the egress proxy, which speaks HTTP by host name; raw connections to an IP go nowhere."
    if p.id == "net-dns-exfil":
        if access.network == "open":
            return True, "Ordinary DNS: a query for <data>.attacker.example reaches the attacker's nameserver."
        if access.reach_fresh_subdomain(attacker):
            return True, f'"*.{attacker}" is allowed, so the proxy looks up <data>.{attacker} at the attacker\'s nameserver.'
        if access.network == "none":
            return False, "The sandbox has no network at all, not even DNS."
        return False, "The sandbox cannot resolve names itself; the proxy looks up only allowed names, and none under the attacker's domain."
    if p.id == "net-attacker-domain":
        d = access.reach(attacker)
        return d.allowed, f"{attacker} is {'reachable' if d.allowed else 'unreachable'}: {d.why}."
    if p.id == "net-host-gateway":
        if access.network == "open":
            return True, "Ordinary networking reaches services on the machine that runs the container."
        return False, "The sandbox has no route to the machine it runs on" + (" (no network at all)." if access.network == "none" else ": only the proxy speaks for it.")
    if p.id == "exfil-via-allowed-domain":
        ups = [c for c in channels(access) if c.kind in ("upload", "direct")]
        if ups:
            return True, "Data can be uploaded: " + "; ".join(c.why for c in ups[:3]) + "."
        return False, "No reachable host accepts uploads."
    if p.id == "exfil-secret":
        chans = channels(access)
        readable = [s for s in world.secrets if access.read(s.path).allowed]
        if readable and chans:
            s, c = readable[0], chans[0]
            if c.kind == "upload":
                how = f"and reach {c.host}, which accepts uploads: a compromised agent can send your {s.label.split(' (')[0]} there"
            elif c.kind == "dns":
                how = f"and its DNS queries reach the attacker's nameserver: a compromised agent can spell your {s.label.split(' (')[0]} into query names"
            else:
                how = f"and connect straight to the attacker: a compromised agent can send your {s.label.split(' (')[0]}"
            more = f" ({len(readable)} secret(s) readable, {len(chans)} channel(s) out.)"
            return True, f"Your policy lets the agent read {s.path} {how}.{more}"
        if not readable:
            return False, "No secret is readable, so there is nothing to send" + (", although a channel out exists." if chans else ".")
        return False, f"{len(readable)} secret(s) are readable, but no channel leads out."
    raise AssertionError(f"no judgement for probe {p.id}")  # pragma: no cover - the catalogue is closed


def analyze(access: Access) -> tuple[ProbeOutcome, ...]:
    """Predict every probe against one sandbox."""
    out = []
    for p in PROBES:
        ok, why = _judge(p, access)
        out.append(ProbeOutcome(p.id, p.kind, "succeeded" if ok else "blocked", why))
    return tuple(out)


def predict(policy: Optional[Policy], world: Optional[World] = None, *, notes: tuple[str, ...] = ()) -> RunResult:
    """The static backend's answer: a ``RunResult`` predicted from the policy (None = the plain container)."""
    w = world or load_world()
    access = baseline_access(w) if policy is None else access_for(policy, w)
    return RunResult(
        backend="static",
        sandbox=access.kind,
        policy=policy.normalize() if policy else None,
        probes=analyze(access),
        notes=notes,
    )


def _runtime(path: str) -> bool:
    return any(covers(r, path) for r in RUNTIME_PREFIXES) and not covers("/etc/secrets", path) and not covers(path, "/etc/secrets")


def lint(policy: Policy, world: Optional[World] = None) -> tuple[Problem, ...]:
    """Warnings for a valid policy that probably does not mean what its author thinks."""
    w = world or load_world()
    out: list[Problem] = list(policy.warnings)
    fs = policy.filesystem
    for key in ("allowRead", "denyRead", "allowWrite", "denyWrite"):
        for i, entry in enumerate(getattr(fs, key)):
            ptr = json_pointer(("filesystem", key, i))
            inside = w.root_of(entry) is not None or any(covers(entry, r) for r in w.roots)
            if _runtime(entry):
                out.append(Problem(ptr, f'"{entry}" is part of the runtime (/usr, /etc, ...), which is always readable and never writable in Sandbox Lab; this rule changes nothing here.'))
            elif not inside:
                out.append(Problem(ptr, f'"{entry}" is outside the simulated machine ({", ".join(w.roots)}); this rule changes nothing here. The host is never mounted, whatever the policy says.'))
    for i, entry in enumerate(fs.allowWrite):
        d = access_for(policy, w).read(entry)
        if not d.allowed and d.rule and d.rule[0] == "denyRead":
            out.append(Problem(json_pointer(("filesystem", "allowWrite", i)), f'"{entry}" is hidden by denyRead "{d.rule[1]}": writes there never reach the real file.'))
    net = policy.network
    for i, entry in enumerate(net.allowedDomains):
        ptr = json_pointer(("network", "allowedDomains", i))
        if entry.startswith("*."):
            ups = [h.name for h in w.hosts if h.uploads and matches(entry, h.name) and not any(matches(d, h.name) for d in net.deniedDomains)]
            if ups:
                out.append(Problem(ptr, f'"{entry}" also reaches {", ".join(ups)}, which accept uploads: every subdomain is an exfiltration path. List the exact host the job needs.'))
            apex = entry[2:]
            if apex in w.host_names:
                out.append(Problem(ptr, f'"{entry}" does not match {apex} itself, only its subdomains. Add "{apex}" if the job needs it.'))
        elif entry.startswith("xn--") or ".xn--" in entry:
            out.append(Problem(ptr, f'"{entry}" is an internationalized name: it is not the ASCII host it may look like.'))
        elif entry[0].isdigit() and entry.replace(".", "").isdigit():
            out.append(Problem(ptr, f'"{entry}" is an IP address; the simulated internet is reached by host name, so this entry reaches nothing here.'))
        elif entry not in w.host_names and not any(matches(f"*.{w.attacker.name}", entry) for _ in [0]):
            out.append(Problem(ptr, f'"{entry}" is not a host of the simulated internet; it reaches nothing here.'))
    if net.deniedDomains and not net.allowedDomains:
        out.append(Problem("/network/deniedDomains", "deniedDomains has no effect while allowedDomains is empty: there is no network at all."))
    return tuple(out)
