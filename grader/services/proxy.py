"""The egress proxy: the sandbox's only way out, deciding each request by host name before anything is resolved.

Run inside the services image as ``python3 proxy.py CONFIG.json``. Standard
library plus Debian's ``python3-h11`` and ``python3-dnslib``; it imports just
its neighbours ``domains.py`` (the one allowlist matcher, shared with the
static analyzer, so prediction and enforcement cannot disagree),
``http1.py``, ``nameserver.py`` and ``common.py``, and never the package
itself except as a fallback so host-side tests can import it.

It speaks ``CONNECT host:port`` (a blind byte tunnel: the proxy never sees
inside TLS, which is the lesson) and absolute-form HTTP
(``GET http://host/path``), one request per connection, its body framed by
``h11`` (``http1.Body``): a request whose framing is ambiguous or malformed
(Content-Length beside Transfer-Encoding, conflicting Content-Lengths, a bad
chunk, a folded header) is answered 400 and logged, and never reaches an
origin. A chunked body is read whole first (at most ``MAX_CHUNKED_BODY``) and
sent on with a Content-Length, so the origin never parses a chunk the proxy
did not. Every decision is written to ``proxy.jsonl`` in
``out_dir``, and every lookup goes to the run's own DNS server, never to the
system resolver. IP literals are names like any other here: an allowed one
is looked up at the run's DNS server too.

It dials nothing but the simulated internet: the address the run's DNS server
answers from, whatever a lookup returned, so no allowed name (``localhost``,
``host.docker.internal``, ``169.254.169.254``, a private address) can make it
connect to the machine, its metadata service or another network. On every
connection it opens it says first which host it dialled
(``common.target_line``): every host of the simulated internet shares one
address, and this is how each server knows which host a tunnel was opened to.

It knows the world's ports (``world``: which server answers each name, and
the ports each server serves, as in ``world.json``) and refuses, before any
lookup, a request to a port the name's server does not serve: an allowed
download host is no way to the attacker's raw listener (4444) or nameserver
(53), though every simulated host shares one address. The refusal is logged
with ``"decision": "deny"``, ``"cause": "not-served"`` and a reason that starts with ``NOT_SERVED``, and
answered 502 (as a real proxy answers a port where nothing listens), without
the allowlist's 403 marker: the policy allowed the name, the world has no such
service. ``world`` is required; ``null`` (only for a proxy in front of a real
DNS server, as the exported script runs it) leaves the ports to the servers.

It also serves as sandbox-runtime's ``parentProxy`` (the srt backend starts it
on the host's loopback): there srt's own proxy has applied the policy already,
so ``any_host`` lets every name through this one, and ``upstream_ports`` sends
each port to the loopback port its sink really listens on, and nowhere else.
"""

from __future__ import annotations

import functools
import json
import os
import selectors
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grader.protocol import domains
    from grader.protocol import codec, common, configs, wire
    from grader.services import http1, nameserver
else:
    try:  # in the image: plain scripts side by side in /opt/sandbox-lab/
        import codec
        import common
        import configs
        import domains
        import http1
        import nameserver
        import wire
    except ImportError:  # on the host: imported from the package
        from grader.protocol import domains
        from grader.protocol import codec, common, configs, wire
        from grader.services import http1, nameserver

__all__ = ["NOT_SERVED", "Decision", "Ports", "decide", "main"]

IDLE_TIMEOUT = 10.0  # seconds either side may stay silent before a connection is dropped
HEAD_DEADLINE = 10.0  # the whole request head must arrive within this, against drip-feeding
CONNECT_TIMEOUT = 3.0
DNS_TIMEOUT = 2.0
MAX_HEAD = 64 * 1024
MAX_HEADERS = 100
# A chunked body is read whole before its request goes on (a bad chunk must not be half forwarded);
# past this only its first part is sent on. The sink keeps 1 MiB of a body, so 4 MiB loses no evidence it keeps.
MAX_CHUNKED_BODY = 4 * 1024 * 1024
MAX_CONNECTIONS = 512  # threads; more clients wait in the listen backlog
NOT_THE_INTERNET = "refused to dial {address}: only the simulated internet ({internet}) is ever dialled"
NOT_SERVED = "not served:"  # how a refusal by the world's ports starts its reason

# Hop-by-hop headers (RFC 9110 section 7.6.1) are the proxy's business, not
# the origin's: drop them, and anything the client names in Connection.
# Host is dropped too and rebuilt from the request target (see _forward_http).
_HOP_BY_HOP = frozenset(
    {"connection", "proxy-connection", "keep-alive", "proxy-authorization", "te", "trailer",
     "upgrade", "host", "expect"}
)  # fmt: skip

# The config is ``configs.ProxyConfig``: every key, its default and why, written once for both sides.


# --- the decision ----------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """What the policy says about one requested host, before anything is resolved."""

    host: str  # normalized, or the raw text (cut to 255 characters) when it is no host name
    allow: bool
    status: int  # the HTTP status a refusal gets
    reason: str  # for people: the log and the refusal's body say it
    cause: wire.ProxyCause  # for code: what the log records and the grader matches


def decide(raw_host: str, port: int, allowed: list[str], denied: list[str], *, any_host: bool = False) -> Decision:
    """Judge a requested ``host:port`` by name and port only; nothing here touches the network.

    An entry with a port matches that port only (``registry.npmjs.org:443``).

    ``any_host`` skips the lists (another proxy in front applied them); a
    name must still be valid. An IP literal is judged like a name: allowed
    only when listed, and then looked up at the run's DNS server like one,
    never dialled as the address it spells.
    """
    try:
        # srt's filter: a malformed host (isValidHost) is refused; the rest is matched as the URL parser spells it
        host = domains.request_host(raw_host)
    except ValueError:
        return Decision(raw_host[:255], False, 400, "invalid host", "invalid-host")
    if any_host:
        return Decision(host, True, 200, "any host: the proxy in front applied the policy", "forwarded")
    if not domains.host_allowed(host, allowed, denied, port):
        hit = next((p for p in denied if domains.matches(p, host, port)), None)
        pinned = next((p for p in allowed if domains.matches(p, host)), None)
        reason = (f'matches denied entry "{hit}"' if hit else
                  f'allowed entry "{pinned}" opens no port {port}' if pinned else "not in the allowed list")
        return Decision(host, False, 403, reason, "denied" if hit else "port-not-allowed" if pinned else "not-allowed")
    entry = next(p for p in allowed if domains.matches(p, host, port))
    return Decision(host, True, 200, f'matches allowed entry "{entry}"', "forwarded")


@dataclass(frozen=True)
class Ports:
    """Which server answers a name (``domains.server_of``) and which ports each server serves: the world's ports."""

    serves: tuple[tuple[str, tuple[int, ...]], ...]  # (server, its ports); the listed servers are the world's hosts
    zones: tuple[str, ...] = ()
    operators: tuple[str, ...] = ()
    catch_all: str | None = None

    @classmethod
    def from_config(cls, raw: Any) -> Ports:
        """Parse a config's ``world`` (its JSON value) strictly; ValueError saying what is wrong."""
        try:
            world = codec.decode(configs.WorldPorts, raw, '"world"')
        except codec.CodecError as exc:
            raise ValueError(str(exc)) from None
        return cls.from_world(world)

    @classmethod
    def from_world(cls, world: configs.WorldPorts) -> Ports:
        """The world's ports, checked: at least one server, and ports for every zone's server; ValueError if not."""
        if not world.serves:
            raise ValueError('"world"/"serves" must map each server to its ports, e.g. {"pypi.org": [80, 443]}')
        out = {domains.normalize_host(name): tuple(sorted(set(ports))) for name, ports in world.serves.items()}
        zones = tuple(domains.normalize_host(z) for z in world.wildcard_zones)
        catch_all = domains.normalize_host(world.catch_all) if world.catch_all else None
        missing = [z for z in (*zones, *([catch_all] if catch_all else [])) if z not in out]
        if missing:
            raise ValueError(f'"world"/"serves" has no ports for {missing[0]}')
        return cls(tuple(sorted(out.items())), zones, tuple(domains.normalize_host(d) for d in world.operators), catch_all)

    def refusal(self, host: str, port: int) -> str | None:
        """Why ``host:port`` reaches nothing in the world (a reason starting with ``NOT_SERVED``); None when it may."""
        servers = dict(self.serves)
        server = domains.server_of(host, servers, self.zones, self.operators, self.catch_all)
        if server is None:
            return None  # no server has the name: the lookup says so (NXDOMAIN), as before
        ports = servers.get(server, ())
        if port in ports:
            return None
        who = host if server == host else f"{host}'s server ({server})"
        served = ", ".join(map(str, ports)) or "no port"
        return f"{NOT_SERVED} {who} serves no port {port}, only {served}: nothing answers there, as on the real internet"


# --- reading requests ------------------------------------------------------------------


class _BadRequest(Exception):
    """The client sent something that is not a request this proxy can judge; the text says why."""


def _split_authority(authority: str, default_port: int | None) -> tuple[str, int]:
    """``host[:port]`` to its parts. IPv6 literals are not supported, so brackets are refused."""
    host, sep, port_text = authority.rpartition(":")
    if not sep:
        host, port_text = authority, ""
    if not port_text:
        if default_port is None:
            raise _BadRequest("CONNECT needs host:port")
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise _BadRequest("invalid port")
    return host, int(port_text)


# --- relaying --------------------------------------------------------------------------


def _send_status(conn: socket.socket, status: int, text: str, body: str) -> None:
    payload = body.encode("utf-8")
    head = (
        f"HTTP/1.1 {status} {text}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n"
    )
    if status == 403:
        head += "X-Proxy-Error: blocked-by-allowlist\r\n"
    try:
        conn.sendall((head + "\r\n").encode("latin-1") + payload)
        # Lingering close: stop writing, then drain what the client still
        # sends (a body behind a refused request), so the kernel does not
        # reset the connection and destroy the answer before it is read.
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(1.0)
        drained = 0
        while drained < 1024 * 1024 and (chunk := conn.recv(65536)):
            drained += len(chunk)
    except OSError:
        pass  # the client left; the decision is logged already


def _read_chunked(body: http1.Body) -> tuple[bytes, bool]:
    """A chunked body, whole, before a byte of its request is sent on: a bad chunk is refused, not half forwarded.

    Past ``MAX_CHUNKED_BODY`` the rest is not read and the first part is sent on (True: cut). A real
    proxy would deliver the whole body to an allowed host; refusing it here would read as "blocked",
    and the sink keeps only its first 1 MiB as evidence anyway.
    """
    out = bytearray()
    while (piece := body.next()) is not None:
        out += piece
        if len(out) > MAX_CHUNKED_BODY:
            return bytes(out[:MAX_CHUNKED_BODY]), True
    return bytes(out), False


def _relay_body(body: http1.Body, upstream: socket.socket) -> None:
    """Forward exactly one Content-Length body and nothing after it.

    Bytes past the body would be a second request on the same connection,
    which must not reach an origin the proxy never judged it for; ``h11``
    keeps them out of the body.
    """
    try:
        while (piece := body.next()) is not None:
            upstream.sendall(piece)
    except http1.BadHead as exc:
        raise _BadRequest(str(exc)) from None


def _tunnel(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until both sides have finished or neither spoke for IDLE_TIMEOUT.

    A side that finishes sending is passed on as a half-close, so a client can
    shut down its writing end and still read the answer.
    """
    peers = {a: b, b: a}
    with selectors.DefaultSelector() as selector:
        for sock in peers:
            selector.register(sock, selectors.EVENT_READ)
        open_sides = 2
        while open_sides:
            events = selector.select(timeout=IDLE_TIMEOUT)
            if not events:
                return  # idle: give up on both sides
            for key, _ in events:
                src: socket.socket = key.fileobj  # type: ignore[assignment]
                dst = peers[src]
                try:
                    data = src.recv(65536)
                    if data:
                        dst.sendall(data)
                        continue
                    selector.unregister(src)
                    open_sides -= 1
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    return  # a reset on either side ends the tunnel


def _forward_http(client: socket.socket, upstream: socket.socket, head: http1.Head, body: http1.Body,
                  chunked: bytes | None, target: tuple[str, int, str]) -> None:  # fmt: skip
    """Send one absolute-form request to the origin in origin-form, then relay its response.

    ``chunked`` is the whole body of a chunked request (read already), sent
    with a Content-Length; otherwise the body is relayed as ``body`` frames it.
    """
    host, port, path = target
    method, _target, version = head.start
    named = {v.strip().lower() for value in head.values("connection") for v in value.split(",")}
    lines = [f"{method} {path} {version}"]
    # RFC 9112 section 3.2.2: the Host header must be replaced by the target's
    # host. Otherwise "GET http://allowed/ + Host: attacker.example" would be
    # judged as one host and logged by the sink as another.
    lines.append(f"Host: {host}" if port == 80 else f"Host: {host}:{port}")
    dropped = _HOP_BY_HOP | named | ({"transfer-encoding"} if chunked is not None else set())
    lines += [f"{k}: {v}" for k, v in head.headers if k.lower() not in dropped]
    if chunked is not None:
        lines.append(f"Content-Length: {len(chunked)}")
    lines.append("Connection: close")
    upstream.settimeout(IDLE_TIMEOUT)
    upstream.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
    if chunked is not None:
        upstream.sendall(chunked)
    else:
        if head.values("expect") and head.values("content-length"):
            # Expect was stripped upstream; answering it here spares the client its wait.
            client.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        _relay_body(body, upstream)

    origin = http1.Reader(upstream, IDLE_TIMEOUT)
    response_head = origin.read_until(b"\r\n\r\n", MAX_HEAD)
    if response_head is None:
        _send_status(client, 502, "Bad Gateway", f"{host} closed the connection without a response\n")
        return
    try:
        response = http1.parse_head(response_head, MAX_HEADERS, response=True)
    except (http1.BadHead, http1.TooLarge):
        _send_status(client, 502, "Bad Gateway", f"{host} sent a malformed response\n")
        return
    # The response closes the connection, whatever the origin said about keep-alive.
    kept = [f"{k}: {v}" for k, v in response.headers if k.lower() not in _HOP_BY_HOP]
    out = "\r\n".join([" ".join(response.start), *kept, "Connection: close"]) + "\r\n\r\n"
    client.sendall(out.encode("latin-1"))
    while chunk := origin.take(65536):  # what was read past the head comes first
        client.sendall(chunk)


# --- one client connection ------------------------------------------------------------


class _Allowlist:
    """The allowed and denied entries, optionally re-read from a policy file that may be replaced.

    A proxy started ahead of need (the backend keeps one warm) gets its run's
    lists later: the backend replaces ``policy_file`` atomically before the
    sandbox starts, and every connection looks at the file first. Until the
    file exists, and whenever it cannot be read, everything is refused: the
    proxy fails closed.
    """

    def __init__(self, allowed: list[str], denied: list[str], policy_file: str | None) -> None:
        self._lists = (allowed, denied)
        self._file = policy_file
        self._seen: tuple[int, int, int] | None = None
        self._lock = threading.Lock()
        if policy_file:
            self._lists = ([], [])

    def current(self) -> tuple[list[str], list[str]]:
        if not self._file:
            return self._lists
        with self._lock:
            try:
                st = os.stat(self._file)
                key = (st.st_ino, st.st_mtime_ns, st.st_size)
                if key != self._seen:
                    with open(self._file, encoding="utf-8") as fh:
                        # read strictly: a list that is not exactly one (a string, a renamed key) refuses everything
                        lists = codec.decode(configs.AllowLists, json.load(fh), "policy_file")
                    self._lists = (
                        [domains.normalize_pattern(p) for p in lists.allowed],
                        [domains.normalize_pattern(p, denied=True) for p in lists.denied],
                    )
                    self._seen = key
            except (OSError, ValueError, KeyError, TypeError):
                self._lists, self._seen = ([], []), None
            return self._lists


@dataclass(frozen=True)
class _Settings:
    allowlist: _Allowlist
    dns_server: str
    dns_port: int
    log: common.JsonlLog
    any_host: bool = False
    upstream_ports: dict[int, int] | None = None  # requested port -> port to dial; None: dial as requested
    ports: Ports | None = None  # the world's ports; None only in front of a real DNS server (the exported script)


def _handle(conn: socket.socket, client: str, settings: _Settings) -> None:
    reader = http1.Reader(conn, IDLE_TIMEOUT)
    head_deadline = time.monotonic() + HEAD_DEADLINE
    method: str = ""
    port: int | None = None
    try:
        raw = reader.read_until(b"\r\n\r\n", MAX_HEAD, head_deadline)
        if raw is None:
            return  # the client left (or stalled) before asking for anything
        head = http1.parse_head(raw, MAX_HEADERS)
        method, target, _version = head.start
        path = ""
        if method.upper() == "CONNECT":
            raw_host, port = _split_authority(target, None)
        elif target.lower().startswith("http://"):
            rest = target[len("http://") :]
            cut = min([i for i in map(rest.find, "/?#") if i >= 0], default=len(rest))
            path = rest[cut:].split("#", 1)[0]  # a fragment never goes on the wire
            path = path if path.startswith("/") else "/" + path
            # One parse serves both the decision and the connection, so no
            # parser disagreement ("http://allowed\@evil/") can split them.
            raw_host, port = _split_authority(rest[:cut], 80)
        else:
            raise _BadRequest("not a proxy request: send CONNECT host:port or an absolute http:// URL")
        # h11 frames the body (and refuses an ambiguous framing) before any decision; after CONNECT's
        # head come the tunnel's bytes, which are no body
        body = http1.Body(raw, head, reader, keep=0)
    except (_BadRequest, http1.BadHead, http1.TooLarge) as exc:
        settings.log.write(wire.ProxyRecord(time.time(), client, method[:32], None, port, None, "deny", f"malformed request: {exc}",
                                            "bad-request"))
        _send_status(conn, 400, "Bad Request", f"bad proxy request: {exc}\n")
        return

    # The decision comes first, from the name alone: a refused host is never
    # looked up, so a denied name cannot leak through DNS either.
    decision = decide(raw_host, port, *settings.allowlist.current(), any_host=settings.any_host)
    if decision.allow and settings.ports is not None:
        # Then the world: a port the name's server does not serve reaches nothing (and is never looked up).
        unserved = settings.ports.refusal(decision.host, port)
        if unserved is not None:
            decision = Decision(decision.host, False, 502, f"{unserved} (the policy allows the name: {decision.reason})",
                                "not-served")
    # "path" (absolute-form only; None for CONNECT) goes beyond the original
    # contract: a refused request's URL is evidence of what it tried to send.
    def record(reason: str, cause: wire.ProxyCause) -> wire.ProxyRecord:
        return wire.ProxyRecord(time.time(), client, method[:32], decision.host, port, path or None,
                                "allow" if decision.allow else "deny", reason, cause)

    if not decision.allow:
        settings.log.write(record(decision.reason, decision.cause))
        if decision.status == 400:
            _send_status(conn, 400, "Bad Request", f"invalid host: {decision.host}\n")
        elif decision.status == 502:
            _send_status(conn, 502, "Bad Gateway", f"{decision.host}:{port}: {decision.reason}\n")
        else:
            text = f"blocked by sandbox policy: {decision.host} ({decision.reason})\n"
            _send_status(conn, 403, "Forbidden", text)
        return

    chunked: bytes | None = None
    cut_note = ""
    if method.upper() != "CONNECT" and body.chunked:
        try:
            if head.values("expect"):
                conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")  # the client waits for it before its body
            chunked, cut = _read_chunked(body)
            if cut:
                cut_note = f"; chunked body cut at {MAX_CHUNKED_BODY} bytes, its first part sent on"
        except (http1.BadHead, OSError) as exc:
            # a body the origin could read otherwise than we do: refused before anything is dialled
            settings.log.write(wire.ProxyRecord(time.time(), client, method[:32], decision.host, port, path or None,
                                                "deny", f"malformed request: {exc}", "bad-request"))
            _send_status(conn, 400, "Bad Request", f"bad proxy request: {exc}\n")
            return

    upstream, cause, failure = _open_upstream(decision.host, port, settings)
    settings.log.write(record(decision.reason + cut_note + (f"; {failure}" if failure else ""), cause))
    if upstream is None:
        _send_status(conn, 502, "Bad Gateway", f"{decision.host}: {failure}\n")
        return
    with upstream:
        if method.upper() == "CONNECT":
            conn.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            if reader.buf:  # e.g. a TLS ClientHello sent right behind the CONNECT
                upstream.sendall(bytes(reader.buf))
            _tunnel(conn, upstream)
        else:
            try:
                _forward_http(conn, upstream, head, body, chunked, (decision.host, port, path))
            except (_BadRequest, http1.TooLarge) as exc:
                _send_status(conn, 400, "Bad Request", f"bad proxy request: {exc}\n")


def _open_upstream(host: str, port: int, settings: _Settings) -> tuple[socket.socket | None, wire.ProxyCause, str]:
    """Resolve through the run's DNS server only, then connect; on failure say why (a cause code and its prose)."""
    try:
        addresses = nameserver.query_a(settings.dns_server, host, settings.dns_port, DNS_TIMEOUT)
    except ValueError as exc:  # a name DNS cannot carry: no lookup was made, anywhere
        return None, "upstream-failed", f"DNS lookup failed: {exc}"
    except OSError as exc:  # no answer in time (TimeoutError), refused, SERVFAIL: the internet did not answer
        return None, "internet-unreachable", f"DNS lookup failed: {exc}"
    if not addresses:
        return None, "no-such-host", "no such host (NXDOMAIN)"
    if addresses[0] != settings.dns_server:
        # The run's DNS server is the simulated internet, and answers every name with its own address.
        return None, "upstream-failed", NOT_THE_INTERNET.format(address=addresses[0], internet=settings.dns_server)
    dial = port
    if settings.upstream_ports is not None:
        if port not in settings.upstream_ports:
            return None, "upstream-failed", f"no sink listens on port {port}"
        dial = settings.upstream_ports[port]
    try:
        upstream = socket.create_connection((settings.dns_server, dial), timeout=CONNECT_TIMEOUT)
    except OSError as exc:
        return None, "internet-unreachable", f"cannot connect to {addresses[0]}:{port}: {exc}"
    try:
        upstream.sendall(common.target_line(host))  # which host this connection is for: its server answers for no other
    except OSError as exc:
        upstream.close()
        return None, "internet-unreachable", f"{addresses[0]}:{port} closed at once: {exc}"
    return upstream, "forwarded", ""


def _self_check(port: int) -> None:
    """A request to the proxy's own listener; any HTTP answer (a refusal included) shows it decides."""
    common.expect_http(port, f"http://{common.HEARTBEAT_HOST}/", "proxy")


def _port_number(key: str) -> int:
    """An ``upstream_ports`` key (JSON keys are strings) as the port it names; ValueError for anything else."""
    if not key.isdigit():
        raise ValueError(f'"upstream_ports": {key!r} is not a port number')
    return int(key)


def main(argv: list[str] | None = None) -> int:
    started = configs.read_command_line(argv, "proxy.py", configs.ProxyConfig)
    if started is None:
        return 2
    config_path, config, out_dir = started
    try:
        # Normalized the same way the policy loader does, so "GitHub.com." matches.
        allowed = [domains.normalize_pattern(p) for p in config.allowed]
        denied = [domains.normalize_pattern(p, denied=True) for p in config.denied]
    except ValueError as exc:
        raise SystemExit(f"{config_path}: invalid allowlist entry: {exc}") from None
    try:
        world = Ports.from_world(config.world) if config.world is not None else None
        upstream = {_port_number(k): v for k, v in config.upstream_ports.items()} if config.upstream_ports is not None else None
    except ValueError as exc:
        raise SystemExit(f"{config_path}: invalid world: {exc}") from None
    settings = _Settings(
        allowlist=_Allowlist(allowed, denied, config.policy_file or None),
        dns_server=config.dns_server,
        dns_port=config.dns_port,
        log=common.JsonlLog(os.path.join(out_dir, "proxy.jsonl")),
        any_host=config.any_host,
        upstream_ports=upstream,
        ports=world,
    )

    stop = common.stop_on_signals()

    listener = socket.create_server((config.bind, config.listen_port), backlog=128)
    handle = functools.partial(_handle, settings=settings)
    common.spawn(common.serve_forever, listener, handle, threading.Semaphore(MAX_CONNECTIONS))
    common.write_ready(out_dir, listener.getsockname()[0])
    port = config.listen_port
    common.heartbeat(out_dir, lambda: _self_check(port))
    common.wait_for(stop)
    listener.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
