"""The service's error bodies and JSON paths (grader/hosted/problems.py)."""

from __future__ import annotations

from grader.hosted.problems import ServiceError, invalid, json_path


def test_json_paths_are_the_contracts() -> None:
    assert json_path("/filesystem/allowRead/0", "$.policy") == "$.policy.filesystem.allowRead[0]"
    assert json_path("/", "$.policy") == "$.policy"
    assert json_path("/a~1b/c~0d") == "$['a/b']['c~d']"


def test_invalid_lists_every_problem_and_names_the_first() -> None:
    exc = invalid([("$.a", "is required."), ("$.b", "unknown field.")])
    assert (exc.status, exc.code) == (400, "invalid")
    assert exc.body() == {"error": {"code": "invalid", "message": "$.a: is required. (and 1 more problem)",
                                    "problems": [{"path": "$.a", "message": "is required."},
                                                 {"path": "$.b", "message": "unknown field."}]}}


def test_an_empty_list_is_still_an_error() -> None:
    assert invalid([]).body()["error"]["problems"] == [{"path": "$", "message": "the request is not valid."}]


def test_a_service_error_carries_its_limit() -> None:
    exc = ServiceError(429, "rate_limited", "slow down", limit="3/min")
    assert exc.body() == {"error": {"code": "rate_limited", "message": "slow down", "limit": "3/min"}}
