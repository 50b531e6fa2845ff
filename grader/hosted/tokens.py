"""The service's bearer tokens: issued by the operator, stored hashed, each with its own limits.

A token is 32 random bytes (``secrets.token_urlsafe``), shown once when issued;
the file keeps its SHA-256 only. A salted slow hash would protect guessable
passwords; a 256-bit random token cannot be guessed from its hash, and a fast
hash keeps every request's check cheap. A lookup compares every stored hash in
constant time, so timing does not say how close a guess came.

The file (``tokens.json`` in the service's directory, mode 0600) is written
whole to a temporary file and renamed: a reader never sees half a file. An
unreadable or malformed file is an error, never "no tokens" and never "any token".

Imports nothing of the package.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Optional

__all__ = ["DEFAULT_JOBS", "DEFAULT_RATE", "Token", "TokenError", "find_token", "issue_token", "parse_rate", "read_tokens"]

DEFAULT_RATE = 30  # runs a minute: a learner iterating on a policy starts a few a minute
DEFAULT_JOBS = 4  # jobs queued or running at once, per token
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
_FIELDS = {"name", "sha256", "created", "expires", "rate", "jobs"}


class TokenError(ValueError):
    """A token file that cannot be used, or a token that cannot be issued as asked."""


@dataclass(frozen=True)
class Token:
    """One issued token as stored: its name, hash, limits and expiry (seconds since the epoch, or None)."""

    name: str
    sha256: str
    created: float
    expires: Optional[float]
    rate: int  # runs a minute
    jobs: int  # concurrent jobs

    def expired(self, now: Optional[float] = None) -> bool:
        return self.expires is not None and (time.time() if now is None else now) >= self.expires


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def parse_rate(text: str) -> int:
    """``"30/min"`` (or ``"30"``) as 30; anything else is a ``TokenError``."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:/\s*min)?\s*", text)
    if not m or int(m.group(1)) < 1:
        raise TokenError(f"--rate {text!r}: write runs a minute as N/min, e.g. 30/min")
    return int(m.group(1))


def _token_from(entry: Any, where: str) -> Token:
    if not isinstance(entry, dict) or set(entry) != _FIELDS:
        raise TokenError(f"{where}: not a token record (fields {sorted(_FIELDS)})")
    ok = (isinstance(entry["name"], str) and isinstance(entry["sha256"], str) and len(entry["sha256"]) == 64
          and isinstance(entry["created"], (int, float)) and (entry["expires"] is None or isinstance(entry["expires"], (int, float)))
          and type(entry["rate"]) is int and entry["rate"] > 0 and type(entry["jobs"]) is int and entry["jobs"] > 0)
    if not ok:
        raise TokenError(f"{where}: a field has the wrong type")
    return Token(**entry)


def read_tokens(path: Path) -> tuple[Token, ...]:
    """Every token in ``path``; a missing file is no tokens (nothing issued yet), a broken one a ``TokenError``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ()
    except OSError as exc:
        raise TokenError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TokenError(f"{path}: not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict) or set(data) != {"tokens"} or not isinstance(data["tokens"], list):
        raise TokenError(f'{path}: not a token file (expected {{"tokens": [...]}})')
    return tuple(_token_from(e, f"{path}: tokens[{i}]") for i, e in enumerate(data["tokens"]))


def _write(path: Path, tokens: tuple[Token, ...]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tokens.", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:  # mkstemp: mode 0600 already
            json.dump({"tokens": [asdict(t) for t in tokens]}, fh, indent=2)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def issue_token(path: Path, name: str, *, expires_days: Optional[float] = None, rate: int = DEFAULT_RATE,
                jobs: int = DEFAULT_JOBS, now: Optional[float] = None) -> str:
    """Add a token named ``name`` to ``path`` and return its secret (the only time it is seen).

    Names are unique: a second token for a name is refused (tokens are per person, and a name is how
    limits and jobs are reported)."""
    if not _NAME.match(name):
        raise TokenError(f"--name {name!r}: use letters, digits and . _ @ - (at most 64), e.g. alice")
    if expires_days is not None and expires_days <= 0:
        raise TokenError("--expires: a number of days above 0")
    if rate < 1 or jobs < 1:
        raise TokenError("--rate and --jobs: at least 1")
    tokens = read_tokens(path)
    if any(t.name == name for t in tokens):
        raise TokenError(f"a token named {name!r} exists; choose another name")
    created = time.time() if now is None else now
    secret = "sl_" + secrets.token_urlsafe(32)
    token = Token(name=name, sha256=_digest(secret), created=created,
                  expires=None if expires_days is None else created + expires_days * 86400, rate=rate, jobs=jobs)
    _write(path, (*tokens, token))
    return secret


def find_token(tokens: tuple[Token, ...], secret: str) -> Optional[Token]:
    """The token whose hash is ``secret``'s, compared with every one in constant time; None if none is."""
    digest = _digest(secret)
    found: Optional[Token] = None
    for t in tokens:
        if hmac.compare_digest(t.sha256, digest):
            found = t
    return found
