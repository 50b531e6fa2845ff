"""Notes on what sandbox-runtime (srt 0.0.83) does with a policy: patterns whose effect surprises people, and where the lab stands in for a real machine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import pytest

from grader import load_policy
from grader.core.paths import normalize_path
from grader.realtools.srt_notes import PREFIX, RULES, srt_differences, srt_warnings

REPO = Path(__file__).parents[3]
CORPUS: dict[str, Optional[dict[str, Any]]] = json.loads((REPO / "tests" / "fixtures" / "corpus.json").read_text())["policies"]
DOCUMENTED: dict[str, Any] = json.loads((REPO / "docs" / "srt-differences.json").read_text())
CAUSE = {r.id: r.cause for r in RULES}


def _resolve(raw: dict[str, Any], pointer: str) -> Any:
    value: Any = raw
    for part in pointer.strip("/").split("/"):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


# (policy, rule id, pointer of the entry concerned)
FIRES = [
    pytest.param({"filesystem": {"allowRead": ["/project/src"]}},
                 "allow-read-alone", "/filesystem/allowRead/0", id="allow-read-alone"),
    pytest.param({"filesystem": {"allowRead": ["/project"], "denyRead": ["/project"]}},
                 "allow-read-wins", "/filesystem/denyRead/0", id="allow-read-wins"),
    pytest.param({"filesystem": {"allowRead": ["/app/workspace", "/project/"], "denyRead": ["/etc/secrets", "/project"]}},
                 "allow-read-wins", "/filesystem/denyRead/1", id="allow-read-wins-normalized"),
    pytest.param({"filesystem": {"allowWrite": ["/home/user/.ssh"], "denyRead": ["/home/user/.ssh"]}},
                 "allow-write-reopens-read", "/filesystem/allowWrite/0", id="allow-write-reopens-read"),
    pytest.param({"filesystem": {"denyWrite": ["/project"], "allowWrite": ["/project", "/project/out"]}},
                 "deny-write-wins", "/filesystem/allowWrite/1", id="deny-write-wins"),
    pytest.param({"filesystem": {"allowWrite": ["/project/out/result.txt"]}},
                 "missing-write-target", "/filesystem/allowWrite/0", id="missing-write-target"),
    pytest.param({"filesystem": {"allowWrite": ["/project/out"], "denyRead": ["/home/user/.ssh", "/project/out/token.txt"]}},
                 "missing-read-deny", "/filesystem/denyRead/1", id="missing-read-deny"),
    pytest.param({"filesystem": {"allowWrite": ["/app/workspace/build", "~"]}},
                 "mandatory-shell-rc", "/filesystem/allowWrite/1", id="mandatory-shell-rc-home"),
    pytest.param({"filesystem": {"allowWrite": ["/project"], "denyRead": ["/project/.env"]}},
                 "mandatory-shell-rc", "/filesystem/allowWrite/0", id="mandatory-shell-rc-git-hooks"),
    pytest.param({"filesystem": {"allowWrite": ["/home/user"], "denyWrite": ["/home/user/.bashrc"]}},
                 "settings-not-protected", "/filesystem/allowWrite/0", id="settings-not-protected"),
    pytest.param({"network": {"allowedDomains": ["registry.npmjs.org", "10.0.0.1"]}},
                 "ip-literal-reachable", "/network/allowedDomains/1", id="ip-literal-reachable"),
    pytest.param({"network": {"allowedDomains": ["pypi.org", "localhost"]}},
                 "loopback-direct", "/network/allowedDomains/1", id="loopback-direct"),
]


@pytest.mark.parametrize(("raw", "rule", "pointer"), FIRES)
def test_each_rule_fires_with_the_pointer_of_its_entry(raw: dict[str, Any], rule: str, pointer: str) -> None:
    found = srt_differences(load_policy(raw))
    assert (CAUSE[rule], pointer) in [(cause, w.pointer) for cause, w in found], found
    for _, w in found:
        assert w.message.startswith(PREFIX)
        entry = _resolve(raw, w.pointer)
        shown = entry if w.pointer.startswith("/network") else normalize_path(entry)
        assert f'"{shown}"' in w.message, (shown, w.message)  # the message names the entry it points at


def test_every_rule_is_exercised_and_ids_are_unique() -> None:
    assert len(CAUSE) == len(RULES)
    assert {p.values[1] for p in FIRES} == set(CAUSE)


def test_messages_say_what_srt_does_and_how_to_write_the_policy() -> None:
    # one reading, srt's: no "Sandbox Lab hides it" contrast, and every message ends with what to write
    advice = ("Name each path", "Grant ", "So that", "Deny ", "add ", "Add ", "List ", "Remove it", "To make only")
    for rule in RULES:
        assert "srt" in rule.message, rule.id
        assert "both tools" not in rule.message and "Sandbox Lab hides" not in rule.message, rule.id
        assert any(a in rule.message for a in advice), rule.id


def test_an_allow_read_alone_names_the_secrets_it_leaves_readable_and_the_regions_to_deny() -> None:
    found = srt_differences(load_policy({"filesystem": {"allowRead": ["/project/src"], "denyRead": ["/home/user/.ssh"]}}))
    (message,) = [w.message for cause, w in found if cause == "allow-read-alone"]
    assert "restricts nothing" in message and "/etc/secrets/db_password" in message
    assert "/home/user/.ssh/id_rsa" not in message  # hidden by its own denyRead
    assert 'denyRead (here "/home/user", "/project", "/app/workspace", "/etc/secrets")' in message
    # inside a denyRead, allowRead re-opens: no note
    inside = {"filesystem": {"denyRead": ["/home/user", "/project", "/app/workspace", "/etc/secrets"], "allowRead": ["/project/src"]}}
    assert srt_warnings(load_policy(inside)) == ()
    # nothing secret left readable: nothing to warn about
    hidden = {"filesystem": {"denyRead": ["/home/user", "/etc/secrets", "/project/.env", "/app/workspace"], "allowRead": ["/project"]}}
    assert "allow-read-alone" not in {cause for cause, _ in srt_differences(load_policy(hidden))}


def test_every_documented_cause_has_a_rule() -> None:
    assert set(DOCUMENTED["causes"]) <= set(CAUSE.values())


def test_every_documented_difference_is_warned_about() -> None:
    """Each difference the cross-check documents gets its warning; today the model is srt's and the list is empty
    (one test over the whole list: an empty parameter set would skip silently)."""
    for diff in DOCUMENTED["differences"]:
        raw = CORPUS[diff["policy"]]
        assert raw is not None, diff
        assert diff["cause"] in {cause for cause, _ in srt_differences(load_policy(raw))}, diff
    assert DOCUMENTED["differences"] == [] and DOCUMENTED["scope_differences"] == []  # srt's rules are the model


PLAIN = [
    "seed-secure", "empty-policy", "allow-file-inside-denied-home",
    "dotdot-path", "github-apex", "github-wildcard-minus-uploads", "pypi-download",
    "fix-naive-solution", "hide-etc-secrets", "etc-secrets-writable", "hide-one-key-file",
]
# allowRead with no denyRead around it: srt reads everything by default, so each of these restricts nothing
ALLOW_READ_ALONE = ["practice-solution", "read-root-only", "read-src-only", "tilde-ssh-readable-only", "pip-install-only",
                    "read-one-credentials-file"]
# Writable projects whose .git/hooks at most is denied: srt started in the project also refuses its
# .git/config, .mcp.json, .vscode, shell files and the like (the world has them), so these warn.
PROJECT_WRITABLE = ["project-writable-hooks-and-env-protected", "workspace-writable-src-protected", "stop-persistence"]


@pytest.mark.parametrize("name", PLAIN)
def test_no_warning_for_plain_policies(name: str) -> None:
    raw = CORPUS[name]
    assert raw is not None
    assert srt_warnings(load_policy(raw)) == ()


@pytest.mark.parametrize("name", ALLOW_READ_ALONE)
def test_an_allow_read_no_deny_read_surrounds_is_named(name: str) -> None:
    raw = CORPUS[name]
    assert raw is not None
    found = srt_differences(load_policy(raw))
    assert [(cause, w.pointer) for cause, w in found] == [("allow-read-alone", "/filesystem/allowRead/0")]
    assert "restricts nothing" in found[0][1].message


def test_the_same_path_in_allow_write_and_deny_write_grants_nothing() -> None:
    # denyWrite wins at any depth, on the same path too: the allowWrite is dead weight, and srt_notes says so
    raw = CORPUS["write-allow-deny-same-path"]
    assert raw is not None
    found = srt_differences(load_policy(raw))
    assert [(cause, w.pointer) for cause, w in found] == [("deny-write-wins", "/filesystem/allowWrite/0")]
    assert "makes nothing writable" in found[0][1].message


@pytest.mark.parametrize("name", PROJECT_WRITABLE)
def test_a_writable_project_warns_about_what_srt_protects_there(name: str) -> None:
    raw = CORPUS[name]
    assert raw is not None
    found = srt_differences(load_policy(raw))
    assert [cause for cause, _ in found] == [CAUSE["mandatory-shell-rc"]]
    root = raw["filesystem"]["allowWrite"][0]
    message = found[0][1].message
    assert f'"{root}/.git/config"' in message and f'"{root}/.mcp.json"' in message and f'"{root}/.vscode"' in message
    assert f"{root}/Makefile" not in message  # not on srt's list


def test_plain_uses_of_srts_rules_give_no_warning() -> None:
    plain = [
        # a denyRead deeper than the allowRead that re-opens its surroundings stays hidden
        {"filesystem": {"denyRead": ["/home/user", "/etc/secrets", "/app/workspace", "/project", "/project/src/main.py"],
                        "allowRead": ["/project/src"]}},
        # an allowWrite strictly inside a denyRead is bound back, readable and writable
        {"filesystem": {"denyRead": ["/home/user"], "allowWrite": ["/home/user/.aws"]}},
        # a missing file inside a granted directory that exists: srt lets the job create it
        {"filesystem": {"allowWrite": ["/project/out", "/project/out/result.txt"]}},
        # a missing path inside an existing denied directory is hidden with it
        {"filesystem": {"denyRead": ["/home/user", "/home/user/.gnupg"]}},
        # the secrets hidden, the rest readable: reads are open by default
        {"filesystem": {"denyRead": ["/home/user", "/etc/secrets", "/project/.env", "/app/workspace"]}},
        # protected by the policy itself: every path of the home on srt's list, and its settings
        {"filesystem": {"allowWrite": ["/home/user"], "denyWrite": [
            "/home/user/.bashrc", "/home/user/.bash_profile", "/home/user/.zshrc", "/home/user/.zprofile",
            "/home/user/.profile", "/home/user/.gitconfig", "/home/user/.gitmodules", "/home/user/.ripgreprc",
            "/home/user/.mcp.json", "/home/user/.vscode", "/home/user/.idea", "/home/user/.claude/commands",
            "/home/user/.claude/agents", "/home/user/.srt-settings.json"]}},
    ]
    for raw in plain:
        assert srt_warnings(load_policy(raw)) == (), raw


def test_one_warning_per_entry_naming_every_file_it_opens() -> None:
    found = srt_warnings(load_policy({"filesystem": {"allowWrite": ["/"]}}))
    assert [w.pointer for w in found] == ["/filesystem/allowWrite/0"] * 2
    rc, settings = (w.message for w in found)
    assert "/home/user/.bashrc" in rc and "/project/.git/hooks/pre-commit" in rc
    assert 'add "/home/user/.bashrc", ' in rc and '"/project/.git/hooks", ' in rc and '"/project/.git/config"' in rc
    # a protected folder is denied whole; paths srt does not protect are not claimed to be
    assert '"/project/.vscode"' in rc and '"/project/.vscode/settings.json"' not in rc.split("add ")[-1]
    assert "authorized_keys" not in rc and "Makefile" not in rc and ".local/bin" not in rc
    assert "only in the directory srt starts in" in rc
    assert "does not protect its own settings file" in settings and '"/home/user/.srt-settings.json"' in settings


def test_srt_warnings_are_the_problems_of_srt_differences() -> None:
    policy = load_policy(CORPUS["seed-naive"])
    assert srt_warnings(policy) == tuple(w for _, w in srt_differences(policy))


@pytest.mark.parametrize("entry", ["~/.bash_login", "/home/user/.config/autostart/x.desktop", "/home/user/.local/bin/git", "/project/.vscode/tasks.json"])
def test_check_never_advises_granting_a_parent_that_holds_secrets_or_what_runs_later(entry: str) -> None:
    """To make srt agree, the advice may be to create the path first, never to widen the grant over a secret."""
    found = [w for cause, w in srt_differences(load_policy({"filesystem": {"allowWrite": [entry]}})) if cause == "missing-path-at-start"]
    assert found, entry
    message = found[0].message
    assert "create the path before starting srt" in message
    assert "grant the directory that will hold it" not in message
    assert "Do not grant the directory that would hold it" in message


def test_check_still_advises_granting_a_harmless_parent() -> None:
    found = [w for cause, w in srt_differences(load_policy({"filesystem": {"allowWrite": ["/project/out/result.txt"]}})) if cause == "missing-path-at-start"]
    assert 'grant the directory that will hold it ("/project/out")' in found[0].message
