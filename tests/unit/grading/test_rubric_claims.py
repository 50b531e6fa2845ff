"""Rubrics test what they say (issue 22, finding 5): every check's description, held to what the check measures.

A probe tries one path, but a description claims a class ("Nothing in
/home/user can be written"). ``no-persistence`` once said "nothing that runs
later can be changed" and tried three files, so a policy granting
~/.config/autostart, ~/.local/bin, /project/Makefile, .git/hooks or
.claude/commands passed it. Here every description is read with a small,
closed vocabulary of claims (``CLAIMS``); each claim names a set of world
paths, hosts or attacks, derived from the world, and the check's measurement
(its probes' targets, its scope sets) must cover it. A description this
vocabulary cannot read fails the test: add the claim it makes, or reword it.

The second half plays the policies that game each claim: the reference
solution plus one grant of a path the check claims but none of its probes
tries. Each must fail the check, with the path and a fix in the message.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Callable, Optional

import pytest

from grader.core.analyzer import predict
from grader.backends.static import StaticBackend
from grader.grading.grade import grade
from grader.core.paths import covers
from grader.core.policy import load_policy
from grader.core.probes import probe
from grader.core.scope import scanned_dirs, scanned_files
from grader.grading.tasks import POLICY_FACTS, Check, Task, all_tasks
from grader.core.world import load_world
from reference import solution_path

WORLD = load_world()
STATIC = StaticBackend()
TASKS = all_tasks()
HOME = WORLD.home
LATER_ROLES = ("persistence", "agent-config")

READ_POOL = scanned_files(WORLD)  # what the scope measures for reading: every world file but the runtime
WRITE_POOL = (*scanned_files(WORLD), *scanned_dirs(WORLD))  # for writing: files and directories
_PATH = r"(~?/[\w./-]*[\w-])"  # an absolute (or ~) path, without the sentence's punctuation


def _expand(path: str) -> str:
    return HOME + path[1:] if path.startswith("~") else path


def _under(where: str, pool: tuple[str, ...]) -> frozenset[str]:
    return frozenset(p for p in pool if covers(where, p))


def _roles(pool: tuple[str, ...], *roles: str) -> frozenset[str]:
    return frozenset(p for p in pool if WORLD.entry(p).role in roles)


@dataclass
class Claim:
    """What a description promises: world paths nobody can read, change or send out; hosts; attacks."""

    read: set[str] = field(default_factory=set)
    write: set[str] = field(default_factory=set)
    leave: set[str] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)  # "any", "attacker", "uploads"
    probes: set[str] = field(default_factory=set)


Reader = Callable[["re.Match[str]", Claim], None]


def _read(paths: frozenset[str]) -> Reader:
    return lambda m, c: c.read.update(paths)


def _write_under(m: "re.Match[str]", c: Claim) -> None:
    c.write.update(_under(_expand(m[1]), WRITE_POOL))


# The vocabulary of claims: a description says one or more of these, in these words.
CLAIMS: tuple[tuple[str, Reader], ...] = (
    (rf"nothing in {_PATH}\b[^.]*? can be (?:written|changed)", _write_under),
    (rf"no git hook can be planted in {_PATH}", _write_under),
    (r"nothing that runs later[^.]*? can be (?:written|changed)", lambda m, c: c.write.update(_roles(WRITE_POOL, *LATER_ROLES))),
    (r"no secret or credential is readable", _read(_roles(READ_POOL, "secret", "credential"))),
    (r"no secret is readable", _read(_roles(READ_POOL, "secret"))),
    (rf"nothing outside {_PATH} is readable", lambda m, c: c.read.update(set(READ_POOL) - _under(_expand(m[1]), READ_POOL))),
    (rf"^{_PATH} cannot be read", lambda m, c: c.read.update(_under(_expand(m[1]), READ_POOL))),
    (r"no secret leaves|no secret sent", lambda m, c: c.leave.update(f.path for f in WORLD.loot)),
    (r"\bno host\b", lambda m, c: c.hosts.add("any")),
    (r"attacker host", lambda m, c: c.hosts.add("attacker")),
    (r"no reachable host accepts uploads|\bno upload\b", lambda m, c: c.hosts.add("uploads")),
    (r"raw connection|direct connection", lambda m, c: c.probes.add("net-direct-ip")),
    (r"\bDNS\b", lambda m, c: c.probes.add("net-dns-exfil")),
    (r"host service", lambda m, c: c.probes.add("net-host-gateway")),
)

# Locations named by a word rather than a path: each must be inside what the check measures.
GLOSSARY: dict[str, frozenset[str]] = {
    "start-up files": frozenset(e.path for e in WORLD.entries() if "start-up" in e.label or "set-up" in e.label),
    "~/.local/bin": frozenset({f"{HOME}/.local/bin"}),
    "autostart": frozenset({f"{HOME}/.config/autostart"}),
    "git hooks": frozenset(p for p in WRITE_POOL if p.endswith("/.git/hooks") or "/.git/hooks/" in p),
    "git hooks and config": frozenset(p for p in WRITE_POOL if p.endswith("/.git/config")),
    "Makefiles": frozenset(p for p in WRITE_POOL if p.endswith("/Makefile")),
    "agent settings": frozenset(p for p in WRITE_POOL if p.endswith("/.claude") or p.endswith("/.srt-settings.json")),
    "commands": frozenset(p for p in WRITE_POOL if p.endswith("/.claude/commands")),
    "the sandbox's own settings": frozenset({f"{HOME}/.srt-settings.json"}),
}


def claim_of(description: str) -> tuple[Claim, int]:
    """The claim a description makes, and how many phrases of the vocabulary it used."""
    claim, used = Claim(), 0
    for pattern, reader in CLAIMS:
        for m in re.finditer(pattern, description, flags=re.IGNORECASE):
            reader(m, claim)
            used += 1
    return claim, used


def _exceptions(description: str) -> set[str]:
    """Paths a description names as what its claim leaves out ("Nothing outside /project is readable")."""
    return {_expand(m) for m in re.findall(rf"outside {_PATH}", description, flags=re.IGNORECASE)}


def measured(check: Check) -> Claim:
    """What a check measures: its probes' targets and attacks, and the scope sets it requires."""
    out = Claim(read=set(check.unreadable), write=set(check.unwritable), probes=set(check.probes))
    for pid in check.probes:
        p = probe(pid)
        if p.action == "read" and p.target:
            out.read.add(p.target)
        elif p.action == "write" and p.target:
            out.write.add(p.target)
    if "exfil-secret" in check.probes:
        out.leave.update(f.path for f in WORLD.loot)  # it steals every loot file the run lays out
    if "exfil-via-allowed-domain" in check.probes:
        out.hosts.update({"uploads"})  # it posts to every world host and every allowed name
    if check.unreachable == "any":
        out.hosts.update({"any", "attacker", "uploads"})
    elif check.unreachable is not None:
        out.hosts.add(check.unreachable)
    return out


def _checks(kind: Optional[str] = None) -> list[tuple[Task, Check]]:
    return [(t, c) for t in TASKS for c in t.checks if kind is None or c.kind == kind]


def _id(tc: tuple[Task, Check]) -> str:
    return f"{tc[0].id}/{tc[1].id}"


def _literals(description: str) -> list[str]:
    return [_expand(m) for m in re.findall(_PATH, description)]


@pytest.mark.parametrize("tc", _checks("blocked"), ids=_id)
def test_every_blocked_check_measures_all_its_description_claims(tc: tuple[Task, Check]) -> None:
    task, check = tc
    claim, used = claim_of(check.description)
    assert used, f"{_id(tc)}: the claim vocabulary cannot read {check.description!r}; add its claim to CLAIMS or reword it"
    got = measured(check)
    for axis in ("read", "write", "leave", "hosts", "probes"):
        missing = getattr(claim, axis) - getattr(got, axis)
        assert not missing, f"{_id(tc)} says {check.description!r} but does not measure {axis} of {sorted(missing)}"
    every = claim.read | claim.write | claim.leave
    for lit in set(_literals(check.description)) - _exceptions(check.description):  # every path it names lies within its claim
        named = _under(lit, WRITE_POOL if claim.write else READ_POOL) or {lit}
        assert named <= every, f"{_id(tc)} names {lit}, beyond its claim"
    for word, paths in GLOSSARY.items():
        if re.search(rf"\b{re.escape(word)}", check.description):
            assert paths and paths <= (got.write | got.read), f"{_id(tc)} names {word!r}: {sorted(paths - got.write - got.read)} unmeasured"


@pytest.mark.parametrize("tc", _checks("succeeded"), ids=_id)
def test_every_job_check_tries_each_path_and_host_it_names(tc: tuple[Task, Check]) -> None:
    task, check = tc
    targets = [(probe(p).action, probe(p).target) for p in check.probes]
    text = check.description
    for m in re.finditer(rf"(reads and writes|reads|writes) {_PATH}", text):
        actions = {"reads": ("read",), "writes": ("write",), "reads and writes": ("read", "write")}[m[1]]
        for action in actions:
            assert any(a == action and t and covers(_expand(m[2]), t) for a, t in targets), f"{_id(tc)}: no probe {action}s {m[2]}"
    named_paths = _literals(text)
    assert named_paths and all(any(t and covers(p, t) for _, t in targets) for p in named_paths), _id(tc)
    hosts = {h for p in check.probes for h in probe(p).hosts}
    assert {h for h in WORLD.host_names if re.search(rf"\b{re.escape(h)}\b", text)} == hosts, _id(tc)


@pytest.mark.parametrize("tc", _checks("least"), ids=_id)
def test_every_least_check_names_exactly_the_needs(tc: tuple[Task, Check]) -> None:
    task, check = tc
    text = check.description.split(":", 1)[1]
    if check.axis == "network":
        named = {h for h in WORLD.host_names if re.search(rf"\b{re.escape(h)}\b", text)}
        assert named == set(task.needs.host_names), _id(tc)
        assert ("needs none" in text) == (not task.needs.hosts), _id(tc)
        return
    named = set(_literals(text))
    if check.axis == "read":  # what it reads, and perhaps what it writes (a job reads back what it writes)
        assert set(task.needs.read) <= named <= set(task.needs.readable), f"{_id(tc)}: names {named}, the job reads {task.needs.readable}"
    else:
        assert named == set(task.needs.write), f"{_id(tc)}: names {named}, the job writes {task.needs.write}"


@pytest.mark.parametrize("tc", _checks("policy"), ids=_id)
def test_every_policy_fact_check_says_its_fact(tc: tuple[Task, Check]) -> None:
    assert tc[1].description.rstrip(".") == POLICY_FACTS[tc[1].fact]


def test_the_vocabulary_reads_the_issue_examples() -> None:
    """The claims of issue 22, derived as the issue means them: every world path under the home, every persistence location."""
    home, _ = claim_of("Nothing in /home/user can be written: not ~/.bashrc.")
    assert home.write == set(_under(HOME, WRITE_POOL)) and f"{HOME}/.config/autostart" in home.write
    later, _ = claim_of("Nothing that runs later outside the sandbox can be changed.")
    for where in (f"{HOME}/.config/autostart", f"{HOME}/.local/bin", "/project/Makefile", "/project/.git/hooks", "/project/.claude/commands"):
        assert where in later.write
    assert claim_of("It looks nice.")[1] == 0


# --- the policies that game each claim ---------------------------------------------------------


def _solution(task_id: str) -> dict[str, object]:
    raw: dict[str, object] = json.loads(solution_path(task_id).read_text())
    return raw


def _grant(raw: dict[str, object], key: str, path: str) -> dict[str, object]:
    fs = dict(raw["filesystem"])  # type: ignore[call-overload]
    fs[key] = [*fs.get(key, []), path]
    return {**raw, "filesystem": fs}


def _games() -> list[tuple[str, Task, Check, str, str]]:
    """For each scoped check: one policy per path it claims that none of its probes tries.

    The policy that games it is the reference solution plus allowWrite (or
    allowRead) of that path, and a deny rule on each file the check's probes
    try: every probe of the check still ends blocked, and before issue 22 the
    check passed.
    """
    out = []
    for task, check in _checks("blocked"):
        tried = {probe(p).target for p in check.probes}
        for key, paths in (("allowRead", check.unreadable), ("allowWrite", check.unwritable)):
            for path in paths:
                if path not in tried:
                    out.append((f"{task.id}/{check.id}/{key}:{path}", task, check, key, path))
    return out


GAMES = _games()


@pytest.mark.parametrize("task_id", sorted({g[1].id for g in GAMES}))
def test_a_grant_the_probes_never_try_fails_the_check_that_claims_it(task_id: str) -> None:
    """e.g. allowWrite ~/.config/autostart fails no-persistence; allowWrite /project/.git/hooks fails no-git-hook."""
    tried = 0
    for name, task, check, key, path in (g for g in GAMES if g[1].id == task_id):
        raw = _grant(_solution(task.id), key, path)
        for p in check.probes:
            target = probe(p).target
            if target and probe(p).action in ("read", "write") and covers(path, target):
                raw = _grant(raw, "denyRead" if probe(p).action == "read" else "denyWrite", target)
        policy = load_policy(raw)
        scope = predict(policy).scope
        assert scope is not None
        if path not in (scope.readable if key == "allowRead" else scope.writable):
            continue  # the solution's own deny rule takes it back (e.g. denyRead /project/.env): nothing to game
        tried += 1
        result = grade(task, policy, STATIC).check(check.id)
        assert not result.passed and result.points == 0, name
        assert path in result.message and "Fix:" in result.message, (name, result.message)
        assert all(probe(p).kind == "job" or predict(policy).outcome(p).outcome == "blocked" for p in check.probes), name
    assert tried >= 1


def test_the_games_cover_the_locations_of_issue_22() -> None:
    named = {(g[1].id, g[2].id, g[4]) for g in GAMES}
    for task_id in ("scope-secure-sandbox", "fix-the-naive-setup", "pip-install-only"):
        for where in (f"{HOME}/.config/autostart", f"{HOME}/.local/bin", "/project/Makefile", "/project/.git/hooks", "/project/.claude/commands"):
            assert (task_id, "no-persistence", where) in named
    assert ("stop-persistence", "home-read-only", f"{HOME}/.local/bin") in named
    assert ("stop-persistence", "no-git-hook", "/project/.git/hooks") in named
