"""The semantics: which rule decides a read, a write, a host; and the plain-container baseline."""

from __future__ import annotations

from typing import Any

import pytest

from grader import load_policy, load_world
from grader.core.access import Access, access_for, baseline_access
from grader.core.paths import covers

WORLD = load_world()
SSH_KEY = "/home/user/.ssh/id_rsa"
NOTES = "/home/user/notes.txt"
BASHRC = "/home/user/.bashrc"


def sandbox(**fs: list[str]) -> Access:
    return access_for(load_policy({"filesystem": fs}), WORLD)


def net(allowed: list[str], denied: list[str] = []) -> Access:  # noqa: B006 - never mutated
    return access_for(load_policy({"network": {"allowedDomains": allowed, "deniedDomains": denied}}), WORLD)


# --- reads --------------------------------------------------------------------------------


def test_longest_rule_wins_deny_inside_allow() -> None:
    a = sandbox(allowRead=["/home/user"], denyRead=["/home/user/.ssh"])
    assert not a.read(SSH_KEY).allowed
    assert a.read(SSH_KEY).rule == ("denyRead", "/home/user/.ssh")
    assert a.read(NOTES).allowed


def test_longest_rule_wins_allow_inside_deny() -> None:
    a = sandbox(denyRead=["/home/user"], allowRead=["/home/user/.ssh"])
    assert a.read(SSH_KEY).allowed
    assert not a.read(NOTES).allowed


def test_allow_and_deny_on_the_same_path_deny_wins() -> None:
    a = sandbox(allowRead=["/home/user"], denyRead=["/home/user/"])
    assert not a.read(NOTES).allowed
    a = sandbox(allowWrite=["/home/user"], denyRead=["/home/user"])
    assert not a.read(NOTES).allowed
    assert not a.write(NOTES).allowed


def test_order_in_the_file_does_not_matter() -> None:
    one = sandbox(allowRead=["/project", "/project/src"], denyRead=["/project/.env"])
    two = sandbox(allowRead=["/project/src", "/project"], denyRead=["/project/.env"])
    for path in ("/project/.env", "/project/src/main.py", "/project/.git/hooks/pre-commit"):
        assert one.read(path).allowed == two.read(path).allowed


def test_no_rule_readable_when_allow_read_is_empty() -> None:
    a = sandbox(denyRead=["/home/user/.ssh"])
    assert a.read("/etc/secrets/db_password").allowed
    assert "readable by default" in a.read("/etc/secrets/db_password").why


def test_no_rule_unreadable_when_allow_read_lists_anything() -> None:
    a = sandbox(allowRead=["/project/src"])
    assert a.read("/project/src/main.py").allowed
    assert not a.read("/project/.env").allowed
    assert not a.read(NOTES).allowed
    assert "allowRead lists paths" in a.read(NOTES).why


def test_allow_write_implies_read_even_when_allow_read_is_a_list() -> None:
    a = sandbox(allowRead=["/project/src"], allowWrite=["/project/out"])
    assert a.read("/project/out/result.txt").allowed
    assert a.read("/project/out/result.txt").rule == ("allowWrite", "/project/out")


def test_root_rule_covers_everything_and_loses_to_anything_longer() -> None:
    a = sandbox(denyRead=["/"], allowRead=["/project/src"])
    assert a.read("/project/src/main.py").allowed
    assert not a.read("/project/.env").allowed
    assert sandbox(allowRead=["/"]).read(SSH_KEY).allowed


def test_a_rule_covers_its_path_and_below_but_not_a_sibling_with_the_same_prefix() -> None:
    assert covers("/project", "/project") and covers("/project", "/project/src/main.py")
    assert not covers("/project", "/projects") and not covers("/project/src", "/project/s")
    a = sandbox(denyRead=["/home/user/.ss"])
    assert a.read(SSH_KEY).allowed


# --- writes -------------------------------------------------------------------------------


def test_no_write_rule_means_read_only() -> None:
    a = sandbox()
    assert not a.write(BASHRC).allowed
    assert "read-only" in a.write(BASHRC).why


def test_deny_write_inside_allow_write() -> None:
    a = sandbox(allowWrite=["/home/user"], denyWrite=["/home/user/.bashrc"])
    assert not a.write(BASHRC).allowed
    assert a.write(BASHRC).rule == ("denyWrite", "/home/user/.bashrc")
    assert a.write(NOTES).allowed


def test_allow_write_inside_deny_write_longest_wins() -> None:
    a = sandbox(denyWrite=["/project"], allowWrite=["/project/out"])
    assert a.write("/project/out/result.txt").allowed
    assert not a.write("/project/src/main.py").allowed


def test_allow_write_and_deny_write_on_the_same_path_deny_wins() -> None:
    a = sandbox(allowWrite=["/project/out"], denyWrite=["/project/out/"])
    assert not a.write("/project/out/result.txt").allowed


def test_a_hidden_path_is_hidden_for_writing_too() -> None:
    a = sandbox(allowWrite=["/home/user"], denyRead=["/home/user/.ssh"])
    d = a.write(SSH_KEY)
    assert not d.allowed
    assert d.rule == ("denyRead", "/home/user/.ssh")
    assert "never reach the real file" in d.why
    assert a.mode(SSH_KEY) == "hidden"


def test_modes() -> None:
    a = sandbox(allowRead=["/project"], allowWrite=["/project/out"], denyRead=["/project/.env"])
    assert a.mode("/project/src/main.py") == "ro"
    assert a.mode("/project/out/result.txt") == "rw"
    assert a.mode("/project/.env") == "hidden"
    assert a.mode(NOTES) == "hidden"


# --- network ------------------------------------------------------------------------------


def test_empty_allowed_domains_means_no_network() -> None:
    a = net([])
    assert a.network == "none"
    assert not a.reach("registry.npmjs.org").allowed
    assert "no network at all" in a.reach("registry.npmjs.org").why


def test_scoped_network_goes_through_the_proxy() -> None:
    a = net(["registry.npmjs.org"])
    assert a.network == "proxy"
    assert a.reach("registry.npmjs.org").allowed
    assert not a.reach("pypi.org").allowed


def test_denied_domains_win() -> None:
    a = net(["*.github.com"], ["gist.github.com"])
    assert a.reach("api.github.com").allowed
    d = a.reach("gist.github.com")
    assert not d.allowed and d.rule == ("deniedDomains", "gist.github.com")


def test_wildcard_does_not_reach_the_apex_and_says_so() -> None:
    d = net(["*.github.com"]).reach("github.com")
    assert not d.allowed
    assert "subdomains only" in d.why


@pytest.mark.parametrize(
    ("allowed", "fresh"),
    [(["*.attacker.example"], True), (["attacker.example"], False), (["*.sub.attacker.example"], False), ([], False)],
)
def test_fresh_subdomains_need_a_wildcard_for_exactly_that_zone(allowed: list[str], fresh: bool) -> None:
    assert net(allowed).reach_fresh_subdomain("attacker.example") is fresh


# --- the plain container ------------------------------------------------------------------


def test_baseline_mounts_home_and_projects_read_write_and_has_ordinary_networking() -> None:
    b = baseline_access(WORLD)
    assert b.kind == "baseline" and b.policy is None
    for path in (SSH_KEY, BASHRC, "/project/.env", "/app/workspace/package.json"):
        assert b.read(path).allowed and b.write(path).allowed
    assert not b.read("/etc/secrets/db_password").allowed
    assert b.network == "open"
    assert b.reach("attacker.example").allowed
    assert b.reach_fresh_subdomain("attacker.example")


def _decisions(a: Access) -> list[Any]:
    paths = [f.path for f in WORLD.files] + [o.path for o in WORLD.outputs]
    return [(a.read(p).allowed, a.write(p).allowed) for p in paths] + [a.reach(h).allowed for h in WORLD.host_names]


def test_access_is_a_pure_function_of_policy_and_world() -> None:
    data = {"filesystem": {"allowRead": ["/project"], "allowWrite": ["/project/out"]}, "network": {"allowedDomains": ["pypi.org"]}}
    assert _decisions(access_for(load_policy(data), WORLD)) == _decisions(access_for(load_policy(data), WORLD))
