"""Bearer tokens: issued once, stored hashed, refused when unknown, expired or malformed (grader/hosted/tokens.py)."""

from __future__ import annotations

import json
import re
import stat
import time
from pathlib import Path

import pytest

from grader.hosted.tokens import TokenError, find_token, issue_token, parse_rate, read_tokens, revoke_token


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


@pytest.mark.parametrize(("raw", "reason"), [(b'{"tokens": ["\xff"]}', "not UTF-8 text (byte 13)"), (None, "cannot be read (a directory, not a file)")])
def test_a_token_file_that_is_not_text_or_not_a_file_is_a_token_error_not_a_traceback(
    tmp_path: Path, raw: bytes | None, reason: str
) -> None:
    path = tmp_path / "tokens.json"
    if raw is None:
        path.mkdir()
    else:
        path.write_bytes(raw)
    with pytest.raises(TokenError, match=re.escape(f"{path}: {reason}")):  # a UnicodeDecodeError escaped before
        read_tokens(path)


def test_no_file_is_no_token(tmp_path: Path) -> None:
    assert read_tokens(tmp_path / "missing.json") == ()


# --- revoking ---------------------------------------------------------------------------------------


def test_a_revoked_token_stays_listed_with_its_time_and_its_name_is_not_reissued(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    secret = issue_token(path, "alice")
    issue_token(path, "bob")
    revoked = revoke_token(path, "alice", now=1000.0)
    assert revoked.revoked == 1000.0 and revoked.name == "alice"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    alice, bob = read_tokens(path)
    assert alice.revoked == 1000.0 and bob.revoked is None
    assert find_token(read_tokens(path), secret) == alice  # still found: the API refuses it as revoked, not unknown
    assert revoke_token(path, "alice", now=2000.0).revoked == 1000.0  # again: nothing changes
    with pytest.raises(TokenError, match="revoked"):
        issue_token(path, "alice")  # its name keys its jobs and progress: a new alice would inherit them


def test_revoke_by_id_and_an_unknown_one_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    issue_token(path, "alice")
    (alice,) = read_tokens(path)
    before = path.read_bytes()
    with pytest.raises(TokenError, match="no token named 'carol'"):
        revoke_token(path, "carol")
    with pytest.raises(TokenError):
        revoke_token(path, alice.sha256)  # the hash is not an id
    assert path.read_bytes() == before
    assert revoke_token(path, alice.id).name == "alice"


def test_revoking_where_nothing_was_issued_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(TokenError, match="no tokens are issued"):
        revoke_token(tmp_path / "service" / "tokens.json", "alice")
    assert not (tmp_path / "service").exists()


def test_a_name_that_is_another_tokens_id_revokes_neither(tmp_path: Path) -> None:
    # gaming: a token named like another's id, so that `revoke <id>` would hit the wrong one
    path = tmp_path / "tokens.json"
    issue_token(path, "alice")
    (alice,) = read_tokens(path)
    issue_token(path, alice.id)
    before = path.read_bytes()
    with pytest.raises(TokenError):
        revoke_token(path, alice.id)
    assert path.read_bytes() == before


def test_the_id_says_nothing_of_the_hash_and_is_unique(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    secret = issue_token(path, "alice")
    (token,) = read_tokens(path)
    assert len(token.id) == 12 and token.id not in token.sha256 and token.id not in secret


@pytest.mark.parametrize("revoked", [None, "yes", True])
def test_a_revoked_field_of_the_wrong_type_is_an_error(tmp_path: Path, revoked: object) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"tokens": [{"name": "a", "sha256": "0" * 64, "created": 0, "expires": None, "rate": 1,
                                            "jobs": 1, "revoked": revoked}]}))
    with pytest.raises(TokenError):
        read_tokens(path)


def test_two_records_for_one_name_are_an_error(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    entry = {"name": "a", "sha256": "0" * 64, "created": 0, "expires": None, "rate": 1, "jobs": 1}
    path.write_text(json.dumps({"tokens": [entry, {**entry, "sha256": "1" * 64}]}))
    with pytest.raises(TokenError, match="same name"):
        read_tokens(path)
