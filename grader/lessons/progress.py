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

Imports: errors. Nothing downstream.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional, Union

from grader.core.errors import SandboxLabError

__all__ = [
    "LESSONS",
    "PROGRESS_ENV",
    "Attempt",
    "LevelRecord",
    "Progress",
    "ProgressError",
    "learner_seed",
    "load_progress",
    "mark_done",
    "progress_path",
    "record_attempt",
    "record_level",
    "reset_progress",
]

PROGRESS_ENV = "SANDBOX_LAB_PROGRESS"
_VERSION = 2  # 2 added "first" and "learner"; a version-1 file reads as one without them

# The lessons, in the order a learner takes them: (item id, title, minutes).
LESSONS: tuple[tuple[str, str, int], ...] = (
    ("l00-start-here", "Start here", 5),
    ("l01-why-sandbox", "Why sandbox an agent's tools?", 15),
    ("l02-naive-vs-secure", "Naive vs secure: scope each axis", 25),
    ("l03-container-alone", "Mistake 1: a container alone is not a sandbox", 20),
    ("l04-trusted-domains", "Mistake 2: a trusted domain is not a safe domain", 20),
    ("l05-check-yourself", "Check yourself: recall and understanding", 15),
    ("l06-what-a-policy-misses", "What a policy does not cover", 20),
    ("l07-break-it-yourself", "Break it yourself: capture the flag", 30),
)

PathLike = Union[str, "os.PathLike[str]"]
_SHAPE = '{"version": 2, "done": {id: time}, "first": {id: {"at": time, "result": "...", "score": 0..1}}}'


class ProgressError(SandboxLabError, ValueError):
    """The progress file exists but cannot be read as a progress record."""


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


def _attempt(v: object) -> Optional[Attempt]:
    if not isinstance(v, dict):
        return None
    at, result, score = v.get("at"), v.get("result"), v.get("score")
    if not isinstance(at, (int, float)) or not isinstance(result, str) or not isinstance(score, (int, float)):
        return None
    if not _number(at) or not _number(score) or not 0.0 <= score <= 1.0:
        return None
    return Attempt(float(at), result, float(score))


def _parse(p: Path, data: Any) -> Progress:
    bad = ProgressError(f"{p}: not a progress record (expected {_SHAPE}). Fix or delete the file.")
    if not isinstance(data, dict):
        raise bad
    done = data.get("done")
    if not isinstance(done, dict) or not all(isinstance(k, str) and _number(v) for k, v in done.items()):
        raise bad
    raw_first = data.get("first", {})
    if not isinstance(raw_first, dict):
        raise bad
    first: dict[str, Attempt] = {}
    for k, v in raw_first.items():
        a = _attempt(v)
        if a is None:
            raise ProgressError(f'{p}: the first attempt at {k!r} is not {{"at": time, "result": "...", "score": 0..1}}. '
                                "Fix or delete the file.")
        first[str(k)] = a
    learner = data.get("learner", "")
    if not isinstance(learner, str):
        raise bad
    raw_levels = data.get("levels", {})
    if not isinstance(raw_levels, dict):
        raise bad
    levels: dict[str, LevelRecord] = {}
    for k, v in raw_levels.items():
        rec = _level(v)
        if rec is None:
            raise ProgressError(f'{p}: the record of level {k!r} is not {{"attempts": n, "hints": n, "captured": time or null}}. '
                                "Fix or delete the file.")
        levels[str(k)] = rec
    return Progress(p, {k: float(v) for k, v in done.items()}, first, learner, levels)


def _level(v: object) -> Optional[LevelRecord]:
    if not isinstance(v, dict):
        return None
    attempts, hints, captured = v.get("attempts"), v.get("hints"), v.get("captured")
    if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 0:
        return None
    if not isinstance(hints, int) or isinstance(hints, bool) or hints < 0:
        return None
    if captured is not None and not (isinstance(captured, (int, float)) and _number(captured)):
        return None
    return LevelRecord(attempts, hints, None if captured is None else float(captured))


def load_progress(path: Optional[PathLike] = None) -> Progress:
    """Read the progress record; a missing file is an empty one."""
    p = Path(path) if path is not None else progress_path()
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return Progress(p, {})
    except OSError as exc:
        raise ProgressError(f"{p}: cannot be read ({exc.strerror}).") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProgressError(f"{p}: not valid JSON ({exc.msg}, line {exc.lineno}). Fix or delete the file.") from None
    return _parse(p, data)


def _write(progress: Progress) -> Progress:
    p = progress.path
    p.parent.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {"version": _VERSION, "done": progress.done,
                            "first": {k: {"at": a.at, "result": a.result, "score": a.score} for k, a in progress.first.items()}}
    if progress.learner:
        data["learner"] = progress.learner
    if progress.levels:
        data["levels"] = {k: {"attempts": r.attempts, "hints": r.hints, "captured": r.captured} for k, r in progress.levels.items()}
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
    return progress


def _check_id(item_id: str) -> None:
    if not item_id or not item_id.strip() or any(c in item_id for c in "\n\r\x00"):
        raise ValueError(f"not an item id: {item_id!r}")


def mark_done(item_id: str, *, path: Optional[PathLike] = None, now: Optional[float] = None) -> Progress:
    """Record ``item_id`` as completed (the first completion time is kept) and return the new record."""
    _check_id(item_id)
    current = load_progress(path)
    if item_id in current.done:
        return current
    done = dict(current.done)
    done[item_id] = time.time() if now is None else now
    return _write(replace(current, done=done))


def record_attempt(item_id: str, result: str, score: float, *, path: Optional[PathLike] = None,
                   now: Optional[float] = None) -> tuple[Attempt, bool]:
    """Record an attempt at a question if it is the first: ``(the attempt that counts, whether it is this one)``.

    Only the first attempt is kept, whatever comes after: the board shows what
    the learner knew before any feedback, not what they learned from it.
    """
    _check_id(item_id)
    if not result or not result.strip() or not _number(score) or not 0.0 <= score <= 1.0:
        raise ValueError(f"an attempt has a result and a score from 0 to 1, not {result!r}, {score!r}")
    current = load_progress(path)
    earlier = current.first.get(item_id)
    if earlier is not None:
        return earlier, False
    attempt = Attempt(time.time() if now is None else now, result.strip(), float(score))
    _write(replace(current, first={**current.first, item_id: attempt}))
    return attempt, True


def learner_seed(*, path: Optional[PathLike] = None) -> str:
    """This install's shuffling token: random, made and saved on first use, the same ever after (until a reset)."""
    current = load_progress(path)
    if current.learner:
        return current.learner
    token = secrets.token_hex(8)
    _write(replace(current, learner=token))
    return token


def record_level(item_id: str, *, captured: bool, hint_shown: bool, path: Optional[PathLike] = None,
                 now: Optional[float] = None) -> LevelRecord:
    """Count one attempt at a capture-the-flag level (and the hint it showed); keep the first capture's time.

    Only a judged attempt counts: an attack that could not be judged (``AttackResult.captured`` None) is refused
    with ``ValueError``, so a broken run can never move the learner along the hints."""
    _check_id(item_id)
    if not isinstance(captured, bool):
        raise ValueError(f"an attempt is captured (True) or missed (False), not {captured!r}: "
                         "a run that could not be judged is no attempt")
    current = load_progress(path)
    old = current.level(item_id)
    when = old.captured if old.captured is not None else ((time.time() if now is None else now) if captured else None)
    rec = LevelRecord(old.attempts + 1, old.hints + (1 if hint_shown else 0), when)
    _write(replace(current, levels={**current.levels, item_id: rec}))
    return rec


def reset_progress(*, path: Optional[PathLike] = None) -> None:
    """Forget all progress (the file is removed; the next shuffle token will differ)."""
    p = Path(path) if path is not None else progress_path()
    p.unlink(missing_ok=True)
