"""Host names and domain patterns: how an allowlist entry is written, normalized and matched.

This is the one definition of "does this entry match this host", shared by the
static analyzer and by the egress proxy that runs inside the services image.
It must therefore stay standard-library only and import nothing from the
package: the image copies this file on its own.

Rules (the policy language):

* an entry is an exact host name (case-insensitive, a trailing dot dropped,
  internationalized names turned to punycode), an IPv4 literal, or
  ``*.suffix``;
* ``*.suffix`` matches strict subdomains of a suffix of at least two labels and
  NOT the bare suffix: ``*.github.com`` matches ``gist.github.com`` but not
  ``github.com``;
* a host is reachable iff no denied entry matches it and some allowed entry does.

It also says which server of the simulated internet answers for a name
(``server_of``): the one rule the static analyzer and the simulated internet
share, so a name the world does not know is the attacker's on both sides.
"""

from __future__ import annotations

import re
from typing import Iterable

__all__ = [
    "MAX_HOST_LENGTH",
    "host_allowed",
    "is_ipv4",
    "matches",
    "normalize_host",
    "normalize_pattern",
    "operator_domain",
    "server_of",
]

MAX_HOST_LENGTH = 253  # DNS limit for a full name, dots included
_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_IPV4 = re.compile(r"^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_ipv4(text: str) -> bool:
    """True for a dotted-quad IPv4 literal with every octet in 0..255."""
    m = _IPV4.match(text)
    return bool(m) and all(0 <= int(g) <= 255 for g in m.groups())  # type: ignore[union-attr]


def _to_ascii(name: str) -> str:
    """Lower-case and punycode a host name, so look-alikes cannot pass for the real one."""
    if name.isascii():
        return name.lower()
    try:
        return name.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise ValueError(
            f"{name!r} is not a valid internationalized host name. Write the host in plain ASCII."
        ) from None


def _check_name(name: str, original: str) -> str:
    if len(name) > MAX_HOST_LENGTH:
        raise ValueError(
            f"host name is {len(name)} characters long; the limit is {MAX_HOST_LENGTH}. Shorten it."
        )
    labels = name.split(".")
    for label in labels:
        if not label:
            raise ValueError(f"{original!r} has an empty label (two dots in a row). Remove the extra dot.")
        if not _LABEL.match(label):
            raise ValueError(
                f"{original!r} is not a host name: label {label!r} may hold only letters, digits "
                "and inner hyphens, at most 63 characters."
            )
    return name


def normalize_host(name: str) -> str:
    """Normalize a host name as a client requested it (proxy side); raise ValueError if it is none.

    IPv4 literals are kept as they are; names are lower-cased, lose a trailing
    dot and are punycoded.
    """
    if not name or any(ord(c) < 0x21 or c == "\x7f" for c in name):
        raise ValueError("empty host name or one with spaces or control characters")
    if name.endswith(".") and len(name) > 1:
        name = name[:-1]
    if is_ipv4(name):
        return name
    return _check_name(_to_ascii(name), name)


def normalize_pattern(entry: str) -> str:
    """Normalize one ``allowedDomains``/``deniedDomains`` entry; raise ValueError saying how to fix it."""
    if not isinstance(entry, str):  # pragma: no cover - the model checks types first
        raise ValueError("must be a string")
    if entry == "":
        raise ValueError('empty host name. Write a host such as "registry.npmjs.org", or remove the entry.')
    if any(c.isspace() for c in entry):
        raise ValueError("contains whitespace. Write one host name per entry, with no spaces.")
    if any(ord(c) < 0x20 or c == "\x7f" for c in entry):
        raise ValueError(
            "contains a control character (such as NUL). A host name is letters, digits, '-' and '.'."
        )
    if _SCHEME.match(entry):
        host = entry.split("://", 1)[1].split("/", 1)[0]
        raise ValueError(f'has a scheme. Write only the host: "{host}".')
    if "/" in entry:
        head = entry.split("/", 1)[0]
        if is_ipv4(head):
            raise ValueError(
                "CIDR ranges are not supported: the proxy decides by host name. List hosts instead."
            )
        raise ValueError(f'has a path. Write only the host: "{head}".')
    if entry.startswith("[") or entry.count(":") >= 2:
        raise ValueError(
            "IPv6 literals (and zone ids) are not supported. The simulated internet is reached "
            "by host name; list the host name instead."
        )
    if ":" in entry:
        host = entry.split(":", 1)[0]
        raise ValueError(
            f'has a port. Entries name hosts on any port; write "{host}".'
        )
    if entry in ("*", "*.", "*.*"):
        raise ValueError(
            '"*" allows every host. List the hosts the job needs instead, e.g. "registry.npmjs.org".'
        )
    wildcard = entry.startswith("*.")
    rest = entry[2:] if wildcard else entry
    if "*" in rest:
        raise ValueError(
            'a wildcard is allowed only as a leading "*." (e.g. "*.example.com"). '
            "Write the exact host, or one leading wildcard."
        )
    if rest.endswith("."):
        rest = rest[:-1]
    if not rest:
        raise ValueError('"*." needs a domain after it, e.g. "*.example.com".')
    if not wildcard and is_ipv4(rest):
        return rest
    if _IPV4.match(rest):
        raise ValueError(f"{entry!r} is not a valid IPv4 address: each number must be 0..255.")
    name = _check_name(_to_ascii(rest), entry)
    if wildcard and all(label.isdigit() for label in name.split(".")):
        raise ValueError(f'"{entry}" puts a wildcard over numbers; IP addresses have no subdomains. Write the address itself.')
    if wildcard and name.count(".") < 1:
        raise ValueError(
            f'"*.{name}" would match every host under a top-level domain. '
            "A wildcard needs a suffix of at least two labels, e.g. \"*.example.com\"."
        )
    return f"*.{name}" if wildcard else name


def matches(pattern: str, host: str) -> bool:
    """True if a normalized pattern matches a normalized host.

    ``*.suffix`` matches strict subdomains only: the bare suffix is not matched,
    as in sandbox-runtime.
    """
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    return pattern == host


def host_allowed(host: str, allowed: Iterable[str], denied: Iterable[str]) -> bool:
    """Deny wins: reachable iff no denied pattern and some allowed pattern matches."""
    if any(matches(p, host) for p in denied):
        return False
    return any(matches(p, host) for p in allowed)


RESERVED_NOWHERE = "invalid"  # RFC 6761: a name under .invalid never exists, anywhere


def operator_domain(host: str) -> str:
    """The domain a host's operator holds: its last two labels (``gist.github.com`` → ``github.com``).

    Every host the simulated internet models lies directly under a two-label
    registrable domain, so no public-suffix list is needed here.
    """
    return ".".join(host.split(".")[-2:])


def server_of(
    host: str, hosts: Iterable[str], zones: Iterable[str], operators: Iterable[str], catch_all: str | None
) -> str | None:
    """Which server of the simulated internet answers for ``host`` (normalized); None when none does.

    * a name in one of ``zones`` (the zone itself or under it, at any depth):
      that zone's server, named by the zone;
    * a listed host: its own server, named by the host;
    * any other name under an operator's domain (``operators``): none, since
      the operator has no such host; and none under ``.invalid`` either;
    * every other name, IP literals included: ``catch_all``'s server (the
      attacker's, so a name nobody vouches for fails closed), or none.

    The one rule for "who answers this name", shared by the static analyzer
    (``World.server_of``) and by the simulated internet that enforces it.
    """
    for zone in zones:
        if host == zone or host.endswith("." + zone):
            return zone
    if host in set(hosts):
        return host
    if host == RESERVED_NOWHERE or host.endswith("." + RESERVED_NOWHERE):
        return None
    if any(host == d or host.endswith("." + d) for d in operators):
        return None
    return catch_all
