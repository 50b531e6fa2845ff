"""Host names and domain patterns: how an allowlist entry is validated, normalized and matched, as sandbox-runtime does it.

The one definition of "does this entry match this host", shared by the static
analyzer and by the egress proxy in the services image, which copies this file
alone: standard library only (``idna`` when installed, see below), no import
from the package. Every rule is srt 0.0.83's (``domain-pattern.js``,
``parent-proxy.js``, ``sandbox-config.js``, ``sandbox-manager.js``'s
``filterNetworkRequest``), checked against srt's own functions over generated
cases in ``tests/integration/test_srt_matching.py``:

* an entry is valid where srt's schema says: a pattern with a dot, not at
  either end, no ``:``, ``/`` or ``*`` but a leading ``*.`` over two labels or
  more, or ``localhost``, or a bracketed IPv6 literal; then an optional
  ``:port`` (1-65535, no leading zero); ``deniedDomains`` also takes ``*``. srt
  checks nothing else: ``ｇｉｓｔ.github.com`` and ``a b.com`` are valid;
* an entry is only lower-cased (``toLowerCase``; ``str.lower`` agrees wherever
  the result is ASCII, KELVIN SIGN → ``k`` included), never IDNA-mapped, folded
  or stripped of a dot: ``ｇｉｓｔ.github.com`` matches no host at all;
* a requested host must pass ``isValidHost`` (ASCII letters, digits, ``.``,
  ``_``, ``-`` or an IP literal; Unicode is denied as malformed: clients send
  the ``xn--`` form), then is spelled as the WHATWG URL parser spells it
  (``canonicalizeHost``: lower case, one trailing dot dropped, ``127.1`` and
  ``2852039166`` as dotted quads, IPv6 compressed, IPv4-mapped as IPv4), or
  matched as sent where that parser fails;
* ``*`` matches every host; ``*.suffix`` a host ending in ``.suffix`` (not
  ``suffix`` itself), never an IP literal; anything else the same string;
  an entry with a port matches that port only. Deny wins; without an ask
  callback srt denies what no allowed entry matches.

The lab refuses, saying why, four kinds of entry srt takes: an IPv6 address
(the simulated internet has none), a control character (it matches nothing,
and the lab does not print it), a bracket only a full URL parser reads, and a
name DNS cannot carry (a label over 63 characters; nothing resolves it).
An ``xn--`` label is checked with UTS 46 when ``idna`` is installed; without
it (the services image) a host whose spelling depends on it is refused.

``server_of`` says which server of the simulated internet answers a name: the
one rule the static analyzer and the simulated internet share.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from typing import Iterable

from types import ModuleType

_idna: ModuleType | None
try:  # UTS 46 data, to check an xn-- label as the WHATWG URL parser does; absent in the services image
    import idna as _idna
except ImportError:  # pragma: no cover - the host venv has it
    _idna = None

__all__ = ["MAX_ENTRY_NAME", "MAX_HOST_LENGTH", "canonicalize_host", "entry_host", "entry_port", "filter_request",
           "host_allowed", "is_ipv4", "is_valid_host", "matches", "never_matches", "normalize_host", "normalize_pattern",
           "request_host", "split_port", "srt_accepts", "web_scheme", "WEB_PORTS", "operator_domain", "server_of"]

MAX_HOST_LENGTH = 253  # DNS limit for a full name, dots included (the world's names)
MAX_ENTRY_NAME = 200  # an entry's name: the scope scan asks for a fresh name under it, ~20 characters more
_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_IPV4 = re.compile(r"^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")

# Node's net.isIP (lib/internal/net.js), verbatim: what srt means by "an IP literal".
_V4SEG = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
_V4STR = rf"(?:{_V4SEG}\.){{3}}{_V4SEG}"
_V6SEG = r"(?:[0-9a-fA-F]{1,4})"
_NODE_V4 = re.compile(rf"^{_V4STR}$")
_NODE_V6 = re.compile(
    "^(?:"
    rf"(?:{_V6SEG}:){{7}}(?:{_V6SEG}|:)|"
    rf"(?:{_V6SEG}:){{6}}(?:{_V4STR}|:{_V6SEG}|:)|"
    rf"(?:{_V6SEG}:){{5}}(?::{_V4STR}|(?::{_V6SEG}){{1,2}}|:)|"
    rf"(?:{_V6SEG}:){{4}}(?:(?::{_V6SEG}){{0,1}}:{_V4STR}|(?::{_V6SEG}){{1,3}}|:)|"
    rf"(?:{_V6SEG}:){{3}}(?:(?::{_V6SEG}){{0,2}}:{_V4STR}|(?::{_V6SEG}){{1,4}}|:)|"
    rf"(?:{_V6SEG}:){{2}}(?:(?::{_V6SEG}){{0,3}}:{_V4STR}|(?::{_V6SEG}){{1,5}}|:)|"
    rf"(?:{_V6SEG}:){{1}}(?:(?::{_V6SEG}){{0,4}}:{_V4STR}|(?::{_V6SEG}){{1,6}}|:)|"
    rf"(?::(?:(?::{_V6SEG}){{0,5}}:{_V4STR}|(?::{_V6SEG}){{1,7}}|:))"
    r")(?:%[0-9a-zA-Z\-.:]{1,})?$"
)
_VALID_HOST = re.compile(r"^[A-Za-z0-9._-]+$")  # srt's isValidHost, for a name
_URL_HOST = re.compile(r"^[A-Za-z0-9._*-]*$")  # what this module parses as the URL parser would; see _url_host
_PORT = re.compile(r"^[1-9][0-9]{0,4}$")


class _Unknown(Exception):
    """What srt makes of this host depends on a check this module cannot make here."""


def is_ipv4(text: str) -> bool:
    """True for a dotted-quad IPv4 literal with every octet in 0..255."""
    m = _IPV4.match(text)
    return bool(m) and all(0 <= int(g) <= 255 for g in m.groups())  # type: ignore[union-attr]


def _node_is_ip(text: str) -> int:
    """Node's ``net.isIP``: 4, 6 (a zone id allowed) or 0."""
    if _NODE_V4.match(text) and "\n" not in text:
        return 4
    if _NODE_V6.match(text) and "\n" not in text:
        return 6
    return 0


def _strip_brackets(host: str) -> str:
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


# --- the URL parser's host, for the spellings srt meets -------------------------------------

_IPV4_NUMBER = {10: re.compile(r"^[0-9]+$"), 16: re.compile(r"^[0-9a-fA-F]+$"), 8: re.compile(r"^[0-7]+$")}


def _ipv4_number(text: str) -> int | None:
    """The WHATWG IPv4 number parser: decimal, ``0x`` hex or leading-zero octal; None on failure."""
    if not text:
        return None
    radix = 10
    if text[:2] in ("0x", "0X"):
        text, radix = text[2:], 16
    elif len(text) >= 2 and text[0] == "0":
        text, radix = text[1:], 8
    if not text:
        return 0
    return int(text, radix) if _IPV4_NUMBER[radix].match(text) else None


def _ends_in_number(host: str) -> bool:
    parts = host.split(".")
    if parts[-1] == "":
        if len(parts) == 1:
            return False
        parts.pop()
    last = parts[-1]
    return bool(re.match(r"^[0-9]+$", last)) or _ipv4_number(last) is not None


def _ipv4_host(host: str) -> str | None:
    """The WHATWG IPv4 parser (``127.1``, ``2852039166``, ``0x7f.1``) as a dotted quad; None on failure."""
    parts = host.split(".")
    if parts[-1] == "" and len(parts) > 1:
        parts.pop()
    if len(parts) > 4:
        return None
    numbers = [_ipv4_number(p) for p in parts]
    if any(n is None for n in numbers):
        return None
    nums = [n for n in numbers if n is not None]
    if any(n > 255 for n in nums[:-1]) or nums[-1] >= 256 ** (5 - len(nums)):
        return None
    value = nums[-1] + sum(n * 256 ** (3 - i) for i, n in enumerate(nums[:-1]))
    return ".".join(str((value >> s) & 255) for s in (24, 16, 8, 0))


def _alabel_ok(label: str) -> bool:
    """Whether the URL parser (UTS 46, non-transitional) takes an ``xn--`` label; _Unknown without ``idna``."""
    try:
        text = label[4:].encode("ascii").decode("punycode")
    except (UnicodeError, ValueError, IndexError):
        return False
    if not text:
        return False
    if text.isascii():
        return True  # the basic code points of a lower-cased label: Node's parser (ada) takes them as they are
    if _idna is None:
        raise _Unknown("an xn-- label is checked with the idna package, which is not installed")
    if unicodedata.normalize("NFC", text) != text or unicodedata.category(text[0]).startswith("M"):
        return False
    try:
        if _idna.uts46_remap(text, std3_rules=False, transitional=False) != text:
            return False  # a character UTS 46 maps is not valid inside an xn-- label
        _idna.check_bidi(text)
        for i, c in enumerate(text):
            if unicodedata.combining(c) == 0 and ord(c) in (0x200C, 0x200D) and not _idna.valid_contextj(text, i):
                return False
    except (_idna.IDNAError, ValueError, IndexError):
        return False
    return True


def _url_host(text: str) -> str | None:
    """``new URL("http://" + text + "/").hostname`` for a name of ASCII letters, digits, ``.``, ``_``, ``-``, ``*``.

    None where the URL parser fails (a bad ``xn--`` label, a name that ends in
    a number but is no IPv4 address, nothing at all). Other text raises _Unknown.
    """
    if not _URL_HOST.match(text):
        raise _Unknown("only a full URL parser reads this")
    host = text.lower()
    if not host:
        return None
    for label in host.split("."):
        try:
            if label.startswith("xn--") and not _alabel_ok(label):
                return None
        except _Unknown:
            if host.endswith("."):
                raise  # valid: the dot goes; invalid: the host is matched as sent, dot and all
            # without a trailing dot both readings match alike (the sent host is lower-cased at match time)
    if _ends_in_number(host):
        return _ipv4_host(host)
    return host


def _ipv6_host(text: str) -> str | None:
    """The URL parser's spelling of an IPv6 literal (RFC 5952 compression), an IPv4-mapped one as its IPv4."""
    try:
        packed = ipaddress.IPv6Address(text).packed
    except ValueError:
        return None
    if packed[:10] == bytes(10) and packed[10:12] == b"\xff\xff":  # srt's mappedIPv4: it dials that IPv4 address
        return ".".join(str(b) for b in packed[12:])
    return ipaddress.IPv6Address(packed).compressed  # RFC 5952, as the URL parser writes it


def canonicalize_host(host: str) -> str | None:
    """srt's ``canonicalizeHost``: the URL parser's spelling, one trailing dot dropped; None where it fails.

    Raises _Unknown where only a full URL parser or the ``idna`` package could say."""
    bare = _strip_brackets(host)
    if _node_is_ip(bare) == 6:
        return _ipv6_host(bare) if "%" not in bare else None
    out = _url_host(bare)
    if out is None:
        return None
    return out[:-1] if out.endswith(".") else out


def is_valid_host(host: str) -> bool:
    """srt's ``isValidHost``: a requested host it matches at all (else it is denied as malformed)."""
    if not host or len(host) > 255:
        return False
    bare = _strip_brackets(host)
    if "%" in bare:
        return False
    return bool(_node_is_ip(bare)) or bool(_VALID_HOST.match(bare))


def request_host(host: str) -> str:
    """A requested host as srt's filter matches it (``isValidHost``, then ``canonicalizeHost`` or the host as sent).

    Raises ValueError, saying why, for a host srt denies as malformed, and for
    one whose canonical form only the ``idna`` package could tell (fail closed).
    """
    if not is_valid_host(host):
        if host and not host.isascii():
            raise ValueError("not plain ASCII: srt denies it as a malformed host (a client sends the xn-- form)")
        raise ValueError("malformed host: srt takes ASCII letters, digits, '.', '_', '-' or an IP literal")
    try:
        canonical = canonicalize_host(host)
    except _Unknown as exc:
        raise ValueError(f"cannot tell what srt makes of it here: {exc}") from None
    return host if canonical is None else canonical


def _drop_zone(host: str) -> str:
    pct = host.find("%")
    return host if pct == -1 else host[:pct]


def _port_suffix(text: str) -> int | None:
    return int(text) if _PORT.match(text) and int(text) <= 65535 else None


def split_port(entry: str) -> tuple[str, int | None]:
    """An entry's host pattern and its port (None: every port), as srt's ``splitDomainPatternPort`` splits them.

    ``"api.example.com:443"`` → ``("api.example.com", 443)``; ``"*:22"`` →
    ``("*", 22)``; ``"[::1]:443"`` → ``("::1", 443)`` (inside brackets the
    URL parser's spelling: ``"[127.1]"`` → ``("127.0.0.1", None)``); anything
    whose suffix is no port (``":0"``, ``":0443"``, ``":abc"``, ``":"``) is
    left whole, for the host check to refuse.
    """
    if entry.startswith("["):
        close = entry.find("]")
        if close == -1:
            return entry, None
        inner = _drop_zone(entry[1:close])
        try:
            canonical = canonicalize_host(inner)
        except _Unknown:
            canonical = None  # normalize_pattern refuses such an entry before anyone splits it
        host = inner if canonical is None else canonical
        rest = entry[close + 1:]
        if rest == "":
            return host, None
        port = _port_suffix(rest[1:] if rest.startswith(":") else "")
        return (entry, None) if port is None else (host, port)
    idx = entry.rfind(":")
    if idx == -1:
        return entry, None
    if entry.find(":") != idx:  # two colons or more, unbracketed: never split
        host = _drop_zone(entry)
        try:
            canonical = canonicalize_host(host)
        except _Unknown:
            canonical = None
        return (host if canonical is None else canonical), None
    port = _port_suffix(entry[idx + 1:])
    return (entry, None) if port is None else (entry[:idx], port)


def entry_host(entry: str) -> str:
    """A normalized entry without its port: the host pattern every host-level rule reads."""
    return split_port(entry)[0]


def entry_port(entry: str) -> int | None:
    """A normalized entry's port (None: every port)."""
    return split_port(entry)[1]


def _valid_domain_pattern(val: str) -> bool:
    """srt's ``isValidDomainPattern``, verbatim."""
    if _node_is_ip(val) == 6:
        return True
    if "://" in val or "/" in val or ":" in val:
        return False
    if val == "localhost":
        return True
    if val.startswith("*."):
        domain = val[2:]
        if "." not in domain or domain.startswith(".") or domain.endswith("."):
            return False
        parts = domain.split(".")
        return len(parts) >= 2 and all(parts)
    if "*" in val:
        return False
    return "." in val and not val.startswith(".") and not val.endswith(".")


def _ipv6_bracketed(val: str) -> bool:
    """srt's ``hasValidIpv6Bracketing``: two colons or more only inside brackets."""
    first = val.find(":")
    return first == -1 or val.find(":", first + 1) == -1 or val.startswith("[")


def srt_accepts(entry: str, *, denied: bool = False) -> bool:
    """Whether srt's schema takes ``entry`` in ``allowedDomains`` (or, with ``denied``, ``deniedDomains``)."""
    if not _ipv6_bracketed(entry):
        return False
    host = split_port(entry)[0]
    return (denied and host == "*") or _valid_domain_pattern(host)


def _why_refused(entry: str, host: str, denied: bool) -> str:
    """The learner's words for an entry srt's schema refuses: the problem, then the fix."""
    if entry == "":
        return 'empty host name. Write a host such as "registry.npmjs.org", or remove the entry.'
    if _SCHEME.match(entry) or "://" in entry:
        name = entry.split("://", 1)[1].split("/", 1)[0]
        return f'has a scheme. Write only the host: "{name}".'
    if "/" in entry:
        head = entry.split("/", 1)[0]
        if is_ipv4(head):
            return "CIDR ranges are not supported: the proxy decides by host name. List hosts instead."
        return f'has a path. Write only the host: "{head}".'
    if not _ipv6_bracketed(entry):
        name = entry.split(":", 1)[0]
        if not _node_is_ip(_drop_zone(entry)) and name and ":" in entry.split(":", 1)[1]:
            return f'is not a host with one port. Write "{name}" for every port, or "{name}:443" for one.'
        return ("is an IPv6 literal without brackets, which is ambiguous next to a port. "
                f'Write it in brackets: "[{entry}]" (or "[{entry}]:443" for one port).')
    if entry.startswith("[") and host == entry:
        return 'is not a bracketed IPv6 literal with an optional port: write "[2001:db8::1]" or "[2001:db8::1]:443".'
    if ":" in host:
        name, _, text = host.rpartition(":")
        return (f"has the port {text!r}, which is no port: a port is a number from 1 to 65535 without leading "
                f'zeros. Write "{name}:443" for one port, or "{name}" for every port.')
    if host in ("*", "*.", "*.*"):
        if denied:
            return 'a deny-all entry is written "*" (or "*:22" for one port).'
        return ('"*" would allow every host. List the hosts the job needs instead, e.g. "registry.npmjs.org" '
                '(in deniedDomains, "*" denies every host).')
    if host.startswith("*."):
        domain = host[2:]
        if domain.endswith("."):
            return f'ends with a dot, which sandbox-runtime refuses. Write "{host.rstrip(".")}".'
        if "." not in domain:
            return (f'"{host}" would match every host under a top-level domain. '
                    'A wildcard needs a suffix of at least two labels, e.g. "*.example.com".')
        return f'"{host}" has an empty label (two dots in a row). Remove the extra dot.'
    if "*" in host:
        return ('a wildcard is allowed only as a leading "*." (e.g. "*.example.com"). '
                "Write the exact host, or one leading wildcard.")
    if host.endswith(".") and host != ".":
        return f'ends with a dot, which sandbox-runtime refuses. Write "{host.rstrip(".")}".'
    if host.startswith("."):
        return f'starts with a dot, which sandbox-runtime refuses. Write "{host.lstrip(".")}", or "*{host}" for its subdomains.'
    return (f'"{host}" has no dot: sandbox-runtime refuses every name without one except "localhost". '
            f'Write the full name, e.g. "{host}.example.com".')


def normalize_pattern(entry: str, *, denied: bool = False) -> str:
    """Check one ``allowedDomains`` (or, with ``denied``, ``deniedDomains``) entry as srt's schema does; its normal form.

    The normal form is what srt's matcher compares: the host pattern srt's
    split yields (bracketed: as the URL parser spells it), lower-cased, and
    its ``:port``. Raises ValueError, saying how to fix it, for every entry
    srt refuses, and for the few the lab refuses on purpose (see the module's
    docstring): an IPv6 address, a control character, an unreadable bracket.
    """
    if not isinstance(entry, str):  # pragma: no cover - the model checks types first
        raise ValueError("must be a string")
    if any(unicodedata.category(c) == "Cc" for c in entry):
        raise ValueError("contains a control character (such as NUL or a tab). sandbox-runtime takes the entry, but no host "
                         "it lets through has one, so it matches nothing; the lab refuses it rather than print it. "
                         "A host name is letters, digits, '-' and '.'.")
    if entry.startswith("["):
        close = entry.find("]")
        try:
            if close != -1:
                canonicalize_host(_drop_zone(entry[1:close]))
        except _Unknown:
            raise ValueError("holds, inside brackets, something sandbox-runtime reads with a full URL parser, which the "
                             'lab does not model. Write the host without brackets, e.g. "example.com:443"; brackets are '
                             "for IPv6.") from None
    host, port = split_port(entry)
    if not srt_accepts(entry, denied=denied):
        raise ValueError(_why_refused(entry, host, denied))
    name = host[2:] if host.startswith("*.") else host  # the scan asks under it: leave room for its own label
    if len(name) > MAX_ENTRY_NAME or any(len(label) > 63 for label in name.split(".")):
        raise ValueError(f"is too long a name: DNS carries at most 63 in a label, and the lab (which asks for names "
                         f"under it) {MAX_ENTRY_NAME} in all. srt takes it, but it can never be looked up, so the lab "
                         "cannot measure it: remove it, or name the host the job needs.")
    if _node_is_ip(host) == 6:
        raise ValueError(f'names the IPv6 address {host}. sandbox-runtime accepts it, but the simulated internet has no '
                         "IPv6, so the lab cannot measure what it opens (on a real machine [::1] is the machine itself): "
                         "remove it, or name the host instead.")
    return host.lower() + (f":{port}" if port is not None else "")


def never_matches(entry: str) -> str | None:
    """Why a normalized entry can match no requested host (None when it can): the learner should hear it.

    srt lets through only hosts of ASCII letters, digits, ``.``, ``_`` and
    ``-`` and compares an entry letter for letter, so an entry holding any
    other character (a full-width or Cyrillic look-alike, a space) names
    nothing: in ``deniedDomains`` it blocks nothing.
    """
    host = split_port(entry)[0]
    if host == "*":
        return None
    name = host[2:] if host.startswith("*.") else host
    if _VALID_HOST.match(name):
        return None
    hint = ""
    folded = unicodedata.normalize("NFKC", name).lower()
    if folded != name and _VALID_HOST.match(folded):
        hint = f' If you meant {("*." if host.startswith("*.") else "") + folded}, write it in plain ASCII.'
    elif not name.isascii():
        hint = " Write the host in plain ASCII (an internationalized name as its xn-- form)."
    return ("can match no host: sandbox-runtime compares it letter for letter with the requested host, which is "
            "ASCII letters, digits, '.', '_' and '-', and never maps the entry's other characters to ASCII." + hint)


def matches(pattern: str, host: str, port: int | None = None) -> bool:
    """srt's ``matchesDomainPatternWithPort``: True if an entry matches a host srt's filter has canonicalized.

    ``host`` is ``request_host``'s (a world name already is); one srt's filter
    would refuse as malformed (``ｇｉｓｔ.github.com``, ``a b.com``) matches
    nothing, not even itself, so every caller judges as the proxy. ``*`` matches
    every host; ``*.suffix`` a host ending in ``.suffix``, never an IP
    literal; anything else the same string, case-insensitively. An entry
    with a port matches that port only; with ``port`` None its port is not
    looked at (the host-level question: which names does it name).
    """
    pattern, pinned = split_port(pattern)
    if port is not None and pinned is not None and pinned != port:
        return False
    if host and not is_valid_host(host):
        return False
    h = host.lower()
    if pattern == "*":
        return True
    if pattern.startswith("*."):
        if _node_is_ip(_strip_brackets(h)):
            return False
        return h.endswith("." + pattern[2:].lower())
    return h == pattern.lower()


def host_allowed(host: str, allowed: Iterable[str], denied: Iterable[str], port: int) -> bool:
    """Deny wins: a canonical ``host:port`` is reachable iff no denied entry and some allowed entry matches it."""
    if any(matches(p, host, port) for p in denied):
        return False
    return any(matches(p, host, port) for p in allowed)


def filter_request(raw_host: str, port: int, allowed: Iterable[str], denied: Iterable[str]) -> bool:
    """srt's ``filterNetworkRequest`` without an ask callback: may a request to ``raw_host:port`` go out?

    A malformed host is denied; otherwise the canonical host is matched,
    deny first. A host whose canonical form cannot be told here is denied.
    """
    try:
        host = request_host(raw_host)
    except ValueError:
        return False
    return host_allowed(host, allowed, denied, port)


def _to_ascii(name: str) -> str:
    """Lower-case and punycode a world name (never a policy entry: srt does not map those)."""
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
    for label in name.split("."):
        if not label:
            raise ValueError(f"{original!r} has an empty label (two dots in a row). Remove the extra dot.")
        if not _LABEL.match(label):
            raise ValueError(
                f"{original!r} is not a host name: label {label!r} may hold only letters, digits "
                "and inner hyphens, at most 63 characters."
            )
    return name


def normalize_host(name: str) -> str:
    """Normalize a name of the simulated world (its config, its DNS questions); raise ValueError if it is none.

    The policy's matcher reads ``request_host`` instead: this stricter form is
    for the world's own names, which are DNS names. IPv4 literals are kept as
    they are; names are lower-cased, lose a trailing dot and are punycoded.
    """
    if not name or any(ord(c) < 0x21 or c == "\x7f" for c in name):
        raise ValueError("empty host name or one with spaces or control characters")
    if name.endswith(".") and len(name) > 1:
        name = name[:-1]
    if is_ipv4(name):
        return name
    return _check_name(_to_ascii(name), name)


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
