"""Learners' progress records, kept by the service under each token: ``GET``/``PUT /v1/progress``.

A Binder session's files end with it; a record kept here outlives it
(``course.progress`` combines it with the session's file). One Redis key a
token, ``<prefix>progress:<token id>``: the token's id (a hash of its stored
hash, ``tokens.Token.id``), never the token, and never a name the request
chose, so a tenant reaches its own record and no other. A record sent is
parsed by the progress file's own parser (``course.progress.check_record``):
every problem is a 400 at its JSON path, and what is stored is the parser's
normal form, never the bytes sent. Records do not expire: a course lasts weeks.

A client stores its notes here, never its scores (issue 39: a ``PUT`` marked level 8, which no attack
can capture, captured with 0 attempts). What says "captured" comes from the service's own runs:
each judged attack a worker runs for a token is counted in ``<prefix>levels:<token id>``
(``record_attempt``: its attempts, and when it first captured), and the record a ``GET`` or a
``PUT`` answers takes every level's ``captured`` from there and its ``attempts`` as at least the
service's count. A ``captured`` sent is not stored (the learner's local file keeps its own; the
lessons' merge takes the earliest capture of the two), and a level the service saw captured is
captured whatever is sent. Not rejected with a 400: every learner whose file holds a capture
would have the whole record refused on each save, and the copy kept here would stop following.
``done``, ``first`` (the quiz's first attempts, scored in the learner's kernel), ``learner`` and
the hints shown are the learner's notes; grading never reads them from here.

Imports the problems, the tokens and the progress record.
"""

from __future__ import annotations

import json
from typing import Any

from grader.hosted.problems import ServiceError, invalid, json_path
from grader.hosted.tokens import Token
from grader.course.progress import ProgressError, check_record

__all__ = ["ProgressStore", "empty_record", "record_attempt"]


def empty_record() -> dict[str, Any]:
    """What a token with no record gets: the record of a learner who has done nothing yet."""
    return check_record({"version": 2, "done": {}, "first": {}})


def _levels_key(prefix: str, owner: str) -> str:
    return f"{prefix}levels:{owner}"


def record_attempt(conn: Any, prefix: str, owner: str, item_id: str, *, captured: bool, when: float) -> None:
    """Count one judged attack at ``item_id`` that the service ran for the token whose id is ``owner``; a capture
    keeps its first time. Written by the worker, never from a request: one hash a token, two fields a level."""
    key = _levels_key(prefix, owner)
    with conn.pipeline() as pipe:
        pipe.hincrby(key, f"{item_id}|attempts", 1)
        if captured:
            pipe.hsetnx(key, f"{item_id}|captured", repr(float(when)))
        pipe.execute()


class ProgressStore:
    """The progress records of one service (its Redis connection and key prefix)."""

    def __init__(self, conn: Any, prefix: str) -> None:
        self.conn = conn
        self._prefix = prefix

    def _key(self, token: Token) -> str:
        return f"{self._prefix}progress:{token.id}"

    def _runs(self, token: Token) -> dict[str, dict[str, Any]]:
        """The service's own record of ``token``'s attacks: level item id -> ``{"attempts", "captured"}``."""
        out: dict[str, dict[str, Any]] = {}
        for field, value in self.conn.hgetall(_levels_key(self._prefix, token.id)).items():
            item, _, what = (field.decode() if isinstance(field, bytes) else field).rpartition("|")
            level = out.setdefault(item, {"attempts": 0, "captured": None})
            level[what] = int(value) if what == "attempts" else float(value)
        return out

    def _with_runs(self, token: Token, record: dict[str, Any]) -> dict[str, Any]:
        """``record`` (a checked record) with every level's ``captured`` the service's own, and its attempts no
        fewer than the service counted."""
        runs = self._runs(token)
        levels = {k: {**v, "captured": None} for k, v in record.get("levels", {}).items()}
        for item, seen in runs.items():
            mine = levels.get(item, {"attempts": 0, "hints": 0, "captured": None})
            levels[item] = {"attempts": max(mine["attempts"], seen["attempts"]), "hints": mine["hints"],
                            "captured": seen["captured"]}
        out = {k: v for k, v in record.items() if k != "levels"}
        if levels:
            out["levels"] = dict(sorted(levels.items()))
        return check_record(out, "the service's record")

    def get(self, token: Token) -> dict[str, Any]:
        """``token``'s record; none yet is the empty one. One stored that no longer parses is a 500, never empty."""
        raw = self.conn.get(self._key(token))
        if raw is None:
            return self._with_runs(token, empty_record())
        try:
            stored = check_record(json.loads(raw), "the stored record")
        except (ValueError, ProgressError):  # never an empty record in its place: the learner's next save would wipe it
            raise ServiceError(500, "unreadable", "the progress kept for this token does not parse; tell the operator") from None
        return self._with_runs(token, stored)

    def put(self, token: Token, body: Any) -> dict[str, Any]:
        """Replace ``token``'s record with ``body`` (parsed JSON) and return it as stored; a 400 ``invalid`` if it is not one."""
        try:
            record = check_record(body, "the request body")
        except ProgressError as exc:
            raise invalid([(json_path(p.pointer), p.message) for p in exc.problems]) from None
        # the client's notes only: a capture is the service's to record (record_attempt), never the client's to send
        notes = {**record, "levels": {k: {**v, "captured": None} for k, v in record["levels"].items()}} \
            if "levels" in record else record
        self.conn.set(self._key(token), json.dumps(notes, allow_nan=False, sort_keys=True))
        return self._with_runs(token, notes)
