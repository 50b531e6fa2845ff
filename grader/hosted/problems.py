"""The service's errors: one exception carrying a status, a code and a message, and its JSON body.

Every error the API answers has the contract's shape,
``{"error": {"code", "message", ...}}`` (docs/service-api.md), whatever raised
it: a bad token, a body over the limit, a field at a JSON path, a job that
cannot be read. ``json_path`` turns the package's JSON pointers
(``/filesystem/allowRead/0``) into the contract's paths
(``$.policy.filesystem.allowRead[0]``).

Imports nothing of the package.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

__all__ = ["ServiceError", "error_body", "invalid", "json_path"]


def json_path(pointer: str, root: str = "$") -> str:
    """``/a/b/0`` under ``root`` as ``root.a.b[0]`` (RFC 6901 escapes undone); ``/`` is ``root`` itself."""
    out = root
    if pointer in ("", "/"):
        return out
    for part in pointer.lstrip("/").split("/"):
        key = part.replace("~1", "/").replace("~0", "~")
        out += f"[{key}]" if key.isdigit() else f".{key}" if key.isidentifier() else f"[{key!r}]"
    return out


def error_body(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, **extra}}


class ServiceError(Exception):
    """An answer other than success: its HTTP ``status``, the contract's ``code`` and a ``message`` naming a fix."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.extra: Mapping[str, Any] = dict(extra)

    def body(self) -> dict[str, Any]:
        return error_body(self.code, self.message, **self.extra)


def invalid(problems: Iterable[tuple[str, str]]) -> ServiceError:
    """A 400 ``invalid`` listing every ``(path, message)``; its message is the first, with the count."""
    found = [{"path": path, "message": message} for path, message in problems]
    if not found:
        found = [{"path": "$", "message": "the request is not valid."}]
    first = f"{found[0]['path']}: {found[0]['message']}"
    more = f" (and {len(found) - 1} more problem{'s' if len(found) > 2 else ''})" if len(found) > 1 else ""
    return ServiceError(400, "invalid", first + more, problems=found)
