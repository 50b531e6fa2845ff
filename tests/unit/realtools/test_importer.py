"""Bringing your own settings: import is strict, fails closed, round-trips every export in outcomes, and the as-written one exactly."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from endless import OFFERED, endless_pipe
from grader import load_policy, predict
from grader.cli.main import main
from grader.core.errors import PolicyError
from grader.core.paths import covers
from grader.core.probes import PROBES
from grader.core.world import load_world
from grader.realtools.importer import import_settings
from grader.realtools.machine import Machine, machine_export, primary_project


REPO = Path(__file__).parents[3]
CORPUS: dict[str, Any] = json.loads((REPO / "tests" / "fixtures" / "corpus.json").read_text())["policies"]
POLICIES = {n: p for n, p in CORPUS.items() if p is not None}
POLICIES.update({f"solutions/{f.name}": json.loads(f.read_text()) for f in sorted((REPO / "solutions").glob("*.json"))})
TARGET = {p.id: p.target for p in PROBES}
LOOT = [f.path for f in load_world().loot]
MACHINE = Machine("/tmp/x", "/tmp/h")


@functools.lru_cache(maxsize=None)
def _before(name: str) -> dict[str, str]:
    return {p.id: p.outcome for p in predict(load_policy(POLICIES[name])).probes}


def _explained(probe: str, changes: Any) -> bool:
    """A changed outcome is explained when the export named a change to the probe's target (or to a secret it sends)."""
    targets = [TARGET[probe]] if TARGET.get(probe) else LOOT
    return any(covers(c.world_path, t) or covers(t, c.world_path) for c in changes for t in targets)


@pytest.mark.parametrize("name", sorted(POLICIES))
@pytest.mark.parametrize("to", ["claude-code", "srt"])
def test_import_of_export_equals_the_policy_in_outcomes_except_where_the_export_says(name: str, to: str) -> None:
    policy = load_policy(POLICIES[name])
    for machine in (MACHINE, Machine("/tmp/x")):
        e = machine_export(policy, to, machine)  # type: ignore[arg-type]
        back = import_settings(e.settings, to, machine, world_project=primary_project(policy)).policy  # type: ignore[arg-type]
        before = _before(name)
        after = {p.id: p.outcome for p in predict(back).probes}
        assert before.keys() == after.keys()
        unexplained = [k for k in before if before[k] != after[k] and not _explained(k, e.changes)]
        assert not unexplained, (name, to, unexplained)
        if not e.changes:
            assert before == after


@pytest.mark.parametrize("name", sorted(POLICIES))
@pytest.mark.parametrize("to", ["claude-code", "srt"])
def test_import_of_the_as_written_export_is_exactly_the_policy(name: str, to: str) -> None:
    # without the hardening extras, nothing is added, narrowed or left out: the round trip is exact, as a policy
    policy = load_policy(POLICIES[name])
    for machine in (MACHINE, Machine("/tmp/x")):
        e = machine_export(policy, to, machine, hardened=False)  # type: ignore[arg-type]
        assert not e.changes
        back = import_settings(e.settings, to, machine, world_project=primary_project(policy)).policy  # type: ignore[arg-type]
        assert back.normalize() == policy.normalize(), (name, to, machine)
        assert predict(back).probes == predict(policy).probes and predict(back).scope == predict(policy).scope


def test_the_as_written_export_adds_no_hardening_and_the_default_stays_hardened() -> None:
    policy = load_policy(CORPUS["seed-naive"])
    plain = machine_export(policy, "claude-code", MACHINE, hardened=False).settings
    assert plain == {"sandbox": {"enabled": True, "filesystem": {"allowWrite": ["//tmp/h"]},
                                 "network": {"allowedDomains": ["*.github.com"]}}}
    hard = machine_export(policy, "claude-code", MACHINE).settings
    assert hard["sandbox"]["failIfUnavailable"] is True and "permissions" in hard and hard["sandbox"]["credentials"]["files"]
    srt = machine_export(load_policy({"filesystem": {"denyRead": ["/home/user", "/etc/secrets"]}}), "srt", MACHINE, hardened=False)
    assert srt.settings == {"filesystem": {"denyRead": ["/tmp/h", "/etc/secrets"], "allowWrite": [], "denyWrite": []},
                            "network": {"allowedDomains": [], "deniedDomains": []}}
    assert any("/etc/secrets is the simulated world's own path" in n for n in srt.notes)


def test_cli_export_as_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "p.json"
    policy.write_text(json.dumps(CORPUS["practice-solution"]))
    args = ["export", str(policy), "--to", "srt", "--project-root", "/tmp/x", "--home", "/tmp/h"]
    assert main([*args, "--as-written"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["filesystem"]["allowRead"] == ["/tmp/x/src"] and "credentials" not in json.loads(out)
    assert "# as written" in err
    settings = tmp_path / "srt.json"
    settings.write_text(out)
    assert main(["import", str(settings), "--from", "srt", "--project-root", "/tmp/x", "--home", "/tmp/h"]) == 0
    assert load_policy(json.loads(capsys.readouterr().out)).normalize() == load_policy(CORPUS["practice-solution"]).normalize()
    assert main([*args]) == 0 and "credentials" in json.loads(capsys.readouterr()[0])  # the default stays hardened
    assert main(["export", str(policy), "--to", "srt", "--as-written"]) == 2  # no --project-root
    assert main([*args, "--as-written", "--secret-env", "TOKEN"]) == 2  # masks are hardening: never silently dropped
    assert "--secret-env" in capsys.readouterr().err


def test_a_policy_the_export_carries_whole_round_trips_exactly() -> None:
    # attack the "explained" escape hatch: with no change named, equality is exact
    policy = load_policy({"filesystem": {"allowWrite": ["/project/out"]}, "network": {"allowedDomains": ["pypi.org"]}})
    e = machine_export(policy, "srt", MACHINE)
    back = import_settings(e.settings, "srt", MACHINE).policy
    assert back.normalize()["filesystem"]["allowWrite"] == ["/project/out"]
    assert back.normalize()["network"]["allowedDomains"] == ["pypi.org"]


def _cc(**sandbox: Any) -> dict[str, Any]:
    return {"sandbox": {"enabled": True, **sandbox}}


def test_unknown_keys_and_unmappable_denies_fail_closed() -> None:
    cases = [
        (_cc(filesystem={"denyReed": ["~/.ssh"]}), "/sandbox/filesystem/denyReed"),
        (_cc(filesystem={"denyRead": ["**/.env"]}), "/sandbox/filesystem/denyRead/0"),
        (_cc(filesystem={"denyRead": ["/relative-to-settings"]}), "/sandbox/filesystem/denyRead/0"),
        (_cc(network={"alowedDomains": ["x.com"]}), "/sandbox/network/alowedDomains"),
        (_cc(filesystem={"disabled": True}), "/sandbox/filesystem/disabled"),  # no isolation: nothing to grade
        (_cc(network={"disabled": True}), "/sandbox/network/disabled"),  # a filesystem-only switch, unknown here
        (_cc(filesystem=[]), "/sandbox/filesystem"),
        ({"sandbox": {"enabled": False}}, "/sandbox/enabled"),
        ({"permissions": {}}, "/sandbox"),
        (_cc(credentials={"files": [{"path": "~/.ssh/*", "mode": "deny"}]}), "/sandbox/credentials/files/0/path"),
    ]
    for data, pointer in cases:
        with pytest.raises(PolicyError) as info:
            import_settings(data, "claude-code", MACHINE)
        assert pointer in [p.pointer for p in info.value.problems], (data, info.value.problems)
    with pytest.raises(PolicyError):
        import_settings({"filesystem": {"denyRead": []}, "network": {}, "allowEverything": True}, "srt", MACHINE)


def test_what_is_not_modelled_is_listed_never_dropped_silently() -> None:
    data = _cc(
        failIfUnavailable=True, excludedCommands=["docker"],
        filesystem={"allowWrite": ["./out", "src/**"], "denyRead": ["~/.ssh"]},
        network={"allowedDomains": ["registry.npmjs.org:443"], "strictAllowlist": True},
        credentials={"files": [{"path": "//tmp/h/.npmrc", "mode": "deny"}], "envVars": [{"name": "T", "mode": "deny"}]},
    )
    data["sandbox"]["filesystem"]["disabled"] = False  # isolation on, as without the key: a note, no error
    data["permissions"] = {"deny": ["Read(~/.ssh/**)"]}
    data["model"] = "x"
    imported = import_settings(data, "claude-code", MACHINE)
    fs = imported.policy.normalize()["filesystem"]
    assert fs["allowWrite"] == ["/project/out"]
    assert fs["denyRead"] == ["/home/user/.ssh", "/home/user/.npmrc"]
    assert imported.policy.normalize()["network"]["allowedDomains"] == ["registry.npmjs.org:443"]
    pointers = {p.pointer for p in imported.unmapped}
    assert pointers >= {"/sandbox/filesystem/disabled", "/sandbox/failIfUnavailable", "/sandbox/excludedCommands", "/sandbox/filesystem/allowWrite/1",
                        "/sandbox/network/strictAllowlist", "/sandbox/credentials/envVars/0", "/permissions", "/model"}


def test_cli_import_and_probe_from_a_settings_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps(machine_export(load_policy(CORPUS["practice-solution"]), "claude-code", MACHINE).settings))
    args = ["--from", "claude-code", "--project-root", "/tmp/x", "--home", "/tmp/h"]
    assert main(["import", str(settings), *args]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["filesystem"]["allowWrite"] == ["/project/out"]
    assert "# not mapped: /permissions" in err
    assert main(["probe", str(settings), "--backend", "static", "--json", *args]) == 0
    out, _ = capsys.readouterr()
    assert json.loads(out)["probes"]
    assert main(["import", str(settings), "--from", "claude-code"]) == 2  # no --project-root
    settings.write_text(json.dumps(_cc(filesystem={"denyRead": ["**/.env"]})))
    assert main(["import", str(settings), *args]) == 2


@pytest.mark.parametrize(
    ("write", "says"),
    [
        (lambda p: p.write_bytes(b'{"sandbox": {"x": "caf\xe9"}}'), "byte 22 is not UTF-8. Save the file as UTF-8."),
        (lambda p: p.write_text("[" * 100_000 + "]" * 100_000), "nested too deep to be a settings file."),
        (lambda p: p.write_text('{"sandbox": '), "not valid JSON (Expecting value, line 1 column 13)."),
        (lambda p: p.write_text(" " * 1_000_001), "the file is larger than 1,000,000 bytes"),
    ],
    ids=["latin-1", "nested-too-deep", "cut-off", "too-large"],
)
def test_a_settings_file_that_cannot_be_read_as_json_is_a_policy_error_never_an_internal_error(
    tmp_path: Path, write: Any, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "settings.json"
    write(path)
    with pytest.raises(PolicyError) as info:
        import_settings(path, "claude-code", MACHINE)
    assert says in info.value.problems[0].message, info.value.problems
    code = main(["import", str(path), "--from", "claude-code", "--project-root", str(tmp_path)])
    err = capsys.readouterr()
    assert code == 2 and "internal error" not in err.err + err.out, err  # a RecursionError escaped before


def test_a_settings_path_that_is_a_pipe_is_refused_and_never_read(tmp_path: Path) -> None:
    with endless_pipe(tmp_path / "settings.json") as pipe:  # as /dev/zero, which was read whole before
        with pytest.raises(PolicyError, match="is a pipe or a device, not a settings file"):
            import_settings(pipe.path, "srt", MACHINE)
        assert pipe.taken() < OFFERED


def test_a_claude_code_import_without_a_filesystem_block_says_its_working_directory_is_writable() -> None:
    imported = import_settings(_cc(network={"allowedDomains": ["pypi.org"]}), "claude-code", MACHINE)
    assert imported.policy.normalize()["filesystem"]["allowWrite"] == []
    (note,) = [p for p in imported.unmapped if p.pointer == "/sandbox/filesystem"]
    assert "working directory" in note.message and "--target claude-code" in note.message
    # with a filesystem block, no such note; srt has no working-directory grant at all
    with_fs = import_settings(_cc(filesystem={"allowWrite": ["./out"]}), "claude-code", MACHINE)
    assert "/sandbox/filesystem" not in {p.pointer for p in with_fs.unmapped}
    srt = import_settings({"network": {"allowedDomains": []}, "filesystem": {"denyRead": [], "allowWrite": [], "denyWrite": []}}, "srt", MACHINE)
    assert not any("working directory" in p.message for p in srt.unmapped)


def test_keys_srts_schema_has_but_the_lab_does_not_model_are_named_with_why() -> None:
    srt_keys = {"enableWeakerNetworkIsolation": True, "allowAppleEvents": False, "allowPty": True, "mandatoryDenySearchDepth": 3,
                "seccomp": {}, "git": {}}
    data = {"filesystem": {"denyRead": [], "allowWrite": [], "denyWrite": []}, "network": {"allowedDomains": [], "tlsTerminate": {}},
            **srt_keys}
    imported = import_settings(data, "srt", MACHINE)
    why = {p.pointer: p.message for p in imported.unmapped}
    for key in [*srt_keys, "network/tlsTerminate"]:
        assert why[f"/{key}"].startswith("not modelled, because "), (key, why)
    cc = import_settings(_cc(enableWeakerNetworkIsolation=True, allowAppleEvents=True,
                             credentials={"envVars": [{"name": "T", "mode": "deny"}]}), "claude-code", MACHINE)
    for problem in cc.unmapped:
        if problem.pointer != "/sandbox/filesystem":
            assert problem.message.startswith("not modelled, because "), problem
    assert not any("typo" in p.message or "unknown key" in p.message for p in [*imported.unmapped, *cc.unmapped])
    # a key no schema has is still an error
    with pytest.raises(PolicyError):
        import_settings({**data, "enableWeakerNetworkIsolaton": True}, "srt", MACHINE)


def test_a_relative_srt_path_is_read_against_the_project_root_and_said_so() -> None:
    """srt resolves a relative path against the directory it runs in (not Claude Code's rule, the settings file's)."""
    data = {"filesystem": {"denyRead": [".env"], "allowWrite": ["out"], "denyWrite": []},
            "network": {"allowedDomains": [], "deniedDomains": []}}
    imported = import_settings(data, "srt", MACHINE)
    assert imported.policy.filesystem.denyRead == ("/project/.env",)
    assert imported.policy.filesystem.allowWrite == ("/project/out",)
    why = {p.pointer: p.message for p in imported.unmapped}
    for pointer in ("/filesystem/denyRead/0", "/filesystem/allowWrite/0"):
        assert why[pointer].startswith("a relative path: srt resolves it against the directory it runs in"), why
