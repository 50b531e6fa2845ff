"""Host names and allowlist patterns as sandbox-runtime reads them: normal forms, matching (the apex rule), refused forms.

The generated differential check against srt's own code is tests/integration/test_srt_matching.py; these are
the examples a reader learns the rules from.
"""

from __future__ import annotations

from typing import Optional

import pytest

from grader import PolicyError, load_policy
from grader.protocol.domains import (
    filter_request,
    host_allowed,
    is_ipv4,
    matches,
    never_matches,
    normalize_host,
    normalize_pattern,
    request_host,
    split_port,
    web_scheme,
)

# --- normalizing ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "normal"),
    [
        ("registry.npmjs.org", "registry.npmjs.org"),
        ("Registry.NPMJS.org", "registry.npmjs.org"),
        ("*.GitHub.com", "*.github.com"),
        # srt never maps an entry to ASCII: it only lower-cases it (a look-alike stays one, and names nothing)
        ("Bücher.example", "bücher.example"),
        ("ｇｉｓｔ.github.com", "ｇｉｓｔ.github.com"),
        ("\u212aelvin.example", "kelvin.example"),  # KELVIN SIGN: its lower case is ASCII k, in JavaScript too
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),
        ("192.0.2.1", "192.0.2.1"),
        ("localhost", "localhost"),
        ("a b.example", "a b.example"),  # srt takes it; it matches no host (never_matches says so)
        ("_dmarc.example.com", "_dmarc.example.com"),
        ("*.2.3.4", "*.2.3.4"),  # srt takes it; a wildcard never matches an IP literal
        # inside brackets srt reads the host as the URL parser does
        ("[GitHub.com]", "github.com"),
        ("[registry.npmjs.org.]:443", "registry.npmjs.org:443"),
        ("[127.1]", "127.0.0.1"),
        ("[::ffff:169.254.169.254]", "169.254.169.254"),
    ],
)
def test_patterns_are_normalized_as_srt_compares_them(entry: str, normal: str) -> None:
    assert normalize_pattern(entry) == normal


def test_a_requested_host_is_canonicalized_as_srt_canonicalizes_it() -> None:
    assert request_host("GIST.GitHub.com.") == "gist.github.com"
    assert request_host("10.0.0.1") == "10.0.0.1"
    assert request_host("127.1") == "127.0.0.1"  # inet_aton shorthand, as getaddrinfo dials it
    assert request_host("2852039166") == "169.254.169.254"
    assert request_host("0x7f.0.0.1") == "127.0.0.1"
    assert request_host("[::ffff:7f00:1]") == "127.0.0.1"
    assert request_host("[0:0:0:0:0:0:0:1]") == "::1"
    assert request_host("x.2.3.4") == "x.2.3.4"  # no IPv4 address: the URL parser fails, the host is matched as sent
    for bad in ("bad host", "", "ｇｉｓｔ.github.com", "gist.github.com\x00.evil", "[fe80::1%eth0]", "x" * 256):
        with pytest.raises(ValueError):
            request_host(bad)


def test_normalize_host_is_the_worlds_stricter_form() -> None:
    assert normalize_host("GIST.GitHub.com.") == "gist.github.com"
    assert normalize_host("10.0.0.1") == "10.0.0.1"
    with pytest.raises(ValueError):
        normalize_host("bad host")
    with pytest.raises(ValueError):
        normalize_host("")


@pytest.mark.parametrize(("text", "ok"), [("1.2.3.4", True), ("255.255.255.255", True), ("256.1.1.1", False), ("1.2.3", False), ("a.b.c.d", False)])
def test_is_ipv4(text: str, ok: bool) -> None:
    assert is_ipv4(text) is ok


# --- matching -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "host", "ok"),
    [
        ("github.com", "github.com", True),
        ("github.com", "gist.github.com", False),
        ("*.github.com", "gist.github.com", True),
        ("*.github.com", "a.b.github.com", True),
        ("*.github.com", "github.com", False),  # the apex rule: subdomains only
        ("*.github.com", "evilgithub.com", False),
        ("*.github.com", "github.com.attacker.example", False),
        ("registry.npmjs.org", "registry.npmjs.org.attacker.example", False),
        ("1.2.3.4", "1.2.3.4", True),
        ("1.2.3.4", "1.2.3.5", False),
        ("*.github.com", ".github.com", True),  # srt: the host ends with ".github.com"
        ("*.2.3.4", "1.2.3.4", False),  # a wildcard never matches an IP literal
        ("*.2.3.4", "x.2.3.4", True),
        ("GitHub.com", "github.com", True),
    ],
)
def test_matches(pattern: str, host: str, ok: bool) -> None:
    assert matches(pattern, host) is ok


@pytest.mark.parametrize("port", [80, 443, 4444])
def test_deny_wins_over_allow(port: int) -> None:
    allowed = ("*.github.com", "registry.npmjs.org")
    assert host_allowed("api.github.com", allowed, (), port)
    assert not host_allowed("gist.github.com", allowed, ("gist.github.com",), port)
    assert not host_allowed("api.github.com", allowed, ("*.github.com",), port)
    assert host_allowed("registry.npmjs.org", allowed, ("*.github.com",), port)
    assert not host_allowed("pypi.org", allowed, (), port)
    assert not host_allowed("github.com", (), (), port)
    assert not host_allowed("registry.npmjs.org", allowed, ("*",), port)  # deny-all wins over every entry


def test_a_look_alike_entry_names_no_host_so_it_blocks_nothing() -> None:
    # Cyrillic "і" (U+0456) instead of Latin "i": srt compares letter for letter and never maps the entry
    look_alike = normalize_pattern("gіthub.com")
    assert look_alike == "gіthub.com"
    assert not matches(look_alike, "github.com")
    assert not filter_request("gіthub.com", 443, ["gіthub.com"], [])  # a Unicode request host is malformed to srt
    assert never_matches(look_alike) is not None and never_matches("github.com") is None


def test_a_full_width_deny_entry_leaves_the_gist_host_open_as_in_srt() -> None:
    # issue 38: the lab used to fold this entry to ASCII and report the gist upload as blocked
    allowed, denied = [normalize_pattern("*.github.com")], [normalize_pattern("ｇｉｓｔ.github.com", denied=True)]
    assert filter_request("gist.github.com", 443, allowed, denied)
    assert "If you meant gist.github.com" in (never_matches(denied[0]) or "")
    assert not filter_request("gist.github.com", 443, allowed, [normalize_pattern("GIST.github.com", denied=True)])


@pytest.mark.parametrize("entry", ["a..github.com", "git_hub.com", "-github.com", "a" * 63 + ".com", "256.1.1.1",
                                   "[a.com]junk", "[a.com", "github.com ", "localhost",
                                   "*.*.github.com"])
def test_entries_srt_takes_are_taken(entry: str) -> None:
    assert normalize_pattern(entry) == entry.lower()


# --- refused forms --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        ("*", '"*" would allow every host'),
        ("*:443", '"*" would allow every host'),
        ("*.", '"*" would allow every host'),
        ("*.*", '"*" would allow every host'),
        ("*.com", "at least two labels"),
        ("*.org.", "ends with a dot"),
        ("registry.npmjs.org.", 'ends with a dot, which sandbox-runtime refuses. Write "registry.npmjs.org"'),
        ("*.github.com.", 'ends with a dot'),
        (".github.com", 'starts with a dot'),
        ("intranet", 'has no dot: sandbox-runtime refuses every name without one except "localhost"'),
        ("*.github..com", "empty label"),
        ("https://registry.npmjs.org", 'has a scheme. Write only the host: "registry.npmjs.org"'),
        ("http://gist.github.com/x", 'has a scheme. Write only the host: "gist.github.com"'),
        ("registry.npmjs.org/", 'has a path. Write only the host: "registry.npmjs.org"'),
        ("github.com/user/repo", 'has a path. Write only the host: "github.com"'),
        ("registry.npmjs.org:0", "which is no port"),
        ("registry.npmjs.org:0443", "which is no port"),
        ("registry.npmjs.org:65536", "which is no port"),
        ("registry.npmjs.org:abc", "which is no port"),
        ("registry.npmjs.org:", "which is no port"),
        ("registry.npmjs.org:80:443", 'is not a host with one port. Write "registry.npmjs.org" for every port'),
        ("a.*.github.com", 'only as a leading "*."'),
        ("github.*", 'only as a leading "*."'),
        ("*github.com", 'only as a leading "*."'),
        ("10.0.0.0/8", "CIDR ranges are not supported"),
        ("192.168.1.0/24", "CIDR ranges are not supported"),
        ("::1", 'without brackets, which is ambiguous next to a port. Write it in brackets: "[::1]"'),
        ("fd00:ec2::254", 'Write it in brackets: "[fd00:ec2::254]"'),
        ("fe80::1%eth0", "without brackets"),
        ("[::1]", "names the IPv6 address ::1. sandbox-runtime accepts it, but the simulated internet has no IPv6"),
        ("[2001:0db8:0000::0001]:8443", "names the IPv6 address 2001:db8::1"),
        ("[fe80::1%eth0]", "names the IPv6 address fe80::1"),  # srt drops the zone of a bracketed entry
        ("[::1]:0", "not a bracketed IPv6 literal with an optional port"),
        ("github\x00.com", "control character"),
        ("github.com\t", "control character"),
        ("[ｇｉｓｔ.github.com]", "inside brackets"),
        ("", "empty host name"),
    ],
)
def test_refused_entries_say_how_to_fix_them(entry: str, fragment: str) -> None:
    with pytest.raises(ValueError) as info:
        normalize_pattern(entry)
    assert fragment in str(info.value)


@pytest.mark.parametrize("key", ["allowedDomains", "deniedDomains"])
def test_refused_entries_in_a_policy_carry_their_pointer(key: str) -> None:
    with pytest.raises(PolicyError) as info:
        load_policy({"network": {key: ["pypi.org", "https://pypi.org", "*.com"]}})
    assert [p.pointer for p in info.value.problems] == [f"/network/{key}/1", f"/network/{key}/2"]


# --- sandbox-runtime's own domain-pattern cases (test/sandbox/domain-pattern.test.ts) -------------


@pytest.mark.parametrize(
    ("entry", "split"),
    [
        ("example.com:443", ("example.com", 443)),
        ("*.example.com:8080", ("*.example.com", 8080)),
        ("*:22", ("*", 22)),
        ("example.com", ("example.com", None)),
        # no suffix, or a non-port suffix, is left whole (for the host check to refuse)
        *[(s, (s, None)) for s in ("example.com:0", "example.com:65536", "example.com:99999999", "example.com:0443",
                                    "example.com:abc", "example.com:443.allowed.com", "example.com:")],
        ("[::1]", ("::1", None)),  # inside brackets: the bare address, as the URL parser spells it
        ("[::1]:443", ("::1", 443)),
        ("[0:0:0:0:0:0:0:1]", ("::1", None)),
        ("fd00:ec2::254", ("fd00:ec2::254", None)),  # unbracketed multi-colon is never split
        ("::1", ("::1", None)),
        ("example.com:80:443", ("example.com:80:443", None)),
        *[(s, (s, None)) for s in ("[::1", "[::1]junk", "[::1]:", "[::1]:0", "[::1]:65536")],
    ],
)
def test_an_entry_splits_into_host_and_port_as_sandbox_runtime_splits_it(entry: str, split: tuple[str, Optional[int]]) -> None:
    assert split_port(entry) == split


@pytest.mark.parametrize(
    ("host", "port", "entry", "ok"),
    [
        ("example.com", 22, "example.com", True),  # an entry without a port matches any port
        ("a.example.com", 65535, "*.example.com", True),
        ("example.com", 443, "example.com:443", True),  # with a port, that port only
        ("example.com", 80, "example.com:443", False),
        ("a.example.com", 8443, "*.example.com:8443", True),
        ("a.example.com", 443, "*.example.com:8443", False),
        ("anything.test", 22, "*:22", True),  # bare "*" with a port (deniedDomains)
        ("anything.test", 23, "*:22", False),
        ("anything.test", 23, "*", True),
        ("example.com", 443, "*.example.com:443", False),  # strict subdomains, whatever the port
    ],
)
def test_an_entry_matches_a_host_and_port_as_sandbox_runtime_matches_it(host: str, port: int, entry: str, ok: bool) -> None:
    assert matches(normalize_pattern(entry, denied=True), host, port) is ok


@pytest.mark.parametrize(
    ("entry", "denied", "normalized"),
    [
        ("registry.npmjs.org:443", False, "registry.npmjs.org:443"),
        ("Registry.NPMJS.org:443", False, "registry.npmjs.org:443"),
        ("*.GitHub.com:8443", False, "*.github.com:8443"),
        ("1.2.3.4:80", False, "1.2.3.4:80"),
        ("*", True, "*"),
        ("*:22", True, "*:22"),
        ("gist.github.com:443", True, "gist.github.com:443"),
    ],
)
def test_port_and_deny_all_entries_are_accepted_where_sandbox_runtime_accepts_them(entry: str, denied: bool, normalized: str) -> None:
    assert normalize_pattern(entry, denied=denied) == normalized


def test_a_bare_star_is_refused_in_the_allow_list_and_says_what_it_does_in_the_deny_list() -> None:
    with pytest.raises(ValueError) as info:
        normalize_pattern("*")
    assert "would allow every host" in str(info.value) and 'in deniedDomains, "*" denies every host' in str(info.value)
    with pytest.raises(ValueError):
        normalize_pattern("*.", denied=True)


@pytest.mark.parametrize(
    ("allowed", "denied", "prefer", "scheme"),
    [
        (("gist.github.com",), (), "https", "https"),
        (("gist.github.com:80",), (), "https", "http"),  # only port 80 open: the attacker uses it
        (("gist.github.com:443",), (), "http", "https"),
        (("gist.github.com",), ("gist.github.com:443",), "https", "http"),  # a pinned deny leaves port 80
        (("gist.github.com:8443",), (), "https", "https"),  # neither open: the preferred one, refused
        (("gist.github.com",), ("*",), "http", "http"),
    ],
)
def test_a_request_uses_the_web_port_the_lists_leave_open(allowed: tuple[str, ...], denied: tuple[str, ...], prefer: str, scheme: str) -> None:
    assert web_scheme("gist.github.com", allowed, denied, prefer) == scheme


def test_without_idna_a_host_whose_canonical_form_needs_it_is_refused_not_guessed(monkeypatch: pytest.MonkeyPatch) -> None:
    # the services image has no idna package: the proxy refuses what it cannot tell, and decides the rest alike
    from grader.protocol import domains

    monkeypatch.setattr(domains, "_idna", None)
    with pytest.raises(ValueError, match="cannot tell"):
        request_host("xn--bcher-kva.example.")
    assert request_host("XN--BCHER-KVA.example") == "xn--bcher-kva.example"  # without the dot both readings agree
    assert request_host("xn--a-.example.") == "xn--a-.example"  # an ASCII label needs no UTS 46 data
    assert request_host("gist.github.com.") == "gist.github.com"


@pytest.mark.parametrize("host", ["ｇｉｓｔ.github.com", "a b.com", "gist.github.com\x00.evil", "[fe80::1%eth0]"])
def test_a_host_the_proxy_refuses_matches_nothing_not_even_its_own_spelling(host: str) -> None:
    # the static analyzer asks matches() about names it makes up (fronting, fresh subdomains): it must judge as the proxy
    assert not matches(host, host, 443) and not matches("*", host, 443) and not filter_request(host, 443, [host], [])


@pytest.mark.parametrize("entry", ["a" * 64 + ".com", ".".join(["a" * 60] * 4), "*." + ".".join(["b" * 50] * 4)])
def test_a_name_dns_cannot_carry_is_refused_with_the_limit(entry: str) -> None:
    """srt takes it, but nothing that long resolves and the scope scan cannot ask under it: refused, named (issue 39)."""
    with pytest.raises(ValueError, match="DNS carries at most 63 in a label"):
        normalize_pattern(entry)
