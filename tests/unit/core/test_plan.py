"""The run plan: which parts of the world copy are mounted and how, the network, the hardening."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import pytest

from grader import load_policy, load_world
from grader.core.mandatory import protected_paths
from grader.core.plan import BASELINE_HARDENING, Hardening, Mount, RunPlan, build_plan

REPO = Path(__file__).parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "policies"
WORLD = load_world()
EXISTING = frozenset(WORLD.directories()) | {f.path for f in WORLD.files}


def plan(data: Optional[Any]) -> RunPlan:
    return build_plan(None if data is None else load_policy(data))


def table(p: RunPlan) -> set[tuple[str, str, str]]:
    return {(m.target, m.kind, m.mode) for m in p.mounts}


def assert_only_world_paths(p: RunPlan) -> None:
    for m in p.mounts:
        assert WORLD.root_of(m.source) is not None, m
        assert m.source == m.target, m


def test_practice_solution_mounts_two_directories_and_no_network() -> None:
    p = plan(REPO / "solutions" / "scope-secure-sandbox.json")
    assert table(p) == {("/project/out", "bind", "rw"), ("/project/src", "bind", "ro")}
    assert p.network == "none" and p.allowed_domains == ()
    assert p.hardening == Hardening()
    assert p.sandbox == "policy"


def test_naive_setup_mounts_home_read_write_and_the_rest_read_only() -> None:
    p = plan(REPO / "examples" / "naive.json")
    # srt's mandatory write protections, found from the home where srt starts, stay read-only inside it
    guarded = {(m, "bind", "ro") for m in protected_paths(WORLD.home, EXISTING) if m in EXISTING}
    assert ("/home/user/.bashrc", "bind", "ro") in guarded and ("/home/user/.claude/agents", "bind", "ro") in guarded
    assert table(p) == {
        ("/home/user", "bind", "rw"),
        ("/project", "bind", "ro"),
        ("/app/workspace", "bind", "ro"),
        ("/etc/secrets", "bind", "ro"),
    } | guarded
    assert p.network == "proxy" and p.allowed_domains == ("*.github.com",)


def test_hidden_directories_get_a_tmpfs_and_hidden_files_an_empty_file() -> None:
    p = plan({"filesystem": {"allowWrite": ["/home/user"], "denyRead": ["/home/user/.ssh", "/project/.env"], "denyWrite": ["/home/user/.bashrc"]}})
    t = table(p)
    assert ("/home/user/.ssh", "tmpfs", "hidden") in t
    assert ("/project/.env", "mask", "hidden") in t
    assert ("/home/user/.bashrc", "bind", "ro") in t
    assert ("/home/user", "bind", "rw") in t


def test_an_output_file_named_by_a_rule_is_precreated() -> None:
    # a denyWrite of a path the job creates holds (srt mounts a stand-in there): it must exist beforehand
    p = plan({"filesystem": {"allowWrite": ["/project/out"], "denyWrite": ["/project/out/result.txt"]}})
    (m,) = [m for m in p.mounts if m.target == "/project/out/result.txt"]
    assert m == Mount("/project/out/result.txt", "/project/out/result.txt", "ro", "bind", False, precreate=True)


def test_a_grant_of_a_path_that_does_not_exist_yet_mounts_nothing() -> None:
    # srt binds only what exists at start: an allowWrite of the job's output file grants nothing
    p = plan({"filesystem": {"allowWrite": ["/project/out/result.txt"]}})
    assert not [m for m in p.mounts if m.target.startswith("/project/out")]


def test_baseline_is_the_plain_container() -> None:
    p = plan(None)
    assert p.sandbox == "baseline" and p.policy is None
    assert table(p) == {("/home/user", "bind", "rw"), ("/project", "bind", "rw"), ("/app/workspace", "bind", "rw")}
    assert p.network == "open"
    assert p.hardening == BASELINE_HARDENING
    assert not p.hardening.cap_drop_all and not p.hardening.no_new_privileges
    assert p.hardening.pids_limit > 0 and p.hardening.mem_bytes > 0  # weak on purpose, not harmful
    # its root is read-only too (a writable layer is unbounded on the engine's disk); what its user could write in
    # a default container stays writable, bounded (tests/integration/test_plain_container_disk.py)
    assert p.hardening.read_only_root
    assert p.hardening.scratch_dirs == ("/var/tmp", "/run/lock") and 0 < p.hardening.scratch_bytes <= 16 * 1024 * 1024


def test_policy_sandboxes_are_hardened() -> None:
    h = plan({}).hardening
    assert h.read_only_root and h.cap_drop_all and h.no_new_privileges
    assert h.scratch_dirs == ()  # only /tmp is writable outside what the policy mounts
    assert h.user == "1000:1000"
    assert h.timeout_s > 0


@pytest.mark.parametrize(
    "data",
    [
        {"filesystem": {"allowWrite": ["/"]}},
        {"filesystem": {"allowWrite": ["/var/run/docker.sock"]}},
        {"filesystem": {"allowRead": ["/proc"], "allowWrite": ["/proc/self"]}},
        {"filesystem": {"allowWrite": ["/home/user/../../"]}},
        {"filesystem": {"allowWrite": ["/etc", "/root", "/dev"], "allowRead": ["/sys"]}},
        FIXTURES / "hostile-paths.json",
    ],
)
def test_no_policy_mounts_anything_outside_the_world(data: Any) -> None:
    assert_only_world_paths(plan(data))


def test_allow_write_root_selects_only_the_world_roots() -> None:
    p = plan({"filesystem": {"allowWrite": ["/"]}})
    guarded = {(m, "bind", "ro") for m in protected_paths(WORLD.home, EXISTING) if m in EXISTING}
    assert table(p) == {(r, "bind", "rw") for r in WORLD.roots} | guarded


def test_rules_outside_the_world_mount_nothing() -> None:
    p = plan({"filesystem": {"allowRead": ["/proc", "/var/run/docker.sock"], "allowWrite": ["/var/run/docker.sock"]}})
    # reads are open by default and these rules name nothing of the world: every root read-only, nothing more
    assert table(p) == {(r, "bind", "ro") for r in WORLD.roots}
    targets = {m.target for m in plan(FIXTURES / "hostile-paths.json").mounts}
    assert not any(t.startswith(("/proc", "/var", "/sys", "/dev")) for t in targets)


def test_the_plan_runs_every_probe_by_default() -> None:
    from grader import PROBES

    assert plan({}).probes == tuple(p.id for p in PROBES)
