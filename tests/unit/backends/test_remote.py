"""The remote backend (``grader.backends.remote``) against a stand-in run service on loopback (tests/stubservice.py):
the job protocol, where a result says it ran, the labelled static fallback on 401/429/503/unreachable, the
deadline, and every answer that does not answer the plan refused, never an outcome."""

from __future__ import annotations

import json
import socket
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from grader import backends, load_policy, predict
from grader.backends.remote import RemoteBackend
from grader.core.errors import BackendError
from grader.core.execution import Job
from grader.core.outcomes import ProbeOutcome
from grader.core.plan import Hardening, build_plan
from grader.core.transport import execution_to_json, parse_execution_request, parse_run_request, result_to_json
from grader.core.wording import backend_phrase, ran_at_note
from grader.core.world import load_world
from stubservice import StubService
from test_transport import execution

WORLD = load_world()
POLICY = load_policy({"filesystem": {"allowRead": ["/project"]}, "network": {"allowedDomains": ["pypi.org"]}})
TOKEN = "t0k3n-for-tests"


def as_if_run(route: str, body: Any) -> Any:
    """A canned service: the prediction for the policy it was sent, shaped as a Docker run with evidence."""
    if route == "/v1/executions":
        parse_execution_request(body, WORLD)
        return execution_to_json(execution())
    req = parse_run_request(body)
    static = predict(req.policy)
    probes = tuple(ProbeOutcome(p.id, p.kind, p.outcome, p.explanation, (f"evidence of {p.id}",))
                   for p in static.probes if p.id in req.probes)
    return result_to_json(replace(static, backend="docker", probes=probes, run_id="sl-00000000ab", seconds=1.5))


def client(service: StubService, **kw: Any) -> RemoteBackend:
    return RemoteBackend(service.url, kw.pop("token", TOKEN), sleep=lambda s: None, **kw)


def test_a_run_goes_through_the_job_protocol_and_says_where_it_ran() -> None:
    with StubService(as_if_run, started_polls=3) as service:
        result = client(service).run(build_plan(POLICY))
    assert result.backend == "docker" and result.run_id == "sl-00000000ab"
    assert [p.outcome for p in result.probes] == [p.outcome for p in predict(POLICY).probes]
    assert result.policy is POLICY and result.findings is not None
    assert result.extra["ran_at"] == service.url and result.notes[-1] == f"ran in a real sandbox at {service.url}"
    assert result.ran_at == service.url  # the field code reads; the note says it to people
    phrase = backend_phrase(result.backend, result.notes, ran_at=result.ran_at)
    assert phrase.startswith(f"ran in a real sandbox at {service.url} (docker): ") and "predicted" not in phrase
    methods = [(m, p) for m, p, _ in service.requests]
    assert methods[0] == ("POST", "/v1/runs") and methods[1:] == [("GET", "/v1/jobs/job-1")] * (len(methods) - 1)
    assert len(methods) >= 5  # three "started", then "finished"
    assert all(h.get("Authorization") == f"Bearer {TOKEN}" for h in service.headers)
    sent = service.requests[0][2]
    assert set(sent) == {"sandbox", "policy", "probes"}  # a policy and probe ids; never a plan


def test_the_baseline_and_a_subset_of_probes() -> None:
    plan = replace(build_plan(None), probes=("read-ssh-key", "net-direct-ip"))
    with StubService(as_if_run) as service:
        result = client(service).run(plan)
    assert result.sandbox == "baseline" and [p.id for p in result.probes] == ["read-ssh-key", "net-direct-ip"]


def test_an_execution_comes_back_with_its_evidence() -> None:
    with StubService(as_if_run) as service:
        ex = client(service).execute(build_plan(POLICY), Job("print(1)", signer="k" * 32))
    # says where it ran, as a run's result does: in the field code reads, and in a note for people
    assert ex == replace(execution(), notes=(ran_at_note(service.url),), ran_at=service.url)
    assert backend_phrase(ex.backend, ex.notes, ran_at=ex.ran_at).startswith(f"ran in a real sandbox at {service.url} (docker)")
    job = service.requests[0][2]["job"]
    assert job["signer"] == "k" * 32 and job["code"] == "print(1)"


@pytest.mark.parametrize("status, words", [(401, "the token was refused"), (429, "over quota"),
                                           (503, "the service is unavailable")])
def test_refusals_give_the_static_prediction_labelled(status: int, words: str) -> None:
    with StubService(as_if_run, refuse=None if status == 401 else status) as service:
        backend = client(service, token="wrong" if status == 401 else TOKEN)
        result = backend.run(build_plan(POLICY))
    assert result.backend == "static" and result.probes == predict(POLICY).probes
    note = result.notes[0]
    assert note.startswith(f"predicted, not run: the run service at {service.url} could not run it (HTTP {status}, {words}")
    assert "wrong" not in note and TOKEN not in note  # the token is never said
    assert result.codes == ("run-service",)
    assert backend_phrase(result.backend, result.codes).startswith("predicted: the run service could not run this")
    with StubService(as_if_run, refuse=None if status == 401 else status) as service:
        with pytest.raises(BackendError, match="could not run it.*cannot be predicted"):
            client(service, token="wrong" if status == 401 else TOKEN).execute(build_plan(POLICY), Job("print(1)"))


def test_no_token_says_which_variable_to_set() -> None:
    with StubService(as_if_run) as service:
        result = client(service, token="").run(build_plan(POLICY))
    assert "no token: set SANDBOX_LAB_TOKEN" in result.notes[0]


def test_an_unreachable_service_gives_the_static_prediction_labelled() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = RemoteBackend(f"http://127.0.0.1:{port}", TOKEN).run(build_plan(POLICY))
    assert result.backend == "static" and "cannot reach it" in result.notes[0]
    assert all(not p.evidence for p in result.probes)


def test_a_503_while_an_accepted_job_is_polled_is_waited_through() -> None:
    # Redis restarting under the service: the job is in its queue, so the client keeps polling
    with StubService(as_if_run, unavailable_polls=3) as service:
        result = client(service).run(build_plan(POLICY))
    assert result.backend == "docker" and result.extra["ran_at"] == service.url
    assert [m for m, _, _ in service.requests].count("GET") >= 4


def test_a_service_unavailable_until_the_deadline_gives_the_labelled_prediction() -> None:
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    with StubService(as_if_run, unavailable_polls=10**6) as service:
        backend = RemoteBackend(service.url, TOKEN, deadline_s=30, sleep=sleep, clock=lambda: now[0])
        result = backend.run(build_plan(POLICY))
    assert result.backend == "static" and result.probes == predict(POLICY).probes
    assert "HTTP 503" in result.notes[0] and "stayed unavailable until the 30 s deadline" in result.notes[0]


def test_a_job_that_never_finishes_ends_at_the_deadline() -> None:
    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    with StubService(as_if_run, never_finish=True) as service:
        backend = RemoteBackend(service.url, TOKEN, deadline_s=30, sleep=sleep, clock=lambda: now[0])
        with pytest.raises(BackendError, match="did not finish job job-1 within 30 s .still started.; nothing was judged"):
            backend.run(build_plan(POLICY))
    assert 30 <= now[0] <= 31 and sum(1 for m, _, _ in service.requests if m == "GET") < 40  # backed off


def test_a_failed_job_is_an_error_not_a_verdict() -> None:
    with StubService(as_if_run, fail={"code": "worker_lost", "message": "the worker died"}) as service:
        with pytest.raises(BackendError, match="worker_lost: the worker died"):
            client(service).run(build_plan(POLICY))


def mangled(change: Any) -> Any:
    def mangle(result: Any) -> Any:
        change(result)
        return result
    return mangle


@pytest.mark.parametrize("change, words", [
    (lambda r: r["probes"][0].pop("evidence"), "does not parse: .*evidence: missing"),
    (lambda r: r["probes"][0].update(evidence=[]), "rests on evidence"),
    (lambda r: r["probes"].append(dict(r["probes"][0], id="net-teleport")), "net-teleport"),
    (lambda r: r["probes"].pop(), "other probes than asked .missing: \\['"),
    (lambda r: r.update(backend="static", probes=[dict(p, evidence=[]) for p in r["probes"]]), "not a real run"),
    (lambda r: r["policy"]["network"].update(allowedDomains=["*.attacker.example"]), "another policy"),
    (lambda r: r.update(sandbox="baseline", policy=None), "baseline"),
    (lambda r: r["notes"].append("ran in a real sandbox at https://elsewhere"), "only the client says"),
    (lambda r: r.update(ran_at="https://elsewhere"), "only the client says"),
    (lambda r: r["probes"][0].update(outcome="passed"), "does not parse: \\$.probes\\[0\\].outcome"),
])
def test_an_answer_that_does_not_answer_the_plan_is_an_error(change: Any, words: str) -> None:
    with StubService(as_if_run, mangle=mangled(change)) as service:
        with pytest.raises(BackendError, match=words):
            client(service).run(build_plan(POLICY))


@pytest.mark.parametrize("change, words", [
    (lambda ex: ex["notes"].append("ran in a real sandbox at https://elsewhere"), "only the client says"),
    (lambda ex: ex.update(ran_at="https://elsewhere"), "only the client says"),
    (lambda ex: ex.pop("ran_at"), "does not parse: \\$.ran_at: missing"),
    (lambda ex: ex.update(ran_at=None), "does not parse: \\$.ran_at: expected a string, got null"),
])
def test_an_execution_that_says_where_it_ran_or_is_malformed_is_an_error(change: Any, words: str) -> None:
    def answer(route: str, body: Any) -> Any:
        out = as_if_run(route, body)
        change(out)
        return out

    with StubService(answer) as service:
        with pytest.raises(BackendError, match=words):
            client(service).execute(build_plan(POLICY), Job("print(1)"))


@pytest.mark.parametrize("raw_job, words", [
    (lambda s: dict(s, status="done"), "not a job's status"),
    (lambda s: dict(s, surprise=1), "not the contract's"),
    (lambda s: "finished", "not the contract's"),
    (lambda s: dict(s, status="finished", result=None), "without a result"),
    (lambda s: dict(s, job="job-9"), "not 'job-1'"),
])
def test_a_malformed_job_answer_is_an_error(raw_job: Any, words: str) -> None:
    with StubService(as_if_run, raw_job=raw_job) as service:
        with pytest.raises(BackendError, match=words):
            client(service).run(build_plan(POLICY))


def test_another_status_is_an_error_not_a_fallback() -> None:
    with StubService(as_if_run, refuse=500) as service:
        with pytest.raises(BackendError, match="HTTP 500: internal"):
            client(service).run(build_plan(POLICY))


def test_a_redirect_is_not_followed_with_the_token() -> None:
    with StubService(as_if_run) as elsewhere, StubService(as_if_run, redirect=f"{elsewhere.url}/v1/runs") as service:
        with pytest.raises(BackendError, match="HTTP 303"):
            client(service).run(build_plan(POLICY))
    assert elsewhere.requests == []


def test_a_plan_the_service_would_not_build_is_refused_before_sending() -> None:
    with StubService(as_if_run) as service:
        with pytest.raises(BackendError, match="hardening"):
            client(service).run(replace(build_plan(POLICY), hardening=Hardening(timeout_s=5)))
    assert service.requests == []


def test_get_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "remote" in backends.BACKEND_NAMES
    monkeypatch.delenv("SANDBOX_LAB_SERVICE_URL", raising=False)
    with pytest.raises(BackendError, match="SANDBOX_LAB_SERVICE_URL"):
        backends.get("remote")
    monkeypatch.setenv("SANDBOX_LAB_SERVICE_URL", "https://runs.example.org/")
    monkeypatch.setenv("SANDBOX_LAB_TOKEN", "secret-token")
    monkeypatch.setenv("SANDBOX_LAB_BACKEND", "remote")
    with backends.default() as backend:
        assert backend.name == "remote" and isinstance(backend, RemoteBackend)
        assert backend.url == "https://runs.example.org" and "secret-token" not in repr(backend)
    monkeypatch.setenv("SANDBOX_LAB_SERVICE_URL", "file:///etc/passwd")
    with pytest.raises(BackendError, match="not an http"):
        backends.get("remote")
    for url in ("https://me:secret@runs.example.org", "https://runs.example.org/?token=secret"):
        monkeypatch.setenv("SANDBOX_LAB_SERVICE_URL", url)
        with pytest.raises(BackendError, match="SANDBOX_LAB_TOKEN") as err:
            backends.get("remote")
        assert "secret" not in str(err.value)


def test_the_board_says_which_service_runs_it() -> None:
    from grader.notebook.board import describe_backend

    text = describe_backend(RemoteBackend("https://runs.example.org", TOKEN))
    assert text.startswith("Backend: remote. Results below: runs in a real sandbox on the run service")
    assert "https://runs.example.org" in text



EXAMPLE = str(Path(__file__).resolve().parents[3] / "examples" / "naive.json")


def _cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, url: str, *argv: str) -> tuple[int, str, str]:
    from grader.cli import main as cli

    monkeypatch.setenv("SANDBOX_LAB_SERVICE_URL", url)
    monkeypatch.setenv("SANDBOX_LAB_TOKEN", TOKEN)
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def test_the_command_line_runs_on_the_service(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    with StubService(as_if_run) as service:
        code, out, err = _cli(capsys, monkeypatch, service.url, "probe", EXAMPLE, "--backend", "remote", "--json")
        assert code == 0 and json.loads(out)["backend"] == "docker"
        assert f"note: ran in a real sandbox at {service.url}" in err
        code, out, _ = _cli(capsys, monkeypatch, service.url, "probe", EXAMPLE, "--backend", "remote")
        assert code == 0 and f"ran in a real sandbox at {service.url} (docker)" in out


def test_the_command_line_falls_back_to_a_labelled_prediction(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    with StubService(as_if_run, refuse=429) as service:
        code, out, err = _cli(capsys, monkeypatch, service.url, "probe", EXAMPLE, "--backend", "remote", "--json")
    assert code == 0 and json.loads(out)["backend"] == "static"
    assert f"note: predicted, not run: the run service at {service.url} could not run it (HTTP 429, over quota" in err


def test_the_command_line_says_a_broken_answer_and_exits_3(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    with StubService(as_if_run, mangle=mangled(lambda r: r["probes"][0].pop("evidence"))) as service:
        code, out, err = _cli(capsys, monkeypatch, service.url, "probe", EXAMPLE, "--backend", "remote")
    assert code == 3 and out == "" and "evidence: missing" in err


def test_a_ticket_answered_from_the_cache_is_read_as_its_job() -> None:
    # the service answers a request it ran before as 202 "finished" (docs/service-api.md): the client reads the job
    with StubService(as_if_run, post_status="finished") as service:
        result = client(service).run(build_plan(POLICY))
    assert result.backend == "docker" and result.run_id == "sl-00000000ab"
    with StubService(as_if_run, post_status="started") as service, pytest.raises(BackendError, match="without a queued job"):
        client(service).run(build_plan(POLICY))  # any other status at once is not the contract's


# --- a grade run remotely says where it ran -------------------------------------------------------------


def test_a_grade_run_remotely_says_where_it_ran_in_text_json_and_the_notebook(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from grader.cli.main import main
    from grader.grading.notebook import assert_passed
    from grader.grading.grade import grade
    from grader.grading.tasks import load_task

    solution = str(Path(__file__).resolve().parents[3] / "solutions" / "fix-the-naive-setup.json")
    with StubService(as_if_run) as service:
        monkeypatch.setenv("SANDBOX_LAB_SERVICE_URL", service.url)
        monkeypatch.setenv("SANDBOX_LAB_TOKEN", TOKEN)
        assert main(["grade", "--task", "fix-the-naive-setup", solution, "--backend", "remote"]) == 0
        text = capsys.readouterr().out
        assert main(["grade", "--task", "fix-the-naive-setup", solution, "--backend", "remote", "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        result = grade(load_task("fix-the-naive-setup"), load_policy(solution), client(service))
    head = text.splitlines()[0]
    assert head.startswith(f"fix-the-naive-setup: 13/13 (ran in a real sandbox at {service.url} (docker): ")
    assert "ran in Docker" not in text and text.count(service.url) == 1  # said once, in the head
    assert data["backend"] == "docker" and data["notes"] == [f"ran in a real sandbox at {service.url}"]
    assert_passed(result, "build-works")
    assert f"(ran in a real sandbox at {service.url}, docker)" in capsys.readouterr().out


def test_only_a_real_run_with_the_clients_note_says_it_ran_remotely() -> None:
    from grader.core.wording import ran_at_note
    from grader.grading.grade import Grade

    here = Grade("t", "docker", ())
    assert "(ran in Docker: " in here.feedback()
    # gaming: a prediction carrying the note (a static stand-in) never reads as a real run; the note stays visible
    static = Grade("t", "static", (), notes=(ran_at_note("https://svc"),))
    assert "ran in a real sandbox" not in static.feedback().splitlines()[0]
    assert "note: ran in a real sandbox at https://svc" in static.feedback()
    # a note that only mentions the words somewhere inside is not where the run was made
    odd = Grade("t", "docker", (), notes=("it never ran in a real sandbox at https://svc",))
    assert "(ran in Docker: " in odd.feedback() and "note: it never ran" in odd.feedback()


def test_where_a_run_was_made_is_read_from_its_field_never_from_the_words_of_its_notes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reworded notes change nothing: the field says where a run was made, and a note that only says so is a note."""
    from grader.core import wording
    from grader.grading.grade import Grade

    monkeypatch.setattr(wording, "RAN_AT", "made over at ")  # the words change; the decision must not
    there = Grade("t", "docker", (), notes=("it ran somewhere else, we hear",), ran_at="https://svc")
    assert "https://svc (docker): " in there.feedback().splitlines()[0]
    assert "note: it ran somewhere else" in there.feedback()
    said = Grade("t", "docker", (), notes=("ran in a real sandbox at https://svc",))
    assert "(ran in Docker: " in said.feedback().splitlines()[0]
    assert backend_phrase("docker").startswith("ran in Docker: ")
