"""Graded practice tasks: their definitions (data in ``grader/tasks/*.json``) and ``grade(task, policy, backend) -> Grade``.

A task is a statement, an optional starting policy and a rubric. A rubric is a
list of checks with points; each check requires some probes ``blocked`` (an
attack is stopped), some probes ``succeeded`` (the legitimate job still
works), or one fact of the policy itself (``POLICY_FACTS``: deliberately few).

Grading runs the policy once through the backend the caller passes and judges
every check from that one ``RunResult``. Every lost point is explained: the
probe, the evidence (the Docker backend's, or the static explanation) and a
concrete fix. A probe whose evidence could not be collected (``error``) fails
its check and says to rerun; it is never counted as blocked.

Imports: policy, plan, probes, outcomes, access, world, errors, backends.base
(the protocol only). Nothing downstream (no report, no CLI).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .access import Access, access_for
from .backends.base import Backend
from .errors import PolicyError, Problem, TaskError
from .outcomes import ProbeOutcome, RunResult
from .plan import build_plan
from .policy import Policy, load_policy
from .probes import PROBES, probe
from .wording import backend_phrase
from .world import load_world

__all__ = [
    "POLICY_FACTS",
    "SOLUTIONS_ENV",
    "Check",
    "CheckResult",
    "Grade",
    "Task",
    "all_tasks",
    "assert_check",
    "assert_passed",
    "grade",
    "grade_file",
    "load_task",
    "save_policy",
    "solution_path",
    "solution_text",
    "start_task",
    "task_ids",
]

# The policy facts a check may require. Few and explicit: everything else is
# judged by probes, i.e. by what the sandbox really lets happen.
POLICY_FACTS: dict[str, str] = {
    "allowedDomains-present-and-empty": "network.allowedDomains is written explicitly and is empty",
}

SOLUTIONS_ENV = "SANDBOX_LAB_SOLUTIONS"  # where solutions/ is, when the package is not run from the repo
_SLUG = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_PROBE_IDS = frozenset(p.id for p in PROBES)
_EVIDENCE_SHOWN = 3  # evidence lines quoted per probe; the full list is in `sandbox-lab probe --json`


# --- task files (untrusted-ish JSON: validated with pydantic) ------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Require(_Strict):
    blocked: Optional[tuple[str, ...]] = None
    succeeded: Optional[tuple[str, ...]] = None
    policy: Optional[str] = None

    @model_validator(mode="after")
    def _exactly_one(self) -> "_Require":
        given = [k for k in ("blocked", "succeeded", "policy") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError('give exactly one of "blocked", "succeeded" or "policy"')
        for pid in (self.blocked or ()) + (self.succeeded or ()):
            if pid not in _PROBE_IDS:
                raise ValueError(f"unknown probe {pid!r}")
        if self.blocked == () or self.succeeded == ():
            raise ValueError("list at least one probe")
        if self.policy is not None and self.policy not in POLICY_FACTS:
            raise ValueError(f"unknown policy fact {self.policy!r}; known: {', '.join(POLICY_FACTS)}")
        return self


class _CheckFile(_Strict):
    id: str
    points: int = Field(gt=0)
    description: str
    require: _Require
    fix: Optional[str] = None  # overrides the generated fix where the task knows better

    @field_validator("id")
    @classmethod
    def _slug(cls, v: str) -> str:
        if not _SLUG.match(v):
            raise ValueError("check ids are slugs (lowercase letters, digits, single hyphens)")
        return v


class _TaskFile(_Strict):
    id: str
    order: int = 100
    title: str
    statement: str
    starter: Optional[dict[str, Any]]
    checks: tuple[_CheckFile, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> "_TaskFile":
        if not _SLUG.match(self.id):
            raise ValueError("task ids are slugs (lowercase letters, digits, single hyphens)")
        ids = [c.id for c in self.checks]
        if len(set(ids)) != len(ids):
            raise ValueError("check ids must be unique within a task")
        return self


@dataclass(frozen=True)
class Check:
    """One rubric line: points for probes blocked, probes succeeded, or a policy fact."""

    id: str
    points: int
    description: str
    kind: Literal["blocked", "succeeded", "policy"]
    probes: tuple[str, ...] = ()
    fact: str = ""
    fix: Optional[str] = None


@dataclass(frozen=True)
class Task:
    """A graded practice task: statement, starting policy (or None) and rubric."""

    id: str
    title: str
    statement: str
    starter: Optional[dict[str, Any]]
    checks: tuple[Check, ...]
    order: int = 100

    @property
    def max_score(self) -> int:
        return sum(c.points for c in self.checks)

    def check(self, check_id: str) -> Check:
        for c in self.checks:
            if c.id == check_id:
                return c
        raise TaskError(f"task {self.id!r} has no check {check_id!r}; its checks: {', '.join(c.id for c in self.checks)}")

    def grade_id(self, check_id: str) -> str:
        """The nbgrader ``grade_id`` of a check: ``<task>-<check>``."""
        return f"{self.id}-{check_id}"


def _task_from(data: Any, source: str) -> Task:
    try:
        tf = _TaskFile.model_validate(data)
    except ValidationError as exc:
        lines = [f"  /{'/'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)]
        raise TaskError(f"{source} does not describe a task:\n" + "\n".join(lines)) from None
    checks = []
    for c in tf.checks:
        r = c.require
        if r.blocked is not None:
            checks.append(Check(c.id, c.points, c.description, "blocked", r.blocked, fix=c.fix))
        elif r.succeeded is not None:
            checks.append(Check(c.id, c.points, c.description, "succeeded", r.succeeded, fix=c.fix))
        else:
            checks.append(Check(c.id, c.points, c.description, "policy", fact=r.policy or "", fix=c.fix))
    if tf.starter is not None:
        try:
            load_policy(tf.starter, name=f"{source}: starter")
        except PolicyError as exc:
            raise TaskError(f"{source}: the starter is not a valid policy:\n{exc}") from None
    return Task(tf.id, tf.title, tf.statement, tf.starter, tuple(checks), tf.order)


def task_ids() -> tuple[str, ...]:
    """The ids of every task shipped with the package, in teaching order."""
    return tuple(t.id for t in all_tasks())


def _task_files() -> dict[str, str]:
    folder = resources.files("grader") / "tasks"
    return {
        entry.name[: -len(".json")]: entry.read_text(encoding="utf-8")
        for entry in folder.iterdir()
        if entry.name.endswith(".json")
    }


def load_task(task_id: str) -> Task:
    """The task called ``task_id``; ``TaskError`` if there is none or its file is broken."""
    files = _task_files()
    if task_id not in files:
        raise TaskError(f"unknown task {task_id!r}; known tasks: {', '.join(sorted(files))}")
    source = f"grader/tasks/{task_id}.json"
    try:
        data = json.loads(files[task_id])
    except ValueError as exc:
        raise TaskError(f"{source} is not JSON: {exc}") from None
    task = _task_from(data, source)
    if task.id != task_id:
        raise TaskError(f"{source} describes task {task.id!r}; the file name and the id must agree")
    return task


def all_tasks() -> tuple[Task, ...]:
    """Every task, in teaching order (``order``, then id)."""
    return tuple(sorted((load_task(t) for t in _task_files()), key=lambda t: (t.order, t.id)))


# --- reference solutions ------------------------------------------------------------------


def solution_path(task_id: str) -> Path:
    """The reference solution of a task: ``solutions/<id>.json`` in the repository.

    Solutions live once, in ``solutions/`` next to the package (an editable
    install or a checkout); ``SANDBOX_LAB_SOLUTIONS`` points elsewhere.
    """
    candidates = []
    if os.environ.get(SOLUTIONS_ENV):
        candidates.append(Path(os.environ[SOLUTIONS_ENV]))
    candidates.append(Path(__file__).resolve().parent.parent / "solutions")
    for folder in candidates:
        path = folder / f"{task_id}.json"
        if path.is_file():
            return path
    raise TaskError(
        f"no reference solution for {task_id!r} (looked in {', '.join(str(c) for c in candidates)}); "
        f"set {SOLUTIONS_ENV} to the repository's solutions/ directory"
    )


def solution_text(task_id: str) -> str:
    """The reference solution's JSON text."""
    return solution_path(task_id).read_text(encoding="utf-8")


# --- grading ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CheckResult:
    """One rubric line, judged."""

    id: str
    points: int
    max_points: int
    passed: bool
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "points": self.points, "max_points": self.max_points, "passed": self.passed, "message": self.message}


@dataclass(frozen=True)
class Grade:
    """The grade of one policy on one task: a result per check, and why points were lost."""

    task: str
    backend: str
    checks: tuple[CheckResult, ...]
    errors: tuple[Problem, ...] = ()  # validation problems: set only when the policy was invalid
    source: str = ""  # the policy's file name or label, for messages
    notes: tuple[str, ...] = field(default=())  # from the run, e.g. "predicted, not run: ..."

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
    def full_marks(self) -> bool:
        return self.valid and self.score == self.max_score

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
        if self.errors:
            out["errors"] = [{"pointer": p.pointer, "message": p.message} for p in self.errors]
        if self.notes:
            out["notes"] = list(self.notes)
        return out

    def feedback(self) -> str:
        """Plain-text feedback: the score, which backend judged, and every lost point explained."""
        lines = [f"{self.task}: {self.score}/{self.max_score} ({_backend_phrase(self.backend)})"]
        lines += [f"  note: {n}" for n in self.notes]
        if self.errors:
            lines.append(f"  {self.source or 'the policy'} is not a valid policy ({len(self.errors)} problem{'s' if len(self.errors) != 1 else ''}):")
            lines += [f"    {p.pointer}: {p.message}" for p in self.errors]
        for c in self.checks:
            mark = "PASS" if c.passed else "FAIL"
            lines.append(f"  [{mark}] {c.id} ({c.points}/{c.max_points}): {c.message}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.feedback()


def _backend_phrase(name: str) -> str:
    return backend_phrase(name)


def _evidence(o: ProbeOutcome) -> str:
    if o.evidence:
        shown = "; ".join(o.evidence[:_EVIDENCE_SHOWN])
        more = len(o.evidence) - _EVIDENCE_SHOWN
        return shown + (f" (and {more} more)" if more > 0 else "")
    return o.explanation.rstrip(".")


def _judge_probes(check: Check, run: RunResult, access: Access) -> CheckResult:
    want = "blocked" if check.kind == "blocked" else "succeeded"
    problems: list[str] = []
    for pid in check.probes:
        o = run.outcome(pid)
        p = probe(pid)
        if o.outcome == "error":
            problems.append(
                f"probe {pid}: the evidence could not be collected ({_evidence(o)}), so this check cannot be "
                "counted as passed. Rerun the grader (start Docker first if it stopped)."
            )
        elif o.outcome != want:
            fix = (check.fix or p.fix(p, access)).rstrip(".")
            if want == "blocked":
                problems.append(f"probe {pid} succeeded ({p.story}) Evidence: {_evidence(o)}. Fix: {fix}.")
            else:
                problems.append(f"probe {pid} was blocked ({p.story}) Evidence: {_evidence(o)}. Fix: {fix}.")
    if problems:
        return CheckResult(check.id, 0, check.points, False, f"{check.description} Not met: " + " ".join(problems))
    return CheckResult(check.id, check.points, check.points, True, check.description)


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


def grade(task: Task, policy_or_error: Union[Policy, PolicyError], backend: Backend) -> Grade:
    """Grade one policy on one task with one run of ``backend``.

    An invalid policy (``PolicyError``) scores 0 with its validation problems as
    feedback; it is never graded against a default. A failure of the grading
    machinery itself raises ``BackendError``: the policy was not judged.
    """
    if isinstance(policy_or_error, PolicyError):
        return _invalid(task, policy_or_error, backend.name)
    policy = policy_or_error
    needs_run = any(c.kind != "policy" for c in task.checks)
    run = backend.run(build_plan(policy)) if needs_run else None
    access = access_for(policy, load_world())
    results = []
    for c in task.checks:
        if c.kind == "policy":
            results.append(_judge_fact(c, policy))
        else:
            assert run is not None
            results.append(_judge_probes(c, run, access))
    return Grade(task.id, run.backend if run else backend.name, tuple(results), notes=run.notes if run else ())


def grade_file(task_or_id: Union[Task, str], path: Union[str, os.PathLike[str]], backend: Optional[Backend] = None) -> Grade:
    """Load the policy file at ``path`` and grade it; a missing or invalid file scores 0 with the reason.

    ``backend`` defaults to the static backend (instant; no Docker needed).
    """
    task = load_task(task_or_id) if isinstance(task_or_id, str) else task_or_id
    if backend is None:
        from .backends.static import StaticBackend

        backend = StaticBackend()
    try:
        policy: Union[Policy, PolicyError] = load_policy(path, name=Path(path).name)
    except PolicyError as exc:
        policy = exc
    return grade(task, policy, backend)


# --- notebook helpers ---------------------------------------------------------------------


def save_policy(path: Union[str, os.PathLike[str]], policy_json: str) -> None:
    """Write the learner's policy text to ``path`` as it is, then say whether it is valid.

    The text is saved even when invalid: grading then reports every problem,
    with its JSON pointer, instead of silently grading something else.
    """
    Path(path).write_text(policy_json.strip() + "\n", encoding="utf-8")
    try:
        load_policy(path, name=Path(path).name)
    except PolicyError as exc:
        print(f"Saved {path}, but it is not valid yet:\n{exc}")
        return
    print(f"Saved {path}: a valid policy.")


def start_task(task_id: str, policy_path: Union[str, os.PathLike[str]] = "my_policy.json") -> Task:
    """Begin a task in a notebook: return it, and remove a policy file left by an earlier run.

    A stale ``my_policy.json`` must never be graded in place of what the
    notebook writes now (nbgrader copies a student's files before re-running).
    """
    task = load_task(task_id)
    Path(policy_path).unlink(missing_ok=True)
    return task


def assert_passed(result: Grade, check_id: str) -> None:
    """Raise ``AssertionError`` with the feedback if the check failed (an nbgrader test cell calls this)."""
    c = result.check(check_id)
    if not c.passed:
        head = f"{result.task}/{check_id}: 0/{c.max_points}. "
        if result.errors:
            head += "The policy is not valid: " + "; ".join(f"{p.pointer}: {p.message}" for p in result.errors) + " "
        raise AssertionError(head + c.message)
    print(f"{result.task}/{check_id}: {c.points}/{c.max_points} ({result.backend}). {c.message}")


def assert_check(task_id: str, check_id: str, path: Union[str, os.PathLike[str]], backend: Optional[Backend] = None) -> None:
    """Grade the policy file at ``path`` afresh and assert one check (static backend unless one is given)."""
    assert_passed(grade_file(task_id, path, backend), check_id)
