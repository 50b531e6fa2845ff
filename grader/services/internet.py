"""The simulated internet: DNS, HTTP, HTTPS and raw TCP sinks answering for every host of one run's world.

Run inside the services image as ``python3 internet.py CONFIG.json``. It
imports just its neighbours ``domains.py``, ``common.py``, ``http1.py`` (HTTP
framing by ``h11``), ``nameserver.py`` (DNS by ``dnslib``) and ``tls.py`` (the
run's CA), copied beside it in the image, and never the package itself,
except as a fallback so host-side tests can import it.

It is a sink, not a judge: it records everything it receives as wire records
(``wire.py``), each run's in its own capped logs under ``out_dir/runs/<run>/``
(``dns.jsonl``, ``http.jsonl``, ``tcp.jsonl``) once the grader has claimed the
run's clients, everything else in ``out_dir`` (``common.Recorder``). Which host may
receive what is decided later by the grader, reading those logs. Everything a
client sends is hostile: each connection has timeouts and size caps, and an
error in one never stops the server.

Which server answers a name is ``domains.server_of``, the rule the static
analyzer uses too: each listed host answers for its own name; the server of a
wildcard zone (the attacker's) for every name under it; a name under an
operator's domain that is not listed does not exist; and, with ``catch_all``,
every other name (``webhook.site``, ``localhost``, an IP address) belongs to
the attacker's server, which records what arrives. A server answers only for
its own names, as real origins do: on a connection the proxy opened to one
host (``common.read_target``), a TLS name or Host header of another server's
is refused, and recorded as ``misdirected``, never as delivered.

A server answers only on its own ports (``serves``: the world's ``Host.ports``,
as the ports these listeners listen on). On a connection the proxy opened to a
host whose server does not serve that listener's port (the npm registry on the
raw port 4444, a download host on 53), nothing is read: the connection is
closed and recorded as ``refused``, with the reason, never as delivered. Such a
record carries no payload field (no ``data``, no ``qname``, no ``body``), so no
reader can count it as something that arrived. Without this, every host would
answer on every port, since they all share one address.

A direct connection (no proxy line: the plain container, on the internet's own
network) cannot say which name it meant, and is served as before: it reached
the shared address, and in the plain container the attacker's own address is
reachable too, so whatever it sent could have gone to the attacker directly.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import shutil
import socket
import ssl
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grader.protocol import domains
    from grader.protocol import common, configs, wire
    from grader.services import http1, nameserver, tls
else:
    try:  # in the image: plain scripts side by side in /opt/sandbox-lab/
        import common
        import configs
        import domains
        import http1
        import nameserver
        import tls
        import wire
    except ImportError:  # on the host: imported from the package
        from grader.protocol import domains
        from grader.protocol import common, configs, wire
        from grader.services import http1, nameserver, tls

__all__ = ["main"]

IDLE_TIMEOUT = 5.0  # seconds a client may stay silent
CONNECTION_DEADLINE = 15.0  # total seconds per connection, so slow drip-feeding cannot pin a thread
MAX_HEAD = 64 * 1024
MAX_HEADERS = 100
MAX_BODY = 1024 * 1024
MAX_REQUESTS = 64  # requests one connection may carry (each after a refused name); CONNECTION_DEADLINE bounds them too
LOGGED_BODY = 64 * 1024
TCP_MAX = 64 * 1024
TCP_IDLE = 3.0
MAX_CONNECTIONS = 256  # threads for every client together
PER_CLIENT = 96  # threads one client (a run's proxy) may hold: well under the total, so one run cannot take them all
RESERVED = 8  # threads of the self-check's own listeners: it answers whatever the clients do

# The config is ``configs.InternetConfig``: every key, its default and why, written once for both sides.


# --- the world ---------------------------------------------------------------------


@dataclass(frozen=True)
class _World:
    """Which names exist and which server answers each (``domains.server_of``)."""

    names: frozenset[str]
    zones: tuple[str, ...]
    operators: tuple[str, ...] = ()
    catch_all: str | None = None
    serves: tuple[tuple[str, tuple[int, ...]], ...] = ()  # (server, its ports); a server not here serves nothing

    def server(self, name: str) -> str | None:
        return domains.server_of(name.lower().rstrip("."), self.names, self.zones, self.operators, self.catch_all)

    def knows(self, qname: str) -> bool:
        return self.server(qname) is not None

    def refusal(self, target: str | None, port: int) -> str | None:
        """Why a connection the proxy opened to ``target`` must not be served on ``port``; None to serve it.

        A direct connection (``target`` None) carries no name: it is served.
        """
        if target is None:
            return None
        server = self.server(target)
        if server is None:
            return f"no server answers for {target}"
        ports = dict(self.serves).get(server, ())
        if port not in ports:
            served = ", ".join(map(str, ports)) or "no port"
            return f"{target}'s server ({server}) serves no port {port} (it serves {served})"
        return None


def _own_ipv4() -> str:
    """The container's own IPv4 address: Docker puts it in /etc/hosts; else read the kernel's table."""
    try:
        address = socket.gethostbyname(socket.gethostname())
        if not address.startswith("127."):
            return address
    except OSError:
        pass
    # /proc/net/fib_trie lists each local address on the line before "/32 host LOCAL".
    try:
        with open("/proc/net/fib_trie", encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for previous, line in zip(lines, lines[1:]):
        candidate = previous.strip().removeprefix("|-- ").strip()
        if "/32 host LOCAL" in line and domains.is_ipv4(candidate) and not candidate.startswith("127."):
            return candidate
    raise SystemExit('cannot discover this container\'s IPv4 address; set "address" in the config')


# --- reading from clients ---------------------------------------------------------------


def _reader(conn: socket.socket, idle: float = IDLE_TIMEOUT) -> http1.Reader:
    """A reader whose every read also counts against the connection's overall deadline."""
    return http1.Reader(conn, idle, time.monotonic() + CONNECTION_DEADLINE)


# --- DNS -----------------------------------------------------------------------------


def _serve_dns_tcp(
    conn: socket.socket, client: str, world: _World, address: str, log: common.KindLog, port: int
) -> None:
    """DNS over TCP (``nameserver.serve_tcp``); a tunnel's proxy line is not part of the messages."""
    nameserver.serve_tcp(conn, client, world, address, log, port, _target_of(conn), _reader)


# --- HTTP and HTTPS ----------------------------------------------------------------


def _read_body(reader: http1.Reader, raw_head: bytes, request: http1.Head, conn: socket.socket) -> tuple[bytes, bool]:
    """The request body as ``h11`` frames it, at most MAX_BODY bytes; the flag says it was cut short.

    Raises BadHead on a malformed body; the bytes received for it are then the evidence (``BadBody``).
    """
    body = http1.Body(raw_head, request, reader, keep=MAX_BODY)
    framed = request.values("transfer-encoding") or request.values("content-length")
    if framed and (request.value("expect") or "").lower() == "100-continue":
        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")  # spares curl its 1 s wait
    chunks = bytearray()
    try:
        while (piece := body.next()) is not None:
            if len(chunks) + len(piece) > MAX_BODY:
                chunks += piece[: MAX_BODY - len(chunks)]
                return bytes(chunks), True
            chunks += piece
    except http1.BadHead as exc:
        raise _BadBody(str(exc), bytes(body.raw)) from None
    return bytes(chunks), False


class _BadBody(ValueError):
    """A body ``h11`` refused; ``raw`` holds the bytes received for it, kept as evidence."""

    def __init__(self, text: str, raw: bytes) -> None:
        super().__init__(text)
        self.raw = raw


def _host_of(request: http1.Head | None, sni: str | None) -> str:
    """The Host header (or SNI) as a normalized name, without port: what the grader matches on."""
    raw = request.value("host") if request else None
    target = request.start[1] if request else ""
    if target.lower().startswith(("http://", "https://")):
        raw = target.split("/", 3)[2]
    if not raw:
        return (sni or "").lower()
    if raw.startswith("["):
        raw = raw[1:].split("]", 1)[0]
    elif raw.count(":") == 1:
        raw = raw.split(":", 1)[0]
    try:
        return domains.normalize_host(raw)
    except ValueError:
        return raw.lower()[:255]


def _path_of(target: str) -> str:
    if target.lower().startswith(("http://", "https://")):
        rest = target.split("/", 3)
        return "/" + rest[3] if len(rest) > 3 else "/"
    return target


def _respond(conn: socket.socket, status: str, payload: dict[str, Any], head_only: bool, keep: bool = False) -> None:
    body = json.dumps(payload).encode("ascii")
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: {'keep-alive' if keep else 'close'}\r\n\r\n"
    ).encode("ascii")
    conn.sendall(head if head_only else head + body)
    if keep:
        return
    # Lingering close: stop writing, then drain what the client still sends
    # (e.g. an over-cap body) so the kernel does not reset the connection and
    # destroy the response before the client reads it.
    try:
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(1.0)
        drained = 0
        while drained < MAX_BODY and (chunk := conn.recv(65536)):
            drained += len(chunk)
    except (OSError, ValueError):
        pass


@dataclass(frozen=True)
class _Site:
    """What every HTTP(S) connection needs: the world's servers, the certificates, the log."""

    world: _World
    nonce: str
    log: common.KindLog
    certs: tls.Certs | None = None  # None: plain HTTP


def _target_of(conn: socket.socket) -> str | None:
    """The host the proxy dialled this connection for, normalized; None for a direct connection."""
    raw = common.read_target(conn, IDLE_TIMEOUT)
    if raw is None:
        return None
    try:
        return domains.normalize_host(raw)
    except ValueError:
        return raw.lower()[:255]  # answered by no server: every name on it is refused


def _serve_http(conn: socket.socket, client: str, scheme: str, site: _Site, port: int) -> None:
    target = _target_of(conn)
    unserved = site.world.refusal(target, port)
    if unserved is not None:
        # a host that does not serve this port: nothing is read (no TLS, no request), nothing delivered
        site.log.write(wire.HttpRecord(t=time.time(), client=client, scheme=scheme, host=target or "", method="",
                                       path="", body="", body_len=0, via=None, misdirected=None, stage="connect",
                                       refused=unserved))
        conn.close()
        return
    sni = None
    if site.certs is not None:
        conn.settimeout(IDLE_TIMEOUT)
        conn = site.certs.context_for(target).wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        conn.sandbox_lab_site = (site, target)  # type: ignore[attr-defined]  # read by the SNI callback
        try:
            conn.do_handshake()
        except OSError as exc:
            refused = getattr(conn, "sandbox_lab_refused", None)
            if refused is not None and target is not None:
                # another server's name on this host's connection: refused, and on record as such
                site.log.write(_refused(client, scheme, target, refused, "tls", "", ""))
            # Otherwise typically a client that does not trust the run's CA. It
            # has sent no request yet, so there is nothing to record.
            print(f"TLS handshake with {client} failed: {exc}", file=sys.stderr)
            conn.close()
            return
        sni = getattr(conn, "sandbox_lab_sni", None)
    reader = _reader(conn)
    try:
        for _ in range(MAX_REQUESTS):  # more than one only after a refused name: see _handle_request
            if not _handle_request(conn, reader, client, scheme, site, sni, target):
                break
    finally:
        conn.close()


def _choose_by_sni(sock: Any, name: str | None, _context: ssl.SSLContext) -> int | None:
    """SNI callback: answer only for a name of the connection's own server, with a certificate that covers it.

    On a connection the proxy opened to one host, a name another server
    answers for ends the handshake (unrecognized_name): the tunnel reaches
    that host's server, and it is not the other one.
    """
    if not name:
        return None
    site, target = getattr(sock, "sandbox_lab_site", (None, None))
    try:
        host = domains.normalize_host(name)
    except ValueError:
        host = name.lower()[:255]
    sock.sandbox_lab_sni = host
    if site is None:
        return None
    if target is not None and site.world.server(host) != site.world.server(target):
        sock.sandbox_lab_refused = host
        return int(ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME)
    if site.world.server(host) is None:
        return None  # no server has this name: no certificate is made for it (the client's verification fails)
    try:
        sock.context = site.certs.context_for(host)
    except Exception:  # noqa: BLE001 - no certificate for it: the client's verification says so
        traceback.print_exc()
    return None


def _discarded(reader: http1.Reader, request: http1.Head) -> bool:
    """Read and drop a refused request's body, so its connection can carry the next request: only a body framed
    by one Content-Length within MAX_BODY, from a client that neither waits for 100 Continue nor asked to close."""
    lengths, close = request.values("content-length"), (request.value("connection") or "").lower() == "close"
    if close or request.values("transfer-encoding") or request.value("expect") or len(lengths) != 1:
        return False
    text = lengths[0].strip()
    if not text.isdigit() or int(text) > MAX_BODY:
        return False
    return len(reader.read_exact(int(text))) == int(text)


def _handle_request(
    conn: socket.socket, reader: http1.Reader, client: str, scheme: str, site: _Site, sni: str | None, target: str | None
) -> bool:
    """Answer one request; True when the connection stays open for another (after a refused name only)."""
    request: http1.Head | None = None
    head = b""
    status = "200 OK"
    try:
        head = reader.read_until(b"\r\n\r\n", MAX_HEAD) or b""
        if not head:
            # The client stopped before a full request. If it sent anything,
            # record it anyway: the sink records everything it receives.
            if reader.buf:
                site.log.write(_http_record(client, scheme, None, sni, bytes(reader.buf), target))
            return False
        request = http1.parse_head(head, MAX_HEADERS)
        host = _host_of(request, sni) or target or ""
        if target is not None and site.world.server(host) != site.world.server(target):
            # As real origins do (RFC 9110, 421): this server does not answer for that name. Nothing is recorded
            # as delivered to the other host; its body is dropped unread, and the connection stays open for the
            # next request when that body's end is certain (as a client trying name after name expects).
            site.log.write(_refused(client, scheme, target, host, "http", request.start[0], _path_of(request.start[1])))
            payload = {"ok": False, "host": target, "misdirected": host, "nonce": site.nonce}
            keep = _discarded(reader, request)
            _respond(conn, "421 Misdirected Request", payload, head_only=request.start[0] == "HEAD", keep=keep)
            return keep
        body, truncated = _read_body(reader, head, request, conn)
        if truncated:
            status = "413 Content Too Large"
    except (http1.TooLarge, ValueError) as exc:
        too_large = isinstance(exc, http1.TooLarge)
        status = "431 Request Header Fields Too Large" if too_large else "400 Bad Request"
        # Unparsable input is still evidence: keep the raw bytes as the body.
        received = exc.raw if isinstance(exc, _BadBody) else b""
        body = (b"" if request else head) + received + bytes(reader.buf)
    record = _http_record(client, scheme, request, sni, body, target)
    site.log.write(record)
    payload = {"ok": status.startswith("200"), "host": record.host, "nonce": site.nonce}
    _respond(conn, status, payload, head_only=request is not None and request.start[0] == "HEAD")
    return False


def _http_record(
    client: str, scheme: str, request: http1.Head | None, sni: str | None, body: bytes, target: str | None
) -> wire.HttpRecord:
    host = _host_of(request, sni) or target or ""
    return wire.HttpRecord(
        t=time.time(), client=client, scheme=scheme, host=host,
        method=request.start[0] if request else "",
        path=_path_of(request.start[1]) if request else "",
        body=body[:LOGGED_BODY].decode("utf-8", errors="replace"),
        body_len=len(body),
        # the host the proxy dialled: its server answers for this name too
        via=target if target is not None and target != host else None,
        misdirected=None, stage="", refused=None,
    )


def _refused(client: str, scheme: str, target: str, asked: str, stage: str, method: str, path: str) -> wire.HttpRecord:
    """A request for another server's name on a connection the proxy opened to ``target``: on record, never delivered."""
    return wire.HttpRecord(t=time.time(), client=client, scheme=scheme, host=target, method=method, path=path,
                           body="", body_len=0, via=None, misdirected=asked, stage=stage, refused=None)


# --- raw TCP -------------------------------------------------------------------------


def _serve_tcp(conn: socket.socket, client: str, port: int, nonce: str, log: common.KindLog, world: _World) -> None:
    """Read until the peer closes, goes quiet for 3 s, or sends 64 KiB; log it; reply; close.

    Through the proxy, only for a name whose server serves this port (the
    attacker's, on its raw port): a tunnel to another host here is refused
    before a byte of it is read.
    """
    target = _target_of(conn)
    refused = world.refusal(target, port)
    if refused is not None:
        log.write(wire.TcpRecord(time.time(), client, port, "", via=target, refused=refused))
        return
    reader = _reader(conn, idle=TCP_IDLE)
    while len(reader.buf) < TCP_MAX and reader.fill():
        pass
    data = bytes(reader.buf[:TCP_MAX])
    log.write(wire.TcpRecord(time.time(), client, port, data.decode("utf-8", errors="replace"), via=target or None,
                             refused=None))
    try:
        conn.sendall(f"ok {nonce}\n".encode())
    except OSError:
        pass  # the client left; what it sent is already logged


# --- start-up --------------------------------------------------------------------------


def _listen_tcp(bind: str, port: int, own: str = "") -> socket.socket:
    """A listener on ``bind``; a wildcard ``bind`` whose port is taken on some other local address falls back to ``own``.

    Docker's embedded DNS listens inside every container on a user network, on 127.0.0.11 and a
    random high port. The host's stand-in takes the host listener's port, also a random high
    port: when the two meet, the wildcard bind fails, although the sandbox only ever connects
    to this internet's own address, where the port is free.
    """
    try:
        return socket.create_server((bind, port), backlog=128)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE or bind not in ("0.0.0.0", "") or not own:
            raise
        return socket.create_server((own, port), backlog=128)


def _self_check(dns_port: int, http_port: int, tcp_ports: list[int]) -> None:
    """One round trip through every kind of listener (raises if one does not answer)."""
    nameserver.query_a("127.0.0.1", common.HEARTBEAT_HOST, dns_port, 1.0)
    common.expect_http(http_port, "/__heartbeat", "http listener")
    for port in tcp_ports[:1]:
        if not common.exchange(port, b"heartbeat\n"):
            raise OSError("tcp listener gave no answer")


def _serves(config: configs.InternetConfig) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The config's ``serves``, checked: every server this internet can name has an entry, and every port
    in it has a listener here. A gap stops the service at start (exit), never serves a port by default."""
    listening = {config.dns_port, config.http_port, config.https_port, *config.tcp_ports}
    out: dict[str, tuple[int, ...]] = {}
    for name, ports in config.serves.items():
        unheard = sorted(set(ports) - listening)
        if unheard:
            raise SystemExit(f'"serves": {name!r} serves port {unheard[0]}, where this internet has no listener')
        out[domains.normalize_host(name)] = tuple(sorted(set(ports)))
    servers = [*config.hosts, *config.extra_names, *config.wildcard_zones, *([config.catch_all] if config.catch_all else [])]
    missing = sorted({domains.normalize_host(s) for s in servers} - set(out))
    if missing:
        raise SystemExit(f'"serves" has no ports for {missing[0]}: list the ports every server serves')
    return tuple(sorted(out.items()))


def main(argv: list[str] | None = None) -> int:
    started = configs.read_command_line(argv, "internet.py", configs.InternetConfig)
    if started is None:
        return 2
    _, config, out_dir = started
    names = [domains.normalize_host(n) for n in [*config.hosts, *config.extra_names]]
    zones = [domains.normalize_host(z) for z in config.wildcard_zones]
    operators = [domains.normalize_host(d) for d in config.operators]
    catch_all = domains.normalize_host(config.catch_all) if config.catch_all else None
    serves = _serves(config)
    world = _World(frozenset(names), tuple(zones), tuple(operators), catch_all, serves)
    address = config.address or _own_ipv4()
    bind = config.bind

    stop = common.stop_on_signals()

    # The CA's key lives in a private temp dir of this process (it signs the
    # certificates of names nobody listed), removed when the service stops.
    workdir = tempfile.mkdtemp(prefix="sandbox-lab-tls-")
    try:
        try:
            certs = tls.Certs(names, zones, workdir, _choose_by_sni)
        except RuntimeError as exc:
            raise SystemExit(str(exc)) from None
        common.write_atomically(os.path.join(out_dir, "ca.pem"), certs.ca_pem)
        return _serve(config, out_dir, world, address, bind, certs, stop)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _serve(config: configs.InternetConfig, out_dir: str, world: _World, address: str, bind: str, certs: tls.Certs,
           stop: threading.Event) -> int:  # fmt: skip
    nonce = config.nonce
    # each run's records go to its own capped logs, closed when its grader asks (common.Recorder)
    recorder = common.Recorder(out_dir, ("http", "dns", "tcp"))
    dns_log, http_log, tcp_log = recorder.log("dns"), recorder.log("http"), recorder.log("tcp")
    # one run (its proxy) cannot take every slot, nor the self-check's: the keeper would retire a healthy internet
    slots = common.Admission(MAX_CONNECTIONS, PER_CLIENT, refused=recorder.lost)

    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((bind, config.dns_port))
    listeners: list[tuple[socket.socket, common.Handler]] = [
        (_listen_tcp(bind, config.dns_port),
         functools.partial(_serve_dns_tcp, world=world, address=address, log=dns_log, port=config.dns_port)),
        (_listen_tcp(bind, config.http_port),
         functools.partial(_serve_http, scheme="http", site=_Site(world, nonce, http_log), port=config.http_port)),
        (_listen_tcp(bind, config.https_port),
         functools.partial(_serve_http, scheme="https", site=_Site(world, nonce, http_log, certs), port=config.https_port)),
    ]  # fmt: skip
    for port in config.tcp_ports:
        handler = functools.partial(_serve_tcp, port=port, nonce=nonce, log=tcp_log, world=world)
        listeners.append((_listen_tcp(bind, port, own=address), handler))
    common.spawn(nameserver.serve_udp, udp, world, address, dns_log)
    for listener, handle in listeners:
        common.spawn(common.serve_forever, listener, handle, slots)
    # The self-check's own listeners on loopback, with threads of their own: no client can starve them
    # (its records come from loopback, which a run that claims every client does not claim).
    reserved = threading.Semaphore(RESERVED)
    checks = [_listen_tcp("127.0.0.1", 0), *([_listen_tcp("127.0.0.1", 0)] if config.tcp_ports else [])]
    check_handlers: list[common.Handler] = [functools.partial(
        _serve_http, scheme="http", site=_Site(world, nonce, http_log), port=config.http_port)]
    if config.tcp_ports:
        check_handlers.append(functools.partial(
            _serve_tcp, port=config.tcp_ports[0], nonce=nonce, log=tcp_log, world=world))
    for listener, handle in zip(checks, check_handlers):
        common.spawn(common.serve_forever, listener, handle, reserved)
        listeners.append((listener, handle))
    check_ports = [int(c.getsockname()[1]) for c in checks]

    recorder.watch()
    common.write_ready(out_dir, address)
    common.heartbeat(out_dir, functools.partial(_self_check, config.dns_port, check_ports[0], check_ports[1:]),
                     on_poke=recorder.nudge)
    common.wait_for(stop)
    udp.close()
    for listener, _ in listeners:
        listener.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
