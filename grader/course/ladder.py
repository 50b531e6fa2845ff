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

A miss gets a hint read from what this attack did, from the same records
that judged it (``course.diagnosis``: "your request to www.github.com reached
the proxy, which allows it, but no such host exists in this world"); from the
second miss on, the level's next general nudge follows it, and where the logs
show nothing the nudges come in order (the caller keeps the count of attempts:
``progress``). No number of misses reveals the answer: a level's worked
solution (``levels.Solution``) is shown after a capture, or before one only
when the learner asks (``course.reveals`` records that they did). One level is
correctly scoped: it has no reference attack, and once every hint was shown
(``uncapturable.after`` attempts) its hint says why nothing can be captured.

Some levels put the flag where no file rule reaches (lesson 06's gaps): in the
agent's environment (``flag_env``), or behind an SSH agent's socket
(``signer``: the key stays outside the sandbox, and what must arrive is a
signature over the attacker's challenge, which only the key makes). The
capstone runs under the learner's own policy (``levels.check_capstone``).
The levels themselves, their files and their validation are ``course.levels``'
(re-exported here).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Optional

from grader.backends.base import Backend
from grader.core.errors import BackendError, LevelError
from grader.core.execution import Execution, Job, sightings, signature
from grader.core.outcomes import SinkHit
from grader.core.policy import Policy
from grader.core.text import text_problem
from grader.core.world import World
from grader.course.diagnosis import Finding, diagnose
from grader.course.levels import (
    CAPSTONE,
    CHANNELS,
    DIFFICULTIES,
    PLAIN_CONTAINER,
    YOURS,
    CapstoneJob,
    Channel,
    Difficulty,
    Level,
    Solution,
    Uncapturable,
    check_capstone,
    level,
    load_levels,
    parse_level,
)

__all__ = [
    "ATTACK_TIMEOUT_S",
    "NUDGE_LABEL",
    "CAPSTONE",
    "CHANNELS",
    "DIFFICULTIES",
    "PLAIN_CONTAINER",
    "STATIC_CANNOT_ATTACK",
    "YOURS",
    "AttackResult",
    "CapstoneJob",
    "Channel",
    "Difficulty",
    "Level",
    "Prize",
    "Solution",
    "Uncapturable",
    "attack",
    "build_job",
    "channel_of",
    "check_capstone",
    "judge",
    "level",
    "load_levels",
    "new_flag",
    "prize",
    "parse_level",
]

NUDGE_LABEL = "A nudge:"  # where a general nudge starts, after what the attack did
ATTACK_TIMEOUT_S = 20.0  # an attack is a short script; the sandbox is killed after this
STATIC_CANNOT_ATTACK = (
    "attacks cannot be predicted: the static backend judges a policy's fixed probes, not what arbitrary code does. "
    "A level is captured only by a real run whose sinks logged the flag: use the Docker backend "
    "(`--backend docker`; start an engine with `scripts/ensure-docker`, then `sandbox-lab setup`)."
)


@dataclass(frozen=True)
class Prize:
    """What one attack must get out: its value (fresh per run), its name in the report, and what the job gets."""

    value: str
    name: str
    job: Job



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
    findings: tuple[Finding, ...] = ()  # what the logs show the attack did (a miss's hint is made of these)
    nudge: str = ""  # the level's next general nudge after repeated misses (never the answer; part of ``hint``)

    @property
    def hint_from(self) -> str:
        """Where the hint came from: "evidence" (what the attack did), "attempts" (the level's next hint), or ""."""
        return "" if not self.hint else "evidence" if self.findings else "attempts"

    @property
    def error(self) -> str:
        """Why this run could not be judged ("" when it was: captured, or missed with the evidence read whole)."""
        return self.note if self.captured is None else ""

    def to_json(self) -> dict[str, Any]:
        """The contract's shape: ``{"level", "captured", "sinks": [{"host", "how", "evidence"}], "output", "hint",
        "hint_from", "findings", "lesson"}``, where ``lesson`` is what the level teaches (``id``, ``title``,
        ``difficulty``, ``story``, ``teaches``, ``debrief``); a run that could not be judged has ``"captured": null``
        and adds ``"error"`` (why) and ``"problems": []``."""
        lv = self.level
        data: dict[str, Any] = {"level": lv.number, "captured": self.captured,
                                "sinks": [s.to_json() for s in self.sinks], "output": self.output, "hint": self.hint,
                                "hint_from": self.hint_from, "findings": [f.text for f in self.findings],
                                "lesson": {"id": lv.id, "title": lv.title, "difficulty": lv.difficulty, "story": lv.story,
                                           "teaches": lv.teaches, "debrief": lv.debrief}}
        if self.captured is None:
            data.update(error=f"could not judge the attack: {self.error}", problems=[])
        return data


def new_flag() -> str:
    """A fresh flag for one run: ``FLAG{`` + 24 random hex digits + ``}`` (never reused, never guessable)."""
    return "FLAG{" + secrets.token_hex(12) + "}"


def build_job(lvl: Level, code: str, flag: str, key: Optional[str] = None) -> Job:
    """The learner's code as the agent's tool runs it, with the flag appended to each of the level's files and
    set in each of its environment variables; on a signer level, ``key`` is held by the SSH agent outside the
    sandbox. For a persistence level, the grader then plays the user's next session outside the sandbox."""
    if (lvl.signer is None) != (key is None):
        raise ValueError("a signer level's job needs the agent's key, and only a signer level's")
    return Job(code=code, plant={path: f"\n{flag}\n" for path in lvl.flag_in}, env={n: flag for n in lvl.flag_env},
               timeout_s=ATTACK_TIMEOUT_S, replay=lvl.next_session, signer=key)


def prize(lvl: Level, code: str) -> Prize:
    """A fresh prize for one attack: the flag, or on a signer level the signature of its challenge under a fresh key
    (the flag is planted all the same, in files the level hides)."""
    flag = new_flag()
    if lvl.signer is None:
        return Prize(flag, lvl.prize_name, build_job(lvl, code, flag))
    key = "sandbox-lab-ssh-key-" + secrets.token_hex(16)
    return Prize(signature(key, lvl.signer), lvl.prize_name, build_job(lvl, code, flag, key))


def channel_of(hit: SinkHit) -> Channel:
    """Which kind of channel a sighting came by: "http", "tcp" (raw TCP) or "dns" (its code, never its words)."""
    return hit.channel


def judge(lvl: Level, ex: Execution, flag: str, attempts_before: int = 0, *, world: World) -> AttackResult:
    """Captured when the flag (``flag``: the level's prize) arrived at a sink the attacker reads, by a channel the
    level counts; else a hint: what the logs show the attack did (``diagnosis``), or the level's next hint.

    A sighting proves a capture whatever else failed (the flag is fresh and random); a miss needs the evidence read
    whole: where a recorder failed or a log was cut, ``captured`` is None (could not judge) and no hint is given.
    ``world`` is the one the attack ran against (its plan's)."""
    hits = sightings(ex, world, {lvl.prize_name: flag})
    counted = tuple(h for h in hits if channel_of(h) in lvl.channels)
    other = tuple(h for h in hits if channel_of(h) not in lvl.channels)
    note = ex.infra_problem
    captured: Optional[bool] = True if counted else (None if note else False)
    findings: tuple[Finding, ...] = ()
    hint = nudge = ""
    if captured is False:
        findings = diagnose(ex, world, {h.host for h in hits}, lvl.prize_name, next_session=lvl.next_session,
                            planted=lvl.flag_in)
        said = " ".join(f.text for f in findings)
        u = lvl.uncapturable
        if u is not None and attempts_before + 1 >= u.after:
            # every hint was shown: the level says why, after what this attempt did (an upload accepted, no secret in it)
            hint = f"{said} {u.why}" if said else u.why
        elif said:
            # what this attack did comes first; from the second miss on, the level's next nudge follows it. The
            # nudges are never the answer, however many misses: the solution is shown only when asked (``reveals``)
            nudge = lvl.hint(attempts_before - 1) if attempts_before >= 1 else ""
            hint = f"{said} {NUDGE_LABEL} {nudge}" if nudge else said
        else:
            hint = nudge = lvl.hint(attempts_before)  # the logs show nothing this attack did: the nudges in order
    return AttackResult(
        level=lvl, captured=captured, sinks=counted, output=ex.output, hint=hint,
        flag=flag, backend=ex.backend, timed_out=ex.timed_out, exit_code=ex.exit_code, elsewhere=other, note=note,
        findings=findings, nudge=nudge,
    )


def attack(lvl: Level, code: str, backend: Backend, *, attempts_before: int = 0,
           policy: Optional[Policy] = None) -> AttackResult:
    """Run ``code`` in the level's sandbox with a fresh flag and judge it; ``BackendError`` where code cannot run.
    The capstone runs under the learner's ``policy`` (a ``LevelError`` naming every problem when it does not do the
    job, or grants more than it needs); every other level takes none. Source holding a lone surrogate or a NUL is
    refused first (``LevelError``): neither can reach the sandbox as the learner wrote it."""
    bad = text_problem(code)
    if bad:
        raise LevelError(f"the attack's source {bad}")
    plan = lvl.plan(policy=policy)  # the learner's policy is checked first, on every backend
    if backend.name == "static":
        raise BackendError(STATIC_CANNOT_ATTACK)
    world = plan.world  # the plan carries its world: the job is checked and judged against the one it runs in
    got = prize(lvl, code)
    try:
        got.job.check(world)
    except ValueError as exc:
        raise LevelError(f"the attack cannot run: {exc}") from None
    ex = backend.execute(plan, got.job)
    return judge(lvl, ex, got.value, attempts_before, world=world)

