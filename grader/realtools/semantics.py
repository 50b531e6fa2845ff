"""Grading under a real tool's semantics: the Sandbox Lab policy that enforces what srt or Claude Code would enforce.

A learner who deploys a policy to sandbox-runtime (srt) or to Claude Code is
protected by what *that* tool enforces, not by Sandbox Lab's reading of the
same JSON. ``enforced(policy, "srt")`` rewrites the policy into the lab policy
whose outcomes are srt's, rule by rule, each rewrite naming its cause (a slug
of ``docs/srt-differences.json`` and ``srt_notes.RULES``, or one of
``CAUSES`` below). ``"lab"`` is the identity.

**Why a rewrite, and not a second ``Access``.** Everything downstream of the
policy (the plan's mounts, the static analyzer, the scope, the needs and every
judge and fix) already consumes a ``Policy`` read by ``access.py``. A rewrite
keeps that one statement of the rules and changes nothing downstream: the
static backend predicts the rewritten policy, and the Docker backend enforces
exactly that policy, so the two still agree by construction (and the Docker
run checks the claim). A second set of rules inside ``Access`` would have to be
threaded through the plan, the findings of every backend and each judge. Each
rewrite is small, listed, and cited, so the board can say which difference
changed which verdict (``steps``).

**The semantics.** ``srt``: the policy file given to srt as its settings,
unchanged (Sandbox Lab's policies are srt's settings shape; ``export
--as-written``), srt started in the world's home as the cross-check runs it.
``claude-code``: the same rules carried one for one into Claude Code's
``sandbox`` block (paths ``//``-absolute, which is what they mean here); Claude Code runs its sandbox from its working
directory, the project the policy works in (``machine.primary_project``): that
directory is writable by default, and srt's mandatory protections are found
there instead of in the home. Measured differences (``docs/srt-differences.md``):

* ``missing-path-at-start``: a grant or a read deny of a path that does not
  exist when the sandbox starts binds nothing: dropped (write denies do cover
  missing paths, by srt's README, and stay);
* ``allow-read-wins``, ``allow-write-reopens-read``: a ``denyRead`` of the same
  path as an ``allowRead`` or ``allowWrite`` hides nothing there: dropped;
* ``allow-only-reads``: srt reads everything by default and ``allowRead`` only
  re-allows inside a ``denyRead``: an ``allowRead`` no ``denyRead`` covers
  restricts nothing and is dropped; where one does re-allow, the world's roots
  no ``denyRead`` covers are added to ``allowRead`` so that they stay readable
  (the lab reads a non-empty ``allowRead`` as "only these"; not ``"/"``, which
  the lab would count as a grant beyond the simulated machine);
* ``deny-write-wins``: an ``allowWrite`` inside a ``denyWrite`` is read-only:
  it is denied too;
* ``mandatory-shell-rc``: srt's always-on write protections in its start
  directory (and existing files up to 3 levels below): denied for writing.

Fail closed: a difference no lab rule can express is an error with its reason
(``loopback-direct``: srt dials the machine itself), or, where the lab's
verdict already counts what it opens, a caveat (``ip-literal-reachable``;
Claude Code's prompt for unlisted hosts, graded as if you answer no). Never
silently ignored.

Pure. Imports: errors, paths, policy, world, domains, machine, srt_notes. Nothing downstream.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, Literal, Optional

from grader.core.domains import is_ipv4, split_port
from grader.core.errors import PolicyError, Problem, json_pointer
from grader.core.paths import covers
from grader.core.policy import Policy, load_policy
from grader.core.world import World, load_world
from grader.realtools.machine import primary_project
from grader.realtools.srt_notes import SRT_DIRS, SRT_FILES, SRT_VERSION, protect_target, srt_protects

__all__ = ["ADVICE", "CAUSES", "SEMANTICS", "Caveat", "Enforced", "Rewrite", "Semantics", "enforced", "start_directory"]

Semantics = Literal["lab", "srt", "claude-code"]
SEMANTICS: tuple[Semantics, ...] = ("lab", "srt", "claude-code")

# Causes of docs/srt-differences.json and srt_notes.RULES, plus the two this module adds, one line each: what the tool does.
CAUSES: dict[str, str] = {
    "cwd-writable": "Claude Code lets sandboxed commands write its working directory by default; allowWrite only adds paths",
    "missing-path-at-start": f"srt {SRT_VERSION} (Linux) applies a rule only to a path that exists when the sandbox starts",
    "allow-read-wins": "srt lets allowRead take precedence over a denyRead of the same path",
    "allow-write-reopens-read": "srt binds an allowWrite path back, readable and writable, over a denyRead of the same path",
    "allow-only-reads": "srt reads everything by default; allowRead only re-allows inside a denyRead",
    "deny-write-wins": "srt lets denyWrite take precedence over an allowWrite inside it",
    "mandatory-shell-rc": "srt always write-protects shell start-up files, .git/hooks, .git/config and editor and agent "
                          "folders in the directory it starts in (and existing ones up to 3 levels below)",
    "loopback-direct": "srt dials localhost and 127.0.0.0/8 itself, on the machine it runs on",
    "ip-literal-reachable": "srt's proxy connects to an allowed IP address itself",
    "unlisted-host-prompt": "Claude Code may ask you whether to allow a host missing from allowedDomains",
}

# Where a fix worded in the lab's rules would not work under the tool: said once, under the rewrites.
ADVICE: dict[str, str] = {
    "allow-only-reads": "allowRead restricts nothing by itself there, so a fix that lists paths in allowRead to make "
                        "everything else unreadable does not work: hide a directory with denyRead and re-allow what the "
                        'job reads inside it with allowRead (e.g. denyRead "/project" with allowRead "/project/src").',
    "cwd-writable": "the project Claude Code runs in is writable whatever allowWrite says: keep what must not change "
                    "there read-only with denyWrite, and hide its secrets with denyRead of the files themselves.",
}

_DEPTH = 3  # srt's mandatoryDenySearchDepth: existing files found up to this many levels below the start directory


@dataclass(frozen=True)
class Rewrite:
    """One rule of the policy changed to what the tool enforces, and why."""

    cause: str  # a key of CAUSES
    pointer: str  # the learner's entry it concerns ("" when the tool adds a rule of its own)
    change: str  # in the lab's words, e.g. 'drop denyRead "/project"'
    why: str  # one sentence: what the tool does with it

    def to_json(self) -> dict[str, str]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.pointer + ': ' if self.pointer else ''}{self.change}: {self.why} ({self.cause})"


@dataclass(frozen=True)
class Caveat:
    """A difference no lab rule expresses and no verdict here depends on: said, never dropped."""

    cause: str
    pointer: str
    message: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.pointer + ': ' if self.pointer else ''}{self.message} ({self.cause})"


@dataclass(frozen=True)
class Enforced:
    """A policy as a tool enforces it: the equivalent lab policy, every rewrite and caveat, and the policy after each cause."""

    semantics: Semantics
    original: Policy
    policy: Policy
    rewrites: tuple[Rewrite, ...] = ()
    caveats: tuple[Caveat, ...] = ()
    steps: tuple[tuple[str, Policy], ...] = ()  # (cause, the policy once that cause's rewrites are applied), in order


_Lists = dict[str, list[str]]
_FS = ("allowRead", "denyRead", "allowWrite", "denyWrite")


@dataclass(frozen=True)
class _Ctx:
    original: Policy
    world: World
    semantics: Semantics
    existing: frozenset[str]

    def pointer(self, key: str, entry: str) -> str:
        entries = getattr(self.original.filesystem, key)
        return json_pointer(("filesystem", key, entries.index(entry))) if entry in entries else ""


def start_directory(policy: Policy, semantics: Semantics, world: Optional[World] = None) -> str:
    """Where the tool starts the sandboxed command: the home for srt (as measured), the project for Claude Code."""
    w = world or load_world()
    return primary_project(policy, w) if semantics == "claude-code" else w.home


# --- the steps, in order: each returns the new lists and its rewrites -------------------------------


def _cwd_writable(c: _Ctx, fs: _Lists) -> tuple[_Lists, list[Rewrite]]:
    if c.semantics != "claude-code":
        return fs, []
    cwd = start_directory(c.original, c.semantics, c.world)
    if any(covers(a, cwd) for a in fs["allowWrite"]):
        return fs, []
    return {**fs, "allowWrite": [*fs["allowWrite"], cwd]}, [Rewrite(
        "cwd-writable", "", f'add allowWrite "{cwd}"',
        f"Claude Code runs in the project ({cwd}) and lets sandboxed commands write their working directory by default")]


def _missing_at_start(c: _Ctx, fs: _Lists) -> tuple[_Lists, list[Rewrite]]:
    out, notes = dict(fs), []
    for key in ("allowRead", "allowWrite", "denyRead"):  # write denies cover missing paths (srt mounts a placeholder)
        keep = []
        for e in fs[key]:
            if c.world.root_of(e) is not None and e not in c.existing:
                notes.append(Rewrite("missing-path-at-start", c.pointer(key, e), f'drop {key} "{e}"',
                                     "the path does not exist when the sandbox starts, so srt's rule binds nothing there"))
            else:
                keep.append(e)
        out[key] = keep
    return out, notes


def _same_path_reads(cause: str, key: str, what: str) -> Callable[[_Ctx, _Lists], tuple[_Lists, list[Rewrite]]]:
    def step(c: _Ctx, fs: _Lists) -> tuple[_Lists, list[Rewrite]]:
        dropped = [d for d in fs["denyRead"] if d in fs[key]]
        notes = [Rewrite(cause, c.pointer("denyRead", d), f'drop denyRead "{d}"',
                         f'{key} "{d}" names the same path, and srt {what}') for d in dropped]
        return {**fs, "denyRead": [d for d in fs["denyRead"] if d not in dropped]}, notes
    return step


def _allow_only_reads(c: _Ctx, fs: _Lists) -> tuple[_Lists, list[Rewrite]]:
    if not fs["allowRead"]:
        return fs, []
    reopen = [a for a in fs["allowRead"] if any(covers(d, a) for d in fs["denyRead"])]
    notes = [Rewrite("allow-only-reads", c.pointer("allowRead", a), f'drop allowRead "{a}"',
                     "srt reads everything by default and allowRead only re-allows inside a denyRead; no denyRead covers "
                     "it, so it restricts nothing")
             for a in fs["allowRead"] if a not in reopen]
    # Re-allows remain, so the lab would read everything else as unreadable: list the world's roots no denyRead
    # covers, which srt reads by default (not "/": a rule beyond the world is an over-grant of its own here).
    open_roots = [r for r in c.world.roots if not any(covers(d, r) for d in fs["denyRead"]) and r not in reopen]
    if reopen and open_roots:
        notes.append(Rewrite("allow-only-reads", "", "add allowRead " + ", ".join(f'"{r}"' for r in open_roots),
                             "srt reads everything no denyRead hides; the lab reads a non-empty allowRead as \"only these\", "
                             "so the roots of the simulated machine that no denyRead covers are listed to stay readable"))
        reopen += open_roots
    return {**fs, "allowRead": reopen}, notes


def _deny_write_wins(c: _Ctx, fs: _Lists) -> tuple[_Lists, list[Rewrite]]:
    inside = [e for e in fs["allowWrite"] if e not in fs["denyWrite"] and any(d != e and covers(d, e) for d in fs["denyWrite"])]
    notes = [Rewrite("deny-write-wins", c.pointer("allowWrite", e), f'add denyWrite "{e}"',
                     f'it lies inside denyWrite "{next(d for d in fs["denyWrite"] if covers(d, e))}", and srt lets denyWrite '
                     "take precedence") for e in inside]
    return {**fs, "denyWrite": [*fs["denyWrite"], *inside]}, notes


def _protected(c: _Ctx) -> list[str]:
    """What srt write-protects, started in ``start_directory``: its list there, and existing matches up to 3 levels below."""
    s = start_directory(c.original, c.semantics, c.world)
    out = [f"{s}/{f}" for f in SRT_FILES] + [f"{s}/{d}" for d in SRT_DIRS] + [f"{s}/.git/config"]
    for path in sorted(c.existing):
        if covers(s, path) and path != s and path[len(s):].count("/") <= _DEPTH and srt_protects(path):
            out.append(protect_target(path))
    return list(dict.fromkeys(out))


def _mandatory(c: _Ctx, fs: _Lists) -> tuple[_Lists, list[Rewrite]]:
    s = start_directory(c.original, c.semantics, c.world)
    added: list[str] = []
    for p in _protected(c):
        granted = any(covers(a, p) or covers(p, a) for a in fs["allowWrite"])
        # after deny-write-wins, a denyWrite covering p keeps it (and every grant inside it) read-only already
        if not granted or any(covers(d, p) for d in fs["denyWrite"] + added):
            continue
        added.append(p)
        added += [a for a in fs["allowWrite"] if a != p and covers(p, a) and a not in added]  # denyWrite wins in srt
    notes = [Rewrite("mandatory-shell-rc", "", "add denyWrite " + ", ".join(f'"{p}"' for p in added),
                     f"srt, started in {s}, always write-protects these, whatever allowWrite says")] if added else []
    return {**fs, "denyWrite": [*fs["denyWrite"], *[p for p in added if p not in fs["denyWrite"]]]}, notes


_STEPS: tuple[tuple[str, Callable[[_Ctx, _Lists], tuple[_Lists, list[Rewrite]]]], ...] = (
    ("cwd-writable", _cwd_writable),
    ("missing-path-at-start", _missing_at_start),
    ("allow-read-wins", _same_path_reads("allow-read-wins", "allowRead", "lets allowRead take precedence")),
    ("allow-write-reopens-read", _same_path_reads(
        "allow-write-reopens-read", "allowWrite", "binds the allowWrite path back over it, readable and writable")),
    ("allow-only-reads", _allow_only_reads),
    ("deny-write-wins", _deny_write_wins),
    ("mandatory-shell-rc", _mandatory),
)


# --- the network: nothing is rewritten; what no rule can express fails closed or is said ----------


def _network(policy: Policy, semantics: Semantics) -> tuple[Caveat, ...]:
    caveats: list[Caveat] = []
    errors: list[Problem] = []
    for i, entry in enumerate(policy.network.allowedDomains):
        pointer = json_pointer(("network", "allowedDomains", i))
        host, _ = split_port(entry)
        if host == "localhost" or (is_ipv4(host) and host.startswith("127.")):
            errors.append(Problem(pointer, (
                f'"{entry}" names the machine itself: under --semantics {semantics}, srt dials it directly on the machine '
                "it runs on, reaching every service listening there, and the lab's simulated internet cannot stand for "
                "that machine (loopback-direct). Remove it to grade under this semantics.")))
        elif is_ipv4(host):
            caveats.append(Caveat("ip-literal-reachable", pointer, (
                f'"{entry}" is an IP address: srt\'s proxy connects to that very address on a real machine (allowed IP '
                "literals skip its resolved-address check). The lab already counts it as the attacker's own server, so "
                "the grade counts what it opens.")))
    if errors:
        raise PolicyError(f"this policy (under --semantics {semantics})", errors)
    if semantics == "claude-code":
        caveats.append(Caveat("unlisted-host-prompt", "/network/allowedDomains", (
            "Claude Code may ask you whether to allow a host missing from allowedDomains (unless "
            "sandbox.network.strictAllowlist is true); graded as if you always answer no.")))
    return tuple(caveats)


def enforced(policy: Policy, semantics: Semantics, world: Optional[World] = None) -> Enforced:
    """The lab policy with the outcomes ``semantics`` gives ``policy``; ``PolicyError`` where no rule can say it."""
    if semantics not in SEMANTICS:
        raise ValueError(f"unknown semantics {semantics!r}; choose one of: {', '.join(SEMANTICS)}")
    if semantics == "lab":
        return Enforced("lab", policy, policy)
    w = world or load_world()
    caveats = _network(policy, semantics)
    ctx = _Ctx(policy, w, semantics, frozenset(w.directories()) | {f.path for f in w.files})
    fs: _Lists = {k: list(getattr(policy.filesystem, k)) for k in _FS}
    rewrites: list[Rewrite] = []
    steps: list[tuple[str, Policy]] = []
    raw = policy.normalize()
    for cause, step in _STEPS:
        fs, notes = step(ctx, fs)
        if notes:
            rewrites += notes
            steps.append((cause, load_policy({**raw, "filesystem": {k: list(dict.fromkeys(v)) for k, v in fs.items()}},
                                             name=f"the policy under {semantics}")))
    final = steps[-1][1] if steps else policy
    return Enforced(semantics, policy, final, tuple(rewrites), caveats, tuple(steps))
