"""The service's HTTP API (FastAPI): routes, bearer-token checks, and every error as the contract's JSON.

``create_app`` builds one app for one service (its settings, its Redis): no
module-level app, so tests build theirs against their own Redis. Routes:
``POST /v1/<kind>`` for every entry of ``kinds.KINDS`` (202 and a job id),
``GET /v1/jobs/{id}``, ``GET``/``PUT /v1/progress`` (the token's progress
record, ``progress_store``), ``/healthz`` (liveness: the process answers),
``/readyz`` (readiness: Redis, a live worker, its engine), ``/metrics``, and FastAPI's ``/docs``.

Every answer that is not a success is ``{"error": {"code", "message", ...}}``
(docs/service-api.md): ours, FastAPI's own validation errors, an unknown route
or method, Redis unreachable (a 503 ``unavailable``, on every route but
``/healthz``), and an unexpected exception (a 500 without a traceback). The body
limit wraps the whole app (``limits.BodyLimit``).

Imports the jobs, the kinds, the tokens, the progress records, the metrics and the limits.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from redis.exceptions import ConnectionError as RedisConnectionError, TimeoutError as RedisTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from grader.core.jsonfile import json_problem
from grader.core.version import __version__
from grader.hosted.jobs import JobStore, open_redis
from grader.hosted.kinds import check_body
from grader.hosted.limits import BodyLimit, TooLarge, too_large_body
from grader.hosted.metrics import ServiceCollector, metrics_text
from grader.hosted.problems import ServiceError, error_body, invalid, json_path
from grader.hosted.progress_store import ProgressStore
from grader.hosted.settings import BODY_LIMIT, ServiceSettings
from grader.hosted.tokens import Token, TokenError, find_token, read_tokens

__all__ = ["create_app", "parse_body"]

_log = logging.getLogger("sandbox_lab.service")


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:  # two values for one key: which one a reader keeps is a guess, so neither is used
            raise ValueError(f"the key {key!r} appears twice in one object")
        out[key] = value
    return out


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_body(raw: bytes) -> Any:
    """The request's JSON; not UTF-8, not JSON, a duplicated key, NaN, or nesting too deep is a 400 ``invalid``."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid([("$", "the body is not UTF-8 text; send JSON.")]) from None
    try:
        return json.loads(text, object_pairs_hook=_refuse_duplicates, parse_constant=_refuse_constant)
    except json.JSONDecodeError as exc:
        raise invalid([("$", f"{json_problem(exc)}.")]) from None
    except RecursionError:
        raise invalid([("$", "nested too deep to be a policy.")]) from None
    except ValueError as exc:
        raise invalid([("$", f"{exc}.")]) from None


def _store_down_message(exc: Exception) -> str:
    said = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
    return f"the service's job store (Redis) cannot be reached ({said}); try again later"


def _error(exc: ServiceError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


def _authorize(settings: ServiceSettings, request: Request) -> Token:
    header = request.headers.get("authorization", "")
    scheme, _, secret = header.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise ServiceError(401, "unauthorized", "send a token: Authorization: Bearer <token> "
                           "(the operator issues one with `sandbox-lab tokens issue --name NAME`)")
    try:
        tokens = read_tokens(settings.tokens_file)
    except TokenError as exc:  # a broken token file lets nobody in
        _log.error("token file: %s", exc)
        raise ServiceError(503, "unavailable", "the service cannot read its tokens; tell its operator") from None
    token = find_token(tokens, secret.strip())
    if token is None:
        raise ServiceError(401, "unauthorized", "unknown token; ask the operator for one")
    if token.revoked is not None:  # the file is read on every request: revoked is refused from the next one on
        raise ServiceError(401, "unauthorized", f"token {token.name!r} has been revoked; ask the operator for a new one")
    if token.expired():
        raise ServiceError(401, "unauthorized", f"token {token.name!r} has expired; ask the operator for a new one")
    return token


_DOCS_ASSETS = "/docs-assets"


def _docs(api: FastAPI) -> None:
    """``/docs``: Swagger UI from the files the ``swagger-ui-bundle`` wheel ships (the ``service`` extra), no CDN.

    Every URL the page names is this service's own: the script, the stylesheet, the icon and the OpenAPI document."""
    from swagger_ui_bundle import swagger_ui_path  # type: ignore[import-untyped]

    api.mount(_DOCS_ASSETS, StaticFiles(directory=str(swagger_ui_path)), name="docs-assets")

    @api.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=api.openapi_url or "/openapi.json", title=f"{api.title} - API",
            swagger_js_url=f"{_DOCS_ASSETS}/swagger-ui-bundle.js", swagger_css_url=f"{_DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{_DOCS_ASSETS}/favicon-32x32.png")


def create_app(settings: ServiceSettings, store: Optional[JobStore] = None) -> Any:
    """The ASGI app of the service at ``settings`` (its Redis opened now): FastAPI inside the body limit."""
    jobs = store if store is not None else JobStore(settings, open_redis(settings))
    collector = ServiceCollector(jobs.conn, settings.prefix, jobs.depth)
    # docs_url/redoc_url off: FastAPI's own pages load Swagger UI and ReDoc from a CDN, so offline, or behind a
    # school's filter, /docs was blank. /docs serves Swagger UI from the swagger-ui-bundle wheel instead (_docs).
    api = FastAPI(
        title="Sandbox Lab run service", version=__version__,
        description="Real sandbox runs for learners without a Docker engine. The contract: docs/service-api.md.",
        docs_url=None, redoc_url=None,
    )
    _docs(api)

    @api.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return _error(exc)

    @api.exception_handler(TooLarge)
    async def _too_large(request: Request, exc: TooLarge) -> JSONResponse:
        return JSONResponse(too_large_body(BODY_LIMIT), status_code=413)

    @api.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [(json_path("/" + "/".join(str(p) for p in e.get("loc", ()))), str(e.get("msg", "is not valid")))
                    for e in exc.errors()]
        return _error(invalid(problems))

    @api.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        codes = {404: "not_found", 405: "method_not_allowed"}
        message = {404: f"no route {request.url.path}; the API is in docs/service-api.md and at /docs",
                   405: f"{request.method} is not allowed on {request.url.path}"}.get(exc.status_code, str(exc.detail))
        return JSONResponse(error_body(codes.get(exc.status_code, f"http_{exc.status_code}"), message),
                            status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @api.exception_handler(RedisConnectionError)
    @api.exception_handler(RedisTimeoutError)
    async def _store_down(request: Request, exc: Exception) -> JSONResponse:
        # Redis away is the service unavailable, not a bug: a 503 the client falls back on (docs/service-api.md)
        _log.error("Redis unreachable on %s %s: %s", request.method, request.url.path, exc)
        return JSONResponse(error_body("unavailable", _store_down_message(exc)), status_code=503)

    @api.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        _log.exception("internal error on %s %s", request.method, request.url.path)
        return JSONResponse(error_body("internal", "the service failed on this request (a bug in Sandbox Lab; "
                                       "its log has the details)"), status_code=500)

    @api.get("/healthz", summary="Liveness: the API process answers (nothing else is checked)")
    async def healthz() -> dict[str, bool]:
        return {"ok": True}

    @api.get("/readyz", summary="Readiness: Redis answers, a worker is live, and its Docker engine answers")
    def readyz() -> JSONResponse:
        jobs.conn.ping()  # Redis away: the 503 of _store_down, with its reason
        census = jobs.census()
        why = census.unready()
        if why is not None:
            return JSONResponse(error_body("unavailable", why, workers=census.to_json()), status_code=503)
        return JSONResponse({"ok": True, "workers": census.to_json()})

    @api.get("/metrics")
    def metrics() -> Response:
        return Response(metrics_text(collector), media_type="text/plain; version=0.0.4; charset=utf-8")

    progress = ProgressStore(jobs.conn, settings.prefix)

    async def _read(request: Request) -> Any:
        raw = bytearray()
        async for chunk in request.stream():  # counted by BodyLimit: past the limit this raises TooLarge
            raw += chunk
            if len(raw) > BODY_LIMIT:
                raise TooLarge()
        return parse_body(bytes(raw))

    def _submit_route(route: str) -> Any:
        async def submit(request: Request) -> JSONResponse:
            token = _authorize(settings, request)
            body = await _read(request)
            check_body(route, body, jobs.kinds)
            jobs.admit_rate(token)
            return JSONResponse(jobs.submit(token, route, body), status_code=202)

        submit.__name__ = f"submit_{route}"
        return submit

    for route, kind in jobs.kinds.items():
        api.add_api_route(
            f"/v1/{route}", _submit_route(route), methods=["POST"], status_code=202,
            summary=f"Queue a {kind.name} job", response_class=JSONResponse,
            openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}}},
        )

    @api.get("/v1/jobs/{job_id}")
    def job(job_id: str, request: Request) -> dict[str, Any]:
        return jobs.status(_authorize(settings, request), job_id)

    @api.get("/v1/progress", summary="The token's progress record")
    def get_progress(request: Request) -> dict[str, Any]:
        return progress.get(_authorize(settings, request))

    @api.put("/v1/progress", summary="Replace the token's progress record",
             openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": {"type": "object"}}}}})
    async def put_progress(request: Request) -> dict[str, Any]:
        token = _authorize(settings, request)  # the token first: a stranger's body is never parsed
        return progress.put(token, await _read(request))

    return BodyLimit(api, BODY_LIMIT)
