"""The bodies of the service's commands: ``sandbox-lab serve``, ``worker`` and ``tokens issue``.

``cli.main`` declares them (its one registry) and imports this module only
when one of them runs, so the CLI needs the ``service`` extra for these three
alone. Each takes the service from the environment (``settings.service_settings``).

Imports the app, the worker, the tokens and the settings.
"""

from __future__ import annotations

import argparse
import json
from typing import Optional

from grader.cli.core import EXIT_OK, Streams, UsageError
from grader.hosted.settings import service_settings
from grader.hosted.tokens import DEFAULT_JOBS, DEFAULT_RATE, TokenError, issue_token, parse_rate

__all__ = ["run_serve", "run_tokens", "run_worker"]


def run_tokens(args: argparse.Namespace, io: Streams) -> int:
    """``tokens issue``: add a token and print it once (stdout); where it is stored goes to stderr."""
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
    from grader.hosted.worker import serve_jobs

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
