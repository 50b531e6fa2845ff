"""The wire records: what the host orders the probe runner, and what the services and the runner record.

Shared by both sides of every boundary: the services (``internet.py``,
``proxy.py``) and the runner (``probe_runner.py``) write these records, the
grader reads them back with the same definitions. Standard library only: it is
copied beside the services in the images and imported there as the top-level
module ``wire`` (on the host, as ``grader.protocol.wire``); it imports only
``codec``, the one strict reader and writer of every record.

Every parser is strict, because a verdict rests on what it reads: an unknown
kind or op, a missing, renamed or extra field, a wrong type or a cut line
raises ``WireError``. A lenient reader turns a renamed field into "no hit",
and "no hit" into *blocked*; the grader turns a ``WireError`` into an error
outcome with the reason instead, never a verdict.

A log of one run is closed by an ``EndRecord`` the service writes when the
grader asks (``parse_log``): it counts the records before it and says whether
any were dropped at the run's cap. A log without it, or whose count does not
match, or that overflowed, was cut or tampered with, and proves nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Optional, TypeVar, Union

if TYPE_CHECKING:
    from grader.protocol import codec
else:
    try:  # in the images: plain scripts side by side
        import codec
    except ImportError:  # on the host: imported from the package
        from grader.protocol import codec

__all__ = [
    "DnsRecord", "DnsStep", "EndRecord", "FrontAttempt", "FrontStep", "HttpRecord", "HttpStep", "LOG_KINDS", "LogRecord", "ProbeOrders", "ProxyCause", "ProxyRecord", "ReadStep", "Route", "RunnerOrders", "RunnerRecord", "StealStep", "Step", "TcpGatewaysStep",
    "READ_LIMIT", "TUNNEL_NOT_OPENED", "TcpRecord", "TcpStep", "TcpTarget", "WireError", "Widen", "WriteStep", "dump", "dump_orders", "parse_log", "parse_orders",
    "dump_end", "dump_line", "parse_record", "parse_runner_line",
]


class WireError(ValueError):
    """A record or an order that does not parse; the text says which line or field, and why."""


# How an HTTP step goes: "proxy" only through the sandbox's proxy, "direct" never through it (``HttpStep.via``,
# ``RunnerRecord.route``); None: the sandbox's own default way.
Route = Literal["proxy", "direct"]


# --- records the services write ------------------------------------------------------------


# What the runner reads of a file at most, and records decoded as UTF-8 with replacement: the grader replays
# that cut on the world copy's file to tell a read of the real file from a read of something else.
READ_LIMIT = 4096


# What the runner writes in a fronting attempt whose tunnel never opened (the proxy refused it, or the host was
# never reached): nothing was named inside it, so the attempt proves nothing about the name inside.
TUNNEL_NOT_OPENED = "the tunnel was not opened"

@dataclass(frozen=True)
class HttpRecord:
    """One request the HTTP(S) sink received, or refused as another server's (``misdirected``)."""

    KIND: ClassVar[str] = "http"
    t: float
    client: str  # the address it came from: a proxy's, or the plain container's
    scheme: str
    host: str  # the Host header (or SNI), normalized: what the grader matches on
    method: str
    path: str
    body: str  # at most the logged cap, decoded with replacement
    body_len: int
    via: Optional[str]  # the host the proxy dialled, when the request named another of that server's names
    misdirected: Optional[str]  # the other server's name this connection asked for; None: delivered
    stage: str  # "" delivered; "tls" or "http": where a misdirected request was refused; "connect": refused
    # why the dialled host does not serve this port (nothing was read, nothing delivered); None: it does
    refused: Optional[str]


@dataclass(frozen=True)
class DnsRecord:
    """One DNS query the nameserver received (``malformed``: bytes that were not a query)."""

    KIND: ClassVar[str] = "dns"
    t: float
    client: str
    qname: str
    qtype: int
    answered: bool  # the name exists in the world (NOERROR); False: NXDOMAIN or refused
    malformed: bool
    via: Optional[str]  # the host the proxy dialled, for a refused DNS-over-TCP tunnel through it
    # why the dialled host serves no DNS (no query was read: qname is ""); None: a query was read
    refused: Optional[str]


@dataclass(frozen=True)
class TcpRecord:
    """What one raw TCP connection sent to a raw listener."""

    KIND: ClassVar[str] = "tcp"
    t: float
    client: str
    port: int
    data: str
    via: Optional[str]  # the host the proxy dialled; None: a direct connection
    # why the dialled host does not serve this port (nothing was read: data is ""); None: it does
    refused: Optional[str]


# Why the egress proxy decided as it did, as code reads it (the record's ``reason`` is the same told to people).
# A refusal: "bad-request" (no request it can judge), "invalid-host" (no host name), "denied" (a deniedDomains
# entry matches), "not-allowed" (no allowed entry matches), "port-not-allowed" (an allowed entry names the host
# but pins another port), "not-served" (the policy allows it, but the world serves no such port on that host).
# An allowed request: "forwarded" (the upstream was reached), "no-such-host" (its lookup found nothing,
# NXDOMAIN), "internet-unreachable" (the simulated internet did not answer: its name server gave no answer, or
# its listener took no connection; what it did not record proves nothing), "upstream-failed" (any other failure
# to reach it: a name DNS cannot carry, a port no sink listens on).
ProxyCause = Literal["bad-request", "invalid-host", "denied", "not-allowed", "port-not-allowed", "not-served",
                     "forwarded", "no-such-host", "internet-unreachable", "upstream-failed"]


@dataclass(frozen=True)
class ProxyRecord:
    """One decision of the egress proxy."""

    KIND: ClassVar[str] = "proxy"
    t: float
    client: str
    method: str
    host: Optional[str]  # None: the request was malformed before a host was read
    port: Optional[int]
    path: Optional[str]  # absolute-form requests only; None for CONNECT
    decision: Literal["allow", "deny"]
    reason: str  # for people; code reads ``cause``
    cause: ProxyCause


@dataclass(frozen=True)
class EndRecord:
    """The last record of one run's log: how many records precede it, and whether any were dropped."""

    KIND: ClassVar[str] = "end"
    t: float
    run: str
    records: int
    overflowed: bool


@dataclass(frozen=True)
class RunnerRecord:
    """One line the probe runner printed. Untrusted: it proves only that an attempt was made."""

    KIND: ClassVar[str] = "runner"
    probe: str
    step: str
    ok: bool
    detail: str
    t: float
    target: Optional[str]
    data: Optional[str]
    # the way an ``http`` step went (its ``HttpStep.via``), None for the default way and for every other step:
    # a verdict reads the route here, never in the words of ``detail``
    route: Optional[Route]


LogRecord = Union[HttpRecord, DnsRecord, TcpRecord, ProxyRecord]
R = TypeVar("R", HttpRecord, DnsRecord, TcpRecord, ProxyRecord)
LOG_KINDS: dict[str, type[Any]] = {c.KIND: c for c in (HttpRecord, DnsRecord, TcpRecord, ProxyRecord)}


# --- the runner's orders ------------------------------------------------------------------


@dataclass(frozen=True)
class Widen:
    domains: tuple[str, ...]
    key: str
    marker: str


@dataclass(frozen=True)
class TcpTarget:
    host: str
    port: int
    prefix: str


@dataclass(frozen=True)
class FrontAttempt:
    sni: str
    host: str


@dataclass(frozen=True)
class ReadStep:
    OP: ClassVar[str] = "read"
    path: str


@dataclass(frozen=True)
class WriteStep:
    OP: ClassVar[str] = "write"
    path: str
    text: str
    append: bool
    after_first_line: bool = False
    widen: Optional[Widen] = None


@dataclass(frozen=True)
class HttpStep:
    OP: ClassVar[str] = "http"
    method: str
    url: str
    body: Optional[str] = None
    via: Optional[Route] = None
    retries: int = 0


@dataclass(frozen=True)
class TcpStep:
    OP: ClassVar[str] = "tcp"
    host: str
    port: int
    payload: str


@dataclass(frozen=True)
class TcpGatewaysStep:
    OP: ClassVar[str] = "tcp_gateways"
    names: tuple[str, ...]
    port: int
    payload: str


@dataclass(frozen=True)
class DnsStep:
    OP: ClassVar[str] = "dns"
    name: str


@dataclass(frozen=True)
class StealStep:
    OP: ClassVar[str] = "steal"
    path: str
    dns_suffix: str
    urls: tuple[str, ...]
    get_urls: tuple[str, ...] = ()
    tcp: Optional[TcpTarget] = None
    also: tuple[str, ...] = ()  # more files read (quietly: each has a step of its own) and sent with this one by web


@dataclass(frozen=True)
class FrontStep:
    OP: ClassVar[str] = "front"
    connect: str
    port: int
    attempts: tuple[FrontAttempt, ...]
    request_path: str = ""
    body: str = ""


Step = Union[ReadStep, WriteStep, HttpStep, TcpStep, TcpGatewaysStep, DnsStep, StealStep, FrontStep]  # told apart by "op"


@dataclass(frozen=True)
class ProbeOrders:
    id: str
    steps: tuple[Step, ...]
    parallel: int = 0  # 0: every step at once


@dataclass(frozen=True)
class RunnerOrders:
    """The whole of ``config.json``: what the runner is told, written by the host."""

    timeout: float
    connect_timeout: float
    proxy: Optional[str]
    ca_file: str
    probes: tuple[ProbeOrders, ...]


# --- parsing ------------------------------------------------------------------------------


T = TypeVar("T")


def _object(cls: type[T], value: Any, where: str, skip: tuple[str, ...] = ()) -> T:
    """A record from a JSON object, by the one strict codec (``codec.decode``); WireError saying where and why."""
    try:
        return codec.decode(cls, value, where, skip)
    except codec.CodecError as exc:
        raise WireError(str(exc)) from None


def parse_orders(value: Any) -> RunnerOrders:
    """The runner's orders from ``config.json``'s JSON value; WireError on anything else."""
    return _object(RunnerOrders, value, "orders")


def dump_orders(orders: RunnerOrders) -> str:
    """``config.json``'s text: the orders as their one JSON value (``dump``), refused here, in the writer, if the
    runner's ``parse_orders`` would not read back exactly this value (a field of the wrong type, a stray value):
    an order the runner would refuse fails loudly in the grader, not as a silent runner in the sandbox."""
    text = dump(orders)
    if parse_orders(json.loads(text)) != orders:
        raise WireError("orders: they do not read back as written")
    return text


def _loads(line: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except ValueError as exc:
        raise WireError(f"{where}: not a JSON line ({exc})") from None
    if not isinstance(value, dict):
        raise WireError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def parse_record(kind: type[R], line: str, where: str = "record", skip: tuple[str, ...] = ()) -> R:
    """One log line as a record of ``kind``; WireError on anything else (``skip``: fields of the line, not the record)."""
    return _object(kind, _loads(line, where), where, skip)


def parse_runner_line(line: str, where: str = "runner output") -> RunnerRecord:
    return _object(RunnerRecord, _loads(line, where), where)


def dump(record: Any) -> str:
    """A record or an order as its one JSON line (no newline): the one encoder of every writer (``codec.encode``)."""
    return json.dumps(codec.encode(record), ensure_ascii=True)


def dump_line(record: Any, seq: int) -> str:
    """One line of a run's log: the record and its place in the log, so a lost, repeated or moved line shows."""
    return f'{{"seq": {int(seq)}, ' + dump(record)[1:]


def dump_end(run: str, records: int, overflowed: bool, t: float) -> str:
    """The closing line of one run's log."""
    return json.dumps({"kind": EndRecord.KIND, "t": t, "run": run, "records": records, "overflowed": overflowed})


def parse_log(kind: type[R], text: str, name: str, run: str) -> tuple[tuple[R, ...], bool]:
    """Every record of one run's closed log ``name``; WireError unless it is whole and closed.

    Whole: every line parses as ``kind`` and carries its place in the log
    (``seq`` 0, 1, 2...: a lost, repeated or moved line shows), the last line
    is the ``EndRecord`` of ``run``, it counts exactly the records before it,
    and the flag says whether records were dropped at the run's cap
    (``overflowed``): what is there is proof of what arrived, but absence
    counts only from a log that holds everything.
    """
    if not text.endswith("\n"):
        raise WireError(f"{name}: the log is cut off (no closing record, or a partial last line)")
    lines = text[:-1].split("\n")
    last = lines.pop()
    end_value = _loads(last, f"{name}:{len(lines) + 1}")
    if end_value.get("kind") != EndRecord.KIND:
        raise WireError(f"{name}: the log has no closing record (the run's evidence was not closed)")
    end = _object(EndRecord, end_value, f"{name}:{len(lines) + 1}", skip=("kind",))
    if end.run != run:
        raise WireError(f"{name}: the closing record is another run's ({end.run!r}, not {run!r})")
    if end.records != len(lines):
        raise WireError(f"{name}: the closing record counts {end.records} records, the log holds {len(lines)}")
    out = []
    for i, line in enumerate(lines):
        where = f"{name}:{i + 1}"
        value = _loads(line, where)
        if value.get("seq") != i or isinstance(value.get("seq"), bool):
            raise WireError(f"{where}: record out of place (seq {value.get('seq')!r}, expected {i})")
        out.append(_object(kind, value, where, skip=("seq",)))
    return tuple(out), end.overflowed
