"""Which levels' solutions the learner asked to see: the record a progress board reads to show "solution shown".

The ladder never gives a level's answer by attempt count; the learner asks
for it (the editor's "Show the solution" button, ``%%attack N --solution``),
and the choice is kept here, with when it was first made. The record lives
beside the progress file (``progress_path()``'s directory, ``solutions-shown.json``),
so a learner's two records move together and a test that points
``SANDBOX_LAB_PROGRESS`` at a temporary file isolates both. It is its own
file, not a field of the progress record, because the progress record has
its own owner and schema: a board reads it with ``solutions_shown()``.

    {"version": 1, "shown": {"ctf:l03-secure-npm": 1764930000.0}}

Read strictly: anything else is a ``LevelError`` naming the file and the fix,
never a silent "nothing shown".
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from grader.core.errors import LevelError
from grader.core.jsonfile import JsonFileError, JsonFileMissing, read_json_file
from grader.course.levels import Level, Solution
from grader.course.progress import progress_path

__all__ = ["FILE_NAME", "SolutionShown", "record_solution_shown", "reveal", "reveals_path", "solution_shown", "solutions_shown"]

FILE_NAME = "solutions-shown.json"
_VERSION = 1
PathLike = Union[str, Path]


@dataclass(frozen=True)
class SolutionShown:
    """One level whose solution the learner asked for: its progress id (``Level.item_id``) and when, first."""

    item_id: str
    at: float


def reveals_path() -> Path:
    """Where the record is kept: beside the progress file (``$SANDBOX_LAB_PROGRESS``'s directory, or ~/.sandbox-lab)."""
    return progress_path().with_name(FILE_NAME)


def solutions_shown(path: Optional[PathLike] = None) -> dict[str, float]:
    """Every level whose solution was shown, by progress id (``ctf:l03-secure-npm``), with when it was first shown;
    {} when none was. ``LevelError`` for a record that cannot be read (it names the file: fix or delete it)."""
    p = Path(path) if path is not None else reveals_path()
    try:
        data = read_json_file(p)
    except JsonFileMissing:
        return {}
    except JsonFileError as exc:
        raise LevelError(f"{p}: {exc}. Fix or delete the file.") from None
    shown = data.get("shown") if isinstance(data, dict) else None
    if (not isinstance(data, dict) or set(data) != {"version", "shown"} or data["version"] != _VERSION
            or not isinstance(shown, dict)
            or not all(isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) for k, v in shown.items())):
        raise LevelError(f'{p} is not a record of solutions shown: expected {{"version": {_VERSION}, "shown": '
                         '{"ctf:l03-secure-npm": <time>}}. Fix or delete the file.')
    return {str(k): float(v) for k, v in shown.items()}


def solution_shown(item_id: str, path: Optional[PathLike] = None) -> bool:
    """Whether the learner asked for this level's solution (``Level.item_id``)."""
    return item_id in solutions_shown(path)


def record_solution_shown(item_id: str, *, path: Optional[PathLike] = None, now: Optional[float] = None) -> SolutionShown:
    """Record that the learner asked for a level's solution; the first time is kept."""
    if not item_id.startswith("ctf:") or any(c in item_id for c in "\n\r\x00"):
        raise ValueError(f"not a level's progress id: {item_id!r} (e.g. 'ctf:l03-secure-npm')")
    p = Path(path) if path is not None else reveals_path()
    shown = solutions_shown(p)
    at = shown.setdefault(item_id, time.time() if now is None else now)
    p.parent.mkdir(parents=True, exist_ok=True)
    # a temporary file renamed over the record: a crash mid-write never leaves half of it
    fd, tmp = tempfile.mkstemp(prefix=".solutions-", suffix=".json", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"version": _VERSION, "shown": shown}, fh, indent=2, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return SolutionShown(item_id, at)


def reveal(lvl: Level, *, record: bool = True, path: Optional[PathLike] = None) -> Solution:
    """A level's worked solution, asked for by the learner, and the asking recorded (``record``); ``LevelError`` for
    the uncapturable level, whose answer is that nothing leaves (its debrief says why)."""
    if lvl.solution is None:
        raise LevelError(f"level {lvl.number} has no solution to show: {lvl.debrief}")
    if record:
        record_solution_shown(lvl.item_id, path=path)
    return lvl.solution
