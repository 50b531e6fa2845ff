"""The service's commands through the CLI: ``tokens issue`` prints the token once (grader/hosted/commands.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.cli import main as cli
from grader.hosted.tokens import find_token, read_tokens
from grader.protocol.common import install_hint


def test_tokens_issue_prints_the_token_once_and_stores_its_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SANDBOX_LAB_SERVICE_DIR", str(tmp_path))
    assert cli.main(["tokens", "issue", "--name", "alice", "--rate", "5/min", "--jobs", "2", "--expires", "7"]) == 0
    out, err = capsys.readouterr()
    secret = out.strip()
    assert secret.startswith("sl_") and "only time" in err
    token = find_token(read_tokens(tmp_path / "tokens.json"), secret)
    assert token is not None and (token.rate, token.jobs) == (5, 2) and token.expires is not None
    assert secret not in (tmp_path / "tokens.json").read_text()


def test_tokens_issue_refuses_what_it_cannot_issue(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SANDBOX_LAB_SERVICE_DIR", str(tmp_path))
    assert cli.main(["tokens", "issue", "--name", "alice", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "alice"
    assert cli.main(["tokens", "issue", "--name", "alice"]) == 2
    assert "exists" in capsys.readouterr().err
    assert cli.main(["tokens", "issue", "--name", "bob", "--rate", "lots"]) == 2
    assert cli.main(["tokens", "revoke", "--name", "bob"]) == 2


def test_without_the_service_extra_the_command_names_its_install(monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # import uvicorn now raises ModuleNotFoundError
    assert cli.main(["serve"]) == 2
    assert install_hint("service") in capsys.readouterr().err


def test_tokens_list_shows_each_token_but_never_the_token_or_its_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SANDBOX_LAB_SERVICE_DIR", str(tmp_path))
    assert cli.main(["tokens", "list"]) == 0
    assert "no tokens" in capsys.readouterr().err
    assert cli.main(["tokens", "issue", "--name", "alice", "--rate", "5/min", "--jobs", "2", "--expires", "7"]) == 0
    assert cli.main(["tokens", "issue", "--name", "bob"]) == 0
    secrets = capsys.readouterr().out.split()
    assert cli.main(["tokens", "revoke", "bob"]) == 0
    capsys.readouterr()
    assert cli.main(["tokens", "list"]) == 0
    out = capsys.readouterr().out
    alice, bob = read_tokens(tmp_path / "tokens.json")
    lines = out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("alice") and alice.id in lines[0] and "5/min" in lines[0] and "2 jobs" in lines[0]
    assert "expires 20" in lines[0] and lines[0].endswith("active")
    assert lines[1].startswith("bob") and "expires never" in lines[1] and "revoked" in lines[1]
    assert cli.main(["tokens", "list", "--json"]) == 0
    out += capsys.readouterr().out
    for secret, token in zip(secrets, (alice, bob)):
        assert secret not in out and secret[3:15] not in out
        # no 12 characters of the hash either (the id is a hash of the hash, not a piece of it)
        assert not any(token.sha256[i:i + 12] in out for i in range(0, 64 - 12))


def test_tokens_revoke_by_name_or_id_and_an_unknown_name_is_exit_2_with_nothing_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import stat

    monkeypatch.setenv("SANDBOX_LAB_SERVICE_DIR", str(tmp_path))
    assert cli.main(["tokens", "issue", "--name", "alice"]) == 0
    assert cli.main(["tokens", "issue", "--name", "bob"]) == 0
    path = tmp_path / "tokens.json"
    before = path.read_bytes()
    capsys.readouterr()
    assert cli.main(["tokens", "revoke", "carol"]) == 2
    assert "no token named 'carol'" in capsys.readouterr().err
    assert cli.main(["tokens", "revoke"]) == 2
    assert cli.main(["tokens", "list", "--rate", "3/min"]) == 2  # an option that would do nothing is refused
    assert cli.main(["tokens", "issue", "alice"]) == 2
    assert path.read_bytes() == before
    (alice, bob) = read_tokens(path)
    assert cli.main(["tokens", "revoke", bob.id, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "bob"
    assert cli.main(["tokens", "revoke", "--name", "alice"]) == 0
    assert all(t.revoked is not None for t in read_tokens(path))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".tokens.")]  # no temporary file left
