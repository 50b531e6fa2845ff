"""The probe runner's HTTP, on a socket: reading an answer, the proxy's credential, and ``no_proxy``'s rule.

The runner asked with ``urllib.request`` until its import (``http.client``,
``email``) cost 11 ms of every sandbox's start; ``probe_runner.Agent.exchange``
now asks as it did, with these pieces, and ``tests/unit/services/test_runner_http.py``
holds each to urllib's own behaviour. Standard library only: copied beside the
runner in the sandbox image (and srt's copy), imported there as the top-level
module ``runner_http``.
"""

from __future__ import annotations

import base64
import os
import urllib.parse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import io

__all__ = ["BODY_LIMIT", "bypassed", "proxy_credential", "read_answer", "read_head", "read_response"]

BODY_LIMIT = 2048  # what is read of an answer's body: its record carries the first 300 characters


def read_head(answers: "io.BufferedReader") -> tuple[str, dict[str, str]]:
    """An HTTP response's status line and its headers (names in lower case), read up to the blank line."""
    status = answers.readline(1024).decode("latin-1").strip()
    headers: dict[str, str] = {}
    for _ in range(64):
        line = answers.readline(8192).decode("latin-1").strip()
        if not line:
            break
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers


def read_answer(answers: "io.BufferedReader") -> tuple[str, bool]:
    """An HTTP response's status line, its body read and dropped; True when the connection stays open for another
    request (the server said keep-alive and framed its body by length)."""
    status, headers = read_head(answers)
    length = headers.get("content-length", "")
    keep = headers.get("connection", "").lower() == "keep-alive"
    if not length.isdigit() or int(length) > 65536:
        return status, False
    return status, keep and len(answers.read(int(length))) == int(length)


def read_response(answers: "io.BufferedReader") -> tuple[int, bytes]:
    """An answer's status code and at most ``BODY_LIMIT`` bytes of its body, framed by its length, in chunks, or
    up to the end of the connection; an interim answer (1xx) is passed over."""
    while True:
        status, headers = read_head(answers)
        parts = status.split(None, 2)
        if not status:
            raise ConnectionResetError("the server closed the connection without an answer")
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise ValueError(f"not an HTTP answer: {status[:80]!r}")
        if not parts[1].startswith("1"):
            break
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = b""
        while len(body) < BODY_LIMIT:
            size = int(answers.readline(1024).split(b";")[0].strip() or b"0", 16)
            if size == 0:
                break
            body += answers.read(size)
            answers.readline(1024)  # the chunk's line end
        return int(parts[1]), body[:BODY_LIMIT]
    length = headers.get("content-length", "")
    return int(parts[1]), answers.read(min(int(length), BODY_LIMIT) if length.isdigit() else BODY_LIMIT)


def proxy_credential(proxy: str) -> dict[str, str]:
    """The header carrying the credential in the proxy's URL (srt hands its proxy a per-session one); {} without
    both a user and a password, as ``urllib.request.ProxyHandler`` sends it."""
    p = urllib.parse.urlsplit(proxy)
    if not (p.username and p.password):
        return {}
    cred = f"{urllib.parse.unquote(p.username)}:{urllib.parse.unquote(p.password)}"
    return {"Proxy-Authorization": "Basic " + base64.b64encode(cred.encode()).decode()}


def bypassed(netloc: str) -> bool:
    """Whether the environment's ``no_proxy`` sends a request for ``netloc`` (host[:port]) past the proxy, by the
    rule of ``urllib.request.proxy_bypass_environment``: srt sets it (localhost, 127.0.0.1, ...) in its sandbox."""
    names = os.environ.get("no_proxy", os.environ.get("NO_PROXY", ""))
    host = netloc.lower()
    hostonly = host.rpartition(":")[0] if host.rpartition(":")[2].isdigit() else host  # the port cut off
    if names == "*":
        return True
    for name in (n.strip().lstrip(".").lower() for n in names.split(",")):
        if name and (name in (hostonly, host) or hostonly.endswith("." + name) or host.endswith("." + name)):
            return True
    return False
