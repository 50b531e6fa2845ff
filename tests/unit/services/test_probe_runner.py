"""The probe runner's records of HTTP steps: each says the way it went (``route``), not only in its words."""

from __future__ import annotations

import contextlib
import io
import socket
from pathlib import Path
from typing import Any, Optional

import pytest

from grader.core.evidence import parse_runner_output
from grader.protocol.wire import Route
from grader.services import probe_runner
import fakewire


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again on leaving: a refused connection


@pytest.mark.parametrize("via", [None, "proxy", "direct"])
def test_an_http_steps_record_carries_the_way_it_went(via: Optional[Route]) -> None:
    agent = probe_runner.Agent(fakewire.orders([]))  # no proxy in this sandbox
    url = f"http://127.0.0.1:{_closed_port()}/x"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert not agent.http("p", "GET", url, via=via)
    (record,) = parse_runner_output(out.getvalue())
    assert (record.step, record.target, record.route) == ("http", url, via)


def _handshake(client_ctx: Any, server_ctx: Any, name: str) -> Optional[str]:
    """A TLS handshake over a socket pair; None when it held, else the client's error."""
    import ssl
    import threading

    a, b = socket.socketpair()
    with a, b:
        def serve() -> None:
            with contextlib.suppress(ssl.SSLError, OSError), \
                    server_ctx.wrap_socket(b, server_side=True, do_handshake_on_connect=False) as server:
                server.do_handshake()

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        try:
            with client_ctx.wrap_socket(a, server_hostname=name, do_handshake_on_connect=False) as client:
                client.do_handshake()
            return None
        except ssl.SSLError as e:
            return str(e)
        finally:
            t.join(5)


def test_the_runner_trusts_the_worlds_authority_alone_and_checks_the_name(tmp_path: Path) -> None:
    """The runner's TLS context verifies the chain and the host name as ``ssl.create_default_context()`` does, but
    trusts only the world's CA (``ca_file``): a run's own internet signs everything in the world, and the system's
    store (some 300 authorities) cost 50-90 ms of every run to load. Without a CA file it trusts nothing."""
    import dataclasses
    import ssl

    from grader.services import tls

    certs = tls.Certs(["registry.npmjs.org"], ["github.com"], str(tmp_path), lambda *a: None)
    (tmp_path / "ca.pem").write_bytes(certs.ca_pem)
    orders = dataclasses.replace(fakewire.orders([]), ca_file=str(tmp_path / "ca.pem"))
    agent = probe_runner.Agent(orders)
    assert agent.ssl.verify_mode == ssl.CERT_REQUIRED and agent.ssl.check_hostname
    assert [dict(c["subject"][0])["commonName"] for c in agent.ssl.get_ca_certs()] == [tls.CA_NAME]
    assert _handshake(agent.ssl, certs.base, "registry.npmjs.org") is None
    assert _handshake(agent.ssl, certs.base, "api.github.com") is None
    assert "match" in (_handshake(agent.ssl, certs.base, "example.org") or ""), "another name is refused"
    bare = probe_runner.Agent(fakewire.orders([]))  # no CA file: no authority at all, not the system's
    assert bare.ssl.get_ca_certs() == [] and "verify failed" in (_handshake(bare.ssl, certs.base, "registry.npmjs.org") or "")


# --- domain fronting: a host the proxy opens itself is not smuggled into another's tunnel --------------


class _Proxy:
    """Stands for the sandbox's proxy at ``Agent._tunnel``: opens a tunnel to ``allowed`` hosts, refuses the rest."""

    def __init__(self, allowed: set[str]) -> None:
        import threading

        self.allowed, self.asked, self._lock = allowed, [], threading.Lock()

    def __call__(self, host: str, port: int) -> socket.socket:
        with self._lock:
            self.asked.append(host)
        if host not in self.allowed:
            raise ConnectionRefusedError("the proxy answered HTTP/1.1 403 Forbidden")
        a, b = socket.socketpair()
        b.close()  # a tunnel to a server that hangs up: every TLS handshake inside it fails at once
        return a


def _fronting_orders(proxy: Optional[str]) -> Any:
    from grader.protocol.wire import FrontAttempt, FrontStep, ProbeOrders

    targets = ["open.example", "refused.example"]
    steps: list[Any] = [FrontStep(connect=t, port=443, attempts=()) for t in targets]
    for front in ("front1.example", "front2.example"):
        attempts = tuple(a for t in targets for a in (FrontAttempt(sni=t, host=t), FrontAttempt(sni=front, host=t)))
        steps.append(FrontStep(connect=front, port=443, attempts=attempts, request_path="/front/x", body="x"))
    return fakewire.orders([ProbeOrders(id="net-domain-fronting", steps=tuple(steps), parallel=8)], proxy=proxy)


@pytest.mark.parametrize("proxy", ["http://proxy.invalid:3128", None])
def test_behind_a_proxy_a_host_it_opens_itself_is_asked_once_and_never_fronted(proxy: Optional[str]) -> None:
    """Behind a proxy: each target's tunnel is asked for once (its decision step's record), and only the refused
    target is named inside the fronts' tunnels. With no proxy every name is tried: nothing decided anything."""
    agent = probe_runner.Agent(_fronting_orders(proxy))
    fake = _Proxy({"open.example", "front1.example", "front2.example"})
    agent._tunnel = fake  # type: ignore[method-assign]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        agent.run(agent.cfg.probes[0])
    records = [r for r in parse_runner_output(out.getvalue()) if r.step == "front"]
    decisions = {str(r.target): r.ok for r in records if ">" not in str(r.target)}
    assert decisions == {"open.example": True, "refused.example": False}
    named = sorted({str(r.target).rsplit(">", 1)[1] for r in records if ">" in str(r.target)})
    if proxy:
        assert named == ["refused.example"], named
        assert sorted(fake.asked).count("open.example") == 1 and fake.asked.count("refused.example") == 1, fake.asked
        assert fake.asked.count("front1.example") == 2, fake.asked  # SNI and Host of the refused name, a tunnel each
    else:
        assert named == ["open.example", "refused.example"], named
        assert fake.asked.count("front1.example") == 4, fake.asked


class _SlowTunnels:
    """Opens every tunnel (but to ``refused``) to a far end that says nothing and hangs up after ``hold`` s, so
    each TLS session in it fails then; keeps when each tunnel was asked for, and to which host."""

    def __init__(self, hold: float, refused: frozenset[str] = frozenset()) -> None:
        import threading
        import time

        self.hold, self.refused, self.asked, self._lock, self.t0 = hold, refused, [], threading.Lock(), time.monotonic()

    def __call__(self, host: str, port: int) -> socket.socket:
        import threading
        import time

        with self._lock:
            self.asked.append((host, time.monotonic() - self.t0))
        if host in self.refused:
            raise ConnectionRefusedError("the proxy answered HTTP/1.1 403 Forbidden")
        a, b = socket.socketpair()
        threading.Timer(self.hold, b.close).start()
        return a


def _one_front(connect: str = "front.example") -> Any:
    from grader.protocol.wire import FrontAttempt, FrontStep, ProbeOrders

    names = ["a.example", "b.example", "c.example"]
    attempts = tuple(x for n in names for x in (FrontAttempt(sni=connect, host=n), FrontAttempt(sni=n, host=n)))
    step = FrontStep(connect=connect, port=443, attempts=attempts, request_path="/front/x", body="x")
    return fakewire.orders([ProbeOrders(id="net-domain-fronting", steps=(step,), parallel=8)])


def test_the_other_fronting_tunnels_open_as_soon_as_the_first_is_opened_not_after_its_names() -> None:
    """The first tunnel (the names carried in HTTP alone) decides whether any other is tried; the others are asked
    for the moment it opens, while its own session still runs: not one after the other."""
    agent = probe_runner.Agent(_one_front())
    tunnels = _SlowTunnels(hold=0.4)
    agent._tunnel = tunnels  # type: ignore[method-assign]
    with contextlib.redirect_stdout(io.StringIO()):
        agent.run(agent.cfg.probes[0])
    # the shared group's first tunnel and one per name with its own SNI, all within the first session's 0.4 s;
    # then the shared group's tunnels again, one per name left, as each hang-up ends the last
    times = sorted(t for _, t in tunnels.asked)
    assert len(times) == 6 and times[3] - times[0] < 0.3 and times[4] - times[0] > 0.35, tunnels.asked


def test_when_the_first_fronting_tunnel_is_refused_no_other_name_is_tried() -> None:
    agent = probe_runner.Agent(_one_front())
    tunnels = _SlowTunnels(hold=0.0, refused=frozenset({"front.example"}))
    agent._tunnel = tunnels  # type: ignore[method-assign]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        agent.run(agent.cfg.probes[0])
    assert [h for h, _ in tunnels.asked] == ["front.example"], tunnels.asked
    fronted = [r for r in parse_runner_output(out.getvalue()) if r.step == "front"]
    assert len(fronted) == 1 and "the tunnel was not opened" in fronted[0].detail and "403" in fronted[0].detail
