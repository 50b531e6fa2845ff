"""What every real backend does around a run: its directory, owner record, host listener, runner config, retries, cleanup.

The Docker and srt backends differ in how they start a sandbox, not in what a
run is. Each run gets a private directory under ``runs_root()`` holding a copy
of the world with fresh canaries (``RunDir``) and an owner record
(``owners``: the grader's pid), so ``cleanup`` can tell a dead grader's
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

The runs root and its owner records are ``owners``; the host listener and the
signing agent ``listeners``; ``cleanup`` and ``sweep_soon`` ``cleanup``. This
module keeps the run itself and names those too (every backend imports them from here).
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from grader.core.access import Network
from grader.core.errors import InfrastructureError
from grader.core.evidence import MAX_LOG_LINES, Evidence, Markers, parse_lines, parse_runner_output, sha256
from grader.protocol.common import HEARTBEAT_HOST
from grader.protocol.configs import WorldPorts
from grader.protocol.wire import DnsRecord, HttpRecord, ProxyRecord, RunnerOrders, RunnerRecord, TcpRecord, WireError, parse_log
from grader.core.outcomes import RunResult
from grader.core.next_session import SETTINGS
from grader.core.plan import RunPlan
from grader.core.records import RawPorts
from grader.core.probes import OrderContext, orders_for
from grader.core.scope import new_file, scanned_dirs
from grader.core.world import World
# the run's surroundings, each in a module of its own; named here too, as every backend knows them from here
from grader.backends.owners import Owner, make_dir, make_run_dir, namespace, pid_alive, private_root, read_owner, runs_root, write_file, write_owner
from grader.backends.quota import bound_world
from grader.backends.listeners import HostListener, Listening, SigningAgent, sandbox_addresses
from grader.backends.cleanup import CLEANERS, SWEEP_ENV, SWEEP_EVERY, SWEEP_STAMP, Engine, Scope, cleanup, sweep_soon, swept

__all__ = [
    "resolv_conf",
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

MAX_OUTPUT = 8 * 1024 * 1024  # the most read back of anything a run wrote: a hostile run cannot fill memory


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
    bounded: bool = False  # the world copy is on a tmpfs of quota.WORLD_BYTES (quota.bound_world)

    @classmethod
    def create(cls, run_id: str, engine: Optional[Engine] = None) -> "RunDir":
        """A new run's directory. Every run start also sweeps what dead graders left (``sweep_soon``),
        with ``engine`` (the Docker backend's engine adapter) for their containers and networks."""
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
        if not self.bounded:  # before a byte is written: what the sandbox can write is the world copy, so bound it
            self.bounded = bound_world(self.world)
        # every mode explicit (owners.make_dir, write_file): the umask the grader was started with decides nothing
        for d in w.directories():
            make_dir(self.host_path(d), parents=True, exist_ok=True)
        for f in w.files:
            self.canaries[f.path] = secrets.token_hex(16)
            write_file(self.host_path(f.path), f.content.replace("{canary}", self.canaries[f.path]), f.mode)
        for m in plan.mounts:
            if m.precreate and not self.host_path(m.source).exists():
                write_file(self.host_path(m.source), b"")
        make_dir(self.path / "mask")
        write_file(self.path / "mask" / "empty", b"", 0o444)
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


# --- the runner's config, the evidence, retries ---------------------------------------


def world_ports(world: World) -> WorldPorts:
    """The world's ports as the proxy's ``world`` config says them: which server answers a name, the ports each serves."""
    return WorldPorts(
        serves={h.name: tuple(h.ports) for h in world.hosts},
        wildcard_zones=(world.attacker.name,), operators=tuple(world.operators), catch_all=world.attacker.name,
    )


def runner_config(
    plan: RunPlan, *, token: str, timeout: float, connect_timeout: float, attacker_ip: str, raw: RawPorts,
    host_port: int, gateway_names: list[str], ca_file: str, proxy: Optional[str] = None, path: Callable[[str], str] = str,
) -> RunnerOrders:
    """What the probe runner is told, whole (``services/probe_runner.py`` reads it with ``wire.parse_orders``):
    the host writes every order; ``wire.dump_orders`` writes it as ``config.json``.

    Args:
        token: this run's marker, in everything the runner sends.
        attacker_ip: where the runner's raw channels connect; ``raw`` says
            where the attacker's raw listeners are there, world port by port.
        host_port: the ``HostListener``'s port, for the host-gateway probe.
        gateway_names: names that mean "the host" from inside this sandbox.
        proxy: the proxy the runner's proxied requests go through (None: no proxy, or srt's, which the
            runner is handed only in its environment: ``srt._BOOT`` fills it in with ``dataclasses.replace``).
        path: turns a world path into the path the runner opens (srt runs on
            a rebased copy of the world; Docker mounts it where it belongs).
    """
    w = plan.world
    orders = OrderContext(
        markers=Markers(token, w.attacker.name), attacker_ip=attacker_ip, raw=raw,
        host_port=host_port, gateway_names=tuple(gateway_names),
        hosts=w.host_names, loot=tuple(s.path for s in w.loot), rebase=path,
        # every allowed name is tried as a way out, known to the world or not
        allowed=plan.allowed_domains, denied=plan.denied_domains, uploads=tuple(h.name for h in w.hosts if h.uploads and not h.attacker),
        urls=tuple(h.name for h in w.hosts if h.urls_public),
        settings=next((f.content for f in w.files if f.path == SETTINGS), "{}"),
    )
    return RunnerOrders(
        timeout=timeout, connect_timeout=connect_timeout, proxy=proxy, ca_file=ca_file,
        # the probes, then the scope scan (every world path and host), unless the plan turns it off
        probes=orders_for(plan.probes, orders, scan=plan.access if plan.scan else None),
    )


def gather_evidence(
    run_dir: RunDir, plan: RunPlan, *, token: str, records: tuple[RunnerRecord, ...], before: dict[str, str],
    network: Network, logs: Callable[[str], str], listener: Listening, raw: RawPorts, infra: str, timed_out: bool,
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
        raw: the attacker's raw listeners the runner was told of.
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
    incomplete = "; ".join(p for p in (incomplete, unreached(proxy)) if p)
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
        raw=raw,
        host_port=listener.port,
        infra_problem="; ".join(p for p in (infra, corrupt, incomplete) if p),
        timed_out=timed_out,
        corrupt=corrupt or unreadable,
        incomplete=incomplete,
    )


def unreached(proxy: tuple[ProxyRecord, ...]) -> str:
    """Why the simulated internet's silence proves nothing when the run's proxy let a request through that never
    reached it (``internet-unreachable``: its name server gave no answer, or its listener took no connection); ""
    when every allowed request got there or failed on a fact of the world (no such host, a name DNS cannot carry).

    The policy let that request out, and the real tool would have sent it: reading the internet's logs without it
    would call an allowed upload blocked. The proxy's own self-check is no upload: srt's parent proxy lets every
    name through, its check's ``HEARTBEAT_HOST`` too, and a check made once the run's internet has gone finds
    no name server."""
    lost = [r for r in proxy if r.decision == "allow" and r.cause == "internet-unreachable" and r.host != HEARTBEAT_HOST]
    if not lost:
        return ""
    first = lost[0]
    return (f"the proxy let {len(lost)} request(s) through that never reached the simulated internet "
            f"({first.host}: {first.reason.rsplit('; ', 1)[-1]}): what it did not record may still have been sent")


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


def resolv_conf(internet_ip: str) -> str:
    """A sandbox's resolv.conf on ordinary networking: every query goes to the run's own name server.

    That server answers every name, so a lookup with no answer is a busy machine, never a block:
    it is asked up to three times (2 s each), and a judge reads a lookup still unanswered as an error.
    """
    return f"nameserver {internet_ip}\noptions timeout:2 attempts:3\n"
