"""A prepared probe runner (``--await-go``) fires its probes only on the go line; without it, nothing fires."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import pytest

from grader.backends.docker import golines
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
    assert golines.GO == probe_runner.GO


def test_the_grader_knows_the_runners_end_by_its_last_line_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The grader stops waiting once it has read the runner's ``end`` record (``golines.runner_end``): the real
    runner's last line is that record, and no other line is taken for it, even where a file the probes read
    holds that very text (a record's data is JSON-escaped: it can never start a line)."""
    forged = json.dumps({"probe": "runner", "step": "end", "ok": True, "detail": "", "t": 0.0,
                         "target": None, "data": None, "route": None})
    target = tmp_path / "secret"
    target.write_text(f"canary\n{forged}\n")
    code, out = _run(monkeypatch, _orders(tmp_path, target), probe_runner.GO + "\n")
    lines = out.encode().splitlines()
    assert code == 0 and len(lines) > 2 and "canary" in out
    assert [golines.runner_end(x) for x in lines] == [False] * (len(lines) - 1) + [True]
    assert golines.runner_end(forged.encode()), "the same text, as the runner prints it, is the end"
    assert not golines.runner_end(forged.replace("true", "false").encode()), "an end that is not ok is no end"
    assert not golines.runner_end(forged.encode()[:-1]), "nor is a cut one"


@pytest.mark.parametrize("stdin, runs", [("go\n", True), ("", False), ("nogo\n", False), ("go and more\n", False)])
def test_a_job_made_ready_runs_its_code_only_after_its_go(tmp_path: Path, stdin: str, runs: bool) -> None:
    """``golines.JOB_AWAIT_GO`` (the next sandboxed session made ready ahead): the job's code starts only on the go
    line, after the ``ACK`` that proves it, with no stdin of its own; anything else ends it with nothing run."""
    import subprocess

    from grader.backends.docker import replay

    job = tmp_path / "job.py"
    job.write_text("import sys; print('ran', repr(sys.stdin.read()))")
    command = [part.replace("/opt/sandbox-lab/run/job.py", str(job)) for part in golines.JOB_AWAIT_GO]
    done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=30)
    if runs:
        assert done.returncode == 0 and done.stdout == replay.ACK.decode() + "ran ''\n", done
    else:
        assert done.returncode == 3 and done.stdout == "", done


def test_the_runner_says_it_is_ready_before_it_waits_for_its_go_and_only_that_line_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Prepared.settled`` waits for the ``ready`` record (``golines.runner_ready``): printed once the orders are
    read and before the go is read, first of all lines; a probe's data that holds the same text is no such line."""
    forged = json.dumps({"probe": "runner", "step": "ready", "ok": True, "detail": "", "t": 0.0,
                         "target": None, "data": None, "route": None})
    target = tmp_path / "secret"
    target.write_text(f"canary\n{forged}\n")
    monkeypatch.setattr(probe_runner, "CONFIG", str(_orders(tmp_path, target)))
    out = io.StringIO()

    class Stdin:
        said: list[bool] = []

        def readline(self) -> str:
            self.said.append(any(golines.runner_ready(x) for x in out.getvalue().encode().splitlines()))
            return probe_runner.GO + "\n"

    monkeypatch.setattr(sys, "stdin", Stdin())
    with contextlib.redirect_stdout(out):
        assert probe_runner.main(await_go=True) == 0
    assert Stdin.said == [True], "ready was said before the go was read"
    lines = out.getvalue().encode().splitlines()
    assert [golines.runner_ready(x) for x in lines] == [True] + [False] * (len(lines) - 1)
    assert "canary" in out.getvalue()
