"""Exports to sandbox-runtime, Claude Code and docker run, and the differences each one reports."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from grader import load_policy
from grader.realtools.export import NOTE_CODES, TARGETS, Note, export
from grader.core.plan import build_plan
from grader.realtools.srt_notes import srt_warnings

REPO = Path(__file__).parents[3]
NAIVE = load_policy(REPO / "examples" / "naive.json")
SECURE = load_policy(REPO / "examples" / "secure.json")
PRACTICE = load_policy(REPO / "solutions" / "scope-secure-sandbox.json")
PRECEDENCE = load_policy(REPO / "tests" / "fixtures" / "policies" / "precedence.json")


def srt(policy: Any) -> tuple[dict[str, Any], list[Note]]:
    text, notes = export(policy, "srt")
    return json.loads(text), notes


def has_note(notes: list[Note], *fragments: str) -> bool:
    return any(all(f in n.text for f in fragments) for n in notes)


@pytest.mark.parametrize("policy", [NAIVE, SECURE, PRACTICE, PRECEDENCE, load_policy({})])
def test_srt_has_all_five_arrays(policy: Any) -> None:
    data, _ = srt(policy)
    assert list(data) == ["filesystem", "network"]
    assert set(data["filesystem"]) == {"denyRead", "allowRead", "allowWrite", "denyWrite"}
    assert set(data["network"]) == {"allowedDomains", "deniedDomains"}
    for part in data.values():
        for value in part.values():
            assert isinstance(value, list) and all(isinstance(v, str) for v in value)


def test_the_export_is_the_policy_as_written() -> None:
    # a policy means to srt what it means here: the export adds no rule (no denyRead for allow-only reads)
    data, notes = srt(PRACTICE)
    assert data["filesystem"]["denyRead"] == ["/home/user", "/etc/secrets", "/project", "/app/workspace"]
    assert data["filesystem"]["allowRead"] == ["/project/src"]
    assert data["filesystem"]["allowWrite"] == ["/project/out"] and data["filesystem"]["denyWrite"] == []
    assert data["network"] == {"allowedDomains": [], "deniedDomains": []}
    assert not has_note(notes, "allow-only reads")
    data, _ = srt(PRECEDENCE)
    assert data["filesystem"]["denyRead"] == PRECEDENCE.normalize()["filesystem"]["denyRead"]
    assert data["filesystem"]["allowRead"] == PRECEDENCE.normalize()["filesystem"]["allowRead"]


def test_an_allow_read_alone_is_exported_alone_and_the_note_says_it_restricts_nothing() -> None:
    data, notes = srt(load_policy({"filesystem": {"allowRead": ["/project/src"]}}))
    assert data["filesystem"]["denyRead"] == [] and data["filesystem"]["allowRead"] == ["/project/src"]
    assert has_note(notes, '/filesystem/allowRead/0: [srt 0.0.83] allowRead "/project/src"', "restricts nothing")


def test_no_allow_read_means_no_extra_deny_read() -> None:
    data, notes = srt(NAIVE)
    assert data["filesystem"]["denyRead"] == [] and data["filesystem"]["allowRead"] == []


def test_every_export_names_the_standing_differences() -> None:
    for target in ("srt", "claude-code"):
        _, notes = export(NAIVE, target)  # type: ignore[arg-type]
        assert has_note(notes, '"~"', "/home/user")
        assert has_note(notes, "mandatory protections", ".git/hooks")
        assert has_note(notes, "*.example.com", "never example.com itself")
        # only when the policy names one (the lab models the rule, so it is no standing difference)
        assert not has_note(notes, "paths that do not exist yet")


def test_mandatory_protections_are_partial_and_leave_srts_own_settings_writable() -> None:
    # measured with srt 0.0.83 (docs/srt-differences.md): shell start-up files and .git/hooks are protected
    # only where srt starts and up to 3 levels below; ~/.srt-settings.json is not protected at all
    _, notes = srt(NAIVE)
    assert has_note(notes, "mandatory protections", "only in the directory srt starts in", "up to 3 levels below")
    assert has_note(notes, "mandatory protections", "does not protect its own settings file (~/.srt-settings.json)")
    assert not has_note(notes, "own settings files")  # the old claim, wrong for 0.0.83
    assert has_note(notes, '/filesystem/allowWrite/0: [srt 0.0.83] allowWrite "/home/user" covers /home/user/.bashrc',
                    'add "/home/user/.bashrc", ', '"/home/user/.profile"', "to denyWrite")
    assert has_note(notes, "/home/user/.srt-settings.json", "does not protect its own settings file",
                    'Add "/home/user/.srt-settings.json" to denyWrite')
    _, notes = srt(SECURE)
    assert not has_note(notes, "/home/user/.bashrc")


def test_precedence_notes_are_listed() -> None:
    _, notes = srt(PRECEDENCE)
    # a denyRead strictly inside an allowRead stays hidden: nothing to note about it
    assert not has_note(notes, '"/project/.env"', "srt lets")
    _, notes = srt(load_policy({"filesystem": {"denyWrite": ["/project"], "allowWrite": ["/project/out"]}}))
    assert has_note(notes, 'allowWrite "/project/out" lies inside denyWrite "/project"', "srt lets denyWrite take precedence",
                    "makes nothing writable")
    _, notes = srt(load_policy({"filesystem": {"allowRead": ["/project"], "denyRead": ["/project"]}}))
    assert has_note(notes, "/filesystem/denyRead/0: [srt 0.0.83]", "names the same path as", "srt lets allowRead take precedence",
                    "this denyRead hides nothing")
    assert not has_note(notes, "deny wins")


def test_a_writable_path_inside_an_unreadable_one_is_readable_under_srt_on_linux() -> None:
    _, notes = srt(load_policy({"filesystem": {"allowWrite": ["/home/user/.ssh"], "denyRead": ["/home/user/.ssh"]}}))
    assert has_note(notes, "/filesystem/allowWrite/0: [srt 0.0.83]", "srt on Linux", "readable and writable")
    assert not has_note(notes, "depends on the platform")


@pytest.mark.parametrize("policy", [NAIVE, SECURE, PRACTICE, PRECEDENCE, load_policy({"filesystem": {"allowWrite": ["/"]}})])
def test_srt_and_claude_code_notes_carry_every_srt_warning_and_docker_none(policy: Any) -> None:
    lines = [str(w) for w in srt_warnings(policy)]
    for target in ("srt", "claude-code"):
        notes = export(policy, target)[1]  # type: ignore[arg-type]
        assert [n.text for n in notes if n.text in lines] == lines, target
        assert all(n.code == "srt-rule" for n in notes if n.text in lines), target
    assert not any("[srt " in n.text for n in export(policy, "docker")[1])


def test_paths_beyond_the_world_and_paths_not_there_yet_are_named() -> None:
    policy = load_policy({"filesystem": {"allowWrite": ["/var/cache/x", "/project/out/result.txt"]}})
    _, notes = srt(policy)
    assert has_note(notes, '"/var/cache/x" reaches beyond the simulated machine')
    assert has_note(notes, "paths that do not exist yet", "/project/out/result.txt")
    assert has_note(notes, '/filesystem/allowWrite/1: [srt 0.0.83] allowWrite "/project/out/result.txt"', "binds nothing")


def test_claude_code_is_the_sandbox_block_with_absolute_path_prefix() -> None:
    text, notes = export(PRACTICE, "claude-code")
    data = json.loads(text)
    assert list(data) == ["sandbox"]
    block = data["sandbox"]
    assert block["enabled"] is True
    assert set(block["filesystem"]) == {"denyRead", "allowRead", "allowWrite", "denyWrite"}
    assert set(block["network"]) == {"allowedDomains", "deniedDomains"}
    assert block["filesystem"]["allowWrite"] == ["//project/out"]
    assert has_note(notes, '"//"')
    assert has_note(notes, "Read and Edit tools")
    assert has_note(notes, "key shape")


def test_docker_snippet_reproduces_the_plan() -> None:
    text, notes = export(PRACTICE, "docker")
    for flag in ("--read-only", "--cap-drop ALL", "--security-opt no-new-privileges", "--user 1000:1000",
                 "--pids-limit 256", "--memory 256m", "--cpus 1", "--tmpfs /tmp:", "--network none"):
        assert flag in text, flag
    assert '-v "$WORLD/project/out:/project/out" \\' in text
    assert '-v "$WORLD/project/src:/project/src:ro" \\' in text
    assert text.count('"$WORLD/') == len(build_plan(PRACTICE).mounts)
    assert "docker network create" not in text
    assert has_note(notes, "simulated internet")


def test_docker_snippet_for_a_scoped_network_has_the_proxy_and_its_allowlist() -> None:
    text, notes = export(PRECEDENCE, "docker")
    assert "docker network create --internal sandbox-lab-sbx" in text
    assert "--network sandbox-lab-sbx" in text
    assert '"allowed": ["*.github.com", "registry.npmjs.org"]' in text
    assert '"denied": ["gist.github.com", "api.github.com"]' in text
    assert '-e HTTPS_PROXY="$PROXY"' in text
    assert "--tmpfs /home/user/.ssh:" in text  # a hidden directory
    assert '--mount type=bind,src="$RUN/empty",dst=/project/.env,readonly' in text  # a hidden file
    assert has_note(notes, "DNS_SERVER")


def test_docker_snippet_never_mounts_a_path_the_policy_names_outside_the_world() -> None:
    hostile = load_policy({"filesystem": {"allowWrite": ["/var/run/docker.sock", "/"]}})
    text, notes = export(hostile, "docker")
    assert "docker.sock" not in text.split("set -eu", 1)[1]
    assert has_note(notes, '"/var/run/docker.sock" names nothing on the simulated machine')


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")
@pytest.mark.parametrize("policy", [NAIVE, PRACTICE, PRECEDENCE])
def test_docker_snippet_is_valid_shell(policy: Any, tmp_path: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text(export(policy, "docker")[0])
    assert subprocess.run(["sh", "-n", str(script)], capture_output=True).returncode == 0


def test_unknown_target() -> None:
    assert TARGETS == ("srt", "claude-code", "docker")
    with pytest.raises(ValueError):
        export(NAIVE, "podman")  # type: ignore[arg-type]


def test_policy_paths_reach_the_docker_snippet_only_inside_comments(tmp_path: Path) -> None:
    hostile = load_policy({"filesystem": {"allowWrite": ["/project/out/$(touch pwned)", "/home/user/`id`"]}})
    text, _ = export(hostile, "docker")
    for line in text.splitlines():
        if "touch pwned" in line or "`id`" in line:
            assert line.startswith("#"), line


@pytest.mark.parametrize("policy", [NAIVE, SECURE, PRACTICE, PRECEDENCE])
def test_every_note_carries_a_cause_code_that_code_matches_on(policy: Any) -> None:
    """Code matches a note by its code, never by the start of its prose (which people read and may be reworded)."""
    for target in TARGETS:
        notes = export(policy, target)[1]
        assert notes and all(n.code in NOTE_CODES and n.text and str(n) == n.text for n in notes), target
    codes = [n.code for n in export(policy, "claude-code")[1]]
    assert codes[:2] == ["world-paths", "cc-project-writable"] and "cc-tools-permissions" in codes


def test_carry_over_picks_the_read_and_edit_tools_note_by_its_code() -> None:
    from grader.grading.grade import carry_over

    cc = next(n for n in export(PRACTICE, "claude-code")[1] if n.code == "cc-tools-permissions")
    assert cc.text in carry_over(load_policy({"filesystem": {"denyRead": ["/home/user/.ssh"]}})).differences
    assert cc.text not in carry_over(load_policy({})).differences
