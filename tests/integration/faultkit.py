"""Helpers shared by the fault tests and the hostile-code tests: a plain module, not a conftest.

What both need to say "the run came out right": a policy that exercises the
whole network path, and the comparison of a Docker run with the static
prediction for the same policy.
"""

from __future__ import annotations

from typing import Any

from grader import load_policy, predict
from grader.outcomes import RunResult

__all__ = ["PROXIED", "assert_as_predicted", "outcomes_of"]

PROXIED = {"network": {"allowedDomains": ["github.com"]}}  # a proxy, an internet, readable secrets


def outcomes_of(r: RunResult) -> dict[str, str]:
    """Each probe's verdict in ``r``, by probe id."""
    return {o.id: o.outcome for o in r.probes}


def assert_as_predicted(r: RunResult, policy: Any) -> None:
    """Every verdict of ``r`` and its measured scope equal the static prediction for ``policy``, and the run has no notes."""
    static = predict(load_policy(policy) if policy is not None else None)
    wrong = {k: f"docker={v} static={static.outcome(k).outcome} ({r.outcome(k).evidence})"
             for k, v in outcomes_of(r).items() if v != static.outcome(k).outcome}
    assert wrong == {} and not r.notes, (wrong, r.notes)
    assert r.scope == static.scope, f"measured scope {r.scope} is not the predicted {static.scope}"
