"""What a test run may not leave on the host: the paths the session-wide check in ``conftest.py`` watches.

The simulated machine's roots (``/home/user``, ``/project``, ``/app/workspace``,
``/etc/secrets``, from ``grader/world.json``) are exactly the paths a careless
backend or test would create on the host, and a test that needs one there
(a canary) must remove what it made. So the session notes, when it starts,
which of these exist, together with ``/app`` and every top-level entry of ``/``
and ``/home``, and fails the run if any new one is there when it ends.
Temporary directories (under ``/tmp``) are not watched: pytest owns them.
"""

from __future__ import annotations

from pathlib import Path

from grader.core.world import load_world

EXTRA = ("/app",)
LISTED = ("/", "/home")  # directories whose every top-level entry is watched


def watched(root: Path = Path("/")) -> list[Path]:
    """The fixed paths to watch, rebased onto ``root`` (``/`` on the host; a temporary directory in tests)."""
    return [root / p.lstrip("/") for p in (*load_world().roots, *EXTRA)]


def snapshot(root: Path = Path("/")) -> frozenset[str]:
    """The watched paths that exist now, as absolute host paths (``/home/user``, not ``<root>/home/user``)."""
    found: set[Path] = {p for p in watched(root) if p.exists() or p.is_symlink()}
    for listed in LISTED:
        d = root / listed.lstrip("/")
        try:
            found.update(d.iterdir())
        except OSError:  # missing or unreadable: nothing in it is watched
            pass
    return frozenset("/" + p.relative_to(root).as_posix() for p in found)


def appeared(before: frozenset[str], after: frozenset[str]) -> list[str]:
    """Watched paths that exist after the run and did not before, sorted."""
    return sorted(after - before)


def message(new: list[str]) -> str:
    """Why the run fails, naming every new path and what to do."""
    return (
        f"this test run left {len(new)} new path(s) on the host that did not exist when it started: "
        + ", ".join(new)
        + ". A test (or a backend) created them outside its temporary directory: find it, make it remove "
        "only what it created, then remove these by hand (e.g. rmdir on an empty directory)."
    )
