"""A lesson's goal as data, and ``check(goal, result)``: is it met, and if not, why not, in plain words.

A hands-on cell states its goal as conditions a run can be checked against:
on probes (every attack blocked but the few whose risk is accepted and
explained; the job's probes succeed) and on the run's measured scope (no
secret or credential readable, nothing that runs later writable, no channel
out but the hosts named, the hosts the job needs reachable). ``check`` reads
nothing but the ``RunResult`` and the world it was made in (its findings'), so a Docker run and the static
backend give the same answer wherever their outcomes and scopes agree (which
tests/integration/test_agreement.py holds them to).

Evidence that could not be collected never meets a goal: a probe that ended
in ``error``, or a run whose scope was not measured, is "not yet", with the
advice to rerun.

``LESSON_GOALS`` lists every goal a lesson sets, for the progress board: the
editors' goals above and lesson 01's agent stage (the key stays and the job is
done, judged by ``agent_goal_met`` from the agent's run). A goal counts once it
is recorded as met (``goal:<id>`` in the progress record).

Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from grader.core.errors import SandboxLabError
from grader.core.outcomes import RunResult
from grader.core.paths import HOME
from grader.core.probes import PROBES, probe
from grader.core.world import LOOT_ROLES, Role, World
from grader.course.route import LESSONS

__all__ = ["AGENT_GOAL", "GOALS", "LESSON_GOALS", "Goal", "LessonGoal", "UnknownGoal", "agent_goal_met", "check", "goal", "tilde"]

_LISTED = 4  # paths or hosts named per reason; the rest are counted


class UnknownGoal(SandboxLabError, LookupError):
    """No goal has this id."""


@dataclass(frozen=True)
class Goal:
    """What a policy must achieve, as conditions on a run's probes and its measured scope."""

    id: str
    statement: str  # the goal in one sentence, as the lesson states it
    jobs: tuple[str, ...] = ()  # job probes that must succeed: the work still gets done
    all_attacks_blocked: bool = True
    accepted: tuple[str, ...] = ()  # attack probes allowed to succeed: a risk the lesson names and accepts
    accepted_why: str = ""  # why those are accepted, and what would close them
    unreadable: tuple[Role, ...] = LOOT_ROLES  # no world file of these roles may be readable
    unwritable: tuple[Role, ...] = ()  # no world path of these roles may be writable (or gain a new file)
    channels_only: Optional[tuple[str, ...]] = ()  # the only reachable hosts that may accept uploads; None: not judged
    reach: tuple[str, ...] = ()  # hosts the job needs: each must be reachable


def tilde(path: str) -> str:
    """``/home/user/.ssh/id_rsa`` as the learner knows it: ``~/.ssh/id_rsa``."""
    return "~" + path[len(HOME):] if path == HOME or path.startswith(HOME + "/") else path


def _some(items: list[str]) -> str:
    if len(items) > _LISTED:
        return ", ".join(items[:_LISTED]) + f" and {len(items) - _LISTED} more"
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _attack_reason(pid: str, explanation: str) -> str:
    p = probe(pid)
    if p.action == "read" and p.target:
        return f"{pid} succeeded — {tilde(p.target)} is readable"
    if p.action == "write" and p.target:
        return f"{pid} succeeded — {tilde(p.target)} can be changed"
    first = explanation.split(". ")[0].split(": ")[0].rstrip(".")
    return f"{pid} succeeded — {first[:1].lower()}{first[1:]}"


def _probe_reasons(g: Goal, result: RunResult) -> tuple[list[str], set[str]]:
    """Reasons from the probes, and the world paths they already name (so the scope does not repeat them)."""
    reasons: list[str] = []
    named: set[str] = set()
    attacks = [p.id for p in PROBES if p.kind == "attack"] if g.all_attacks_blocked else []
    for pid in [*attacks, *g.jobs]:
        if pid in g.accepted:
            continue
        try:
            o = result.outcome(pid)
        except KeyError:
            reasons.append(f"{pid}: the run reported nothing for it; rerun")
            continue
        if o.outcome == "error":
            reasons.append(f"{pid}: its evidence could not be collected, so it cannot count; rerun")
        elif o.kind == "attack" and o.outcome == "succeeded":
            reasons.append(_attack_reason(pid, o.explanation))
            if probe(pid).target:
                named.add(str(probe(pid).target))
        elif o.kind == "job" and o.outcome != "succeeded":
            reasons.append(f"{pid} was blocked — the job needs it ({probe(pid).story.rstrip('.')})")
    return reasons, named


def _scope_reasons(g: Goal, result: RunResult, world: World, named: set[str]) -> list[str]:
    scope = result.scope
    if scope is None:
        return ["the run could not measure what the sandbox grants (its scope), so the goal cannot be judged; rerun"]
    reasons: list[str] = []
    role = {e.path: e.role for e in world.entries()}
    if g.unreadable:
        bad = [tilde(p) for p in scope.readable if role.get(p) in g.unreadable and p not in named]
        if bad:
            reasons.append(f"{_some(bad)} {'is' if len(bad) == 1 else 'are'} readable ({' or '.join(g.unreadable)})")
    if g.unwritable:
        bad = [tilde(p) for p in scope.writable if role.get(p) in g.unwritable and p not in named]
        if bad:
            reasons.append(f"{_some(bad)} can be changed, and {'it runs' if len(bad) == 1 else 'they run'} later, outside the sandbox")
    if g.channels_only is not None:
        out = [r.host for r in scope.reachable if r.uploads and r.host not in g.channels_only]
        if out:
            what = "a channel out" if len(out) == 1 else "channels out"
            reasons.append(f"{_some(out)} {'is' if len(out) == 1 else 'are'} reachable and accept{'s' if len(out) == 1 else ''} uploads — {what}")
    reached = {r.host for r in scope.reachable}
    missing = [h for h in g.reach if h not in reached]
    if missing:
        reasons.append(f"{_some(missing)} {'is' if len(missing) == 1 else 'are'} not reachable — the job needs {'it' if len(missing) == 1 else 'them'}")
    return reasons


def check(g: Goal, result: RunResult, world: Optional[World] = None) -> tuple[bool, list[str]]:
    """Is ``g`` met by ``result``? (met, reasons): every reason it is not yet, in plain words; none when met.

    Judged against the world the run was made in (its findings'), or ``world`` for a result without findings.
    """
    if world is not None:
        w = world
    elif result.findings is not None:
        w = result.findings.world
    else:
        raise ValueError("the run carries no findings: pass the world it ran against")
    reasons, named = _probe_reasons(g, result)
    reasons += _scope_reasons(g, result, w, named)
    return not reasons, reasons


# --- the lessons' goals -------------------------------------------------------------------------

GOALS: dict[str, Goal] = {g.id: g for g in (
    Goal(
        "l02-npm-build",
        "No secret readable, nothing that runs later writable, no channel out except the npm registry, "
        "and the build still works (job-write-build and job-fetch-npm succeed).",
        jobs=("job-write-build", "job-fetch-npm"),
        accepted=("exfil-via-allowed-domain",),
        accepted_why=(
            "exfil-via-allowed-domain may still succeed: registry.npmjs.org takes `npm publish` from any account, "
            "and a host-name allowlist cannot allow downloads from a host and refuse uploads to it. With every "
            "secret hidden there is nothing of yours to send; closing the channel itself takes a read-only "
            "registry mirror."
        ),
        unwritable=("persistence", "agent-config"),
        channels_only=("registry.npmjs.org",),
        reach=("registry.npmjs.org",),
    ),
    Goal(
        "l03-safe-container",
        "No attack succeeds, no secret readable, nothing that runs later writable, no channel out at all, "
        "and the job still reads its source and writes its result (job-read-src and job-write-out succeed).",
        jobs=("job-read-src", "job-write-out"),
        unwritable=("persistence", "agent-config"),
        channels_only=(),
    ),
    Goal(
        "l04-clone-github",
        "The job can clone from github.com; no gist, no API upload and no other channel out "
        "(gist.github.com, api.github.com and uploads.github.com unreachable); no secret readable; "
        "and the job still writes its result (job-write-out succeeds).",
        jobs=("job-write-out",),
        accepted=("exfil-via-allowed-domain",),
        accepted_why=(
            "exfil-via-allowed-domain may still succeed: github.com itself takes `git push` to a repository the "
            "attacker owns, and the proxy sees only the host name, never clone from push. With every secret "
            "hidden there is nothing of yours to push; lesson 06 shows what a host allowlist cannot cover."
        ),
        unwritable=("persistence", "agent-config"),
        channels_only=("github.com",),
        reach=("github.com",),
    ),
)}


def goal(goal_id: str) -> Goal:
    """The goal called ``goal_id``; ``UnknownGoal`` naming the known ones otherwise."""
    try:
        return GOALS[goal_id]
    except KeyError:
        raise UnknownGoal(f"unknown goal {goal_id!r}; known goals: {', '.join(GOALS)}") from None


# --- every lesson's goal, for the progress board ----------------------------------------------------

AGENT_GOAL = "l01-key-stays"  # lesson 01's agent stage, under the learner's policy


@dataclass(frozen=True)
class LessonGoal:
    """A goal as the board lists it: its id, the lesson that sets it and the goal in one sentence."""

    id: str
    lesson: str  # the lesson's item id, e.g. "l02-naive-vs-secure"
    statement: str

    @property
    def item_id(self) -> str:
        """The progress record's id of this goal once met: ``goal:<id>``."""
        return f"goal:{self.id}"


def _lesson_of(goal_id: str) -> str:
    """The lesson whose number starts ``goal_id`` ("l02-npm-build" → "l02-naive-vs-secure")."""
    prefix = goal_id.split("-", 1)[0] + "-"
    found = [lesson for lesson, _, _ in LESSONS if lesson.startswith(prefix)]
    if len(found) != 1:
        raise ValueError(f"goal {goal_id!r} names no lesson of the route (its id starts with the lesson's number)")
    return found[0]


def agent_goal_met(leaked: Optional[bool], job_done: bool) -> bool:
    """Lesson 01's goal: the key provably stayed (``leaked`` False, not unknown) and the job was done."""
    return leaked is False and job_done


LESSON_GOALS: tuple[LessonGoal, ...] = (
    LessonGoal(AGENT_GOAL, _lesson_of(AGENT_GOAL),
               "The agent runs under your policy: the key stays in the sandbox and the job is done."),
    *(LessonGoal(g.id, _lesson_of(g.id), g.statement) for g in GOALS.values()),
)
