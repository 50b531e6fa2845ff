"""Predict, then run: a prediction scored probe by probe against a run, saying whether the run was real."""

from __future__ import annotations

import pytest

from grader.core.analyzer import predict
from grader.core.outcomes import ProbeOutcome, RunResult
from grader.course.prediction import scenario_policy, score_prediction
from grader.course.quiz import InvalidAnswer, load_questions, question

SECRETS = question("predict-etc-secrets-github")
DOCKER = question("predict-standard-docker")
PREDICTS = [q for q in load_questions() if q.type == "predict"]


def _succeeding(q_id: str) -> set[str]:
    q = question(q_id)
    result = predict(scenario_policy(q))
    assert q.scenario
    return {pid for pid in q.scenario.probes if result.outcome(pid).outcome == "succeeded"}


@pytest.mark.parametrize("qid", [q.id for q in PREDICTS])
def test_each_scenario_has_probes_that_succeed_and_probes_that_are_blocked(qid: str) -> None:
    """A prediction that ticks everything (or nothing) must not score full marks."""
    scenario = question(qid).scenario
    assert scenario is not None
    succeeding = _succeeding(qid)
    assert succeeding and succeeding != set(scenario.probes), (qid, succeeding)


def test_the_scenarios_are_the_seed_s() -> None:
    assert _succeeding("predict-etc-secrets-github") >= {"read-etc-secrets", "exfil-via-allowed-domain", "exfil-secret"}
    assert "read-ssh-key" not in _succeeding("predict-etc-secrets-github")
    assert scenario_policy(DOCKER) is None and predict(None).sandbox == "baseline"
    assert _succeeding("predict-standard-docker") >= {"read-ssh-key", "net-direct-ip", "exfil-secret"}


def test_the_lesson_scenarios_succeed_where_their_model_answers_say() -> None:
    """Lessons 03 and 04 ask a prediction before their editors; the model answer must match the run."""
    assert _succeeding("predict-plain-container") == {"read-ssh-key", "write-git-hook", "net-attacker-domain", "net-host-gateway", "exfil-secret"}
    assert "All but reading /etc/secrets" in question("predict-plain-container").model_answer
    assert _succeeding("predict-trusted-github") == {"read-ssh-key", "exfil-via-allowed-domain", "exfil-secret"}
    assert question("predict-trusted-github").lesson == "l04-trusted-domains"


def test_a_right_prediction_scores_every_probe_right() -> None:
    result = predict(scenario_policy(SECRETS))
    score = score_prediction(SECRETS, _succeeding(SECRETS.id), result)
    assert score.right == score.judged == 6 and score.score == 1.0 and score.result == "6/6 right"
    assert not score.observed and score.backend == "static"


def test_each_probe_is_scored_on_its_own() -> None:
    result = predict(scenario_policy(SECRETS))
    score = score_prediction(SECRETS, ["read-ssh-key", "read-etc-secrets"], result)
    calls = {c.probe: c for c in score.calls}
    assert [c.probe for c in score.calls] == list(SECRETS.scenario.probes)  # type: ignore[union-attr]
    assert calls["read-ssh-key"].predicted and calls["read-ssh-key"].outcome == "blocked" and calls["read-ssh-key"].right is False
    assert calls["read-etc-secrets"].right is True
    assert calls["net-direct-ip"].right is True  # predicted blocked, blocked
    assert calls["exfil-secret"].right is False  # predicted blocked, succeeded
    assert score.result == "3/6 right" and score.score == 0.5


def test_nothing_ticked_means_every_probe_predicted_blocked() -> None:
    score = score_prediction(DOCKER, [], predict(None))
    assert all(not c.predicted for c in score.calls)
    assert score.right == 1  # only read-etc-secrets is blocked in the plain container


def test_a_probe_without_evidence_is_neither_right_nor_wrong() -> None:
    real = predict(scenario_policy(SECRETS))
    probes = tuple(ProbeOutcome(p.id, p.kind, "error", "no evidence", ()) if p.id == "read-etc-secrets" else p
                   for p in real.probes if p.id != "net-direct-ip")  # and one the run did not report at all
    result = RunResult("docker", "policy", real.policy, probes, run_id="sl-1", seconds=1.0)
    score = score_prediction(SECRETS, ["read-etc-secrets"], result)
    calls = {c.probe: c for c in score.calls}
    assert calls["read-etc-secrets"].right is None and calls["net-direct-ip"].right is None
    assert calls["net-direct-ip"].outcome == "error"
    assert score.judged == 4 and score.observed


def test_a_run_with_no_verdict_at_all_scores_nothing() -> None:
    result = RunResult("docker", "policy", None, ())
    score = score_prediction(SECRETS, [], result)
    assert score.judged == 0 and score.score == 0.0 and score.result == "no verdict"


def test_a_typo_in_a_prediction_is_refused_not_counted_as_blocked() -> None:
    with pytest.raises(InvalidAnswer, match="read-ssh-keys"):
        score_prediction(SECRETS, ["read-ssh-keys"], predict(None))


def test_only_predict_questions_are_scored() -> None:
    with pytest.raises(InvalidAnswer):
        score_prediction(question("recall-two-axes"), [], predict(None))
    with pytest.raises(InvalidAnswer):
        scenario_policy(question("check-standard-docker"))
