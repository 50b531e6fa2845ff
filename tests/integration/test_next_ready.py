"""The next sandboxed session made ready while the probes run (``nextready``), on real Docker: fired only for the
session the probes really led to, judged exactly as a cold start is, and removed whatever happens."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Iterator

import pytest

from grader.backends.docker import nextready, replay
from grader.core.plan import build_plan
from grader.core.policy import load_policy

pytestmark = pytest.mark.docker

NAIVE = {"filesystem": {"allowWrite": ["/home/user"]}, "network": {"allowedDomains": ["*.github.com"]}}


@dataclasses.dataclass
class _Count:
    cold: int = 0  # next sessions started cold (the backend's own execute)
    fired: int = 0  # next sessions handed over ready


@pytest.fixture()
def count(docker_backend: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[_Count]:
    out = _Count()
    execute, take = docker_backend.execute, nextready.NextReady.take

    def cold(plan: Any, job: Any) -> Any:
        out.cold += 1
        return execute(plan, job)

    def taken(self: nextready.NextReady, plan: Any, job: Any) -> Any:
        got = take(self, plan, job)
        out.fired += got is not None
        return got

    monkeypatch.setattr(docker_backend, "execute", cold)
    monkeypatch.setattr(nextready.NextReady, "take", taken)
    yield out


def _verdict(result: Any) -> tuple[str, str]:
    o = result.outcome("write-sandbox-settings")
    return o.outcome, o.evidence[-1]


def _same(a: tuple[str, str], b: tuple[str, str]) -> bool:
    """Equal but for the run's own identity: its token and canary are in the evidence's paths and bodies."""
    return a[0] == b[0] and a[1].split(":")[0] == b[1].split(":")[0]


def test_the_naive_policys_next_session_is_fired_ready_and_judged_as_a_cold_one(
    docker_backend: Any, count: _Count, monkeypatch: pytest.MonkeyPatch, no_leftovers: Any,
) -> None:
    plan = build_plan(load_policy(NAIVE))
    ready = _verdict(docker_backend.run(plan))
    assert (count.fired, count.cold) == (1, 0), count
    assert ready[0] == "succeeded" and "attacker.example" in ready[1], ready
    monkeypatch.setattr(nextready, "expected", lambda *a: None)  # nothing made ready: the session starts cold
    cold = _verdict(docker_backend.run(plan))
    assert (count.fired, count.cold) == (1, 1), count
    assert _same(ready, cold), (ready, cold)


def test_a_session_made_ready_for_other_settings_is_removed_and_the_real_one_runs_cold(
    docker_backend: Any, count: _Count, monkeypatch: pytest.MonkeyPatch, no_leftovers: Any,
) -> None:
    real = nextready.expected

    def wrong(plan: Any, *args: Any) -> Any:
        found = real(plan, *args)
        assert found is not None
        other = build_plan(load_policy({"network": {"allowedDomains": ["elsewhere.example"]}}), plan.world)
        return other, found[1]  # what the probes will not write

    monkeypatch.setattr(nextready, "expected", wrong)
    result = _verdict(docker_backend.run(build_plan(load_policy(NAIVE))))
    assert (count.fired, count.cold) == (0, 1), count
    assert result[0] == "succeeded" and "attacker.example" in result[1], result


@pytest.mark.parametrize("when", ["while it is made ready", "once it is ready"])
def test_a_session_made_ready_and_never_played_is_removed(
    docker_backend: Any, count: _Count, monkeypatch: pytest.MonkeyPatch, no_leftovers: Any, when: str,
) -> None:
    made: list[nextready.NextReady] = []
    ready_for = nextready.ready_for

    def noted(*args: Any) -> Any:
        got = ready_for(*args)
        made.append(got)
        return got

    from grader.backends.docker import run as docker_run

    monkeypatch.setattr(docker_run, "ready_for", noted)
    monkeypatch.setattr(replay, "changed_paths", lambda *a: set())  # as if the probes changed nothing: nothing plays
    prepared = docker_backend.prepare(build_plan(load_policy(NAIVE)))
    assert len(made) == 1 and made[0] is not None, "it is made ready (otherwise this test proves nothing)"
    if when == "once it is ready":
        deadline = time.monotonic() + 60
        while not made[0].ready and time.monotonic() < deadline:
            time.sleep(0.02)
        assert made[0].ready
    prepared.go()
    assert (count.fired, count.cold) == (0, 0), count
    # no_leftovers: its sandbox, proxy and run directory are gone once the backend's removals are done
