"""gaps.py: the demos of what a policy does not cover, checked without Docker (tests/integration/test_gaps_docker.py runs them).

Also the pieces the demos stand on: a download-only host whose request URLs the
attacker reads (the URL counts, the body does not), and the signing agent behind
a Unix socket (the key never crosses it).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from grader.backends.runs import SigningAgent
from grader.backends.static import StaticBackend
from grader.core.evidence import Evidence, canary_sightings
from grader.core.execution import Execution, Job, sightings, signature
from grader.course.gaps import GAPS, demonstrate, gap, proxy_saw, script
from grader.core.policy import load_policy
from grader.course.quiz import question
from grader.core.world import load_world
import fakewire

WORLD = load_world()
SOURCE = "/project/src/main.py"


def _ex(canaries: dict[str, str] | None = None, **logs: object) -> Execution:
    ev = Evidence(token="t0k", canaries=canaries or {}, records=(), before={}, after={}, network="proxy", **logs)  # type: ignore[arg-type]
    return Execution(backend="docker", output="", exit_code=0, timed_out=False, evidence=ev)


def test_at_least_four_gaps_each_with_a_policy_a_question_and_what_real_tools_offer() -> None:
    assert len(GAPS) >= 4 and len({g.id for g in GAPS}) == len(GAPS)
    for g in GAPS:
        load_policy(dict(g.policy))  # a valid policy
        assert question(g.question).lesson == "l06-what-a-policy-misses", g.id
        assert g.predicted.startswith("predicted, not run"), g.id
        assert g.offers and g.story and gap(g.id) is g


def test_every_demo_is_a_job_the_run_accepts_and_fresh_each_time() -> None:
    for g in GAPS:
        a, b = g.demo(), g.demo()
        a.job.check(WORLD)
        assert a.wanted or a.canaries, g.id
        if a.wanted:
            assert a.wanted != b.wanted, f"{g.id}: a demo's secret is fresh per run"


def test_the_perfect_policies_keep_every_secret_file_unreadable_but_the_one_the_job_needs() -> None:
    from grader.core.analyzer import predict

    for g in GAPS:
        result = predict(load_policy(dict(g.policy)))
        readable = [o.id for o in result.probes if o.id.startswith("read-") and o.outcome == "succeeded"]
        assert readable == [], (g.id, readable)
        expected = "succeeded" if g.id == "git-credentials" else "blocked"
        assert result.outcome("exfil-secret").outcome == expected, g.id


def test_each_policy_re_opens_what_its_demo_reads_and_never_prints_the_practice_tasks_answer() -> None:
    """Reads are open by default (srt): a demo's policy hides with denyRead and re-opens with allowRead only what its job
    reads, and the lesson prints it, so it re-opens nothing of /project/src (lesson 03's task reads and writes there)."""
    from grader.core.access import access_for

    for g in GAPS:
        fs = g.policy["filesystem"]
        assert fs.get("denyRead"), g.id
        assert not any(p == "/project" or p.startswith("/project/") for p in (*fs.get("allowRead", ()), *fs.get("allowWrite", ()))), g.id
        access = access_for(load_policy(dict(g.policy)), WORLD)
        for path in g.demo().canaries:
            assert access.read(path).allowed, (g.id, path)  # the demo's job can read what it sends
    assert list(gap("url-to-stats-host").demo().canaries) == ["/app/workspace/src/index.js"]
    assert "/app/workspace/src/index.js" in script("url-to-stats-host")


def test_on_the_static_backend_nothing_runs_and_the_result_says_predicted() -> None:
    for g in GAPS:
        r = demonstrate(g.id, StaticBackend())
        assert not r.ran and not r.shown and r.hits == ()
        assert "predicted, not run" in r.text() and "exfil-secret" in r.text()


def test_the_ssh_demo_holds_the_key_outside_the_code_and_looks_for_its_signature() -> None:
    d = gap("ssh-agent-socket").demo()
    key = d.unseen["the SSH key itself"]
    assert d.job.signer == key and key not in d.job.code
    challenge = d.job.code.split('challenge = "', 1)[1].split('"', 1)[0]
    assert list(d.wanted.values()) == [signature(key, challenge)]


def test_a_job_with_a_signer_gets_its_socket_from_the_run() -> None:
    with pytest.raises(ValueError, match="SSH_AUTH_SOCK"):
        Job("pass", env={"SSH_AUTH_SOCK": "/tmp/x"}, signer="k" * 32).check(WORLD)
    with pytest.raises(ValueError, match="signer"):
        Job("pass", signer="short").check(WORLD)


def test_a_url_counts_at_a_host_whose_request_urls_are_public_and_its_body_does_not() -> None:
    secret = "ghp_0123456789abcdef0123"
    url = _ex(http=(fakewire.http(host="cdn.jsdelivr.net", method="GET", path=f"/npm/x@1/{secret.encode().hex()}.js", body=""),))
    hits = sightings(url, WORLD, {"t": secret})
    assert [(h.host, h.how) for h in hits] == [("cdn.jsdelivr.net", "HTTP GET")] and "in its URL" in hits[0].evidence
    body = _ex(http=(fakewire.http(host="cdn.jsdelivr.net", method="POST", path="/upload", body=secret),))
    assert sightings(body, WORLD, {"t": secret}) == ()
    # and the steal probe's judge agrees: a canary in a URL there, never in a body
    canary = "0123456789abcdef0123456789abcdef"
    got = _ex({SOURCE: canary}, http=(fakewire.http(host="cdn.jsdelivr.net", method="GET", path=f"/npm/s0/{canary}", body=""),))
    assert canary_sightings(got.evidence, WORLD, [SOURCE])  # type: ignore[arg-type]
    posted = _ex({SOURCE: canary}, http=(fakewire.http(host="cdn.jsdelivr.net", method="POST", path="/", body=canary),))
    assert canary_sightings(posted.evidence, WORLD, [SOURCE]) == []  # type: ignore[arg-type]
    # a download-only host without public URLs is no sink either way
    assert sightings(_ex(http=(fakewire.http(host="pypi.org", method="GET", path=f"/{secret}", body=""),)), WORLD, {"t": secret}) == ()


def test_the_proxy_saw_hosts_and_ports_only_and_not_its_own_heartbeat() -> None:
    ex = _ex(proxy=(
        fakewire.proxy(method="GET", host="heartbeat.invalid", port=80, path="/", decision="deny"),
        fakewire.proxy(method="CONNECT", host="api.github.com", port=443, path=None, decision="allow"),
    ))
    assert proxy_saw(ex) == ("CONNECT api.github.com:443 -> allow",)


def test_the_signing_agent_signs_over_its_socket_and_never_sends_the_key(tmp_path: Path) -> None:
    key = "k-" + "9" * 30
    agent = SigningAgent(tmp_path / "agent.sock", key)
    try:
        replies = []
        for line in ("SIGN hello", "GIVE KEY"):
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(tmp_path / "agent.sock"))
                s.sendall(line.encode() + b"\n")
                replies.append(s.recv(4096).decode())
    finally:
        agent.close()
    assert replies[0] == f"SIG {signature(key, 'hello')}\n"
    assert replies[1].startswith("ERR") and all(key not in r for r in replies)
    assert agent.requests == ["SIGN hello", "GIVE KEY"]
