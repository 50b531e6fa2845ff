"""The run service's wire form (``grader.core.transport``): results and executions out and back whole, and every
answer or request that drops, adds, renames or retypes something refused with its JSON path, never an outcome."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from typing import Any, Callable

import pytest

import fakewire
from grader import load_policy, predict
from grader.core.evidence import Evidence, NextSession
from grader.core.execution import Execution, Job
from grader.core.outcomes import ProbeOutcome, RunResult
from grader.core.plan import build_plan
from grader.core.probes import PROBES
from grader.core.records import RawPorts
from grader.core.transport import (
    TransportError, execution_from_json, execution_request, execution_to_json, parse_execution_request,
    parse_run_request, result_from_json, result_to_json, run_request,
)
from grader.core.world import load_world

WORLD = load_world()
POLICY = load_policy({"filesystem": {"allowRead": ["/project"], "allowWrite": ["/project/out"]},
                      "network": {"allowedDomains": ["pypi.org"]}})


def real_result() -> RunResult:
    """A Docker-shaped result: the prediction's outcomes, each with evidence, a run id, a scope and an extra."""
    static = predict(POLICY)
    probes = tuple(ProbeOutcome(p.id, p.kind, p.outcome, p.explanation, (f"evidence of {p.id}", "é \x1b[31m")) for p in static.probes)
    return replace(static, backend="docker", probes=probes, notes=("a note",), seconds=3.14159265358979,
                   run_id="sl-0123456789", extra={"k": [1, 2.5, None, {"x": True}]})


def execution(*, replay: bool = True) -> Execution:
    path = WORLD.files[0].path
    ns = NextSession(played=("login-shell",), output="hi", http=(fakewire.http("attacker.example", "POST", "/next", "k"),),
                     dns=(fakewire.dns("a.attacker.example"),), tcp=(fakewire.tcp(4444, "x"),), settings="s",
                     timed_out=False, seconds=1.5) if replay else None
    ev = Evidence(token="tok", canaries={path: "canary"}, records=(fakewire.runner("job", "read", True, "ok", path, "d"),),
                  before={path: "ab" * 32}, after={path: b"\x00\xffbinary after"}, network="proxy",
                  http=(fakewire.http("gist.example.com", "POST", "/upload", "FLAG{x}"),), dns=(fakewire.dns("q.attacker.example"),),
                  tcp=(fakewire.tcp(4444, "raw"),), proxy=(fakewire.proxy("pypi.org", "allow"),), host_hits=("hit",),
                  raw=RawPorts(((4444, 4444),)), host_port=1234, notes=("n",), next_session=ns)
    return Execution("docker", "printed\n", 0, False, ev, "sl-0123456789", 2.25)


def wire(value: Any) -> Any:
    """What crossed the network: the JSON text, read back."""
    return json.loads(json.dumps(value, allow_nan=False))


# --- round trips ---------------------------------------------------------------------------


def test_a_real_result_round_trips_whole() -> None:
    r = real_result()
    back = result_from_json(wire(result_to_json(r)), WORLD)
    assert back == r  # backend, sandbox, policy, probes with evidence, notes, exact seconds, run id, extra, scope
    assert back.findings is not None and back.findings.readable == r.findings.readable  # type: ignore[union-attr]
    there = replace(r, ran_at="https://svc")  # where a run service ran it (the client sets it), kept too
    assert result_from_json(wire(result_to_json(there)), WORLD) == there and there != r


def test_a_prediction_and_the_baseline_round_trip() -> None:
    for r in (predict(POLICY), predict(None)):
        assert result_from_json(wire(result_to_json(r)), WORLD) == r


def test_an_execution_round_trips_with_its_evidence_and_next_session() -> None:
    for ex in (execution(), execution(replay=False), replace(execution(), evidence=None, exit_code=None, timed_out=True)):
        back = execution_from_json(wire(execution_to_json(ex)), WORLD)
        assert back == ex
    back = execution_from_json(wire(execution_to_json(execution())), WORLD)
    assert back.evidence is not None and back.evidence.after == execution().evidence.after  # type: ignore[union-attr]
    assert back.next_session == execution().next_session


def test_the_requests_round_trip() -> None:
    plan = build_plan(POLICY)
    req = parse_run_request(wire(run_request(plan)))
    assert (req.sandbox, req.policy, req.probes) == ("policy", POLICY, plan.probes)
    base = parse_run_request(wire(run_request(build_plan(None))))
    assert base.sandbox == "baseline" and base.policy is None
    job = Job("print(1)", plant={WORLD.files[0].path: "FLAG{x}"}, env={"TOKEN": "t"}, timeout_s=20, signer="k" * 32, replay=True)
    policy, back = parse_execution_request(wire(execution_request(plan, job)), WORLD)
    assert policy == POLICY and back == job


# --- answers that game the client ----------------------------------------------------------


def refused(data: Any, path: str, read: Callable[[Any, Any], Any] = result_from_json) -> str:
    with pytest.raises(TransportError) as err:
        read(data, WORLD)
    assert str(err.value).startswith(path), str(err.value)
    return str(err.value)


def mutated(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    data = wire(result_to_json(real_result()))
    change(data)
    return data


def test_an_unknown_outcome_is_named_by_its_path() -> None:
    assert "'maybe' is not one of" in refused(mutated(lambda d: d["probes"][3].update(outcome="maybe")), "$.probes[3].outcome")


def test_dropped_evidence_is_an_error() -> None:
    refused(mutated(lambda d: d["probes"][2].pop("evidence")), "$.probes[2].evidence: missing")


def test_blocked_without_evidence_from_a_real_run_is_an_error() -> None:
    def strip(d: dict[str, Any]) -> None:
        i = next(i for i, p in enumerate(d["probes"]) if p["outcome"] == "blocked")
        d["probes"][i]["evidence"] = []
    assert "rests on evidence" in refused(mutated(strip), "$.probes[")


def test_a_prediction_claiming_evidence_is_an_error() -> None:
    data = wire(result_to_json(predict(POLICY)))
    data["probes"][0]["evidence"] = ["made up"]
    refused(data, "$.probes[0].evidence")


def test_an_error_without_evidence_is_fine() -> None:
    data = mutated(lambda d: d["probes"][0].update(outcome="error", evidence=[]))
    assert result_from_json(data, WORLD).probes[0].outcome == "error"


def test_an_unknown_probe_a_repeated_probe_and_a_wrong_kind_are_errors() -> None:
    extra = {"id": "net-teleport", "kind": "attack", "outcome": "blocked", "explanation": "x", "evidence": ["y"]}
    refused(mutated(lambda d: d["probes"].append(extra)), f"$.probes[{len(PROBES)}].id")
    refused(mutated(lambda d: d["probes"].append(copy.deepcopy(d["probes"][0]))), f"$.probes[{len(PROBES)}].id")
    job = next(i for i, p in enumerate(PROBES) if p.kind == "job")
    refused(mutated(lambda d: d["probes"][job].update(kind="attack")), f"$.probes[{job}].kind")


def test_unknown_missing_and_retyped_fields_are_errors() -> None:
    refused(mutated(lambda d: d.update(verdict="pass")), "$.verdict: unknown field")
    refused(mutated(lambda d: d.pop("scope")), "$.scope: missing")
    refused(mutated(lambda d: d["probes"][1].update(note="x")), "$.probes[1].note: unknown field")
    refused(mutated(lambda d: d.update(seconds="3")), "$.seconds: expected a number")
    refused(mutated(lambda d: d.update(seconds=True)), "$.seconds: expected a number")
    refused(mutated(lambda d: d.update(probes={})), "$.probes: expected a list")
    refused(mutated(lambda d: d["probes"][1].update(evidence="one line")), "$.probes[1].evidence: expected a list")
    refused(mutated(lambda d: d.update(sandbox="container")), "$.sandbox")
    refused(mutated(lambda d: d.update(policy=None)), "$.policy")
    refused(mutated(lambda d: d["policy"]["filesystem"].update(allowReed=[])), "$.policy.filesystem.allowReed")
    refused([], "$: expected an object")


def test_non_finite_numbers_are_refused() -> None:
    refused(mutated(lambda d: d.update(seconds=float("nan"))), "$.seconds: not a finite number")
    refused(mutated(lambda d: d["extra"].update(x=float("inf"))), "$.extra.x: not a finite number")


def test_a_truncated_answer_is_an_error() -> None:
    data = wire(result_to_json(real_result()))
    data["probes"] = data["probes"][:3]  # cut: the reader alone cannot tell, the client compares with what it asked
    assert len(result_from_json(data, WORLD).probes) == 3
    text = json.dumps(result_to_json(real_result()))
    with pytest.raises(ValueError):
        result_from_json(json.loads(text[: len(text) // 2]), WORLD)


def test_a_scope_outside_the_world_is_an_error() -> None:
    refused(mutated(lambda d: d["scope"]["readable"].append("/etc/shadow")), "$.scope.readable[")
    refused(mutated(lambda d: d["scope"]["readable"].reverse() if len(d["scope"]["readable"]) > 1
                    else d["scope"]["readable"].extend(d["scope"]["readable"] * 2)), "$.scope.readable")


def test_an_execution_that_drops_or_retypes_its_evidence_is_an_error() -> None:
    def ex(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        data = wire(execution_to_json(execution()))
        change(data)
        return data

    refused(ex(lambda d: d.pop("evidence")), "$.evidence: missing", execution_from_json)
    refused(ex(lambda d: d["evidence"].pop("http")), "$.evidence.http: missing", execution_from_json)
    refused(ex(lambda d: d["evidence"]["next_session"].pop("http")), "$.evidence.next_session.http: missing", execution_from_json)
    refused(ex(lambda d: d["evidence"]["http"][0].update(host=3)), "$.evidence.http[0].host: expected a string", execution_from_json)
    refused(ex(lambda d: d["evidence"]["http"][0].update(extra=1)), "$.evidence.http[0].extra: unknown field", execution_from_json)
    path = WORLD.files[0].path
    refused(ex(lambda d: d["evidence"]["after"].update({path: "not base64!"})), f'$.evidence.after["{path}"]: not base64',
            execution_from_json)
    refused(ex(lambda d: d["evidence"]["canaries"].update({"/etc/passwd": "c"})), '$.evidence.canaries["/etc/passwd"]',
            execution_from_json)
    refused(ex(lambda d: d["evidence"].update(network="wide")), "$.evidence.network", execution_from_json)
    refused(ex(lambda d: d["evidence"]["raw"].update(pairs=[[4444]])), "$.evidence.raw.pairs[0]: expected a list of 2",
            execution_from_json)
    refused(ex(lambda d: d.update(backend="static")), "$.backend", execution_from_json)
    refused(ex(lambda d: d.update(exit_code=1.5)), "$.exit_code: expected an integer", execution_from_json)


# --- requests the server refuses -----------------------------------------------------------


def test_a_run_request_is_read_strictly() -> None:
    good = wire(run_request(build_plan(POLICY)))

    def bad(change: Callable[[dict[str, Any]], None], path: str) -> None:
        data = copy.deepcopy(good)
        change(data)
        with pytest.raises(TransportError) as err:
            parse_run_request(data)
        assert str(err.value).startswith(path), str(err.value)

    bad(lambda d: d.update(plan={"mounts": []}), "$.plan: unknown field")
    bad(lambda d: d.pop("probes"), "$.probes: missing")
    bad(lambda d: d.update(probes=["read-ssh-key", "net-teleport"]), "$.probes[1]")
    bad(lambda d: d.update(probes=["read-ssh-key", "read-ssh-key"]), "$.probes[1]")
    bad(lambda d: d.update(probes=[]), "$.probes")
    bad(lambda d: d.update(sandbox="baseline"), "$.policy")
    bad(lambda d: d["policy"]["filesystem"].update(allowRead=[7]), "$.policy.filesystem.allowRead[0]")


def test_an_execution_request_checks_the_job_against_the_world() -> None:
    plan = build_plan(POLICY)
    good = wire(execution_request(plan, Job("print(1)")))
    for change, path in (
        (lambda d: d["job"].update(plant={"/var/run/docker.sock": "x"}), "$.job: plant"),
        (lambda d: d["job"].update(env={"PATH": "/evil"}), "$.job: env"),
        (lambda d: d["job"].update(timeout_s=1000), "$.job: timeout_s"),
        (lambda d: d["job"].update(timeout_s="20"), "$.job.timeout_s"),
        (lambda d: d["job"].pop("replay"), "$.job.replay: missing"),
        (lambda d: d["job"].update(mounts=["/"]), "$.job.mounts: unknown field"),
    ):
        data = copy.deepcopy(good)
        change(data)
        with pytest.raises(TransportError) as err:
            parse_execution_request(data, WORLD)
        assert str(err.value).startswith(path), str(err.value)


# --- one JSON form of a run ----------------------------------------------------------------


def _fixture_results() -> list[RunResult]:
    """Results of real fixtures: every example and solution policy predicted, the plain container's, and a
    Docker-shaped one with evidence, notes, an extra and a scope."""
    from pathlib import Path

    from grader import load_policy as load

    repo = Path(__file__).resolve().parents[3]
    files = sorted([*(repo / "examples").glob("*.json"), *(repo / "solutions").glob("*.json")])
    assert len(files) >= 5
    return [*(predict(load(f)) for f in files), predict(None), real_result()]


@pytest.mark.parametrize("result", _fixture_results(), ids=lambda r: f"{r.backend}-{r.sandbox}-{len(r.probes)}")
def test_a_runs_one_json_form_reads_back_as_the_same_result_and_the_cli_shape_is_a_view_of_it(result: RunResult) -> None:
    from grader.grading.report import result_json

    form = result.to_json()
    assert result_to_json(result) == form  # the run service sends the one form as it is
    back = result_from_json(wire(form), WORLD)
    assert back == result and back.to_json() == form
    view = result_json(result)  # the CLI's --json: the same values, fewer keys
    assert view["probes"] == [p if result.backend != "static" else {k: v for k, v in p.items() if k != "evidence"}
                              for p in form["probes"]]
    assert {k: view[k] for k in view if k not in ("probes", "seconds")} == {k: form[k] for k in view if k not in ("probes", "seconds")}
    assert "extra" not in view and ("sandbox" in view) == (result.sandbox == "baseline")
