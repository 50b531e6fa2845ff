"""A seat is joined only when it is exactly what the sandbox would have had on the bridge (``seats.unfit``), and a
seat that stopped under its sandbox is said (``seats.gone``). No Docker: the containers are descriptions.

A build that games these: one that joins any seat it is handed (a stranger's container, one on another proxy's
network, one on two networks, one beside a third container on the proxy's network, a stopped one). Each is a case
below that must give a reason; the integration test (``integration/test_seats_docker.py``) hands a run such a seat."""

from __future__ import annotations

from typing import Any

import pytest

from grader.backends.docker import seats
from grader.backends.docker.engine import ContainerRef, Missing, NetworkRef
from grader.backends.docker.resources import Resources
from grader.backends.docker.proxies import WarmProxy
from grader.backends.docker.simnet import LABEL, LABEL_ROLE

NET = NetworkRef(id="n1", name="sl-proxy-1-sbx", containers=("proxy", "seat"))
PROXY = ContainerRef(id="proxy", name="sl-proxy-1-proxy")


def _seat(**kw: Any) -> ContainerRef:
    base: dict[str, Any] = dict(id="seat", name="sl-proxy-1-seat-a", labels={LABEL: "sl-proxy-1", LABEL_ROLE: "seat"},
                                status="running", addresses={NET.name: "10.0.0.3"})
    return ContainerRef(**{**base, **kw})


def test_a_running_seat_of_ours_on_its_proxys_network_alone_fits() -> None:
    assert seats.unfit(_seat(), NET, PROXY) == ""


@pytest.mark.parametrize(("seat", "net", "why"), [
    (_seat(labels={LABEL_ROLE: "seat"}), NET, "not one of this lab's"),
    (_seat(labels={LABEL: "x", LABEL_ROLE: "sandbox"}), NET, "not one of this lab's"),
    (_seat(status="exited"), NET, "not running"),
    (_seat(status=""), NET, "not running"),
    (_seat(addresses={"sl-proxy-2-sbx": "10.0.1.3"}), NET, "not on sl-proxy-1-sbx alone"),
    (_seat(addresses={NET.name: "10.0.0.3", "bridge": "172.17.0.5"}), NET, "not on sl-proxy-1-sbx alone"),
    (_seat(addresses={}), NET, "not on sl-proxy-1-sbx alone"),
    (_seat(), NetworkRef(id="n1", name=NET.name, containers=("proxy", "seat", "stranger")), "besides its proxy"),
    (_seat(), NetworkRef(id="n1", name=NET.name, containers=("proxy",)), "besides its proxy"),
    (_seat(), NetworkRef(id="n1", name=NET.name, containers=("other-proxy", "seat")), "besides its proxy"),
])
def test_a_seat_that_is_not_exactly_the_bridge_the_sandbox_would_get_is_refused(seat: ContainerRef, net: NetworkRef,
                                                                                 why: str) -> None:
    assert why in seats.unfit(seat, net, PROXY)


class _Engine:
    def __init__(self, seat: Any) -> None:
        self.seat = seat

    def inspect(self, c: Any) -> ContainerRef:
        if isinstance(self.seat, BaseException):
            raise self.seat
        assert isinstance(self.seat, ContainerRef)
        return self.seat


def _proxy(seat: str, network: NetworkRef = NET) -> WarmProxy:
    return WarmProxy(PROXY, network, None, "10.0.0.2", None, seat=seat)  # type: ignore[arg-type]


def test_a_taken_seat_is_the_runs_to_remove_whether_or_not_its_sandbox_may_join_it() -> None:
    made = Resources()
    assert seats.take_seat(_Engine(_seat()), _proxy("seat"), made) == _seat()  # type: ignore[arg-type]
    assert [c.id for c in made.containers] == ["seat"]
    made = Resources()
    assert seats.take_seat(_Engine(_seat(status="exited")), _proxy("seat"), made) is None  # type: ignore[arg-type]
    assert [c.id for c in made.containers] == ["seat"], "unfit, and still removed with the run"
    made = Resources()
    assert seats.take_seat(_Engine(Missing("gone")), _proxy("seat"), made) is None  # type: ignore[arg-type]
    assert made.containers == [], "gone: nothing to remove"
    assert seats.take_seat(_Engine(_seat()), _proxy(""), Resources()) is None, "no seat listed"  # type: ignore[arg-type]


def test_a_seat_that_stopped_or_cannot_be_asked_after_the_run_is_said() -> None:
    assert seats.gone(_Engine(_seat()), _seat()) == ""  # type: ignore[arg-type]
    assert "stopped during the run" in seats.gone(_Engine(_seat(status="exited", exit_code=137)), _seat())  # type: ignore[arg-type]
    assert "could not be asked" in seats.gone(_Engine(Missing("gone")), _seat())  # type: ignore[arg-type]
