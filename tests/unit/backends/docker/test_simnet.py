"""``simnet.create_network`` against an engine whose address pools are full: a queue with a deadline, never a learner's error.

The engine here is a fake docker client whose ``networks.create`` raises the
SDK's own ``APIError`` with the engine's own words, as Docker 20.10 (and newer
engines) answer when every range of ``default-address-pools`` is in use. The
clock and the pauses are the test's, so a minute of waiting takes no time.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import docker
import pytest
import requests

from grader.backends.docker import proxies, simnet
from grader.backends.docker.engine import ContainerRef, DockerEngine, NetworkRef, NetworksExhausted, PoolsFull, Refused, engine_errors
from grader.backends.docker.simnet import POOL_WAIT, create_network
from grader.backends.files import HostFiles
from grader.core.errors import BackendError
from grader.protocol.common import POKE_SIGNAL

FULL_2010 = ("could not find an available, non-overlapping IPv4 address pool among the defaults to assign to the "
             "network")
FULL_NEWER = "all predefined address pools have been fully subnetted"


def _api_error(words: str, status: int = 404) -> docker.errors.APIError:
    """The SDK's error for the engine's answer; Docker 20.10 answers full pools with a 404 (the SDK's NotFound)."""
    res = requests.Response()
    res.status_code = status
    res.url = "http+docker://localhost/v1.41/networks/create"
    kind = docker.errors.NotFound if status == 404 else docker.errors.APIError
    return kind(f"{status} Client Error for {res.url}", response=res, explanation=words)


class _Networks:
    """``client.networks``: refuses with ``errors`` in turn, then makes the network."""

    def __init__(self, errors: list[BaseException]) -> None:
        self.errors = list(errors)
        self.asked = 0
        self.made: list[dict[str, Any]] = []  # what each network was made with

    def create(self, name: str, **kwargs: Any) -> Any:
        self.asked += 1
        if self.errors:
            raise self.errors.pop(0)
        self.made.append({"name": name, **kwargs})
        return _Network(name)


class _Network:
    """The SDK's Network as the engine adapter reads it into a NetworkRef."""

    def __init__(self, name: str) -> None:
        self.id, self.name, self.attrs = "n-" + name, name, {"Name": name}


class _Client:
    def __init__(self, errors: list[BaseException]) -> None:
        self.networks = _Networks(errors)


class _Clock:
    """A monotonic clock that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.pauses: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.pauses.append(seconds)
        self.now += seconds


@pytest.mark.parametrize("status", [404, 500])
@pytest.mark.parametrize("words", [FULL_2010, FULL_NEWER])
def test_the_engines_full_pools_answer_is_its_own_error(words: str, status: int) -> None:
    # Docker 20.10 says it with a 404, which the SDK raises as NotFound: not "the network is missing"
    with pytest.raises(PoolsFull) as info:
        with engine_errors():
            raise _api_error(words, status)
    assert isinstance(info.value, Refused)  # a caller that catches any refusal still catches it
    assert words in str(info.value)


def test_another_refusal_is_not_taken_for_full_pools() -> None:
    with pytest.raises(Refused) as info:
        with engine_errors():
            raise _api_error("network with name sl-x-inet already exists", 409)
    assert not isinstance(info.value, PoolsFull)


def test_full_pools_are_waited_for_and_the_network_is_made_when_one_comes_free() -> None:
    clock = _Clock()
    client = _Client([_api_error(FULL_2010)] * 5)
    got = create_network(DockerEngine(client), "sl-x-inet", {"k": "v"}, sleep=clock.sleep, clock=clock)
    assert got.name == "sl-x-inet" and client.networks.made[-1]["internal"] is True
    assert client.networks.asked == 6
    # backing off: each pause longer than the one before (jitter is at most a quarter either way)
    assert all(b > a for a, b in zip(clock.pauses, clock.pauses[1:])), clock.pauses
    assert clock.pauses[0] < 1.0 and max(clock.pauses) <= simnet.POOL_PAUSE_MAX * 1.25


def test_full_pools_for_the_whole_wait_fail_with_the_cause_and_the_fix() -> None:
    clock = _Clock()
    client = _Client([_api_error(FULL_2010)] * 10_000)
    with pytest.raises(NetworksExhausted) as info:
        create_network(DockerEngine(client), "sl-x-inet", {}, sleep=clock.sleep, clock=clock)
    waited = clock.now - 1000.0
    assert POOL_WAIT - 0.001 <= waited <= POOL_WAIT + 0.001  # the whole wait, and not a moment past it
    assert client.networks.asked > 10  # it kept asking, not once at the end
    message = str(info.value)
    assert "no address range left for another network" in message
    assert "default-address-pools" in message and "scripts/ensure-docker" in message
    assert "60 s" in message
    # a backend error of its own, not an engine error: `engine_errors(what)` passes it through unchanged,
    # instead of telling the learner to check that the engine answers (it does)
    assert isinstance(info.value, BackendError) and not isinstance(info.value, Refused)
    with pytest.raises(NetworksExhausted):
        with engine_errors("run sl-x"):
            raise info.value


def test_no_patience_fails_at_the_first_full_answer() -> None:
    clock = _Clock()
    client = _Client([_api_error(FULL_NEWER)])
    with pytest.raises(NetworksExhausted):
        create_network(DockerEngine(client), "sl-x-inet", {}, patience=0.0, sleep=clock.sleep, clock=clock)
    assert client.networks.asked == 1 and clock.pauses == []


def test_a_subnet_conflict_is_asked_again_a_few_times_then_raised() -> None:
    clock = _Clock()
    conflict = _api_error("Pool overlaps with other one on this address space")
    assert isinstance(create_network(DockerEngine(_Client([conflict] * 3)), "n", {}, sleep=clock.sleep, clock=clock), NetworkRef)
    with pytest.raises(Refused):
        create_network(DockerEngine(_Client([conflict] * 4)), "n", {}, sleep=clock.sleep, clock=clock)


def test_any_other_refusal_is_raised_at_once() -> None:
    clock = _Clock()
    client = _Client([_api_error("invalid network driver", 400)])
    with pytest.raises(Refused):
        create_network(DockerEngine(client), "n", {}, sleep=clock.sleep, clock=clock)
    assert client.networks.asked == 1 and clock.pauses == []


# --- a proxy given back after its run ------------------------------------------------------


class _Proxy:
    """A warm proxy's container: its service beats only when poked (its own interval is longer than the test),
    or never, as a hung one."""

    def __init__(self, out: Any, answers: bool) -> None:
        self.out, self.answers, self.status, self.signals = out, answers, "running", []

    def kill(self, signal: str) -> None:
        self.signals.append(signal)
        if self.answers:
            self.out.write("heartbeat", repr(time.time()).encode())

    def reload(self) -> None:
        pass


class _ProxyClient:
    """The SDK's client as the engine adapter reaches the proxy's container: its inspect (running) and its kill."""

    def __init__(self, proxy: _Proxy) -> None:
        self.proxy = proxy
        self.api = self.containers = self

    def get(self, ident: str) -> Any:
        class Running:
            id, name, attrs = ident, "sl-proxy-1-proxy", {"State": {"Status": self.proxy.status}}

        return Running()

    def kill(self, ident: str, signal: str | None = None) -> None:
        self.proxy.kill(signal=str(signal))


class _Gone:
    def __init__(self) -> None:
        self.removed: list[Any] = []

    def remove(self, thing: Any) -> None:
        self.removed.append(thing)


@pytest.mark.parametrize("answers", [True, False])
def test_a_proxy_given_back_is_asked_for_a_self_check_and_kept_only_if_it_answers(tmp_path: Any, answers: bool) -> None:
    """Its heartbeat may be an interval old when its run ends: the pool pokes it, keeps it when a fresh beat comes,
    and removes it when none does (a hung proxy never serves another run)."""
    (tmp_path / "out").mkdir()
    workdir = HostFiles(tmp_path)
    out = workdir.sub("out")
    out.write("heartbeat", b"")
    os.utime(tmp_path / "out" / "heartbeat", (time.time() - 30, time.time() - 30))  # its last beat, long ago
    container = _Proxy(out, answers)
    gone = _Gone()
    pool = proxies.ProxyPool(DockerEngine(_ProxyClient(container)), "services", None, gone)  # type: ignore[arg-type]
    w = proxies.WarmProxy(container=ContainerRef("c1", "sl-proxy-1-proxy"), network=NetworkRef("n1", "net"), workdir=workdir,
                         ip="10.0.0.2", internet=None)  # type: ignore[arg-type]
    assert pool.give_back(w) is answers
    assert container.signals == [POKE_SIGNAL.name]
    assert (gone.removed == []) is answers, "a proxy that did not answer is removed with its network"


def test_a_container_whose_pid_was_reused_by_another_process_is_swept_its_makers_kept() -> None:
    """The labels carry the maker's start time beside its pid: a pid the kernel handed to a new process no longer
    shields a dead grader's containers from cleanup, and a live grader's are kept."""
    from grader.backends.cleanup import Scope
    from grader.backends.docker.backend import sweep
    from grader.backends.docker.simnet import LABEL, LABEL_STARTED, Leftovers

    mine = Leftovers(None).labels("sl-mine")  # as this process labels what it makes
    assert mine[LABEL_STARTED] and int(mine[LABEL_STARTED]) > 0
    reused = {**mine, LABEL: "sl-reused", LABEL_STARTED: str(int(mine[LABEL_STARTED]) + 1)}
    older = {k: v for k, v in {**mine, LABEL: "sl-older"}.items() if k != LABEL_STARTED}

    class Engine:
        removed: list[str] = []

        def containers(self, filters: object) -> list[_Thing]:
            return [_Thing(f"id-{labels[LABEL]}", labels[LABEL], labels) for labels in (mine, reused, older)]

        def remove_container(self, c: str) -> None:
            self.removed.append(c)

        def networks(self, filters: object) -> list[_Thing]:
            return []

        def remove_network(self, n: str) -> None:
            raise AssertionError(n)

    eng = Engine()
    assert sweep(Scope(engine=eng)) == ["container sl-reused"]  # type: ignore[arg-type]
    assert eng.removed == ["id-sl-reused"]


def test_a_dead_makers_container_whose_removal_is_under_way_is_said_gone_one_already_gone_is_not() -> None:
    """A keeper killed while it removed one of its proxies leaves the engine finishing that removal: the sweep's own
    removal is refused as "already in progress", and the container goes all the same; it is what cleanup found and
    what went, so it is said. One that was gone before the sweep reached it is not."""
    from grader.backends.cleanup import Scope
    from grader.backends.docker.backend import sweep
    from grader.backends.docker.engine import BeingRemoved, Missing
    from grader.backends.docker.simnet import LABEL, LABEL_STARTED, Leftovers

    mine = Leftovers(None).labels("sl-x")
    dead = {**mine, LABEL_STARTED: str(int(mine[LABEL_STARTED]) + 1)}  # this pid, another start: its maker is gone

    class Engine:
        def containers(self, filters: object) -> list[_Thing]:
            return [_Thing(f"id-{n}", n, {**dead, LABEL: n}) for n in ("sl-going", "sl-gone", "sl-here")]

        def remove_container(self, c: str) -> None:
            if c == "id-sl-going":
                raise BeingRemoved("409 Conflict", "removal of container sl-going is already in progress")
            if c == "id-sl-gone":
                raise Missing("404 Not Found", "No such container: sl-gone")

        def networks(self, filters: object) -> list[_Thing]:
            return []

        def remove_network(self, n: str) -> None:
            raise AssertionError(n)

    assert sweep(Scope(engine=Engine())) == ["container sl-going", "container sl-here"]  # type: ignore[arg-type]


@dataclass(frozen=True)
class _Thing:
    """A container as a sweep lists it (``cleanup.Labelled``)."""

    id: str
    name: str
    labels: dict[str, str]


def test_a_network_refused_while_its_container_is_torn_down_is_asked_once_more(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dead grader's internet: the sweep removes its container, then its network, which the engine refuses while
    the container's endpoint is still being torn down (a CI run left it so). Asked once more a moment later, it
    goes; a network still in use after that stays for the next sweep."""
    from grader.backends import cleanup as cleaning
    from grader.backends.docker import backend as backend_module
    from grader.backends.docker.engine import Refused
    from grader.backends.docker.simnet import LABEL, LABEL_STARTED, Leftovers

    monkeypatch.setattr(backend_module, "NETWORK_SETTLE_S", 0.0)
    mine = Leftovers(None).labels("sl-x")
    dead = {**mine, LABEL_STARTED: str(int(mine[LABEL_STARTED]) + 1)}  # this pid, another start: its maker is gone

    class Engine:
        asked: list[str] = []

        def containers(self, filters: object) -> list[_Thing]:
            return [_Thing("id-sl-inet", "sl-inet", {**dead, LABEL: "sl-inet"})]

        def remove_container(self, c: str) -> None:
            pass

        def networks(self, filters: object) -> list[_Thing]:
            return [_Thing(f"id-{n}", n, {**dead, LABEL: n}) for n in ("sl-settling", "sl-in-use")]

        def remove_network(self, n: str) -> None:
            self.asked.append(n)
            if n == "id-sl-in-use" or self.asked.count(n) == 1:
                raise Refused("403 Forbidden", f"error while removing network: network {n} has active endpoints")

    eng = Engine()
    assert backend_module.sweep(cleaning.Scope(engine=eng)) == [  # type: ignore[arg-type]
        "container sl-inet", "network sl-settling"]
    assert eng.asked == ["id-sl-settling", "id-sl-in-use", "id-sl-settling", "id-sl-in-use"]


@pytest.mark.parametrize("poked", [False, True])
def test_an_internet_asked_whether_it_answered_after_a_run_is_poked_once(tmp_path: Any, poked: bool) -> None:
    """The run pokes its recorders as soon as its sandbox finished (``Run._poke``, while it reads the output) and
    then asks with ``poked=True``: no second poke, and the answer still rests on a beat after the run finished.
    A caller that did not poke gets the poke from ``problem``."""
    (tmp_path / "out").mkdir()
    out = HostFiles(tmp_path).sub("out")
    finished = time.time() - 0.5  # a file's mtime is the kernel's coarse clock: a beat written now is later than this
    container = _Proxy(out, answers=True)
    engine = DockerEngine(_ProxyClient(container))  # type: ignore[arg-type]
    net = simnet.Internet(engine=engine, container=ContainerRef("c1", "sl-internet"), network=NetworkRef("n1", "net"),
                          ip="10.0.0.1", out=out, world=None)  # type: ignore[arg-type]
    if poked:
        container.kill(signal=POKE_SIGNAL.name)  # what the run's own poke does: a beat after ``finished``
    assert net.problem(answered_after=finished, poked=poked) == ""
    assert container.signals == [POKE_SIGNAL.name], "one poke, the run's or the check's own"
    os.utime(tmp_path / "out" / "heartbeat", (finished - 5, finished - 5))  # no beat since the run finished
    container.answers = False
    assert "stopped answering" in net.problem(answered_after=finished, poked=True), "a beat before the run is none"
