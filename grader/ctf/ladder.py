"""The capture-the-flag ladder: its levels, as data in ``grader/levels/NN-id.json``, and the capture judgement.

In the other lessons the learner defends; here the learner attacks. Each level
is a fixed sandbox (a policy over the simulated world, or the plain container)
with a flag, ``FLAG{<hex>}``, fresh for every run and appended to one or more
world files of the run's world copy. The learner's Python runs in that sandbox
as the agent's tool would (``execution.Job``, run by a backend's ``execute``).

The level is captured only when the flag arrives where the attacker can read it
(``execution.sightings``: the attacker's server, an upload host, the attacker's
nameserver), proven by the simulated internet's logs; what the attack prints
decides nothing. A level may count only some channels (``channels``: the DNS
level's story is a firewall that logs every HTTP request and TCP connection).

A miss gets the next hint, picked by how many attempts came before (the caller
keeps that count: ``progress``). The final level is correctly scoped: it has
no reference attack, and after ``uncapturable.after`` attempts its hint says
why nothing can be captured.

A level file is validated when it is loaded, as a policy is: an unknown key, a
path outside the world or a broken policy is a ``LevelError`` naming the JSON
pointer and a fix.

Imports: errors, execution, outcomes, plan, policy, world, backends.base (the
protocol only). Nothing downstream (no progress, no widgets, no CLI).
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, ValidationError

from grader.backends.base import Backend
from grader.core.errors import BackendError, LevelError, PolicyError, Problem, field_problem, json_pointer
from grader.core.execution import Execution, Job, sightings
from grader.core.outcomes import SinkHit
from grader.core.plan import RunPlan, build_plan
from grader.core.policy import Policy, parse_policy
from grader.core.world import World, load_world

__all__ = [
    "CHANNELS",
    "PLAIN_CONTAINER",
    "STATIC_CANNOT_ATTACK",
    "AttackResult",
    "Channel",
    "Level",
    "Uncapturable",
    "attack",
    "build_job",
    "channel_of",
    "judge",
    "level",
    "load_levels",
    "new_flag",
    "parse_level",
]

Channel = Literal["http", "tcp", "dns"]
CHANNELS: tuple[Channel, ...] = ("http", "tcp", "dns")
PLAIN_CONTAINER = "plain container"
ATTACK_TIMEOUT_S = 20.0  # an attack is a short script; the sandbox is killed after this
STATIC_CANNOT_ATTACK = (
    "attacks cannot be predicted: the static backend judges a policy's fixed probes, not what arbitrary code does. "
    "A level is captured only by a real run whose sinks logged the flag: use the Docker backend "
    "(`--backend docker`; start an engine with `scripts/ensure-docker`, then `sandbox-lab setup`)."
)
_SLUG = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_FILE = re.compile(r"^(\d\d)-([a-z0-9-]+)\.json$")


@dataclass(frozen=True)
class Uncapturable:
    """The final level's honest outcome: after ``after`` attempts the hint is ``why``."""

    after: int
    why: str


@dataclass(frozen=True)
class Level:
    """One rung of the ladder: a sandbox, where its flag is planted, the story, hints in order, and its lesson."""

    number: int
    id: str
    title: str
    story: str
    policy: Optional[Policy]  # None: the plain container
    flag_in: tuple[str, ...]
    hints: tuple[str, ...]
    teaches: str
    channels: tuple[Channel, ...] = CHANNELS
    next_session: bool = False  # the capture needs the grader to play the next session (a backdoor fires later)
    uncapturable: Optional[Uncapturable] = None

    @property
    def item_id(self) -> str:
        """The progress record's id of this level, e.g. ``ctf:l01-plain-container``."""
        return f"ctf:l{self.number:02d}-{self.id}"

    @property
    def sandbox_json(self) -> Union[str, dict[str, Any]]:
        """The sandbox as a learner reads it: the policy's normal form, or "plain container"."""
        return PLAIN_CONTAINER if self.policy is None else self.policy.normalize()

    def sandbox_text(self) -> str:
        if self.policy is None:
            return "the plain container (home and projects mounted read-write, Docker's default network)"
        # one line per axis, empty lists left out: what the level grants, at a glance
        return "\n".join(f"{axis}: {json.dumps({k: v for k, v in rules.items() if v})}" for axis, rules in self.policy.normalize().items())

    def hint(self, attempts_before: int) -> str:
        """The hint for a miss after ``attempts_before`` earlier attempts: the next in order, the last one repeated;
        on an uncapturable level, once enough attempts were made, why nothing can be captured."""
        u = self.uncapturable
        if u is not None and attempts_before + 1 >= u.after:
            return u.why
        return self.hints[min(max(attempts_before, 0), len(self.hints) - 1)]

    def plan(self, world: Optional[World] = None) -> RunPlan:
        """The level's sandbox as a run plan, against ``world`` (default: the simulated world); the plan carries it."""
        return build_plan(self.policy, world)


@dataclass(frozen=True)
class AttackResult:
    """What one attack on one level did: captured or not, where the flag arrived (with the log that proves it), the
    attack's own output (capped by the backend), and the hint for a miss.

    ``captured`` is None when the run could not be judged: no sighting, and the evidence was cut or a recorder
    failed, so its silence shows no miss. That is an error (``error`` says why), never "not captured": it unlocks
    no hint and counts as no attempt.
    """

    level: Level
    captured: Optional[bool]
    sinks: tuple[SinkHit, ...]
    output: str
    hint: str
    flag: str
    backend: str
    timed_out: bool = False
    exit_code: Optional[int] = None
    elsewhere: tuple[SinkHit, ...] = ()  # the flag arrived, but by a channel this level does not count
    note: str = ""  # anything that limits what the run can prove (a recorder that failed, no replay)

    @property
    def error(self) -> str:
        """Why this run could not be judged ("" when it was: captured, or missed with the evidence read whole)."""
        return self.note if self.captured is None else ""

    def to_json(self) -> dict[str, Any]:
        """The contract's shape: ``{"level", "captured", "sinks": [{"host", "how", "evidence"}], "output", "hint"}``;
        a run that could not be judged has ``"captured": null`` and adds ``"error"`` (why) and ``"problems": []``."""
        data: dict[str, Any] = {"level": self.level.number, "captured": self.captured,
                                "sinks": [s.to_json() for s in self.sinks], "output": self.output, "hint": self.hint}
        if self.captured is None:
            data.update(error=f"could not judge the attack: {self.error}", problems=[])
        return data


def new_flag() -> str:
    """A fresh flag for one run: ``FLAG{`` + 24 random hex digits + ``}`` (never reused, never guessable)."""
    return "FLAG{" + secrets.token_hex(12) + "}"


def build_job(lvl: Level, code: str, flag: str) -> Job:
    """The learner's code as the agent's tool runs it, with the flag appended to each of the level's files;
    for a persistence level, the grader then plays the user's next session outside the sandbox."""
    return Job(code=code, plant={path: f"\n{flag}\n" for path in lvl.flag_in}, timeout_s=ATTACK_TIMEOUT_S,
               replay=lvl.next_session)


def channel_of(hit: SinkHit) -> Channel:
    """Which kind of channel a sighting came by: "http", "tcp" (raw TCP) or "dns"."""
    if hit.how == "DNS":
        return "dns"
    return "tcp" if hit.how.startswith("raw TCP") else "http"


def judge(lvl: Level, ex: Execution, flag: str, attempts_before: int = 0, *, world: World) -> AttackResult:
    """Captured when the flag arrived at a sink the attacker reads, by a channel the level counts; else the next hint.

    A sighting proves a capture whatever else failed (the flag is fresh and random); a miss needs the evidence read
    whole: where a recorder failed or a log was cut, ``captured`` is None (could not judge) and no hint is given.
    ``world`` is the one the attack ran against (its plan's)."""
    hits = sightings(ex, world, {"the flag": flag})
    counted = tuple(h for h in hits if channel_of(h) in lvl.channels)
    other = tuple(h for h in hits if channel_of(h) not in lvl.channels)
    note = ex.infra_problem
    captured: Optional[bool] = True if counted else (None if note else False)
    hint = lvl.hint(attempts_before) if captured is False else ""
    return AttackResult(
        level=lvl, captured=captured, sinks=counted, output=ex.output, hint=hint,
        flag=flag, backend=ex.backend, timed_out=ex.timed_out, exit_code=ex.exit_code, elsewhere=other, note=note,
    )


def attack(lvl: Level, code: str, backend: Backend, *, attempts_before: int = 0) -> AttackResult:
    """Run ``code`` in the level's sandbox with a fresh flag and judge it; ``BackendError`` where code cannot run."""
    if backend.name == "static":
        raise BackendError(STATIC_CANNOT_ATTACK)
    plan = lvl.plan()
    world = plan.world  # the plan carries its world: the job is checked and judged against the one it runs in
    flag = new_flag()
    job = build_job(lvl, code, flag)
    try:
        job.check(world)
    except ValueError as exc:
        raise LevelError(f"the attack cannot run: {exc}") from None
    ex = backend.execute(plan, job)
    return judge(lvl, ex, flag, attempts_before, world=world)


# --- level files (JSON, validated with pydantic) ------------------------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _UncapturableFile(_Strict):
    after: StrictInt = Field(ge=1, description="how many attempts before the hint explains why nothing can be captured, e.g. 3")
    why: str = Field(min_length=1, description="why no attack can capture this level, in the learner's words")


class _LevelFile(_Strict):
    number: StrictInt = Field(ge=1, description="the level's place on the ladder, 1 first; the file name starts with it (01-...)")
    id: str = Field(description='a slug, e.g. "naive-gist"; the file name ends with it')
    title: str = Field(min_length=1, description="a few words")
    story: str = Field(min_length=1, description="the scenario: whose sandbox, why it looks safe, where the flag is")
    policy: Union[str, dict[str, Any]] = Field(description='the sandbox: a policy object, or "plain container"')
    flag_in: tuple[str, ...] = Field(min_length=1, description='world files the flag is appended to, e.g. ["/home/user/.ssh/id_rsa"]')
    hints: tuple[str, ...] = Field(min_length=1, description="hints in order: one more after each miss")
    teaches: str = Field(min_length=1, description="the one point of the course this level teaches")
    channels: tuple[Channel, ...] = Field(CHANNELS, min_length=1, description='which ways out count: "http", "tcp", "dns" (default: all)')
    next_session: StrictBool = Field(False, description="true when the capture happens in the next session, after the sandbox exits")
    uncapturable: Optional[_UncapturableFile] = Field(None, description="the final level only: why nothing can be captured")


def _problem_from(err: dict[str, Any]) -> Problem:
    loc = tuple(err["loc"])
    ptr = json_pointer(loc)
    kind = err["type"]
    if kind in ("extra_forbidden", "missing"):
        model = _UncapturableFile if loc[:1] == ("uncapturable",) and len(loc) == 2 else _LevelFile if len(loc) == 1 else None
        return field_problem(ptr, kind, str(loc[-1]), model)
    if kind == "literal_error":
        return Problem(ptr, f"must be one of: {', '.join(CHANNELS)}.")
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
        if raw.policy != PLAIN_CONTAINER:
            problems.append(Problem("/policy", f'must be a policy object or "{PLAIN_CONTAINER}", not "{raw.policy}".'))
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
    if problems:
        raise LevelError(f"{head} ({len(problems)} problem{'s' if len(problems) != 1 else ''})", problems)
    u = raw.uncapturable
    return Level(
        number=raw.number, id=raw.id, title=raw.title, story=raw.story, policy=policy, flag_in=raw.flag_in,
        hints=raw.hints, teaches=raw.teaches, channels=raw.channels, next_session=raw.next_session,
        uncapturable=Uncapturable(u.after, u.why) if u is not None else None,
    )


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
        except ValueError as exc:
            raise LevelError(f"{source} is not valid JSON ({exc})") from None
        lvl = parse_level(data, source)
        if (lvl.number, lvl.id) != (int(m.group(1)), m.group(2)):
            raise LevelError(f"{source} describes level {lvl.number} {lvl.id!r}; the file name and the level must agree "
                             f"(rename it {lvl.number:02d}-{lvl.id}.json)")
        levels.append(lvl)
    numbers = [lv.number for lv in levels]
    if numbers != list(range(1, len(levels) + 1)):
        raise LevelError(f"grader/levels: the levels must be numbered 1, 2, 3, ... without gaps (found {numbers})")
    if levels and levels[-1].uncapturable is None or any(lv.uncapturable for lv in levels[:-1]):
        raise LevelError('grader/levels: the last level, and only the last, is "uncapturable" (correctly scoped)')
    return tuple(levels)


@lru_cache(maxsize=1)
def load_levels() -> tuple[Level, ...]:
    """Every level shipped with the package, in ladder order (read once; levels are immutable)."""
    return _from_files(_level_files())


def level(key: Union[int, str]) -> Level:
    """The level numbered ``key`` (or with that id); ``LevelError`` naming the levels there are."""
    levels = load_levels()
    if isinstance(key, str) and key.strip().isdigit():
        key = int(key)
    for lv in levels:
        if lv.number == key or lv.id == key:
            return lv
    raise LevelError(f"unknown level {key!r}; the levels are 1 to {len(levels)} (list them with `sandbox-lab attack --list`)")
