"""Goals as data: each lesson's goal is reachable, its starting policy misses it, and every reason is in plain words."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from grader import load_policy, predict
from grader.course.goals import GOALS, Goal, UnknownGoal, check, goal, tilde
from grader.core.outcomes import RunResult
from grader.core.probes import PROBES

NAIVE = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}
NPM_FIXED = {
    "filesystem": {"denyRead": ["/home/user", "/etc/secrets", "/project/.env"], "allowWrite": ["/app/workspace/build"]},
    "network": {"allowedDomains": ["registry.npmjs.org"]},
}
# srt: reads are open by default, so every region is hidden and the job's source re-opened; allowWrite binds /project/out back
BOTH_AXES = {"filesystem": {"denyRead": ["/home/user", "/etc/secrets", "/project", "/app/workspace"], "allowRead": ["/project/src"],
                            "allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}}
CLONE = {"filesystem": {"denyRead": ["/home/user", "/etc/secrets", "/project/.env"], "allowWrite": ["/project/out"]},
         "network": {"allowedDomains": ["github.com"]}}
TRUSTING = {"filesystem": {"allowWrite": ["/project/out"]}, "network": {"allowedDomains": ["*.github.com"]}}


def _run(raw: Any) -> RunResult:
    return predict(load_policy(raw) if raw is not None else None)


@pytest.mark.parametrize(("goal_id", "solution"), [("l02-npm-build", NPM_FIXED), ("l03-safe-container", BOTH_AXES), ("l04-clone-github", CLONE)])
def test_every_goal_can_be_met(goal_id: str, solution: dict[str, Any]) -> None:
    assert check(goal(goal_id), _run(solution)) == (True, [])


@pytest.mark.parametrize(("goal_id", "start"), [("l02-npm-build", NAIVE), ("l03-safe-container", None), ("l04-clone-github", TRUSTING)])
def test_every_lesson_start_misses_its_goal(goal_id: str, start: Any) -> None:
    met, reasons = check(goal(goal_id), _run(start))
    assert not met and reasons


def test_the_first_reason_names_the_probe_and_the_path_as_the_learner_knows_it() -> None:
    met, reasons = check(goal("l02-npm-build"), _run(NAIVE))
    assert not met
    assert reasons[0] == "read-ssh-key succeeded — ~/.ssh/id_rsa is readable"
    # srt keeps ~/.bashrc read-only (it starts in the home), not its own settings file
    assert "write-sandbox-settings succeeded — ~/.srt-settings.json can be changed" in reasons
    assert not any(r.startswith("write-shell-rc") for r in reasons)
    assert any(r.startswith("job-fetch-npm was blocked — the job needs it") for r in reasons)
    assert "registry.npmjs.org is not reachable — the job needs it" in reasons


def test_scope_reasons_do_not_repeat_a_path_a_probe_already_named() -> None:
    _, reasons = check(goal("l02-npm-build"), _run(NAIVE))
    scope_lines = [r for r in reasons if "(secret or credential)" in r]
    assert scope_lines and "~/.ssh/id_rsa" not in scope_lines[0]


def test_the_npm_upload_is_the_one_accepted_risk_and_it_is_explained() -> None:
    g = goal("l02-npm-build")
    result = _run(NPM_FIXED)
    assert result.outcome("exfil-via-allowed-domain").outcome == "succeeded"  # the risk is real...
    assert check(g, result)[0]  # ...and accepted
    assert "npm publish" in g.accepted_why
    strict = dataclasses.replace(g, accepted=())
    met, reasons = check(strict, result)
    assert not met and reasons[0].startswith("exfil-via-allowed-domain succeeded")


def test_a_channel_out_beyond_the_named_hosts_is_not_yet() -> None:
    loose = dict(NPM_FIXED, network={"allowedDomains": ["registry.npmjs.org", "github.com"]})
    met, reasons = check(goal("l02-npm-build"), _run(loose))
    assert not met and "github.com is reachable and accepts uploads — a channel out" in reasons


def test_gist_and_api_upload_fail_the_clone_goal_even_with_secrets_hidden() -> None:
    wide = dict(CLONE, network={"allowedDomains": ["github.com", "gist.github.com", "api.github.com"]})
    met, reasons = check(goal("l04-clone-github"), _run(wide))
    assert not met
    assert "api.github.com and gist.github.com are reachable and accept uploads — channels out" in reasons


def test_persistence_found_by_the_scope_alone_is_named() -> None:
    """No probe writes ~/.config/autostart, but the scope shows it writable: the goal says so."""
    def writing(path: str) -> dict[str, Any]:
        return dict(BOTH_AXES, filesystem={**BOTH_AXES["filesystem"], "allowWrite": ["/project/out", path]})

    met, reasons = check(goal("l03-safe-container"), _run(writing("/home/user/.config/autostart")))
    assert not met and reasons == ["~/.config/autostart can be changed, and it runs later, outside the sandbox"]
    # ~/.profile is one of srt's mandatory write protections where it starts (the home): allowWrite cannot open it
    assert check(goal("l03-safe-container"), _run(writing("/home/user/.profile"))) == (True, [])


def test_evidence_that_could_not_be_collected_never_meets_a_goal() -> None:
    good = _run(BOTH_AXES)
    broken = dataclasses.replace(good, probes=tuple(
        dataclasses.replace(p, outcome="error") if p.id == "read-ssh-key" else p for p in good.probes))
    met, reasons = check(goal("l03-safe-container"), broken)
    assert not met and reasons == ["read-ssh-key: its evidence could not be collected, so it cannot count; rerun"]
    unmeasured = dataclasses.replace(good, scope=None)
    met, reasons = check(goal("l03-safe-container"), unmeasured)
    assert not met and "could not measure" in reasons[0]


def test_static_and_a_run_with_the_same_outcomes_and_scope_get_the_same_answer() -> None:
    """check reads outcomes and scope only: the backend's name and the evidence change nothing."""
    static = _run(NAIVE)
    docker_like = dataclasses.replace(static, backend="docker", notes=(), probes=tuple(
        dataclasses.replace(p, evidence=("seen at the sink",)) for p in static.probes))
    for g in GOALS.values():
        assert check(g, docker_like) == check(g, static)


def test_every_goal_names_real_probes_and_world_hosts() -> None:
    from grader.core.world import load_world

    ids = {p.id: p.kind for p in PROBES}
    hosts = set(load_world().host_names)
    for g in GOALS.values():
        assert all(ids.get(j) == "job" for j in g.jobs), g.id
        assert all(ids.get(a) == "attack" for a in g.accepted), g.id
        assert not g.accepted or g.accepted_why, f"{g.id} accepts a risk without saying why"
        assert set(g.reach) <= hosts and set(g.channels_only or ()) <= hosts, g.id


def test_unknown_goal_names_the_known_ones() -> None:
    with pytest.raises(UnknownGoal, match="l02-npm-build"):
        goal("l02-npm")
    assert isinstance(UnknownGoal("x"), LookupError)


def test_tilde() -> None:
    assert tilde("/home/user/.ssh/id_rsa") == "~/.ssh/id_rsa"
    assert tilde("/home/user") == "~"
    assert tilde("/home/username/x") == "/home/username/x"
    assert tilde("/etc/secrets") == "/etc/secrets"


def test_a_goal_is_data() -> None:
    g = Goal("x", "Nothing readable.", all_attacks_blocked=False, channels_only=None)
    assert check(g, _run(NAIVE))[0] is False  # the loot is still readable: unreadable defaults to secrets and credentials
    assert check(dataclasses.replace(g, unreadable=()), _run(NAIVE)) == (True, [])
