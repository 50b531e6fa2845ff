"""Host names and domain patterns: how an allowlist entry is written, normalized and matched.

This is the one definition of "does this entry match this host", shared by the
static analyzer and by the egress proxy that runs inside the services image.
It must therefore stay standard-library only and import nothing from the
package: the image copies this file on its own.

Rules (the policy language):

* an entry is an exact host name (case-insensitive, a trailing dot dropped,
  internationalized names turned to punycode), an IPv4 literal or
  ``*.suffix``, optionally followed by ``:port`` (1-65535),
  which restricts the entry to that port (without one it matches every port);
  in ``deniedDomains`` a bare ``*`` (or ``*:port``) denies every host;
* ``*.suffix`` matches strict subdomains of a suffix of at least two labels and
  NOT the bare suffix: ``*.github.com`` matches ``gist.github.com`` but not
  ``github.com``;
* ``host:port`` is reachable iff no denied entry matches it and some allowed entry does.

These are sandbox-runtime's rules (its ``domain-pattern`` tests are
``tests/unit/test_domains.py``'s too).

It also says which server of the simulated internet answers for a name
(``server_of``): the one rule the static analyzer and the simulated internet
share, so a name the world does not know is the attacker's on both sides.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Iterable

__all__ = [
    "MAX_HOST_LENGTH",
    "host_allowed",
    "is_ipv4",
    "matches",
    "normalize_host",
    "normalize_pattern",
    "entry_host",
    "entry_port",
    "split_port",
    "web_scheme",
    "WEB_PORTS",
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


_PORT = re.compile(r"^[1-9][0-9]{0,4}$")


def split_port(entry: str) -> tuple[str, int | None]:
    """An entry's host pattern and its port (None: every port), as sandbox-runtime splits them.

    ``"api.example.com:443"`` → ``("api.example.com", 443)``; ``"*:22"`` →
    ``("*", 22)``; ``"[::1]:443"`` → ``("[::1]", 443)``; anything whose suffix
    is no port (``":0"``, ``":0443"``, ``":abc"``, ``":"``) is left whole, for
    the host check to refuse.
    """
    if entry.startswith("["):
        close = entry.find("]")
        if close != -1 and entry[close + 1:].startswith(":"):
            text = entry[close + 2:]
            if _PORT.match(text) and int(text) <= 65535:
                return entry[:close + 1], int(text)
        return entry, None
    host, sep, text = entry.rpartition(":")
    if sep and ":" not in host and _PORT.match(text) and int(text) <= 65535:
        return host, int(text)
    return entry, None


def entry_host(entry: str) -> str:
    """A normalized entry without its port: the host pattern every host-level rule reads."""
    return split_port(entry)[0]


def entry_port(entry: str) -> int | None:
    """A normalized entry's port (None: every port)."""
    return split_port(entry)[1]


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _ipv6(entry: str) -> str:
    """A bracketed IPv6 literal in its canonical form, ``[2001:db8::1]``; raise ValueError if it is none."""
    inner = entry[1:-1] if entry.startswith("[") and entry.endswith("]") else ""
    try:
        if not inner or "%" in inner:
            raise ValueError(inner)
        return f"[{ipaddress.IPv6Address(inner).compressed}]"
    except ValueError:
        raise ValueError(
            "is not a bracketed IPv6 literal: write it as \"[2001:db8::1]\" (zone ids such as %eth0 are not "
            "allowed), optionally followed by a port, \"[2001:db8::1]:443\"."
        ) from None


def normalize_pattern(entry: str, *, denied: bool = False) -> str:
    """Normalize one ``allowedDomains`` (or, with ``denied``, ``deniedDomains``) entry; raise ValueError saying how to fix it.

    As in sandbox-runtime: an optional ``:port`` (1-65535) restricts the entry
    to that port; a bare ``*`` (or ``*:port``) is accepted in ``deniedDomains``
    only, where it denies every host (on that port). One difference, on
    purpose: a bracketed IPv6 literal, valid there, is refused with its reason
    (the simulated internet has no IPv6, and what the grader cannot measure it
    does not grade).
    """
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
    host, port = split_port(entry)
    suffix = f":{port}" if port is not None else ""
    if host.startswith("[") or host.count(":") >= 2:
        if not host.startswith("[") and ":" in host.split(":", 1)[1] and not _is_ipv6(host):
            name = host.split(":", 1)[0]
            raise ValueError(f'is not a host with one port. Write "{name}" for every port, or "{name}:443" for one.')
        if not host.startswith("["):
            raise ValueError(
                "is an IPv6 literal without brackets, which is ambiguous next to a port. "
                f'Write it in brackets: "[{host}]" (or "[{host}]:443" for one port).'
            )
        raise ValueError(
            f'names the IPv6 address {_ipv6(host)}. sandbox-runtime accepts it, but the simulated internet has no '
            "IPv6, so the lab cannot measure what it opens (on a real machine [::1] is the machine itself): "
            "remove it, or name the host instead."
        )
    if ":" in host:
        name, _, text = host.rpartition(":")
        raise ValueError(
            f'has the port {text!r}, which is no port: a port is a number from 1 to 65535 without leading '
            f'zeros. Write "{name}:443" for one port, or "{name}" for every port.'
        )
    if host in ("*", "*.", "*.*"):
        if denied and host == "*":
            return "*" + suffix
        if denied:
            raise ValueError('a deny-all entry is written "*" (or "*:22" for one port).')
        raise ValueError(
            '"*" would allow every host. List the hosts the job needs instead, e.g. "registry.npmjs.org" '
            '(in deniedDomains, "*" denies every host).'
        )
    return _host_pattern(host, entry) + suffix


def _host_pattern(host: str, entry: str) -> str:
    """A host pattern without a port: an exact name, an IPv4 literal or ``*.suffix``."""
    wildcard = host.startswith("*.")
    rest = host[2:] if wildcard else host
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


def matches(pattern: str, host: str, port: int | None = None) -> bool:
    """True if a normalized entry matches a normalized host (on ``port``).

    ``*.suffix`` matches strict subdomains only: the bare suffix is not matched,
    as in sandbox-runtime; ``*`` (deny-all) matches every host. An entry with a
    port matches that port only; with ``port`` None the entry's port is not
    looked at (the host-level question: which names does it name).
    """
    pattern, pinned = split_port(pattern)
    if port is not None and pinned is not None and pinned != port:
        return False
    if pattern == "*":
        return True
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    return pattern == host


def host_allowed(host: str, allowed: Iterable[str], denied: Iterable[str], port: int) -> bool:
    """Deny wins: ``host:port`` is reachable iff no denied entry and some allowed entry matches it."""
    if any(matches(p, host, port) for p in denied):
        return False
    return any(matches(p, host, port) for p in allowed)


WEB_PORTS = {"https": 443, "http": 80}


def web_scheme(host: str, allowed: Iterable[str], denied: Iterable[str], prefer: str = "https") -> str:
    """The scheme a request to ``host`` uses: ``prefer``, or the other web scheme when the lists open
    only the other's port to it (an entry pinned to ``:80`` or ``:443``); ``prefer`` when neither is open."""
    allowed, denied = tuple(allowed), tuple(denied)
    other = "http" if prefer == "https" else "https"
    if not host_allowed(host, allowed, denied, WEB_PORTS[prefer]) and host_allowed(host, allowed, denied, WEB_PORTS[other]):
        return other
    return prefer


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
