"""The learner's progress across lessons, quiz questions and tasks, kept in a small local JSON file.

Pure file logic: no widgets, no grading. The file lives at
``~/.sandbox-lab/progress.json`` unless ``SANDBOX_LAB_PROGRESS`` names another
path (tests and shared machines set it). It holds only item ids and the time
each was first completed, never answers or policies.

A missing file is an empty record; an unreadable or corrupt one is reported as
such (``ProgressError``) rather than silently overwritten, so a typo in the
environment variable cannot wipe a learner's record.

Imports: errors. Nothing downstream.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from .errors import SandboxLabError

__all__ = [
    "LESSONS",
    "PROGRESS_ENV",
    "Progress",
    "ProgressError",
    "load_progress",
    "mark_done",
    "progress_path",
    "reset_progress",
]

PROGRESS_ENV = "SANDBOX_LAB_PROGRESS"
_VERSION = 1

# The lessons, in the order a learner takes them: (item id, title, minutes).
LESSONS: tuple[tuple[str, str, int], ...] = (
    ("l00-start-here", "Start here", 5),
    ("l01-why-sandbox", "Why sandbox an agent's tools?", 10),
    ("l02-naive-vs-secure", "Naive vs secure: scope each axis", 25),
    ("l03-container-alone", "Mistake 1: a container alone is not a sandbox", 15),
    ("l04-trusted-domains", "Mistake 2: a trusted domain is not a safe domain", 15),
    ("l05-check-yourself", "Check yourself: recall and understanding", 10),
)

PathLike = Union[str, "os.PathLike[str]"]


class ProgressError(SandboxLabError, ValueError):
    """The progress file exists but cannot be read as a progress record."""


@dataclass(frozen=True)
class Progress:
    """What has been completed: item id → UNIX time of first completion."""

    path: Path
    done: dict[str, float]

    def is_done(self, item_id: str) -> bool:
        return item_id in self.done


def progress_path() -> Path:
    """Where progress is kept: ``$SANDBOX_LAB_PROGRESS`` or ``~/.sandbox-lab/progress.json``."""
    env = os.environ.get(PROGRESS_ENV, "").strip()
    return Path(env).expanduser() if env else Path.home() / ".sandbox-lab" / "progress.json"


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
    done = data.get("done") if isinstance(data, dict) else None
    if not isinstance(done, dict) or not all(isinstance(k, str) and isinstance(v, (int, float)) for k, v in done.items()):
        raise ProgressError(f'{p}: not a progress record (expected {{"version": 1, "done": {{id: time}}}}). Fix or delete the file.')
    return Progress(p, {k: float(v) for k, v in done.items()})


def _write(p: Path, done: dict[str, float]) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    # Write to a temporary file and rename: a crash mid-write never leaves half a record.
    fd, tmp = tempfile.mkstemp(prefix=".progress-", suffix=".json", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"version": _VERSION, "done": done}, fh, indent=2, sort_keys=True)
            fh.write("\n")
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def mark_done(item_id: str, *, path: Optional[PathLike] = None, now: Optional[float] = None) -> Progress:
    """Record ``item_id`` as completed (the first completion time is kept) and return the new record."""
    if not item_id or not item_id.strip() or any(c in item_id for c in "\n\r\x00"):
        raise ValueError(f"not an item id: {item_id!r}")
    current = load_progress(path)
    if item_id in current.done:
        return current
    done = dict(current.done)
    done[item_id] = time.time() if now is None else now
    _write(current.path, done)
    return Progress(current.path, done)


def reset_progress(*, path: Optional[PathLike] = None) -> None:
    """Forget all progress (the file is removed)."""
    p = Path(path) if path is not None else progress_path()
    p.unlink(missing_ok=True)
