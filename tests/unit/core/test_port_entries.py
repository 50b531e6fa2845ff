"""Port-pinned entries (``host:443``) and deny-all (``*``, ``*:22``) across the pipeline: the proxy's
decision, the static analyzer's reach, the probes' choice of port, and what the lab refuses to grade.

The matching rules themselves are test_domains' (sandbox-runtime's own cases); the Docker side
is held to the same answers by the agreement corpus (``port-*`` policies in corpus.json).
"""

from __future__ import annotations

from typing import Any

import pytest

from grader import load_policy, predict
from grader.core.access import access_for, unmeasured_ports
from grader.core.analyzer import lint
from grader.core.errors import PolicyError
from grader.core.evidence import Markers
from grader.core.probes.record import OrderContext, web_url
from grader.core.records import RawPorts
from grader.core.scope import scan_url
from grader.core.world import load_world
from grader.services import proxy

WORLD = load_world()
BUILD = {"allowWrite": ["/app/workspace/build"]}


def _policy(allowed: list[str], denied: list[str] = (), fs: Any = None) -> Any:  # type: ignore[assignment]
    return load_policy({"filesystem": fs or BUILD, "network": {"allowedDomains": allowed, "deniedDomains": list(denied)}})


# --- the proxy decides by host and port ------------------------------------------------------


@pytest.mark.parametrize(
    ("host", "port", "allowed", "denied", "allow", "reason"),
    [
        ("registry.npmjs.org", 443, ["registry.npmjs.org:443"], [], True, 'matches allowed entry "registry.npmjs.org:443"'),
        ("registry.npmjs.org", 4444, ["registry.npmjs.org:443"], [], False, 'allowed entry "registry.npmjs.org:443" opens no port 4444'),
        ("registry.npmjs.org", 80, ["registry.npmjs.org:443"], [], False, "opens no port 80"),
        ("registry.npmjs.org", 443, ["registry.npmjs.org"], ["*"], False, 'matches denied entry "*"'),
        ("registry.npmjs.org", 443, ["registry.npmjs.org"], ["*:22"], True, 'matches allowed entry "registry.npmjs.org"'),
        ("gist.github.com", 443, ["*.github.com"], ["gist.github.com:443"], False, 'denied entry "gist.github.com:443"'),
        ("gist.github.com", 80, ["*.github.com"], ["gist.github.com:443"], True, 'matches allowed entry "*.github.com"'),
    ],
)
def test_the_proxy_decides_by_host_and_port(host: str, port: int, allowed: list[str], denied: list[str], allow: bool, reason: str) -> None:
    d = proxy.decide(host, port, allowed, denied)
    assert d.allow is allow and reason in d.reason


# --- the static analyzer ----------------------------------------------------------------------


def test_a_registry_pinned_to_443_still_builds_and_opens_nothing_else() -> None:
    pinned = predict(_policy(["registry.npmjs.org:443"], ["*:22"]))
    plain = predict(_policy(["registry.npmjs.org"]))
    assert pinned.outcome("job-fetch-npm").outcome == "succeeded"
    assert [(o.id, o.outcome) for o in pinned.probes] == [(o.id, o.outcome) for o in plain.probes]


def test_a_registry_open_on_port_80_only_breaks_the_https_job_and_says_so() -> None:
    access = access_for(_policy(["registry.npmjs.org:80"]), WORLD)
    assert access.reach("registry.npmjs.org").allowed  # over the web: port 80 is open
    d = access.reach("registry.npmjs.org", 443)
    assert not d.allowed and "opens port 80 only, not port 443" in d.why
    result = predict(_policy(["registry.npmjs.org:80"]))
    assert result.outcome("job-fetch-npm").outcome == "blocked"
    assert "on port 443" in result.outcome("job-fetch-npm").explanation or "port 443" in str(result.outcome("job-fetch-npm"))


def test_a_deny_pinned_to_443_leaves_the_upload_host_open_on_port_80() -> None:
    """The gaming policy: deny the gist host "by name" but only on 443; the attacker uses plain HTTP."""
    result = predict(load_policy({"network": {"allowedDomains": ["*.github.com"], "deniedDomains": ["gist.github.com:443"]}}))
    assert result.outcome("exfil-via-allowed-domain").outcome == "succeeded"
    assert "gist.github.com" in {r.host for r in result.scope.reachable}


def test_deny_all_wins_over_every_allowed_entry_and_the_lint_says_so() -> None:
    policy = _policy(["registry.npmjs.org", "*.github.com"], ["*"])
    result = predict(policy)
    assert result.scope.reachable == ()
    assert any('"*" denies every host, and deny wins' in p.message for p in lint(policy))


def test_a_port_no_server_serves_opens_nothing_and_the_lint_says_so() -> None:
    policy = _policy(["registry.npmjs.org", "gist.github.com:8443"])
    assert "gist.github.com" not in {r.host for r in predict(policy).scope.reachable}
    assert any("opens port 8443 of gist.github.com, which serves only 80, 443" in p.message for p in lint(policy))


# --- what the lab cannot measure is refused, never graded ---------------------------------------


@pytest.mark.parametrize("entry", ["attacker.example:4444", "attacker.example:53", "*.attacker.example:4444",
                                   "1.2.3.4:4444", "collector.unknown-domain.test:53", "*.unknown-domain.test:4444"])
def test_a_raw_port_of_a_name_the_attacker_owns_is_refused_with_its_reason(entry: str) -> None:
    """The gaming policy: open only the attacker's raw listener, where no HTTP probe looks, and read "blocked"."""
    policy = _policy(["registry.npmjs.org:443", entry])
    problems = unmeasured_ports(policy, WORLD)
    assert [p.pointer for p in problems] == ["/network/allowedDomains/1"]
    assert "cannot grade this entry" in problems[0].message
    with pytest.raises(PolicyError) as info:
        predict(policy)
    assert "/network/allowedDomains/1" in str(info.value)


@pytest.mark.parametrize("entry", ["attacker.example:443", "attacker.example:80", "github.com:22", "gist.github.com:8443"])
def test_web_ports_and_ports_no_attacker_serves_are_graded(entry: str) -> None:
    assert unmeasured_ports(_policy([entry]), WORLD) == ()


# --- the probes use the port the policy leaves open --------------------------------------------


def _ctx(allowed: tuple[str, ...], denied: tuple[str, ...] = ()) -> OrderContext:
    return OrderContext(markers=Markers("t0k3n", "attacker.example"), attacker_ip="192.0.2.1", raw=RawPorts.same(WORLD.raw_ports), host_port=1,
                        gateway_names=(), hosts=WORLD.host_names, loot=(), allowed=allowed, denied=denied)


def test_the_probes_and_the_scan_ask_over_the_open_web_port() -> None:
    assert web_url(_ctx(("gist.github.com:80",)), "gist.github.com", "/x") == "http://gist.github.com/x"
    assert web_url(_ctx(("*.github.com",), ("gist.github.com:443",)), "gist.github.com", "/x") == "http://gist.github.com/x"
    assert web_url(_ctx(("gist.github.com",)), "gist.github.com", "/x") == "https://gist.github.com/x"
    assert web_url(_ctx(("attacker.example:443",)), "attacker.example", "/p", prefer="http") == "https://attacker.example/p"
    access = access_for(_policy(["registry.npmjs.org:443"]), WORLD)
    assert scan_url(access, "registry.npmjs.org", "/scan/t") == "https://registry.npmjs.org/scan/t"
    assert scan_url(access_for(_policy(["registry.npmjs.org"]), WORLD), "registry.npmjs.org", "/scan/t") == "http://registry.npmjs.org/scan/t"
