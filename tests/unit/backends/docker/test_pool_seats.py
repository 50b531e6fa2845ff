"""A backend's own pool seats its proxies (``seats.PoolSeats``), and a seat serves another run only when the last one
left its network namespace quiet (``seats.quiet``). No Docker: the namespace's socket tables are files written here,
in the kernel's format, and the engine is a description.

Builds that would pass a weaker test, and why these fail them:

* one that trusts any namespace (``quiet`` always empty): an open connection to the proxy, one still closing with
  data unsent (FIN_WAIT1, LAST_ACK, CLOSING), a connecting one, a UDP, raw, packet or Unix socket each give a reason;
* one that counts the engine's resolver or a finished connection as open (never reusing a seat: the speed lost):
  a fresh seat's own tables and TIME_WAIT, FIN_WAIT2 and CLOSE rows are quiet;
* one that reads whatever process the engine names: a pid whose cgroup does not name the seat is refused;
* a pool that keeps a seat without asking, or asks only once: ``give_back`` asks before every next run, and a
  noisy seat is removed and replaced.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import pytest

from grader.backends.docker import seats
from grader.backends.docker.engine import ContainerRef, EngineError, NetworkRef
from grader.backends.docker.proxies import ProxyPool, WarmProxy
from grader.backends.docker.simnet import LABEL, LABEL_ROLE, Leftovers
from grader.backends.files import host_files

HEAD = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
HEAD6 = "  sl  local_address                         remote_address                        st tx_queue rx_queue\n"
# what a new seat's namespace holds, as read on this machine: the engine's resolver on 127.0.0.11, TCP and UDP
RESOLVER_TCP = "   0: 0B00007F:91DD 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 54199108 1\n"
RESOLVER_UDP = " 2878: 0B00007F:CF9D 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 54199107 2\n"
SANDBOX, PROXY = "030012AC", "020012AC"  # 172.18.0.3 (the seat's address) and 172.18.0.2 (its proxy), kernel order


def _tcp(state: str, local: str = f"{SANDBOX}:A1B2", remote: str = f"{PROXY}:0C38") -> str:
    return f"   1: {local} {remote} {state} 00000000:00000000 00:00000000 00000000  1000        0 5550 1\n"


def _tables(tmp_path: Path, **extra: str) -> Path:
    net = tmp_path / "net"
    net.mkdir(parents=True)
    tables = {"tcp": HEAD + RESOLVER_TCP, "tcp6": HEAD6, "udp": HEAD + RESOLVER_UDP, "udp6": HEAD6, "raw": HEAD,
              "raw6": HEAD6, "unix": "Num       RefCount Protocol Flags    Type St Inode Path\n",
              "packet": "sk               RefCnt Type Proto  Iface R Rmem   User   Inode\n", "udplite": HEAD}
    for name, text in tables.items():
        (net / name).write_text(text + extra.get(name, ""))
    return net


def test_a_new_seats_namespace_is_quiet(tmp_path: Path) -> None:
    assert seats.open_sockets(_tables(tmp_path)) == ""


@pytest.mark.parametrize("state", ["05", "06", "07"])  # FIN_WAIT2, TIME_WAIT, CLOSE: everything sent was acknowledged
def test_a_finished_connection_to_the_proxy_is_quiet(tmp_path: Path, state: str) -> None:
    assert seats.open_sockets(_tables(tmp_path, tcp=_tcp(state))) == ""


def test_a_missing_table_is_no_socket(tmp_path: Path) -> None:
    net = _tables(tmp_path)
    (net / "tcp6").unlink()  # a kernel without IPv6
    assert seats.open_sockets(net) == ""


@pytest.mark.parametrize(("table", "row"), [
    ("tcp", _tcp("01")),  # ESTABLISHED
    ("tcp", _tcp("02")),  # SYN_SENT
    ("tcp", _tcp("04")),  # FIN_WAIT1: data or its FIN still unacknowledged
    ("tcp", _tcp("08")),  # CLOSE_WAIT
    ("tcp", _tcp("09")),  # LAST_ACK
    ("tcp", _tcp("0B")),  # CLOSING
    ("tcp", _tcp("0A", remote="00000000:0000")),  # listening on the seat's own address
    ("tcp6", f"   0: {'0' * 24}{SANDBOX}:A1B2 {'0' * 20}FFFF0000{PROXY}:0C38 01 00000000:00000000 00 0 0 0 1\n"),
    ("udp", f"   5: {SANDBOX}:A1B2 {PROXY}:0035 01 00000000:00000000 00:00000000 00000000  1000        0 5551 2\n"),
    ("raw", f"   1: {SANDBOX}:0001 {PROXY}:0000 07 00000000:00000000 00:00000000 00000000  0        0 5552 2\n"),
    ("packet", "0000000000000000 3      3      0003   2     1 0      0      5553\n"),
    ("unix", "0000000000000000: 00000002 00000000 00010000 0001 01 5554 @hidden\n"),
])
def test_a_socket_that_may_still_carry_a_run_to_its_proxy_is_not_quiet(tmp_path: Path, table: str, row: str) -> None:
    left = seats.open_sockets(_tables(tmp_path, **{table: row}))
    assert left.startswith(f"{table}: "), left


def test_loopback_alone_is_harmless(tmp_path: Path) -> None:
    both = _tcp("01", local="0100007F:1F90", remote="0100007F:A1B2")
    six = f"   0: {'0' * 24}01000000:1F90 {'0' * 24}01000000:A1B2 01 00000000:00000000 00 0 0 0 1\n"
    assert seats.open_sockets(_tables(tmp_path, tcp=both, tcp6=six)) == ""
    assert seats.open_sockets(_tables(tmp_path / "x", tcp=_tcp("01", local="0100007F:1F90"))) != "", "to the proxy"


class _Engine:
    def __init__(self, pid: Any) -> None:
        self._pid = pid

    def pid(self, c: ContainerRef) -> int:
        if isinstance(self._pid, BaseException):
            raise self._pid
        return int(self._pid)


SEAT_ID = "5" * 64


def test_quiet_reads_only_the_seats_own_process() -> None:
    assert "cannot be read" in seats.quiet(_Engine(1), "short")  # type: ignore[arg-type]
    assert "does not run" in seats.quiet(_Engine(0), SEAT_ID)  # type: ignore[arg-type]
    assert "could not be asked" in seats.quiet(_Engine(EngineError("away")), SEAT_ID)  # type: ignore[arg-type]
    # a live process that is not the seat (this one: its cgroup names no such container) is never read
    assert "not its process" in seats.quiet(_Engine(os.getpid()), SEAT_ID)  # type: ignore[arg-type]


# --- the pool's seats ----------------------------------------------------------------------------------------------


def _proxy(tmp_path: Path, seat: str = "seat-1") -> WarmProxy:
    (tmp_path / "proxy" / "out").mkdir(parents=True)
    return WarmProxy(ContainerRef("proxy", "sl-proxy-1-proxy"), NetworkRef("n1", "sl-proxy-1-sbx"), host_files(tmp_path / "proxy"),
                     "10.0.0.2", None, seat=seat, seat_name=f"sl-proxy-1-{seat}" if seat else "")  # type: ignore[arg-type]


class _Removed(Leftovers):
    def __init__(self) -> None:
        super().__init__()
        self.removed: list[str] = []

    def remove(self, thing: Any) -> None:
        self.removed.append(thing.id)


def test_pool_seats_keep_a_quiet_seat_and_replace_a_noisy_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []

    def new_seat(engine: object, image: str, network: NetworkRef, labels_for: object) -> Optional[ContainerRef]:
        made.append(network.name)
        return ContainerRef(f"seat-{len(made) + 1}", f"sl-proxy-1-seat-{len(made) + 1}")

    monkeypatch.setattr(seats, "_new_seat", new_seat)
    leftovers = _Removed()
    pool_seats = seats.PoolSeats(object(), "services", leftovers)  # type: ignore[arg-type]
    w = _proxy(tmp_path)
    asked: list[str] = []
    noise = {"seat-1": ""}
    monkeypatch.setattr(seats, "quiet", lambda engine, seat: asked.append(seat) or noise.get(seat, "tcp: open"))
    pool_seats.reseat(w)
    assert (w.seat, made, leftovers.removed) == ("seat-1", [], []), "a quiet seat stays"
    noise["seat-1"] = "tcp: 1: ... 01"
    pool_seats.reseat(w)
    assert asked == ["seat-1", "seat-1"], "asked before every next run"
    assert leftovers.removed == ["seat-1"] and made == ["sl-proxy-1-sbx"] and (w.seat, w.seat_name) == ("seat-2", "sl-proxy-1-seat-2")
    w.seat = ""
    pool_seats.reseat(w)
    assert w.seat == "seat-3", "a proxy whose seat could not be made gets one when it is given back"


def test_pool_seats_hand_a_run_only_a_seat_that_fits(tmp_path: Path) -> None:
    seat = ContainerRef("seat-1", "sl-proxy-1-seat-1", {LABEL: "sl-proxy-1", LABEL_ROLE: "seat"}, status="running",
                        addresses={"sl-proxy-1-sbx": "10.0.0.3"})

    class Engine:
        def __init__(self, network: NetworkRef) -> None:
            self.net = network

        def inspect(self, c: str) -> ContainerRef:
            return seat

        def network(self, n: NetworkRef) -> NetworkRef:
            return self.net

    fits = NetworkRef("n1", "sl-proxy-1-sbx", containers=("proxy", "seat-1"))
    crowded = NetworkRef("n1", "sl-proxy-1-sbx", containers=("proxy", "seat-1", "stranger"))
    w = _proxy(tmp_path)
    assert seats.PoolSeats(Engine(fits), "services", Leftovers()).fit(w) == seat  # type: ignore[arg-type]
    assert seats.PoolSeats(Engine(crowded), "services", Leftovers()).fit(w) is None  # type: ignore[arg-type]
    w.seat = ""
    assert seats.PoolSeats(Engine(fits), "services", Leftovers()).fit(w) is None  # type: ignore[arg-type]


class _Seating:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def seat(self, w: WarmProxy) -> None:
        self.calls.append(("seat", w.network.name))
        w.seat, w.seat_name = "seat-9", "sl-proxy-1-seat-9"

    def fit(self, w: WarmProxy) -> Optional[ContainerRef]:
        return ContainerRef(w.seat, w.seat_name)

    def reseat(self, w: WarmProxy) -> None:
        self.calls.append(("reseat", w.workdir.read("policy.json", limit=1000).decode() if w.workdir.stat("policy.json") else ""))


def test_a_pool_seats_what_it_builds_asks_before_each_next_run_and_stands_its_seats(tmp_path: Path,
                                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from grader.backends.docker import proxies

    seating = _Seating()
    pool = ProxyPool(object(), "services", None, _Removed(), seating=seating)  # type: ignore[arg-type]
    w = _proxy(tmp_path)
    monkeypatch.setattr(proxies, "build_proxy", lambda *a, **k: w)
    assert pool._build(None) is w and seating.calls == [("seat", "sl-proxy-1-sbx")]  # type: ignore[arg-type]
    monkeypatch.setattr(proxies, "running", lambda engine, c: True)
    monkeypatch.setattr(proxies, "poke", lambda engine, c: None)
    monkeypatch.setattr(proxies, "beat_after", lambda out, after, timeout: True)
    w.hand_over(["example.org"], [])
    assert pool.give_back(w)
    assert seating.calls[-1][0] == "reseat" and "example.org" in seating.calls[-1][1], "asked while the run's lists stood"
    assert "sl-proxy-1-seat-9" in pool.standing()
    assert pool.seat_of(w) == ContainerRef("seat-9", "sl-proxy-1-seat-9")


def test_a_removed_proxy_takes_its_seat_before_its_network(tmp_path: Path) -> None:
    leftovers = _Removed()
    _proxy(tmp_path).remove(leftovers)
    assert leftovers.removed == ["seat-1", "proxy", "n1"]


def test_a_backend_whose_sandboxes_run_under_another_runtime_seats_no_proxy() -> None:
    """A gVisor sandbox never joins a seat (``run.Run``): its pool would only hold idle containers."""
    from grader.backends.docker.backend import sharing_for
    from grader.backends.docker.enginedisk import HostDisk

    seated = sharing_for(object(), "services", Leftovers(), HostDisk(), 0.0)  # type: ignore[arg-type]
    plain = sharing_for(object(), "services", Leftovers(), HostDisk(), 0.0, seated=False)  # type: ignore[arg-type]
    assert isinstance(seated.pool._seating, seats.PoolSeats)  # type: ignore[attr-defined]
    assert plain.pool._seating is None  # type: ignore[attr-defined]


def test_a_hub_keeper_relists_a_proxy_with_its_used_seat_only_while_it_is_quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []
    monkeypatch.setattr(seats, "seat_for", lambda engine, image, network, labels_for: made.append(network.id) or "new")
    noise = {"used": ""}
    monkeypatch.setattr(seats, "quiet", lambda engine, seat: noise[seat])
    net = NetworkRef("n1", "sl-proxy-1-sbx", containers=("proxy", "used"))
    leftovers = _Removed()

    def relisted(network: NetworkRef, used: str) -> str:
        return seats.relisted_seat(object(), "services", network, lambda n: {}, leftovers, used)  # type: ignore[arg-type]

    assert relisted(net, "used") == "used" and made == [] and leftovers.removed == [], "quiet: kept"
    noise["used"] = "tcp: 1: ... 01"
    assert relisted(net, "used") == "new" and leftovers.removed == ["used"], "noisy: removed, a new one"
    assert relisted(NetworkRef("n1", "sl-proxy-1-sbx", containers=("proxy",)), "used") == "new", "gone from its network"
    assert relisted(net, "") == "new", "none used (the sandbox sat on the bridge): a new one"
    assert made == ["n1", "n1", "n1"]
