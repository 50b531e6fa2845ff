"""Bearer tokens: issued once, stored hashed, refused when unknown, expired or malformed (grader/hosted/tokens.py)."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest

from grader.hosted.tokens import TokenError, find_token, issue_token, parse_rate, read_tokens


def test_a_token_is_stored_hashed_with_its_limits(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    secret = issue_token(path, "alice", rate=5, jobs=2, expires_days=1)
    text = path.read_text()
    assert secret not in text and secret[3:] not in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    (token,) = read_tokens(path)
    assert (token.name, token.rate, token.jobs) == ("alice", 5, 2)
    assert find_token(read_tokens(path), secret) == token
    assert find_token(read_tokens(path), secret + "x") is None
    assert not token.expired() and token.expired(time.time() + 2 * 86400)


def test_names_are_unique_and_plain(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    issue_token(path, "alice")
    with pytest.raises(TokenError, match="exists"):
        issue_token(path, "alice")
    with pytest.raises(TokenError, match="--name"):
        issue_token(path, "../bob")
    with pytest.raises(TokenError, match="--expires"):
        issue_token(path, "carol", expires_days=0)


def test_rates_read_as_runs_a_minute() -> None:
    assert parse_rate("30/min") == parse_rate("30") == 30
    for bad in ("0/min", "3/hour", "-1", "many"):
        with pytest.raises(TokenError):
            parse_rate(bad)


@pytest.mark.parametrize("text", ["not json", "[]", '{"tokens": [{"name": "a"}]}', '{"tokens": [], "extra": 1}',
                                  json.dumps({"tokens": [{"name": "a", "sha256": "0" * 64, "created": 0, "expires": None,
                                                          "rate": True, "jobs": 1}]})])
def test_a_broken_token_file_is_an_error_never_no_tokens(tmp_path: Path, text: str) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(text)
    with pytest.raises(TokenError):
        read_tokens(path)


def test_no_file_is_no_token(tmp_path: Path) -> None:
    assert read_tokens(tmp_path / "missing.json") == ()
