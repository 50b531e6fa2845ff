"""srt's rules, as the lab models them: which rule decides a read, a write, a host; and the plain-container baseline."""

from __future__ import annotations

from typing import Any

import pytest

from grader import load_policy, load_world
from grader.core.access import Access, access_for, baseline_access
from grader.core.errors import PolicyError
from grader.core.paths import covers

WORLD = load_world()
SSH_KEY = "/home/user/.ssh/id_rsa"
NOTES = "/home/user/notes.txt"
BASHRC = "/home/user/.bashrc"


def sandbox(**fs: list[str]) -> Access:
    return access_for(load_policy({"filesystem": fs}), WORLD)


def net(allowed: list[str], denied: list[str] = []) -> Access:  # noqa: B006 - never mutated
    return access_for(load_policy({"network": {"allowedDomains": allowed, "deniedDomains": denied}}), WORLD)


# --- reads: open by default; denyRead hides; allowRead re-opens inside a denyRead (srt's rules) ---------------


def test_reads_are_open_by_default() -> None:
    a = sandbox(denyRead=["/home/user/.ssh"])
    assert a.read("/etc/secrets/db_password").allowed
    assert a.read("/etc/secrets/db_password").rule is None
    assert "allowed by default" in a.read("/etc/secrets/db_password").why


def test_allow_read_alone_restricts_nothing() -> None:
    """The old allow-list reading is gone: srt reads everything no denyRead hides."""
    a = sandbox(allowRead=["/project/src"], allowWrite=["/project/out"])
    for path in (SSH_KEY, "/home/user/.aws/credentials", "/etc/secrets/db_password", "/project/.env", NOTES):
        assert a.read(path).allowed, path


def test_deny_inside_allow_stays_denied() -> None:
    a = sandbox(allowRead=["/home/user"], denyRead=["/home/user/.ssh"])
    assert not a.read(SSH_KEY).allowed
    assert a.read(SSH_KEY).rule == ("denyRead", "/home/user/.ssh")
    assert a.read(NOTES).allowed


def test_allow_read_re_opens_inside_a_deny() -> None:
    a = sandbox(denyRead=["/home/user"], allowRead=["/home/user/.ssh"])
    assert a.read(SSH_KEY).allowed
    assert a.read(SSH_KEY).rule == ("allowRead", "/home/user/.ssh")
    assert "re-opens" in a.read(SSH_KEY).why
    assert not a.read(NOTES).allowed


def test_allow_read_wins_on_the_same_path() -> None:
    # srt binds an allowRead at (or inside) a denied directory back over it: the deny hides nothing there
    a = sandbox(allowRead=["/home/user"], denyRead=["/home/user/"])
    assert a.read(NOTES).allowed


def test_allow_write_re_opens_a_denied_path_readable_and_writable() -> None:
    a = sandbox(allowWrite=["/home/user/.ssh"], denyRead=["/home/user/.ssh"])
    assert a.read(SSH_KEY).allowed and a.write(SSH_KEY).allowed
    assert a.mode(SSH_KEY) == "rw"


def test_a_denied_file_is_lifted_only_by_an_allow_read_of_that_file() -> None:
    a = sandbox(denyRead=["/project/.env"], allowRead=["/project"])
    assert not a.read("/project/.env").allowed
    assert sandbox(denyRead=["/project/.env"], allowRead=["/project/.env"]).read("/project/.env").allowed


def test_nested_denies_each_need_their_own_re_open() -> None:
    a = sandbox(denyRead=["/project", "/project/src"], allowRead=["/project/README.md"])
    assert a.read("/project/README.md").allowed
    assert not a.read("/project/src/main.py").allowed
    b = sandbox(denyRead=["/project", "/project/src"], allowRead=["/project/src/main.py"])
    assert b.read("/project/src/main.py").allowed


def test_order_in_the_file_does_not_matter() -> None:
    one = sandbox(denyRead=["/project", "/project/.env"], allowRead=["/project/src", "/project"])
    two = sandbox(denyRead=["/project/.env", "/project"], allowRead=["/project", "/project/src"])
    for path in ("/project/.env", "/project/src/main.py", "/project/.git/hooks/pre-commit"):
        assert one.read(path).allowed == two.read(path).allowed


def test_a_deny_that_hides_the_runtime_is_refused_with_the_reason() -> None:
    """srt takes denyRead "/" (it hides /usr and /bin, so nothing starts); the lab cannot show that run: it refuses."""
    with pytest.raises(PolicyError) as err:
        sandbox(denyRead=["/"], allowRead=["/project/src"])
    (problem,) = err.value.problems
    assert problem.pointer == "/filesystem/denyRead/0"
    assert "/usr" in problem.message and "no command starts" in problem.message
    # re-opening the runtime makes it a policy the lab can measure
    a = sandbox(denyRead=["/"], allowRead=["/usr", "/bin", "/lib", "/sbin", "/project/src"])
    assert a.read("/project/src/main.py").allowed
    assert not a.read("/project/.env").allowed
    assert not a.read(SSH_KEY).allowed


def test_a_rule_covers_its_path_and_below_but_not_a_sibling_with_the_same_prefix() -> None:
    assert covers("/project", "/project") and covers("/project", "/project/src/main.py")
    assert not covers("/project", "/projects") and not covers("/project/src", "/project/s")
    a = sandbox(denyRead=["/home/user/.ss"])
    assert a.read(SSH_KEY).allowed


def test_a_rule_naming_a_missing_path_binds_nothing() -> None:
    # srt (Linux) binds only what exists when the sandbox starts: /project/out/result.txt is created by the job
    a = sandbox(allowWrite=["/project/out/result.txt"])
    assert not a.write("/project/out/result.txt").allowed
    b = sandbox(denyRead=["/home/user/.ssh/later"], allowWrite=["/home/user/.ssh"])
    assert b.read("/home/user/.ssh/later").allowed
    # a write deny holds on a missing path (srt mounts a stand-in)
    c = sandbox(allowWrite=["/project/out"], denyWrite=["/project/out/result.txt"])
    assert not c.write("/project/out/result.txt").allowed


# --- writes: closed by default; denyWrite wins; srt's mandatory protections ------------------------------


def test_no_write_rule_means_read_only() -> None:
    a = sandbox()
    assert not a.write(NOTES).allowed
    assert "denied by default" in a.write(NOTES).why


def test_deny_write_inside_allow_write() -> None:
    a = sandbox(allowWrite=["/project"], denyWrite=["/project/Makefile"])
    assert not a.write("/project/Makefile").allowed
    assert a.write("/project/Makefile").rule == ("denyWrite", "/project/Makefile")
    assert a.write("/project/src/main.py").allowed


def test_deny_write_wins_over_an_allow_write_inside_it() -> None:
    a = sandbox(denyWrite=["/project"], allowWrite=["/project/out"])
    assert not a.write("/project/out/result.txt").allowed
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


def test_srt_started_in_the_home_protects_its_start_up_files_whatever_allow_write_says() -> None:
    a = sandbox(allowWrite=["/home/user", "/project"])
    assert not a.write(BASHRC).allowed
    assert a.write(BASHRC).rule == ("mandatory", BASHRC)
    assert a.write(NOTES).allowed
    # not on its list: srt's own settings; and .git/hooks of a project it did not start in
    assert a.write("/home/user/.srt-settings.json").allowed
    assert a.write("/project/.git/hooks/pre-commit").allowed


def test_claude_code_starts_in_the_project_and_makes_it_writable() -> None:
    policy = load_policy({"filesystem": {"allowWrite": ["/project/out"]}})
    a = access_for(policy, WORLD, "claude-code")
    assert a.start == "/project"
    assert a.write("/project/src/main.py").allowed
    assert not a.write("/project/.git/hooks/pre-commit").allowed  # protected where it starts
    assert a.write(BASHRC).allowed is False  # no grant in the home
    srt = access_for(policy, WORLD)
    assert not srt.write("/project/src/main.py").allowed
    with pytest.raises(ValueError, match="unknown target"):
        access_for(policy, WORLD, "lab")  # type: ignore[arg-type]


def test_modes() -> None:
    a = sandbox(denyRead=["/home/user", "/project/.env"], allowWrite=["/project/out"])
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


def test_answers_are_worked_out_once_and_a_derived_world_keeps_none_of_the_first_ones_answers() -> None:
    import dataclasses

    policy = load_policy({"filesystem": {"denyRead": ["~"], "allowWrite": ["/project/out"]},
                          "network": {"allowedDomains": ["github.com"]}})
    a = access_for(policy, WORLD)
    assert a.read("/home/user/.ssh/id_rsa") is a.read("/home/user/.ssh/id_rsa")  # the memo answers the second time
    assert a.reach("github.com") is a.reach("github.com") and a.reach("github.com").allowed
    # the caches live beside the fields: a copy with one host fewer is equal to nothing it was not, and answers anew
    fewer = dataclasses.replace(WORLD, hosts=tuple(h for h in WORLD.hosts if h.name != "github.com"))
    assert fewer != WORLD and hash(fewer) != hash(WORLD) and "github.com" not in fewer.host_names
    assert WORLD.server_of("github.com") == "github.com" and fewer.server_of("github.com") != "github.com"
    assert dataclasses.replace(WORLD) == WORLD and hash(dataclasses.replace(WORLD)) == hash(WORLD)


def test_a_worlds_answers_about_made_up_names_are_bounded() -> None:
    """server_of is asked about every name a sandbox looked up; a run can make up as many as it likes."""
    import dataclasses

    from grader.core import world as world_module

    w = dataclasses.replace(WORLD)  # a world of its own: the shared one's answers stay as they are
    for i in range(world_module._SERVERS_KEPT + 10):
        w.server_of(f"x{i}.exfil.example")
    assert len(w._servers) <= world_module._SERVERS_KEPT
    assert w.server_of("github.com") == "github.com"
