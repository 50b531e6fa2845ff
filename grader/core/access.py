"""What a sandbox lets the agent do, path by path and host by host: sandbox-runtime's rules, as the lab models them.

This is the single statement of the rules. The static analyzer judges probes
with it and the plan compiles container mounts from it, so the two backends
cannot drift apart by construction; the Docker backend then checks the claim
against reality, and the cross-check (``bench/srt_crosscheck.py``) checks both
against the real srt given the policy as written.

A policy means here what the same JSON means to sandbox-runtime (srt) 0.0.83
on Linux; each rule names its source in srt's ``dist/sandbox/linux-sandbox-utils.js``:

* reads are open by default; ``denyRead`` hides a path (a directory becomes an
  empty tmpfs, a file an empty one); ``allowRead`` and ``allowWrite`` entries
  at or inside a denied directory are bound back over it (``pushReadDenyDirMounts``),
  so they win there, on the same path too; a denied *file* is lifted only by an
  ``allowRead`` of that very file (``liftedFile``). An ``allowRead`` no
  ``denyRead`` surrounds restricts nothing;
* writes are closed by default; ``allowWrite`` opens, ``denyWrite`` wins at any
  depth (its read-only binds land after the write binds); a path hidden by a
  ``denyRead`` is hidden for writing too (writes land on the tmpfs, never on the
  real file);
* srt's mandatory write protections (``mandatory.py``) hold in the directory the
  sandbox starts in, whatever ``allowWrite`` says;
* a rule naming a world path that does not exist when the sandbox starts binds
  nothing (``allowRead``, ``allowWrite``, ``denyRead``); a ``denyWrite`` holds
  (srt mounts a stand-in there).

The target (``TARGETS``) says who starts the sandbox: ``srt`` in the home (the
Docker sandbox's working directory, where the cross-check starts the real srt),
``claude-code`` in the project the policy works in, which Claude Code also makes
writable by default (its working directory). Two kinds of sandbox are described:
``policy``, the learner's, and ``baseline``: the plain container many people
call a sandbox (home, project and workspace mounted read-write, everything else
of the machine absent, ordinary networking).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Literal, Optional

from grader.protocol.domains import WEB_PORTS, entry_host, entry_port, matches, split_port
from grader.core.errors import PolicyError, Problem, json_pointer
from grader.core.mandatory import protected_paths
from grader.core.paths import covers
from grader.core.policy import Policy
from grader.core.world import World

__all__ = ["TARGETS", "Access", "Decision", "Mode", "Network", "Target", "access_for", "baseline_access", "parse_target",
           "start_directory", "unmeasured_ports"]

Mode = Literal["hidden", "ro", "rw"]
Network = Literal["none", "proxy", "open"]
Target = Literal["srt", "claude-code"]
TARGETS: tuple[Target, ...] = ("srt", "claude-code")
TARGET_NAMES: dict[Target, str] = {"srt": "sandbox-runtime (srt)", "claude-code": "Claude Code"}

# The plain container mounts the directories people usually mount: the user's
# home and the projects. /etc/secrets stays on the machine: a container does
# isolate the rest of the filesystem, which is exactly why people trust it.
BASELINE_MOUNTS = ("/home/user", "/project", "/app/workspace")

# The key a Decision names for the grant Claude Code adds by itself: its working directory is writable.
WORKING_DIRECTORY = "workingDirectory"


def parse_target(value: Optional[str], where: str = "$SANDBOX_LAB_TARGET") -> Target:
    """A target named by a person (a setting, an option): srt when unset, ``ValueError`` naming the choices otherwise."""
    if value is None or value == "":
        return "srt"
    for t in TARGETS:
        if value == t:
            return t
    raise ValueError(f"{where} is {value!r}: choose one of {', '.join(TARGETS)} (who starts the sandbox, whose rules decide)")


def start_directory(policy: Optional[Policy], world: World, target: Target = "srt") -> str:
    """Where the target starts the sandboxed command: the home for srt, the project the policy works in for Claude Code.

    The project is the first one the policy's allowWrite (else allowRead) names, else the world's first.
    """
    if target != "claude-code" or policy is None:
        return world.home
    projects = world.projects
    for key in ("allowWrite", "allowRead"):
        for entry in getattr(policy.filesystem, key):
            for p in projects:
                if covers(p, entry):
                    return p
    return projects[0] if projects else world.home


@lru_cache(maxsize=64)
def _protected(start: str, existing: frozenset[str]) -> tuple[str, ...]:
    """``protected_paths``, once per world and start directory (not once per policy read against them)."""
    return protected_paths(start, existing)


@dataclass(frozen=True)
class Decision:
    """A yes/no answer and the rule that gave it (None when a default decided)."""

    allowed: bool
    rule: Optional[tuple[str, str]]  # (key, entry), e.g. ("denyRead", "/home/user/.ssh")
    why: str


@dataclass(frozen=True)
class Access:
    """The effective sandbox: a policy (or the baseline) read against the world, for one target."""

    kind: Literal["policy", "baseline"]
    world: World
    policy: Optional[Policy] = None
    target: Target = "srt"

    # --- what exists when the sandbox starts, and where it starts ----------------------------

    @cached_property
    def existing(self) -> frozenset[str]:
        """Every world path present when a sandbox starts (a job's outputs are not, yet)."""
        return frozenset(self.world.directories()) | {f.path for f in self.world.files}

    def binds(self, entry: str) -> bool:
        """Does a grant or read deny naming ``entry`` bind anything? Not when it names a missing world path."""
        return entry in self.existing or self.world.root_of(entry) is None

    @cached_property
    def _files(self) -> frozenset[str]:
        return frozenset(f.path for f in self.world.files)

    # An Access is frozen, and so are its policy and world: each answer is worked out once per question.
    @cached_property
    def _reads(self) -> dict[str, Decision]:
        return {}

    @cached_property
    def _writes(self) -> dict[str, Decision]:
        return {}

    @cached_property
    def _reaches(self) -> dict[tuple[str, Optional[int]], Decision]:
        return {}

    @cached_property
    def start(self) -> str:
        return start_directory(self.policy, self.world, self.target)

    @cached_property
    def write_grants(self) -> tuple[tuple[str, str], ...]:
        """(key, entry) of every write grant that binds: allowWrite, and Claude Code's working directory."""
        assert self.policy is not None
        grants = [("allowWrite", e) for e in self.policy.filesystem.allowWrite if self.binds(e)]
        if self.target == "claude-code":
            grants.append((WORKING_DIRECTORY, self.start))
        return tuple(grants)

    @cached_property
    def mandatory(self) -> tuple[str, ...]:
        """What srt keeps read-only whatever allowWrite says, found from where it starts."""
        return _protected(self.start, self.existing)

    # --- filesystem ---------------------------------------------------------------------

    def _hider(self, path: str) -> Optional[tuple[str, Optional[tuple[str, str]]]]:
        """The denyRead entry that hides ``path`` (None if none does), or the deny with the grant that re-opens it."""
        assert self.policy is not None
        fs = self.policy.filesystem
        files = self._files
        reopened: Optional[tuple[str, Optional[tuple[str, str]]]] = None
        # the deepest deny first: the one a learner must change to see the path
        for d in sorted((d for d in fs.denyRead if covers(d, path) and self.binds(d)), key=len, reverse=True):
            if d in files:  # a denied file: only an allowRead of that very file lifts it
                grants = [("allowRead", a) for a in fs.allowRead if a == d]
            else:  # a denied directory: allowRead and write grants at or inside it are bound back
                grants = [("allowRead", a) for a in fs.allowRead if self.binds(a) and covers(d, a) and covers(a, path)]
                grants += [g for g in self.write_grants if covers(d, g[1]) and covers(g[1], path)]
            if not grants:
                return d, None
            if reopened is None:
                reopened = (d, max(grants, key=lambda g: len(g[1])))
        return reopened

    def read(self, path: str) -> Decision:
        """May the agent read ``path`` (a world path)?"""
        memo = self._reads
        if path not in memo:
            memo[path] = self._read(path)
        return memo[path]

    def _read(self, path: str) -> Decision:
        if self.policy is None:
            ok = any(covers(m, path) for m in BASELINE_MOUNTS)
            return Decision(ok, None, "mounted into the plain container" if ok else "not mounted into the plain container")
        found = self._hider(path)
        if found is None:
            return Decision(True, None, "no denyRead covers it, and reads are allowed by default")
        deny, grant = found
        if grant is None:
            return Decision(False, ("denyRead", deny), f'denyRead "{deny}" hides it, and no allowRead re-opens it there')
        key, entry = grant
        what = "Claude Code's working directory" if key == WORKING_DIRECTORY else f'{key} "{entry}"'
        return Decision(True, grant, f'{what} re-opens it inside denyRead "{deny}"')

    def write(self, path: str) -> Decision:
        """May the agent change ``path``? Hidden paths are hidden for writing too."""
        memo = self._writes
        if path not in memo:
            memo[path] = self._write(path)
        return memo[path]

    def _write(self, path: str) -> Decision:
        if self.policy is None:
            ok = any(covers(m, path) for m in BASELINE_MOUNTS)
            return Decision(ok, None, "mounted read-write into the plain container" if ok else "not mounted into the plain container")
        fs = self.policy.filesystem
        grants = [g for g in self.write_grants if covers(g[1], path)]
        if not grants:
            return Decision(False, None, "no allowWrite covers it, and writes are denied by default")
        grant = max(grants, key=lambda g: len(g[1]))
        denies = [d for d in fs.denyWrite if covers(d, path)]
        if denies:
            return Decision(False, ("denyWrite", denies[0]), f'denyWrite "{denies[0]}" keeps it read-only (denyWrite wins over allowWrite)')
        read = self.read(path)
        if not read.allowed:
            return Decision(False, read.rule, f"{grant[0]} \"{grant[1]}\" covers it, but it is hidden: {read.why}; writes there never reach the real file")
        guarded = [m for m in self.mandatory if covers(m, path)]
        if guarded:
            return Decision(False, ("mandatory", guarded[0]), (
                f"srt always keeps {guarded[0]} read-only (one of its mandatory write protections, found from "
                f"{self.start}, where the sandbox starts), whatever allowWrite says"))
        what = "Claude Code's working directory is writable by default" if grant[0] == WORKING_DIRECTORY else f'allowWrite "{grant[1]}" allows it'
        return Decision(True, grant, what)

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
        memo = self._reaches
        if (host, port) not in memo:
            memo[(host, port)] = self._reach(host, port)
        return memo[(host, port)]

    def _reach(self, host: str, port: Optional[int]) -> Decision:
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


def access_for(policy: Policy, world: World, target: Target = "srt") -> Access:
    """The sandbox a learner's policy describes for ``target``; PolicyError when it opens what the lab cannot measure."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; choose one of: {', '.join(TARGETS)}")
    problems = unmeasured_ports(policy, world)
    if problems:
        raise PolicyError("this policy", problems)
    return Access("policy", world, policy, target)


def baseline_access(world: World) -> Access:
    """The plain container: a default Docker container with home and projects mounted."""
    return Access("baseline", world, None)
