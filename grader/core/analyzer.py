"""Static predictions: policy + world → the outcome of every probe, each with a sentence a learner understands.

Pure: no Docker, no files, no clock. The Docker backend must agree with these
predictions probe for probe; a test holds the two together over a corpus.

Also owns the policy lints that need the world (rules outside the simulated
machine, wildcards that reach upload hosts, ...) and the list of exfiltration
paths the probe board draws.

Each probe's prediction lives in its record (``probes/``); this module runs them.
"""

from __future__ import annotations

from typing import Optional

from grader.core.access import Access, Target, access_for, baseline_access
from grader.core.channels import Channel, ExfilPath, channels, exfil_paths, tunnel, unknown_name_why
from grader.protocol.domains import matches, split_port
from grader.core.findings import find
from grader.core.errors import Problem, json_pointer
from grader.core.outcomes import ProbeOutcome, RunNoteCode, RunResult
from grader.core.paths import covers
from grader.core.policy import Policy
from grader.core.probes import PROBES
from grader.core.scope import predict_scope
from grader.core.world import World, load_world

__all__ = ["Channel", "ExfilPath", "analyze", "channels", "exfil_paths", "lint", "predict", "tunnel"]

RUNTIME_PREFIXES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/tmp", "/opt")


def analyze(access: Access) -> tuple[ProbeOutcome, ...]:
    """Predict every probe against one sandbox."""
    out = []
    for p in PROBES:
        ok, why = p.predict(p, access)
        out.append(ProbeOutcome(p.id, p.kind, "succeeded" if ok else "blocked", why))
    return tuple(out)


def predict(policy: Optional[Policy], world: Optional[World] = None, *, notes: tuple[str, ...] = (),
            codes: tuple[RunNoteCode, ...] = (), target: Target = "srt") -> RunResult:
    """The static backend's answer: a ``RunResult`` predicted from the policy (None = the plain container) for ``target``."""
    w = world or load_world()
    access = baseline_access(w) if policy is None else access_for(policy, w, target)
    return RunResult(
        backend="static",
        sandbox=access.kind,
        policy=policy,
        probes=analyze(access),
        notes=notes,
        codes=codes,
        scope=predict_scope(access),
        findings=find(access),
    )


def _runtime(path: str) -> bool:
    return any(covers(r, path) for r in RUNTIME_PREFIXES) and not covers("/etc/secrets", path) and not covers(path, "/etc/secrets")


def lint(policy: Policy, world: Optional[World] = None) -> tuple[Problem, ...]:
    """Warnings for a valid policy that probably does not mean what its author thinks."""
    w = world or load_world()
    out: list[Problem] = list(policy.warnings)
    fs = policy.filesystem
    grants = access_for(policy, w)
    for key in ("allowRead", "denyRead", "allowWrite", "denyWrite"):
        for i, entry in enumerate(getattr(fs, key)):
            ptr = json_pointer(("filesystem", key, i))
            inside = w.root_of(entry) is not None or any(covers(entry, r) for r in w.roots)
            if inside:
                continue
            # an allow rule that itself grants a path the world does not model: nothing measured it, and grading
            # counts it as an over-grant (needs._unmodelled_grants); a deny rule there, or an allow rule a deny
            # takes back, changes nothing
            decided = grants.read(entry) if key == "allowRead" else grants.write(entry) if key == "allowWrite" else None
            counted = decided is not None and decided.allowed and decided.rule == (key, entry)
            where = ("part of the runtime (/usr, /etc, ...), which is always readable and never writable in Sandbox Lab"
                     if _runtime(entry) else f"outside the simulated machine ({', '.join(w.roots)}), which is never mounted here")
            if counted:
                out.append(Problem(ptr, f'"{entry}" is {where}, so no run measures what this rule grants; on a real machine it '
                                        "grants it all the same, and no job here needs it. `grade` counts it as more than the job "
                                        f"needs (an over-grant: its {'least-read' if key == 'allowRead' else 'least-write'} check scores 0). "
                                        f"Remove it: delete {ptr}."))
            else:
                out.append(Problem(ptr, f'"{entry}" is {where}; this rule changes nothing here.'))
    for i, entry in enumerate(fs.allowWrite):
        d = access_for(policy, w).read(entry)
        if not d.allowed and d.rule and d.rule[0] == "denyRead":
            out.append(Problem(json_pointer(("filesystem", "allowWrite", i)), f'"{entry}" is hidden by denyRead "{d.rule[1]}": writes there never reach the real file.'))
    net = policy.network
    access = access_for(policy, w)
    for i, raw in enumerate(net.allowedDomains):
        ptr = json_pointer(("network", "allowedDomains", i))
        entry, port = split_port(raw)  # the host-level rules read the host; the port is checked last
        if entry.startswith("*."):
            ups = [h.name for h in w.hosts if h.uploads and matches(raw, h.name) and access.reach(h.name, port).allowed]
            if ups:
                out.append(Problem(ptr, f'"{raw}" also reaches {", ".join(ups)}, which accept uploads: every subdomain is an exfiltration path. List the exact host the job needs.'))
            apex = entry[2:]
            if apex in w.host_names:
                out.append(Problem(ptr, f'"{raw}" does not match {apex} itself, only its subdomains. Add "{apex}" if the job needs it.'))
        elif entry.startswith("xn--") or ".xn--" in entry:
            out.append(Problem(ptr, f'"{raw}" is an internationalized name: it is not the ASCII host it may look like.'))
        if entry.startswith("*.") and entry[2:] != w.attacker.name and w.attacker_owns(f"x0fresh0x.{entry[2:]}"):
            out.append(Problem(ptr, f"{unknown_name_why(access, raw)}. An open channel: remove it unless the job needs it, and then list the exact host."))
        elif not entry.startswith("*.") and entry not in w.host_names and w.attacker_owns(entry):
            out.append(Problem(ptr, f"{unknown_name_why(access, raw)}. An open channel: remove it unless the job needs it."))
        elif not entry.startswith("*.") and entry.split(".")[-1] == "invalid":
            out.append(Problem(ptr, f'"{raw}" is a reserved name (.invalid) that never exists: it reaches nothing anywhere.'))
        elif not entry.startswith("*.") and entry not in w.host_names:
            out.append(Problem(ptr, f'"{raw}" is not a host of the simulated internet, and its operator\'s domain is modelled without it, so nothing answers it here.'))
        elif port is not None and not entry.startswith("*.") and port not in w.ports_of(entry):
            served = ", ".join(map(str, w.ports_of(entry)))
            out.append(Problem(ptr, f'"{raw}" opens port {port} of {entry}, which serves only {served}: nothing answers there, so it opens nothing.'))
    catch_all = [e for e in net.deniedDomains if split_port(e)[0] == "*"]
    if catch_all and net.allowedDomains:
        every = catch_all[0]
        on = f" on port {split_port(every)[1]}" if split_port(every)[1] else ""
        out.append(Problem("/network/deniedDomains", f'"{every}" denies every host{on}, and deny wins: no allowedDomains entry opens anything{on}.'))
    if net.deniedDomains and not net.allowedDomains:
        out.append(Problem("/network/deniedDomains", "deniedDomains has no effect while allowedDomains is empty: there is no network at all."))
    # said before any run: reads are open by default, so a policy that hides nothing leaves every secret readable
    leaked = [f.path for f in w.loot if access.read(f.path).allowed]
    if leaked:
        shown = ", ".join(leaked[:4]) + (f" and {len(leaked) - 4} more" if len(leaked) > 4 else "")
        out.append(Problem("/filesystem/denyRead", (
            f"{len(leaked)} secret{'s' if len(leaked) != 1 else ''} of the machine stay{'s' if len(leaked) == 1 else ''} readable "
            f"({shown}): reads are allowed by default, and only denyRead hides. Hide the places that hold them with "
            "denyRead, and re-open inside with allowRead only what the job reads.")))
    return tuple(out)
