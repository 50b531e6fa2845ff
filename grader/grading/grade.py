"""Grading a policy on a task: ``grade(task, policy, backend) -> Grade``, one run judged check by check.

Grading runs the policy once through the backend the caller passes and judges
every check from that one ``RunResult``: probes by their outcomes (and a
``blocked`` check's ``unreadable``/``unwritable``/``unreachable`` sets by the
run's scope: whatever it claims beyond its probes), ``least-*``
checks by the run's scope against the task's needs (``needs.overgrants``), and
the few policy facts from the policy itself. Every lost point is explained:
the probe and its evidence (the Docker backend's, or the static explanation),
or each over-granted path or host with the rule that grants it, the harm and
the narrowest change. Evidence that could not be collected never passes: a
check with a probe that ended in ``error``, and a ``least-*`` check when the run
could not measure its scope, *could not be graded*: 0 points, its message starts
with "could not grade:", ``CheckResult.error`` says why, and the grade is no
verdict (``Grade.could_not_grade``; ``sandbox-lab grade`` exits 3); both say to
rerun.

Every graded policy's feedback ends with its carry-over to the real tools
(``carry_over``): what ``sandbox-lab export --to srt`` and ``--to claude-code``
write for it, and the differences that matter for this policy
(``srt_notes.srt_warnings``: what a learner should know of srt's rules for this policy).

The rules behind each verdict come from the run's findings (``RunResult.findings``,
computed once where the run was made), never rebuilt here.

``target`` (``"srt"``, the default, or ``"claude-code"``) says who starts the
sandbox: the policy means what that tool makes of it (``access.py``: srt's rules;
Claude Code adds its working directory, writable by default), and every backend
enforces exactly that.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional, Union

from grader.core.access import TARGET_NAMES, Access, Target
from grader.core.analyzer import predict
from grader.backends.base import Backend
from grader.core.errors import PolicyError, Problem, TaskError
from grader.realtools.export import export
from grader.core.needs import Needs, Overgrant, explain_overgrants, overgrants, ungranted
from grader.core.outcomes import ProbeOutcome, RunResult
from grader.core.paths import covers
from grader.core.plan import build_plan
from grader.core.policy import Policy, load_policy
from grader.core.probes import probe
from grader.core.scope import FRESH_LABEL, NEW_FILE
from grader.realtools.srt_notes import srt_differences
from grader.grading.tasks import Check, Task, load_task
from grader.core.wording import backend_phrase, ran_at_note

__all__ = ["CarryOver", "CheckResult", "Grade", "carry_over", "grade", "grade_file", "overgrants_of"]

_EVIDENCE_SHOWN = 3  # evidence lines quoted per probe; the full list is in `sandbox-lab probe --json`


@dataclass(frozen=True)
class CheckResult:
    """One rubric line, judged."""

    id: str
    points: int
    max_points: int
    passed: bool
    message: str
    error: str = ""  # non-empty: the check could not be graded (its evidence is incomplete), why; it scores 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "points": self.points, "max_points": self.max_points, "passed": self.passed,
                               "message": self.message}
        if self.error:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class CarryOver:
    """A policy as the real tools take it: the exported files, and where they would treat it differently."""

    srt: str  # sandbox-lab export --to srt: the settings file for sandbox-runtime
    claude_code: str  # sandbox-lab export --to claude-code: the sandbox block of a Claude Code settings.json
    differences: tuple[str, ...]  # one sentence each, the JSON pointer first where there is one
    causes: tuple[str, ...] = ()  # the srt_notes cause of each difference that has one, in the same order

    def lines(self, source: str = "my_policy.json") -> list[str]:
        """The carry-over as plain-text lines, for the end of a task's feedback."""
        out = [f"In the real tools: `sandbox-lab export {source} --to srt` writes sandbox-runtime's settings file:"]
        out += [f"    {ln}" for ln in self.srt.rstrip("\n").splitlines()]
        out.append(f"  and `sandbox-lab export {source} --to claude-code` the sandbox block of Claude Code's settings.json:")
        out += [f"    {ln}" for ln in self.claude_code.rstrip("\n").splitlines()]
        if self.differences:
            out.append("  What to know of the real tools' rules for this policy:")
            out += [f"    - {d}" for d in self.differences]
        return out


def carry_over(policy: Policy) -> CarryOver:
    """What ``export --to srt`` and ``--to claude-code`` produce for ``policy``, and what to know of the tools for it.

    Each note of srt's rules this policy meets (``srt_warnings``, with its JSON
    pointer), and, where it hides anything, that Claude Code's own Read and Edit
    tools follow permission rules, not the sandbox's.
    """
    srt_text, _ = export(policy, "srt")
    cc_text, cc_notes = export(policy, "claude-code")
    noted = srt_differences(policy)
    diffs = [f"{w.pointer}: {w.message}" for _, w in noted]
    if policy.filesystem.allowRead or policy.filesystem.denyRead:
        diffs += [n.text for n in cc_notes if n.code == "cc-tools-permissions"]
    return CarryOver(srt_text, cc_text, tuple(diffs), tuple(cause for cause, _ in noted))


@dataclass(frozen=True)
class Grade:
    """The grade of one policy on one task: a result per check, and why points were lost."""

    task: str
    backend: str
    checks: tuple[CheckResult, ...]
    errors: tuple[Problem, ...] = ()  # validation problems: set only when the policy was invalid
    source: str = ""  # the policy's file name or label, for messages
    notes: tuple[str, ...] = field(default=())  # from the run, e.g. "predicted, not run: ..."
    overgrants: tuple[Overgrant, ...] = ()  # every path and host granted beyond the job's needs (the board lists them)
    carry_over: Optional[CarryOver] = None  # the policy in the real tools; None for an invalid policy
    target: str = "srt"  # who starts the sandbox, whose rules graded: "srt" or "claude-code" (access.TARGETS)
    ran_at: str = ""  # the run's ``RunResult.ran_at``: where the run service that ran it is; "" for a run made here

    def old_reading(self) -> tuple[str, ...]:
        """Where this policy relies on the allow-list reading of allowRead, which no real tool has: said first, with the fix.

        Work written for that reading is not regraded silently: it loses the points for what it leaves readable,
        and its feedback opens with why and the change that makes it hold (``srt_notes``' allow-read-alone).
        """
        if self.carry_over is None:
            return ()
        return tuple(d for d, c in zip(self.carry_over.differences, self.carry_over.causes) if c == "allow-read-alone")

    @property
    def score(self) -> int:
        return sum(c.points for c in self.checks)

    @property
    def max_score(self) -> int:
        return sum(c.max_points for c in self.checks)

    @property
    def valid(self) -> bool:
        return not self.errors

    @property
    def could_not_grade(self) -> tuple[CheckResult, ...]:
        """The checks whose evidence was incomplete: each scores 0 and the grade is no verdict (rerun it)."""
        return tuple(c for c in self.checks if c.error)

    @property
    def full_marks(self) -> bool:
        return self.valid and not self.could_not_grade and self.score == self.max_score

    def check(self, check_id: str) -> CheckResult:
        for c in self.checks:
            if c.id == check_id:
                return c
        raise TaskError(f"task {self.task!r} has no check {check_id!r}; its checks: {', '.join(c.id for c in self.checks)}")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "task": self.task,
            "score": self.score,
            "max_score": self.max_score,
            "backend": self.backend,
            "checks": [c.to_json() for c in self.checks],
        }
        if self.overgrants:
            out["overgrants"] = [o.to_json() for o in self.overgrants]
        if self.errors:
            out["errors"] = [{"pointer": p.pointer, "message": p.message} for p in self.errors]
        if self.notes:
            out["notes"] = list(self.notes)
        if self.could_not_grade:
            out["could_not_grade"] = [c.id for c in self.could_not_grade]
        if self.target != "srt":  # absent: srt, the default target
            out["target"] = self.target
        if self.old_reading():  # work written for the old allow-list reading of allowRead: why it lost points, and the fix
            out["old_reading"] = list(self.old_reading())
        return out

    def feedback(self) -> str:
        """Plain-text feedback: the score, which backend judged, and every lost point explained."""
        under = f"; target {TARGET_NAMES[self.target]}" if self.target != "srt" else ""  # type: ignore[index]
        # a run the run service made says where it ran, as probe boards do; the note is then said once, there
        where = self.ran_at if self.backend != "static" else ""
        lines = [f"{self.task}: {self.score}/{self.max_score} ({backend_phrase(self.backend, ran_at=where)}{under})"]
        lines += [f"  note: {n}" for n in self.notes if not where or n != ran_at_note(where)]
        lines += [f"  NOTE: {d}" for d in self.old_reading()]
        if self.could_not_grade:
            ids = ", ".join(c.id for c in self.could_not_grade)
            lines.append(f"  ERROR: could not grade {ids}: the run's evidence is incomplete, so {'they score' if len(self.could_not_grade) > 1 else 'it scores'} "
                         "0 and this is not a verdict on the policy. Rerun the grader.")
        if self.errors:
            lines.append(f"  {self.source or 'the policy'} is not a valid policy ({len(self.errors)} problem{'s' if len(self.errors) != 1 else ''}):")
            lines += [f"    {p.pointer}: {p.message}" for p in self.errors]
        for c in self.checks:
            mark = "PASS" if c.passed else "ERROR" if c.error else "FAIL"
            lines.append(f"  [{mark}] {c.id} ({c.points}/{c.max_points}): {c.message}")
        if self.carry_over is not None:
            lines += ["  " + ln for ln in self.carry_over.lines(self.source or "my_policy.json")]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.feedback()


def _evidence(o: ProbeOutcome) -> str:
    if o.evidence:
        shown = "; ".join(o.evidence[:_EVIDENCE_SHOWN])
        more = len(o.evidence) - _EVIDENCE_SHOWN
        return shown + (f" (and {more} more)" if more > 0 else "")
    return o.explanation.rstrip(".")


_SHOWN_PATHS = 6  # paths named per granting rule in a check's message; the count says how many more


def _short(paths: list[str]) -> str:
    more = len(paths) - _SHOWN_PATHS
    return ", ".join(paths[:_SHOWN_PATHS]) + (f" and {more} more" if more > 0 else "")


def _path_fix(axis: str, rule: Optional[tuple[str, str]], paths: list[str], needs: Needs, roots: tuple[str, ...] = ()) -> str:
    """The change that takes ``paths`` away: narrow or remove the granting rule, or deny them where the job needs it.

    Readable by default (no rule): srt's way, as ``needs._path_advice`` says it: hide the outermost regions
    (each path's world root among ``roots``) with denyRead and re-open what the job reads inside with allowRead.
    """
    deny = "denyRead" if axis == "read" else "denyWrite"
    wanted = needs.readable if axis == "read" else needs.write
    outer = [p for p in paths if not any(o != p and covers(o, p) for o in paths)]
    denied = ", ".join(f'"{p}"' for p in outer[:_SHOWN_PATHS]) + (" ..." if len(outer) > _SHOWN_PATHS else "")
    if rule is None:
        if axis == "read":
            # a path inside what the job reads is hidden itself (re-opening its region would re-open it too)
            regions = list(dict.fromkeys(p if any(covers(n, p) for n in wanted) else next((r for r in roots if covers(r, p)), p)
                                         for p in outer))
            regions = [r for r in regions if not any(o != r and covers(o, r) for o in regions)]
            inside = [n for n in (needs.read or wanted) if any(covers(r, n) for r in regions)]
            reopen = (", and re-open what the job reads inside with filesystem.allowRead (" + ", ".join(f'"{n}"' for n in inside) + ")"
                      if inside else "")
            hidden = ", ".join(f'"{r}"' for r in regions)
            return f"reads are allowed by default: hide {hidden} with filesystem.denyRead{reopen}"
        return "write a policy that grants only what the job needs"
    key, entry = rule
    under = [n for n in wanted if covers(entry, n) and n != entry]
    if entry in wanted or any(covers(n, entry) for n in wanted):
        return f"keep {key} \"{entry}\" (the job needs it) and add {denied} to filesystem.{deny}"
    if under:
        return f"narrow {key} \"{entry}\" to " + ", ".join(f'"{n}"' for n in under) + f", or add {denied} to filesystem.{deny}"
    return f"remove {key} \"{entry}\" from the policy (the job does not need it)"


def _host_named(host: str) -> str:
    return f"any name under {host[len(FRESH_LABEL) + 1:]}" if host.startswith(FRESH_LABEL + ".") else host


def _judge_scope(check: Check, run: RunResult, access: Access, needs: Needs, said: frozenset[str] = frozenset()) -> list[str]:
    """What the measured scope holds that the check says it must not: each path or host, the rule, the fix.

    ``said``: targets of this check's probes that already failed (their own message names them). The caller
    makes a scoped check of a run without a measured scope "could not grade".
    """
    if not check.scoped or run.scope is None:
        return []
    problems = []
    world = access.world
    also = " also" if said else ""
    for axis, forbidden, granted, verb in (
        ("read", check.unreadable, run.scope.readable, "read"),
        ("write", check.unwritable, run.scope.writable, "change or create files in"),
    ):
        found = [p for p in forbidden if p in set(granted) and p not in said]
        by_rule: dict[Optional[tuple[str, str]], list[str]] = {}
        for path in found:
            d = access.read(path) if axis == "read" else access.write(path if any(f.path == path for f in world.files) else f"{path}/{NEW_FILE}")
            by_rule.setdefault(d.rule if d.allowed else None, []).append(path)
        for rule, paths in by_rule.items():
            why = f'{rule[0]} "{rule[1]}"' if rule else ("no denyRead (every read is allowed by default)" if axis == "read" and access.policy is not None else "the sandbox")
            problems.append(f"the agent can{also} {verb} {_short(paths)} ({why} grants it). Fix: {_path_fix(axis, rule, paths, needs, world.roots)}.")
    if check.unreachable is not None:
        if check.unreachable == "any":
            hosts, what = [r.host for r in run.scope.reachable], "the job needs no host"
        elif check.unreachable == "attacker":
            hosts, what = [r.host for r in run.scope.reachable if world.attacker_owns(r.host)], "the attacker owns, or may own, such names"
        else:
            hosts, what = [r.host for r in run.scope.reachable if r.uploads], "they accept uploads, or may be the attacker's own"
        by_entry: dict[Optional[str], list[str]] = {}
        for h in hosts:
            d = access.reach(h)
            by_entry.setdefault(d.rule[1] if d.allowed and d.rule else None, []).append(_host_named(h))
        for entry, names in by_entry.items():
            through = f'allowedDomains "{entry}" lets it through' if entry else "the sandbox lets it through"
            fix = f'remove "{entry}" from network.allowedDomains' if entry else 'write "allowedDomains": [] or list only the hosts the job needs'
            problems.append(f"the agent can{also} reach {', '.join(names)} ({through}; {what}). Fix: {fix}.")
    return problems


def _judge_probes(check: Check, run: RunResult, access: Access, needs: Needs = Needs()) -> CheckResult:
    want = "blocked" if check.kind == "blocked" else "succeeded"
    problems: list[str] = []
    unjudged: list[str] = []
    for pid in check.probes:
        o = run.outcome(pid)
        p = probe(pid)
        if o.outcome == "error":
            unjudged.append(f"probe {pid}: the evidence could not be collected ({_evidence(o)})")
        elif o.outcome != want:
            fix = (check.fix or p.fix(p, access)).rstrip(".")
            if want == "blocked":
                problems.append(f"probe {pid} succeeded ({p.story}) Evidence: {_evidence(o)}. Fix: {fix}.")
            else:
                problems.append(f"probe {pid} was blocked ({p.story}) Evidence: {_evidence(o)}. Fix: {fix}.")
    failed = frozenset(t for pid in check.probes if run.outcome(pid).outcome != want and (t := probe(pid).target))
    problems += _judge_scope(check, run, access, needs, failed)
    if check.scoped and run.scope is None:
        unjudged.append(f"the scope (every path and host the agent can reach) could not be measured in this run "
                        f"({run.backend}), and this check covers more than its probes try")
    if unjudged:
        why = "; ".join(unjudged)
        also = f" Also not met: {' '.join(problems)}" if problems else ""
        return CheckResult(check.id, 0, check.points, False,
                           f"could not grade: {why}. {check.description} This check is not counted as passed. "
                           f"Rerun the grader (start Docker first if it stopped).{also}", error=why)
    if problems:
        return CheckResult(check.id, 0, check.points, False, f"{check.description} Not met: " + " ".join(problems))
    return CheckResult(check.id, check.points, check.points, True, check.description)


_SCOPE_WORDS = {
    "read": "every path the agent can read",
    "write": "every path the agent can change or create a file in",
    "network": "every host the agent can reach",
}


_VERBS = {"read": "read", "write": "write", "network": "reach"}


def _judge_least(check: Check, run: RunResult, needs: Needs, found: Optional[tuple[Overgrant, ...]]) -> CheckResult:
    axis = check.axis or "read"
    if found is None or run.scope is None:
        why = f"the scope ({_SCOPE_WORDS[axis]}) could not be measured in this run ({run.backend})"
        return CheckResult(
            check.id, 0, check.points, False,
            f"could not grade: {why}. {check.description} Least privilege cannot be judged, and it is never "
            "assumed. Rerun the grader (start Docker first if it stopped).", error=why,
        )
    problems = list(explain_overgrants([o for o in found if o.axis == axis]))
    short = ungranted(run.scope, needs, axis)
    if short:
        # granting nothing is not least privilege: an empty sandbox would pass every least-* check
        problems.append(
            f"the agent cannot {_VERBS[axis]} {', '.join(short)}, which the job needs: least privilege is exactly what "
            "the job needs, not less. Grant " + ", ".join(f'"{n}"' for n in short) + " (the job checks say which rule)."
        )
    if not problems:
        return CheckResult(check.id, check.points, check.points, True, check.description)
    fix = f" Fix: {check.fix.rstrip('.')}." if check.fix else ""
    return CheckResult(check.id, 0, check.points, False, f"{check.description} Not met: {' '.join(problems)}{fix}")


def _judge_fact(check: Check, policy: Policy) -> CheckResult:
    if check.fact == "allowedDomains-present-and-empty":
        domains = policy.network.allowedDomains
        if not policy.allowed_domains_written:
            msg = (
                "network.allowedDomains is missing. Omitting it also means no network here, but a reader (or another "
                'tool) cannot tell that you meant it. Fix: write "network": {"allowedDomains": []}.'
            )
        elif domains:
            msg = (
                f"network.allowedDomains lists {', '.join(domains)}; the job needs no network. "
                'Fix: empty it: "allowedDomains": [].'
            )
        else:
            return CheckResult(check.id, check.points, check.points, True, check.description)
        return CheckResult(check.id, 0, check.points, False, f"{check.description} Not met: {msg}")
    raise TaskError(f"unknown policy fact {check.fact!r}")  # pragma: no cover - validated at load time


def _invalid(task: Task, error: PolicyError, backend_name: str) -> Grade:
    problems = error.problems or (Problem("/", "not a valid policy"),)
    listed = "; ".join(f"{p.pointer}: {p.message.rstrip('.')}" for p in problems)
    msg = f"Not graded: {error.source} is not a valid policy ({listed}). Fix that first, then grade again."
    results = tuple(CheckResult(c.id, 0, c.points, False, msg) for c in task.checks)
    return Grade(task.id, backend_name, results, problems, source=error.source)


def overgrants_of(task: Task, run: RunResult, access: Optional[Access] = None) -> Optional[tuple[Overgrant, ...]]:
    """Every path and host ``run`` grants beyond ``task``'s needs; None when the run could not measure its scope.

    The rules that grant them are the run's own (``run.findings.access``); ``access`` is for a result without findings.
    """
    if run.scope is None:
        return None
    grants = access if access is not None else run.findings.access if run.findings is not None else None
    if grants is None:
        raise ValueError("the run carries no findings: pass the access it was judged against")
    return overgrants(run.scope, task.needs, grants)


def _result(c: CheckResult) -> str:
    return f"{'PASS' if c.passed else 'ERROR' if c.error else 'FAIL'} ({c.points}/{c.max_points})"


def grade(
    task: Task, policy_or_error: Union[Policy, PolicyError], backend: Backend, *, source: str = "", target: Target = "srt",
) -> Grade:
    """Grade one policy on one task with one run of ``backend``, as ``target`` enforces it.

    An invalid policy (``PolicyError``) scores 0 with its validation problems as
    feedback; it is never graded against a default. A failure of the grading
    machinery itself raises ``BackendError``: the policy was not judged.
    """
    if isinstance(policy_or_error, PolicyError):
        return replace(_invalid(task, policy_or_error, backend.name), target=target)
    policy = policy_or_error
    needs_run = any(c.kind != "policy" for c in task.checks)
    # judged in the world its checks were resolved in, as the target starts the sandbox
    try:
        plan = build_plan(policy, task.world, target)
    except PolicyError as exc:
        return replace(_invalid(task, exc, backend.name), target=target, source=source)
    run = backend.run(plan) if needs_run else None
    # the rules that decide, from the run's own findings (a result made by hand has none: the plan's, same world)
    access = run.findings.access if run is not None and run.findings is not None else plan.access
    found = overgrants_of(task, run, access) if run is not None else None
    results = []
    for c in task.checks:
        if c.kind == "policy":
            results.append(_judge_fact(c, policy))
        elif c.kind == "least":
            assert run is not None
            results.append(_judge_least(c, run, task.needs, found))
        else:
            assert run is not None
            results.append(_judge_probes(c, run, access, task.needs))
    return Grade(
        task.id, run.backend if run else backend.name, tuple(results),
        notes=run.notes if run else (), overgrants=found or (), carry_over=carry_over(policy), source=source,
        target=target, ran_at=run.ran_at if run else "",
    )


def grade_file(
    task_or_id: Union[Task, str], path: Union[str, os.PathLike[str]], backend: Optional[Backend] = None, *, target: Target = "srt",
) -> Grade:
    """Load the policy file at ``path`` and grade it; a missing or invalid file scores 0 with the reason.

    ``backend`` defaults to the static backend (instant; no Docker needed).
    """
    task = load_task(task_or_id) if isinstance(task_or_id, str) else task_or_id
    if backend is None:
        from grader.backends.static import StaticBackend

        backend = StaticBackend()
    try:
        policy: Union[Policy, PolicyError] = load_policy(path, name=Path(path).name)
    except PolicyError as exc:
        policy = exc
    return grade(task, policy, backend, source=Path(path).name, target=target)
