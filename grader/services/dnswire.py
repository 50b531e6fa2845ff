"""DNS wire format: parse a query, build an answer, and ask a server for A records.

Owns the small part of RFC 1035 that the simulated internet's DNS server and
the egress proxy need. Standard library only; it imports nothing from the
package, because the services image copies it next to ``internet.py`` and
``proxy.py``.

Every byte read from the network is treated as hostile: parsing bounds every
length, follows at most a few compression pointers (each strictly backwards),
and reports a bad packet as ``None`` or ``ValueError``, so a crafted packet can
neither crash nor hang the server.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from dataclasses import dataclass

__all__ = [
    "CLASS_ANY",
    "CLASS_IN",
    "DEFAULT_TTL",
    "RCODE_NOERROR",
    "RCODE_NOTIMP",
    "RCODE_NXDOMAIN",
    "TYPE_A",
    "TYPE_AAAA",
    "TYPE_ANY",
    "Query",
    "Response",
    "build_query",
    "build_response",
    "encode_name",
    "parse_query",
    "parse_response",
    "query_a",
]

TYPE_A = 1
TYPE_AAAA = 28
TYPE_ANY = 255
CLASS_IN = 1
CLASS_ANY = 255
RCODE_NOERROR = 0
RCODE_NXDOMAIN = 3
RCODE_NOTIMP = 4
# Short: a run lasts seconds, and no cache should outlive the run's world.
DEFAULT_TTL = 5

_HEADER = struct.Struct("!HHHHHH")
_QUESTION_TAIL = struct.Struct("!HH")
_RR_TAIL = struct.Struct("!HHIH")
_FLAG_QR = 0x8000
_FLAG_AA = 0x0400
_FLAG_TC = 0x0200
_FLAG_RD = 0x0100
_FLAG_RA = 0x0080
_OPCODE_MASK = 0x7800
_MAX_NAME = 255  # RFC 1035 limit on a name's wire length
_MAX_LABEL = 63
_MAX_POINTERS = 16  # real packets need one or two; more is a loop or an attack
_MAX_RECORDS = 64  # answers we are willing to walk in a response


@dataclass(frozen=True)
class Query:
    """The first question of a DNS query, as sent.

    ``labels`` keep the client's letter case: some resolvers randomize case
    (DNS 0x20) and check that the answer echoes it.
    """

    id: int
    flags: int
    labels: tuple[bytes, ...]
    qtype: int
    qclass: int

    @property
    def qname(self) -> str:
        """The name in lower case, without the trailing dot, odd bytes escaped as ``\\DDD``."""
        return ".".join(_label_text(label) for label in self.labels).lower()

    @property
    def opcode(self) -> int:
        return (self.flags & _OPCODE_MASK) >> 11


@dataclass(frozen=True)
class Response:
    """What a client needs from an answer: its id, status and IPv4 addresses."""

    id: int
    rcode: int
    truncated: bool
    addresses: tuple[str, ...]


def _label_text(label: bytes) -> str:
    # Presentation format (RFC 4343): exfiltrated data often rides in labels,
    # so keep every byte visible and unambiguous instead of dropping it.
    out = []
    for byte in label:
        if byte in (0x2E, 0x5C):  # "." and "\" inside a label
            out.append("\\" + chr(byte))
        elif 0x21 <= byte <= 0x7E:
            out.append(chr(byte))
        else:
            out.append(f"\\{byte:03d}")
    return "".join(out)


def _read_name(data: bytes, offset: int) -> tuple[tuple[bytes, ...], int]:
    """Read a possibly compressed name at ``offset``; return its labels and the offset after it."""
    labels: list[bytes] = []
    wire_length = 1
    end: int | None = None
    jumps = 0
    while True:
        if offset >= len(data):
            raise ValueError("name runs past the end of the packet")
        length = data[offset]
        if length & 0xC0 == 0xC0:
            if offset + 1 >= len(data):
                raise ValueError("truncated compression pointer")
            target = ((length & 0x3F) << 8) | data[offset + 1]
            # Pointers must go strictly backwards; with the jump cap this
            # makes a pointer loop impossible rather than merely bounded.
            if target >= offset:
                raise ValueError("compression pointer does not point backwards")
            jumps += 1
            if jumps > _MAX_POINTERS:
                raise ValueError("too many compression pointers")
            if end is None:
                end = offset + 2
            offset = target
            continue
        if length & 0xC0:
            raise ValueError("reserved label type")
        offset += 1
        if length == 0:
            return tuple(labels), (end if end is not None else offset)
        label = data[offset : offset + length]
        if len(label) != length:
            raise ValueError("label runs past the end of the packet")
        wire_length += length + 1
        if wire_length > _MAX_NAME:
            raise ValueError("name longer than 255 bytes")
        labels.append(label)
        offset += length


def _encode_labels(labels: tuple[bytes, ...]) -> bytes:
    return b"".join(bytes([len(label)]) + label for label in labels) + b"\x00"


def encode_name(name: str) -> bytes:
    """Encode a dotted ASCII name (trailing dot optional); raise ValueError if it cannot be one."""
    text = name[:-1] if name.endswith(".") else name
    if not text:
        return b"\x00"
    try:
        labels = tuple(label.encode("ascii") for label in text.split("."))
    except UnicodeEncodeError:
        raise ValueError(f"{name!r} is not ASCII; punycode it first") from None
    if any(not label or len(label) > _MAX_LABEL for label in labels):
        raise ValueError(f"{name!r} has an empty label or one longer than 63 bytes")
    wire = _encode_labels(labels)
    if len(wire) > _MAX_NAME:
        raise ValueError(f"{name!r} is longer than 255 bytes on the wire")
    return wire


def parse_query(data: bytes) -> Query | None:
    """Parse a query's header and first question; ``None`` for anything malformed.

    Responses (QR set) count as malformed too: a server that answered them
    could be made to ping-pong with another server.
    """
    try:
        if len(data) < _HEADER.size:
            return None
        qid, flags, qdcount, _an, _ns, _ar = _HEADER.unpack_from(data)
        if flags & _FLAG_QR or qdcount < 1:
            return None
        labels, offset = _read_name(data, _HEADER.size)
        if offset + _QUESTION_TAIL.size > len(data):
            return None
        qtype, qclass = _QUESTION_TAIL.unpack_from(data, offset)
        return Query(id=qid, flags=flags, labels=labels, qtype=qtype, qclass=qclass)
    except (ValueError, struct.error, IndexError):
        return None


def build_response(
    query: Query,
    rcode: int = RCODE_NOERROR,
    addresses: tuple[str, ...] | list[str] = (),
    ttl: int = DEFAULT_TTL,
) -> bytes:
    """Answer ``query``: A records for ``addresses`` (may be empty), or just ``rcode``.

    The question is echoed with the client's letter case; EDNS and extra
    questions are dropped, which every stub resolver accepts.
    """
    flags = (
        _FLAG_QR
        | (query.flags & _OPCODE_MASK)
        | _FLAG_AA
        | (query.flags & _FLAG_RD)
        | _FLAG_RA
        | (rcode & 0x000F)
    )
    answers = b"".join(
        b"\xc0\x0c"  # pointer to the question's name at offset 12
        + _RR_TAIL.pack(TYPE_A, CLASS_IN, ttl, 4)
        + socket.inet_aton(address)
        for address in addresses
    )
    return (
        _HEADER.pack(query.id, flags, 1, len(addresses), 0, 0)
        + _encode_labels(query.labels)
        + _QUESTION_TAIL.pack(query.qtype, query.qclass)
        + answers
    )


def build_query(qid: int, name: str, qtype: int = TYPE_A) -> bytes:
    """A recursive-desired query for one name; raise ValueError for a name DNS cannot carry."""
    return (
        _HEADER.pack(qid & 0xFFFF, _FLAG_RD, 1, 0, 0, 0)
        + encode_name(name)
        + _QUESTION_TAIL.pack(qtype, CLASS_IN)
    )


def parse_response(data: bytes) -> Response:
    """Parse an answer's header and A records; raise ValueError if it is not a well-formed response."""
    try:
        qid, flags, qdcount, ancount, _ns, _ar = _HEADER.unpack_from(data)
        if not flags & _FLAG_QR:
            raise ValueError("not a response")
        offset = _HEADER.size
        for _ in range(min(qdcount, _MAX_RECORDS)):
            _labels, offset = _read_name(data, offset)
            offset += _QUESTION_TAIL.size
        addresses = []
        for _ in range(min(ancount, _MAX_RECORDS)):
            _labels, offset = _read_name(data, offset)
            rtype, rclass, _ttl, rdlength = _RR_TAIL.unpack_from(data, offset)
            offset += _RR_TAIL.size
            rdata = data[offset : offset + rdlength]
            if len(rdata) != rdlength:
                raise ValueError("record data runs past the end of the packet")
            offset += rdlength
            if rtype == TYPE_A and rclass == CLASS_IN and rdlength == 4:
                addresses.append(socket.inet_ntoa(rdata))
    except (struct.error, IndexError) as exc:
        raise ValueError(f"malformed DNS response: {exc}") from None
    return Response(
        id=qid,
        rcode=flags & 0x000F,
        truncated=bool(flags & _FLAG_TC),
        addresses=tuple(addresses),
    )


def query_a(server_ip: str, name: str, port: int = 53, timeout: float = 2.0) -> list[str]:
    """Ask one DNS server, and only it, for ``name``'s IPv4 addresses.

    Returns ``[]`` for NXDOMAIN. Raises TimeoutError when no answer comes in
    time, OSError for any other failure (refused, SERVFAIL, truncated), and
    ValueError for a name DNS cannot carry. The proxy uses this instead of the
    system resolver so that every lookup it makes lands on the run's server.
    """
    qid = int.from_bytes(os.urandom(2), "big")
    packet = build_query(qid, name)
    deadline = time.monotonic() + timeout
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        # A connected UDP socket only receives datagrams from the server, so
        # another host cannot slip in a forged answer.
        sock.connect((server_ip, port))
        sock.send(packet)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no DNS answer for {name} from {server_ip}:{port} in {timeout} s")
            sock.settimeout(remaining)
            try:
                data = sock.recv(4096)
            except socket.timeout:
                raise TimeoutError(
                    f"no DNS answer for {name} from {server_ip}:{port} in {timeout} s"
                ) from None
            try:
                response = parse_response(data)
            except ValueError:
                continue  # garbage is not an answer; keep waiting for ours
            if response.id != qid:
                continue
            if response.rcode == RCODE_NXDOMAIN:
                return []
            if response.rcode != RCODE_NOERROR:
                raise OSError(f"DNS server {server_ip}:{port} answered rcode {response.rcode} for {name}")
            if response.truncated:
                raise OSError(f"DNS answer for {name} was truncated")
            return list(response.addresses)
