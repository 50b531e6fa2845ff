"""Filesystem paths in a policy: how an entry is written, normalized and said to cover another.

Pure functions, standard library only. The policy model calls
``normalize_path``; the access rules call ``covers``.
"""

from __future__ import annotations

__all__ = ["HOME", "MAX_PATH_LENGTH", "covers", "normalize_path", "uses_dotdot"]

HOME = "/home/user"  # the simulated user's home: what "~" means in a policy
MAX_PATH_LENGTH = 4096  # PATH_MAX on Linux; longer entries are refused before any work
_GLOB_CHARS = "*?["


def uses_dotdot(raw: str) -> bool:
    """True if the entry walks up with ``..`` (worth a warning: it may not mean what it looks like)."""
    return ".." in raw.split("/")


def normalize_path(raw: str) -> str:
    """Return the canonical absolute form of a policy path, or raise ValueError saying how to fix it.

    ``~`` and ``~/x`` become the simulated home; trailing and repeated ``/``
    are dropped; ``.`` and ``..`` are resolved lexically (``/..`` stays ``/``).
    Globs are refused rather than guessed at: sandbox-runtime treats them
    differently per platform, and a rule must mean one thing.
    """
    if raw == "":
        raise ValueError('empty path. Write an absolute path such as "/project/src", or remove the entry.')
    if len(raw) > MAX_PATH_LENGTH:
        raise ValueError(f"path is {len(raw)} characters long; the limit is {MAX_PATH_LENGTH}.")
    if any(ord(c) < 0x20 or c == "\x7f" for c in raw):
        raise ValueError(
            "contains a control character (NUL, newline, tab...). Write the path on one line, "
            "with printable characters only."
        )
    if raw.startswith("~"):
        if raw == "~" or raw.startswith("~/"):
            raw = HOME + raw[1:]
        else:
            user = raw[1:].split("/", 1)[0]
            raise ValueError(
                f'"~{user}" (another user\'s home) is not supported: only "~" (= {HOME}) is. '
                f'Write the absolute path instead.'
            )
    if not raw.startswith("/"):
        raise ValueError(
            f'relative path. Write an absolute path such as "/project/{raw}" or "~/{raw}".'
        )
    for c in _GLOB_CHARS:
        if c in raw:
            raise ValueError(
                f"contains {c!r}: globs are not supported. A rule covers its path and everything "
                "below it, so name the directory instead."
            )
    stack: list[str] = []
    for part in raw.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if stack:
                stack.pop()
            continue
        stack.append(part)
    return "/" + "/".join(stack)


def covers(rule: str, path: str) -> bool:
    """True if a normalized rule path covers a normalized path: the path itself or anything below it."""
    if rule == "/":
        return True
    # the path itself, or the rule followed by "/" (written without building rule + "/": the analyzer asks millions)
    return path.startswith(rule) and (len(path) == len(rule) or path[len(rule)] == "/")
