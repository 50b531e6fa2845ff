"""The probe runner's records of HTTP steps: each says the way it went (``route``), not only in its words."""

from __future__ import annotations

import contextlib
import io
import socket
from typing import Optional

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
