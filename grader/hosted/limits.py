"""The body limit, as ASGI middleware: a request over ``BODY_LIMIT`` bytes is a 413 before anything parses it.

Two checks, because a client chooses its framing: a ``Content-Length`` over the
limit is refused before a byte is read; a body without one (chunked) or one
that lies about its length is counted as it is read, and refused at the first
byte past the limit. Either way the answer is the contract's JSON error.

Imports nothing of the package but the service's errors.
"""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable, MutableMapping

from grader.hosted.problems import error_body

__all__ = ["BodyLimit", "TooLarge", "too_large_body"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def too_large_body(limit: int) -> dict[str, Any]:
    """The 413's body, the same whichever check refused the request."""
    return error_body("too_large", f"the request body is over {limit} bytes; send a policy or an attack script, "
                      "not more", limit=f"{limit} bytes")


class TooLarge(Exception):
    """Raised inside the app when the body read so far passed the limit."""


class BodyLimit:
    """Wraps ``app``: every HTTP request body is at most ``limit`` bytes, or the answer is 413 ``too_large``."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def _refuse(self, send: Send) -> None:
        body = json.dumps(too_large_body(self.limit)).encode("utf-8")
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name.lower() == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = self.limit + 1  # an unreadable length is refused, never trusted
                if declared > self.limit:
                    await self._refuse(send)
                    return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise TooLarge()
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except TooLarge:
            if started:
                raise
            await self._refuse(send)
