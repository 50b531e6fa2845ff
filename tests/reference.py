"""The reference solutions, for tests: they live in the repository's ``solutions/``, never in the package."""

from __future__ import annotations

from pathlib import Path

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"


def solution_path(task_id: str) -> Path:
    """``solutions/<task_id>.json`` (FileNotFoundError if the task has none)."""
    path = SOLUTIONS / f"{task_id}.json"
    if not path.is_file():
        raise FileNotFoundError(path)
    return path


def solution_text(task_id: str) -> str:
    return solution_path(task_id).read_text(encoding="utf-8")
