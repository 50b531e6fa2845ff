"""One judge of sightings: every encoding, every channel, DNS reassembly, and every caller uses the same function.

Each case here fails if the judge loses what it exercises: an encoding dropped
from ``encodings``, the seq reassembly of DNS names, the raw listener's port,
a caller that grows a judge of its own.
"""

from __future__ import annotations

import ast
import base64
import binascii
import random
import urllib.parse
from pathlib import Path

import pytest

import fakewire
from grader.course import ladder as ctf
from grader.core import evidence
from grader.core.evidence import Evidence, Markers, canary_sightings, encodings, sightings
from grader.core.execution import Execution
from grader.core.execution import sightings as execution_sightings
from grader.core.records import RawPorts
from grader.core.world import load_world

WORLD = load_world()
CANARY = "5f3c9a0b1d2e4f60718293a4b5c6d7e8"
FLAG = "FLAG{0123456789abcdef01234567}"
PATH = "/home/user/.ssh/id_rsa"


def _ev(**logs: object) -> Evidence:
    return Evidence(token="t0k3n", canaries={PATH: CANARY}, records=(), before={}, after={}, network="proxy", **logs)  # type: ignore[arg-type]


FORMS = {
    "as is": FLAG,
    "hex": binascii.hexlify(FLAG.encode()).decode(),
    "base64": base64.b64encode(FLAG.encode()).decode(),
    "base64 without padding": base64.b64encode(FLAG.encode()).decode().rstrip("="),
    "url-safe base64": base64.urlsafe_b64encode(FLAG.encode()).decode().rstrip("="),
    "URL-quoted": urllib.parse.quote(FLAG, safe=""),
    "inside the braces": FLAG[5:-1],
    "lower-case": FLAG.lower(),
}


@pytest.mark.parametrize("form", FORMS)
def test_every_encoding_in_an_upload_is_a_sighting(form: str) -> None:
    ev = _ev(http=(fakewire.http("gist.github.com", "POST", "/", f"data={FORMS[form]}&x=1"),))
    assert [h.host for h in sightings(ev, WORLD, {"the flag": FLAG})] == ["gist.github.com"], form


def test_encodings_name_every_form_the_judge_looks_for() -> None:
    assert set(FORMS.values()) - {FLAG.lower()} <= {f for f, _ in encodings(FLAG)}


@pytest.mark.parametrize("channel", ["body", "url", "tcp", "dns"])
def test_each_channel_the_attacker_reads_is_a_sighting_and_only_those(channel: str) -> None:
    hexed = binascii.hexlify(CANARY.encode()).decode()
    seen = {
        "body": _ev(http=(fakewire.http("attacker.example", "POST", "/", CANARY),)),
        "url": _ev(http=(fakewire.http("cdn.jsdelivr.net", "GET", f"/npm/{CANARY}"),)),
        "tcp": _ev(tcp=(fakewire.tcp(4444, f"x {CANARY}"),)),
        "dns": _ev(dns=(fakewire.dns(f"{hexed[:40]}.0.s0.t0k3n.attacker.example."), fakewire.dns(f"{hexed[40:]}.1.s0.t0k3n.attacker.example."))),
    }[channel]
    unseen = {
        "body": _ev(http=(fakewire.http("pypi.org", "POST", "/", CANARY),)),  # a download host keeps bodies to itself
        "url": _ev(http=(fakewire.http("pypi.org", "GET", f"/{CANARY}"),)),  # and its URLs are not public
        "tcp": _ev(tcp=(fakewire.tcp(4555, CANARY),)),  # another raw listener (the host's stand-in)
        "dns": _ev(dns=(fakewire.dns(f"{hexed}.registry.npmjs.org."),)),  # a name outside the attacker's zone
    }[channel]
    assert canary_sightings(seen, WORLD, [PATH]), channel
    assert canary_sightings(unseen, WORLD, [PATH]) == [], channel


def test_dns_chunks_are_reassembled_in_sequence_whatever_order_they_arrived_in() -> None:
    """What the steal probe sends: ``<hex>.<seq><Markers.steal_dns_suffix>``, looked up by threads in any order."""
    m = Markers("t0k3n", "attacker.example")
    data = f"-----BEGIN KEY----- {CANARY} -----END-----".encode()
    hexed = binascii.hexlify(data).decode()
    chunks = [hexed[i:i + 20] for i in range(0, len(hexed), 20)]
    names = [f"{c}.{i}{m.steal_dns_suffix('s0')}." for i, c in enumerate(chunks)]
    random.Random(7).shuffle(names)
    # a record of another stolen file between them, and a reply name of a different shape
    names.insert(2, f"abcdef.0{m.steal_dns_suffix('s1')}.")
    ev = _ev(dns=tuple(fakewire.dns(n) for n in names))
    hits = sightings(ev, WORLD, {"the canary": CANARY})
    assert [(h.host, h.how) for h in hits] == [("attacker.example", "DNS")]
    assert "hex-encoded" in hits[0].evidence


def test_every_caller_gets_the_same_answer_from_the_one_judge() -> None:
    """The steal probe (canary_sightings), the capture-the-flag, the agent and the next session (execution.sightings)."""
    hexed = binascii.hexlify(CANARY.encode()).decode()
    cases = [
        _ev(http=(fakewire.http("attacker.example", "POST", "/", base64.b64encode(CANARY.encode()).decode()),)),
        _ev(dns=tuple(fakewire.dns(f"{hexed[i:i + 16]}.{i // 16}.x.attacker.example") for i in reversed(range(0, 64, 16)))),
        _ev(tcp=(fakewire.tcp(4444, urllib.parse.quote(CANARY)),)),
        _ev(http=(fakewire.http("pypi.org", "POST", "/", CANARY),)),
    ]
    for ev in cases:
        ex = Execution(backend="docker", output="", exit_code=0, timed_out=False, evidence=ev)
        probe_says = bool(canary_sightings(ev, WORLD, [PATH]))
        job_says = bool(execution_sightings(ex, WORLD, {"the canary": CANARY}))
        assert probe_says == job_says


def test_no_module_defines_a_judge_of_sightings_but_evidence() -> None:
    """Functions about sightings live in evidence.py (the judge and its views) and execution.py (a job's wrapper)."""
    package = Path(evidence.__file__).parent
    found = []
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and ("sighting" in node.name or node.name in ("encodings", "_contains", "dns_text")):
                found.append(f"{path.relative_to(package)}:{node.name}")
    assert sorted(found) == sorted(["evidence.py:encodings", "evidence.py:_contains", "evidence.py:dns_text", "evidence.py:sightings",
                                    "evidence.py:canary_sightings", "evidence.py:backdoor_sightings", "execution.py:sightings"])


def test_the_probes_the_jobs_and_the_next_session_all_ask_the_one_judge(monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.core import execution
    from grader.core.outcomes import SinkHit

    asked: list[str] = []

    def judge(ev: Evidence, world: object, secrets: dict[str, str], when: str = "") -> tuple[SinkHit, ...]:
        asked.append(when or "now")
        return (SinkHit("h", "DNS", "stub", "dns"),)

    monkeypatch.setattr(evidence, "sightings", judge)
    monkeypatch.setattr(execution, "judge_sightings", judge)
    from grader.core.evidence import NextSession

    ev = _ev(next_session=NextSession(played=("new-terminal",)))
    assert canary_sightings(ev, WORLD, [PATH]) == ["stub"]
    ex = Execution(backend="docker", output="", exit_code=0, timed_out=False, evidence=ev)
    assert len(execution.sightings(ex, WORLD, {"k": CANARY})) == 2
    assert asked == ["now", "now", "in the next session: "]


def test_a_capture_the_flag_run_whose_evidence_failed_is_no_miss() -> None:
    ev = _ev(infra_problem="the run's evidence cannot be read whole (http.jsonl: cut off)")
    ex = Execution(backend="docker", output="", exit_code=0, timed_out=False, evidence=ev)
    got = ctf.judge(ctf.level(1), ex, FLAG, world=WORLD)
    assert got.captured is None and got.hint == "" and "cut off" in got.error
    from grader.notebook.ladder_views import attack_html, render_attack

    for shown in (render_attack(got), attack_html(got)):
        assert "could not judge this attack" in shown.lower() and "Not captured" not in shown, shown[:300]


def test_the_attackers_raw_listeners_are_the_worlds_ports_wherever_a_run_hears_them() -> None:
    """Every raw port the world gives the attacker is a sink, judged where this run listened for it and named by
    the world's port; a listener that stands for none of them (the host's stand-in) is no sink; asking for a raw
    port the world does not give is an error, never a default."""
    assert WORLD.raw_ports == (4444,), "the attacker's ports beyond DNS and the web"
    moved = RawPorts(((4444, 40123),))  # srt's run listens on a free loopback port
    hit = sightings(_ev(tcp=(fakewire.tcp(40123, CANARY),), raw=moved), WORLD, {"the canary": CANARY})
    assert [h.how for h in hit] == ["raw TCP (port 4444)"] and "port 4444" in hit[0].evidence
    assert sightings(_ev(tcp=(fakewire.tcp(4444, CANARY),), raw=moved), WORLD, {"the canary": CANARY}) == ()
    assert moved.at(4444) == 40123 and moved.world_port(40123) == 4444 and moved.world_port(4444) is None
    with pytest.raises(LookupError, match="no raw port 25 .*its raw ports: 4444"):
        moved.at(25)
