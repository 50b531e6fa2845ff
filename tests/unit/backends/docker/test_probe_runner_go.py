"""A prepared probe runner (``--await-go``) fires its probes only on the go line; without it, nothing fires."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

from grader.backends.docker import run as docker_run
from grader.services import probe_runner


def _orders(tmp_path: Path, target: Path) -> Path:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"timeout": 1, "connect_timeout": 1, "proxy": None, "ca_file": "",
                                  "probes": [{"id": "p", "steps": [{"op": "read", "path": str(target)}]}]}))
    return config


def _run(monkeypatch: pytest.MonkeyPatch, config: Path, stdin: str) -> tuple[int, str]:
    monkeypatch.setattr(probe_runner, "CONFIG", str(config))
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = probe_runner.main(await_go=True)
    return code, out.getvalue()


def test_the_go_line_fires_the_probes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "secret"
    target.write_text("canary")
    code, out = _run(monkeypatch, _orders(tmp_path, target), probe_runner.GO + "\n")
    assert code == 0
    assert '"step": "done"' in out and "canary" in out


@pytest.mark.parametrize("stdin", ["", "\n", "go on\n", "GO\n"])
def test_without_the_go_line_nothing_fires(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stdin: str) -> None:
    """End of input (the grader retired the run, or died) or any other line: a refusal, no probe, no done."""
    target = tmp_path / "secret"
    target.write_text("canary")
    code, out = _run(monkeypatch, _orders(tmp_path, target), stdin)
    assert code == 3
    assert "canary" not in out and '"done"' not in out and "refused" in out


def test_the_grader_sends_the_line_the_runner_waits_for() -> None:
    assert docker_run.GO == probe_runner.GO
