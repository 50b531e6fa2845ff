"""What a job needs, and what a sandbox grants beyond it: least privilege, path by path and host by host.

A task declares its job's needs (``Needs``): the paths it reads, the paths it
writes, the hosts it fetches from. ``overgrants`` compares a run's scope (every
world file readable or writable, every world directory a new file can be
created in, every host reachable: measured by a real run, predicted by the
static backend) with those needs, and returns one ``Overgrant`` per path or
host granted beyond them: the rule that grants it, the harm in the world's
words, and the narrowest change that still does the job. The rubric's
``least-*`` checks and the probe board both read this one list.

Two decisions make "within the needs" mean least privilege:

* A need names what the job works on. A directory need never covers a secret
  or credential below it, nor anything that runs later (a start-up file, a
  hook, the sandbox's own settings, a directory that holds them, where a new
  file runs later just the same): a job that really needs one names it exactly.
* Whatever the world does not know fails closed. An allowed host the simulated
  internet does not have may be the attacker's own server; a grant of a path
  the world does not model grants something nobody measured, inside the
  simulated machine or outside it (``/var/run/docker.sock``, ``/root``). Both
  are over-grants unless the job needs them, on every backend alike: they come
  from the policy, not from the run.

The runtime (``role == "runtime"``: what every program needs) is never judged.

Pure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, Optional

from grader.core.access import Access, Decision
from grader.protocol.domains import entry_host, matches
from grader.core.records import Scope
from grader.core.paths import covers
from grader.core.scope import FRESH_LABEL, NEW_FILE
from grader.core.world import World

__all__ = ["Axis", "HostNeed", "Needs", "Overgrant", "explain_overgrants", "overgrants", "ungranted"]

Axis = Literal["read", "write", "network"]
HostUse = Literal["download", "upload"]
Fix = Literal["remove", "narrow", "replace", "deny", "hide", "list"]  # the kind of change ``advice`` spells out

# Roles a directory need never covers. Reading a secret is the first half of every leak;
# writing what runs later is an escape from the sandbox.
_SECRET_ROLES = frozenset({"secret", "credential"})
_LATER_ROLES = frozenset({"persistence", "agent-config"})
_RUNTIME = "runtime"
_SHOWN_HARMS = 3  # harms spelt out per rule in a check's message; every target is still named
# The order over-grants are listed in: what leaks or runs later first.
_RANK = {role: i for i, role in enumerate(("secret", "credential", "persistence", "agent-config", "private", "source", "job-input", "job-output"))}


@dataclass(frozen=True)
class HostNeed:
    """A host the job talks to, and whether it only downloads from it or also uploads to it."""

    host: str
    use: HostUse

    def to_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class Needs:
    """What a job needs: the paths it reads and writes (each with what lies below it) and the hosts it talks to."""

    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    hosts: tuple[HostNeed, ...] = ()

    @property
    def host_names(self) -> tuple[str, ...]:
        return tuple(h.host for h in self.hosts)

    @property
    def readable(self) -> tuple[str, ...]:
        """What the job may read: what it reads, and what it writes (a job reads back what it writes)."""
        return tuple(dict.fromkeys(self.read + self.write))

    def to_json(self) -> dict[str, Any]:
        return {"read": list(self.read), "write": list(self.write), "hosts": [h.to_json() for h in self.hosts]}

    def in_words(self) -> str:
        """One line a learner can act on: ``reads /project/src; writes /project/out; no network``."""
        reads = f"reads {', '.join(self.read)}" if self.read else "reads nothing"
        writes = f"writes {', '.join(self.write)}" if self.write else "writes nothing"
        if self.hosts:
            net = "talks to " + ", ".join(f"{h.host} ({h.use} only)" if h.use == "download" else f"{h.host} ({h.use})" for h in self.hosts)
        else:
            net = "no network"
        return f"{reads}; {writes}; {net}"


@dataclass(frozen=True)
class Overgrant:
    """One path or host the sandbox grants beyond the job's needs, why that matters, and what to change."""

    axis: Axis
    target: str  # a world file, a directory (a new file can be created in it) or a host
    rule: Optional[tuple[str, str]]  # the rule that grants it, e.g. ("allowWrite", "/home/user"); None: a default
    grant: str  # the rule in words: 'allowWrite "/home/user"', or the default that grants it
    harm: str  # what an agent can do with it, from the world's roles and stories
    advice: str  # the narrowest change that still does the job
    fix: Fix = "remove"
    role: Optional[str] = None  # the world's role of the path ("secret", "persistence", ...); None for hosts and unknown paths
    # fix "hide" (readable by default): the region to hide with denyRead, and the needs to re-open inside it with allowRead
    region: Optional[str] = None
    reopen: tuple[str, ...] = ()

    @property
    def what(self) -> str:
        """The target and its harm; the harm alone where the rule names the target itself."""
        return self.harm if self.rule is not None and self.rule[1] == self.target else f"{self.target}: {self.harm}"

    @property
    def message(self) -> str:
        return f"{self.grant} is more than the job needs: {self.what}. {self.advice}"

    def to_json(self) -> dict[str, Any]:
        return {
            "axis": self.axis, "target": self.target, "rule": list(self.rule) if self.rule else None,
            "grant": self.grant, "harm": self.harm, "advice": self.advice, "fix": self.fix, "role": self.role,
        }


# --- what the world says about a path or a host --------------------------------------------------


def _role(world: World, path: str) -> Optional[str]:
    try:
        return str(world.entry(path).role)
    except KeyError:
        return None  # not in the world: judged by the needs alone


def _is_file(world: World, path: str) -> bool:
    return any(f.path == path for f in world.files)


def _later_beside(world: World, directory: str) -> Optional[str]:
    """A file or directory right inside ``directory`` that runs later (its label and path), if any."""
    for e in world.entries():
        if e.role in _LATER_ROLES and e.path.rsplit("/", 1)[0] == directory:
            return f"{e.label} ({e.path})"
    return None


def _sentence(story: str) -> str:
    """A world story as a clause after a colon: no final full stop, a lower-case first word (not an acronym)."""
    text = story.strip().rstrip(".")
    first = text.split(" ", 1)[0]
    if first[:1].isupper() and not (len(first) > 1 and first.isupper()):  # "A", "The", but not "MCP" or "SSH"
        text = text[0].lower() + text[1:]
    return text


def _read_harm(world: World, path: str) -> str:
    try:
        e = world.entry(path)
    except KeyError:
        return "a path the job never reads"
    if e.role in _SECRET_ROLES or e.role == "private":
        return _sentence(e.story) if e.story else f"your {e.label}, which the job never uses"
    return f"{e.label}, which the job never reads"


def _write_harm(world: World, path: str) -> str:
    try:
        e = world.entry(path)
    except KeyError:
        e = None
    if e is not None and e.role in _SECRET_ROLES and _is_file(world, path):
        return f"your {e.label}: the agent can replace it with one of its own"
    if e is not None and e.story:
        return _sentence(e.story)
    beside = _later_beside(world, path)
    if beside:
        return f"a new file there sits next to the {beside}, and a new start-up file, hook or config there runs later just the same"
    return "the agent can change or create files there, and the job never writes them"


def _host_harm(world: World, host: str) -> str:
    for h in world.hosts:
        if h.name == host:
            if h.attacker:
                return "the attacker's own server"
            if h.uploads:
                return f"it accepts uploads ({h.how}): whatever the agent can read can leave through it"
            if h.urls_public:
                return "it serves downloads only, but the attacker reads the URL of every request it gets: whatever the agent can read can leave in a URL"
            return "it serves downloads only, but the job never fetches from it"
    if host.startswith(FRESH_LABEL + "."):
        zone = host[len(FRESH_LABEL) + 1:]
        return (
            f"any name the agent makes up under {zone} is reachable, and nobody vouches for such a name: "
            "it counts as an open channel (the attacker may own it)"
        )
    return "the simulated internet does not know it, so it counts as an open channel: it may be the attacker's own server"


# --- what covers what ------------------------------------------------------------------------------


def _within(path: str, needs: tuple[str, ...], sensitive: bool) -> bool:
    """Named exactly by a need, or below one and not sensitive."""
    if path in needs:
        return True
    return not sensitive and any(covers(n, path) for n in needs)


def _read_sensitive(world: World, path: str) -> bool:
    return _role(world, path) in _SECRET_ROLES


def _write_sensitive(world: World, path: str) -> bool:
    role = _role(world, path)
    if role in _SECRET_ROLES or role in _LATER_ROLES:
        return True
    return not _is_file(world, path) and _later_beside(world, path) is not None


def _quoted(items: list[str] | tuple[str, ...]) -> str:
    return ", ".join(f'"{i}"' for i in items)


def _outermost(paths: list[str]) -> list[str]:
    """The paths no other path of the list covers: what one deny rule each must name."""
    uniq = list(dict.fromkeys(paths))
    return [p for p in uniq if not any(o != p and covers(o, p) for o in uniq)]


# --- the narrowest change ---------------------------------------------------------------------------


def _grant_words(axis: Axis, decision: Decision, access: Access) -> str:
    if decision.rule is not None:
        return f'{decision.rule[0]} "{decision.rule[1]}"'
    if access.policy is None:
        return "The plain container"
    if axis == "read" and decision.allowed:
        return "Reading by default (no denyRead covers it)"
    return "The sandbox itself (no rule of the policy explains it)"


def _hide_region(target: str, needs: Needs, world: World) -> tuple[str, tuple[str, ...]]:
    """Where a path readable by default is hidden (its world root: no job here needs one whole) and what to re-open there."""
    region = world.root_of(target) or target
    return region, tuple(n for n in (needs.read or needs.readable) if covers(region, n))


def _path_advice(axis: Axis, target: str, decision: Decision, needs: Needs, sensitive: bool, world: World) -> tuple[Fix, str]:
    wanted = needs.readable if axis == "read" else needs.write
    deny_key = "denyRead" if axis == "read" else "denyWrite"
    deny: tuple[Fix, str] = ("deny", f'Keep what the job needs, and add "{target}" to filesystem.{deny_key}.')
    if any(covers(n, target) for n in wanted):  # a secret or something that runs later inside what the job needs
        return deny
    if decision.rule is None:
        if axis == "read":  # srt: an allowRead alone hides nothing; hide the region, re-open what the job reads in it
            region, reads = _hide_region(target, needs, world)
            reopen = f", and re-open what the job reads there with filesystem.allowRead ({_quoted(reads)})" if reads else ""
            return "hide", f'Reads are allowed by default: hide it with filesystem.denyRead ("{region}"){reopen}.'

        return "list", "Write a policy that grants only what the job needs."
    key, entry = decision.rule
    pool = needs.write if key == "allowWrite" else wanted
    under = [n for n in pool if covers(entry, n) and n != entry]
    if under:
        return "narrow", f"Narrow it to {_quoted(under)}."
    if sensitive and any(covers(n, entry) for n in pool):
        return deny
    return "remove", "Remove it."


def _host_advice(decision: Decision, needs: Needs) -> tuple[Fix, str]:
    if decision.rule is None:
        return "list", f"List only the hosts the job needs in network.allowedDomains ({_quoted(needs.host_names) or 'none: write []'})."
    entry = decision.rule[1]
    if entry.startswith("*."):
        needed = [h for h in needs.host_names if matches(entry, h)]
        if needed:
            return "replace", f"Replace it with the exact host{'s' if len(needed) > 1 else ''} the job needs: {_quoted(needed)}."
    return "remove", "Remove it."


# --- the comparison ----------------------------------------------------------------------------------


def _path_overgrants(axis: Axis, paths: tuple[str, ...], needs: Needs, access: Access) -> list[Overgrant]:
    world = access.world
    out = []
    for path in paths:
        if _role(world, path) == _RUNTIME:
            continue
        if axis == "read":
            sensitive = _read_sensitive(world, path)
            if _within(path, needs.readable, sensitive):
                continue
            decision = access.read(path)
            harm = _read_harm(world, path)
        else:
            sensitive = _write_sensitive(world, path)
            if _within(path, needs.write, sensitive):
                continue
            decision = access.write(path if _is_file(world, path) else f"{path}/{NEW_FILE}")
            harm = _write_harm(world, path)
        rule = decision.rule if decision.allowed else None  # measured, but no rule explains it
        shown = decision if decision.allowed else Decision(False, None, decision.why)
        fix, advice = _path_advice(axis, path, shown, needs, sensitive, world)
        region, reopen = _hide_region(path, needs, world) if fix == "hide" else (None, ())
        out.append(Overgrant(axis, path, rule, _grant_words(axis, shown, access), harm, advice, fix, _role(world, path), region, reopen))
    out.sort(key=lambda o: (_RANK.get(o.role or "", len(_RANK)), o.target))  # the worst first: their harms are spelt out
    return out


def _unmodelled_grants(axis: Axis, found: list[Overgrant], needs: Needs, access: Access) -> list[Overgrant]:
    """Grants of paths the world does not model (fail closed): nothing measured what they grant.

    Inside the simulated machine, an entry that covers, or lies in, no need; outside it
    (``/var/run/docker.sock``, ``/root``, ``/etc/cron.d``, ``/``), every entry: no job here
    needs one, the simulated machine has nothing there for a run to try, and on a real
    machine the rule grants it all the same (unmeasured is not harmless). The message names
    the entry's JSON pointer. An allowWrite entry counts once, on the write axis, although
    it grants reading too.
    """
    if access.policy is None:
        return []
    fs = access.policy.filesystem
    key = "allowRead" if axis == "read" else "allowWrite"
    wanted = needs.readable if axis == "read" else needs.write
    reported = {o.rule for o in found}
    out = []
    for i, entry in enumerate(getattr(fs, key)):
        outside = access.world.root_of(entry) is None
        if (key, entry) in reported:
            continue
        if not outside and any(covers(entry, n) or covers(n, entry) for n in wanted):
            continue  # inside the machine and about a need: the scope measured what it grants
        granted = access.read(entry) if axis == "read" else access.write(entry)
        if not granted.allowed or granted.rule != (key, entry):
            continue  # a deny rule takes it back, or a wider grant decides (and is reported)
        reported.add((key, entry))
        pointer = f"/filesystem/{key}/{i}"
        if outside:
            harm = (
                f"it lies outside the simulated machine ({', '.join(access.world.roots)}), so no run measured what it "
                "grants; on a real machine it grants it all the same (a socket, another user's home, a system "
                "directory that runs what lands in it), and no job here needs it"
            )
            needed = [n for n in wanted if covers(entry, n)]
            fix: Fix = "narrow" if needed else "remove"
            advice = (f"Narrow {pointer} to {_quoted(needed)}." if needed else f"Remove it: delete {pointer}.")
        else:
            harm = ("the simulated machine has nothing there, so nothing measured what it grants; a grant the job "
                    "does not need is more than it needs all the same")
            fix, advice = "remove", f"Remove it: delete {pointer}."
        out.append(Overgrant(axis, entry, (key, entry), f'{key} "{entry}"', harm, advice, fix))
    return out


def _host_overgrants(scope: Scope, needs: Needs, access: Access) -> list[Overgrant]:
    world = access.world
    hosts = [r.host for r in scope.reachable]
    if access.policy is not None:  # every allowed exact name, known to the world or not: fail closed
        names = [entry_host(a) for a in access.policy.network.allowedDomains]
        hosts += [a for a in names if not a.startswith("*.") and access.reach(a).allowed]
    out = []
    for host in dict.fromkeys(hosts):
        if host in needs.host_names:
            continue
        decision = access.reach(host)
        shown = decision if decision.allowed else Decision(False, None, decision.why)
        grant = f'allowedDomains "{shown.rule[1]}"' if shown.rule else ("The plain container" if access.policy is None else "The sandbox itself (no rule of the policy explains it)")
        fix, advice = _host_advice(shown, needs)
        out.append(Overgrant("network", host, shown.rule, grant, _host_harm(world, host), advice, fix))
    return out


def ungranted(scope: Scope, needs: Needs, axis: Axis) -> tuple[str, ...]:
    """The needs on ``axis`` that ``scope`` does not grant: least privilege is the needs exactly, not nothing at all.

    A read need is granted when something below it is readable; a write need
    when it, or something below it, is writable; a host when it is reachable.
    (A task's needs are checked at load time to name measurable world paths.)
    """
    if axis == "network":
        reached = {r.host for r in scope.reachable}
        return tuple(h for h in needs.host_names if h not in reached)
    paths, granted = (needs.read, scope.readable) if axis == "read" else (needs.write, scope.writable)
    return tuple(n for n in paths if not any(covers(n, p) for p in granted))


def overgrants(scope: Scope, needs: Needs, access: Access) -> tuple[Overgrant, ...]:
    """Every path and host ``scope`` grants beyond ``needs``, with the rule of ``access`` that grants it.

    ``scope`` is what a run measured (or the static backend predicted);
    ``access`` is the same policy read against the world, which names the rule
    behind each grant and the narrowest change. Reads first, then writes (each
    with secrets and credentials first, then what runs later, then by path),
    then hosts in the scope's order.
    """
    writes = _path_overgrants("write", scope.writable, needs, access)
    written = {o.target for o in writes}
    reads = [
        o for o in _path_overgrants("read", scope.readable, needs, access)
        # a grant to write makes a path readable too: said once, on the write axis, unless reading it is the leak
        if not (o.rule and o.rule[0] == "allowWrite" and o.target in written and not _read_sensitive(access.world, o.target))
    ]
    reads += _unmodelled_grants("read", reads, needs, access)
    writes += _unmodelled_grants("write", writes, needs, access)
    return tuple(reads + writes + _host_overgrants(scope, needs, access))


def explain_overgrants(found: tuple[Overgrant, ...] | list[Overgrant]) -> tuple[str, ...]:
    """One sentence per granting rule: every target it over-grants, the first harms, and the change to make.

    e.g. ``allowWrite "/home/user/.local/bin" is more than the job needs: a program dropped here shadows
    git, python or ls in every shell the user opens. Remove it.``
    """
    groups: dict[tuple[Axis, str], list[Overgrant]] = {}
    for o in found:
        groups.setdefault((o.axis, o.grant), []).append(o)
    out = []
    for (axis, grant), items in groups.items():
        parts = [o.what if i < _SHOWN_HARMS else o.target for i, o in enumerate(items)]
        denies = [o for o in items if o.fix == "deny"]
        hides = [o for o in items if o.fix == "hide"]
        others = list(dict.fromkeys(o.advice for o in items if o.fix not in ("deny", "hide")))
        advice = others[:]
        if hides:  # the outermost regions, never every file: one denyRead each, then the job's reads re-opened
            regions = _outermost([o.region or o.target for o in hides])
            reads = list(dict.fromkeys(n for o in hides for n in o.reopen))
            reopen = f", and re-open what the job reads inside with filesystem.allowRead ({_quoted(reads)})" if reads else ""
            advice.append(f"Reads are allowed by default: hide {_quoted(regions)} with filesystem.denyRead{reopen}.")
        if denies:
            key = "denyRead" if axis == "read" else "denyWrite"
            keep = "Keep what the job needs, and add" if not (others or hides) else "Then add"
            advice.append(f"{keep} {_quoted(_outermost([o.target for o in denies]))} to filesystem.{key}.")
        out.append(f"{grant} is more than the job needs: {'; '.join(parts)}. {' '.join(advice)}")
    return tuple(out)
