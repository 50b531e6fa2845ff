"""The service's bearer tokens: issued by the operator, stored hashed, each with its own limits.

A token is 32 random bytes (``secrets.token_urlsafe``), shown once when issued;
the file keeps its SHA-256 only. A salted slow hash would protect guessable
passwords; a 256-bit random token cannot be guessed from its hash, and a fast
hash keeps every request's check cheap. A lookup compares every stored hash in
constant time, so timing does not say how close a guess came.

The file (``tokens.json`` in the service's directory, mode 0600) is written
whole to a temporary file and renamed: a reader never sees half a file. An
unreadable or malformed file is an error, never "no tokens" and never "any token".
Issuing and revoking hold a lock beside it (``tokens.json.lock``), so two
operators at once cannot drop each other's change.

A revoked token stays in the file with the time it was revoked: the API reads
the file on every request, so the next request with it is a 401, and its name
(which keys its jobs and limits) is never issued again. Each token has a short
``id`` (12 hex) derived from its hash: what ``tokens list`` shows, what
``tokens revoke`` accepts, and what keys a learner's progress in the service's
Redis. It is a hash of the stored hash, so it says nothing of the token, and
ids are unique in a file (checked when issuing and when reading).

Imports only the package's JSON file reader.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Optional

from grader.core.jsonfile import JsonFileError, JsonFileMissing, read_json_file

__all__ = ["DEFAULT_JOBS", "DEFAULT_RATE", "Token", "TokenError", "find_token", "issue_token", "parse_rate", "read_tokens",
           "revoke_token"]

DEFAULT_RATE = 30  # runs a minute: a learner iterating on a policy starts a few a minute
DEFAULT_JOBS = 4  # jobs queued or running at once, per token
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}$")
_FIELDS = {"name", "sha256", "created", "expires", "rate", "jobs"}
_OPTIONAL = {"revoked"}  # written only once a token is revoked: a file of unrevoked tokens reads as before


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
    revoked: Optional[float] = None  # when it was revoked (seconds since the epoch), or None

    def expired(self, now: Optional[float] = None) -> bool:
        return self.expires is not None and (time.time() if now is None else now) >= self.expires

    @property
    def id(self) -> str:
        """12 hex of a hash of the stored hash: names the token in lists and keys, and says nothing of it."""
        return hashlib.sha256(("sandbox-lab token id:" + self.sha256).encode("ascii")).hexdigest()[:12]


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def parse_rate(text: str) -> int:
    """``"30/min"`` (or ``"30"``) as 30; anything else is a ``TokenError``."""
    m = re.fullmatch(r"\s*(\d+)\s*(?:/\s*min)?\s*", text)
    if not m or int(m.group(1)) < 1:
        raise TokenError(f"--rate {text!r}: write runs a minute as N/min, e.g. 30/min")
    return int(m.group(1))


def _token_from(entry: Any, where: str) -> Token:
    if not isinstance(entry, dict) or not _FIELDS <= set(entry) <= _FIELDS | _OPTIONAL:
        raise TokenError(f"{where}: not a token record (fields {sorted(_FIELDS)}, and revoked once revoked)")
    ok = (isinstance(entry["name"], str) and isinstance(entry["sha256"], str) and len(entry["sha256"]) == 64
          and isinstance(entry["created"], (int, float)) and (entry["expires"] is None or isinstance(entry["expires"], (int, float)))
          and type(entry["rate"]) is int and entry["rate"] > 0 and type(entry["jobs"]) is int and entry["jobs"] > 0
          and (entry.get("revoked") is None or (isinstance(entry["revoked"], (int, float))
                                                and not isinstance(entry["revoked"], bool))))
    if not ok or "revoked" in entry and entry["revoked"] is None:
        raise TokenError(f"{where}: a field has the wrong type")
    return Token(**entry)


def read_tokens(path: Path) -> tuple[Token, ...]:
    """Every token in ``path``; a missing file is no tokens (nothing issued yet), a broken one a ``TokenError``."""
    try:
        data = read_json_file(path)
    except JsonFileMissing:
        return ()
    except JsonFileError as exc:
        raise TokenError(f"{path}: {exc}") from None
    if not isinstance(data, dict) or set(data) != {"tokens"} or not isinstance(data["tokens"], list):
        raise TokenError(f'{path}: not a token file (expected {{"tokens": [...]}})')
    tokens = tuple(_token_from(e, f"{path}: tokens[{i}]") for i, e in enumerate(data["tokens"]))
    # two records for one name or one id would make revoking one of them a guess: the file is refused
    for what, values in (("name", [t.name for t in tokens]), ("id", [t.id for t in tokens])):
        if len(set(values)) != len(values):
            raise TokenError(f"{path}: two tokens have the same {what}; remove one")
    return tokens


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold the token file's lock: a read, a change and its write happen as one."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _entry(token: Token) -> dict[str, Any]:
    entry = asdict(token)
    if token.revoked is None:
        del entry["revoked"]
    return entry


def _write(path: Path, tokens: tuple[Token, ...]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tokens.", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:  # mkstemp: mode 0600 already
            json.dump({"tokens": [_entry(t) for t in tokens]}, fh, indent=2)
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
    with _locked(path):
        tokens = read_tokens(path)
        same = [t for t in tokens if t.name == name]
        if same:
            revoked = " (revoked: a name keys its jobs and progress, so it is not issued again)" if same[0].revoked else ""
            raise TokenError(f"a token named {name!r} exists{revoked}; choose another name")
        created = time.time() if now is None else now
        while True:
            secret = "sl_" + secrets.token_urlsafe(32)
            token = Token(name=name, sha256=_digest(secret), created=created,
                          expires=None if expires_days is None else created + expires_days * 86400, rate=rate, jobs=jobs)
            if all(t.id != token.id for t in tokens):  # ids key progress: never two alike (a 48-bit clash, redrawn)
                break
        _write(path, (*tokens, token))
    return secret


def revoke_token(path: Path, which: str, *, now: Optional[float] = None) -> Token:
    """Revoke the token named ``which`` (or whose id it is) and return it; unknown, a ``TokenError`` and no change.

    Revoking a revoked token changes nothing and returns it (the first revocation's time is kept)."""
    if not path.exists():  # nothing issued: nothing to create either, not even the lock
        raise TokenError(f"no token named {which!r}: no tokens are issued yet ({path})")
    with _locked(path):
        tokens = read_tokens(path)
        found = [t for t in tokens if t.name == which or t.id == which]
        if len(found) != 1:  # none; or a name that is another token's id: a guess either way, so nothing changes
            known = ", ".join(t.name for t in tokens) or "none issued"
            raise TokenError(f"no token named {which!r} (or with that id); the tokens are: {known}. "
                             "See `sandbox-lab tokens list`")
        (token,) = found
        if token.revoked is not None:
            return token
        revoked = replace(token, revoked=time.time() if now is None else now)
        _write(path, tuple(revoked if t is token else t for t in tokens))
    return revoked


def find_token(tokens: tuple[Token, ...], secret: str) -> Optional[Token]:
    """The token whose hash is ``secret``'s, compared with every one in constant time; None if none is."""
    digest = _digest(secret)
    found: Optional[Token] = None
    for t in tokens:
        if hmac.compare_digest(t.sha256, digest):
            found = t
    return found
