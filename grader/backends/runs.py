"""What every real backend does around a run: its directory, owner record, host listener, runner config, retries, cleanup.

The Docker and srt backends differ in how they start a sandbox, not in what a
run is. Each run gets a private directory under ``runs_root()`` holding a copy
of the world with fresh canaries (``RunDir``) and an owner record
(``owner.json``: the grader's pid), so ``cleanup`` can tell a dead grader's
leftovers from a live one's; a listener on the real host catches a sandbox
that reaches it (``HostListener``); the probe runner is told the same things
in the same shape (``runner_config``); the evidence is gathered the same way
(``gather_evidence``); a run whose infrastructure (not its sandbox) failed is
tried once more (``run_with_retries``); and each backend's leftovers are swept
by one ``cleanup``. Both backends use this module; neither imports the other.

Who may touch a run's files: its directory is the grader's user's alone (``private_root``,
``make_run_dir``); the world copy inside is handed to the sandbox's user when
this process may (root), and otherwise stays the grader's, with the world's
modes, for the Docker backend to send to the engine with the right owner
(``RunDir.handed``). Nothing is ever opened to every local user.

What a killed grader or an engine restart leaves is swept when the next run
starts (``sweep_soon``): at most once a minute per runs root, in the
background, and only what a dead process of this machine and pid namespace
owned (``namespace``); never a live grader's, never a hub's while its keeper lives.

Imports: access, errors, evidence, execution, next_session, outcomes, plan, probes, scope, and the standard library.
Never ``docker``: the srt backend must work where the docker SDK is missing.
Nothing downstream.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import os
import secrets
import selectors
import shutil
import socket
import stat
import struct
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence

from grader.core.access import Network
from grader.core.errors import BackendError, InfrastructureError
from grader.core.evidence import MAX_LOG_LINES, Evidence, Markers, parse_lines, parse_runner_output, sha256
from grader.services.wire import DnsRecord, HttpRecord, ProxyRecord, RunnerRecord, TcpRecord, WireError, parse_log, parse_orders
from grader.core.execution import signature
from grader.core.outcomes import RunResult
from grader.core.next_session import SETTINGS
from grader.core.plan import RunPlan
from grader.core.probes import OrderContext, orders_for
from grader.core.scope import new_file, scanned_dirs
from grader.core.world import World

__all__ = [
    "CLEANERS",
    "MAX_OUTPUT",
    "SWEEP_ENV",
    "SWEEP_EVERY",
    "SWEEP_STAMP",
    "HostListener",
    "Listening",
    "Owner",
    "RunDir",
    "Scope",
    "SigningAgent",
    "cleanup",
    "gather_evidence",
    "make_run_dir",
    "namespace",
    "pid_alive",
    "private_root",
    "read_owner",
    "read_runner_output",
    "read_sinks",
    "read_text",
    "run_with_retries",
    "runner_config",
    "runs_root",
    "sandbox_addresses",
    "sweep_soon",
    "swept",
    "world_ports",
    "write_owner",
]

OWNER = "owner.json"
MAX_OUTPUT = 8 * 1024 * 1024  # the most read back of anything a run wrote: a hostile run cannot fill memory

# Every real backend's part of ``cleanup``, in the order it runs: each module
# named here has ``sweep(scope) -> list[str]``. A table rather than a
# registration at import time, because cleanup must find every backend's
# leftovers in a process that never imported that backend (the CLI, after a
# killed grader). Engine objects go first (they hold mounts of run directories),
# host processes next, the run directories themselves last (``cleanup``).
CLEANERS = ("docker.backend", "srt")


# --- the run directory and its owner -------------------------------------------------


def runs_root() -> Path:
    """Where run directories live (``SANDBOX_LAB_RUNS`` overrides); ``cleanup`` looks here for leftovers.

    One per user by default (root keeps the old name): a directory another
    user made could not be ours to keep private (``private_root``).
    """
    chosen = os.environ.get("SANDBOX_LAB_RUNS")
    if chosen:
        return Path(chosen)
    euid = os.geteuid()
    return Path(tempfile.gettempdir()) / ("sandbox-lab-runs" if euid == 0 else f"sandbox-lab-runs-{euid}")


def _root_mode() -> int:
    # Root hands a run's world to the sandbox's user, and srt runs as that user: it must pass
    # through the root to the run directory it was given (never list it). Anyone else: nobody.
    return 0o711 if os.geteuid() == 0 else 0o700


def private_root() -> Path:
    """``runs_root()``, made if missing, once it is shown to be this user's alone; else a ``BackendError``.

    Run directories hold the world copy with its canaries and, for a job, the
    signing agent's socket. Whoever can rename entries of the root (its owner,
    or anyone who may write its parent without a sticky bit) could swap a run's
    directory for their own and read or change the world: so the root must be a
    real directory of this user, that nobody else can write, in a parent that
    nobody else can rearrange. An older, laxer mode of our own root is tightened.
    """
    root = runs_root()
    euid = os.geteuid()
    fix = "set SANDBOX_LAB_RUNS to a directory of your own (e.g. ~/.cache/sandbox-lab-runs) and rerun"
    try:
        root.mkdir(parents=True, exist_ok=True, mode=_root_mode())
        st = os.lstat(root)
        parent = os.stat(root.parent)
    except OSError as exc:
        raise BackendError(f"cannot make the runs directory {root} ({exc.strerror}): {fix}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise BackendError(f"the runs directory {root} is not a directory (a link, or a file): {fix}")
    if st.st_uid != euid:
        raise BackendError(
            f"the runs directory {root} belongs to uid {st.st_uid}, not to this user (uid {euid}): "
            f"its owner could read and change every run's world. Remove it, or {fix}"
        )
    # a group-writable parent of the user's own group (user-private groups, umask 002) is theirs alone
    others_write = parent.st_mode & 0o002 or (parent.st_mode & 0o020 and parent.st_gid != os.getegid())
    if parent.st_uid not in (0, euid) or (others_write and not parent.st_mode & stat.S_ISVTX):
        raise BackendError(
            f"{root.parent} lets another user replace {root.name} (it is theirs, or others may write it "
            f"without a sticky bit): {fix}"
        )
    if stat.S_IMODE(st.st_mode) != _root_mode():
        os.chmod(root, _root_mode())
    return root


@dataclass(frozen=True)
class Owner:
    """Who made a run directory: the grader process, the run's name, and where that pid means something.

    ``ns`` is ``namespace()`` of the maker (None in a record older than it): a
    pid is judged alive or dead only in the machine and pid namespace it came from.
    """

    pid: int
    run: str
    ns: Optional[str] = None


def namespace() -> str:
    """This machine's boot and this process's pid namespace, as one string: where a pid names this process.

    Two graders in different containers (or on different machines sharing one
    Docker engine) each see the other's pids as dead; a pid is only evidence
    where it came from. "" where there is no /proc to ask.
    """
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        ns = os.stat("/proc/self/ns/pid")
    except OSError:
        return ""
    return f"{boot}/{ns.st_dev}:{ns.st_ino}"


def make_run_dir(name: str) -> Path:
    """A new directory ``runs_root()/name`` with its owner record; the only place an owner record is written.

    The record names this process, so ``cleanup`` removes the directory once
    this process is gone, and never while it lives. The directory is the
    grader's user's alone (0700, whatever the umask): a Docker sandbox reaches
    what it is given through its mounts, never through this directory.
    """
    root = private_root()
    path = root / name
    path.mkdir(mode=0o700)  # exists already: a name collision, never reuse another run's directory
    os.chmod(path, 0o700)
    write_owner(path, os.getpid())
    return path


def write_owner(directory: Path, pid: int) -> None:
    """Record ``pid`` as the owner of ``directory``: ``cleanup`` removes it once that process is gone.

    A shared internet's directory names its keeper, which outlives the grader that made it.
    """
    # json.dumps' own spacing, as before: tests look for '"pid": N,' in the text
    (directory / OWNER).write_text(json.dumps({"pid": pid, "run": directory.name, "ns": namespace()}))


def read_owner(directory: Path) -> Optional[Owner]:
    """The owner record of a run directory; None when it is missing or unreadable."""
    try:
        raw = json.loads((directory / OWNER).read_text())
        ns = raw.get("ns")
        return Owner(int(raw["pid"]), str(raw["run"]), None if ns is None else str(ns))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def pid_alive(pid: int) -> bool:
    """True while a process ``pid`` exists (also one we may not signal), and is not a zombie.

    A killed process whose parent has not reaped it yet (an init that reaps
    slowly, a grader that started it) is gone for every purpose of ours.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return not stat[stat.rindex(")") + 2:].startswith(("Z", "X"))
    except (OSError, ValueError):
        return True  # no /proc to ask: it exists


def read_text(path: Path, limit: int = MAX_OUTPUT) -> str:
    """At most ``limit`` bytes of a file a run wrote, as text; "" when there is none."""
    if not path.is_file():
        return ""
    with path.open("rb") as fh:
        return fh.read(limit).decode("utf-8", "replace")


@dataclass
class RunDir:
    """The run's private directory: the world copy, masks, and what the services write."""

    path: Path
    canaries: dict[str, str] = field(default_factory=dict)
    # The world copy belongs to the sandbox's user (``lay_out`` could give it); else it is the
    # grader's, private, and must reach the sandbox some other way (``enginedisk``'s volume copy).
    handed: bool = False
    uid: int = -1  # the sandbox's user (the world's), once laid out

    @classmethod
    def create(cls, run_id: str, engine: Any = None) -> "RunDir":
        """A new run's directory. Every run start also sweeps what dead graders left (``sweep_soon``),
        with ``engine`` (the backend's Docker client) for their containers and networks."""
        sweep_soon(engine)
        return cls(make_run_dir(run_id))

    @property
    def world(self) -> Path:
        return self.path / "world"

    def host_path(self, world_path: str) -> Path:
        return self.world / world_path.lstrip("/")

    def lay_out(self, plan: RunPlan) -> dict[str, str]:
        """Write the world with fresh canaries; return each file's sha256 before the run."""
        w = plan.world
        for d in w.directories():
            self.host_path(d).mkdir(parents=True, exist_ok=True)
        for f in w.files:
            self.canaries[f.path] = secrets.token_hex(16)
            p = self.host_path(f.path)
            p.write_text(f.content.replace("{canary}", self.canaries[f.path]), encoding="utf-8")
            p.chmod(f.mode)
        for m in plan.mounts:
            if m.precreate:
                self.host_path(m.source).touch()
        (self.path / "mask").mkdir()
        (self.path / "mask" / "empty").touch(mode=0o444)
        self.uid = plan.world.uid
        self.handed = _hand_over(self.path, self.world, self.uid)
        return {wp: sha256(self.host_path(wp).read_bytes()) for wp in self._judged_paths(plan)}

    def _judged_paths(self, plan: RunPlan) -> list[str]:
        return [p for p in _watched(plan) if self.host_path(p).is_file()]

    def read_text(self, rel: str) -> str:
        return read_text(self.path / rel)

    def snapshot(self, plan: RunPlan) -> dict[str, bytes]:
        """Each judged file of the world copy after the run. The sandbox may have replaced a directory
        with a symbolic link: a path whose real location is outside the world copy is never read
        (it would be a file of the host), and a file is opened without following a final link."""
        out = {}
        world = os.path.realpath(self.world) + os.sep
        for wp in _watched(plan):
            p = self.host_path(wp)
            if not os.path.realpath(p).startswith(world) or p.is_symlink() or not p.is_file():
                continue
            try:
                fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue
            with os.fdopen(fd, "rb") as fh:
                out[wp] = fh.read(65536)
        return out


def _hand_over(run: Path, world: Path, uid: int) -> bool:
    """Give the world copy to the sandbox's user ``uid`` if this process may; True once it is theirs.

    Root chowns it, and lets that user's group (only) pass through the run
    directory: srt runs as that user and opens its world copy by path. A grader
    running as that very user has nothing to do. Anyone else keeps it, private
    and with the world's modes: the Docker backend sends it to the engine with
    the sandbox's owner. It is never opened to every local user (it used to be
    made world-readable and writable, so any local user could read the canaries
    or change a run's world, and with it the verdicts).
    """
    euid = os.geteuid()
    if euid == uid:
        return True
    if euid != 0:
        return False
    for p in [world, *world.rglob("*")]:
        os.lchown(p, uid, uid)
    os.chown(run, 0, uid)
    os.chmod(run, 0o710)
    return True


def _watched(plan: RunPlan) -> list[str]:
    """Every world path judged before and after a run: each file, each output, and the scope
    scan's new file in each directory (absent before, so present after means it was created)."""
    w = plan.world
    return [f.path for f in w.files] + [o.path for o in w.outputs] + [new_file(d) for d in scanned_dirs(w)]


# --- the host listener -------------------------------------------------------------


class _Server:
    """Listening sockets served by a daemon thread, one connection at a time, until ``close``.

    ``_handle`` answers one accepted connection; an error in it never stops the server.
    """

    def __init__(self, socks: Sequence[socket.socket], timeout: float) -> None:
        self.socks = list(socks)
        self._timeout = timeout
        self._stop = threading.Event()
        self._selector = selectors.DefaultSelector()
        for sock in self.socks:
            sock.setblocking(False)
            self._selector.register(sock, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _handle(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                ready = self._selector.select(timeout=0.2)
            except OSError:
                return  # closed under us
            for key, _ in ready:
                try:
                    conn, _ = key.fileobj.accept()  # type: ignore[union-attr]
                except OSError:  # another thread's close, or a peer that went: nothing to answer
                    continue
                if self._stop.is_set():
                    conn.close()
                    return
                with conn:
                    conn.settimeout(self._timeout)
                    try:
                        self._handle(conn)
                    except OSError:
                        pass

    def close(self) -> None:
        self._stop.set()
        for sock in self.socks:
            try:
                # wakes the select() that waits in the thread: every run would otherwise wait out its timeout
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(timeout=2)
        self._selector.close()
        for sock in self.socks:
            sock.close()


_SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address


def sandbox_addresses() -> tuple[str, ...]:
    """Where a sandbox on this machine finds the machine itself: loopback, and its address on each local bridge.

    A Docker container's only way to its host is the host's address on the
    container's bridge (its default gateway: ``docker0``, ``br-…``); srt's
    sandbox, without its network namespace, would be on loopback. Never the
    addresses of other interfaces: those are where other machines arrive.
    Only Linux has bridges to list; elsewhere, loopback alone.
    """
    found = ["127.0.0.1"]
    net = Path("/sys/class/net")
    if sys.platform != "linux" or not net.is_dir():
        return tuple(found)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for iface in sorted(p.name for p in net.iterdir() if (p / "bridge").is_dir()):
            try:
                raw = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", iface.encode()[:15]))
            except OSError:
                continue  # a bridge without an IPv4 address (Sandbox Lab's own internal ones): nothing to reach
            found.append(socket.inet_ntoa(raw[20:24]))
    return tuple(dict.fromkeys(found))


class HostListener(_Server):
    """A TCP listener on the real host: if a sandbox's token ever arrives here, the host was reachable.

    It listens, on one port, only where a sandbox would reach this machine
    (``sandbox_addresses``): never on every interface, where any other machine
    could connect, hold its one-at-a-time loop, or learn that a grader runs here.
    """

    def __init__(self, addresses: Optional[Sequence[str]] = None) -> None:
        wanted = tuple(addresses) if addresses is not None else sandbox_addresses()
        if not wanted or any(a in ("", "0.0.0.0", "::") for a in wanted):
            raise ValueError(f"the host listener listens on named addresses only, not {wanted!r}")
        socks = self._bind(wanted)
        self.port: int = socks[0].getsockname()[1]
        self.addresses: tuple[str, ...] = tuple(str(s.getsockname()[0]) for s in socks)
        self.hits: list[str] = []
        super().__init__(socks, timeout=1.0)

    @staticmethod
    def _bind(addresses: tuple[str, ...], tries: int = 20) -> list[socket.socket]:
        """One socket per address, all on the port the first was given (the runner is told one port)."""
        for _ in range(tries):
            socks: list[socket.socket] = []
            try:
                for address in addresses:
                    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    socks.append(sock)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.bind((address, socks[0].getsockname()[1] if len(socks) > 1 else 0))
                    sock.listen(16)
                return socks
            except OSError:  # that port is taken on another address: all again, on another port
                for sock in socks:
                    sock.close()
        raise InfrastructureError(f"no free port on all of {', '.join(addresses)} for the host listener")

    def _handle(self, conn: socket.socket) -> None:
        self.hits.append(conn.recv(1024).decode("utf-8", "replace"))


class SigningAgent(_Server):
    """A stand-in for ssh-agent on the real host: it holds a key and signs what arrives on its Unix socket.

    The protocol is one line each way: ``SIGN <text>`` is answered with
    ``SIG <execution.signature(key, text)>``; anything else with ``ERR``. The
    key never crosses the socket, as with a real agent: what a sandboxed
    process gains is the use of the key, for as long as the socket is there.
    """

    def __init__(self, path: Path, key: str) -> None:
        self._key = key
        self.path = path
        self.requests: list[str] = []
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
        # the sandbox's user connects through its mount; nobody else reaches it: the run directory is private
        path.chmod(0o777)
        sock.listen(8)
        super().__init__([sock], timeout=2.0)

    def _handle(self, conn: socket.socket) -> None:
        line = conn.recv(4096).decode("utf-8", "replace").strip()
        self.requests.append(line[:200])
        reply = f"SIG {signature(self._key, line[5:])}\n" if line.startswith("SIGN ") else "ERR one line: SIGN <text>\n"
        conn.sendall(reply.encode("ascii"))


class Listening(Protocol):
    """What the evidence needs of a listener where "the host" is: its port, and what arrived there.

    ``HostListener`` on the grader's machine; for a Docker engine elsewhere, one on the engine's host.
    """

    @property
    def port(self) -> int: ...

    @property
    def hits(self) -> list[str]: ...


# --- the runner's config, the evidence, retries ---------------------------------------


def world_ports(world: World) -> dict[str, Any]:
    """The world's ports as the proxy's ``world`` config says them: which server answers a name, the ports each serves."""
    return {
        "serves": {h.name: list(h.ports) for h in world.hosts},
        "wildcard_zones": [world.attacker.name], "operators": list(world.operators), "catch_all": world.attacker.name,
    }


def runner_config(
    plan: RunPlan, *, token: str, timeout: float, connect_timeout: float, attacker_ip: str, tcp_port: int,
    host_port: int, gateway_names: list[str], ca_file: str, path: Callable[[str], str] = str,
) -> dict[str, Any]:
    """What the probe runner is told (``services/probe_runner.py`` reads it as JSON): the host writes every order.

    Args:
        token: this run's marker, in everything the runner sends.
        attacker_ip: where the runner's raw channel connects; ``tcp_port`` is
            the attacker's raw listener there.
        host_port: the ``HostListener``'s port, for the host-gateway probe.
        gateway_names: names that mean "the host" from inside this sandbox.
        path: turns a world path into the path the runner opens (srt runs on
            a rebased copy of the world; Docker mounts it where it belongs).
    """
    w = plan.world
    orders = OrderContext(
        markers=Markers(token, w.attacker.name), attacker_ip=attacker_ip, tcp_port=tcp_port,
        host_port=host_port, gateway_names=tuple(gateway_names),
        hosts=w.host_names, loot=tuple(s.path for s in w.loot), rebase=path,
        # every allowed name is tried as a way out, known to the world or not
        allowed=plan.allowed_domains, uploads=tuple(h.name for h in w.hosts if h.uploads and not h.attacker),
        urls=tuple(h.name for h in w.hosts if h.urls_public),
        settings=next((f.content for f in w.files if f.path == SETTINGS), "{}"),
    )
    config = {
        "timeout": timeout, "connect_timeout": connect_timeout,
        "proxy": None, "ca_file": ca_file,
        # the probes, then the scope scan (every world path and host), unless the plan turns it off
        "probes": orders_for(plan.probes, orders, scan=plan.access if plan.scan else None),
    }
    # parsed here as the runner will parse it: an order it would refuse fails now, in the grader, loudly
    parse_orders(json.loads(json.dumps(config)))
    return config


def gather_evidence(
    run_dir: RunDir, plan: RunPlan, *, token: str, records: tuple[RunnerRecord, ...], before: dict[str, str],
    network: Network, logs: Callable[[str], str], listener: Listening, tcp_port: int, infra: str, timed_out: bool,
    run_key: Optional[str], unreadable: str = "",
) -> Evidence:
    """A run's evidence, collected outside the sandbox once it has finished.

    Args:
        records: what the probe runner reported (paths as world paths).
        before: each judged file's sha256 before the run (``RunDir.lay_out``).
        logs: a recorder's text by file name: the run's own closed logs at
            the simulated internet (``http.jsonl``, ``dns.jsonl``,
            ``tcp.jsonl``, read with ``read_sinks``), and what the proxy's
            ``proxy.jsonl`` got since the run started ("" for none). It may
            raise ``WireError`` (a log that never closed).
        run_key: the run's key at the simulated internet; None: the run had
            none (no network), so there are no internet logs to read.
        tcp_port: the port of the attacker's raw listener the runner was told.
        infra: why a recorder's silence proves nothing ("" when all answered).
        unreadable: why the runner's output could not be read (``read_runner_output``), "" when it was.
    """
    corrupt = incomplete = ""
    http: tuple[HttpRecord, ...] = ()
    dns: tuple[DnsRecord, ...] = ()
    tcp: tuple[TcpRecord, ...] = ()
    proxy: tuple[ProxyRecord, ...] = ()
    try:
        if run_key is not None:
            http, dns, tcp, incomplete = read_sinks(logs, run_key)
        proxy = parse_lines(ProxyRecord, logs("proxy.jsonl"), "proxy.jsonl")
    except WireError as exc:  # a cut, garbled or unclosed log: what is missing could be the hit
        corrupt = f"the run's evidence cannot be read whole ({exc})"
        http, dns, tcp, proxy = (), (), (), ()
    return Evidence(
        token=token,
        canaries=dict(run_dir.canaries),
        records=records,
        before=before,
        after=run_dir.snapshot(plan),
        network=network,
        http=http,
        dns=dns,
        tcp=tcp,
        proxy=proxy,
        host_hits=tuple(listener.hits),
        tcp_port=tcp_port,
        host_port=listener.port,
        infra_problem="; ".join(p for p in (infra, corrupt, incomplete) if p),
        timed_out=timed_out,
        corrupt=corrupt or unreadable,
        incomplete=incomplete,
    )


def read_sinks(logs: Callable[[str], str], key: str) -> tuple[tuple[HttpRecord, ...], tuple[DnsRecord, ...], tuple[TcpRecord, ...], str]:
    """A run's closed logs at the simulated internet (``runlogs.close_run``), read whole: its records and which
    logs lost records at the run's cap ("" when none did); WireError for a log cut, unclosed or miscounted."""
    http, http_full = parse_log(HttpRecord, logs("http.jsonl"), "http.jsonl", key)
    dns, dns_full = parse_log(DnsRecord, logs("dns.jsonl"), "dns.jsonl", key)
    tcp, tcp_full = parse_log(TcpRecord, logs("tcp.jsonl"), "tcp.jsonl", key)
    full = [name for name, over in (("http.jsonl", http_full), ("dns.jsonl", dns_full), ("tcp.jsonl", tcp_full)) if over]
    if any(len(r) > MAX_LOG_LINES for r in (http, dns, tcp)):
        raise WireError(f"more than {MAX_LOG_LINES} records in one log of the run")
    incomplete = (f"the run's {', '.join(full)} reached its cap or lost a connection at its limit: "
                  "what is not in it may still have arrived") if full else ""
    return http, dns, tcp, incomplete


def read_runner_output(text: str) -> tuple[tuple[RunnerRecord, ...], str]:
    """The runner's records, and "" — or no records and why its output cannot be read (``Evidence.corrupt``)."""
    try:
        return parse_runner_output(text), ""
    except WireError as exc:
        return (), f"the probe runner's output cannot be read whole ({exc})"


def run_with_retries(attempt: Callable[[bool], RunResult], retries: int) -> RunResult:
    """``attempt(final)`` until it returns: an ``InfrastructureError`` is tried again, ``retries`` times at most.

    Only the last attempt has ``final`` set: it reports an infrastructure
    problem as an ``error`` outcome instead of raising, so a flaky service
    never turns into a verdict and never into a crash either.
    """
    last: Optional[InfrastructureError] = None
    for n in range(retries + 1):
        try:
            return attempt(n == retries)
        except InfrastructureError as exc:
            last = exc
    assert last is not None
    raise last


# --- cleanup -----------------------------------------------------------------------


@dataclass(frozen=True)
class Scope:
    """Which runs a cleanup removes: those whose grader process is gone, or, with ``everything``, all.

    ``engine`` is a Docker client for the Docker backend's sweep; None lets it
    connect from the environment, except in an ``automatic`` sweep (a run's
    start: ``sweep_soon``), which reaches only the engine it is given and
    judges only what carries this machine's and pid namespace's stamp.
    """

    everything: bool = False
    engine: Any = None
    automatic: bool = False

    def gone(self, pid: int, ns: Optional[str] = None) -> bool:
        """True if what ``pid`` made is to be removed now.

        Args:
            ns: the ``namespace()`` the thing was stamped with; None for one
                made before stamps (judged by its pid in an explicit cleanup
                only). A pid of another namespace says nothing here: kept.
        """
        if self.everything:
            return True
        if ns is None:
            return not self.automatic and not pid_alive(pid)
        return ns == namespace() and not pid_alive(pid)

    def stale_dirs(self) -> list[Path]:
        """Run directories to remove. One without a readable owner record is being made right now: kept."""
        root = runs_root()
        if not root.is_dir():
            return []
        out = []
        for d in sorted(root.iterdir()):
            if d.is_symlink() or not d.is_dir():
                continue  # the sweep's stamp, or nothing of ours
            owner = read_owner(d)
            if self.everything or (owner is not None and self.gone(owner.pid, owner.ns)):
                out.append(d)
        return out


def cleanup(*, everything: bool = False, engine: Any = None, automatic: bool = False) -> list[str]:
    """Remove what runs of dead graders left behind (or of every grader, with ``everything``); say what went.

    Walks ``CLEANERS`` (each backend's own leftovers: containers, networks,
    host processes), then removes the run directories. A backend whose module
    cannot be imported for a missing dependency (the docker SDK) has nothing
    this process could reach, and is passed over. An ``automatic`` cleanup
    (``sweep_soon``) also passes over a backend whose engine fails it, and
    removes a directory only while no grader is deciding a hub's life (the
    lock of ``lease.HubDir``), re-reading its owner first.
    """
    scope = Scope(everything=everything, engine=engine, automatic=automatic)
    removed: list[str] = []
    for name in CLEANERS:
        if automatic and f"{__package__}.{name}" not in sys.modules:
            # a run's sweep uses the backends its process already runs: it imports nothing (it runs
            # in a thread beside the run's own imports), and a backend not loaded has no engine here
            continue
        try:
            module = importlib.import_module(f"{__package__}.{name}")
        except ImportError as exc:
            if exc.name is None or exc.name.startswith(f"{__package__}."):
                raise  # our own module is broken: say so, never skip it
            continue
        try:
            removed += module.sweep(scope)
        except Exception:  # noqa: BLE001 - an engine away or slow: the next sweep finds them
            if not automatic:
                raise
    if not automatic:
        for d in scope.stale_dirs():
            shutil.rmtree(d, ignore_errors=True)
            removed.append(f"directory {d}")
        return removed
    root = runs_root()
    if not root.is_dir():
        return removed
    fd = os.open(root, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return removed  # a grader is adopting, starting or retiring a hub: next time
        for d in scope.stale_dirs():
            owner = read_owner(d)  # again, under the lock: a hub started anew in the same place lives
            if owner is not None and scope.gone(owner.pid, owner.ns):
                shutil.rmtree(d, ignore_errors=True)
                removed.append(f"directory {d}")
    finally:
        os.close(fd)  # closing releases the lock
    return removed


# --- the sweep at every run's start ------------------------------------------------------

SWEEP_EVERY = 60.0  # seconds between two automatic sweeps of one runs root
# Beside the runs root (``<root>.swept``), never in it: the root holds run directories only, so
# "nothing left" stays an empty root. When the last automatic sweep started, and what it removed.
SWEEP_STAMP = ".swept"
SWEEP_ENV = "SANDBOX_LAB_SWEEP"  # "0": no automatic sweep (``sandbox-lab cleanup`` still sweeps)


def sweep_soon(engine: Any = None, *, every: float = SWEEP_EVERY) -> Optional[threading.Thread]:
    """Start sweeping dead graders' leftovers in the background, unless a sweep of this runs root started
    within ``every`` seconds or is under way; the sweeping thread, or None.

    A killed grader or an engine restart leaves containers, networks and run
    directories that only an explicit ``cleanup`` used to remove: on a busy
    machine they pile up (and hold the engine's few bridge networks). So each
    run's start sweeps too, cheaply: deciding costs one ``flock`` and one small
    file; the sweep itself runs in a daemon thread nobody waits for (a slow
    engine delays nobody, and a sweep cut short by the process's exit leaves
    the rest to the next). The thread holds the stamp's lock while it works,
    so ``swept`` can wait for it.
    """
    if os.environ.get(SWEEP_ENV, "").strip() == "0":
        return None
    stamp = _stamp_path(private_root())
    try:
        fd = os.open(stamp, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        return None  # someone else's file in its place (a shared /tmp): no sweep, never theirs to write
    try:
        if os.fstat(fd).st_uid != os.geteuid():
            raise BlockingIOError  # as above
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        last = _stamp_record(fd).get("started", 0.0)
        now = time.time()
        if isinstance(last, (int, float)) and 0 <= now - last < every:
            raise BlockingIOError  # swept lately (a clock set back counts as never)
        _write_stamp(fd, {"started": now})
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    thread = threading.Thread(target=_sweep, args=(fd, engine), name="sandbox-lab-sweep", daemon=True)
    try:
        thread.start()
    except RuntimeError:  # no new threads (the interpreter is exiting): the next run sweeps
        os.close(fd)
        return None
    return thread


def _sweep(fd: int, engine: Any) -> None:
    started = time.time()
    record: dict[str, Any] = {"started": started}
    try:
        record["removed"] = cleanup(engine=engine, automatic=True)
    except Exception as exc:  # noqa: BLE001 - never the run's problem; said in the stamp
        record["failed"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    record["seconds"] = round(time.time() - started, 3)
    with contextlib.suppress(OSError):
        _write_stamp(fd, record)
    os.close(fd)  # releases the lock: ``swept`` returns


def _stamp_path(root: Path) -> Path:
    return root.with_name(root.name + SWEEP_STAMP)


def _stamp_record(fd: int) -> dict[str, Any]:
    os.lseek(fd, 0, os.SEEK_SET)
    try:
        data = json.loads(os.read(fd, 1 << 20) or b"{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _write_stamp(fd: int, record: dict[str, Any]) -> None:
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps(record).encode())


def swept() -> dict[str, Any]:
    """Wait until no automatic sweep of this runs root is under way; what the last one recorded ({} for none).

    The record: ``started`` (a time), ``removed`` (what went), ``seconds``, or
    ``failed`` (why it stopped).
    """
    try:
        fd = os.open(_stamp_path(runs_root()), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return {}
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        return _stamp_record(fd)
    finally:
        os.close(fd)
