"""A long network.allowedDomains in Docker: one name asked per kind, every verdict still the static analyzer's.

A run asks one allowed name of each kind (``scope.stand_ins``), so a realistic
list of 60 hosts costs what its few kinds cost. Narrowing is a place to hide a
leak, so each way a policy could game it is a run here that must find the leak
and name the host that carried it:

* the leak hidden as the 50th entry, behind 49 names of another kind (names
  under a registry's domain that no server answers);
* a wildcard and an exact name of one zone, the wildcard first and denied, so
  a narrowing that merged them would ask the wildcard's refused name only;
* a port-only variant: ``a.example.net:443`` first, ``b.example.net:80``
  after it, and ``*:443`` denied, so only plain HTTP to the second gets out;
* deniedDomains carving out the name the narrowing picks first
  (``a.example.net`` denied, ``b.example.net`` open).

Every one must also agree with the static prediction, probe by probe and on
the whole scope (where every allowed name is listed, asked or not), in Docker
and under the real sandbox-runtime (whose proxy decides; the runner's orders
are the same narrowed ones).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grader import load_policy, predict
from grader.core.outcomes import RunResult
from grader.core.plan import build_plan

CLAUDE_CODE_60 = Path(__file__).parent.parent / "fixtures" / "policies" / "claude-code-60.json"
UPLOAD = "exfil-via-allowed-domain"

GAMING: dict[str, tuple[dict[str, Any], str]] = {
    "leak-hidden-as-the-50th-entry": (
        {"network": {"allowedDomains": [*(f"mirror{i}.pypi.org" for i in range(49)), "webhook.site",
                                        *(f"cache{i}.pypi.org" for i in range(10))]}},
        "webhook.site"),
    "wildcard-and-exact-name-of-one-zone": (
        {"network": {"allowedDomains": ["*.drop.example.net", "drop.example.net"], "deniedDomains": ["*.drop.example.net"]}},
        "drop.example.net"),
    "port-only-variant": (
        {"network": {"allowedDomains": ["a.example.net:443", "b.example.net:80"], "deniedDomains": ["*:443"]}},
        "b.example.net"),
    "denied-carves-out-the-first-name": (
        {"network": {"allowedDomains": ["a.example.net", "b.example.net"], "deniedDomains": ["a.example.net"]}},
        "b.example.net"),
}


def _run(backend: Any, raw: dict[str, Any]) -> RunResult:
    plan = build_plan(load_policy(raw))
    result: RunResult = backend.run(plan)
    if any(o.outcome == "error" for o in result.probes):  # "could not judge" is no verdict: once more, alone
        result = backend.run(plan)
    return result


def _agrees(raw: dict[str, Any], real: RunResult) -> None:
    static = predict(load_policy(raw))
    assert not real.notes, real.notes
    mismatches = [f"{o.id}: static={static.outcome(o.id).outcome} docker={o.outcome} ({o.explanation})"
                  for o in real.probes if o.outcome != static.outcome(o.id).outcome]
    assert mismatches == [], "\n".join(mismatches)
    assert static.scope is not None and real.scope == static.scope


@pytest.mark.docker
def test_a_claude_code_list_of_60_hosts_is_graded_as_the_static_analyzer_grades_it(docker_backend: Any) -> None:
    raw = json.loads(CLAUDE_CODE_60.read_text())
    real = _run(docker_backend, raw)
    _agrees(raw, real)
    # api.anthropic.com and its like are names the simulated internet does not know: the attacker's (fail closed)
    upload = real.outcome(UPLOAD)
    assert upload.outcome == "succeeded", upload
    assert real.scope is not None and len(real.scope.reachable) >= 60


@pytest.mark.docker
@pytest.mark.parametrize("name", sorted(GAMING))
def test_a_policy_gaming_the_narrowing_still_leaks_in_docker(name: str, docker_backend: Any) -> None:
    raw, leak = GAMING[name]
    real = _run(docker_backend, raw)
    upload = real.outcome(UPLOAD)
    assert upload.outcome == "succeeded", upload
    assert any(e.startswith(f"{leak} stored") for e in upload.evidence), upload.evidence
    _agrees(raw, real)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["claude-code-60", *sorted(GAMING)])
def test_sandbox_runtime_grades_each_as_the_static_analyzer_does(name: str, srt_backend: Any) -> None:
    raw, leak = (json.loads(CLAUDE_CODE_60.read_text()), "") if name == "claude-code-60" else GAMING[name]
    real = _run(srt_backend, raw)
    _agrees(raw, real)
    upload = real.outcome(UPLOAD)
    assert upload.outcome == "succeeded", upload
    assert not leak or any(e.startswith(f"{leak} stored") for e in upload.evidence), upload.evidence
