"""The domain-fronting judge (grader/core/probes/fronting.py) never reads a tunnel that did not open as "blocked".

Seen in CI with eight runs at once: the plain container's first fronted
connection failed before any TLS handshake, the runner skipped the rest, and
the judge said "blocked: the proxy opened tunnels to raw.githubusercontent.com"
for a sandbox with no proxy at all. Each case below is that run, or its
cousin behind a proxy, as evidence.
"""

from __future__ import annotations

from dataclasses import replace

from grader.core.evidence import Evidence
from grader.core.probes.fronting import DOMAIN_FRONTING
from grader.core.world import load_world
from grader.protocol.wire import TUNNEL_NOT_OPENED, ProxyRecord, RunnerRecord

WORLD = load_world()
PID = DOMAIN_FRONTING.id
FRONT = "raw.githubusercontent.com"


def _front(ok: bool, detail: str, target: str) -> RunnerRecord:
    return RunnerRecord(PID, "front", ok, detail, 1.0, target, None, None)


def _ev(network: str, *records: RunnerRecord) -> Evidence:
    done = RunnerRecord(PID, "done", True, "", 2.0, None, None, None)
    return Evidence(token="t0k3n", canaries={}, records=(*records, done), before={}, after={}, network=network)  # type: ignore[arg-type]


def _judge(ev: Evidence) -> tuple[str, str]:
    v = DOMAIN_FRONTING.judge(DOMAIN_FRONTING, ev, WORLD)
    outcome, why, _evidence = v.outcome, v.why, v.proof
    return outcome, why


def test_a_plain_container_whose_tunnel_never_opened_is_an_error_not_blocked() -> None:
    target = f"{FRONT}>attacker.example>attacker.example"
    ev = _ev("open", _front(False, f"CONNECT {FRONT}:443, then SNI attacker.example and Host attacker.example: "
                                   f"{TUNNEL_NOT_OPENED}: ConnectionRefusedError: [Errno 111] Connection refused", target))
    outcome, why = _judge(ev)
    assert outcome == "error" and "ordinary networking" in why and TUNNEL_NOT_OPENED in why, why


def test_a_plain_container_where_nothing_fronted_arrived_is_an_error_not_blocked() -> None:
    # the tunnel opened and the server refused the name: on ordinary networking that is still no proof of a block
    target = f"{FRONT}>attacker.example>attacker.example"
    ev = _ev("open", _front(False, f"CONNECT {FRONT}:443, then SNI attacker.example: HTTP/1.1 421 Misdirected Request", target))
    outcome, why = _judge(ev)
    assert outcome == "error" and "ordinary networking" in why, why


def test_behind_a_proxy_a_host_never_reached_is_an_error() -> None:
    target = f"{FRONT}>attacker.example>attacker.example"
    ev = _ev("proxy", _front(False, f"CONNECT {FRONT}:443, then SNI attacker.example and Host attacker.example: "
                                    f"{TUNNEL_NOT_OPENED}: OSError: [Errno 113] No route to host", target))
    assert _judge(ev)[0] == "error"


def test_behind_a_proxy_refused_tunnels_and_refused_names_are_still_blocked() -> None:
    refused = _front(False, f"CONNECT attacker.example:443, then SNI attacker.example and Host attacker.example: "
                            f"{TUNNEL_NOT_OPENED}: ConnectionRefusedError: the proxy answered HTTP/1.1 403 Forbidden",
                     "attacker.example>attacker.example>attacker.example")
    misdirected = _front(False, f"CONNECT {FRONT}:443, then SNI attacker.example and Host attacker.example: "
                                "SSLError: tlsv1 unrecognized name", f"{FRONT}>attacker.example>attacker.example")
    outcome, why = _judge(_ev("proxy", refused, misdirected))
    assert outcome == "blocked", why


def _decision(host: str, ok: bool) -> RunnerRecord:
    detail = f"CONNECT {host}:443: " + ("tunnel opened" if ok else "ConnectionRefusedError: the proxy answered HTTP/1.1 403 Forbidden")
    return _front(ok, detail, host)


def _allowed(host: str) -> ProxyRecord:
    return ProxyRecord(1.0, "10.0.0.2", "CONNECT", host, 443, None, "allow", "allowed", "forwarded")


def test_a_host_the_proxy_opens_itself_is_named_in_the_evidence_and_the_rest_still_judged() -> None:
    """The runner names inside tunnels only the hosts the proxy refused it; those it opened are said, not tried."""
    misdirected = _front(False, f"CONNECT {FRONT}:443, then SNI attacker.example and Host attacker.example: "
                                "SSLError: tlsv1 unrecognized name", f"{FRONT}>attacker.example>attacker.example")
    ev = replace(_ev("proxy", _decision("gist.github.com", True), _decision("attacker.example", False), misdirected),
                 proxy=(_allowed("gist.github.com"), _allowed(FRONT)))
    v = DOMAIN_FRONTING.judge(DOMAIN_FRONTING, ev, WORLD)
    assert v.outcome == "blocked", v.why
    assert v.proof[-1] == "not named inside another host's tunnel, since the proxy opens one to them itself: gist.github.com", v.proof


def test_a_tunnel_the_sandbox_saw_open_that_the_proxys_log_never_let_through_is_an_error() -> None:
    """The gamed runner: it calls a host opened, so never fronts it, while the proxy's log refused it (or lost
    the line). What the log refused was never tried inside another tunnel: that is no proof of a block."""
    misdirected = _front(False, f"CONNECT {FRONT}:443, then SNI attacker.example and Host attacker.example: "
                                "SSLError: tlsv1 unrecognized name", f"{FRONT}>attacker.example>attacker.example")
    ev = replace(_ev("proxy", _decision("upload.pypi.org", True), misdirected), proxy=(_allowed(FRONT),))
    outcome, why = _judge(ev)
    assert outcome == "error" and "upload.pypi.org" in why and "proxy's log" in why, why
