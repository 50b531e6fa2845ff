"""The simulated internet: DNS, HTTP, HTTPS and raw TCP sinks answering for every host of one run's world.

Run inside the services image as ``python3 internet.py CONFIG.json``. Standard
library only; it imports just its neighbours ``domains.py``, ``dnswire.py`` and
``common.py`` (copied beside it in the image) and never the package itself,
except as a fallback so host-side tests can import it.

It is a sink, not a judge: it answers every request and records everything it
receives as JSON lines in ``out_dir`` (``dns.jsonl``, ``http.jsonl``,
``tcp.jsonl``). Which host may receive what is decided later by the grader,
reading those logs. Everything a client sends is hostile: each connection has
timeouts and size caps, and an error in one never stops the server.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grader import domains
    from grader.services import common, dnswire
else:
    try:  # in the image: plain scripts side by side in /opt/sandbox-lab/
        import common
        import dnswire
        import domains
    except ImportError:  # on the host: imported from the package
        from grader import domains
        from grader.services import common, dnswire

__all__ = ["main"]

IDLE_TIMEOUT = 5.0  # seconds a client may stay silent
CONNECTION_DEADLINE = 15.0  # total seconds per connection, so slow drip-feeding cannot pin a thread
MAX_HEAD = 64 * 1024
MAX_HEADERS = 100
MAX_BODY = 1024 * 1024
LOGGED_BODY = 64 * 1024
TCP_MAX = 64 * 1024
TCP_IDLE = 3.0
MAX_CONNECTIONS = 256  # threads; more clients wait in the listen backlog
CA_NAME = "Sandbox Lab run CA"

_CONFIG_DEFAULTS: dict[str, Any] = {
    "wildcard_zones": [],
    "extra_names": [],
    "address": None,
    "dns_port": common.DNS_PORT,
    "http_port": common.HTTP_PORT,
    "https_port": common.HTTPS_PORT,
    "tcp_ports": [],
    # Not in the original contract: which local address to listen on.
    # Containers keep 0.0.0.0; host-side tests use 127.0.0.1.
    "bind": "0.0.0.0",
}
_CONFIG_REQUIRED = ("hosts", "out_dir", "nonce")


# --- the world ---------------------------------------------------------------------


@dataclass(frozen=True)
class _World:
    """Which names exist: listed hosts, extra names, and wildcard zones at any depth."""

    names: frozenset[str]
    zones: tuple[str, ...]

    def knows(self, qname: str) -> bool:
        name = qname.lower().rstrip(".")
        return name in self.names or any(name == z or name.endswith("." + z) for z in self.zones)


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


# --- TLS -----------------------------------------------------------------------------

_OPENSSL_CONFIG = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = {ca_name}
# Extensions that strict verifiers (Python 3.13's VERIFY_X509_STRICT, Go, curl) require.
[ca]
basicConstraints = critical, CA:TRUE, pathlen:0
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid:always
[leaf]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
subjectAltName = {sans}
"""


def _make_tls(names: list[str], zones: list[str], workdir: str) -> tuple[ssl.SSLContext, bytes]:
    """Create a fresh CA and one leaf for every name; return a server context and the CA's PEM.

    A new CA per run, whose key exists only for the milliseconds of signing:
    trusting it in one run's sandbox grants nothing in any other run. A
    ``*.zone`` SAN covers one label only, so HTTPS to ``a.b.zone`` fails to
    verify; DNS still answers it at any depth.
    """
    sans = sorted(set(names) | set(zones)) + [f"*.{zone}" for zone in sorted(set(zones))]
    config = os.path.join(workdir, "openssl.cnf")
    with open(config, "w", encoding="ascii") as f:
        f.write(_OPENSSL_CONFIG.format(ca_name=CA_NAME, sans=", ".join(f"DNS:{n}" for n in sans)))

    def p(name: str) -> str:
        return os.path.join(workdir, name)

    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-config", config]
    steps = [
        ["openssl", "req", "-x509", *ec, "-keyout", p("ca.key"), "-out", p("ca.pem"),
         "-days", "2", "-sha256", "-subj", f"/CN={CA_NAME}", "-extensions", "ca"],
        ["openssl", "req", "-new", *ec, "-keyout", p("leaf.key"), "-out", p("leaf.csr"),
         "-subj", "/CN=Sandbox Lab simulated internet"],
        ["openssl", "x509", "-req", "-in", p("leaf.csr"), "-CA", p("ca.pem"), "-CAkey", p("ca.key"),
         "-set_serial", "0x" + os.urandom(16).hex(), "-days", "2", "-sha256",
         "-extfile", config, "-extensions", "leaf", "-out", p("leaf.pem")],
    ]  # fmt: skip
    for step in steps:
        done = subprocess.run(step, capture_output=True, text=True, timeout=30, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(step[:3])} failed: {done.stderr.strip()}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(p("leaf.pem"), p("leaf.key"))
    with open(p("ca.pem"), "rb") as pem:
        return context, pem.read()


# --- reading from clients ---------------------------------------------------------------


def _reader(conn: socket.socket, idle: float = IDLE_TIMEOUT) -> common.Reader:
    """A reader whose every read also counts against the connection's overall deadline."""
    return common.Reader(conn, idle, time.monotonic() + CONNECTION_DEADLINE)


# --- DNS -----------------------------------------------------------------------------


def _answer_dns(
    data: bytes, client: str, world: _World, address: str, log: common.JsonlLog
) -> bytes | None:
    """Log one query and build its answer; ``None`` means stay silent (malformed input)."""
    query = dnswire.parse_query(data)
    if query is None:
        log.write({"client": client, "malformed": True})
        return None
    if query.opcode != 0:  # not a standard query (NOTIFY, UPDATE...): refuse, but keep the evidence
        log.write({"client": client, "qname": query.qname, "qtype": query.qtype, "answered": False})
        return dnswire.build_response(query, dnswire.RCODE_NOTIMP)
    # "answered" means the name exists in the world (NOERROR), even when it
    # has no record of the asked type; False means NXDOMAIN.
    known = world.knows(query.qname)
    log.write({"client": client, "qname": query.qname, "qtype": query.qtype, "answered": known})
    if not known:
        return dnswire.build_response(query, dnswire.RCODE_NXDOMAIN)
    wants_a = query.qtype in (dnswire.TYPE_A, dnswire.TYPE_ANY)
    if wants_a and query.qclass in (dnswire.CLASS_IN, dnswire.CLASS_ANY):
        return dnswire.build_response(query, addresses=[address])
    return dnswire.build_response(query)  # known name, no records of that type


def _serve_dns_udp(sock: socket.socket, world: _World, address: str, log: common.JsonlLog) -> None:
    while True:
        try:
            data, peer = sock.recvfrom(4096)
        except OSError:
            if sock.fileno() == -1:
                return
            continue
        try:
            reply = _answer_dns(data, peer[0], world, address, log)
            if reply is not None:
                sock.sendto(reply, peer)
        except Exception:
            traceback.print_exc()


def _serve_dns_tcp(
    conn: socket.socket, client: str, world: _World, address: str, log: common.JsonlLog
) -> None:
    """DNS over TCP: length-prefixed messages, several per connection, until the client stops."""
    reader = _reader(conn)
    while True:
        prefix = reader.read_exact(2)
        if len(prefix) < 2:
            return
        message = reader.read_exact(int.from_bytes(prefix, "big"))
        reply = _answer_dns(message, client, world, address, log)
        if reply is None:
            return
        conn.sendall(len(reply).to_bytes(2, "big") + reply)


# --- HTTP and HTTPS ----------------------------------------------------------------


def _read_body(reader: common.Reader, request: common.Head, conn: socket.socket) -> tuple[bytes, bool]:
    """The request body, at most MAX_BODY bytes; the flag says it was cut short."""
    encoding = (request.value("transfer-encoding") or "").lower()
    length_text = request.value("content-length")
    chunked = encoding.rsplit(",", 1)[-1].strip() == "chunked"
    if not chunked and not length_text:
        return b"", False
    if (request.value("expect") or "").lower() == "100-continue":
        conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")  # spares curl its 1 s wait
    if not chunked:
        if not length_text or not length_text.isdigit():
            raise ValueError("bad Content-Length")
        wanted = int(length_text)
        body = reader.read_exact(min(wanted, MAX_BODY))
        return body, wanted > MAX_BODY
    chunks = bytearray()
    while True:
        line = reader.read_until(b"\r\n", 4096)
        if line is None:
            return bytes(chunks), True
        size = int(line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            return bytes(chunks), False  # trailers are ignored: the response closes anyway
        if len(chunks) + size > MAX_BODY:
            chunks += reader.read_exact(MAX_BODY - len(chunks))
            return bytes(chunks), True
        chunks += reader.read_exact(size)
        reader.read_exact(2)


def _host_of(request: common.Head | None, sni: str | None) -> str:
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


def _respond(conn: socket.socket, status: str, payload: dict[str, Any], head_only: bool) -> None:
    body = json.dumps(payload).encode("ascii")
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode("ascii")
    conn.sendall(head if head_only else head + body)
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


def _serve_http(
    conn: socket.socket,
    client: str,
    scheme: str,
    nonce: str,
    log: common.JsonlLog,
    tls: ssl.SSLContext | None,
) -> None:
    sni = None
    if tls is not None:
        conn.settimeout(IDLE_TIMEOUT)
        conn = tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
        try:
            conn.do_handshake()
        except OSError as exc:
            # Typically a client that does not trust the run's CA. It has sent
            # no request yet, so there is nothing to record.
            print(f"TLS handshake with {client} failed: {exc}", file=sys.stderr)
            conn.close()
            return
        sni = getattr(conn, "sandbox_lab_sni", None)
    try:
        _handle_request(conn, client, scheme, nonce, log, sni)
    finally:
        conn.close()


def _remember_sni(sock: Any, name: str | None, _context: ssl.SSLContext) -> None:
    """SNI callback: keep the requested name on the socket, the host of last resort."""
    if name:
        sock.sandbox_lab_sni = name


def _handle_request(
    conn: socket.socket, client: str, scheme: str, nonce: str, log: common.JsonlLog, sni: str | None
) -> None:
    reader = _reader(conn)
    request: common.Head | None = None
    head = b""
    status = "200 OK"
    try:
        head = reader.read_until(b"\r\n\r\n", MAX_HEAD) or b""
        if not head:
            # The client stopped before a full request. If it sent anything,
            # record it anyway: the sink records everything it receives.
            if reader.buf:
                log.write(_http_record(client, scheme, None, sni, bytes(reader.buf)))
            return
        request = common.parse_head(head, MAX_HEADERS)
        body, truncated = _read_body(reader, request, conn)
        if truncated:
            status = "413 Content Too Large"
    except (common.TooLarge, ValueError) as exc:
        too_large = isinstance(exc, common.TooLarge)
        status = "431 Request Header Fields Too Large" if too_large else "400 Bad Request"
        # Unparsable input is still evidence: keep the raw bytes as the body.
        body = (b"" if request else head) + bytes(reader.buf)
    log.write(_http_record(client, scheme, request, sni, body))
    payload = {"ok": status.startswith("200"), "host": _host_of(request, sni), "nonce": nonce}
    _respond(conn, status, payload, head_only=request is not None and request.start[0] == "HEAD")


def _http_record(
    client: str, scheme: str, request: common.Head | None, sni: str | None, body: bytes
) -> dict[str, Any]:
    return {
        "client": client,
        "scheme": scheme,
        "host": _host_of(request, sni),
        "method": request.start[0] if request else "",
        "path": _path_of(request.start[1]) if request else "",
        "body": body[:LOGGED_BODY].decode("utf-8", errors="replace"),
        "body_len": len(body),
    }


# --- raw TCP -------------------------------------------------------------------------


def _serve_tcp(conn: socket.socket, client: str, port: int, nonce: str, log: common.JsonlLog) -> None:
    """Read until the peer closes, goes quiet for 3 s, or sends 64 KiB; log it; reply; close."""
    reader = _reader(conn, idle=TCP_IDLE)
    while len(reader.buf) < TCP_MAX and reader.fill():
        pass
    data = bytes(reader.buf[:TCP_MAX])
    log.write({"client": client, "port": port, "data": data.decode("utf-8", errors="replace")})
    try:
        conn.sendall(f"ok {nonce}\n".encode())
    except OSError:
        pass  # the client left; what it sent is already logged


# --- start-up --------------------------------------------------------------------------


def _listen_tcp(bind: str, port: int) -> socket.socket:
    return socket.create_server((bind, port), backlog=128)


def _self_check(dns_port: int, http_port: int, tcp_ports: list[int]) -> None:
    """One round trip through every kind of listener (raises if one does not answer)."""
    dnswire.query_a("127.0.0.1", common.HEARTBEAT_HOST, dns_port, 1.0)
    common.expect_http(http_port, "/__heartbeat", "http listener")
    for port in tcp_ports[:1]:
        if not common.exchange(port, b"heartbeat\n"):
            raise OSError("tcp listener gave no answer")


def main(argv: list[str] | None = None) -> int:
    started = common.read_command_line(argv, "internet.py", _CONFIG_DEFAULTS, _CONFIG_REQUIRED)
    if started is None:
        return 2
    _, config, out_dir = started
    nonce = str(config["nonce"])
    names = [domains.normalize_host(n) for n in [*config["hosts"], *config["extra_names"]]]
    zones = [domains.normalize_host(z) for z in config["wildcard_zones"]]
    world = _World(names=frozenset(names), zones=tuple(zones))
    address = config["address"] or _own_ipv4()
    bind = str(config["bind"])

    stop = common.stop_on_signals()

    # The keys live in a private temp dir only while the context loads them.
    with tempfile.TemporaryDirectory(prefix="sandbox-lab-tls-") as workdir:
        tls, ca_pem = _make_tls(names, zones, workdir)
    tls.sni_callback = _remember_sni
    common.write_atomically(os.path.join(out_dir, "ca.pem"), ca_pem)

    dns_log = common.JsonlLog(os.path.join(out_dir, "dns.jsonl"))
    http_log = common.JsonlLog(os.path.join(out_dir, "http.jsonl"))
    tcp_log = common.JsonlLog(os.path.join(out_dir, "tcp.jsonl"))
    slots = threading.Semaphore(MAX_CONNECTIONS)

    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind((bind, int(config["dns_port"])))
    listeners: list[tuple[socket.socket, common.Handler]] = [
        (_listen_tcp(bind, int(config["dns_port"])),
         functools.partial(_serve_dns_tcp, world=world, address=address, log=dns_log)),
        (_listen_tcp(bind, int(config["http_port"])),
         functools.partial(_serve_http, scheme="http", nonce=nonce, log=http_log, tls=None)),
        (_listen_tcp(bind, int(config["https_port"])),
         functools.partial(_serve_http, scheme="https", nonce=nonce, log=http_log, tls=tls)),
    ]  # fmt: skip
    for port in map(int, config["tcp_ports"]):
        handler = functools.partial(_serve_tcp, port=port, nonce=nonce, log=tcp_log)
        listeners.append((_listen_tcp(bind, port), handler))
    common.spawn(_serve_dns_udp, udp, world, address, dns_log)
    for listener, handle in listeners:
        common.spawn(common.serve_forever, listener, handle, slots)

    common.write_ready(out_dir, address)
    common.heartbeat(out_dir, functools.partial(
        _self_check, int(config["dns_port"]), int(config["http_port"]), [int(p) for p in config["tcp_ports"]],
    ))
    common.wait_for(stop)
    udp.close()
    for listener, _ in listeners:
        listener.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
