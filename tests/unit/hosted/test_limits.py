"""The body limit refuses a body over 256 KiB however it is framed (grader/hosted/limits.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from grader.hosted.limits import BodyLimit

LIMIT = 1000


async def _reader(scope: Any, receive: Any, send: Any) -> None:
    """An app that reads the whole body, then answers how much it read."""
    size, more = 0, True
    while more:
        message = await receive()
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": str(size).encode()})


def _call(headers: list[tuple[bytes, bytes]], chunks: list[bytes]) -> tuple[int, bytes]:
    sent: list[Any] = []
    pending = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]

    async def receive() -> Any:
        return pending.pop(0)

    async def send(message: Any) -> None:
        sent.append(message)

    asyncio.run(BodyLimit(_reader, LIMIT)({"type": "http", "headers": headers}, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_a_body_within_the_limit_reaches_the_app() -> None:
    assert _call([(b"content-length", b"1000")], [b"x" * 1000]) == (200, b"1000")


def test_a_declared_length_over_the_limit_is_refused_unread() -> None:
    status, body = _call([(b"content-length", b"1001")], [b"x"])
    assert status == 413
    assert json.loads(body) == {"error": {"code": "too_large", "message": json.loads(body)["error"]["message"],
                                          "limit": "1000 bytes"}}


def test_a_chunked_body_without_a_length_is_counted() -> None:
    assert _call([], [b"x" * 600, b"x" * 600])[0] == 413


def test_a_length_that_lies_is_counted_too() -> None:
    assert _call([(b"content-length", b"10")], [b"x" * 600, b"x" * 600])[0] == 413


def test_an_unreadable_length_is_refused() -> None:
    assert _call([(b"content-length", b"ten")], [b"x"])[0] == 413
