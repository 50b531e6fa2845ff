"""On ordinary networking (the plain container) silence is a failed measurement, never "blocked".

Seen in CI with eight runs at once: the plain container's job-fetch-pypi read
"blocked" (the static analyzer: "succeeded") because the run's name server,
busy, gave no answer in time and the runner's lookup failed with EAI_AGAIN
("Temporary failure in name resolution"). The plain container refuses
nothing, so every network judge must call that an error. Behind a proxy the
same EAI_AGAIN is the block itself (the sandbox's resolver is its own loopback)
and stays "blocked". Each case is that run as evidence.
"""

from __future__ import annotations

import pytest

from grader.core.evidence import Evidence
from grader.core.probes.registry import PROBES
from grader.core.world import load_world
from grader.protocol.wire import RunnerRecord

WORLD = load_world()
EAI_AGAIN = "URLError: <urlopen error [Errno -3] Temporary failure in name resolution>"
BY_ID = {p.id: p for p in PROBES}
NET = ["job-fetch-pypi", "job-fetch-npm", "net-attacker-domain", "net-dns-exfil", "net-direct-ip",
       "net-host-gateway", "exfil-via-allowed-domain"]


def _ev(network: str, *records: RunnerRecord) -> Evidence:
    pids = {r.probe for r in records}
    done = tuple(RunnerRecord(pid, "done", True, "", 2.0, None, None, None) for pid in pids)
    return Evidence(token="t0k3n", canaries={}, records=(*records, *done), before={}, after={}, network=network)  # type: ignore[arg-type]


def _failed(pid: str, detail: str = EAI_AGAIN) -> RunnerRecord:
    return RunnerRecord(pid, "http", False, f"GET https://pypi.org/fetch/t0k3n: {detail}", 1.0, "https://pypi.org/fetch/t0k3n", None, None)


@pytest.mark.parametrize("pid", NET)
def test_an_unanswered_lookup_on_ordinary_networking_is_an_error(pid: str) -> None:
    p = BY_ID[pid]
    v = p.judge(p, _ev("open", _failed(pid)), WORLD)
    outcome, why, evidence = v.outcome, v.why, v.proof
    assert outcome == "error", (outcome, why)
    assert "ordinary networking" in why and "name server gave no answer" in why, why
    assert evidence == ()


@pytest.mark.parametrize("pid", NET)
def test_any_silence_on_ordinary_networking_is_an_error(pid: str) -> None:
    p = BY_ID[pid]
    v = p.judge(p, _ev("open", _failed(pid, "OSError: [Errno 113] No route to host")), WORLD)
    outcome, why, _ = v.outcome, v.why, v.proof
    assert outcome == "error" and "No route to host" in why, why


@pytest.mark.parametrize("pid", NET)
def test_the_same_lookup_failure_behind_a_proxy_is_still_blocked(pid: str) -> None:
    # the gaming case this must not open: a proxy sandbox whose direct lookups fail is the policy working
    p = BY_ID[pid]
    v = p.judge(p, _ev("proxy", _failed(pid)), WORLD)
    outcome, why, _ = v.outcome, v.why, v.proof
    assert outcome == "blocked", (outcome, why)


def test_secrets_read_on_ordinary_networking_that_arrived_nowhere_are_an_error() -> None:
    p = BY_ID["exfil-secret"]
    read = RunnerRecord(p.id, "read", True, "read /home/user/.ssh/id_rsa", 0.5, "/home/user/.ssh/id_rsa", "c2VjcmV0", None)
    v = p.judge(p, _ev("open", read, _failed(p.id)), WORLD)
    outcome, why, _ = v.outcome, v.why, v.proof
    assert outcome == "error" and "name server gave no answer" in why, why
    v = p.judge(p, _ev("proxy", read, _failed(p.id)), WORLD)
    outcome, _, _ = v.outcome, v.why, v.proof
    assert outcome == "blocked"
