"""The remote backend: a plan run in a real sandbox by the run service (docs/service-api.md), over HTTP.

For learners without a Docker engine (Binder, a JupyterHub pod): the service
at ``SANDBOX_LAB_SERVICE_URL`` runs the plan on its own Docker engine and
sends the result back with its evidence. The standard library only (urllib):
Binder installs nothing for it.

One call is one job: ``POST /v1/runs`` (or ``/v1/executions``) answers ``202``
with a job id, then ``GET /v1/jobs/<id>`` is polled, backing off, until the
job is ``finished`` or ``failed`` or the deadline passes. The answer is read
strictly (``core.transport``) and checked against the plan that was asked
for: the same sandbox, the same policy, exactly the probes asked, from a real
backend. The result keeps its real backend ("docker") and says where it ran
(``wording.ran_at_note``: "ran in a real sandbox at <service>").

Fail closed, and say so: a service that cannot be reached, refuses the token
(401), is over quota (429) or is unavailable (503: no live worker or engine,
or its Redis unreachable) gives the static prediction, labelled "predicted, not run: the run service at <url> could not
run it (<why>)", as ``auto`` does without an engine. Anything else that goes
wrong (a failed job, the deadline, an answer that does not parse or answers
another question) is a ``BackendError``: never an outcome, never *blocked*.
While an accepted job is polled, a 503 or no answer is waited through (Redis
restarting) until the deadline, then the labelled prediction.
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import replace
from http.client import HTTPException
from typing import Any, Callable, Optional

from grader.core.errors import BackendError
from grader.core.execution import Execution, Job
from grader.core.findings import find
from grader.core.outcomes import RunResult
from grader.core.plan import BASELINE_HARDENING, Hardening, RunPlan
from grader.core.transport import (
    REAL_BACKENDS, TransportError, execution_from_json, execution_request, result_from_json, run_request,
)
from grader.core.version import __version__
from grader.core.wording import RAN_AT, ran_at_note
from grader.core.world import load_world
from grader.backends.base import Closing
from grader.backends.static import StaticBackend

__all__ = ["DEADLINE_S", "RemoteBackend", "SERVICE_URL_ENV", "ServiceUnavailable", "TOKEN_ENV"]

SERVICE_URL_ENV = "SANDBOX_LAB_SERVICE_URL"
TOKEN_ENV = "SANDBOX_LAB_TOKEN"
DEADLINE_S = 300.0  # a run takes seconds; a queue at peak, minutes; past this the learner is told, not kept waiting
_REQUEST_TIMEOUT_S = 30.0  # one HTTP exchange; the run itself is waited for by polling, not on one socket
_MAX_ANSWER_BYTES = 64 * 1024 * 1024  # a run's evidence is large (every world file after the run), never this large
_FIRST_POLL_S, _MAX_POLL_S = 0.2, 2.0
# the statuses after which the service cannot run this now, and the static prediction is shown instead
_FALL_BACK = {401: "the token was refused", 429: "over quota", 503: "the service is unavailable"}
# while a job accepted is polled, these pass (Redis restarting, the API redeployed): the job is kept in the
# service's queue, so the poll goes on until the deadline instead of giving up the run the service will finish
_PASSING = (503,)


class ServiceUnavailable(BackendError):
    """The run service cannot run this now: unreachable, the token refused (401), over quota (429), no worker (503)."""

    def __init__(self, service: str, why: str, *, passing: bool = False) -> None:
        self.service = service
        self.why = why
        self.passing = passing  # unreachable or 503: may pass while an accepted job is polled
        super().__init__(f"the run service at {service} could not run it ({why})")


_Sleep = Callable[[float], None]
_Clock = Callable[[], float]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an error, never followed: urllib would carry the bearer token to wherever it points."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


class RemoteBackend(Closing):
    """Runs plans on the run service at ``url`` with the bearer ``token``; holds no connection between calls."""

    name = "remote"

    def __init__(self, url: str, token: str = "", *, deadline_s: float = DEADLINE_S,
                 sleep: _Sleep = time.sleep, clock: _Clock = time.monotonic) -> None:
        parts = urllib.parse.urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise BackendError(f"{SERVICE_URL_ENV}: {url!r} is not an http:// or https:// URL of a run service")
        if "@" in parts.netloc or parts.query or parts.fragment:
            # the URL is said in every result's note: a password in it would be printed on every board
            raise BackendError(f"{SERVICE_URL_ENV}: give the service's URL alone (no user, query or fragment); "
                               f"the token goes in {TOKEN_ENV}")
        self.url = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"
        self._token = token.strip()  # never in a message, a note or a repr
        self.deadline_s = deadline_s
        self._sleep = sleep
        self._clock = clock

    @classmethod
    def from_env(cls) -> "RemoteBackend":
        """The service ``SANDBOX_LAB_SERVICE_URL`` names, with ``SANDBOX_LAB_TOKEN``; ``BackendError`` when none is set."""
        url = os.environ.get(SERVICE_URL_ENV, "").strip()
        if not url:
            raise BackendError(
                f"no run service is configured: set {SERVICE_URL_ENV} (and {TOKEN_ENV}, a token its operator issued), "
                "or use `--backend static` for a prediction"
            )
        return cls(url, os.environ.get(TOKEN_ENV, ""))

    def __repr__(self) -> str:
        return f"RemoteBackend({self.url!r})"

    @property
    def notice(self) -> str:
        """What ``describe_backend`` adds: where the runs go."""
        return f"runs go to the run service at {self.url}"

    # --- the Backend protocol -----------------------------------------------------------------

    def run(self, plan: RunPlan) -> RunResult:
        """The plan's probes run by the service; its static prediction, labelled, when the service cannot run it."""
        _check_plan(plan)
        try:
            answer = self._job("/v1/runs", run_request(plan))
        except ServiceUnavailable as exc:
            return StaticBackend(notice=f"predicted, not run: {exc}", cause="run-service").run(plan)
        try:
            result = result_from_json(answer, plan.world)
        except TransportError as exc:
            raise BackendError(f"the run service at {self.url} sent a result that does not parse: {exc}") from None
        _answers(result, plan, self.url)
        return replace(
            result, policy=plan.policy, findings=find(plan.access),
            notes=(*result.notes, ran_at_note(self.url)), extra={**result.extra, "ran_at": self.url}, ran_at=self.url,
        )

    def execute(self, plan: RunPlan, job: Job) -> Execution:
        """The job run by the service in the plan's sandbox; ``BackendError`` when it cannot (the static
        backend cannot predict code, so there is no fallback here)."""
        _check_plan(plan)
        job.check(plan.world)
        try:
            answer = self._job("/v1/executions", execution_request(plan, job))
        except ServiceUnavailable as exc:
            raise BackendError(f"{exc}; an attack cannot be predicted, only run. Try again later.") from None
        try:
            ex = execution_from_json(answer, plan.world)
        except TransportError as exc:
            raise BackendError(f"the run service at {self.url} sent an execution that does not parse: {exc}") from None
        _says_where(ex.ran_at, ex.notes, f"the run service at {self.url} answered")
        return replace(ex, notes=(*ex.notes, ran_at_note(self.url)), ran_at=self.url)

    # --- the job protocol ---------------------------------------------------------------------

    def _job(self, route: str, body: dict[str, Any]) -> Any:
        """Start a job and wait for it; its ``result``. ``ServiceUnavailable`` or ``BackendError`` otherwise."""
        deadline = self._clock() + self.deadline_s
        started = self._call("POST", route, body, expect=202)
        ticket = _fields(started, "the answer to POST " + route, ("job", "status", "url"))
        job = ticket["job"]
        # "finished" at once: the service answers a request it ran before from its cache (the contract's refinement)
        if not isinstance(job, str) or not job or "/" in job or ticket["status"] not in ("queued", "finished"):
            raise BackendError(f"the run service at {self.url} answered POST {route} without a queued job: {_short(started)}")
        where = f"/v1/jobs/{urllib.parse.quote(job, safe='')}"
        delay = _FIRST_POLL_S
        while True:
            try:
                polled = self._call("GET", where, None, expect=200)
            except ServiceUnavailable as exc:
                left = deadline - self._clock()
                if not exc.passing:
                    raise
                if left <= 0:  # gone for good, as far as this run can wait: the labelled prediction
                    raise ServiceUnavailable(self.url, f"{exc.why}; job {job} was accepted, and the service stayed "
                                             f"unavailable until the {self.deadline_s:.0f} s deadline") from None
                self._sleep(min(delay, left))
                delay = min(delay * 1.5, _MAX_POLL_S)
                continue
            state = _fields(polled, f"job {job}", ("job", "status", "kind", "result", "error", "cached", "ran_at"))
            status = state["status"]
            if state["job"] != job:
                raise BackendError(f"the run service at {self.url} answered for job {state['job']!r}, not {job!r}")
            if status == "finished":
                if not isinstance(state["result"], dict):
                    raise BackendError(f"the run service at {self.url} finished job {job} without a result")
                return state["result"]
            if status == "failed":
                error = state["error"] if isinstance(state["error"], dict) else {}
                raise BackendError(
                    f"the run service at {self.url} could not finish job {job} "
                    f"({error.get('code', '?')}: {error.get('message', 'no reason given')}); nothing was judged, rerun it"
                )
            if status not in ("queued", "started"):
                raise BackendError(f"the run service at {self.url} says job {job} is {status!r}, not a job's status")
            left = deadline - self._clock()
            if left <= 0:
                raise BackendError(
                    f"the run service at {self.url} did not finish job {job} within {self.deadline_s:.0f} s "
                    f"(still {status}); nothing was judged. Try again later."
                )
            self._sleep(min(delay, left))
            delay = min(delay * 1.5, _MAX_POLL_S)

    def _call(self, method: str, route: str, body: Optional[dict[str, Any]], *, expect: int) -> Any:
        """One HTTP exchange; the answer's JSON. The statuses the contract gives a fallback raise ``ServiceUnavailable``."""
        data = None if body is None else json.dumps(body, allow_nan=False).encode("utf-8")
        headers = {"Accept": "application/json", "User-Agent": f"sandbox-lab/{__version__}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        request = urllib.request.Request(self.url + route, data=data, method=method, headers=headers)
        try:
            with _OPENER.open(request, timeout=_REQUEST_TIMEOUT_S) as response:  # http(s) only, checked in __init__
                status, raw = response.status, response.read(_MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read(64 * 1024)
            exc.close()
        except (urllib.error.URLError, OSError, HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, socket.timeout):
                reason = "no answer in time"
            raise ServiceUnavailable(self.url, f"cannot reach it: {reason}", passing=True) from None
        if status in _FALL_BACK:
            why = _FALL_BACK[status]
            if status == 401 and not self._token:
                why = f"no token: set {TOKEN_ENV} to a token the operator issued"
            raise ServiceUnavailable(self.url, f"HTTP {status}, {why}{_message(raw)}", passing=status in _PASSING)
        if status != expect:
            raise BackendError(f"the run service at {self.url} answered {method} {route} with HTTP {status}{_message(raw)}")
        if len(raw) > _MAX_ANSWER_BYTES:
            raise BackendError(f"the run service at {self.url} sent more than {_MAX_ANSWER_BYTES // 2**20} MiB")
        try:
            return json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
        except (UnicodeDecodeError, ValueError) as exc:
            raise BackendError(f"the run service at {self.url} answered {method} {route} with something not JSON ({exc})") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _fields(value: Any, what: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """An answer of the job protocol with exactly ``keys`` (the contract's), or ``BackendError``."""
    if not isinstance(value, dict) or set(value) != set(keys):
        got = sorted(value) if isinstance(value, dict) else type(value).__name__
        raise BackendError(f"the run service's {what} is not the contract's (expected the fields {list(keys)}, got {got})")
    return value


def _message(raw: bytes) -> str:
    """The contract's error body's message, as ": <code>: <message>", or "" (it decides nothing; only said)."""
    try:
        error = json.loads(raw.decode("utf-8"))["error"]
        parts = [str(error[k]) for k in ("code", "message") if isinstance(error.get(k), str)]
        limit = f" (limit {error['limit']})" if isinstance(error.get("limit"), str) else ""
        return f": {': '.join(parts)}{limit}"[:400] if parts else ""
    except (ValueError, KeyError, TypeError, AttributeError):
        return ""


def _short(value: Any) -> str:
    return json.dumps(value)[:200]


def _check_plan(plan: RunPlan) -> None:
    """The service rebuilds the plan from the policy and its own world: a plan that is not what it would build
    (another world, other hardening) cannot be sent, only its policy."""
    if plan.world != load_world():
        raise BackendError("the run service judges against this version's world; this plan has another (run it locally)")
    if plan.hardening != (BASELINE_HARDENING if plan.sandbox == "baseline" else Hardening()):
        raise BackendError("the run service runs the standard hardening; this plan changes it (run it locally)")
    if plan.target != "srt":
        raise BackendError(f"the run service runs srt's target only; this plan is for {plan.target} (run it locally)")


def _answers(result: RunResult, plan: RunPlan, service: str) -> None:
    """Is ``result`` the answer to ``plan``? A real run, of the same sandbox and policy, of exactly the probes asked."""
    where = f"the run service at {service} answered"
    if result.backend not in REAL_BACKENDS:
        raise BackendError(f"{where} with a {result.backend!r} result, not a real run: nothing was judged")
    if result.sandbox != plan.sandbox:
        raise BackendError(f"{where} for the {result.sandbox} sandbox, not the {plan.sandbox}")
    asked = plan.policy.canonical_json() if plan.policy is not None else None
    got = result.policy.canonical_json() if result.policy is not None else None
    if asked != got:
        raise BackendError(f"{where} for another policy than the one sent")
    ids = [p.id for p in result.probes]
    missing = [p for p in plan.probes if p not in ids]
    unasked = [p for p in ids if p not in plan.probes]
    if missing or unasked:
        raise BackendError(f"{where} with other probes than asked (missing: {missing or 'none'}; not asked: {unasked or 'none'})")
    _says_where(result.ran_at, result.notes, where)


def _says_where(ran_at: str, notes: tuple[str, ...], where: str) -> None:
    """A service's answer (a result, an execution) never says where it ran: ``BackendError`` if it does."""
    if ran_at:
        raise BackendError(f"{where} saying where it ran ({ran_at!r}); only the client says that")
    # The field decides where a run was made; a note in the client's own words would still read to people as
    # that claim, so a service's answer that carries one is refused too (text shown, not a decision's input).
    if any(n.startswith(RAN_AT) for n in notes):
        raise BackendError(f"{where} with a note saying where it ran; only the client says that")
