"""The bodies of the service's commands: ``sandbox-lab serve``, ``worker`` and ``tokens issue|list|revoke``.

``cli.main`` declares them (its one registry) and imports this module only
when one of them runs, so the CLI needs the ``service`` extra for these three
alone. Each takes the service from the environment (``settings.service_settings``).

Imports the app, the worker, the tokens and the settings.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any, Optional

from grader.plumbing.terminal import EXIT_BACKEND, EXIT_OK, Streams, UsageError
from grader.hosted.settings import service_settings
from grader.hosted.tokens import (
    DEFAULT_JOBS, DEFAULT_RATE, Token, TokenError, issue_token, parse_rate, read_tokens, revoke_token,
)

__all__ = ["run_serve", "run_tokens", "run_worker"]


def _when(t: Optional[float]) -> str:
    return "never" if t is None else time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


def _listed(token: Token) -> dict[str, Any]:
    """What ``tokens list`` says of a token: never the token, never its hash (its id is a hash of the hash)."""
    return {"name": token.name, "id": token.id, "created": token.created, "expires": token.expires,
            "rate": f"{token.rate}/min", "jobs": token.jobs, "revoked": token.revoked}


def _list_tokens(args: argparse.Namespace, io: Streams) -> int:
    settings = service_settings()
    try:
        tokens = read_tokens(settings.tokens_file)
    except TokenError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        io.out.write(json.dumps({"tokens": [_listed(t) for t in tokens]}) + "\n")
        return EXIT_OK
    if not tokens:
        io.err.write(f"no tokens issued yet ({settings.tokens_file}); issue one with `sandbox-lab tokens issue --name NAME`\n")
    now = time.time()
    for t in tokens:
        state = (f"revoked {_when(t.revoked)}" if t.revoked is not None else "expired" if t.expired(now) else "active")
        io.out.write(f"{t.name}  id {t.id}  expires {_when(t.expires)}  {t.rate}/min  {t.jobs} jobs  {state}\n")
    return EXIT_OK


def _revoke_token(args: argparse.Namespace, io: Streams) -> int:
    settings = service_settings()
    which = args.target if args.target is not None else args.name
    if which is None:
        raise UsageError("tokens revoke: name the token, e.g. `sandbox-lab tokens revoke alice` (or its id)")
    try:
        token = revoke_token(settings.tokens_file, which)
    except TokenError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        io.out.write(json.dumps(_listed(token)) + "\n")
    else:
        io.err.write(f"token {token.name!r} (id {token.id}) revoked {_when(token.revoked)}: "
                     "the service refuses it from its next request.\n")
    return EXIT_OK


def run_tokens(args: argparse.Namespace, io: Streams) -> int:
    """``tokens issue`` adds a token and prints it once (stdout; where it is stored goes to stderr);
    ``tokens list`` prints one line a token; ``tokens revoke NAME`` (or its id) refuses it from now on."""
    if args.action != "issue":
        extra = [flag for flag, value in (("--expires", args.expires), ("--rate", args.rate), ("--jobs", args.jobs))
                 if value is not None]
        if args.action == "list" and (args.name is not None or args.target is not None):
            extra.append("a name")
        if args.action == "revoke" and args.name is not None and args.target is not None:
            extra.append("--name beside NAME")
        if extra:  # an option that would do nothing here is refused, never ignored
            raise UsageError(f"tokens {args.action} does not take {', '.join(extra)}")
    if args.action == "list":
        return _list_tokens(args, io)
    if args.action == "revoke":
        return _revoke_token(args, io)
    if args.target is not None:
        raise UsageError(f"tokens issue takes --name, not {args.target!r}: `sandbox-lab tokens issue --name NAME`")
    if args.name is None:
        raise UsageError("tokens issue: --name is required (who the token is for), e.g. --name alice")
    settings = service_settings()
    try:
        rate = DEFAULT_RATE if args.rate is None else parse_rate(args.rate)
        expires: Optional[float] = args.expires
        secret = issue_token(settings.tokens_file, args.name, expires_days=expires, rate=rate,
                             jobs=DEFAULT_JOBS if args.jobs is None else args.jobs)
    except TokenError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        io.out.write(json.dumps({"name": args.name, "token": secret, "rate": f"{rate}/min",
                                 "jobs": DEFAULT_JOBS if args.jobs is None else args.jobs, "expires_days": expires}) + "\n")
    else:
        io.out.write(secret + "\n")
        io.err.write(f"token {args.name!r} issued and stored hashed in {settings.tokens_file}; "
                     "this is the only time it is shown.\n")
    return EXIT_OK


def run_worker(args: argparse.Namespace, io: Streams) -> int:
    from grader.hosted.worker import ALIVE_ENV, ALIVE_WITHIN_SECONDS, alive, serve_jobs

    if getattr(args, "alive", False):
        path = os.environ.get(ALIVE_ENV, "")
        if not path:
            raise UsageError(f"--alive reads the file ${ALIVE_ENV} names; set it for the worker and its probe")
        if alive(path):
            return EXIT_OK
        io.err.write(f"the worker has not touched {path} in {ALIVE_WITHIN_SECONDS} s: hung, or not running\n")
        return EXIT_BACKEND
    settings = service_settings()
    io.err.write(f"worker for {settings.queue_name} on {settings.redis_url}\n")
    serve_jobs(settings, name=args.name, burst=args.burst)
    return EXIT_OK


def run_serve(args: argparse.Namespace, io: Streams) -> int:
    import uvicorn

    from grader.hosted.app import create_app

    settings = service_settings()
    settings.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    io.err.write(f"serving on http://{args.host}:{args.port} (API docs at /docs); jobs on {settings.redis_url}\n")
    io.err.flush()
    # proxy headers off: nothing in front of the service is trusted to name the client
    uvicorn.run(create_app(settings), host=args.host, port=args.port, log_level="info", proxy_headers=False)
    return EXIT_OK
