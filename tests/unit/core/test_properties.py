"""Properties over generated inputs: loading never crashes, normalizing is idempotent, plans mount only the world."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grader import PolicyError, load_policy, load_world
from grader.core.plan import build_plan
from grader.core.policy import Policy, parse_policy

WORLD = load_world()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=25,
)

_PATH_PARTS = ["home", "user", ".ssh", "project", "src", "out", ".env", "..", ".", "", "etc", "secrets", "app",
               "workspace", "build", "proc", "var", "run", "docker.sock", ".git", "hooks", "*", "~"]
paths = st.one_of(
    st.sampled_from([
        "/", "~", "~/", "~/.ssh", "~root", "/home/user", "/home/user/.ssh", "/project", "/project/src", "/project/out",
        "/project/out/result.txt", "/etc/secrets", "/app/workspace/build", "/var/run/docker.sock", "/proc", "/..",
        "/project/../etc", "relative", "", "/a/*", "/x\x00y",
    ]),
    st.builds(lambda parts: "/" + "/".join(parts), st.lists(st.sampled_from(_PATH_PARTS), max_size=6)),
    st.builds(lambda parts: "~/" + "/".join(parts), st.lists(st.sampled_from(_PATH_PARTS), max_size=4)),
    st.text(max_size=20),
)
hosts = st.one_of(
    st.sampled_from([h.name for h in WORLD.hosts]),
    st.sampled_from(["*.github.com", "*.attacker.example", "*.npmjs.org", "*", "*.com", "GitHub.com.", "1.2.3.4",
                     "https://pypi.org", "pypi.org:443", "a.*.b", "10.0.0.0/8", "::1", "Bücher.example", ""]),
    st.from_regex(r"\A(\*\.)?[a-z0-9-]{1,10}(\.[a-z0-9-]{1,10}){0,3}\Z"),
    st.text(max_size=20),
)
path_lists = st.lists(paths, max_size=5)
fs_keys = st.sampled_from(["allowRead", "denyRead", "allowWrite", "denyWrite"])
net_keys = st.sampled_from(["allowedDomains", "deniedDomains"])
policy_shaped = st.fixed_dictionaries(
    {},
    optional={
        "filesystem": st.dictionaries(st.one_of(fs_keys, st.text(max_size=12)), st.one_of(path_lists, json_values), max_size=4),
        "network": st.dictionaries(st.one_of(net_keys, st.text(max_size=12)), st.one_of(st.lists(hosts, max_size=4), json_values), max_size=3),
        "$schema": st.one_of(st.text(max_size=10), json_values),
    },
)
valid_shaped = st.fixed_dictionaries(
    {},
    optional={
        "filesystem": st.dictionaries(fs_keys, path_lists, max_size=4),
        "network": st.dictionaries(net_keys, st.lists(hosts, max_size=4), max_size=2),
    },
)


def _load_or_error(value: Any) -> Policy | None:
    try:
        return parse_policy(value)
    except PolicyError as exc:
        assert exc.problems, "a PolicyError always names at least one problem"
        for p in exc.problems:
            assert p.pointer.startswith("/") and p.message
        return None


@given(json_values)
def test_any_json_value_gives_a_policy_or_a_policy_error(value: Any) -> None:
    _load_or_error(value)


@given(policy_shaped)
def test_any_policy_shaped_value_gives_a_policy_or_a_policy_error(value: Any) -> None:
    _load_or_error(value)


@given(json_values)
def test_any_json_text_gives_a_policy_or_a_policy_error(value: Any) -> None:
    try:
        load_policy(json.dumps(value).encode())
    except PolicyError:
        pass


@given(st.binary(max_size=200))
def test_any_bytes_give_a_policy_or_a_policy_error(raw: bytes) -> None:
    try:
        load_policy(raw)
    except PolicyError:
        pass


@settings(suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(valid_shaped)
def test_normalize_is_idempotent(value: Any) -> None:
    policy = _load_or_error(value)
    if policy is None:
        return
    once = policy.normalize()
    assert load_policy(once).normalize() == once
    assert load_policy(once).canonical_json() == policy.canonical_json()


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_shaped)
def test_a_plan_from_any_valid_policy_mounts_only_world_paths(value: Any) -> None:
    policy = _load_or_error(value)
    if policy is None:
        return
    plan = build_plan(policy)
    for m in plan.mounts:
        assert WORLD.root_of(m.source) is not None, m
        assert m.target == m.source, m
        assert m.kind in ("bind", "tmpfs", "mask")
        assert (m.mode == "hidden") == (m.kind != "bind"), m
