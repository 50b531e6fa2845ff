"""Exports for the learner's own machine: mapped paths, narrow denies, the hardening keys, and the real schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from grader import load_policy
from grader.cli.main import main
from grader.realtools.export import export
from grader.realtools.machine import Machine, machine_export

REPO = Path(__file__).parents[3]
VALIDATOR = jsonschema.Draft7Validator(json.loads((REPO / "grader" / "realtools" / "schemas" / "claude-code-settings.json").read_text()))
CORPUS: dict[str, Any] = json.loads((REPO / "tests" / "fixtures" / "corpus.json").read_text())["policies"]
DONE_WHEN = {f"solutions/{f.name}": json.loads(f.read_text()) for f in sorted((REPO / "solutions").glob("*.json"))}
DONE_WHEN.update({"seed-naive": CORPUS["seed-naive"], "seed-secure": CORPUS["seed-secure"]})
WORLD_PATHS = ("/home/user", "/project", "/app/workspace", "/etc/secrets")
MACHINE = Machine("/tmp/x", "/tmp/h")


def _validate(settings: dict[str, Any]) -> None:
    VALIDATOR.validate(settings)


@pytest.mark.parametrize("name", sorted(DONE_WHEN))
@pytest.mark.parametrize("to", ["claude-code", "srt"])
def test_done_when_exports_are_real_hardened_and_name_no_world_path(name: str, to: str) -> None:
    e = machine_export(load_policy(DONE_WHEN[name]), to, MACHINE)  # type: ignore[arg-type]
    text = e.text
    for p in WORLD_PATHS:
        assert p not in text, (p, text)
    data = json.loads(text)
    if to == "claude-code":
        _validate(data)
        sb = data["sandbox"]
        assert sb["enabled"] is True and sb["failIfUnavailable"] is True and sb["allowUnsandboxedCommands"] is False
        assert sb["network"]["strictAllowlist"] is True
        creds = sb["credentials"]["files"]
        assert {"path": "//tmp/h/.ssh/id_rsa", "mode": "deny"} in creds
        assert "Read(//tmp/h/.ssh/id_rsa)" in data["permissions"]["deny"]
        assert "Edit(//tmp/h/.ssh/id_rsa)" in data["permissions"]["deny"]
        for key in ("/sandbox/failIfUnavailable", "/sandbox/allowUnsandboxedCommands", "/sandbox/network/strictAllowlist",
                    "/sandbox/credentials/files", "/permissions/deny"):
            assert e.hardening[key], key
        _no_empty_lists(data)
    else:
        assert data["network"]["strictAllowlist"] is True
        assert {"path": "/tmp/h/.ssh/id_rsa", "mode": "deny"} in data["credentials"]["files"]
        for key in ("denyRead", "allowWrite", "denyWrite"):  # srt's schema requires these three
            assert isinstance(data["filesystem"][key], list)


def _no_empty_lists(value: Any, where: str = "") -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _no_empty_lists(v, f"{where}/{k}")
    elif isinstance(value, list):
        assert value, f"{where} is an empty list"


@pytest.mark.parametrize("name", sorted(n for n, p in CORPUS.items() if p is not None))
def test_every_corpus_export_validates_against_the_vendored_schema(name: str) -> None:
    for machine in (MACHINE, Machine("/tmp/x"), Machine("/tmp/x", "/tmp/h", ("GITHUB_TOKEN",))):
        _validate(machine_export(load_policy(CORPUS[name]), "claude-code", machine).settings)
    _validate(json.loads(export(load_policy(CORPUS[name]), "claude-code")[0]))  # the world-path export too


def test_the_schema_catches_what_it_should() -> None:
    # attack the check: a misspelt hardening key or a bad credential mode must fail validation
    good = machine_export(load_policy(CORPUS["seed-naive"]), "claude-code", MACHINE).settings
    for bad in (
        {**good, "sandbox": {**good["sandbox"], "failIfUnavailabe": True}},
        {**good, "sandbox": {**good["sandbox"], "credentials": {"files": [{"path": "//x", "mode": "hide"}]}}},
        {**good, "permissions": {"deny": ["Raed(//x)"]}},
    ):
        with pytest.raises(jsonschema.ValidationError):
            _validate(bad)


def test_a_whole_home_deny_is_narrowed_to_the_secrets() -> None:
    e = machine_export(load_policy(CORPUS["l02-goal-npm-build"]), "srt", MACHINE)
    deny = e.settings["filesystem"]["denyRead"]
    assert "/tmp/h" not in deny and "~" not in deny
    assert "/tmp/h/.ssh" in deny and "/tmp/h/.npmrc" in deny and "/tmp/x/.env" in deny
    assert any("narrowed" in c.reason for c in e.changes)


def test_home_is_tilde_without_home_and_project_is_absolute() -> None:
    e = machine_export(load_policy(CORPUS["seed-naive"]), "srt", Machine("/tmp/x"))
    assert e.settings["filesystem"]["allowWrite"] == ["~"]
    cc = machine_export(load_policy(CORPUS["practice-solution"]), "claude-code", Machine("/tmp/x"))
    assert cc.settings["sandbox"]["filesystem"]["allowWrite"] == ["//tmp/x/out"]


def test_secret_env_becomes_an_env_var_mask() -> None:
    e = machine_export(load_policy({}), "claude-code", Machine("/tmp/x", None, ("GITHUB_TOKEN", "GITHUB_TOKEN")))
    assert e.settings["sandbox"]["credentials"]["envVars"] == [{"name": "GITHUB_TOKEN", "mode": "deny"}]
    assert "/sandbox/credentials/envVars" in e.hardening


@pytest.mark.parametrize("bad", [Machine, lambda: Machine("relative"), lambda: Machine("/"), lambda: Machine("/x", "/h/*"),
                                 lambda: Machine("/x", None, ("A B",))])
def test_a_bad_machine_is_refused(bad: Any) -> None:
    with pytest.raises((ValueError, TypeError)):
        bad()


def test_without_project_root_the_first_note_says_the_paths_are_the_worlds() -> None:
    for to in ("srt", "claude-code"):
        _, notes = export(load_policy(CORPUS["seed-naive"]), to)  # type: ignore[arg-type]
        assert notes[0].code == "world-paths" and notes[0].text.startswith("these paths are the simulated world's")
        assert "--project-root" in notes[0].text


def test_cli_export_for_a_machine(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    policy = tmp_path / "p.json"
    policy.write_text(json.dumps(CORPUS["seed-secure"]))
    code = main(["export", str(policy), "--to", "claude-code", "--project-root", "/tmp/x", "--home", "/tmp/h",
                 "--secret-env", "NPM_TOKEN"])
    out, err = capsys.readouterr()
    assert code == 0
    data = json.loads(out)
    _validate(data)
    assert data["sandbox"]["credentials"]["envVars"] == [{"name": "NPM_TOKEN", "mode": "deny"}]
    assert "# /sandbox/allowUnsandboxedCommands:" in err
    assert main(["export", str(policy), "--to", "srt", "--home", "/tmp/h"]) == 2  # --home without --project-root
    assert main(["export", str(policy), "--to", "docker", "--project-root", "/tmp/x"]) == 2


def test_a_machine_export_carries_the_srt_notes() -> None:
    # allowRead and denyRead of the same path: srt lets allowRead win, so the denyRead hides nothing
    policy = load_policy(CORPUS["read-allow-deny-same-path"])
    _, notes = export(policy, "claude-code", machine=MACHINE)
    assert any(n.code == "srt-rule" and n.text.startswith("/filesystem/denyRead/0: [srt") for n in notes), notes
