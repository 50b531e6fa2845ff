"""The capture-the-flag levels as data: ``grader/levels/NN-id.json``, read, validated and looked up.

A level is a fixed sandbox (a policy over the simulated world, or the plain
container) with its story, where its flag is planted, the nudges a miss may
get (never the answer), and its worked solution (``Solution``: the intended
channel and the other channels that would have worked), shown after a
capture or when the learner asks for it. The capstone (``policy: "yours"``)
runs under the learner's own policy, which must first do the level's job and
grant nothing more (``check_capstone``).

A level file is validated when it is loaded, as a policy is: an unknown key, a
path outside the world or a broken policy is a ``LevelError`` naming the JSON
pointer and a fix. Running and judging attacks is ``ladder``'s, which imports
this module; nothing here runs anything.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from grader.core.access import access_for
from grader.core.errors import LevelError, PolicyError, Problem, field_problem, json_pointer
from grader.core.execution import Job
from grader.core.jsonfile import json_problem
from grader.core.paths import covers
from grader.core.plan import RunPlan, build_plan
from grader.core.policy import Policy, parse_policy
from grader.core.world import World, load_world

__all__ = [
    "CAPSTONE",
    "CHANNELS",
    "DIFFICULTIES",
    "PLAIN_CONTAINER",
    "YOURS",
    "CapstoneJob",
    "Channel",
    "Difficulty",
    "Level",
    "Solution",
    "Uncapturable",
    "check_capstone",
    "level",
    "load_levels",
    "parse_level",
]

Channel = Literal["http", "tcp", "dns"]
CHANNELS: tuple[Channel, ...] = ("http", "tcp", "dns")
# how far a level is from the first idea a learner tries: its tag on the ladder
Difficulty = Literal["warm-up", "one idea", "two ideas", "correctly scoped", "capstone"]
DIFFICULTIES: tuple[Difficulty, ...] = ("warm-up", "one idea", "two ideas", "correctly scoped", "capstone")
PLAIN_CONTAINER = "plain container"
YOURS = "yours"  # the capstone's sandbox: the learner's own policy
_SLUG = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_FILE = re.compile(r"^(\d\d)-([a-z0-9-]+)\.json$")


@dataclass(frozen=True)
class Uncapturable:
    """The final level's honest outcome: after ``after`` attempts the hint is ``why``."""

    after: int
    why: str


@dataclass(frozen=True)
class CapstoneJob:
    """What the capstone's job needs: the learner's policy must grant these, and nothing more."""

    does: str
    read: tuple[str, ...]
    write: tuple[str, ...]
    hosts: tuple[str, ...]



@dataclass(frozen=True)
class Solution:
    """A level's worked solution, as PortSwigger's labs close: the attack the level was built around (``answer``),
    why that channel is open (``channel``), and the other channels that would have worked here too (``also``).

    Shown after a capture, or before one only when the learner asks for it (``course.reveals``); never as a hint: the
    ladder's hints are nudges, and no number of misses turns one into the answer."""

    answer: str
    channel: str
    also: tuple[str, ...] = ()


@dataclass(frozen=True)
class Level:
    """One rung of the ladder: a sandbox, where its flag is planted, the story, nudges in order, its lesson and its
    worked solution."""

    number: int
    id: str
    title: str
    story: str
    policy: Optional[Policy]  # None: the plain container, or the learner's own (``capstone``)
    flag_in: tuple[str, ...]
    hints: tuple[str, ...]
    teaches: str
    difficulty: Difficulty = "one idea"
    channels: tuple[Channel, ...] = CHANNELS
    next_session: bool = False  # the capture needs the grader to play the next session (a backdoor fires later)
    uncapturable: Optional[Uncapturable] = None
    flag_env: tuple[str, ...] = ()  # environment variables of the agent that hold the flag (no file does)
    signer: Optional[str] = None  # the challenge an SSH agent outside the sandbox signs: its signature is the prize
    capstone: Optional[CapstoneJob] = None  # the sandbox is the learner's policy for this job
    solution: Optional[Solution] = None  # every capturable level has one; the uncapturable level's is its ``why``

    @property
    def prize_name(self) -> str:
        """What must arrive, in the learner's words."""
        return "a signature only the SSH key makes" if self.signer is not None else "the flag"

    @property
    def debrief(self) -> str:
        """What the learner should take away: the lesson, and for the uncapturable level why nothing could leave."""
        return self.uncapturable.why if self.uncapturable is not None else self.teaches

    @property
    def item_id(self) -> str:
        """The progress record's id of this level, e.g. ``ctf:l01-plain-container``."""
        return f"ctf:l{self.number:02d}-{self.id}"

    @property
    def sandbox_json(self) -> Union[str, dict[str, Any]]:
        """The sandbox as a learner reads it: the policy's normal form, "plain container", or "yours"."""
        if self.capstone is not None:
            return YOURS
        return PLAIN_CONTAINER if self.policy is None else self.policy.normalize()

    def sandbox_text(self) -> str:
        if self.capstone is not None:
            return f"your own policy for this job: {self.capstone.does}"
        if self.policy is None:
            return "the plain container (home and projects mounted read-write, Docker's default network)"
        # one line per axis, empty lists left out: what the level grants, at a glance
        return "\n".join(f"{axis}: {json.dumps({k: v for k, v in rules.items() if v})}" for axis, rules in self.policy.normalize().items())

    def hint(self, attempts_before: int) -> str:
        """The nudge for a miss after ``attempts_before`` earlier attempts: the next in order, the last one repeated
        (never the answer: that is ``solution``, shown when asked); on an uncapturable level, once enough attempts
        were made, why nothing can be captured."""
        u = self.uncapturable
        if u is not None and attempts_before + 1 >= u.after:
            return u.why
        return self.hints[min(max(attempts_before, 0), len(self.hints) - 1)]

    def plan(self, world: Optional[World] = None, policy: Optional[Policy] = None) -> RunPlan:
        """The level's sandbox as a run plan, against ``world`` (default: the simulated world); the plan carries it.
        The capstone's is the learner's ``policy`` (checked: ``check_capstone``); other levels take none."""
        if self.capstone is not None:
            if policy is None:
                raise LevelError(f"level {self.number} is the capstone: it runs under your own policy. Write one for its "
                                 f"job ({self.capstone.does}) and pass it (`--policy my_policy.json`).")
            return build_plan(check_capstone(self, policy, world), world)
        if policy is not None:
            raise LevelError(f"level {self.number} has its own sandbox; only the capstone takes your policy.")
        return build_plan(self.policy, world)



# --- level files (JSON, validated with pydantic) ------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _UncapturableFile(_Strict):
    after: StrictInt = Field(ge=1, description="how many attempts before the hint explains why nothing can be captured, e.g. 3")
    why: str = Field(min_length=1, description="why no attack can capture this level, in the learner's words")


class _CapstoneFile(_Strict):
    does: str = Field(min_length=1, description="the job in one sentence, as the learner reads it")
    read: tuple[str, ...] = Field((), description="world paths the job reads, e.g. [\"/project/src\"]")
    write: tuple[str, ...] = Field((), description="world paths the job writes, e.g. [\"/project/out\"]")
    hosts: tuple[str, ...] = Field((), description="the exact hosts the job reaches, e.g. [\"cdn.jsdelivr.net\"]")


class _SolutionFile(_Strict):
    answer: str = Field(min_length=1, description="the intended attack, step by step: what the learner sees only after a capture or on request")
    channel: str = Field(min_length=1, description="why the intended channel is open on this level, in the learner's words")
    also: tuple[str, ...] = Field((), description="the other channels that would have captured this level too, one sentence each ([]: none)")


class _LevelFile(_Strict):
    number: StrictInt = Field(ge=1, description="the level's place on the ladder, 1 first; the file name starts with it (01-...)")
    id: str = Field(description='a slug, e.g. "naive-gist"; the file name ends with it')
    title: str = Field(min_length=1, description="a few words")
    story: str = Field(min_length=1, description="the scenario: whose sandbox, why it looks safe, where the flag is")
    policy: Union[str, dict[str, Any]] = Field(description='the sandbox: a policy object, "plain container", or "yours" (the capstone)')
    flag_in: tuple[str, ...] = Field(min_length=1, description='world files the flag is appended to, e.g. ["/home/user/.ssh/id_rsa"]')
    hints: tuple[str, ...] = Field(min_length=1, description="nudges in order, never the answer: a repeated miss may get the next one")
    solution: Optional[_SolutionFile] = Field(None, description="the worked solution (every level but the uncapturable one): shown after a capture, or when asked")
    teaches: str = Field(min_length=1, description="the one point of the course this level teaches")
    difficulty: Difficulty = Field(description='the level\'s tag: "warm-up", "one idea", "two ideas", "correctly scoped" or "capstone"')
    flag_env: tuple[str, ...] = Field((), description='environment variables the agent is started with that hold the flag, e.g. ["GITHUB_TOKEN"]')
    signer: Optional[str] = Field(None, min_length=8, description="an SSH agent outside the sandbox holds the key; what must arrive is its signature over this challenge")
    capstone: Optional[_CapstoneFile] = Field(None, description='the capstone\'s job (with "policy": "yours"): the learner\'s policy must grant it and nothing more')
    channels: tuple[Channel, ...] = Field(CHANNELS, min_length=1, description='which ways out count: "http", "tcp", "dns" (default: all)')
    next_session: StrictBool = Field(False, description="true when the capture happens in the next session, after the sandbox exits")
    uncapturable: Optional[_UncapturableFile] = Field(None, description="the final level only: why nothing can be captured")


def _problem_from(err: dict[str, Any]) -> Problem:
    loc = tuple(err["loc"])
    ptr = json_pointer(loc)
    kind = err["type"]
    if kind in ("extra_forbidden", "missing"):
        nested: dict[str, type[BaseModel]] = {"uncapturable": _UncapturableFile, "capstone": _CapstoneFile,
                                              "solution": _SolutionFile}
        model = nested.get(str(loc[0])) if len(loc) == 2 else _LevelFile if len(loc) == 1 else None
        return field_problem(ptr, kind, str(loc[-1]), model)
    if kind == "literal_error":
        return Problem(ptr, f"must be one of: {', '.join(DIFFICULTIES if loc[:1] == ('difficulty',) else CHANNELS)}.")
    if kind in ("too_short", "string_too_short"):
        return Problem(ptr, "must not be empty.")
    if kind in ("int_type", "greater_than_equal"):
        return Problem(ptr, "must be a whole number, at least 1.")
    if kind == "string_type":
        return Problem(ptr, "must be a string.")
    if kind == "bool_type":
        return Problem(ptr, "must be true or false.")
    return Problem(ptr, str(err["msg"]))


def parse_level(data: Any, source: str = "level", world: Optional[World] = None) -> Level:
    """Validate already-parsed level data; ``LevelError`` listing every problem, each with its JSON pointer."""
    w = world or load_world()
    head = f"{source} is not a valid level"
    try:
        raw = _LevelFile.model_validate(data)
    except ValidationError as exc:
        found = [_problem_from(e) for e in exc.errors(include_url=False)]  # type: ignore[arg-type]
        raise LevelError(f"{head} ({len(found)} problem{'s' if len(found) != 1 else ''})", found) from None
    problems: list[Problem] = []
    if not _SLUG.match(raw.id):
        problems.append(Problem("/id", f'"{raw.id}" must be a slug: lower-case words joined by "-", e.g. "naive-gist".'))
    policy: Optional[Policy] = None
    if isinstance(raw.policy, str):
        if raw.policy not in (PLAIN_CONTAINER, YOURS):
            problems.append(Problem("/policy", f'must be a policy object or "{PLAIN_CONTAINER}", not "{raw.policy}".'))
        elif (raw.policy == YOURS) != (raw.capstone is not None):
            problems.append(Problem("/capstone", f'the capstone has "policy": "{YOURS}" and a "capstone" job; give both or neither.'))
    else:
        try:
            policy = parse_policy(raw.policy, f"{source} /policy")
        except PolicyError as exc:
            problems += [Problem("/policy" + (p.pointer if p.pointer != "/" else ""), p.message) for p in exc.problems]
    files = {f.path for f in w.files}
    for i, path in enumerate(raw.flag_in):
        if path not in files:
            problems.append(Problem(json_pointer(("flag_in", i)), f'"{path}" is not a file of the simulated world (grader/world.json): plant the flag in one of its files.'))
    if len(set(raw.flag_in)) != len(raw.flag_in):
        problems.append(Problem("/flag_in", "lists a file twice; list each once."))
    if raw.uncapturable is not None and raw.next_session:
        problems.append(Problem("/uncapturable", "a level that cannot be captured plays no next session: drop one of the two."))
    if raw.uncapturable is not None and raw.uncapturable.after <= len(raw.hints):
        # the why replaces the hint from attempt ``after`` on: a smaller number hides the last hints for good
        problems.append(Problem("/uncapturable/after", f"must be more than the number of hints ({len(raw.hints)}), "
                                                       f"or the last hints are never shown: e.g. {len(raw.hints) + 1}."))
    if (raw.uncapturable is not None) != (raw.difficulty == "correctly scoped"):
        problems.append(Problem("/difficulty", '"correctly scoped" is the tag of the uncapturable level, and only of it.'))
    if (raw.solution is None) == (raw.uncapturable is None):
        problems.append(Problem("/solution", "every level but the uncapturable one has a worked solution (answer, channel, also), "
                                             "and the uncapturable one has none: its uncapturable/why is the debrief."))
    for i, hint in enumerate(raw.hints):
        # a hint is a nudge: no number of misses may reveal the answer, which is shown only when asked
        if raw.solution is not None and _same_text(hint, raw.solution.answer):
            problems.append(Problem(json_pointer(("hints", i)), "is the solution's answer: hints are nudges, never the answer "
                                                                "(the learner asks for the solution). Say less here."))
    if (raw.capstone is not None) != (raw.difficulty == "capstone"):
        problems.append(Problem("/difficulty", '"capstone" is the tag of the level with a "capstone" job, and only of it.'))
    for i, name in enumerate(raw.flag_env):
        try:
            Job(code="", env={name: "x"}).check(w)
        except ValueError:
            problems.append(Problem(json_pointer(("flag_env", i)), f'"{name}" is not a variable a level may set: an upper-case name '
                                                                   "that the run does not set itself, e.g. GITHUB_TOKEN."))
    if raw.capstone is not None:
        for key in ("read", "write"):
            for i, path in enumerate(getattr(raw.capstone, key)):
                if w.root_of(path) is None:
                    problems.append(Problem(json_pointer(("capstone", key, i)), f'"{path}" is outside the simulated machine ({", ".join(w.roots)}).'))
        for i, host in enumerate(raw.capstone.hosts):
            if host not in w.host_names:
                problems.append(Problem(json_pointer(("capstone", "hosts", i)), f'"{host}" is not a host of the simulated internet.'))
    if problems:
        raise LevelError(f"{head} ({len(problems)} problem{'s' if len(problems) != 1 else ''})", problems)
    u, c, sol = raw.uncapturable, raw.capstone, raw.solution
    return Level(
        number=raw.number, id=raw.id, title=raw.title, story=raw.story, policy=policy, flag_in=raw.flag_in,
        hints=raw.hints, teaches=raw.teaches, difficulty=raw.difficulty, channels=raw.channels,
        next_session=raw.next_session, uncapturable=Uncapturable(u.after, u.why) if u is not None else None,
        flag_env=raw.flag_env, signer=raw.signer,
        capstone=CapstoneJob(c.does, c.read, c.write, c.hosts) if c is not None else None,
        solution=Solution(sol.answer, sol.channel, sol.also) if sol is not None else None,
    )


def _same_text(hint: str, answer: str) -> bool:
    """Whether a hint gives the answer away: the same words (case and spacing aside), or one holds the other."""
    a, b = " ".join(hint.lower().split()), " ".join(answer.lower().split())
    return a == b or a in b or b in a


def check_capstone(lvl: Level, policy: Policy, world: Optional[World] = None) -> Policy:
    """The learner's policy for the capstone's job, checked as the static analyzer reads it: it must grant every path
    and host the job needs, and nothing else where the flag or a later session could be reached; ``LevelError``
    naming each problem (a JSON pointer and a fix) otherwise. Attacking a sandbox that is open is no capstone."""
    job = lvl.capstone
    if job is None:
        raise LevelError(f"level {lvl.number} is not the capstone; it has its own sandbox")
    w = world or load_world()
    a = access_for(policy, w)
    problems: list[Problem] = []
    for path in job.read:
        if not a.read(path).allowed:
            problems.append(Problem("/filesystem/allowRead", f"the job reads {path}, and your policy hides it: add \"{path}\"."))
    for path in job.write:
        if not a.write(path).allowed:
            problems.append(Problem("/filesystem/allowWrite", f"the job writes {path}, and your policy keeps it read-only: add \"{path}\"."))
    for host in job.hosts:
        if not a.reach(host).allowed:
            problems.append(Problem("/network/allowedDomains", f"the job reaches {host}, and your policy refuses it: add \"{host}\"."))

    def needed(path: str, paths: tuple[str, ...]) -> bool:
        return any(covers(p, path) for p in paths)

    def some(paths: list[str]) -> str:
        return ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")

    reads = [f.path for f in w.files if a.read(f.path).allowed and not needed(f.path, (*job.read, *job.write))]
    later = set(w.paths_with_role("persistence", "agent-config"))  # what runs later is named first: the worst grant
    writes = sorted((f.path for f in w.files if a.write(f.path).allowed and not needed(f.path, job.write)),
                    key=lambda p: p not in later)
    if reads:
        problems.append(Problem("/filesystem/denyRead", f"{some(reads)} can be read, and the job does not need them: "
                                                        "reads are open by default, so hide the regions that hold them with denyRead "
                                                        f"and re-open only {', '.join(job.read)} with allowRead."))
    if writes:
        problems.append(Problem("/filesystem/allowWrite", f"{some(writes)} can be changed, and the job does not need them: "
                                                          f"list only {', '.join(job.write)} in allowWrite."))
    fresh = f"x0fresh0x.{w.attacker.name}"  # stands for any name the agent makes up
    hosts = [("a name the attacker makes up" if h == fresh else h) for h in (*w.host_names, fresh)
             if a.reach(h).allowed and h not in job.hosts]
    if hosts:
        problems.append(Problem("/network/allowedDomains", f"{some(hosts)} can be reached, and the job does not need them: "
                                                           f"list only {', '.join(job.hosts)}."))
    if problems:
        raise LevelError(f"your policy for level {lvl.number} is not yet the one to attack ({len(problems)} problem"
                         f"{'s' if len(problems) != 1 else ''}): it must do the job and grant nothing more", problems)
    return policy


def _level_files() -> dict[str, str]:
    folder = resources.files("grader") / "levels"
    return {e.name: e.read_text(encoding="utf-8") for e in folder.iterdir() if e.name.endswith(".json")}


def _from_files(files: dict[str, str]) -> tuple[Level, ...]:
    levels: list[Level] = []
    for name in sorted(files):
        source = f"grader/levels/{name}"
        m = _FILE.match(name)
        if not m:
            raise LevelError(f'{source}: a level file is named NN-id.json, e.g. "02-naive-gist.json"')
        try:
            data = json.loads(files[name])
        except json.JSONDecodeError as exc:
            raise LevelError(f"{source}: {json_problem(exc)}") from None
        lvl = parse_level(data, source)
        if (lvl.number, lvl.id) != (int(m.group(1)), m.group(2)):
            raise LevelError(f"{source} describes level {lvl.number} {lvl.id!r}; the file name and the level must agree "
                             f"(rename it {lvl.number:02d}-{lvl.id}.json)")
        levels.append(lvl)
    numbers = [lv.number for lv in levels]
    if numbers != list(range(1, len(levels) + 1)):
        raise LevelError(f"grader/levels: the levels must be numbered 1, 2, 3, ... without gaps (found {numbers})")
    if levels and sum(1 for lv in levels if lv.uncapturable) != 1:
        raise LevelError('grader/levels: exactly one level is "uncapturable" (correctly scoped)')
    if sum(1 for lv in levels if lv.capstone) > 1 or any(lv.capstone for lv in levels[:-1]):
        raise LevelError("grader/levels: the capstone, if there is one, is the last level")
    return tuple(levels)


@lru_cache(maxsize=1)
def load_levels() -> tuple[Level, ...]:
    """Every level shipped with the package, in ladder order (read once; levels are immutable)."""
    return _from_files(_level_files())


CAPSTONE = "capstone"  # what names the capstone wherever a level is named, whatever its number


def level(key: Union[int, str]) -> Level:
    """The level numbered ``key`` (or with that id, or ``"capstone"``); ``LevelError`` naming the levels there are.

    Lessons, solutions and tests name a level by its id or as the capstone, never by a number that a level
    inserted before it would change."""
    levels = load_levels()
    if isinstance(key, str) and key.strip().isdigit():
        key = int(key)
    for lv in levels:
        if lv.number == key or lv.id == key or (key == CAPSTONE and lv.capstone is not None):
            return lv
    raise LevelError(f"unknown level {key!r}; the levels are 1 to {len(levels)}, by number, id or {CAPSTONE!r} "
                     "(list them with `sandbox-lab attack --list`)")
