"""What a learner should know of sandbox-runtime's rules for one policy, as warnings with the entry they concern.

A policy means in Sandbox Lab what it means to srt 0.0.83 (``access.py``), so
these are not differences between two readings: each is a pattern srt accepts
whose effect surprises people (an ``allowRead`` that restricts nothing, the same
path named in two lists, a grant of a path that does not exist yet), or a place
where the lab's simulated machine stands in for a real one (an IP literal, the
machine's own loopback). Each warning says what srt does and how to write the
policy so that it means what its author wants.

``RULES`` is the one table of which pattern gives which message. Its causes are
slugs shared with ``docs/srt-differences.json`` where the cross-check measured
the behaviour.

srt's list of always write-protected files and folders lives in
``core/mandatory.py`` (re-exported here for callers that name it).

Pure: reads nothing but the package's world.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from grader.core.access import Access, access_for
from grader.protocol.domains import is_ipv4
from grader.core.errors import Problem, json_pointer
from grader.core.mandatory import SRT_DIRS, SRT_FILES, protect_target, srt_protects
from grader.core.paths import covers
from grader.core.policy import Policy
from grader.core.world import World, load_world

__all__ = ["RULES", "SRT_DIRS", "SRT_FILES", "SRT_VERSION", "Rule", "protect_target", "srt_differences", "srt_protects", "srt_warnings"]

SRT_VERSION = "0.0.83"  # the version measured (tools/srt/package-lock.json); other versions may differ
PREFIX = f"[srt {SRT_VERSION}] "

# (JSON pointer, the fields of the rule's message)
Hit = tuple[str, dict[str, str]]


@dataclass(frozen=True)
class _Ctx:
    """A policy read against the world, with what every detector asks of it."""

    policy: Policy
    world: World
    access: Access
    existing: frozenset[str]  # every path of the world present when a sandbox starts

    def exists(self, path: str) -> bool:
        return path in self.existing

    def nearest_existing(self, path: str) -> str:
        """The deepest existing directory above ``path`` (at worst its world root)."""
        parent = path
        while parent not in self.existing and parent.count("/") > 1:
            parent = parent.rsplit("/", 1)[0]
        return parent if parent in self.existing else (self.world.root_of(path) or "/")


def _ptr(key: str, index: int) -> str:
    section = "network" if key.endswith("Domains") else "filesystem"
    return json_pointer((section, key, index))


def _quoted(paths: list[str]) -> str:
    return ", ".join(f'"{p}"' for p in paths)


# --- detectors: each yields where a rule applies and the fields of its message ----------------


def _allow_read_alone(c: _Ctx) -> Iterator[Hit]:
    # The old allow-list reading: an allowRead no denyRead surrounds re-opens nothing, because nothing is hidden there.
    fs = c.policy.filesystem
    alone = [(i, a) for i, a in enumerate(fs.allowRead) if not any(covers(d, a) for d in fs.denyRead)]
    if not alone:
        return
    readable = [f.path for f in c.world.loot if c.access.read(f.path).allowed]
    if not readable:
        return
    regions = [r for r in c.world.roots if not any(covers(d, r) for d in fs.denyRead)]
    for i, a in alone:
        yield _ptr("allowRead", i), {
            "path": a,
            "secrets": ", ".join(readable[:4]) + (f" and {len(readable) - 4} more" if len(readable) > 4 else ""),
            "deny": _quoted(regions),
        }


def _allow_read_wins(c: _Ctx) -> Iterator[Hit]:
    fs = c.policy.filesystem
    for i, d in enumerate(fs.denyRead):
        if d in fs.allowRead and c.exists(d):
            yield _ptr("denyRead", i), {"path": d}


def _allow_write_reopens_read(c: _Ctx) -> Iterator[Hit]:
    fs = c.policy.filesystem
    for i, e in enumerate(fs.allowWrite):
        if e in fs.denyRead and c.exists(e):
            yield _ptr("allowWrite", i), {"path": e}


def _deny_write_wins(c: _Ctx) -> Iterator[Hit]:
    fs = c.policy.filesystem
    for i, e in enumerate(fs.allowWrite):
        outer = [d for d in fs.denyWrite if covers(d, e)]
        if outer:
            yield _ptr("allowWrite", i), {"path": e, "deny": outer[0]}


# What a directory must not hold for check to advise granting it whole: widening a grant
# to make the tools agree must never open a secret or something that runs later.
_NEVER_WIDEN_OVER = frozenset({"secret", "credential", "persistence", "agent-config"})


def _create_first(c: _Ctx, parent: str) -> str:
    held = [f"{e.path} ({e.label})" for e in c.world.entries() if e.role in _NEVER_WIDEN_OVER and covers(parent, e.path)]
    if not held:
        return f'grant the directory that will hold it ("{parent}"), or create the path before starting srt.'
    return (
        f'create the path before starting srt. Do not grant the directory that would hold it ("{parent}") '
        f"instead: it also holds {', '.join(held[:3])}{' and more' if len(held) > 3 else ''}, which the agent could then "
        "change."
    )


def _missing_write_target(c: _Ctx) -> Iterator[Hit]:
    fs = c.policy.filesystem
    for i, e in enumerate(fs.allowWrite):
        if c.world.root_of(e) is None or c.exists(e):
            continue
        if any(covers(a, e) and c.exists(a) for a in fs.allowWrite):
            continue  # an existing directory above it is granted: srt lets the job create it there
        parent = c.nearest_existing(e)
        yield _ptr("allowWrite", i), {"path": e, "parent": parent, "advice": _create_first(c, parent)}


def _missing_read_deny(c: _Ctx) -> Iterator[Hit]:
    fs = c.policy.filesystem
    for i, d in enumerate(fs.denyRead):
        if c.world.root_of(d) is None or c.exists(d):
            continue
        if any(o != d and covers(o, d) and c.exists(o) for o in fs.denyRead):
            continue  # an existing denied directory above it hides it
        yield _ptr("denyRead", i), {"path": d, "parent": c.nearest_existing(d)}


def _writable_by_entry(c: _Ctx, roles: tuple[str, ...], srt_list: bool = False) -> Iterator[tuple[int, list[tuple[str, str]]]]:
    """Per allowWrite entry (its first index): the world paths of ``roles`` it grants, with their labels.

    A path counts when the entry covers it, it is not hidden and no denyWrite covers it; with ``srt_list``,
    only paths on srt's own list, whether or not srt protects them from where it starts. Files come first;
    a directory is named only when none of its files is.
    """
    fs = c.policy.filesystem
    granted: dict[str, dict[str, str]] = {}
    for e in c.world.entries():
        if e.role not in roles or (srt_list and not srt_protects(e.path)):
            continue
        if any(covers(d, e.path) for d in fs.denyWrite) or not c.access.read(e.path).allowed:
            continue
        if srt_list:
            entry = next((a for a in sorted(fs.allowWrite, key=len, reverse=True) if covers(a, e.path) and c.access.binds(a)), None)
        else:
            w = c.access.write(e.path)
            entry = w.rule[1] if w.allowed and w.rule is not None and w.rule[0] == "allowWrite" else None
        if entry is not None:
            paths = granted.setdefault(entry, {})
            if not any(covers(e.path, p) for p in paths):
                paths[e.path] = e.label
    for entry, paths in granted.items():
        yield fs.allowWrite.index(entry), list(paths.items())


def _mandatory_shell_rc(c: _Ctx) -> Iterator[Hit]:
    for i, files in _writable_by_entry(c, ("persistence",), srt_list=True):
        yield _ptr("allowWrite", i), {
            "entry": c.policy.filesystem.allowWrite[i],
            "files": ", ".join(f"{p} ({label})" for p, label in files),
            "fix": _quoted(list(dict.fromkeys(protect_target(p) for p, _ in files))),
        }


def _settings_not_protected(c: _Ctx) -> Iterator[Hit]:
    for i, files in _writable_by_entry(c, ("agent-config",)):
        files = [(p, label) for p, label in files if p in {f.path for f in c.world.files}]  # its settings file, not a folder
        if files:
            yield _ptr("allowWrite", i), {
                "entry": c.policy.filesystem.allowWrite[i],
                "files": ", ".join(p for p, _ in files),
                "fix": _quoted([p for p, _ in files]),
            }


def _ip_literal(c: _Ctx) -> Iterator[Hit]:
    for i, entry in enumerate(c.policy.network.allowedDomains):
        if is_ipv4(entry):
            yield _ptr("allowedDomains", i), {"entry": entry}


def _loopback(c: _Ctx) -> Iterator[Hit]:
    for i, entry in enumerate(c.policy.network.allowedDomains):
        if entry == "localhost" or (is_ipv4(entry) and entry.startswith("127.")):
            yield _ptr("allowedDomains", i), {"entry": entry}


# --- the table ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """One pattern srt treats differently, the cause behind it, and the message a learner gets."""

    id: str
    cause: str  # a slug of docs/srt-differences.json where the corpus measured it there
    detect: Callable[[_Ctx], Iterator[Hit]]
    message: str  # str.format template over the detector's fields: what srt does, then how to make both agree


RULES: tuple[Rule, ...] = (
    Rule(
        "allow-read-alone", "allow-read-alone", _allow_read_alone,
        'allowRead "{path}" is inside no denyRead, so it restricts nothing: srt reads everything by default, and '
        "allowRead only re-opens paths inside a denyRead. As written, {secrets} stay readable. To make only what you "
        "listed readable, hide the regions around it with denyRead (here {deny}) and keep allowRead \"{path}\" to "
        "re-open it.",
    ),
    Rule(
        "allow-read-wins", "allow-read-wins", _allow_read_wins,
        'denyRead "{path}" names the same path as allowRead "{path}": srt lets allowRead take precedence, so it stays '
        "readable and this denyRead hides nothing. Name each path in one list only: remove it from allowRead to hide it "
        "(a denyRead strictly inside an allowRead does hide).",
    ),
    Rule(
        "allow-write-reopens-read", "allow-write-reopens-read", _allow_write_reopens_read,
        'allowWrite "{path}" names the same path as denyRead "{path}": srt on Linux binds the allowWrite path back over '
        "the denied one, readable and writable, so this denyRead hides nothing. Name each path in one list only: remove "
        "it from allowWrite to hide it.",
    ),
    Rule(
        "deny-write-wins", "deny-write-wins", _deny_write_wins,
        'allowWrite "{path}" lies inside denyWrite "{deny}": srt lets denyWrite take precedence, so this grant makes '
        "nothing writable. Grant the writable paths themselves and deny only paths inside a grant.",
    ),
    Rule(
        "missing-write-target", "missing-path-at-start", _missing_write_target,
        'allowWrite "{path}" names a path that does not exist when the sandbox starts (a job creates it). srt (Linux) '
        "applies a rule only to a path that exists at start, so this grant binds nothing and the write fails "
        '("Read-only file system"). So that the job can write it, {advice}',
    ),
    Rule(
        "missing-read-deny", "missing-path-at-start", _missing_read_deny,
        'denyRead "{path}" names a path that does not exist when the sandbox starts. srt (Linux) hides only what exists '
        "at start, so a file created there later (even by the sandboxed command, where it may write) is readable. Deny a "
        'directory that exists ("{parent}") if hiding all of it is acceptable, or create the path before starting srt.',
    ),
    Rule(
        "mandatory-shell-rc", "mandatory-shell-rc", _mandatory_shell_rc,
        'allowWrite "{entry}" covers {files}. srt refuses writes to shell start-up files and the like (.bashrc, .profile, '
        ".gitconfig, .mcp.json, ...), .git/hooks, .git/config and editor and agent folders (.vscode, .idea, "
        ".claude/commands, .claude/agents), but only in the directory srt starts in and up to 3 levels below it: "
        "started in /home/user (as graded here) it blocks ~/.bashrc but not /project/.git/hooks, started in /project "
        "(as Claude Code is) the reverse. Do not rely on where it starts: add {fix} to denyWrite.",
    ),
    Rule(
        "settings-not-protected", "settings-not-protected", _settings_not_protected,
        'allowWrite "{entry}" makes {files} (the sandbox\'s own settings) writable. srt does not protect its own '
        "settings file (it is not on srt's list of protected files), so the agent can rewrite it and choose the rules "
        "of its next sandbox. Add {fix} to denyWrite.",
    ),
    Rule(
        "ip-literal-reachable", "ip-literal-reachable", _ip_literal,
        'allowedDomains "{entry}" is an IP address. On a real machine srt\'s proxy connects to that very address (a '
        "private address reaches the local network, 169.254.169.254 a cloud's metadata service with the machine's "
        "credentials). The simulated internet does not know it, so Sandbox Lab counts it as the attacker's own server. "
        "List host names only.",
    ),
    Rule(
        "loopback-direct", "loopback-direct", _loopback,
        'allowedDomains "{entry}" names the machine itself. srt never sends it through a proxy: its own proxy '
        "connects to it on the machine srt runs on, reaching every service listening there (and its sandbox's "
        "NO_PROXY sends ordinary clients for it into the sandbox's own, empty network instead). Sandbox Lab cannot "
        "stand in for your machine: it counts the name as the attacker's own server and does not run such a policy "
        "under the real srt. Remove it.",
    ),
)


def srt_differences(policy: Policy, world: Optional[World] = None) -> tuple[tuple[str, Problem], ...]:
    """Each note of srt 0.0.83's rules that applies to ``policy``, as (cause, warning), in ``RULES`` order."""
    w = world or load_world()
    ctx = _Ctx(policy, w, access_for(policy, w), frozenset(w.directories()) | {f.path for f in w.files})
    return tuple(
        (rule.cause, Problem(pointer, PREFIX + rule.message.format(**fields)))
        for rule in RULES
        for pointer, fields in rule.detect(ctx)
    )


def srt_warnings(policy: Policy, world: Optional[World] = None) -> tuple[Problem, ...]:
    """Warnings, each with the JSON pointer of the entry concerned: what to know of srt 0.0.83's rules for this policy."""
    return tuple(p for _, p in srt_differences(policy, world))
