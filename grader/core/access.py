"""What a sandbox lets the agent do, path by path and host by host: the policy language's semantics.

This is the single statement of the rules. The static analyzer judges probes
with it and the plan compiles container mounts from it, so the two backends
cannot drift apart by construction; the Docker backend then checks the claim
against reality.

Two kinds of sandbox are described:

* ``policy``: the learner's policy. Reads and writes follow the most specific
  rule; the network is either absent (no allowed domains) or only an egress
  proxy that filters by host name.
* ``baseline``: the plain container many people call a sandbox. Home, project
  and workspace are mounted read-write, everything else of the machine is not
  there, and the network is ordinary (direct connections, DNS, the host).

Imports: errors, policy, world, paths, domains. Nothing downstream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from grader.core.domains import WEB_PORTS, entry_host, entry_port, matches, split_port
from grader.core.errors import PolicyError, Problem, json_pointer
from grader.core.paths import covers
from grader.core.policy import Policy
from grader.core.world import World

__all__ = ["Access", "Decision", "Mode", "Network", "access_for", "baseline_access", "unmeasured_ports"]

Mode = Literal["hidden", "ro", "rw"]
Network = Literal["none", "proxy", "open"]

# The plain container mounts the directories people usually mount: the user's
# home and the projects. /etc/secrets stays on the machine: a container does
# isolate the rest of the filesystem, which is exactly why people trust it.
BASELINE_MOUNTS = ("/home/user", "/project", "/app/workspace")


def _most_specific(
    path: str, rules: tuple[tuple[str, tuple[str, ...], bool], ...]
) -> Optional[tuple[int, bool, str, str]]:
    """The rule that decides ``path``: the longest covering entry; on the same path deny wins."""
    best: Optional[tuple[int, bool, str, str]] = None
    for key, entries, allow in rules:
        for entry in entries:
            if covers(entry, path):
                cand = (len(entry) if entry != "/" else 0, allow, key, entry)
                if best is None or cand[0] > best[0] or (cand[0] == best[0] and best[1] and not allow):
                    best = cand
    return best


@dataclass(frozen=True)
class Decision:
    """A yes/no answer and the rule that gave it (None when a default decided)."""

    allowed: bool
    rule: Optional[tuple[str, str]]  # (key, entry), e.g. ("denyRead", "/home/user/.ssh")
    why: str


@dataclass(frozen=True)
class Access:
    """The effective sandbox: a policy (or the baseline) read against the world."""

    kind: Literal["policy", "baseline"]
    world: World
    policy: Optional[Policy] = None

    # --- filesystem ---------------------------------------------------------------------

    def read(self, path: str) -> Decision:
        """May the agent read ``path`` (a world path)?"""
        if self.policy is None:
            ok = any(covers(m, path) for m in BASELINE_MOUNTS)
            return Decision(ok, None, "mounted into the plain container" if ok else "not mounted into the plain container")
        fs = self.policy.filesystem
        best = _most_specific(path, (("allowRead", fs.allowRead, True), ("allowWrite", fs.allowWrite, True), ("denyRead", fs.denyRead, False)))
        if best is not None:
            _, allow, key, entry = best
            verb = "allows" if allow else "hides"
            return Decision(allow, (key, entry), f'{key} "{entry}" {verb} it (the most specific rule)')
        if fs.allowRead:
            return Decision(False, None, "no rule covers it and allowRead lists paths, so everything else is unreadable")
        return Decision(True, None, "no rule covers it and allowRead is empty, so it is readable by default")

    def write(self, path: str) -> Decision:
        """May the agent change ``path``? Hidden paths are hidden for writing too."""
        if self.policy is None:
            ok = any(covers(m, path) for m in BASELINE_MOUNTS)
            return Decision(ok, None, "mounted read-write into the plain container" if ok else "not mounted into the plain container")
        fs = self.policy.filesystem
        best = _most_specific(path, (("allowWrite", fs.allowWrite, True), ("denyWrite", fs.denyWrite, False)))
        if best is None:
            return Decision(False, None, "no allowWrite rule covers it, so it is read-only")
        _, allow, key, entry = best
        if not allow:
            return Decision(False, (key, entry), f'denyWrite "{entry}" keeps it read-only (the most specific rule)')
        read = self.read(path)
        if not read.allowed:
            return Decision(False, read.rule, f"allowWrite \"{entry}\" covers it, but it is hidden: {read.why}; writes there never reach the real file")
        return Decision(True, (key, entry), f'allowWrite "{entry}" allows it (the most specific rule)')

    def mode(self, path: str) -> Mode:
        """How the path appears inside the sandbox: hidden, read-only or read-write."""
        if not self.read(path).allowed:
            return "hidden"
        return "rw" if self.write(path).allowed else "ro"

    # --- network ------------------------------------------------------------------------

    @property
    def network(self) -> Network:
        if self.policy is None:
            return "open"
        return "proxy" if self.policy.network.allowedDomains else "none"

    def reach(self, host: str, port: Optional[int] = None) -> Decision:
        """May the agent talk to ``host`` (a normalized name) on ``port``?

        With ``port`` None: over the web, on 443 or 80 (those of them the name's
        server serves; both for a name no server answers), whichever the
        policy leaves open: an entry pinned to one port opens that port only,
        and an attacker uses the one that is open. Other ports of a name the
        attacker owns are refused before any run (``unmeasured_ports``).
        """
        if self.policy is None:
            return Decision(True, None, "the plain container has ordinary networking: every host is reachable")
        net = self.policy.network
        if not net.allowedDomains:
            return Decision(False, None, "allowedDomains is empty, so the sandbox has no network at all")
        if port is None:
            ports = [p for p in WEB_PORTS.values() if p in self.world.ports_of(host)] or list(WEB_PORTS.values())
            decisions = [self.reach(host, p) for p in ports]
            return next((d for d in decisions if d.allowed), decisions[0])
        on = f" on port {port}"
        for d in net.deniedDomains:
            if matches(d, host, port):
                return Decision(False, ("deniedDomains", d), f'deniedDomains "{d}" blocks it{on if entry_port(d) else ""} (deny wins)')
        for a in net.allowedDomains:
            if matches(a, host, port):
                return Decision(True, ("allowedDomains", a), f'allowedDomains "{a}" lets the proxy through to it{on if entry_port(a) else ""}')
        pinned = [a for a in net.allowedDomains if matches(a, host)]
        if pinned:
            return Decision(False, None, f'"{pinned[0]}" opens port {entry_port(pinned[0])} only, not port {port}')
        apex = [a for a in net.allowedDomains if entry_host(a).startswith("*.") and entry_host(a)[2:] == host]
        if apex:
            return Decision(False, None, f'"{apex[0]}" matches subdomains only, not {host} itself')
        return Decision(False, None, "no allowedDomains entry matches it")

    def reach_fresh_subdomain(self, zone: str) -> bool:
        """Can the agent reach names it makes up under ``zone`` (how data rides in DNS queries)?

        Only a wildcard for exactly that zone matches a fresh label: an exact
        entry names one fixed host, and a deeper wildcard needs a deeper name.
        The proxy looks a name up only once it lets the request through (on a
        port its server serves): the name must be reachable over the web, the
        only ports a name the attacker owns may be opened on (``unmeasured_ports``).
        """
        if self.policy is None:
            return True
        net = self.policy.network
        probe = f"x0fresh0x.{zone}"  # stands for any label the agent invents
        return self.reach(probe).allowed and any(entry_host(a) == f"*.{zone}" for a in net.allowedDomains)


def unmeasured_ports(policy: Policy, world: World) -> tuple[Problem, ...]:
    """Allowed entries the lab cannot measure: a port other than 80 or 443 opened to a name the attacker owns.

    The attacker's server answers such a name on its nameserver's and raw
    listener's ports too, and through a CONNECT tunnel there data leaves
    without any HTTP request the probes model. Rather than report "blocked"
    for a channel nothing tried, the entry is refused with its reason (fail
    closed). The same port opened to a world host that does not serve it
    opens nothing, and is only linted.
    """
    out = []
    for i, entry in enumerate(policy.network.allowedDomains):
        host, port = split_port(entry)
        if port is None or port in WEB_PORTS.values():
            continue
        name = f"x0fresh0x.{host[2:]}" if host.startswith("*.") else host
        if world.attacker_owns(name) and world.serves(name, port):
            out.append(Problem(json_pointer(("network", "allowedDomains", i)), (
                f'"{entry}" opens port {port} of a name the attacker owns, where the attacker\'s server listens; '
                "the lab measures such names over the web (ports 80 and 443) only, so it cannot grade this entry. "
                "Remove it: no job needs it.")))
    return tuple(out)


def access_for(policy: Policy, world: World) -> Access:
    """The sandbox a learner's policy describes; PolicyError when it opens what the lab cannot measure."""
    problems = unmeasured_ports(policy, world)
    if problems:
        raise PolicyError("this policy", problems)
    return Access("policy", world, policy)


def baseline_access(world: World) -> Access:
    """The plain container: a default Docker container with home and projects mounted."""
    return Access("baseline", world, None)
