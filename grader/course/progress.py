"""The learner's progress across lessons, quiz questions and tasks, kept in a small local JSON file.

Pure file logic: no widgets, no grading. The file lives at
``~/.sandbox-lab/progress.json`` unless ``SANDBOX_LAB_PROGRESS`` names another
path (tests and shared machines set it). It holds:

* ``done``: item ids (lessons, tasks) and the time each was first completed;
* ``first``: for quiz questions, the learner's *first* attempt only (when, its
  result such as ``right``, ``partly`` or ``4/6 right``, and a score from 0 to
  1). Later attempts are never recorded, so answering until the feedback turns
  green earns nothing on the board; what was answered is not kept;
* ``learner``: a random token made on first use, so each install shuffles the
  options of a choice question in its own (stable) order;
* ``levels``: for each capture-the-flag level (by its item id), the attempts
  made, the hints shown and when it was first captured (``record_level``). The
  number of attempts picks the next hint; a run that could not be judged is
  not an attempt.

Never answers or policies.

A missing file is an empty record; an unreadable or corrupt one is reported as
such (``ProgressError``) rather than silently overwritten, so a typo in the
environment variable cannot wipe a learner's record.

The file is parsed strictly (pydantic, ``extra="forbid"``): an unknown key or a wrong type is a
``ProgressError`` naming each JSON path and what belongs there, never a silently emptied record.
The run service parses a record sent to it with the same parser (``check_record``).

Kept by the run service too. When the environment names a run service and a token
(``progress_sync.service_from_env``: Binder's ``SANDBOX_LAB_SERVICE_URL`` and
``SANDBOX_LAB_TOKEN``), the service keeps a copy under the token, so a record
outlives a Binder session. The local file is still written first, every time:
the service is a second copy, never the only one.

* Loading reads the file and the service's copy and returns the two combined
  (``merge_progress``), writing the combination to the file when it adds
  something (the file then holds it even where the service cannot be reached). Nothing either holds is lost: ``done`` is the union of
  both, an item in both keeps its earliest time; ``first`` is the union, a
  question in both keeps the attempt made earliest (the first attempt is the
  one that counts, wherever it was made); ``levels`` combine level by level,
  taking the larger count of attempts and of hints (the same attempts may be in
  both, so adding would count them twice) and the earliest capture; ``learner``
  is the service's when it has one (the options shuffle as in the learner's
  first session), else the file's.
* Saving (``mark_done``, ``record_attempt``, ...) loads as above, changes the
  record, writes the file, then replaces the service's copy with the result:
  the service's copy is only ever replaced by a record that contains it, read
  just before. A save whose load could not read it writes the file alone (and
  does not ask the service again: one notice, one wait at most).
* Resetting removes the file and replaces the service's copy with an empty record.
* A service that cannot be reached, refuses the token (401), is over quota
  (429), or sends something that is not a record: the file alone is used, and
  one line on stderr says so, labelled ``progress:``. The file is never
  replaced by the service's copy, only combined with it.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from grader.core.errors import Problem, SandboxLabError, field_problem, json_pointer
from grader.core.jsonfile import JsonFileError, JsonFileMissing, read_json_file
from grader.course.progress_sync import ProgressService, SyncFailed, service_from_env
from grader.course.route import LESSONS, load_route

__all__ = [
    "LESSONS",
    "PROGRESS_ENV",
    "Attempt",
    "LevelRecord",
    "Progress",
    "ProgressError",
    "check_record",
    "learner_seed",
    "load_progress",
    "mark_done",
    "merge_progress",
    "progress_path",
    "record_attempt",
    "record_json",
    "record_level",
    "reset_progress",
]

PROGRESS_ENV = "SANDBOX_LAB_PROGRESS"
_VERSION = 2  # 2 added "first" and "learner"; a version-1 file reads as one without them

# The lessons, in the order a learner takes them: (item id, title, minutes), from the course's route
# (grader/route.json, whose minutes are measured: bench/lesson_times.py).

PathLike = Union[str, "os.PathLike[str]"]
_SHAPE = '{"version": 2, "done": {id: time}, "first": {id: {"at": time, "result": "...", "score": 0..1}}}'
_FIX = "Fix the file at these places, or delete it to start afresh (what it records is then lost)."


class ProgressError(SandboxLabError, ValueError):
    """The progress file exists but cannot be read as a progress record: ``problems`` has each one at its JSON path."""

    def __init__(self, message: str, problems: tuple[Problem, ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems


@dataclass(frozen=True)
class Attempt:
    """The first attempt at a question: when, its result in words (``right``, ``partly``, ``4/6 right``) and a 0–1 score."""

    at: float
    result: str
    score: float

    @property
    def solved(self) -> bool:
        return self.score >= 1.0


@dataclass(frozen=True)
class LevelRecord:
    """A capture-the-flag level: attempts made, hints shown, and when it was first captured (None: not yet)."""

    attempts: int = 0
    hints: int = 0
    captured: Optional[float] = None


@dataclass(frozen=True)
class Progress:
    """What has been completed (item id → UNIX time of first completion) and each question's first attempt."""

    path: Path
    done: dict[str, float]
    first: dict[str, Attempt] = field(default_factory=dict)
    learner: str = ""  # the shuffling token; "" until first needed
    levels: dict[str, LevelRecord] = field(default_factory=dict)

    def is_done(self, item_id: str) -> bool:
        return item_id in self.done

    def first_attempt(self, item_id: str) -> Optional[Attempt]:
        return self.first.get(item_id)

    def level(self, item_id: str) -> LevelRecord:
        """A level's record; a level never attempted is an empty one."""
        return self.levels.get(item_id, LevelRecord())


def progress_path() -> Path:
    """Where progress is kept: ``$SANDBOX_LAB_PROGRESS`` or ``~/.sandbox-lab/progress.json``."""
    env = os.environ.get(PROGRESS_ENV, "").strip()
    return Path(env).expanduser() if env else Path.home() / ".sandbox-lab" / "progress.json"


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# --- the file's schema: strict, so a hand-edited or foreign file is refused with every problem named -------------

_Time = Annotated[float, Field(allow_inf_nan=False, description="a UNIX time in seconds")]
_Count = Annotated[int, Field(ge=0, description="a whole number, 0 or more")]
_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True)


class _AttemptFile(BaseModel):
    model_config = _STRICT
    at: _Time = Field(description="when the first attempt was made (UNIX time)")
    result: str = Field(description='the result in words, e.g. "right", "partly", "4/6 right"')
    score: float = Field(ge=0.0, le=1.0, allow_inf_nan=False, description="the score, from 0 to 1")


class _LevelFile(BaseModel):
    model_config = _STRICT
    attempts: _Count = Field(description="judged attempts made, 0 or more")
    hints: _Count = Field(description="hints shown, 0 or more")
    # a file written before a capture's time was kept may lack it: not captured
    captured: Optional[_Time] = Field(default=None, description="when the level was first captured (UNIX time), or null")


class _ProgressFile(BaseModel):
    model_config = _STRICT
    version: Literal[1, 2] = Field(description="the file format, 2 (a file of version 1 reads as one with no first attempts)")
    done: dict[str, _Time] = Field(description="item id -> when it was first completed (UNIX time)")
    first: dict[str, _AttemptFile] = Field(default_factory=dict, description="question item id -> its first attempt")
    learner: str = Field(default="", description="this install's shuffling token")
    levels: dict[str, _LevelFile] = Field(default_factory=dict, description="level item id -> its record")


_MODEL_AT: dict[str, type[BaseModel]] = {"first": _AttemptFile, "levels": _LevelFile}
_WHAT_AT = {"first": "the first attempt at {key!r}", "levels": "the record of level {key!r}", "done": "the completion of {key!r}"}
_FIX_AT = {
    "done": "a UNIX time (a number)",
    "first": '{"at": time, "result": "...", "score": 0..1}',
    "levels": '{"attempts": n, "hints": n, "captured": time or null}',
    "learner": "a string",
    "version": "2",
}


def _problem(err: Mapping[str, Any]) -> Problem:
    """One pydantic error as a problem at its JSON path, saying what belongs there (never the file's value)."""
    loc = tuple(err["loc"])
    ptr = json_pointer(loc)
    kind = str(err["type"])
    section = str(loc[0]) if loc else ""
    where = f" (in {_WHAT_AT[section].format(key=loc[1])})" if section in _WHAT_AT and len(loc) > 1 else ""
    if kind in ("extra_forbidden", "missing") and loc:
        model: Optional[type[BaseModel]] = _ProgressFile if len(loc) == 1 else (_MODEL_AT.get(section) if len(loc) == 3 else None)
        base = field_problem(ptr, kind, str(loc[-1]), model)
        return Problem(ptr, base.message + where)
    fix = _FIX_AT.get(section, "")
    detail = str(err["msg"]).rstrip(".")
    return Problem(ptr, f"{detail}{where}." + (f" Expected {fix}." if fix else ""))


def _parse(p: Path, data: object, source: Optional[str] = None) -> Progress:
    """The record in ``data`` (parsed JSON), or ``ProgressError`` listing every problem with its JSON path.

    ``source`` names where ``data`` came from in messages when it is not the file at ``p``."""
    where = source or str(p)
    fix = _FIX if source is None else "It is not used."
    if not isinstance(data, dict):
        top = Problem("/", f"not a JSON object (expected {_SHAPE})")
        raise ProgressError(f"{where} is not a progress record: it holds no JSON object (expected {_SHAPE}). "
                            + ("Fix or delete the file." if source is None else fix), (top,))
    try:
        f = _ProgressFile.model_validate(data)
    except ValidationError as exc:
        problems = tuple(_problem(e) for e in exc.errors())
        n = len(problems)
        raise ProgressError("\n".join([f"{where} is not a progress record ({n} problem{'s' if n != 1 else ''})",
                                        *(f"  {pr}" for pr in problems), fix]), problems) from None
    first = {k: Attempt(float(a.at), a.result, float(a.score)) for k, a in f.first.items()}
    levels = {k: LevelRecord(r.attempts, r.hints, None if r.captured is None else float(r.captured)) for k, r in f.levels.items()}
    return Progress(p, {k: float(v) for k, v in f.done.items()}, first, f.learner, levels)


def check_record(data: object, source: str = "the record") -> dict[str, Any]:
    """``data`` (parsed JSON) as a progress record in the form the file holds; ``ProgressError`` (with
    ``problems``) when it is not one. The run service's check of a record sent to it: the file's own parser."""
    return record_json(_parse(Path("progress.json"), data, source))


def record_json(progress: Progress) -> dict[str, Any]:
    """The record as the file (and the run service) holds it."""
    data: dict[str, Any] = {"version": _VERSION, "done": dict(progress.done),
                            "first": {k: {"at": a.at, "result": a.result, "score": a.score} for k, a in progress.first.items()}}
    if progress.learner:
        data["learner"] = progress.learner
    if progress.levels:
        data["levels"] = {k: {"attempts": r.attempts, "hints": r.hints, "captured": r.captured} for k, r in progress.levels.items()}
    return data


def _earliest(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return b if a is None else a if b is None else min(a, b)


def merge_progress(mine: Progress, theirs: Progress) -> Progress:
    """Both records in one, nothing of either lost (the rule is in the module's docstring); ``mine``'s path."""
    done = {k: min(mine.done.get(k, v), v) for k, v in theirs.done.items()}
    done = {**mine.done, **done}
    first = dict(mine.first)
    for k, a in theirs.first.items():
        if k not in first or a.at < first[k].at:
            first[k] = a
    levels = dict(mine.levels)
    for k, r in theirs.levels.items():
        o = levels.get(k)
        levels[k] = r if o is None else LevelRecord(max(o.attempts, r.attempts), max(o.hints, r.hints),
                                                    _earliest(o.captured, r.captured))
    return Progress(mine.path, done, first, theirs.learner or mine.learner, levels)


def _notice(exc: Exception, what: str) -> None:
    """The one line that says the service's copy was not used, and why; the work goes on with the file."""
    print(f"progress: {what} on this machine only: {exc}", file=sys.stderr)


def _service() -> Optional[ProgressService]:
    try:
        return service_from_env()
    except SyncFailed as exc:
        _notice(exc, "kept")
        return None


def _fetch(service: ProgressService, p: Path, what: str) -> Optional[Progress]:
    """The service's copy, parsed as strictly as the file; None (and the notice) when it cannot be had."""
    try:
        return _parse(p, service.fetch(), f"the progress kept by the run service at {service.url}")
    except SyncFailed as exc:
        _notice(exc, what)
    except ProgressError as exc:
        _notice(SyncFailed(service.url, "sent a record that does not parse (" + str(exc).splitlines()[0] + ")"), what)
    return None


def load_progress(path: Optional[PathLike] = None) -> Progress:
    """Read the progress record; a missing file is an empty one. With a run service, combined with its copy."""
    return _load(path)[0]


def _load(path: Optional[PathLike]) -> tuple[Progress, Optional[ProgressService]]:
    """The record, and the service to save it to: only one whose copy was just read and combined into it, so a
    save replaces that copy with a record that contains it (never with the file alone, which may hold less)."""
    p = Path(path) if path is not None else progress_path()
    local = _load_file(p)
    service = _service()
    if service is None:
        return local, None
    theirs = _fetch(service, p, "kept")
    if theirs is None:
        return local, None
    both = merge_progress(local, theirs)
    if both != local:  # the file keeps what the service had too: a later session without the service still has it
        try:
            _write_file(both)
        except OSError as exc:
            print(f"progress: {p} could not be updated with the run service's copy ({exc.strerror})", file=sys.stderr)
    return both, service


def _load_file(p: Path) -> Progress:
    try:
        data = read_json_file(p)
    except JsonFileMissing:
        return Progress(p, {})
    except JsonFileError as exc:
        raise ProgressError(f"{p}: {exc}. Fix or delete the file.") from None
    return _parse(p, data)


def _write(progress: Progress, service: Optional[ProgressService]) -> Progress:
    """Save ``progress`` to the file first, then to ``service`` (``_load``'s: one whose copy it contains)."""
    _write_file(progress)
    if service is not None:
        try:
            service.store(record_json(progress))
        except SyncFailed as exc:
            _notice(exc, "saved")
    return progress


def _write_file(progress: Progress) -> None:
    p = progress.path
    p.parent.mkdir(parents=True, exist_ok=True)
    data = record_json(progress)
    # Write to a temporary file and rename: a crash mid-write never leaves half a record.
    fd, tmp = tempfile.mkstemp(prefix=".progress-", suffix=".json", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _check_id(item_id: str) -> None:
    if not item_id or not item_id.strip() or any(c in item_id for c in "\n\r\x00"):
        raise ValueError(f"not an item id: {item_id!r}")


def mark_done(item_id: str, *, path: Optional[PathLike] = None, now: Optional[float] = None) -> Progress:
    """Record ``item_id`` as completed (the first completion time is kept) and return the new record."""
    _check_id(item_id)
    current, service = _load(path)
    if item_id in current.done:
        return current
    done = dict(current.done)
    done[item_id] = time.time() if now is None else now
    return _write(replace(current, done=done), service)


def record_attempt(item_id: str, result: str, score: float, *, path: Optional[PathLike] = None,
                   now: Optional[float] = None) -> tuple[Attempt, bool]:
    """Record an attempt at a question if it is the first: ``(the attempt that counts, whether it is this one)``.

    Only the first attempt is kept, whatever comes after: the board shows what
    the learner knew before any feedback, not what they learned from it.
    """
    _check_id(item_id)
    if not result or not result.strip() or not _number(score) or not 0.0 <= score <= 1.0:
        raise ValueError(f"an attempt has a result and a score from 0 to 1, not {result!r}, {score!r}")
    current, service = _load(path)
    earlier = current.first.get(item_id)
    if earlier is not None:
        return earlier, False
    attempt = Attempt(time.time() if now is None else now, result.strip(), float(score))
    _write(replace(current, first={**current.first, item_id: attempt}), service)
    return attempt, True


def learner_seed(*, path: Optional[PathLike] = None) -> str:
    """This install's shuffling token: random, made and saved on first use, the same ever after (until a reset)."""
    current, service = _load(path)
    if current.learner:
        return current.learner
    token = secrets.token_hex(8)
    return _write(replace(current, learner=token), service).learner


def record_level(item_id: str, *, captured: bool, hint_shown: bool, path: Optional[PathLike] = None,
                 now: Optional[float] = None) -> LevelRecord:
    """Count one attempt at a capture-the-flag level (and the hint it showed); keep the first capture's time.

    Only a judged attempt counts: an attack that could not be judged (``AttackResult.captured`` None) is refused
    with ``ValueError``, so a broken run can never move the learner along the hints."""
    _check_id(item_id)
    if not isinstance(captured, bool):
        raise ValueError(f"an attempt is captured (True) or missed (False), not {captured!r}: "
                         "a run that could not be judged is no attempt")
    current, service = _load(path)
    old = current.level(item_id)
    when = old.captured if old.captured is not None else ((time.time() if now is None else now) if captured else None)
    rec = LevelRecord(old.attempts + 1, old.hints + (1 if hint_shown else 0), when)
    return _write(replace(current, levels={**current.levels, item_id: rec}), service).level(item_id)


def reset_progress(*, path: Optional[PathLike] = None) -> None:
    """Forget all progress (the file is removed; the next shuffle token will differ)."""
    p = Path(path) if path is not None else progress_path()
    p.unlink(missing_ok=True)
    service = _service()
    if service is not None:
        try:
            service.store(record_json(Progress(p, {})))
        except SyncFailed as exc:
            print(f"progress: reset on this machine only: {exc}; its copy comes back at the next load", file=sys.stderr)
