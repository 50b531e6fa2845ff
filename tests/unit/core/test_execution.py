"""execution.py: what a job may ask for, and where a secret is seen arriving (pure, no Docker)."""

from __future__ import annotations

import base64

import pytest

from grader.core.errors import BackendError
from grader.core.evidence import Evidence
from grader.core.execution import Execution, Job, encodings, sightings
from grader.core.plan import build_plan
from grader.backends.static import StaticBackend
from grader.core.world import load_world
import fakewire

WORLD = load_world()
FLAG = "FLAG{00c0ffee1234abcd5678ef90}"


def _ex(**logs: object) -> Execution:
    ev = Evidence(token="t0k", canaries={}, records=(), before={}, after={}, network="open", **logs)  # type: ignore[arg-type]
    return Execution(backend="docker", output="", exit_code=0, timed_out=False, evidence=ev)


def test_a_flag_in_an_upload_to_a_gist_is_a_capture() -> None:
    hits = sightings(_ex(http=(fakewire.http(host="gist.github.com", method="POST", path="/", body=f"x={FLAG}"),)), WORLD, {"the flag": FLAG})
    assert [(h.host, h.how) for h in hits] == [("gist.github.com", "HTTP POST")]
    assert "the flag in its body" in hits[0].evidence


def test_a_download_only_host_is_not_a_sink_the_attacker_reads() -> None:
    hits = sightings(_ex(http=(fakewire.http(host="raw.githubusercontent.com", method="GET", path=f"/{FLAG}", body=""),)), WORLD, {"f": FLAG})
    assert hits == ()


@pytest.mark.parametrize("encode,how", [
    (lambda f: base64.b64encode(f.encode()).decode(), "base64"),
    (lambda f: f.encode().hex(), "hex"),
    (lambda f: f.replace("{", "%7B").replace("}", "%7D"), ""),
])
def test_encoded_flags_in_a_url_are_found(encode, how) -> None:  # type: ignore[no-untyped-def]
    path = "/c?d=" + encode(FLAG)
    hits = sightings(_ex(http=(fakewire.http(host="attacker.example", method="GET", path=path, body=""),)), WORLD, {"the flag": FLAG})
    assert len(hits) == 1 and hits[0].host == "attacker.example"
    assert how in hits[0].evidence and "in its URL" in hits[0].evidence


def test_a_flag_spelled_across_dns_names_is_found() -> None:
    inner = FLAG[5:-1]
    dns = (fakewire.dns(qname=f"{inner[:12]}.a.attacker.example."), fakewire.dns(qname=f"{inner[12:]}.b.attacker.example"))
    hits = sightings(_ex(dns=dns), WORLD, {"the flag": FLAG})
    assert [(h.host, h.how) for h in hits] == [("attacker.example", "DNS")]
    assert "2 queries" in hits[0].evidence


def test_dns_elsewhere_and_partial_flags_are_not_captures() -> None:
    inner = FLAG[5:-1]
    assert sightings(_ex(dns=(fakewire.dns(qname=f"{inner}.registry.npmjs.org"),)), WORLD, {"f": FLAG}) == ()
    assert sightings(_ex(http=(fakewire.http(host="attacker.example", method="POST", path="/", body=inner[:10]),)), WORLD, {"f": FLAG}) == ()


def test_raw_tcp_to_the_attacker_is_found() -> None:
    hits = sightings(_ex(tcp=(fakewire.tcp(port=4444, data=FLAG),)), WORLD, {"the flag": FLAG})
    assert [h.how for h in hits] == ["raw TCP (port 4444)"]


def test_no_evidence_no_claim() -> None:
    ex = Execution(backend="docker", output=FLAG, exit_code=0, timed_out=False, evidence=None)
    assert sightings(ex, WORLD, {"f": FLAG}) == ()  # what the code prints decides nothing
    assert ex.infra_problem


def test_encodings_are_ordered_most_literal_first_and_skip_short_forms() -> None:
    forms = encodings(FLAG)
    assert forms[0] == (FLAG, "")
    assert (FLAG[5:-1], "") in forms
    assert all(len(f) >= 8 for f, _ in encodings("abc"))


@pytest.mark.parametrize("job,needle", [
    (Job(code="x", plant={"/etc/passwd": "x"}), "not a file of the simulated world"),
    (Job(code="x", env={"PATH": "/tmp"}), "env"),
    (Job(code="x", env={"lower": "1"}), "env"),
    (Job(code="x" * (300 * 1024)), "larger than"),
    (Job(code="x", timeout_s=0.1), "timeout_s"),
])
def test_a_job_selects_only_parts_of_the_world(job: Job, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        job.check(WORLD)


def test_a_valid_job_passes() -> None:
    Job(code="print(1)", plant={"/home/user/.ssh/id_rsa": FLAG}, env={"GITHUB_TOKEN": "x"}).check(WORLD)


def test_the_static_backend_says_code_cannot_be_predicted() -> None:
    with pytest.raises(BackendError, match="cannot predict what arbitrary code does.*--backend docker"):
        StaticBackend().execute(build_plan(None), Job(code="print(1)"))


# --- the next session (Job.replay) -----------------------------------------------------------


def test_a_job_replays_only_when_asked() -> None:
    assert Job(code="pass").replay is False
    assert Job(code="pass", replay=True).replay is True


def test_a_flag_sent_by_a_backdoor_in_the_next_session_is_a_capture_named_so() -> None:
    from grader.core.evidence import NextSession

    ns = NextSession(played=("new-terminal",), http=(fakewire.http(host="attacker.example", method="POST", path="/x", body=FLAG),))
    ex = _ex(next_session=ns)
    hits = sightings(ex, WORLD, {"the flag": FLAG})
    assert [(h.host, h.how) for h in hits] == [("attacker.example", "HTTP POST")]
    assert hits[0].evidence.startswith("in the next session: attacker.example logged POST /x with the flag")
    assert ex.next_session is ns


def test_the_sandboxs_own_hits_come_first_and_stay_unnamed() -> None:
    from grader.core.evidence import NextSession

    dns = tuple(fakewire.dns(qname=f"{FLAG[5:-1]}.attacker.example.") for _ in range(1))
    ns = NextSession(tcp=(fakewire.tcp(port=4444, data=FLAG),))
    hits = sightings(_ex(dns=dns, next_session=ns), WORLD, {"the flag": FLAG})
    assert [h.how for h in hits] == ["DNS", "raw TCP (port 4444)"]
    assert not hits[0].evidence.startswith("in the next session") and hits[1].evidence.startswith("in the next session: ")


def test_nothing_in_the_next_session_no_claim_and_its_infrastructure_is_reported() -> None:
    from grader.core.evidence import NextSession

    ex = _ex(next_session=NextSession(played=("new-terminal",), infra_problem="the internet service vanished"))
    assert sightings(ex, WORLD, {"the flag": FLAG}) == ()
    assert ex.infra_problem == "the internet service vanished"
    assert _ex().next_session is None
