"""srt's mandatory write protections: what sandbox-runtime keeps read-only whatever ``allowWrite`` says.

On Linux srt 0.0.83 finds them relative to the directory it starts in: its
list there (whether or not the files exist yet) and, with ripgrep, existing
matches up to ``mandatoryDenySearchDepth`` (3) levels below it
(``DANGEROUS_FILES`` and ``getDangerousDirectories()`` in its
``dist/sandbox/sandbox-utils.js``, plus ``.git/hooks`` and ``.git/config``;
measured in ``docs/srt-differences.md``). Other persistence paths of the world
(``~/.local/bin``, ``~/.ssh/authorized_keys``, a Makefile) and srt's own
settings file are not on its list.

Pure.
"""

from __future__ import annotations

from typing import Iterable

from grader.core.paths import covers

__all__ = ["SEARCH_DEPTH", "SRT_DIRS", "SRT_FILES", "protect_target", "protected_paths", "srt_protects"]

SRT_FILES = (".gitconfig", ".gitmodules", ".bashrc", ".bash_profile", ".zshrc", ".zprofile", ".profile", ".ripgreprc", ".mcp.json")
SRT_DIRS = (".vscode", ".idea", ".claude/commands", ".claude/agents", ".git/hooks")
SEARCH_DEPTH = 3  # srt's mandatoryDenySearchDepth: existing files found up to this many levels below the start directory


def protect_target(path: str) -> str:
    """What srt protects for a path on its list: the whole protected directory it lies in, else the file."""
    for d in SRT_DIRS:
        head, sep, _ = (path + "/").partition(f"/{d}/")
        if sep:
            return f"{head}/{d}"
    return path


def srt_protects(path: str) -> bool:
    """Is ``path`` of a kind srt protects (a start-up file, a git hook, an editor or agent folder)?"""
    inside = any(f"/{d}/" in path + "/" for d in SRT_DIRS)
    return inside or path.rsplit("/", 1)[-1] in SRT_FILES or path.endswith("/.git/config")


def protected_paths(start: str, existing: Iterable[str]) -> tuple[str, ...]:
    """What srt write-protects when started in ``start``: its list there, and existing matches up to 3 levels below."""
    out = [f"{start}/{f}" for f in SRT_FILES] + [f"{start}/{d}" for d in SRT_DIRS] + [f"{start}/.git/config"]
    for path in sorted(existing):
        if covers(start, path) and path != start and path[len(start):].count("/") <= SEARCH_DEPTH and srt_protects(path):
            out.append(protect_target(path))
    return tuple(dict.fromkeys(out))
