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

Imports: access, errors, evidence, execution, next_session, outcomes, plan, probes, scope, and the standard library.
Never ``docker``: the srt backend must work where the docker SDK is missing.
Nothing downstream.
"""

from __future__ import annotations

import importlib
import json
import os
import secrets
import shutil
import socket
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Protocol

from ..access import Network
from ..errors import InfrastructureError
from ..evidence import MAX_LOG_LINES, Evidence, Markers, parse_lines, parse_runner_output, sha256
from ..services.wire import DnsRecord, HttpRecord, ProxyRecord, RunnerRecord, TcpRecord, WireError, parse_log, parse_orders
from ..execution import signature
from ..outcomes import RunResult
from ..next_session import SETTINGS
from ..plan import RunPlan
from ..probes import OrderContext, orders_for
from ..scope import new_file, scanned_dirs

__all__ = [
    "CLEANERS",
    "MAX_OUTPUT",
    "HostListener",
    "Listening",
    "Owner",
    "RunDir",
    "Scope",
    "SigningAgent",
    "cleanup",
    "gather_evidence",
    "make_run_dir",
    "pid_alive",
    "read_owner",
    "read_runner_output",
    "read_sinks",
    "read_text",
    "run_with_retries",
    "runner_config",
    "runs_root",
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
CLEANERS = ("docker", "srt")


# --- the run directory and its owner -------------------------------------------------


def runs_root() -> Path:
    """Where run directories live (``SANDBOX_LAB_RUNS`` overrides); ``cleanup`` looks here for leftovers."""
    return Path(os.environ.get("SANDBOX_LAB_RUNS", Path(tempfile.gettempdir()) / "sandbox-lab-runs"))


@dataclass(frozen=True)
class Owner:
    """Who made a run directory: the grader process and the run's name."""

    pid: int
    run: str


def make_run_dir(name: str) -> Path:
    """A new directory ``runs_root()/name`` with its owner record; the only place an owner record is written.

    The record names this process, so ``cleanup`` removes the directory once
    this process is gone, and never while it lives.
    """
    root = runs_root()
    root.mkdir(parents=True, exist_ok=True)
    path = root / name
    path.mkdir(mode=0o755)  # exists already: a name collision, never reuse another run's directory
    write_owner(path, os.getpid())
    return path


def write_owner(directory: Path, pid: int) -> None:
    """Record ``pid`` as the owner of ``directory``: ``cleanup`` removes it once that process is gone.

    A shared internet's directory names its keeper, which outlives the grader that made it.
    """
    # json.dumps' own spacing, as before: tests look for '"pid": N,' in the text
    (directory / OWNER).write_text(json.dumps({"pid": pid, "run": directory.name}))


def read_owner(directory: Path) -> Optional[Owner]:
    """The owner record of a run directory; None when it is missing or unreadable."""
    try:
        raw = json.loads((directory / OWNER).read_text())
        return Owner(int(raw["pid"]), str(raw["run"]))
    except (OSError, ValueError, KeyError, TypeError):
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

    @classmethod
    def create(cls, run_id: str) -> "RunDir":
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
        uid = plan.world.uid
        for p in [self.world, *self.world.rglob("*")]:
            try:
                os.chown(p, uid, uid)
            except PermissionError:  # not root: let the sandbox's uid write where the policy allows
                p.chmod(p.stat().st_mode | 0o666 | (0o111 if p.is_dir() else 0))
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


def _watched(plan: RunPlan) -> list[str]:
    """Every world path judged before and after a run: each file, each output, and the scope
    scan's new file in each directory (absent before, so present after means it was created)."""
    w = plan.world
    return [f.path for f in w.files] + [o.path for o in w.outputs] + [new_file(d) for d in scanned_dirs(w)]


# --- the host listener -------------------------------------------------------------


class _Server:
    """One listening socket served by a daemon thread, one connection at a time, until ``close``.

    ``_handle`` answers one accepted connection; an error in it never stops the server.
    """

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        self.sock = sock
        self._timeout = timeout
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _handle(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                continue
            with conn:
                conn.settimeout(self._timeout)
                try:
                    self._handle(conn)
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        try:
            # wakes the accept() that waits in the thread: every run would otherwise wait out its timeout
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._thread.join(timeout=2)
        self.sock.close()


class HostListener(_Server):
    """A TCP listener on the real host: if a sandbox's token ever arrives here, the host was reachable."""

    def __init__(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", 0))
        sock.listen(16)
        sock.settimeout(0.2)
        self.port: int = sock.getsockname()[1]
        self.hits: list[str] = []
        super().__init__(sock, timeout=1.0)

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
        path.chmod(0o777)  # the sandbox's user connects; a socket's mode is its only lock
        sock.listen(8)
        sock.settimeout(0.2)
        super().__init__(sock, timeout=2.0)

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
    connect from the environment.
    """

    everything: bool = False
    engine: Any = None

    def gone(self, pid: int) -> bool:
        """True if what ``pid`` made is to be removed now."""
        return self.everything or not pid_alive(pid)

    def stale_dirs(self) -> list[Path]:
        """Run directories to remove. One without a readable owner record is being made right now: kept."""
        root = runs_root()
        if not root.is_dir():
            return []
        out = []
        for d in sorted(root.iterdir()):
            owner = read_owner(d)
            if self.everything or (owner is not None and not pid_alive(owner.pid)):
                out.append(d)
        return out


def cleanup(*, everything: bool = False, engine: Any = None) -> list[str]:
    """Remove what runs of dead graders left behind (or of every grader, with ``everything``); say what went.

    Walks ``CLEANERS`` (each backend's own leftovers: containers, networks,
    host processes), then removes the run directories. A backend whose module
    cannot be imported for a missing dependency (the docker SDK) has nothing
    this process could reach, and is passed over.
    """
    scope = Scope(everything=everything, engine=engine)
    removed: list[str] = []
    for name in CLEANERS:
        try:
            module = importlib.import_module(f"{__package__}.{name}")
        except ImportError as exc:
            if exc.name is None or exc.name.startswith(f"{__package__}."):
                raise  # our own module is broken: say so, never skip it
            continue
        removed += module.sweep(scope)
    for d in scope.stale_dirs():
        shutil.rmtree(d, ignore_errors=True)
        removed.append(f"directory {d}")
    return removed
