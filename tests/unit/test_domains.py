"""Host names and allowlist patterns: normalizing, matching (the apex rule), and every refused form."""

from __future__ import annotations

import pytest

from grader import PolicyError, load_policy
from grader.core.domains import host_allowed, is_ipv4, matches, normalize_host, normalize_pattern

# --- normalizing ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "normal"),
    [
        ("registry.npmjs.org", "registry.npmjs.org"),
        ("Registry.NPMJS.org", "registry.npmjs.org"),
        ("registry.npmjs.org.", "registry.npmjs.org"),
        ("*.GitHub.com", "*.github.com"),
        ("*.github.com.", "*.github.com"),
        ("Bücher.example", "xn--bcher-kva.example"),
        ("192.0.2.1", "192.0.2.1"),
        ("localhost", "localhost"),
    ],
)
def test_patterns_are_normalized(entry: str, normal: str) -> None:
    assert normalize_pattern(entry) == normal


def test_normalize_host_matches_the_pattern_normal_form() -> None:
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
    ],
)
def test_matches(pattern: str, host: str, ok: bool) -> None:
    assert matches(pattern, host) is ok


def test_deny_wins_over_allow() -> None:
    allowed = ("*.github.com", "registry.npmjs.org")
    assert host_allowed("api.github.com", allowed, ())
    assert not host_allowed("gist.github.com", allowed, ("gist.github.com",))
    assert not host_allowed("api.github.com", allowed, ("*.github.com",))
    assert host_allowed("registry.npmjs.org", allowed, ("*.github.com",))
    assert not host_allowed("pypi.org", allowed, ())
    assert not host_allowed("github.com", (), ())


def test_punycode_look_alike_does_not_pass_for_the_real_host() -> None:
    # Cyrillic "і" (U+0456) instead of Latin "i"
    look_alike = normalize_pattern("gіthub.com")
    assert look_alike.startswith("xn--") and look_alike != "github.com"
    assert not matches(look_alike, "github.com")
    assert not matches("github.com", normalize_host("gіthub.com"))


# --- refused forms --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "fragment"),
    [
        ("*", '"*" allows every host'),
        ("*.", '"*" allows every host'),
        ("*.*", '"*" allows every host'),
        ("*.com", "at least two labels"),
        ("*.org.", "at least two labels"),
        ("https://registry.npmjs.org", 'has a scheme. Write only the host: "registry.npmjs.org"'),
        ("http://gist.github.com/x", 'has a scheme. Write only the host: "gist.github.com"'),
        ("registry.npmjs.org/", 'has a path. Write only the host: "registry.npmjs.org"'),
        ("github.com/user/repo", 'has a path. Write only the host: "github.com"'),
        ("registry.npmjs.org:443", 'has a port. Entries name hosts on any port; write "registry.npmjs.org"'),
        ("a.*.github.com", 'only as a leading "*."'),
        ("github.*", 'only as a leading "*."'),
        ("*github.com", 'only as a leading "*."'),
        ("*.*.github.com", 'only as a leading "*."'),
        ("10.0.0.0/8", "CIDR ranges are not supported"),
        ("192.168.1.0/24", "CIDR ranges are not supported"),
        (" github.com", "contains whitespace"),
        ("github.com ", "contains whitespace"),
        ("git hub.com", "contains whitespace"),
        ("github.com\t", "contains whitespace"),
        ("::1", "IPv6 literals"),
        ("[::1]", "IPv6 literals"),
        ("[2001:db8::1]:443", "IPv6 literals"),
        ("fe80::1%eth0", "IPv6 literals (and zone ids)"),
        ("github\x00.com", "control character"),
        ("", "empty host name"),
        ("256.1.1.1", "not a valid IPv4 address"),
        ("a..github.com", "empty label"),
        ("git_hub.com", "is not a host name"),
        ("-github.com", "is not a host name"),
        ("a" * 64 + ".com", "is not a host name"),
        (("a" * 60 + ".") * 5 + "com", "the limit is 253"),
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
