"""Where the real sandbox-runtime (srt 0.0.83) would treat a policy differently from Sandbox Lab, as warnings.

Learners write policies in the shape of srt's settings file, and Sandbox Lab's
verdicts follow its own policy language (``access.py``). Running the corpus
through both (``bench/srt_crosscheck.py``, ``docs/srt-differences.md``) found a
few measured differences. A learner who trusts ``sandbox-lab check`` where a
policy relies on one of them would be misled about the real tool, so each such
pattern gets a warning that says what srt does and how to write the policy so
both agree.

``RULES`` is the one table of which pattern gives which message. Its causes are
the slugs of ``docs/srt-differences.json`` (a unit test keeps the two in step),
plus a few the corpus cannot show as a verdict difference but the
documentation measured: ``deny-write-wins``, ``settings-not-protected`` (a
common false belief: srt does not protect its own settings) and
``ip-literal-reachable``; and ``loopback-direct``, a policy the srt backend
refuses to run (srt would dial the machine's own loopback).

srt's list of always write-protected files and folders (``SRT_FILES``,
``SRT_DIRS``, ``srt_protects``, ``protect_target``) is shared with
``semantics``, which grades a policy under srt's rules.

Pure: reads nothing but the package's world. Imports: access, domains, errors,
paths, policy, world. Nothing downstream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Optional

from grader.core.access import Access, access_for
from grader.core.domains import is_ipv4
from grader.core.errors import Problem, json_pointer
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


def _allow_read_wins(c: _Ctx) -> Iterator[Hit]:
    # Only the same path differs: a denyRead strictly inside an allowRead stays hidden in srt too.
    fs = c.policy.filesystem
    for i, d in enumerate(fs.denyRead):
        if d in fs.allowRead and not c.access.read(d).allowed:
            yield _ptr("denyRead", i), {"path": d}


def _allow_write_reopens_read(c: _Ctx) -> Iterator[Hit]:
    # An allowWrite entry always covers itself, so only a denyRead of the same path can hide it.
    for i, e in enumerate(c.policy.filesystem.allowWrite):
        seen = c.access.read(e)
        if not seen.allowed and seen.rule is not None and seen.rule[0] == "denyRead":
            yield _ptr("allowWrite", i), {"path": e}


def _deny_write_wins(c: _Ctx) -> Iterator[Hit]:
    fs = c.policy.filesystem
    for i, e in enumerate(fs.allowWrite):
        outer = [d for d in fs.denyWrite if d != e and covers(d, e)]
        if outer and c.access.write(e).allowed:
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
        if c.world.root_of(e) is None or c.exists(e) or not c.access.write(e).allowed:
            continue
        if any(covers(a, e) and c.exists(a) for a in fs.allowWrite):
            continue  # an existing directory above it is granted: srt lets the job create it there
        parent = c.nearest_existing(e)
        yield _ptr("allowWrite", i), {"path": e, "parent": parent, "advice": _create_first(c, parent)}


def _missing_read_deny(c: _Ctx) -> Iterator[Hit]:
    fs = c.policy.filesystem
    for i, d in enumerate(fs.denyRead):
        if c.world.root_of(d) is None or c.exists(d) or c.access.read(d).allowed:
            continue
        if any(o != d and covers(o, d) and c.exists(o) for o in fs.denyRead):
            continue  # an existing denied directory above it hides it in srt too
        if fs.allowRead and not any(covers(g, d) for g in fs.allowRead + fs.allowWrite):
            continue  # the export denies its whole data root, which exists
        yield _ptr("denyRead", i), {"path": d, "parent": c.nearest_existing(d)}


# What srt refuses to write wherever it finds them below its working directory: DANGEROUS_FILES and
# getDangerousDirectories() in its sandbox-utils, plus .git/hooks and .git/config. Other persistence
# paths of the world (~/.local/bin, ~/.ssh/authorized_keys, a Makefile) are not on its list.
SRT_FILES = (".gitconfig", ".gitmodules", ".bashrc", ".bash_profile", ".zshrc", ".zprofile", ".profile", ".ripgreprc", ".mcp.json")
SRT_DIRS = (".vscode", ".idea", ".claude/commands", ".claude/agents", ".git/hooks")


def protect_target(path: str) -> str:
    """What to denyWrite for a path srt protects: the whole protected directory it lies in, else the file."""
    for d in SRT_DIRS:
        head, sep, _ = (path + "/").partition(f"/{d}/")
        if sep:
            return f"{head}/{d}"
    return path


def srt_protects(path: str) -> bool:
    inside = any(f"/{d}/" in path + "/" for d in SRT_DIRS)
    return inside or path.rsplit("/", 1)[-1] in SRT_FILES or path.endswith("/.git/config")


def _writable_by_entry(c: _Ctx, roles: tuple[str, ...], srt_list: bool = False) -> Iterator[tuple[int, list[tuple[str, str]]]]:
    """Per allowWrite entry (its first index): the world paths of ``roles`` it makes writable, with their labels.

    Files come first; a directory is named only when none of its files is. With ``srt_list``, only
    paths on srt's own list.
    """
    fs = c.policy.filesystem
    granted: dict[str, dict[str, str]] = {}
    for e in c.world.entries():
        if e.role not in roles or (srt_list and not srt_protects(e.path)):
            continue
        w = c.access.write(e.path)
        if w.allowed and w.rule is not None and w.rule[0] == "allowWrite":
            paths = granted.setdefault(w.rule[1], {})
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
        "allow-read-wins", "allow-read-wins", _allow_read_wins,
        'denyRead "{path}" names the same path as allowRead "{path}": Sandbox Lab hides it (on the same path deny '
        "wins); srt lets allowRead take precedence, so there the agent can read it. Name each path in one list only: "
        "remove it from allowRead to hide it in both tools (a denyRead strictly inside an allowRead stays hidden in "
        "both).",
    ),
    Rule(
        "allow-write-reopens-read", "allow-write-reopens-read", _allow_write_reopens_read,
        'allowWrite "{path}" names the same path as denyRead "{path}": Sandbox Lab hides it (deny wins, and a hidden '
        "path cannot be written); srt on Linux binds the allowWrite path back over the denied one, readable and "
        "writable, so there the agent can read it. Name each path in one list only: remove it from allowWrite to hide "
        "it in both tools.",
    ),
    Rule(
        "deny-write-wins", "deny-write-wins", _deny_write_wins,
        'allowWrite "{path}" lies inside denyWrite "{deny}": Sandbox Lab lets the agent write it (the most specific '
        "rule wins); srt lets denyWrite take precedence and keeps it read-only. Never put an allowWrite inside a "
        "denyWrite: nothing is writable unless allowWrite grants it, so grant the writable paths themselves and deny "
        "only paths inside a grant; then both tools agree.",
    ),
    Rule(
        "missing-write-target", "missing-path-at-start", _missing_write_target,
        'allowWrite "{path}" names a path that does not exist when the sandbox starts (a job creates it). Sandbox Lab '
        "lets the job create it; srt (Linux) applies a rule only to a path that exists at start, so this grant binds "
        'nothing and the write fails ("Read-only file system"). For both tools to agree, {advice}',
    ),
    Rule(
        "missing-read-deny", "missing-path-at-start", _missing_read_deny,
        'denyRead "{path}" names a path that does not exist when the sandbox starts. Sandbox Lab hides it whenever '
        "it appears; srt (Linux) hides only what exists at start, so a file created there later (even by the "
        'sandboxed command, where it may write) is readable under srt. For both tools to agree, deny a directory that '
        'exists ("{parent}") if hiding all of it is acceptable, or create the path before starting srt.',
    ),
    Rule(
        "mandatory-shell-rc", "mandatory-shell-rc", _mandatory_shell_rc,
        'allowWrite "{entry}" makes {files} writable, and Sandbox Lab has no exception for such files. srt refuses '
        "writes to shell start-up files and the like (.bashrc, .profile, .gitconfig, .mcp.json, ...), .git/hooks, "
        ".git/config and editor and agent folders (.vscode, .idea, .claude/commands, .claude/agents), but only in the directory srt starts "
        "in and up to 3 levels below it: started in /home/user it blocks ~/.bashrc but not /project/.git/hooks, "
        "started in /project the reverse. Do not rely on it: add {fix} to denyWrite so both tools refuse these writes.",
    ),
    Rule(
        "settings-not-protected", "settings-not-protected", _settings_not_protected,
        'allowWrite "{entry}" makes {files} (the sandbox\'s own settings) writable. srt does not protect its own '
        "settings file either (it is not on srt's list of protected files), so under srt too the agent can rewrite "
        "it and choose the rules of its next sandbox. Add {fix} to denyWrite so both tools refuse it.",
    ),
    Rule(
        "ip-literal-reachable", "ip-literal-reachable", _ip_literal,
        'allowedDomains "{entry}" is an IP address. The simulated internet does not know it, so Sandbox Lab counts '
        "it as the attacker's own server (fail closed); on a real machine srt's proxy connects to that very address "
        "(a private address reaches the local network, 169.254.169.254 a cloud's metadata service with the machine's "
        "credentials). List host names only, so both tools agree.",
    ),
    Rule(
        "loopback-direct", "loopback-direct", _loopback,
        'allowedDomains "{entry}" names the machine itself. srt never sends it through a proxy: its own proxy '
        "connects to it on the machine srt runs on, reaching every service listening there (and its sandbox's "
        "NO_PROXY sends ordinary clients for it into the sandbox's own, empty network instead). Sandbox Lab counts "
        "it as the attacker's own server and does not run such a policy under srt. Remove it, so both tools refuse it.",
    ),
)


def srt_differences(policy: Policy, world: Optional[World] = None) -> tuple[tuple[str, Problem], ...]:
    """Each place where srt 0.0.83 would treat ``policy`` differently, as (cause, warning), in ``RULES`` order."""
    w = world or load_world()
    ctx = _Ctx(policy, w, access_for(policy, w), frozenset(w.directories()) | {f.path for f in w.files})
    return tuple(
        (rule.cause, Problem(pointer, PREFIX + rule.message.format(**fields)))
        for rule in RULES
        for pointer, fields in rule.detect(ctx)
    )


def srt_warnings(policy: Policy, world: Optional[World] = None) -> tuple[Problem, ...]:
    """Warnings, each with the JSON pointer of the entry concerned, where srt 0.0.83 would differ from Sandbox Lab."""
    return tuple(p for _, p in srt_differences(policy, world))
