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
