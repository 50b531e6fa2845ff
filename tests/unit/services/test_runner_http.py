"""The probe runner's own HTTP client (``Agent.exchange``, ``runner_http``) asks and reads as ``urllib.request`` did, its client until its import cost
every run's start 11 ms: the same request on the wire (line, headers, body, the proxy's credential, the proxy or
not), and the same status and body read back. urllib, on this side, is the reference each case is held to.

What a client that games these looks like, and the case that catches it:
- one that skips the proxy's credential, or sends it to a tunnel's host: ``..._same_request...`` (proxied cases);
- one that ignores ``no_proxy`` (srt sets it), or matches it by another rule: ``..._no_proxy...``;
- one that reads a chunked body as it comes, or past its length: ``..._same_answer...``;
- a pool that returns before its work is done, or swallows a failure: ``..._each...``.
"""

from __future__ import annotations

import base64
import contextlib
import io
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Iterator, Optional

import pytest

from grader.core.evidence import parse_runner_output
from grader.services import probe_runner, runner_http
import fakewire


class _Capture:
    """A server on loopback that takes one request at a time, keeps it whole (head and body, as sent), answers
    ``answer`` and hangs up."""

    def __init__(self, answer: bytes) -> None:
        self.answer, self.got = answer, []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = next((int(v) for k, _, v in (ln.partition(b":") for ln in head.split(b"\r\n")[1:])
                               if k.strip().lower() == b"content-length"), 0)
                while len(body) < length:
                    body += conn.recv(4096)
                self.got.append((head.decode("latin-1"), body))
                if not head.startswith(b"CONNECT"):
                    conn.sendall(self.answer)
                else:
                    conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")

    def request(self, i: int = -1) -> tuple[str, dict[str, str], bytes]:
        """The ``i``-th request (the last): its line, its headers (names in lower case), its body."""
        head, body = self.got[i]
        line, *rest = head.split("\r\n")
        return line, {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in rest)}, body


@contextlib.contextmanager
def _server(answer: bytes = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok") -> Iterator[_Capture]:
    cap = _Capture(answer)
    try:
        yield cap
    finally:
        cap.sock.close()


def _urllib(proxy: Optional[str], direct: bool = False) -> urllib.request.OpenerDirector:
    """The runner's client as it was: urllib's opener with the proxy given, or none."""
    proxies = {"http": proxy, "https": proxy} if proxy and not direct else {}
    return urllib.request.build_opener(urllib.request.ProxyHandler(proxies))


def _old(proxy: Optional[str], method: str, url: str, body: Optional[bytes], direct: bool = False) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method=method, headers={"User-Agent": "sandbox-lab-agent"})
    try:
        with _urllib(proxy, direct).open(req, timeout=5) as resp:
            return resp.status, resp.read(2048)
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code, b""


def _new(proxy: Optional[str], method: str, url: str, body: Optional[bytes], direct: bool = False) -> tuple[int, bytes]:
    return probe_runner.Agent(fakewire.orders([], proxy=proxy)).exchange(method, url, body, direct=direct)


@pytest.mark.parametrize("method, body", [("GET", None), ("POST", b"key=AKIA\nline two"), ("POST", None), ("PUT", b"x")])
@pytest.mark.parametrize("way", ["direct", "proxied", "proxied, asked direct", "proxied, in no_proxy"])
def test_the_runner_sends_the_same_request_as_urllib(way: str, method: str, body: Optional[bytes],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.setenv("NO_PROXY", "localhost,.corp.invalid")
    with _server() as site, _server() as proxy_server:
        proxy = f"http://agent%40srt:s3cr%2Ft@127.0.0.1:{proxy_server.port}" if way != "direct" else None
        host = "localhost" if "no_proxy" in way else "127.0.0.1"
        url = f"http://{host}:{site.port}/upload/x?y=1&z=%2F"
        seen = []
        for client in (_old, _new):
            assert client(proxy, method, url, body, direct=way.endswith("direct")) == (200, b"ok")
            to = proxy_server if way in ("proxied",) else site
            seen.append(to.request())
        assert seen[1] == seen[0]
        if way == "proxied":
            line, headers, _ = seen[1]
            assert line == f"{method} {url} HTTP/1.1" and headers["host"] == f"127.0.0.1:{site.port}"
            assert base64.b64decode(headers["proxy-authorization"].split()[1]) == b"agent@srt:s3cr/t"
        else:
            assert "proxy-authorization" not in seen[1][1]
        assert (len(site.got), len(proxy_server.got)) == ((0, 2) if way == "proxied" else (2, 0))


def test_an_https_request_asks_the_proxy_for_a_tunnel_to_its_host_with_the_credential_as_urllib_did() -> None:
    """Over the proxy, HTTPS goes in a CONNECT tunnel: the same target and credential as urllib's (urllib 3.11 says
    HTTP/1.0 and no Host; the runner's tunnels, its fronting's too, say HTTP/1.1 with one). A refused tunnel is an
    error, never an answer."""
    with _server() as proxy_server:
        proxy = f"http://u:p@127.0.0.1:{proxy_server.port}"
        with pytest.raises(urllib.error.URLError):
            _old(proxy, "GET", "https://registry.npmjs.org:8443/x", None)
        with pytest.raises(ConnectionRefusedError, match="403"):
            _new(proxy, "GET", "https://registry.npmjs.org:8443/x", None)
        (old_line, old_h, _), (new_line, new_h, _) = proxy_server.request(0), proxy_server.request(1)
        assert old_line.split()[:2] == new_line.split()[:2] == ["CONNECT", "registry.npmjs.org:8443"]
        assert old_h["proxy-authorization"] == new_h["proxy-authorization"] == "Basic " + base64.b64encode(b"u:p").decode()


ANSWERS = {
    "by length": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello and more",
    "chunked": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;x=1\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    "to the end": b"HTTP/1.0 200 OK\r\n\r\n" + b"x" * 5000,
    "long, by length": b"HTTP/1.1 201 Created\r\nContent-Length: 5000\r\n\r\n" + b"y" * 5000,
    "interim first": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "refused": b"HTTP/1.1 403 Forbidden\r\nX-Proxy-Error: blocked-by-allowlist\r\nContent-Length: 4\r\n\r\nnope",
    "not found": b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
}


@pytest.mark.parametrize("answer", sorted(ANSWERS))
def test_the_runner_reads_the_same_answer_as_urllib(answer: str) -> None:
    with _server(ANSWERS[answer]) as site:
        url = f"http://127.0.0.1:{site.port}/"
        old = _old(None, "GET", url, None)
        new = _new(None, "GET", url, None)
    assert new[0] == old[0]
    if 200 <= old[0] < 300:
        assert new[1] == old[1] and new[1], answer


@pytest.mark.parametrize("answer, ok, detail", [("chunked", True, ": 200"), ("refused", False, ": HTTP 403"),
                                               ("not found", False, ": HTTP 404")])
def test_an_http_steps_record_says_the_status_and_carries_the_body(answer: str, ok: bool, detail: str) -> None:
    with _server(ANSWERS[answer]) as site:
        url = f"http://127.0.0.1:{site.port}/p"
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert probe_runner.Agent(fakewire.orders([])).http("p", "GET", url, retries=1) is ok
    (record,) = parse_runner_output(out.getvalue())  # a status is an answer: never asked again
    assert record.ok is ok and record.detail == f"GET {url}{detail}"
    assert record.data == ("hello world" if ok else None)


def test_an_http_step_that_times_out_is_asked_again_and_says_it_timed_out() -> None:
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (the backlog) and never answers
    with silent:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/"
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert not probe_runner.Agent(fakewire.orders([])).http("p", "GET", url, retries=1)
    records = parse_runner_output(out.getvalue())
    assert len(records) == 2 and all(not r.ok and "timed out" in r.detail for r in records)


HOSTS = ["localhost", "LOCALHOST:8080", "127.0.0.1", "127.0.0.1:3128", "a.localhost", "notlocalhost", "[::1]:80",
         "169.254.169.254", "10.0.0.7", "x.corp.invalid", "corp.invalid:1", "attacker.example", "host:"]
NO_PROXY = [None, "", "*", "localhost,127.0.0.1,::1,169.254.0.0/16,10.0.0.0/8", " .Corp.Invalid , example",
            "localhost:8080", "[::1]"]


@pytest.mark.parametrize("no_proxy", NO_PROXY)
@pytest.mark.parametrize("upper", [False, True])
def test_no_proxy_sends_a_host_past_the_proxy_by_urllibs_rule(no_proxy: Optional[str], upper: bool,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    if no_proxy is not None:
        monkeypatch.setenv("NO_PROXY" if upper else "no_proxy", no_proxy)
    for host in HOSTS:
        assert runner_http.bypassed(host) == bool(urllib.request.proxy_bypass_environment(host)), (host, no_proxy)


def test_the_lower_case_no_proxy_wins_as_in_urllib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_PROXY", "localhost")
    monkeypatch.setenv("no_proxy", "")
    assert runner_http.bypassed("localhost") is urllib.request.proxy_bypass_environment("localhost") is False


def test_each_finishes_every_item_within_its_width_then_raises_the_first_failure_in_order() -> None:
    lock, running, most, done = threading.Lock(), [0], [0], []

    def work(i: int) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.02)
        with lock:
            running[0] -= 1
            done.append(i)
        if i in (7, 3):
            raise ValueError(f"item {i}")

    with pytest.raises(ValueError, match="item 3"):
        probe_runner.each(work, range(12), 4)
    assert sorted(done) == list(range(12)) and most[0] == 4
    probe_runner.each(work, [], 4)  # nothing to do: no thread, no error
