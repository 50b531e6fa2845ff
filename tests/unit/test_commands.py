"""The service's commands through the CLI: ``tokens issue`` prints the token once (grader/hosted/commands.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.cli import main as cli
from grader.hosted.tokens import find_token, read_tokens


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
    assert "pip install 'sandbox-lab[service]'" in capsys.readouterr().err
