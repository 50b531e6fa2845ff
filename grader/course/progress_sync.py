"""The learner's progress record kept by the run service under their token: ``GET``/``PUT /v1/progress`` over HTTP.

A Binder session ends and takes its files with it; the run service it sends
runs to (``SANDBOX_LAB_SERVICE_URL`` with ``SANDBOX_LAB_TOKEN``, as
``backends.remote`` reads them) keeps the record under the token instead
(docs/service-api.md). This module is the wire only: it fetches and stores a
record as JSON and says why when it cannot; ``progress`` parses what comes
back strictly and decides how the service's copy and the local file combine.

Which learners sync: those whose environment names a service *and* a token
(Binder sets both when its course operator named a service, alongside
``SANDBOX_LAB_BACKEND=remote``). Without either, nothing is sent anywhere.

The standard library only (urllib), as ``backends.remote``: Binder installs
nothing for it. A redirect is never followed (it would carry the token
elsewhere); the token is never in a message.

Imports nothing of the package.
"""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from http.client import HTTPException
from typing import Any, Mapping, Optional

__all__ = ["SERVICE_URL_ENV", "TOKEN_ENV", "ProgressService", "SyncFailed", "service_from_env"]

SERVICE_URL_ENV = "SANDBOX_LAB_SERVICE_URL"  # the same names backends.remote reads (a test pins them equal)
TOKEN_ENV = "SANDBOX_LAB_TOKEN"
ROUTE = "/v1/progress"
# one exchange: a notebook cell waits on it, so an unreachable service costs seconds, not the learner's patience
_TIMEOUT_S = 5.0
_MAX_ANSWER_BYTES = 1024 * 1024  # the service refuses records over 256 KiB; an answer this large is not one
_WHY = {401: "the token was refused", 429: "over quota", 503: "the service cannot serve it now"}


class SyncFailed(Exception):
    """The service's copy could not be read or written: ``why`` says how, in a few words."""

    def __init__(self, url: str, why: str) -> None:
        self.url = url
        self.why = why
        super().__init__(f"the run service at {url} {why}")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


@dataclass(frozen=True)
class ProgressService:
    """The service at ``url`` (``scheme://host[:port][/path]``), reached with the bearer ``token``."""

    url: str
    token: str = field(repr=False)  # never in a repr, a message or a notice

    def fetch(self) -> Any:
        """The service's record for this token, as parsed JSON (the caller parses it as a record)."""
        return self._call("GET", None)

    def store(self, record: Mapping[str, Any]) -> None:
        """Replace the service's record with ``record``."""
        self._call("PUT", dict(record))

    def _call(self, method: str, body: Optional[dict[str, Any]]) -> Any:
        data = None if body is None else json.dumps(body, allow_nan=False).encode("utf-8")
        headers = {"Accept": "application/json", "Authorization": f"Bearer {self.token}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.url + ROUTE, data=data, method=method, headers=headers)
        try:
            with _OPENER.open(request, timeout=_TIMEOUT_S) as response:  # http(s) only, checked by service_from_env
                status, raw = response.status, response.read(_MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, b""
            exc.close()
        except (urllib.error.URLError, OSError, HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            raise SyncFailed(self.url, "could not be reached (" + ("no answer in time" if isinstance(reason, socket.timeout)
                                                                   else str(reason)) + ")") from None
        if status != 200:
            raise SyncFailed(self.url, f"answered HTTP {status}" + (f", {_WHY[status]}" if status in _WHY else ""))
        if len(raw) > _MAX_ANSWER_BYTES:
            raise SyncFailed(self.url, "sent an answer too large to be a progress record")
        try:
            return json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
        except (UnicodeDecodeError, ValueError):
            raise SyncFailed(self.url, "sent an answer that is not JSON") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def service_from_env(env: Optional[Mapping[str, str]] = None) -> Optional[ProgressService]:
    """The service the environment names with a token, or None (progress stays on this machine alone).

    A URL that is not ``http(s)://host`` alone is a ``SyncFailed`` (said, never guessed at)."""
    env = os.environ if env is None else env
    url, token = env.get(SERVICE_URL_ENV, "").strip(), env.get(TOKEN_ENV, "").strip()
    if not url or not token:
        return None
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or "@" in parts.netloc or parts.query or parts.fragment:
        raise SyncFailed("$" + SERVICE_URL_ENV, "is not an http:// or https:// URL of a run service")
    return ProgressService(f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}", token)
