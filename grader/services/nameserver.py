"""DNS for the simulated internet: its name server, and the proxy's lookups against that one server.

Messages are parsed and built by ``dnslib`` (Debian's ``python3-dnslib`` in
the services image, the ``dnslib`` wheel on the host); this module owns only
what the world decides: which names exist, what is logged, what is refused.
It imports ``common`` and ``wire`` beside it (and ``http1`` for a type), nothing of either service.

Every byte read from the network is hostile. ``dnslib`` bounds every read by
the packet and refuses compression pointers that loop or point forwards; on
top of it this module refuses what a server must not answer (a response, a
packet without a question, a name longer than 255 bytes on the wire), so a
crafted packet is logged as malformed and dropped, never answered.
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

if TYPE_CHECKING:
    from grader.protocol import common, wire
    from grader.services import http1
else:
    try:  # in the image: plain scripts side by side in /opt/sandbox-lab/
        import common
        import wire
    except ImportError:  # on the host: imported from the package
        from grader.protocol import common, wire

try:
    from dnslib import QTYPE, RR, A, DNSError, DNSHeader, DNSQuestion, DNSRecord
except ImportError as exc:  # the host without the extra that runs the services
    raise ImportError(f"the services parse DNS with dnslib: {common.install_hint('docker')} "
                      "(the services image has it from Debian: python3-dnslib)") from exc

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
    "Names",
    "Query",
    "Response",
    "answer",
    "build_query",
    "build_response",
    "parse_query",
    "parse_response",
    "query_a",
    "serve_tcp",
    "serve_udp",
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
_MAX_NAME = 255  # RFC 1035 limit on a name's wire length (dnslib does not check it when parsing)
_MAX_LABEL = 63


@dataclass(frozen=True)
class Query:
    """The first question of a DNS query, as sent.

    ``labels`` keep the client's letter case: some resolvers randomize case
    (DNS 0x20) and check that the answer echoes it.
    """

    id: int
    opcode: int
    rd: bool
    labels: tuple[bytes, ...]
    qtype: int
    qclass: int

    @property
    def qname(self) -> str:
        """The name in lower case, without the trailing dot, odd bytes escaped as ``\\DDD``."""
        return ".".join(_label_text(label) for label in self.labels).lower()


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


def parse_query(data: bytes) -> Query | None:
    """A query's header and first question; ``None`` for anything malformed.

    Responses (QR set) count as malformed too: a server that answered them
    could be made to ping-pong with another server.
    """
    try:
        record = DNSRecord.parse(data)
    except (DNSError, ValueError, IndexError, UnicodeError):
        return None
    if record.header.qr or not record.questions:
        return None
    question = record.questions[0]
    labels = tuple(bytes(label) for label in question.qname.label)
    if sum(len(label) + 1 for label in labels) + 1 > _MAX_NAME:
        return None
    return Query(id=int(record.header.id), opcode=int(record.header.opcode), rd=bool(record.header.rd),
                 labels=labels, qtype=int(question.qtype), qclass=int(question.qclass))


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
    header = DNSHeader(id=query.id, qr=1, opcode=query.opcode, aa=1, rd=int(query.rd), ra=1, rcode=rcode & 0xF)
    reply = DNSRecord(header, q=DNSQuestion(query.labels, query.qtype, query.qclass))
    for address in addresses:
        reply.add_answer(RR(query.labels, QTYPE.A, ttl=ttl, rdata=A(address)))
    return bytes(reply.pack())


def build_query(qid: int, name: str, qtype: int = TYPE_A) -> bytes:
    """A recursive-desired query for one name; raise ValueError for a name DNS cannot carry."""
    text = name[:-1] if name.endswith(".") else name
    try:
        labels = tuple(label.encode("ascii") for label in text.split(".")) if text else ()
    except UnicodeEncodeError:
        raise ValueError(f"{name!r} is not ASCII; punycode it first") from None
    if any(not label or len(label) > _MAX_LABEL for label in labels):
        raise ValueError(f"{name!r} has an empty label or one longer than 63 bytes")
    if sum(len(label) + 1 for label in labels) + 1 > _MAX_NAME:
        raise ValueError(f"{name!r} is longer than 255 bytes on the wire")
    record = DNSRecord(DNSHeader(id=qid & 0xFFFF, rd=1), q=DNSQuestion(labels, qtype, CLASS_IN))
    return bytes(record.pack())


def parse_response(data: bytes) -> Response:
    """An answer's header and A records; raise ValueError if it is not a well-formed response."""
    try:
        record = DNSRecord.parse(data)
    except (DNSError, IndexError, UnicodeError) as exc:
        raise ValueError(f"malformed DNS response: {exc}") from None
    if not record.header.qr:
        raise ValueError("not a response")
    addresses = tuple(str(rr.rdata) for rr in record.rr if rr.rtype == TYPE_A and rr.rclass == CLASS_IN)
    return Response(id=int(record.header.id), rcode=int(record.header.rcode), truncated=bool(record.header.tc),
                    addresses=addresses)


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


# --- the server ----------------------------------------------------------------------------


class Names(Protocol):
    """What the server asks of the world: does a name exist, and may this connection ask here at all."""

    def knows(self, qname: str) -> bool: ...

    def refusal(self, target: str | None, port: int) -> str | None: ...


def answer(data: bytes, client: str, world: Names, address: str, log: common.KindLog) -> bytes | None:
    """Log one query and build its answer; ``None`` means stay silent (malformed input)."""
    query = parse_query(data)
    if query is None:
        log.write(wire.DnsRecord(time.time(), client, "", 0, answered=False, malformed=True, via=None, refused=None))
        return None
    if query.opcode != 0:  # not a standard query (NOTIFY, UPDATE...): refuse, but keep the evidence
        log.write(wire.DnsRecord(time.time(), client, query.qname, query.qtype, answered=False, malformed=False, via=None,
                                 refused=None))
        return build_response(query, RCODE_NOTIMP)
    # "answered" means the name exists in the world (NOERROR), even when it
    # has no record of the asked type; False means NXDOMAIN.
    known = world.knows(query.qname)
    log.write(wire.DnsRecord(time.time(), client, query.qname, query.qtype, answered=known, malformed=False, via=None,
                             refused=None))
    if not known:
        return build_response(query, RCODE_NXDOMAIN)
    if query.qtype in (TYPE_A, TYPE_ANY) and query.qclass in (CLASS_IN, CLASS_ANY):
        return build_response(query, addresses=[address])
    return build_response(query)  # known name, no records of that type


def serve_udp(sock: socket.socket, world: Names, address: str, log: common.KindLog) -> None:
    """Answer datagrams until the socket is closed; one bad packet never stops the server."""
    while True:
        try:
            data, peer = sock.recvfrom(4096)
        except OSError:
            if sock.fileno() == -1:
                return
            continue
        try:
            reply = answer(data, peer[0], world, address, log)
            if reply is not None:
                sock.sendto(reply, peer)
        except Exception:
            traceback.print_exc()


def serve_tcp(conn: socket.socket, client: str, world: Names, address: str, log: common.KindLog, port: int,
              target: str | None, reader: Callable[[socket.socket], http1.Reader]) -> None:  # fmt: skip
    """DNS over TCP: length-prefixed messages, several per connection, until the client stops.

    Through the proxy (``target``: the host it dialled), only to a name of a
    server that serves DNS (the attacker's nameserver): a tunnel to another
    host on this port is refused before a byte of it is read, so no query in
    it is ever logged or answered.
    """
    refused = world.refusal(target, port)
    if refused is not None:
        log.write(wire.DnsRecord(time.time(), client, "", 0, answered=False, malformed=False, via=target,
                                 refused=refused))
        return
    stream = reader(conn)
    while True:
        prefix = stream.read_exact(2)
        if len(prefix) < 2:
            return
        message = stream.read_exact(int.from_bytes(prefix, "big"))
        reply = answer(message, client, world, address, log)
        if reply is None:
            return
        conn.sendall(len(reply).to_bytes(2, "big") + reply)
