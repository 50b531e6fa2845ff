"""Progress kept by the service under a token: ``GET``/``PUT /v1/progress`` (grader/hosted/progress_store.py, app.py),
on a Redis of its own: strict parsing by the progress file's parser, one record per token id, no tenant reaching another's."""

from __future__ import annotations

import json
import warnings
from typing import Any, Iterator

import pytest
from hosted_fixtures import auth as _auth, client, redis_server, settings, store  # noqa: F401 - fixtures
from starlette.exceptions import StarletteDeprecationWarning

from grader.hosted.app import create_app
from grader.hosted.jobs import JobStore, open_redis
from grader.hosted.progress_store import ProgressStore, empty_record
from grader.hosted.tokens import issue_token, read_tokens, revoke_token

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

RECORD = {"version": 2, "done": {"l01": 100.0, "t-readonly": 150.5}, "first": {"q1": {"at": 120.0, "result": "right", "score": 1.0}},
          "learner": "abcd", "levels": {"ctf-1": {"attempts": 3, "hints": 1, "captured": None}}}




def _error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["message"]
    return body["error"]


def test_a_token_without_a_record_gets_the_empty_one_and_a_put_replaces_it(client: TestClient, settings: Any) -> None:
    alice = _auth(settings, "alice")
    assert client.get("/v1/progress", headers=alice).json() == empty_record() == {"version": 2, "done": {}, "first": {}}
    put = client.put("/v1/progress", json=RECORD, headers=alice)
    assert put.status_code == 200 and put.json() == RECORD
    assert client.get("/v1/progress", headers=alice).json() == RECORD
    smaller = {"version": 2, "done": {"l01": 100}, "first": {}}
    assert client.put("/v1/progress", json=smaller, headers=alice).json() == {"version": 2, "done": {"l01": 100.0}, "first": {}}
    assert client.get("/v1/progress", headers=alice).json()["done"] == {"l01": 100.0}  # replaced, not merged


def test_one_tenant_never_reads_or_writes_anothers(client: TestClient, settings: Any, store: JobStore) -> None:
    alice, bob = _auth(settings, "alice"), _auth(settings, "bob")
    client.put("/v1/progress", json=RECORD, headers=alice)
    assert client.get("/v1/progress", headers=bob).json() == empty_record()
    # gaming: naming the other tenant in the body, the path or the query reaches nothing of theirs
    _error(client.put("/v1/progress", json={**RECORD, "token": "alice"}, headers=bob), 400, "invalid")
    _error(client.get("/v1/progress/alice", headers=bob), 404, "not_found")
    client.put("/v1/progress?name=alice", json={"version": 2, "done": {}, "first": {}}, headers=bob)
    assert client.get("/v1/progress", headers=alice).json() == RECORD
    # the key is the token's id: neither its secret nor its name is in Redis's key space
    tokens = read_tokens(settings.tokens_file)
    keys = sorted(k.decode() for k in store.conn.scan_iter(f"{settings.prefix}progress:*"))
    assert keys == sorted(f"{settings.prefix}progress:{t.id}" for t in tokens)
    secrets = [h["Authorization"].split()[1] for h in (alice, bob)]
    assert not any(s in k for s in secrets for k in keys) and not any(n in k for n in ("alice", "bob") for k in keys)


def test_no_token_an_unknown_or_a_revoked_one_is_401(client: TestClient, settings: Any) -> None:
    alice = _auth(settings, "alice")
    _error(client.get("/v1/progress"), 401, "unauthorized")
    _error(client.put("/v1/progress", json=RECORD, headers={"Authorization": "Bearer sl_guess"}), 401, "unauthorized")
    client.put("/v1/progress", json=RECORD, headers=alice)
    revoke_token(settings.tokens_file, "alice")
    _error(client.get("/v1/progress", headers=alice), 401, "unauthorized")
    _error(client.put("/v1/progress", json=RECORD, headers=alice), 401, "unauthorized")


@pytest.mark.parametrize(("body", "path"), [
    ({"version": 2, "done": {"l01": "yesterday"}, "first": {}}, "$.done.l01"),
    ({"version": 3, "done": {}, "first": {}}, "$.version"),
    ({"version": 2, "done": {}, "first": {"q1": {"at": 1, "result": "right", "score": 2}}}, "$.first.q1.score"),
    ({"version": 2, "done": {}, "first": {}, "answers": {"q1": "b"}}, "$.answers"),  # never answers
    ({"version": 2, "done": {}, "first": {}, "levels": {"x": {"attempts": -1, "hints": 0, "captured": None}}},
     "$.levels.x.attempts"),
    ({"done": {}}, "$.version"),
    ([], "$"),
])
def test_a_record_that_does_not_parse_is_400_naming_its_json_path(client: TestClient, settings: Any,
                                                                  body: Any, path: str) -> None:
    alice = _auth(settings, "alice")
    err = _error(client.put("/v1/progress", json=body, headers=alice), 400, "invalid")
    assert err["message"].startswith(path) and any(p["path"] == path for p in err["problems"])
    assert client.get("/v1/progress", headers=alice).json() == empty_record()  # nothing stored


def test_bodies_the_json_parser_refuses_and_the_body_limit(client: TestClient, settings: Any) -> None:
    alice = _auth(settings, "alice")
    dup = b'{"version": 2, "done": {"l01": 1, "l01": 2}, "first": {}}'
    assert "twice" in _error(client.put("/v1/progress", content=dup, headers=alice), 400, "invalid")["message"]
    _error(client.put("/v1/progress", content=b'{"version": 2, "done": {"l01": NaN}, "first": {}}', headers=alice),
           400, "invalid")
    big = {"version": 2, "done": {f"item-{i:06d}": 1.0 for i in range(20000)}, "first": {}}
    assert len(json.dumps(big)) > 256 * 1024
    _error(client.put("/v1/progress", json=big, headers=alice), 413, "too_large")
    _error(client.post("/v1/progress", json=RECORD, headers=alice), 405, "method_not_allowed")


def test_a_stored_record_that_no_longer_parses_is_an_error_never_the_empty_one(settings: Any, store: JobStore) -> None:
    issue_token(settings.tokens_file, "alice")
    (alice,) = read_tokens(settings.tokens_file)
    records = ProgressStore(store.conn, settings.prefix)
    store.conn.set(f"{settings.prefix}progress:{alice.id}", b'{"version": 9}')
    from grader.hosted.problems import ServiceError

    with pytest.raises(ServiceError) as caught:
        records.get(alice)
    assert caught.value.status == 500 and caught.value.code == "unreadable"


# --- issue 39: captures come from the service's own runs -----------------------------------------------


def test_a_put_cannot_mark_a_level_captured(client: TestClient, settings: Any) -> None:
    """Level 8, which no attack can capture, was stored captured with 0 attempts: a client's notes are kept, its
    captures are not; what says captured is the service's own record of the runs it made."""
    alice = _auth(settings, "alice")
    forged = {"version": 2, "done": {"l01": 100.0}, "first": {},
              "levels": {"ctf:l08-scoped": {"attempts": 0, "hints": 2, "captured": 1234.5}}}
    put = client.put("/v1/progress", json=forged, headers=alice)
    assert put.status_code == 200
    kept = {"version": 2, "done": {"l01": 100.0}, "first": {},
            "levels": {"ctf:l08-scoped": {"attempts": 0, "hints": 2, "captured": None}}}
    assert put.json() == kept and client.get("/v1/progress", headers=alice).json() == kept


def test_a_capture_the_service_ran_is_kept_whatever_is_put(client: TestClient, settings: Any, store: JobStore,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from rq import SimpleWorker
    from rq.serializers import JSONSerializer

    import grader.hosted.jobs as jobs
    from grader.hosted.kinds import KINDS, Kind

    outcomes = iter([False, True])  # a judged miss, then a capture: what the worker's attack runs returned
    fake = Kind("attack", lambda body: {"level": 1, "captured": next(outcomes)}, None)
    monkeypatch.setattr(jobs, "KINDS", {**KINDS, "attack": fake})
    alice = _auth(settings, "alice")
    (token,) = read_tokens(settings.tokens_file)
    for n in range(2):
        store.submit(token, "attack", {"level": 1, "source": f"print({n})"})
        SimpleWorker([store.queue], connection=store.conn, serializer=JSONSerializer).work(burst=True)
    level = client.get("/v1/progress", headers=alice).json()["levels"]["ctf:l01-plain-container"]
    assert level["attempts"] == 2 and isinstance(level["captured"], float)
    # a client that sends the level uncaptured, with fewer attempts, does not undo what the service saw
    put = client.put("/v1/progress", json={"version": 2, "done": {}, "first": {},
                                           "levels": {"ctf:l01-plain-container": {"attempts": 0, "hints": 1, "captured": None}}},
                     headers=alice).json()
    assert put["levels"]["ctf:l01-plain-container"] == {"attempts": 2, "hints": 1, "captured": level["captured"]}
    # another tenant's runs are not this one's
    assert "levels" not in client.get("/v1/progress", headers=_auth(settings, "bob")).json()
