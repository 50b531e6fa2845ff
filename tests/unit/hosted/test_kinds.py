"""What the service runs, and the checks a body passes before a job is queued (grader/hosted/kinds.py)."""

from __future__ import annotations

from typing import Any

import pytest

from grader.hosted.kinds import KINDS, Kind, check_body
from grader.hosted.problems import ServiceError


def _problems(route: str, body: Any) -> list[dict[str, str]]:
    with pytest.raises(ServiceError) as info:
        check_body(route, body)
    assert info.value.status == 400 and info.value.code == "invalid"
    problems: list[dict[str, str]] = info.value.body()["error"]["problems"]
    return problems


def test_the_table_has_the_three_cli_kinds_and_the_remote_backends_two() -> None:
    assert {k: v.name for k, v in KINDS.items()} == {
        "probe": "probe", "grade": "grade", "attack": "attack", "runs": "run", "executions": "execution"}


def test_a_run_request_is_checked_before_it_is_queued_naming_each_path() -> None:
    # a client that sends a plan's worth of its own (mounts, a host path) instead of the policy is refused whole
    problems = _problems("runs", {"sandbox": "policy", "policy": {"filesystem": {}}, "probes": [], "mounts": ["/"]})
    assert any(p["path"].startswith("$") and "mounts" in p["path"] + p["message"] for p in problems), problems
    assert _problems("runs", {"sandbox": "sideways", "policy": None, "probes": []})[0]["path"] == "$.sandbox"


def test_an_execution_request_is_checked_against_the_servers_world() -> None:
    job = {"code": "print(1)", "plant": {"/etc/shadow": "x"}, "env": {}, "timeout_s": 20, "replay": False, "signer": None}
    problems = _problems("executions", {"policy": None, "job": job})
    assert any("plant" in p["path"] + p["message"] for p in problems), problems


def test_an_unknown_kind_is_a_404_naming_the_kinds() -> None:
    with pytest.raises(ServiceError) as info:
        check_body("runz", {})
    assert info.value.status == 404 and "probe" in info.value.message


def test_another_kind_is_one_entry() -> None:
    table = {"echo": Kind("echo", lambda body: body)}
    assert check_body("echo", {"a": 1}, table).run({"a": 1}) == {"a": 1}


def test_a_policy_problem_names_its_json_path() -> None:
    problems = _problems("probe", {"policy": {"filesystem": {"allowRead": [3]}}})
    assert problems[0]["path"].startswith("$.policy.filesystem.allowRead[0]")


def test_fields_are_checked_strictly() -> None:
    assert _problems("probe", {"policy": {}, "polcy": {}}) == [
        {"path": "$.polcy", "message": 'unknown field; this kind takes "policy".'}]
    assert _problems("probe", {}) == [{"path": "$.policy", "message": "is required."}]
    assert _problems("probe", []) == [{"path": "$", "message": "must be a JSON object."}]
    assert _problems("probe", {"policy": "policy.json"})[0]["path"] == "$.policy"


def test_grade_needs_a_known_task_and_accepts_an_invalid_policy() -> None:
    assert _problems("grade", {"task": "no-such-task", "policy": {}})[0]["path"] == "$.task"
    assert _problems("grade", {"task": 3, "policy": {}})[0]["path"] == "$.task"
    from grader.grading.tasks import all_tasks

    task = all_tasks()[0].id
    check_body("grade", {"task": task, "policy": {"filesystem": {"allowRead": [3]}}})  # graded 0, as the CLI does
    assert _problems("grade", {"task": task, "policy": {}, "semantics": "bwrap"})[0]["path"] == "$.semantics"


def test_attack_needs_a_level_and_a_script() -> None:
    assert _problems("attack", {"level": 999, "source": "print(1)"})[0]["path"] == "$.level"
    assert _problems("attack", {"level": True, "source": "print(1)"})[0]["path"] == "$.level"
    assert _problems("attack", {"level": 1, "source": "  "})[0]["path"] == "$.source"
    assert _problems("attack", {"level": 1, "source": "x" * 70_000})[0]["path"] == "$.source"
    assert _problems("attack", {"level": 1, "source": "print(1)", "policy": {}})[0]["path"] == "$.policy"
    check_body("attack", {"level": 1, "source": "print(1)"})


def test_a_run_checks_its_body_again() -> None:
    """A job in Redis is data anyone with access could have written: the worker does not trust the API's check."""
    with pytest.raises(ServiceError):
        KINDS["probe"].run({"policy": {"filesystem": {"allowRead": [3]}}})


@pytest.mark.parametrize("route, runtime", [("attack", "runsc"), ("executions", "runsc"), ("probe", None),
                                            ("grade", None), ("runs", None)])
def test_only_a_tenants_code_asks_for_the_code_runtime(route: str, runtime: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """An attack or an execution runs the tenant's code: SANDBOX_LAB_CODE_RUNTIME (gVisor). A probe, a grade or a
    run carries a policy, never code: SANDBOX_LAB_RUNTIME (None here: the backend reads it). The gaming case: an
    execution, whose job code is the client's, must never run under the probes' runtime."""
    from grader import backends
    from grader.hosted import kinds

    asked: list[Any] = []

    class Stop(Exception):
        pass

    def get(name: str, **kwargs: Any) -> Any:
        asked.append((name, kwargs.get("runtime")))
        raise Stop

    monkeypatch.setattr(backends, "get", get)
    monkeypatch.delenv("SANDBOX_LAB_SERVICE_BACKEND", raising=False)
    monkeypatch.setenv("SANDBOX_LAB_CODE_RUNTIME", "runsc")
    monkeypatch.delenv("SANDBOX_LAB_RUNTIME", raising=False)
    job = {"code": "print(1)", "plant": {}, "env": {}, "timeout_s": 20, "replay": False, "signer": None}
    bodies = {"attack": {"level": 1, "source": "print(1)"}, "executions": {"policy": None, "job": job},
              "probe": {"policy": {}}, "grade": {"task": kinds_task(), "policy": {}},
              "runs": {"sandbox": "baseline", "policy": None, "probes": []}}
    with pytest.raises(Stop):
        KINDS[route].run(bodies[route])
    assert asked == [("docker", runtime)]


def kinds_task() -> str:
    from grader.grading.tasks import task_ids

    return task_ids()[0]
