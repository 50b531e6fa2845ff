"""The run service's wire form: a ``RunResult`` and an ``Execution`` as JSON, and the bodies of ``/v1/runs`` and ``/v1/executions``.

Both sides of docs/service-api.md use this module: the client
(``backends.remote``) writes the requests and reads the answers, the server
(``hosted.remote_kinds``) reads the requests and writes the answers. Every
reader is strict, because a verdict rests on what it reads: an unknown or a
missing field, a wrong type, an unknown probe id or outcome raises
``TransportError`` naming the JSON path (``$.probes[3].outcome``), never an
outcome. A lenient reader turns a dropped field into "no evidence", and "no
evidence" into *blocked*.

A result's form is ``RunResult.to_json``, the one JSON form of a run: every
field of every record, always, so a reader can tell a dropped field from an
empty one (the report ``probe --json`` prints, ``report.result_json``, is a
view of it for people). The records are
written from their dataclasses' own fields and read back against their type
hints by the one strict codec (``protocol/codec.py``, with its ``EVERY_FIELD``
rules; its errors said here as ``TransportError``): a field added to a record
is on the wire at once, and a field the other side does not know is an error,
not ignored.

The findings of a result are not on the wire: they are derived from the
policy and the world, so the reader computes them from its own world.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Optional, TypeVar, Union

from grader.core.access import access_for, baseline_access
from grader.core.errors import PolicyError
from grader.core.evidence import Evidence
from grader.core.execution import Execution, Job
from grader.core.findings import find
from grader.core.outcomes import ProbeOutcome, RunNoteCode, RunResult, Scope
from grader.core.plan import RunPlan
from grader.core.policy import Policy, parse_policy
from grader.core.probes import PROBES
from grader.core.world import World
from grader.protocol import codec

__all__ = [
    "REAL_BACKENDS", "RunRequest", "TransportError", "execution_from_json", "execution_request", "execution_to_json",
    "parse_execution_request", "parse_run_request", "result_from_json", "result_to_json", "run_request",
]

# The backends whose results rest on evidence: a prediction ("static") carries none, a real run always does
REAL_BACKENDS = frozenset({"docker", "srt"})
_KNOWN = {p.id: p for p in PROBES}
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
T = TypeVar("T")


class TransportError(ValueError):
    """A request or an answer of the run service that does not parse; ``str()`` names the JSON path and why.

    ``problems`` lists every problem found (a policy can have several), each as "<path>: <why>".
    """

    def __init__(self, problems: Union[str, tuple[str, ...]]) -> None:
        self.problems: tuple[str, ...] = (problems,) if isinstance(problems, str) else problems
        super().__init__("; ".join(self.problems))


def _key(path: str, key: str) -> str:
    return f"{path}.{key}" if _IDENT.match(key) else f'{path}["{key}"]'


# --- the records' codec: protocol/codec.py's, every field always, in this service's words -----------------


def _dump(value: Any) -> Any:
    """A record (dataclass), tuple, mapping, bytes or JSON scalar as its JSON value; every field, always."""
    return codec.encode(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else value


def _fail(path: str, why: str) -> TransportError:
    return TransportError(f"{path}: {why}")


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


_WANT = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", bytes: "a base64 string",
         list: "a list", dict: "an object"}


def _said(exc: codec.CodecError) -> TransportError:
    """The codec's error in this service's words: the JSON path of the field itself (``$.probes[3].outcome``)."""
    path = exc.root
    for s in exc.segments:
        path = f"{path}[{s}]" if isinstance(s, int) else _key(path, s)
    if exc.code == "unknown":
        more = f" (and {list(exc.names[1:])})" if exc.names[1:] else ""
        return _fail(_key(path, exc.names[0]), "unknown field" + more)
    if exc.code == "missing":
        return _fail(_key(path, exc.names[0]), "missing")
    if exc.code == "type":
        return _fail(path, f"expected {_WANT.get(exc.expected, exc.expected)}, got {_kind(exc.got)}")
    return _fail(path, exc.problem)


def _load(hint: Any, value: Any, path: str) -> Any:
    """``value`` read as the type ``hint`` says, or ``TransportError`` naming ``path``."""
    try:
        return codec.check(value, hint, path, codec.EVERY_FIELD)
    except codec.CodecError as exc:
        raise _said(exc) from None


def _record(cls: type[T], value: Any, path: str) -> T:
    """A record with exactly its fields, every one of them."""
    try:
        return codec.decode(cls, value, path, rules=codec.EVERY_FIELD)
    except codec.CodecError as exc:
        raise _said(exc) from None


def _object(value: Any, path: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """A JSON object with exactly ``keys``."""
    if not isinstance(value, dict):
        raise _fail(path, f"expected an object, got {_kind(value)}")
    unknown = sorted(set(value) - set(keys))
    if unknown:
        raise _fail(_key(path, unknown[0]), "unknown field")
    missing = [k for k in keys if k not in value]
    if missing:
        raise _fail(_key(path, missing[0]), "missing")
    return value


def _policy(value: Any, path: str) -> Optional[Policy]:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _fail(path, f"expected an object or null, got {_kind(value)}")
    try:
        return parse_policy(value, path)
    except PolicyError as exc:
        raise TransportError(tuple(f"{path}{_pointer_path(p.pointer)}: {p.message}" for p in exc.problems)) from None


def _pointer_path(pointer: str) -> str:
    """A JSON pointer (/filesystem/allowRead/0) as the rest of a JSON path (.filesystem.allowRead[0])."""
    out = ""
    for part in pointer.strip("/").split("/") if pointer.strip("/") else []:
        part = part.replace("~1", "/").replace("~0", "~")
        out += f"[{part}]" if part.isdigit() else _key("", part)
    return out


# --- a run's result -------------------------------------------------------------------------

_RESULT_KEYS = ("backend", "sandbox", "policy", "probes", "notes", "codes", "seconds", "run_id", "extra", "scope", "ran_at")


def result_to_json(result: RunResult) -> dict[str, Any]:
    """A ``RunResult`` as the run service sends it: its one JSON form, ``RunResult.to_json`` (every field, every
    probe's evidence; the timings and the findings stay behind)."""
    out = result.to_json()  # the one JSON form of a run
    _load(dict[str, Any], out["extra"], "$.extra")  # checked to be JSON before it leaves: no NaN, string keys
    return out


def result_from_json(data: Any, world: World) -> RunResult:
    """The ``RunResult`` ``result_to_json`` wrote, read strictly against ``world``; ``TransportError`` naming the path.

    Beyond the types: every probe id is one of the catalogue's, once, with its own kind; a real run's verdict
    (``blocked`` or ``succeeded``) rests on evidence, a prediction carries none; the scope names only paths
    of ``world``. The findings are computed here, from the policy and ``world``.
    """
    obj = _object(data, "$", _RESULT_KEYS)
    backend = _load(str, obj["backend"], "$.backend")
    sandbox = _load(Literal["policy", "baseline"], obj["sandbox"], "$.sandbox")
    policy = _policy(obj["policy"], "$.policy")
    if (policy is None) != (sandbox == "baseline"):
        raise _fail("$.policy", "a policy's run carries its policy; the baseline's is null")
    probes = _probes(obj["probes"], backend)
    scope = None if obj["scope"] is None else _scope(obj["scope"], world)
    access = baseline_access(world) if policy is None else access_for(policy, world)
    return RunResult(
        backend=backend, sandbox=sandbox, policy=policy, probes=probes,
        notes=_load(tuple[str, ...], obj["notes"], "$.notes"),
        codes=_load(tuple[RunNoteCode, ...], obj["codes"], "$.codes"),
        seconds=_load(float, obj["seconds"], "$.seconds"),
        run_id=_load(str, obj["run_id"], "$.run_id"),
        extra=_load(dict[str, Any], obj["extra"], "$.extra"),
        scope=scope, findings=find(access), ran_at=_load(str, obj["ran_at"], "$.ran_at"),
    )


def _probes(value: Any, backend: str) -> tuple[ProbeOutcome, ...]:
    if not isinstance(value, list):
        raise _fail("$.probes", f"expected a list, got {_kind(value)}")
    out: list[ProbeOutcome] = []
    for i, item in enumerate(value):
        where = f"$.probes[{i}]"
        p: ProbeOutcome = _record(ProbeOutcome, item, where)
        known = _KNOWN.get(p.id)
        if known is None:
            raise _fail(f"{where}.id", f"{p.id!r} is not a probe of this version of Sandbox Lab")
        if any(o.id == p.id for o in out):
            raise _fail(f"{where}.id", f"{p.id!r} is judged twice")
        if p.kind != known.kind:
            raise _fail(f"{where}.kind", f"{p.id} is {known.kind!r}, not {p.kind!r}")
        if backend in REAL_BACKENDS and p.outcome != "error" and not p.evidence:
            # a real run's "blocked" needs the attempt on record and the recorders alive: no evidence, no verdict
            raise _fail(f"{where}.evidence", f"a {backend} run's {p.outcome!r} rests on evidence; none was sent")
        if backend == "static" and p.evidence:
            raise _fail(f"{where}.evidence", "a prediction rests on no evidence; this one claims some")
        out.append(p)
    return tuple(out)


def _scope(value: Any, world: World) -> Scope:
    scope: Scope = _record(Scope, value, "$.scope")
    files = {f.path for f in world.files}
    for key, allowed in (("readable", files), ("writable", files | set(world.directories()))):
        items = getattr(scope, key)
        for i, path in enumerate(items):
            if path not in allowed:
                raise _fail(f"$.scope.{key}[{i}]", f"{path!r} is not a {'file' if key == 'readable' else 'path'} of the world")
        if list(items) != sorted(set(items)):
            raise _fail(f"$.scope.{key}", "not sorted, or an entry twice")
    hosts = [r.host for r in scope.reachable]
    if hosts != sorted(set(hosts)):
        raise _fail("$.scope.reachable", "not sorted by host, or a host twice")
    return scope


# --- an execution ---------------------------------------------------------------------------


def execution_to_json(ex: Execution) -> dict[str, Any]:
    """An ``Execution`` as the run service sends it: its output and all of its evidence, the next session's included."""
    out: dict[str, Any] = _dump(ex)
    return out


def execution_from_json(data: Any, world: World) -> Execution:
    """The ``Execution`` ``execution_to_json`` wrote, read strictly; ``TransportError`` naming the path.

    ``evidence`` may be null (the backend could not collect it: nothing can be claimed then), but never
    left out. A prediction has no execution: the static backend runs no code.
    """
    ex: Execution = _record(Execution, data, "$")
    if ex.backend not in REAL_BACKENDS:
        raise _fail("$.backend", f"{ex.backend!r} runs no code; an execution comes from one of {sorted(REAL_BACKENDS)}")
    ev = ex.evidence
    if ev is not None:
        files = {f.path for f in world.files}
        for key in ("canaries", "before"):
            for path in getattr(ev, key):
                if path not in files:
                    raise _fail(_key(f"$.evidence.{key}", path), "not a file of the world")
    return ex


# --- the requests ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RunRequest:
    """What a client may ask of ``/v1/runs``: which sandbox, its policy, which probes. Never a plan."""

    sandbox: Literal["policy", "baseline"]
    policy: Optional[Policy]
    probes: tuple[str, ...]


def run_request(plan: RunPlan) -> dict[str, Any]:
    """The body of ``POST /v1/runs`` for ``plan``: the policy and the probes; the server builds its own plan."""
    return {
        "sandbox": plan.sandbox,
        "policy": plan.policy.normalize() if plan.policy is not None else None,
        "probes": list(plan.probes),
    }


def parse_run_request(body: Any) -> RunRequest:
    """A ``/v1/runs`` body, read strictly (the server's side); ``TransportError`` naming the path."""
    obj = _object(body, "$", ("sandbox", "policy", "probes"))
    sandbox = _load(Literal["policy", "baseline"], obj["sandbox"], "$.sandbox")
    policy = _policy(obj["policy"], "$.policy")
    if (policy is None) != (sandbox == "baseline"):
        raise _fail("$.policy", 'a "policy" run needs its policy; the "baseline" takes null')
    probes: tuple[str, ...] = _load(tuple[str, ...], obj["probes"], "$.probes")
    if not probes:
        raise _fail("$.probes", "no probe asked for; name at least one")
    for i, pid in enumerate(probes):
        if pid not in _KNOWN:
            raise _fail(f"$.probes[{i}]", f"{pid!r} is not a probe of this version of Sandbox Lab")
        if pid in probes[:i]:
            raise _fail(f"$.probes[{i}]", f"{pid!r} is asked for twice")
    return RunRequest(sandbox, policy, probes)


_JOB_KEYS = ("code", "plant", "env", "timeout_s", "replay", "signer")


def execution_request(plan: RunPlan, job: Job) -> dict[str, Any]:
    """The body of ``POST /v1/executions``: the policy (null: the plain container) and the job."""
    return {
        "policy": plan.policy.normalize() if plan.policy is not None else None,
        "job": {"code": job.code, "plant": dict(job.plant), "env": dict(job.env), "timeout_s": job.timeout_s,
                "replay": job.replay, "signer": job.signer},
    }


def parse_execution_request(body: Any, world: World) -> tuple[Optional[Policy], Job]:
    """A ``/v1/executions`` body, read strictly and the job checked against ``world`` (``Job.check``): a job that
    passes selects only parts of the run's own world. ``TransportError`` naming the path."""
    obj = _object(body, "$", ("policy", "job"))
    policy = _policy(obj["policy"], "$.policy")
    raw = _object(obj["job"], "$.job", _JOB_KEYS)
    job = Job(
        code=_load(str, raw["code"], "$.job.code"),
        plant=_load(Mapping[str, str], raw["plant"], "$.job.plant"),
        env=_load(Mapping[str, str], raw["env"], "$.job.env"),
        timeout_s=_load(float, raw["timeout_s"], "$.job.timeout_s"),
        replay=_load(bool, raw["replay"], "$.job.replay"),
        signer=_load(Optional[str], raw["signer"], "$.job.signer"),
    )
    try:
        job.check(world)
    except ValueError as exc:
        raise _fail("$.job", str(exc)) from None
    return policy, job
