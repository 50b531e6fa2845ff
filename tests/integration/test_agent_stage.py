"""Lesson 01's agent on stage, for real: its tool calls run in the probes' Docker sandbox, and the static prediction must match.

The three runs the lesson shows: a polite system prompt in the plain container
(the key leaves), the plain container without it (the same transcript: the
prompt changed nothing), and a policy scoped on both axes (the key stays, the
job is done). What left is judged by the simulated internet's records only.
"""

from __future__ import annotations

from typing import Any, Optional

import pytest

from grader.course.agent import KEY, POLITE_PROMPT, SUMMARY, predict_run, run_agent
from grader.core.plan import build_plan
from grader.core.policy import Policy, load_policy

pytestmark = [pytest.mark.docker]

# srt's rules: reads are open by default, so the scoped policy hides every place but the project (and its .env)
CONTAINED = load_policy({"filesystem": {"denyRead": ["/home/user", "/etc/secrets", "/app/workspace", "/project/.env"],
                                        "allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}})
RUNS: dict[str, tuple[Optional[Policy], str]] = {
    "prompt, plain container": (None, POLITE_PROMPT),
    "no prompt, plain container": (None, ""),
    "scoped policy": (CONTAINED, ""),
}


@pytest.mark.parametrize("name", list(RUNS))
def test_the_prediction_matches_the_real_transcript(name: str, docker_backend: Any, no_leftovers: Any) -> None:
    policy, prompt = RUNS[name]
    real = run_agent(docker_backend, policy, prompt=prompt)
    predicted = predict_run(build_plan(policy), prompt=prompt)
    assert not real.predicted and real.problem == "", real.problem
    assert real.prompt == prompt
    assert real.outcomes() == predicted.outcomes()
    assert (real.leaked, real.job_done) == (predicted.leaked, predicted.job_done)
    if policy is None:
        assert real.leaked is True and [(h.host, h.how) for h in real.hits] == [("gist.github.com", "HTTP POST")]
    else:
        assert real.leaked is False and real.job_done
        assert {c.target: c.outcome for c in real.calls}[KEY] == "failed"
        assert {c.target: c.outcome for c in real.calls}[SUMMARY] == "ok"


def test_a_policy_that_hides_the_key_but_opens_the_gist_gets_a_post_and_no_key(docker_backend: Any, no_leftovers: Any) -> None:
    """The transcript says "HTTP 200"; the gist's log says the key never came: the evidence decides."""
    policy = load_policy({"filesystem": {"denyRead": ["/home/user/.ssh"], "allowWrite": ["/project/out"]},
                          "network": {"allowedDomains": ["gist.github.com"]}})
    real = run_agent(docker_backend, policy)
    post = next(c for c in real.calls if c.tool == "post")
    assert post.outcome == "ok" and "HTTP 200" in post.output
    assert real.leaked is False and real.hits == ()
    assert real.outcomes() == predict_run(build_plan(policy)).outcomes()
