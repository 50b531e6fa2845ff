"""What the service can run: one record per kind (its route, its body's check, its run), in one table, ``KINDS``.

A kind's ``check`` validates a request body before anything is queued (cheap,
no engine) and raises a 400 ``invalid`` naming the JSON path of every problem;
its ``run`` takes the checked body on a worker and returns the JSON result,
exactly what the matching CLI command prints under ``--json`` (it calls the
same functions, never the CLI in a subprocess). Another kind is one entry:
``KINDS["runs"] = Kind("run", run_function)``.

Fail closed: an unknown field, a wrong type, an unknown task or level is a
400 before a run; a body that reaches ``run`` is checked again there (a job
in Redis is data someone could have written).

Imports the grading, the ladder and the CLI's JSON helper (``error_json``):
the results are the CLI's own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Iterator, Optional

from grader import backends
from grader.backends.base import Backend
from grader.plumbing.terminal import error_json
from grader.plumbing.terminal import one_line
from grader.core.errors import LevelError, PolicyError, TaskError
from grader.core.plan import build_plan
from grader.core.policy import Policy, load_policy
from grader.core.transport import TransportError, parse_execution_request, parse_run_request
from grader.core.world import load_world
from grader.grading.report import result_json
from grader.hosted import remote_kinds
from grader.hosted.kept import KeptBackends
from grader.core.text import text_problems
from grader.hosted.problems import ServiceError, invalid, json_path

__all__ = ["BACKEND_ENV", "KINDS", "Kind", "check_body", "keep_backends", "new_backend", "worker_backend"]

BACKEND_ENV = "SANDBOX_LAB_SERVICE_BACKEND"
# the attack source a level runs: a script, not a project (the body limit bounds it too)
_SOURCE_LIMIT = 64 * 1024


@dataclass(frozen=True)
class Kind:
    """One kind of job: its ``name`` (as jobs report it), what it runs, and the check its body passes first.

    ``check`` returns nothing and raises ``ServiceError`` (400) for a bad body;
    without one, only "the body is a JSON object" is checked before queueing
    and ``run`` does the rest (raising ``ServiceError`` too)."""

    name: str
    run: Callable[[dict[str, Any]], dict[str, Any]]
    check: Optional[Callable[[dict[str, Any]], None]] = None


def worker_backend(*, tenant_code: bool = False) -> ContextManager[Backend]:
    """The backend a job runs on, as a ``with`` block: the worker's kept one (``keep_backends``), else a new one
    closed at the block's end.

    ``tenant_code``: the job runs code a tenant sent (an attack, an execution's
    job), not only the project's probes against a tenant's policy; its
    sandboxes run under ``SANDBOX_LAB_CODE_RUNTIME`` (``scripts/serve``: gVisor's
    runsc where the engine has it), else ``SANDBOX_LAB_RUNTIME``'s. A probe or
    a grade carries a policy, which is JSON and selects parts of the world:
    its sandboxes run the project's code only, under ``SANDBOX_LAB_RUNTIME``
    (docs/scaling.md weighs the cost: a naive run takes 2.3x as long under runsc)."""
    if _kept is not None:
        return _kept.lease(tenant_code)
    return new_backend(tenant_code, shared=True)


def new_backend(tenant_code: bool = False, *, shared: bool = False) -> Backend:
    """A backend for a worker's jobs: Docker (``DOCKER_HOST`` honoured by the SDK); ``shared``: on the machine's
    hub (a backend per job shares its internet), else its own internet and proxy pool (a kept backend).
    ``SANDBOX_LAB_SERVICE_BACKEND`` names another backend (the static one in tests that need no engine); its
    results say which backend made them."""
    name = os.environ.get(BACKEND_ENV) or "docker"
    runtime: Optional[str] = None
    if tenant_code and name == "docker":
        from grader.backends.docker.runtimes import code_runtime_from_env  # the engine's modules: workers only

        runtime = code_runtime_from_env(os.environ)
    return backends.get(name, shared=shared, runtime=runtime)


def keep_backends(kept: Optional[KeptBackends]) -> None:
    """Make this process's jobs run on ``kept``'s backends (a worker in kept mode), or on a new one each (None)."""
    global _kept
    _kept = kept


_kept: Optional[KeptBackends] = None


def _fields(body: dict[str, Any], required: tuple[str, ...], optional: tuple[str, ...] = ()) -> Iterator[tuple[str, str]]:
    for key in required:
        if key not in body:
            yield f"$.{key}", "is required."
    for key in body:
        if key not in required and key not in optional:
            known = ", ".join(f'"{k}"' for k in (*required, *optional))
            yield f"$.{key}", f"unknown field; this kind takes {known}."


def _policy(value: Any, where: str = "$.policy") -> Policy:
    if not isinstance(value, dict):
        raise invalid([(where, "must be a JSON object: the policy, as in a policy file.")])
    try:
        return load_policy(value)
    except PolicyError as exc:
        raise invalid([(json_path(p.pointer, where), p.message) for p in exc.problems]) from None


def _require(problems: list[tuple[str, str]]) -> None:
    if problems:
        raise invalid(problems)


# --- probe --------------------------------------------------------------------------------------


def _check_probe(body: dict[str, Any]) -> None:
    _require(list(_fields(body, ("policy",))))
    _policy(body["policy"])


def _run_probe(body: dict[str, Any]) -> dict[str, Any]:
    """What ``sandbox-lab probe --json`` prints for this policy."""
    _check_probe(body)
    policy = _policy(body["policy"])
    with worker_backend() as backend:
        return result_json(backend.run(build_plan(policy)))


# --- grade --------------------------------------------------------------------------------------


def _target(body: dict[str, Any]) -> Any:
    from grader.core.access import TARGETS

    value = body.get("target", "srt")
    if value not in TARGETS:
        raise invalid([("$.target", f"must be one of {', '.join(TARGETS)}: who starts the sandbox, whose rules decide.")])
    return value


def _task(value: Any) -> Any:
    from grader.grading.tasks import load_task

    if not isinstance(value, str):
        raise invalid([("$.task", "must be a task id (a string), e.g. from `sandbox-lab tasks`.")])
    try:
        return load_task(value)
    except TaskError as exc:
        raise invalid([("$.task", one_line(exc))]) from None


def _check_grade(body: dict[str, Any]) -> None:
    _require(list(_fields(body, ("task", "policy"), ("target",))))
    _task(body["task"])
    _target(body)
    if not isinstance(body["policy"], dict):  # an invalid policy is graded (0, with its problems), as the CLI does
        raise invalid([("$.policy", "must be a JSON object: the policy, as in a policy file.")])


def _run_grade(body: dict[str, Any]) -> dict[str, Any]:
    """What ``sandbox-lab grade --json`` prints: an invalid policy scores 0 with its problems, never a default policy."""
    from grader.grading.grade import grade

    _check_grade(body)
    task = _task(body["task"])
    policy: Policy | PolicyError
    try:
        policy = load_policy(body["policy"])
    except PolicyError as exc:
        policy = exc
    with worker_backend() as backend:
        data = grade(task, policy, backend, target=_target(body)).to_json()
    if isinstance(policy, PolicyError):
        data.update(error_json(one_line(policy), policy.as_json()))
    return data


# --- attack -------------------------------------------------------------------------------------


def _level(body: dict[str, Any]) -> Any:
    from grader.course.ladder import level

    value = body["level"]
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise invalid([("$.level", "must be a level's number or id, e.g. 1 (see `sandbox-lab attack --list`).")])
    try:
        lvl = level(value)
    except LevelError as exc:
        raise invalid([("$.level", one_line(exc))]) from None
    return lvl


def _attack_policy(body: dict[str, Any]) -> Optional[Policy]:
    return None if body.get("policy") is None else _policy(body["policy"])


def _check_attack(body: dict[str, Any]) -> None:
    _require(list(_fields(body, ("level", "source"), ("policy",))))
    lvl = _level(body)
    source = body["source"]
    if not isinstance(source, str) or not source.strip():
        raise invalid([("$.source", "must be your attack's Python source, as text.")])
    if len(source.encode("utf-8", "surrogatepass")) > _SOURCE_LIMIT:
        raise invalid([("$.source", f"is over {_SOURCE_LIMIT} bytes; an attack is one script.")])
    try:
        lvl.plan(policy=_attack_policy(body))  # the capstone's policy is checked, every other level refuses one
    except LevelError as exc:
        raise invalid([("$.policy", one_line(exc))]) from None


def _run_attack(body: dict[str, Any]) -> dict[str, Any]:
    """What ``sandbox-lab attack --json`` prints. Hints start from the first: the service keeps no attempts yet."""
    from grader.course.ladder import attack

    _check_attack(body)
    with worker_backend(tenant_code=True) as backend:
        return attack(_level(body), body["source"], backend, attempts_before=0, policy=_attack_policy(body)).to_json()


# --- runs and executions: what --backend remote asks for (hosted.remote_kinds) -------------------


def _transport(check: Callable[[Any], object]) -> Callable[[dict[str, Any]], None]:
    """A wire-form parser as a kind's check: its ``TransportError`` becomes the 400 naming each path."""

    def checked(body: dict[str, Any]) -> None:
        try:
            check(body)
        except TransportError as exc:
            raise invalid([_located(p) for p in exc.problems]) from None

    return checked


def _located(problem: str) -> tuple[str, str]:
    """"$.a.b: why" as (path, why); a problem without a path concerns the whole body."""
    path, sep, why = problem.partition(": ")
    return (path, why) if sep and path.startswith("$") else ("$", problem)


def _run_run(body: dict[str, Any]) -> dict[str, Any]:
    with worker_backend() as backend:
        return remote_kinds.run(body, backend=backend)


def _run_execution(body: dict[str, Any]) -> dict[str, Any]:
    with worker_backend(tenant_code=True) as backend:  # the job's code is the client's
        return remote_kinds.execute(body, backend=backend)


# --- the table ----------------------------------------------------------------------------------

# keyed by the route's last segment: POST /v1/<key>
KINDS: dict[str, Kind] = {
    "probe": Kind("probe", _run_probe, _check_probe),
    "grade": Kind("grade", _run_grade, _check_grade),
    "attack": Kind("attack", _run_attack, _check_attack),
    "runs": Kind("run", _run_run, _transport(parse_run_request)),
    "executions": Kind("execution", _run_execution, _transport(lambda body: parse_execution_request(body, load_world()))),
}


def check_body(route: str, body: Any, kinds: Optional[dict[str, Kind]] = None) -> Kind:
    """The kind at ``route`` after its body passed its check; an unknown route is a 404, a bad body a 400."""
    table = KINDS if kinds is None else kinds
    kind = table.get(route)
    if kind is None:
        raise ServiceError(404, "not_found", f"no kind {route!r}; the service runs {', '.join(sorted(table))}.")
    if not isinstance(body, dict):
        raise invalid([("$", "must be a JSON object.")])
    bad_text = text_problems(body)  # the one text check every boundary makes, before any kind reads a field
    if bad_text:
        raise invalid([(json_path(p.pointer), p.message) for p in bad_text])
    if kind.check is not None:
        kind.check(body)
    return kind
