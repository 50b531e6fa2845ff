"""Learners' progress records, kept by the service under each token: ``GET``/``PUT /v1/progress``.

A Binder session's files end with it; a record kept here outlives it
(``lessons.progress`` combines it with the session's file). One Redis key a
token, ``<prefix>progress:<token id>``: the token's id (a hash of its stored
hash, ``tokens.Token.id``), never the token, and never a name the request
chose, so a tenant reaches its own record and no other. A record sent is
parsed by the progress file's own parser (``lessons.progress.check_record``):
every problem is a 400 at its JSON path, and what is stored is the parser's
normal form, never the bytes sent. Records do not expire: a course lasts weeks.

Imports the problems, the tokens and the progress record.
"""

from __future__ import annotations

import json
from typing import Any

from grader.hosted.problems import ServiceError, invalid, json_path
from grader.hosted.tokens import Token
from grader.lessons.progress import ProgressError, check_record

__all__ = ["ProgressStore", "empty_record"]


def empty_record() -> dict[str, Any]:
    """What a token with no record gets: the record of a learner who has done nothing yet."""
    return check_record({"version": 2, "done": {}, "first": {}})


class ProgressStore:
    """The progress records of one service (its Redis connection and key prefix)."""

    def __init__(self, conn: Any, prefix: str) -> None:
        self.conn = conn
        self._prefix = prefix

    def _key(self, token: Token) -> str:
        return f"{self._prefix}progress:{token.id}"

    def get(self, token: Token) -> dict[str, Any]:
        """``token``'s record; none yet is the empty one. One stored that no longer parses is a 500, never empty."""
        raw = self.conn.get(self._key(token))
        if raw is None:
            return empty_record()
        try:
            return check_record(json.loads(raw), "the stored record")
        except (ValueError, ProgressError):  # never an empty record in its place: the learner's next save would wipe it
            raise ServiceError(500, "unreadable", "the progress kept for this token does not parse; tell the operator") from None

    def put(self, token: Token, body: Any) -> dict[str, Any]:
        """Replace ``token``'s record with ``body`` (parsed JSON) and return it as stored; a 400 ``invalid`` if it is not one."""
        try:
            record = check_record(body, "the request body")
        except ProgressError as exc:
            raise invalid([(json_path(p.pointer), p.message) for p in exc.problems]) from None
        self.conn.set(self._key(token), json.dumps(record, allow_nan=False, sort_keys=True))
        return record
