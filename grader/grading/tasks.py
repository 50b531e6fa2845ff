"""Graded practice tasks: their definitions, as data in ``grader/tasks/*.json``, loaded and validated.

A task is a statement, what its job needs (``needs.Needs``: the paths it reads
and writes, the hosts it talks to), an optional starting policy and a rubric. A
rubric is a list of checks with points; each check requires some probes
``blocked`` (an attack is stopped), some probes ``succeeded`` (the legitimate
job still works), the sandbox's scope to stay within the needs on one axis
(``least``: ``read``, ``write`` or ``network``), or one fact of the policy
itself (``POLICY_FACTS``: deliberately few).

A probe tries one path; a check's description usually claims a whole class of
them ("nothing in /home/user can be written"). So a ``blocked`` check may also
require the measured scope to hold none of a set of world paths or hosts
(``unreadable``, ``unwritable``: selectors over the world, resolved here into
the exact paths; ``unreachable``: every host, the attacker's, or the upload
hosts). The probes give the story and the evidence; the scope makes the check
test everything it says (tests/unit/grading/test_rubric_claims.py holds every
description to its measurement).

Full marks must mean least privilege, so a task file is refused unless its
rubric has all three ``least`` checks, and unless its needs cover every probe
its job checks require to succeed (otherwise full marks would be impossible).
Grading itself lives in ``grading``; notebook helpers in ``notebook``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, get_args

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from grader.protocol.domains import normalize_pattern
from grader.core.errors import PolicyError, TaskError
from grader.core.jsonfile import json_problem
from grader.core.needs import Axis, HostNeed, Needs
from grader.core.paths import covers, normalize_path
from grader.core.policy import load_policy
from grader.core.probes import PROBES, probe
from grader.core.scope import scanned_dirs, scanned_files
from grader.core.world import Role, World, load_world

__all__ = [
    "LEAST_AXES",
    "POLICY_FACTS",
    "Check",
    "CheckKind",
    "Unreachable",
    "Task",
    "all_tasks",
    "load_task",
    "task_ids",
]

# The policy facts a check may require. Few and explicit: everything else is
# judged by probes and by the scope, i.e. by what the sandbox really lets happen.
POLICY_FACTS: dict[str, str] = {
    "allowedDomains-present-and-empty": "network.allowedDomains is written explicitly and is empty",
}
LEAST_AXES: tuple[Axis, ...] = get_args(Axis)

CheckKind = Literal["blocked", "succeeded", "policy", "least"]
# Which reachable hosts a check forbids: any at all, the names the attacker owns (attacker.example,
# and every name the world does not know), or the hosts that accept uploads (and the attacker's).
Unreachable = Literal["any", "attacker", "uploads"]

_SLUG = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_PROBE_IDS = frozenset(p.id for p in PROBES)


# --- task files (untrusted-ish JSON: validated with pydantic) ------------------------------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _world_of(info: ValidationInfo) -> World:
    """The world a task file is validated against: handed in by ``_task_from`` as the validation context."""
    world = info.context.get("world") if isinstance(info.context, dict) else None
    if not isinstance(world, World):  # a caller that forgot it: an error, never a default world
        raise TypeError("a task file is validated against a world: pass context={'world': ...}")
    return world


def _world_path(raw: str, info: ValidationInfo) -> str:
    path = normalize_path(raw)
    world = _world_of(info)
    if world.root_of(path) is None:
        raise ValueError(f"{path} is outside the simulated machine ({', '.join(world.roots)}); a job can only need world paths")
    return path


def _world_host(raw: str, info: ValidationInfo) -> str:
    host = normalize_pattern(raw)
    if host.startswith("*."):
        raise ValueError(f'"{host}" is a wildcard; a job needs exact hosts. Name each one, e.g. "{host[2:]}".')
    world = _world_of(info)
    if host not in world.host_names:
        raise ValueError(f'"{host}" is not a host of the simulated internet; known: {", ".join(world.host_names)}')
    return host


WorldPath = Annotated[str, AfterValidator(_world_path)]
WorldHost = Annotated[str, AfterValidator(_world_host)]


class _HostNeedFile(_Strict):
    host: WorldHost = Field(description="an exact host of the simulated internet the job talks to")
    use: Literal["download", "upload"] = Field(description="whether the job only downloads from it, or also uploads to it")

    @model_validator(mode="after")
    def _uploads_exist(self, info: ValidationInfo) -> "_HostNeedFile":
        if self.use == "upload" and not _world_of(info).host(self.host).uploads:
            raise ValueError(f'{self.host} accepts no uploads in the world; write "use": "download"')
        return self


class _NeedsFile(_Strict):
    read: tuple[WorldPath, ...] = Field(description="paths the job reads (each with what lies below it)")
    write: tuple[WorldPath, ...] = Field(description="paths the job writes or creates files in")
    hosts: tuple[_HostNeedFile, ...] = Field(description="hosts the job talks to; [] for no network")


class _Paths(_Strict):
    """A set of world paths, by where they lie and what they are: every condition given must hold."""

    under: Optional[tuple[WorldPath, ...]] = Field(None, description="only paths at or below one of these")
    outside: Optional[tuple[WorldPath, ...]] = Field(None, description="only paths at or below none of these")
    roles: Optional[tuple[Role, ...]] = Field(None, description="only paths with one of these world roles")

    @model_validator(mode="after")
    def _something(self) -> "_Paths":
        if self.under is None and self.outside is None and self.roles is None:
            raise ValueError('give "under", "outside" or "roles" (or more than one: all must hold)')
        return self


_SCOPE_KEYS = ("unreadable", "unwritable", "unreachable")


class _Require(_Strict):
    blocked: Optional[tuple[str, ...]] = None
    succeeded: Optional[tuple[str, ...]] = None
    policy: Optional[str] = None
    least: Optional[Axis] = None
    # what the measured scope must not hold: alone, or beside "blocked" (a union of selectors each)
    unreadable: Optional[tuple[_Paths, ...]] = None
    unwritable: Optional[tuple[_Paths, ...]] = None
    unreachable: Optional[Unreachable] = None

    @model_validator(mode="after")
    def _exactly_one(self) -> "_Require":
        given = [k for k in ("blocked", "succeeded", "policy", "least") if getattr(self, k) is not None]
        scoped = [k for k in _SCOPE_KEYS if getattr(self, k) is not None]
        if scoped and given not in ([], ["blocked"]):
            raise ValueError(f'"{scoped[0]}" goes alone or beside "blocked" (what the scope must not hold, besides the attacks)')
        if len(given) != 1 and not (scoped and not given):
            raise ValueError('give exactly one of "blocked", "succeeded", "policy" or "least"')
        if self.unreadable == () or self.unwritable == ():
            raise ValueError("list at least one selector of world paths")
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
    needs: _NeedsFile
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
    """One rubric line: points for probes blocked, probes succeeded, the scope within the needs, or a policy fact.

    A ``blocked`` check may also name what the measured scope must not hold:
    world files no one may read (``unreadable``), world files and directories
    no one may change or create a file in (``unwritable``), and which hosts no
    one may reach (``unreachable``).
    """

    id: str
    points: int
    description: str
    kind: CheckKind
    probes: tuple[str, ...] = ()
    fact: str = ""
    fix: Optional[str] = None
    axis: Optional[Axis] = None  # for kind "least"
    unreadable: tuple[str, ...] = ()
    unwritable: tuple[str, ...] = ()
    unreachable: Optional[Unreachable] = None

    @property
    def scoped(self) -> bool:
        """Does the check read the measured scope (so it cannot pass where the scope was not measured)?"""
        return self.kind == "least" or bool(self.unreadable or self.unwritable or self.unreachable)


@dataclass(frozen=True)
class Task:
    """A graded practice task: statement, the job's needs, starting policy (or None) and rubric."""

    id: str
    title: str
    statement: str
    starter: Optional[dict[str, Any]]
    checks: tuple[Check, ...]
    # the world its checks were resolved against and its needs validated in: its runs are judged in this one
    world: World = field(repr=False)
    order: int = 100
    needs: Needs = Needs()

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


def _select_paths(world: World, selectors: tuple[_Paths, ...], axis: Literal["read", "write"]) -> tuple[str, ...]:
    """The world paths the selectors pick (their union), among those the scope measures on ``axis``:
    files for reading; files and directories for writing. The runtime is never among them."""
    pool = scanned_files(world) if axis == "read" else (*scanned_files(world), *scanned_dirs(world))
    out = []
    for path in pool:
        role = world.entry(path).role
        for sel in selectors:
            if sel.under is not None and not any(covers(u, path) for u in sel.under):
                continue
            if sel.outside is not None and any(covers(o, path) for o in sel.outside):
                continue
            if sel.roles is not None and role not in sel.roles:
                continue
            out.append(path)
            break
    return tuple(sorted(dict.fromkeys(out)))


def _check_from(c: _CheckFile, world: World) -> Check:
    r = c.require
    if r.blocked is not None or r.unreadable or r.unwritable or r.unreachable:
        return Check(
            c.id, c.points, c.description, "blocked", r.blocked or (), fix=c.fix,
            unreadable=_select_paths(world, r.unreadable or (), "read"),
            unwritable=_select_paths(world, r.unwritable or (), "write"),
            unreachable=r.unreachable,
        )
    if r.succeeded is not None:
        return Check(c.id, c.points, c.description, "succeeded", r.succeeded, fix=c.fix)
    if r.least is not None:
        return Check(c.id, c.points, c.description, "least", fix=c.fix, axis=r.least)
    return Check(c.id, c.points, c.description, "policy", fact=r.policy or "", fix=c.fix)


def _consistency(tf: _TaskFile, needs: Needs, world: World) -> list[str]:
    """What makes full marks impossible or meaningless: an unmeasurable need, a job probe outside the needs, a missing least check."""
    problems = []
    files = [f.path for f in world.files if f.role != "runtime"]
    for i, n in enumerate(needs.read):
        if not any(covers(n, f) for f in files):
            problems.append(f"/needs/read/{i}: no world file lies in {n}, so no run can show the job reading it; name a directory that holds one")
    for i, n in enumerate(needs.write):
        if not any(covers(n, p) for p in [*files, *world.directories()]):
            problems.append(f"/needs/write/{i}: the world has nothing at {n}, so no run can show the job writing it; name a world directory or file")
    for i, c in enumerate(tf.checks):
        for key in ("unreadable", "unwritable"):
            for j, sel in enumerate(getattr(c.require, key) or ()):
                if not _select_paths(world, (sel,), "read" if key == "unreadable" else "write"):
                    problems.append(f"/checks/{i}/require/{key}/{j}: selects no world path, so it measures nothing; widen it")
        for j, pid in enumerate(c.require.succeeded or ()):
            p = probe(pid)
            where = f"/checks/{i}/require/succeeded/{j}"
            if p.action == "read" and p.target and not any(covers(n, p.target) for n in needs.readable):
                problems.append(f"{where}: {pid} reads {p.target}, which needs.read does not cover; add it to needs.read")
            elif p.action == "write" and p.target and not any(covers(n, p.target) for n in needs.write):
                problems.append(f"{where}: {pid} writes {p.target}, which needs.write does not cover; add it to needs.write")
            for h in p.hosts:
                if h not in needs.host_names:
                    problems.append(f'{where}: {pid} fetches from {h}, which needs.hosts does not list; add {{"host": "{h}", "use": "download"}}')
    axes = {c.require.least for c in tf.checks}
    for axis in LEAST_AXES:
        if axis not in axes:
            problems.append(
                f'/checks: no check requires {{"least": "{axis}"}}. Full marks must mean the sandbox grants the job '
                f"what it needs and nothing else: add a least-{axis} check"
            )
    return problems


def _task_from(data: Any, source: str, world: World) -> Task:
    try:
        tf = _TaskFile.model_validate(data, context={"world": world})
    except ValidationError as exc:
        lines = [f"  /{'/'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)]
        raise TaskError(f"{source} does not describe a task:\n" + "\n".join(lines)) from None
    n = tf.needs
    needs = Needs(n.read, n.write, tuple(HostNeed(h.host, h.use) for h in n.hosts))
    problems = _consistency(tf, needs, world)
    if problems:
        raise TaskError(f"{source} does not describe a task:\n" + "\n".join(f"  {p}" for p in problems))
    if tf.starter is not None:
        try:
            load_policy(tf.starter, name=f"{source}: starter")
        except PolicyError as exc:
            raise TaskError(f"{source}: the starter is not a valid policy:\n{exc}") from None
    checks = tuple(_check_from(c, world) for c in tf.checks)
    return Task(tf.id, tf.title, tf.statement, tf.starter, checks, world, tf.order, needs)


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


def load_task(task_id: str, world: Optional[World] = None) -> Task:
    """The task called ``task_id``, in ``world`` (None: Sandbox Lab's own); ``TaskError`` if there is none or its file is broken."""
    files = _task_files()
    if task_id not in files:
        raise TaskError(f"unknown task {task_id!r}; known tasks: {', '.join(sorted(files))}")
    source = f"grader/tasks/{task_id}.json"
    try:
        data = json.loads(files[task_id])
    except json.JSONDecodeError as exc:
        raise TaskError(f"{source}: {json_problem(exc)}") from None
    task = _task_from(data, source, world if world is not None else load_world())
    if task.id != task_id:
        raise TaskError(f"{source} describes task {task.id!r}; the file name and the id must agree")
    return task


def all_tasks(world: Optional[World] = None) -> tuple[Task, ...]:
    """Every task, in ``world`` (None: Sandbox Lab's own), in teaching order (``order``, then id)."""
    return tuple(sorted((load_task(t, world) for t in _task_files()), key=lambda t: (t.order, t.id)))


