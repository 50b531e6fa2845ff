"""The sandbox-runtime backend: runs a plan's probes under the real ``srt`` and judges them like the Docker backend.

Learners write policies in the shape of sandbox-runtime's settings, and
``export --to srt`` promises that what they learned carries over. This backend
checks the promise against the tool itself (``@anthropic-ai/sandbox-runtime``,
pinned in ``tools/srt/package-lock.json``; ``scripts/ensure-srt`` installs it
and bubblewrap, socat and ripgrep). Per run it:

1. lays out a fresh world copy with per-run canaries under ``<run>/world``
   (``runs.RunDir``, shared with the Docker backend so both start from the
   same files);
2. exports the policy with ``export(policy, "srt")`` and rebases every path
   onto that copy (``/home/user/.ssh`` becomes ``<run>/world/home/user/.ssh``),
   so nothing outside the run directory is ever named in the settings;
3. starts the simulated internet (``services/internet.py``) on 127.0.0.1 high
   ports, and Sandbox Lab's egress proxy (``services/proxy.py``, the one the
   Docker backend runs) on 127.0.0.1 as srt's ``parentProxy``: srt's own proxy
   applies the allowlist, the parent only carries what srt let through into
   the simulated internet, resolving names with the run's DNS server. No
   connection and no DNS query leaves the machine;
4. runs the unchanged probe runner under ``srt`` as the world's unprivileged
   user, HOME in the world copy, under a wall clock;
5. collects the evidence outside the sandbox and hands it to ``evidence.judge``,
   the judgement every real backend shares; then removes everything it made.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

from grader.backends.quota import remove_dir
from grader.protocol.domains import is_ipv4
from grader.core.errors import BackendError, InfrastructureError, in_checkout
from grader.realtools.srt_notes import SRT_VERSION
from grader.protocol.configs import InternetConfig, ProxyConfig, dump_config
from grader.protocol.wire import RunnerOrders, RunnerRecord, WireError, dump_orders
from grader.services import RUNNER_SCRIPTS
from grader.core.evidence import log_window
from grader.core.execution import Execution, Job
from grader.realtools.export import export
from grader.core.outcomes import RunResult
from grader.core.verdicts import run_result
from grader.core.plan import RunPlan
from grader.core.records import RawPorts
from grader.protocol.common import DNS_PORT, HEARTBEAT_HOST, HTTP_PORT, HTTPS_PORT
from grader.backends.base import Closing
from grader.backends.files import host_files
from grader.backends.owners import make_dir, stat_fields, write_file
from grader.backends.runlogs import close_run, open_run
from grader.backends.runs import MAX_OUTPUT, HostListener, RunDir, Scope, gather_evidence, read_runner_output, run_with_retries, runner_config, world_ports

__all__ = [
    "SrtBackend", "SrtUnavailable", "free_ports", "loopback_entries", "rebase_settings", "srt_cli", "srt_problem", "srt_version", "sweep",
]

PACKAGE = "@anthropic-ai/sandbox-runtime"
NODE_MIN = (22, 12)  # what the pinned srt (tools/srt/package.json) declares in its engines field
HTTP_TIMEOUT = 5.0  # one HTTP exchange inside the sandbox: srt's proxy answers at once, even to refuse
CONNECT_TIMEOUT = 1.0  # a raw connect inside srt's network namespace fails at once: there is no route
READY_TIMEOUT = 20.0
LOOPBACK = "127.0.0.1"
_ROOT = Path(__file__).resolve().parents[2]  # the checkout: tools/srt and the grader package live here

# Runs inside srt. The runner takes its proxy from its orders; srt hands the
# sandbox its proxy (with a per-session credential) only in the environment,
# so this reads the orders strictly, fills in that one value (a new value,
# ``dataclasses.replace``) and starts the runner unchanged, passing the orders
# through a pipe: nothing is written anywhere the sandbox shares.
_BOOT = '''\
import dataclasses, json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import probe_runner
import wire
with open(sys.argv[1]) as fh:
    cfg = dataclasses.replace(wire.parse_orders(json.load(fh)), proxy=os.environ.get("HTTPS_PROXY") or None)
r, w = os.pipe()
os.write(w, wire.dump_orders(cfg).encode())
os.close(w)
probe_runner.CONFIG = "/proc/self/fd/%d" % r
probe_runner.main()
'''


class SrtUnavailable(BackendError):
    """sandbox-runtime cannot run here; the message says what is missing and how to get it."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        how = (
            "Run scripts/ensure-srt, then retry"
            if in_checkout("ensure-srt")
            else f"Install it (npm install {PACKAGE}@{SRT_VERSION} into a directory, with node >= 22.12, bubblewrap, "
            "socat and ripgrep) and set SANDBOX_LAB_SRT_DIR to that directory, or use a Sandbox Lab checkout's scripts/ensure-srt"
        )
        super().__init__(f"sandbox-runtime (srt) cannot run here: {detail}. {how}.")


def srt_cli() -> Path:
    """The pinned srt's entry point inside the project-local install (``SANDBOX_LAB_SRT_DIR`` overrides tools/srt)."""
    base = Path(os.environ.get("SANDBOX_LAB_SRT_DIR", _ROOT / "tools" / "srt"))
    return base / "node_modules" / PACKAGE / "dist" / "cli.js"


def srt_version() -> str:
    """The installed srt's version, "" when it is not installed."""
    try:
        return str(json.loads((srt_cli().parents[1] / "package.json").read_text())["version"])
    except (OSError, ValueError, KeyError):
        return ""


def srt_problem() -> str:
    """Why srt cannot run here ("" when it can): what is missing, or bubblewrap's own error."""
    if sys.platform != "linux":
        return f"this backend drives srt's Linux sandbox (bubblewrap); this is {sys.platform}"
    missing = [tool for tool in ("node", "bwrap", "socat", "rg") if shutil.which(tool) is None]
    if missing:
        return "missing " + ", ".join(missing)
    if not srt_cli().is_file():
        return f"{PACKAGE} is not installed in {srt_cli().parents[3]}"
    node = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=20).stdout.strip()
    try:
        major, minor = (int(x) for x in node.lstrip("v").split(".")[:2])
    except ValueError:
        major, minor = 0, 0
    if (major, minor) < NODE_MIN:
        return f"node {node or '?'} is too old: srt {srt_version()} needs >= {NODE_MIN[0]}.{NODE_MIN[1]}"
    # bubblewrap runs as whoever runs srt: as root, that is the world's unprivileged user
    user: dict[str, Any] = {}
    if os.geteuid() == 0:
        from grader.core.world import load_world

        uid = load_world().uid
        user = {"user": uid, "group": uid, "extra_groups": []}
    probe = subprocess.run(
        ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net", "true"],
        capture_output=True, text=True, timeout=20, **user,
    )
    if probe.returncode != 0:
        first = (probe.stderr.strip().splitlines() or ["no message"])[0]
        return f"bubblewrap cannot create a sandbox ({first}); srt needs unprivileged user namespaces"
    return ""


def _rebase(path: str, world: Path) -> str:
    return str(world) if path == "/" else str(world) + path


def rebase_settings(settings: dict[str, Any], world: Path) -> dict[str, Any]:
    """The exported settings with every filesystem path moved under ``world`` (the run's world copy).

    Every policy path is absolute and normalized (``policy.normalize_path``),
    so prefixing is exact: "/" becomes the world copy itself, and no path can
    climb out of it.
    """
    fs = {key: [_rebase(p, world) for p in entries] for key, entries in settings["filesystem"].items()}
    return {**settings, "filesystem": fs, "network": dict(settings["network"])}


def _host_addresses() -> list[str]:
    """This machine's own IPv4 addresses other than loopback: where a sandbox would find host services."""
    found: list[str] = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # UDP connect only picks a route; no packet is sent
            found.append(s.getsockname()[0])
        except OSError:
            pass
    try:
        found += [str(a[4][0]) for a in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)]
    except OSError:
        pass
    return [a for a in dict.fromkeys(found) if not a.startswith("127.")]


def free_ports(count: int) -> list[int]:
    """Ports free for TCP and UDP on loopback, held together so none is picked twice."""
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            tcp = socket.socket()
            held.append(tcp)
            tcp.bind((LOOPBACK, 0))
            port = int(tcp.getsockname()[1])
            udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            held.append(udp)
            try:
                udp.bind((LOOPBACK, port))
            except OSError:
                continue
            ports.append(port)
    finally:
        for sock in held:
            sock.close()
    return ports


def loopback_entries(policy: Any) -> list[str]:
    """The allowedDomains entries srt would dial on this machine's own loopback: ``localhost`` and 127.0.0.0/8.

    srt 0.0.83 never sends these to its parent proxy (``shouldBypassParentProxy``
    in its ``parent-proxy.js``: "always bypass loopback"): its own proxy
    connects to them directly, on the machine it runs on. Run here, that would
    aim the probes at this machine's own services, so the backend refuses
    such a policy (docs/srt-differences.md, ``loopback-direct``).
    """
    return [e for e in policy.network.allowedDomains if e == "localhost" or (is_ipv4(e) and e.startswith("127."))]


class SrtBackend(Closing):
    """Runs plans under the real sandbox-runtime; one srt sandbox per run, all probes inside it.

    It keeps nothing between runs (each run stops its processes and removes its
    directory before it returns), so ``close()`` has nothing to do.
    """

    name = "srt"

    def __init__(self, *, cwd: str = "", retries: int = 1) -> None:
        """A backend that starts srt in ``cwd``, a directory of the world (default: the user's home).

        The home is the Docker sandbox's working directory too. The choice
        matters: srt finds its mandatory write protections (shell start-up
        files, .git/hooks, ...) relative to where it starts.
        """
        self.cwd = cwd
        self.retries = retries

    @classmethod
    def from_env(cls, *, cwd: str = "") -> "SrtBackend":
        problem = srt_problem()
        if problem:
            raise SrtUnavailable(problem)
        return cls(cwd=cwd)

    def run(self, plan: RunPlan) -> RunResult:
        if plan.policy is None:
            # srt has no "plain container": it always sandboxes. The baseline is Docker's.
            raise BackendError("the plain-container baseline runs on the Docker backend only; srt runs policies")
        loopback = loopback_entries(plan.policy)
        if loopback:
            raise BackendError(
                f"srt dials {', '.join(loopback)} itself, on this machine's own loopback (srt never sends loopback "
                "names to a parent proxy), so running this policy under srt would aim the probes at this machine's "
                "services. Sandbox Lab does not run it under srt; use the Docker or static backend"
            )
        cwd = self.cwd or plan.world.home
        if cwd != "/" and cwd not in plan.world.directories():
            raise ValueError(f"cwd {cwd!r} is not a directory of the world: choose one of {', '.join(plan.world.directories())}")
        return run_with_retries(lambda final: _Run(plan, cwd).execute(final=final), self.retries)

    def execute(self, plan: RunPlan, job: Job) -> Execution:
        raise BackendError(
            "code (an attack, the lessons' agent) runs on the Docker backend, where the simulated internet's "
            "sinks prove what left the sandbox; use `--backend docker`"
        )


class _Run:
    """One run of one plan under srt; owns every process, socket and directory it creates."""

    def __init__(self, plan: RunPlan, cwd: str) -> None:
        self.plan = plan
        self.cwd = cwd
        self.run_id = "srt-" + secrets.token_hex(5)
        self.token = secrets.token_hex(6)
        self.dir = RunDir.create(self.run_id)
        self.procs: list[subprocess.Popen[bytes]] = []

    def _track(self, proc: subprocess.Popen[bytes]) -> None:
        """Own ``proc``: stopped when the run ends, and listed in ``<run>/pids`` for ``cleanup``.

        Each process starts its own session, so a SIGKILLed grader leaves it
        running; ``sweep`` (this backend's part of ``runs.cleanup``) ends the
        pids listed here once the owner is gone, and only those whose command
        line names this run directory.
        """
        self.procs.append(proc)
        with (self.dir.path / "pids").open("a", encoding="utf-8") as fh:
            fh.write(f"{proc.pid}\n")

    # --- lifecycle ----------------------------------------------------------------------

    def execute(self, *, final: bool) -> RunResult:
        started = time.monotonic()
        listener: Optional[HostListener] = None
        try:
            before = self.dir.lay_out(self.plan)
            for m in self.plan.mounts:
                if m.precreate:
                    # Docker pre-creates an output file a rule names, so its mount can carry the
                    # rule's mode. On a real machine it does not exist until the job writes it,
                    # and srt treats a missing path its own way: that is part of the comparison.
                    self.dir.host_path(m.source).unlink(missing_ok=True)
                    before.pop(m.source, None)
            listener = HostListener()
            raw_world = self.plan.world.raw_ports
            dns, http, https, proxy_port, *raw_here = free_ports(4 + len(raw_world))
            raw = RawPorts(tuple(zip(raw_world, raw_here)))  # each raw port of the attacker's, on a free loopback port
            internet, parent = self._start_services(dns, http, https, raw, proxy_port)
            # everything reaches this run's internet from loopback (srt's proxy runs on the host): the run claims it
            sinks = host_files(self.dir.path / "internet" / "out")
            open_run(sinks, self.run_id, [LOOPBACK])
            settings = self._settings(proxy_port)
            output, timed_out = self._run_srt(settings, raw, listener.port)
            parsed, unreadable = read_runner_output(output)
            records = self._map_back(parsed)
            if not unreadable and not any(r.probe == "runner" and r.step == "start" for r in records):
                err = self.dir.read_text("srt.err").strip()[-600:]
                raise InfrastructureError(f"srt did not start the probe runner: {err or 'no message'}")
            infra = ""
            if internet.poll() is not None:
                infra = f"the simulated internet stopped during the run (exit code {internet.returncode})"
            elif parent.poll() is not None:
                infra = f"srt's parent proxy (services/proxy.py) stopped during the run (exit code {parent.returncode})"
            if infra and not final:
                raise InfrastructureError(infra)
            closed: dict[str, str] = {}
            if not infra:
                try:
                    closed = close_run(sinks, self.run_id)
                except WireError as exc:
                    infra = f"the run's evidence cannot be read whole ({exc})"
            ev = gather_evidence(
                self.dir, self.plan, token=self.token, records=records, before=before,
                # srt always puts its proxy in front; the simulated internet ran and logged throughout
                network="proxy",
                # the run's own parent proxy logged from its start: its records number from 0 (evidence.log_window)
                logs=lambda name: (log_window("", self.dir.read_text(f"proxy/out/{name}"), name, from_start=True)
                                   if name == "proxy.jsonl" else closed[name]),
                listener=listener, raw=raw, infra=infra, timed_out=timed_out, unreadable=unreadable,
                run_key=None if infra else self.run_id,
            )
            return run_result(
                ev, self.plan, backend="srt", run_id=self.run_id, seconds=time.monotonic() - started,
                stopped="srt was stopped", disagreement="Sandbox Lab predicted",
                extra={
                    "srt_version": srt_version(),
                    "settings": self._unrebased(settings),
                    # what reached the simulated internet at all: every name looked up, and every
                    # decision of srt's parent proxy but its own heartbeats
                    "dns_queries": [q.qname for q in ev.dns],
                    "relay": [
                        {"method": r.method, "host": r.host, "port": r.port, "decision": r.decision, "why": r.reason}
                        for r in ev.proxy if r.host != HEARTBEAT_HOST
                    ],
                },
            )
        finally:
            if listener:
                listener.close()
            for p in self.procs:
                _stop(p)
            remove_dir(self.dir.path)  # its world quota unmounted first

    # --- the simulated internet and srt's parent proxy ---------------------------------

    def _start_services(
        self, dns: int, http: int, https: int, raw: RawPorts, proxy_port: int
    ) -> tuple[subprocess.Popen[bytes], subprocess.Popen[bytes]]:
        """The simulated internet and, in front of it, srt's parent proxy, both on loopback; started together."""
        w = self.plan.world
        # each port the world's hosts serve, and the loopback port its sink listens on in this run
        listening = {HTTPS_PORT: https, HTTP_PORT: http, DNS_PORT: dns, **dict(raw.pairs)}
        unheard = sorted({p for h in w.hosts for p in h.ports} - set(listening))
        if unheard:  # a port the world serves that this backend has no sink for: it cannot model the world
            raise InfrastructureError(f"the srt backend has no sink for port {unheard[0]}, which the world's hosts serve")
        internet = self._start_service("internet", InternetConfig(
            hosts=tuple(w.host_names), wildcard_zones=(w.attacker.name,), extra_names=(),
            # every name the world does not know is the attacker's server (fail closed), as in Docker
            operators=tuple(w.operators), catch_all=w.attacker.name,
            # every world name resolves to loopback, where the sinks listen on this run's ports
            address=LOOPBACK, bind=LOOPBACK,
            dns_port=dns, http_port=http, https_port=https, tcp_ports=tuple(sorted(raw.listening)),
            serves={h.name: tuple(listening[p] for p in h.ports) for h in w.hosts},
            nonce=secrets.token_hex(8), out_dir=self._service_out("internet"),
        ))
        parent = self._start_service("proxy", ProxyConfig(
            # srt's own proxy applied the policy; this one carries what srt let through, refusing
            # only what the simulated internet cannot answer (names no server has, ports no server serves)
            allowed=(), any_host=True, listen_port=proxy_port, bind=LOOPBACK,
            dns_server=LOOPBACK, dns_port=dns,
            upstream_ports={str(world_port): port for world_port, port in listening.items()},
            world=world_ports(w), out_dir=self._service_out("proxy"),
        ))
        self._wait_ready("the simulated internet", "internet", internet)
        self._wait_ready("srt's parent proxy", "proxy", parent)
        return internet, parent

    def _service_out(self, script: str) -> str:
        """Where the service ``script`` writes (its config's ``out_dir``): ``<run>/<script>/out``."""
        return str(self.dir.path / script / "out")

    def _start_service(self, script: str, config: InternetConfig | ProxyConfig) -> subprocess.Popen[bytes]:
        """Start ``grader.services.<script>`` on the host with ``config``, in ``<run>/<script>``; tracked."""
        sdir = self.dir.path / script
        make_dir(sdir / "out", parents=True)  # modes explicit: the umask decides nothing
        write_file(sdir / f"{script}.json", dump_config(config))
        env = {**os.environ, "PYTHONPATH": str(_ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
        write_file(sdir / f"{script}.log", b"")  # made with its mode first: opening it below keeps it
        with (sdir / f"{script}.log").open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", f"grader.services.{script}", str(sdir / f"{script}.json")],
                cwd=sdir, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self._track(proc)
        return proc

    def _wait_ready(self, name: str, script: str, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while not (self.dir.path / script / "out" / "ready").exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = self.dir.read_text(f"{script}/{script}.log").strip()[-400:]
                raise InfrastructureError(f"{name} did not start: {tail}")
            time.sleep(0.02)

    # --- the sandbox --------------------------------------------------------------------

    def _settings(self, proxy_port: int) -> dict[str, Any]:
        assert self.plan.policy is not None
        text, _notes = export(self.plan.policy, "srt", world=self.plan.world)
        settings = rebase_settings(json.loads(text), self.dir.world)
        parent = f"http://{LOOPBACK}:{proxy_port}"
        # an explicit noProxy: srt must not fall back to the grader's NO_PROXY and dial anything itself
        settings["network"]["parentProxy"] = {"http": parent, "https": parent, "noProxy": ""}
        return settings

    def _unrebased(self, settings: dict[str, Any]) -> dict[str, Any]:
        prefix = str(self.dir.world)
        fs = {k: [p[len(prefix):] or "/" for p in v] for k, v in settings["filesystem"].items()}
        net = {k: v for k, v in settings["network"].items() if k != "parentProxy"}
        return {"filesystem": fs, "network": net}

    def _runner_config(self, raw: RawPorts, host_port: int) -> RunnerOrders:
        return runner_config(
            self.plan, token=self.token, timeout=HTTP_TIMEOUT, connect_timeout=CONNECT_TIMEOUT,
            # the attacker's raw listener is on the host's loopback: reachable only if srt's
            # network namespace were missing (inside it, 127.0.0.1 is the sandbox's own)
            attacker_ip=LOOPBACK, raw=raw,
            host_port=host_port, gateway_names=["localhost", *_host_addresses()],
            ca_file=str(self.dir.path / "run" / "ca.pem"), path=lambda p: str(self.dir.host_path(p)),
        )

    def _run_srt(self, settings: dict[str, Any], raw: RawPorts, host_port: int) -> tuple[str, bool]:
        node = shutil.which("node")
        if node is None or not srt_cli().is_file():
            raise SrtUnavailable(srt_problem() or "srt is not installed")
        rdir, odir = self.dir.path / "run", self.dir.path / "opt"
        make_dir(rdir)
        make_dir(odir)
        package = Path(__file__).resolve().parents[1]
        for script in (*(package / "services" / name for name in RUNNER_SCRIPTS), *sorted((package / "protocol").glob("*.py"))):
            if script.name != "__init__.py":  # the runner's scripts and protocol/ whole, as in the sandbox image
                shutil.copy(script, odir / script.name)
        write_file(odir / "boot.py", _BOOT)
        shutil.copy(self.dir.path / "internet" / "out" / "ca.pem", rdir / "ca.pem")
        write_file(rdir / "config.json", dump_orders(self._runner_config(raw, host_port)))
        settings_path = self.dir.path / "srt-settings.json"
        write_file(settings_path, json.dumps(settings, indent=2))
        home = self.dir.host_path(self.plan.world.home)
        # the system interpreter: the runner needs the standard library only, and the
        # unprivileged user may not be able to read the grader's own (e.g. under /root)
        python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else (shutil.which("python3") or sys.executable)
        command = " ".join(shlex.quote(a) for a in ["exec", python, str(odir / "boot.py"), str(rdir / "config.json")])
        tmp = self.dir.path / "tmp"  # srt leaves its proxy sockets in TMPDIR: here they go with the run
        make_dir(tmp, 0o700)
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8", "TMPDIR": str(tmp),
            "PYTHONDONTWRITEBYTECODE": "1", "USER": self.plan.world.user,
        }
        kwargs: dict[str, Any] = {}
        if os.geteuid() == 0:
            # srt and everything under it run as the world's unprivileged user, never as root
            uid = self.plan.world.uid
            os.chown(tmp, uid, uid)
            kwargs.update(user=uid, group=uid, extra_groups=[])
        timeout = self.plan.hardening.timeout_s
        for name in ("runner.out", "srt.err"):
            write_file(self.dir.path / name, b"")  # made with their mode first: opening them below keeps it
        with (self.dir.path / "runner.out").open("wb") as out, (self.dir.path / "srt.err").open("wb") as err:
            proc = subprocess.Popen(
                [node, str(srt_cli()), "--settings", str(settings_path), "-c", command],
                cwd=self.dir.host_path(self.cwd), env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                start_new_session=True, **kwargs,
            )
            self._track(proc)
            try:
                proc.wait(timeout=timeout)
                timed_out = False
            except subprocess.TimeoutExpired:
                _stop(proc)
                timed_out = True
        return self.dir.read_text("runner.out")[:MAX_OUTPUT], timed_out

    def _map_back(self, records: tuple[RunnerRecord, ...]) -> tuple[RunnerRecord, ...]:
        """The runner saw rebased paths; evidence speaks of world paths (file contents stay as read)."""
        prefix = str(self.dir.world)

        def back(text: Optional[str]) -> Optional[str]:
            return text.replace(prefix, "") if text else text

        return tuple(dataclasses.replace(r, detail=back(r.detail) or "", target=back(r.target)) for r in records)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End a process we started and everything in its session: politely, then for sure."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def sweep(scope: Scope) -> list[str]:
    """This backend's part of ``runs.cleanup``: the host processes that runs in ``scope`` left running.

    A SIGKILLed srt run leaves the processes it listed in ``<run>/pids``
    running (the simulated internet, the parent proxy; srt and the socat
    bridges it started in its session). End every process of those sessions
    whose command line names this run directory, and nothing else: a pid
    reused since by an unrelated process never matches.
    """
    removed: list[str] = []
    for d in scope.stale_dirs():
        try:
            listed = {int(x) for x in (d / "pids").read_text().split()} - {0, 1}
        except (OSError, ValueError):
            continue
        for proc in Path("/proc").iterdir():
            try:
                session = int(stat_fields(int(proc.name))[3])
                if session in listed and (str(d) + "/").encode() in (proc / "cmdline").read_bytes():
                    os.kill(int(proc.name), signal.SIGKILL)  # it serves a run that no longer exists
                    removed.append(f"process {proc.name}")
            except (OSError, ValueError, IndexError):
                pass  # not a process, gone already, or not ours to signal
    return removed
