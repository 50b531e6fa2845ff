"""The target, chosen once: srt (started in the home) or Claude Code (started in the project it makes writable).

A setting ($SANDBOX_LAB_TARGET) or ``--target`` chooses it; every board and terminal report says which rules a
run was under; an unknown value is an error naming the choices, never a silent srt.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader import load_policy, load_world
from grader.backends.static import StaticBackend
from grader.cli import main as cli
from grader.core.access import TARGETS, access_for, parse_target
from grader.core.plan import build_plan
from grader.grading.report import render_text, target_line
from grader.notebook.board import board_html
from grader.course.session_runs import SessionRuns, lesson_target, run_key

ROOT = Path(__file__).resolve().parents[3]
PROJECT_ONLY = {"filesystem": {"allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}}


def test_the_cli_choices_are_the_models_targets() -> None:
    assert cli.TARGET_CHOICES == TARGETS


@pytest.mark.parametrize("value", [None, ""])
def test_an_unset_target_is_srt(value: str | None) -> None:
    assert parse_target(value) == "srt"


def test_an_unknown_target_names_the_choices() -> None:
    with pytest.raises(ValueError, match="choose one of srt, claude-code"):
        parse_target("lab")


def test_claude_code_makes_the_project_writable_and_srt_does_not() -> None:
    policy = load_policy(PROJECT_ONLY)
    srt = StaticBackend().run(build_plan(policy))
    cc = StaticBackend().run(build_plan(policy, target="claude-code"))
    assert srt.outcome("tamper-source").outcome == "blocked"
    assert cc.outcome("tamper-source").outcome == "succeeded"
    assert "because" in cc.outcome("tamper-source").explanation or "working directory" in cc.outcome("tamper-source").explanation


def test_every_report_says_whose_rules_it_ran_under() -> None:
    policy = load_policy(PROJECT_ONLY)
    srt = StaticBackend().run(build_plan(policy))
    cc = StaticBackend().run(build_plan(policy, target="claude-code"))
    assert target_line(srt) == "Rules: sandbox-runtime (srt), the sandbox started in /home/user."
    assert target_line(cc) == "Rules: Claude Code, the sandbox started in /project."
    assert target_line(srt) in render_text(srt) and target_line(cc) in render_text(cc)
    assert 'class="sl-target"' in board_html(cc) and "Claude Code" in board_html(cc)
    assert target_line(StaticBackend().run(build_plan(None))) == ""  # the plain container has no policy's rules


def test_probe_takes_the_target_from_the_option_then_the_setting(capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(PROJECT_ONLY))
    monkeypatch.delenv("SANDBOX_LAB_TARGET", raising=False)
    assert cli.main(["probe", str(path), "--backend", "static"]) == 0
    assert "Rules: sandbox-runtime (srt)" in capsys.readouterr().out
    monkeypatch.setenv("SANDBOX_LAB_TARGET", "claude-code")
    assert cli.main(["probe", str(path), "--backend", "static"]) == 0
    assert "Rules: Claude Code" in capsys.readouterr().out
    assert cli.main(["probe", str(path), "--backend", "static", "--target", "srt"]) == 0
    assert "Rules: sandbox-runtime (srt)" in capsys.readouterr().out
    monkeypatch.setenv("SANDBOX_LAB_TARGET", "lab")
    assert cli.main(["probe", str(path), "--backend", "static"]) == 2
    assert "choose one of srt, claude-code" in capsys.readouterr().err


def test_grade_under_claude_code_says_so(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SANDBOX_LAB_TARGET", raising=False)
    solution = str(ROOT / "solutions" / "scope-secure-sandbox.json")
    assert cli.main(["grade", "--task", "scope-secure-sandbox", solution, "--backend", "static"]) == 0
    capsys.readouterr()
    code = cli.main(["grade", "--task", "scope-secure-sandbox", solution, "--backend", "static", "--target", "claude-code", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["target"] == "claude-code"
    assert code == 1 and data["score"] < data["max_score"]  # the project is writable there: src can be tampered with


def test_a_lesson_takes_the_setting_and_a_run_under_another_target_is_never_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_LAB_TARGET", "claude-code")
    assert lesson_target() == "claude-code"
    policy = load_policy(PROJECT_ONLY)
    backend = StaticBackend()
    assert run_key(backend, build_plan(policy)) != run_key(backend, build_plan(policy, target="claude-code"))
    result = SessionRuns().run(backend, policy)
    assert not isinstance(result, str) and target_line(result).startswith("Rules: Claude Code")
    monkeypatch.setenv("SANDBOX_LAB_TARGET", "nonsense")
    assert "choose one of" in str(SessionRuns().run(backend, policy))


def test_the_claude_code_start_is_the_project_the_policy_works_in() -> None:
    world = load_world()
    a = access_for(load_policy({"filesystem": {"allowWrite": ["/app/workspace/build"]}}), world, "claude-code")
    assert a.start == "/app/workspace"
