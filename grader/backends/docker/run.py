"""One run of one plan in Docker: connect, start the sandbox, collect the evidence, remove everything; its result a value.

A ``Run`` holds what it made in one ``Resources`` value from the moment each
thing exists, and hands that value to its removal (behind the result, on the
backend's reaper) or, for a run behind one of a hub's proxies, to the hub's
keeper. What it collected comes back as a ``Collected`` value; nothing is
appended to a list of its caller's. Where the internet comes from is the
backend's ``Sharing`` for a run behind a proxy, and an internet of its own for
the plain container.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from grader.core.errors import BackendError, InfrastructureError
from grader.core.evidence import Evidence, NextSession
from grader.core.execution import SIGNER_SOCKET, Execution, Job
from grader.core.next_session import SETTINGS
from grader.core.outcomes import RunResult
from grader.core.plan import Hardening, RunPlan, build_plan
from grader.core.policy import Policy
from grader.core.records import RawPorts
from grader.core.timings import Stopwatch, Tally
from grader.core.verdicts import run_result
from grader.protocol.common import PROXY_PORT
from grader.protocol.wire import dump_orders
from grader.backends.files import Files, host_files
from grader.backends.runlogs import ANY_CLIENT, close_run, forget_run, open_run, proxy_window
from grader.backends.listeners import SigningAgent
from grader.backends.owners import make_dir, write_file
from grader.backends.quota import SCRATCH_FILES, DiskQuotaExceeded, bound_scratch, filled
from grader.backends.runs import MAX_OUTPUT, RunDir, gather_evidence, read_runner_output, resolv_conf, runner_config
from grader.backends.docker import replay, seats
from grader.backends.docker.engine import (
    ContainerRef, DockerEngine, NetworkRef, Refused, Unanswered, mount, worded,
)
from grader.backends.docker.enginedisk import Disk, HostDisk, Listener
from grader.backends.docker.images import Images
from grader.backends.docker.resources import Resources
from grader.backends.docker.seats import SANDBOX_HOSTNAME, SANDBOX_SYSCTLS
from grader.backends.docker.hardening import hardened_options, plan_mounts
from grader.backends.docker.nextready import NextReady, ready_for
from grader.backends.docker.golines import GO, JOB, JOB_AWAIT_GO, RUNNER, runner_end, runner_ready
from grader.backends.docker.sharing import Sharing, Taken
from grader.backends.docker.liveness import BEAT_WAIT, beat_after, poke
from grader.backends.docker.simnet import LABEL_ROLE, Internet, Leftovers, container_ip, start_internet

__all__ = ["Backing", "Collected", "Run", "hardened_options"]  # hardened_options: .hardening's, named here as before

HTTP_TIMEOUT = 5.0  # an HTTP exchange inside the sandbox: the proxy answers at once, even to refuse
CONNECT_TIMEOUT = 1.0  # a raw connect to a black hole; a local bridge answers in microseconds
# TEST-NET-2 (RFC 5737), a documentation address. Only used where the sandbox has no network interface at all
# (network_mode=none), so no packet can exist whatever the address; it stands for the attacker's address that a
# hard-coded payload would carry.
UNROUTABLE_ATTACKER_IP = "198.51.100.66"


@dataclass(frozen=True)
class Backing:
    """What a run uses of its backend: the engine, the images, the disk, the shared internet, and where removals go."""

    engine: DockerEngine
    images: Images
    disk: Disk
    leftovers: Leftovers
    sharing: Sharing
    remove_later: Callable[[Callable[[], None]], None]  # the backend's reaper: removal behind the result
    execute: Callable[[RunPlan, Job], Execution]  # a new sandbox for a job (the next sandboxed session)
    tally: Optional[Tally] = None
    runtime: Optional[str] = None  # the sandbox's OCI runtime (``runtimes``); None: the engine's default

    def harden(self, h: Hardening) -> dict[str, Any]:
        """``hardened_options`` under this backend's runtime: every sandbox of a run (and its next sessions)."""
        return hardened_options(h, self.runtime)


@dataclass(frozen=True)
class Collected:
    """What one run found: its evidence, and what its sandbox printed, how it ended."""

    evidence: Evidence
    output: str
    timed_out: bool
    exit_code: Optional[int]


@dataclass(frozen=True)
class _Net:
    """What the sandbox is attached to for one run."""

    internet: Internet
    key: str  # the run's key at the internet (``runlogs``): its clients' records go to the run's own logs
    sandbox_network: NetworkRef
    taken: Optional[Taken] = None  # behind a proxy: the proxy it took
    since: int = 0  # where the proxy's log ended when this run took it

    @property
    def proxy_ip(self) -> Optional[str]:
        return self.taken.proxy.ip if self.taken is not None else None


class Run:
    """One run of one plan; everything it makes is in ``made``, removed whatever happens."""

    def __init__(self, b: Backing, plan: RunPlan, job: Optional[Job] = None, *, await_go: bool = False,
                 next_at_go: bool = False) -> None:
        self.b, self.plan, self.job = b, plan, job
        self.await_go = await_go and job is not None  # a job made ready ahead: its code waits for the go
        self.next_at_go = next_at_go  # the replay's internet and next session made ready at the go, not at the start
        self.next_started = False  # ``start_next`` ran (once)
        self.next_ready: Optional[NextReady] = None  # the next sandboxed session, made ready while the probes run
        self.run_id = "sl-" + secrets.token_hex(5)
        self.token = secrets.token_hex(6)
        self.labels = b.leftovers.labels(self.run_id)
        self.made = Resources()
        self.net: Optional[_Net] = None
        self.claimed: Optional[Files] = None  # the internet's files where this run claimed its clients (``runlogs``)
        self.ahead: Optional[replay.Ahead] = None  # the replay's internet, started while the sandbox runs
        self.clean = False  # the run finished and every recorder answered: its proxy may serve again
        self.watch = Stopwatch()
        # what ``prepare`` made, for ``fire``
        self.before: dict[str, str] = {}
        self.listener: Optional[Listener] = None
        self.signer: Optional[SigningAgent] = None
        self.sandbox: Optional[ContainerRef] = None
        self.seat: Optional[ContainerRef] = None  # the proxy's seat whose network the sandbox joined (``seats``)
        self.scratch: dict[str, str] = {}
        self.followed: Optional[bytes] = None  # the runner's stdout as read up to its end record (``_ended``)
        self.prepare_s = 0.0
        self.released = False
        with self.watch.phase("world"):
            self.dir = RunDir.create(self.run_id, engine=b.engine)  # and sweeps dead graders' leftovers
            self.made.directory(host_files(self.dir.path))  # the run directory is on the grader's disk, always
            self.copy = b.disk.copy(self.dir, b.images.services, self.run_id, self.labels)

    # --- lifecycle ----------------------------------------------------------------------

    def execute(self, *, final: bool) -> RunResult:
        """The whole run at once: prepared, then fired at once (``prepared`` holds the two apart)."""
        self.prepare()
        return self.finish(final=final)

    def finish(self, *, final: bool) -> RunResult:
        """Fire the prepared run's probes and judge them; everything it made is removed after."""
        started = time.monotonic()
        got = self.fire(final=final)
        with self.watch.phase("evidence"):
            result = run_result(
                got.evidence, self.plan, backend="docker", run_id=self.run_id,
                seconds=self.prepare_s + time.monotonic() - started,  # the work, never the time it waited prepared
                stopped="the sandbox was killed", disagreement="the static prediction was",
            )
        if self.b.tally is not None:
            self.b.tally.add(self.watch.seconds)
        return dataclasses.replace(result, timings=dict(self.watch.seconds))

    def execute_job(self) -> Execution:
        self.prepare()
        return self.fire_job()

    def fire_job(self) -> Execution:
        """Fire a prepared job (its go, if it waits for one) and return what it did; everything is removed after."""
        started = time.monotonic()
        got = self.fire(final=True)
        return Execution(
            backend="docker", output=got.output, exit_code=None if got.timed_out else got.exit_code,
            timed_out=got.timed_out, evidence=got.evidence, run_id=self.run_id,
            seconds=self.prepare_s + time.monotonic() - started,
        )

    def prepare(self) -> None:
        """Everything before the probes: lay out the world, connect, create and start the sandbox. A probe run's
        runner then waits for its go (``fire``); a job's code starts at once. On failure everything made is
        removed and the error raised."""
        started = time.monotonic()
        watch = self.watch
        try:
            with worded(f"run {self.run_id}"):
                with watch.phase("world"):
                    self.before = self.dir.lay_out(self.plan)
                    if self.job is not None:
                        self._plant(self.job)
                with watch.phase("network"):
                    listener = self.listener = self.b.disk.listener(self.b.images.services, self.run_id, self.labels)
                    if listener.container is not None:
                        self.made.container(listener.container)
                    self.net = self._connect(listener.port)
                if self.job is not None and self.job.signer is not None:
                    self.signer = self._signer(self.job)
                self.sandbox = self._start_sandbox(self.net, listener.port)  # times "start"
        except BaseException:
            self.release()
            raise
        self.prepare_s = time.monotonic() - started

    def release(self) -> None:
        """Remove everything the run made (behind the result, on the backend's reaper); once."""
        if self.released:
            return
        self.released = True
        if self.claimed is not None:
            forget_run(self.claimed, self.run_id)  # read or not, the run's logs at the internet go
        if self.listener:
            self.listener.close()
        if self.signer:
            self.signer.close()
        if self.ahead is not None:
            self.ahead.settle(self.made)  # used or not, it is the run's to remove
        if self.next_ready is not None:
            self.next_ready.close()  # taken by the replay, or removed unused
        try:
            self.b.remove_later(self._remove_all)
        except RuntimeError:  # the reaper is shut down (interpreter exit): remove now
            self._remove_all()

    def alive(self) -> bool:
        """Is the prepared sandbox still running (waiting for its go)?"""
        if self.sandbox is None:
            return False
        try:
            return self.b.engine.inspect(self.sandbox).status == "running"
        except Refused:
            return False

    def ready(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the prepared probe runner to say it waits for its go (its interpreter
        started, its imports and orders read): a go sent then costs the probes alone. True once it said so;
        False for a job's run (its shell waits at once), a run not prepared, or one whose runner ended first."""
        if self.sandbox is None or self.job is not None:
            return False
        return self.b.engine.follow(self.sandbox, runner_ready, timeout=timeout, limit=MAX_OUTPUT)

    def fire(self, *, final: bool) -> Collected:
        """Send the prepared run its go, wait for the sandbox, collect the evidence; remove everything after."""
        assert self.sandbox is not None and self.listener is not None and not self.released, "fire() after prepare()"
        sandbox, listener, net, watch = self.sandbox, self.listener, self.net, self.watch
        try:
            with worded(f"run {self.run_id}"):
                timed_out, exit_code = self._go_and_wait(sandbox)  # times "probes"
                evidence_started = time.perf_counter()
                finished = self.b.disk.finished(sandbox)
                self._poke(net)  # the recorders' self-checks after ``finished`` run while the output is read
                text = self._output(sandbox)
                # a listener that stopped heard nothing it could report: its silence proves nothing
                infra = self._infra_problem(net, finished) or listener.problem()
                if infra and not final:
                    raise InfrastructureError(infra)
                self.copy.fetch()
                ev = self._evidence(net, listener, self.before, text, finished, infra=infra, timed_out=timed_out)
                watch.add("evidence", time.perf_counter() - evidence_started)
                self.clean = not infra
                if replay.wanted(self.plan, self.job):  # the user's next session, outside the sandbox
                    with watch.phase("replay"):
                        ev = dataclasses.replace(ev, next_session=self._replay(ev, net))
                return Collected(ev, text, timed_out, exit_code)
        finally:
            self.release()

    def _evidence(self, net: Optional[_Net], listener: Listener, before: dict[str, str], text: str, finished: float, *,
                  infra: str, timed_out: bool) -> Evidence:
        sinks: dict[str, str] = {}

        def logs(name: str) -> str:
            if name == "proxy.jsonl":
                return self._proxy_log(net, finished)
            if net is None:
                return ""
            if not sinks:  # the run's own logs, closed by the internet with records that count them
                sinks.update(close_run(net.internet.out, net.key))
            return sinks[name]

        records, unreadable = read_runner_output(text) if self.job is None else ((), "")
        return gather_evidence(
            self.dir, self.plan, token=self.token, records=records, before=before,
            network=self.plan.network, logs=logs, listener=listener, raw=RawPorts.same(self.plan.world.raw_ports),
            infra=infra, timed_out=timed_out, unreadable=unreadable,
            run_key=net.key if net is not None and not infra else None,
        )

    def _replay(self, ev: Evidence, net: Optional[_Net]) -> NextSession:
        """The next session, given the run's identity, world copy and plan, and the run's resources to add to."""
        world = self.plan.world

        def next_sandbox(policy: Policy, job: Job) -> Execution:
            plan = build_plan(policy, world)  # the same world: the same machine
            held = self.next_ready.take(plan, job) if self.next_ready is not None else None
            if held is not None:
                try:
                    return held.fire_job()
                except InfrastructureError:  # it never read its go: nothing of it ran
                    pass
            return self.b.execute(plan, job)

        session = self._session()
        own = net.internet if net is not None and net.taken is None else None  # the plain container's own internet
        return replay.play(
            session, ev, self.made, images=(self.b.images.sandbox, self.b.images.services), leftovers=self.b.leftovers,
            disk=self.b.disk, harden=self.b.harden, next_sandbox=next_sandbox, internet=own, ahead=self.ahead,
            keep=net.taken.kept(self.clean) if net is not None and net.taken is not None else frozenset(),  # may serve again
        )

    def _ahead(self, net: Optional[_Net]) -> Optional[replay.Ahead]:
        """Start the replay's own internet now, while the sandbox runs, if the user's shells will probably play;
        the plain container's run lends its own internet instead."""
        if (net is not None and net.taken is None) or not replay.likely(self.plan, self.job):
            return None
        b, run_id, session = self.b, self.run_id, self._session()
        workdir = b.disk.files(f"{run_id}-next-internet", lambda: self.dir.path / "next-internet")
        ready: Optional[Callable[[Internet], ContainerRef]] = None
        if replay.prepares(session, b.disk):  # the user's shells too, on it, waiting for their go
            def ready(internet: Internet) -> ContainerRef:
                return replay.ready_shells(session, b.images.sandbox, internet, b.harden, b.leftovers)
        return replay.Ahead(lambda: start_internet(
            b.engine, b.images.services, self.plan.world, workdir, f"{run_id}-next", self.labels, b.leftovers), ready)

    def _session(self) -> replay.Session:
        """What the replay is given of this run: its identity, world copy and plan."""
        return replay.Session(self.b.engine, self.run_id, self.token, self.labels, self.dir, self.copy, self.plan, self.job)

    def _plant(self, job: Job) -> None:
        """Append each planted text to its world file in the run's copy (``Job.check`` allowed only world files)."""
        for path, text in job.plant.items():
            with self.dir.host_path(path).open("a", encoding="utf-8") as fh:
                fh.write(text)

    def _remove_all(self) -> None:
        started = time.perf_counter()
        self._remove_each()
        if self.b.tally is not None:
            self.b.tally.add({"removal": time.perf_counter() - started})

    def _remove_each(self) -> None:
        taken = self.net.taken if self.net is not None else None
        if self.plan.network == "proxy" and self.b.sharing.hand_off(self.run_id, self.made, taken, clean=self.clean):
            return  # the hub's keeper removes them: nobody waits for it
        leftovers = self.b.leftovers  # a failed removal is kept and retried, never dropped
        all_gone = self.made.remove_containers(leftovers)
        if taken is not None and taken.borrowed:
            # The proxy and its network serve the next run only once this run's sandbox is
            # gone from that network, and only after a clean run; otherwise they go too.
            self.b.sharing.give_back(taken, clean=self.clean and all_gone, leftovers=leftovers)
        self.made.remove_rest(leftovers)

    # --- the network --------------------------------------------------------------------

    def _connect(self, host_port: int) -> Optional[_Net]:
        """Attach the run to the simulated internet as its plan says (None: no network at all)."""
        if self.plan.network == "none":
            return None
        if self.plan.network == "open":
            # the plain container sits on the internet's own network: it gets one to itself
            workdir = self.b.disk.files(f"{self.run_id}-internet", lambda: self.dir.path / "internet")
            internet = self.made.internet(start_internet(
                self.b.engine, self.b.images.services, self.plan.world, workdir,
                self.run_id, self.labels, self.b.leftovers, host_stand_in_port=host_port,
            ))
            # its own internet: the run claims every client (the plain container's address is not known yet)
            self._claim(internet, [ANY_CLIENT])
            return _Net(internet, self.run_id, internet.network)
        taken = self.b.sharing.take(self.made, self.plan.world)  # the plan's world: the internet must answer for it
        self.net = _Net(taken.proxy.internet, self.run_id, taken.proxy.network, taken)  # the removal gives it back
        since = st.size if (st := taken.out.stat("proxy.jsonl")) is not None else 0
        net = self.net = dataclasses.replace(self.net, since=since)
        taken.proxy.hand_over(list(self.plan.allowed_domains), list(self.plan.denied_domains))
        # the shared internet writes what this run's proxy sends to this run's own logs: nobody else's traffic
        # can push it out of a window, hide or forge it
        assert taken.proxy.container is not None
        self._claim(taken.proxy.internet, [container_ip(self.b.engine, taken.proxy.container, taken.proxy.internet.network)])
        return net

    def _claim(self, internet: Internet, clients: list[str]) -> None:
        self.claimed = internet.out
        open_run(internet.out, self.run_id, clients)

    def _proxy_log(self, net: Optional[_Net], finished: float) -> str:
        """What the run's proxy logged in its window, whole up to after ``finished`` (``runlogs.proxy_window``;
        ``_poke`` asks the proxy for the self-check that proves it)."""
        if net is None or net.taken is None:
            return ""
        return proxy_window(net.taken.out, net.since, finished, limit=MAX_OUTPUT, wait=BEAT_WAIT)

    def _poke(self, net: Optional[_Net]) -> None:
        """Ask the run's proxy and internet for a self-check now (``liveness.poke``): the beats ``_infra_problem``
        waits for, each after the sandbox finished."""
        if net is not None:
            if net.taken is not None and net.taken.proxy.container is not None:
                poke(self.b.engine, net.taken.proxy.container)
            poke(self.b.engine, net.internet.container)

    def _infra_problem(self, net: Optional[_Net], finished: float) -> str:
        """Empty only if every recorder still runs and answered after the sandbox finished (``_poke`` asked them)."""
        if net is None:
            return ""
        problem = net.internet.problem(answered_after=finished, poked=True) or (
            seats.gone(self.b.engine, self.seat) if self.seat is not None else "")
        if problem:
            return problem
        if net.taken is not None and not beat_after(net.taken.out, finished):
            return "the proxy stopped answering (no heartbeat after the sandbox finished)"
        proxy = net.taken.proxy.container if net.taken is not None and net.taken.borrowed else None
        for c in [*self.made.containers, *([proxy] if proxy is not None else [])]:
            if c.labels.get(LABEL_ROLE) == "proxy":
                now = self.b.engine.inspect(c)
                if now.status != "running":
                    return f"the proxy stopped during the run (status {now.status}, exit code {now.exit_code})"
        return ""

    # --- the sandbox --------------------------------------------------------------------

    def _signer(self, job: Job) -> SigningAgent:
        """The job's signing agent, on this side of the socket: the key stays in this process; the sandbox gets
        only the socket, inside the read-only run directory (connecting to a socket is no write)."""
        assert job.signer is not None
        if not isinstance(self.b.disk, HostDisk):
            raise BackendError(
                "this job needs an SSH-agent socket beside the sandbox, which only a local Docker engine can "
                "share; unset DOCKER_HOST (or SANDBOX_LAB_ENGINE_DISK=remote) to run it"
            )
        rdir = self.dir.path / "run"
        make_dir(rdir, exist_ok=True)
        return SigningAgent(rdir / SIGNER_SOCKET, job.signer)

    def _start_sandbox(self, net: Optional[_Net], host_port: int) -> ContainerRef:
        """Create and start the sandbox; a probe runner waits for its go on stdin (``--await-go``)."""
        started = time.perf_counter()
        plan, h = self.plan, self.plan.hardening
        rdir = self.dir.path / "run"
        make_dir(rdir, exist_ok=True)
        env = {"HOME": "/home/user", "PYTHONDONTWRITEBYTECODE": "1"}
        # the runner reads its orders, then waits for the go on its stdin: the probes fire in ``fire``
        command = RUNNER
        if self.job is not None:
            env.update(self.job.env)
            write_file(rdir / "job.py", self.job.code)
            if self.job.signer is not None:
                env["SSH_AUTH_SOCK"] = f"/opt/sandbox-lab/run/{SIGNER_SOCKET}"
            command = JOB_AWAIT_GO if self.await_go else JOB
        proxy = f"http://{net.proxy_ip}:{PROXY_PORT}" if net is not None and net.proxy_ip else None
        cfg = runner_config(
            plan, token=self.token, timeout=HTTP_TIMEOUT, connect_timeout=CONNECT_TIMEOUT,
            attacker_ip=net.internet.ip if net else UNROUTABLE_ATTACKER_IP, raw=RawPorts.same(plan.world.raw_ports),
            host_port=host_port, gateway_names=["host.docker.internal"], ca_file="/opt/sandbox-lab/run/ca.pem", proxy=proxy,
        )
        if net is None:
            resolv_text = "# no network: no name server\n"
        else:
            ca = net.internet.out.read("ca.pem")
            if not ca:
                raise InfrastructureError("the simulated internet wrote no CA certificate")
            write_file(rdir / "ca.pem", ca)
            env["SSL_CERT_FILE"] = "/opt/sandbox-lab/run/ca.pem"
            if proxy is not None:
                # Behind a proxy the sandbox has no name server: its queries go to its own
                # loopback, where nothing listens, and fail at once (no query leaves it).
                resolv_text = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
                for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
                    env[k] = proxy
            else:
                resolv_text = resolv_conf(net.internet.ip)  # the plain container: the run's own DNS server
        write_file(rdir / "config.json", dump_orders(cfg))
        write_file(self.dir.path / "resolv.conf", resolv_text)
        scratch = self.scratch = self._scratch(h)
        try:
            source = self.copy.place()  # the run directory as it is now: world, mask, runner config, resolv.conf
        finally:
            if self.copy.container is not None:
                self.made.container(self.copy.container)
        options = self.b.harden(h)
        mounts = plan_mounts(self.plan, source)
        if scratch:  # the run's own bounded scratch stands in for Docker's tmpfs over each of those directories
            options["tmpfs"] = {d: o for d, o in options["tmpfs"].items() if d not in scratch}
            mounts += [mount(d, source(rel), type="bind", read_only=False) for d, rel in scratch.items()]
        kwargs: dict[str, object] = dict(  # the engine adapter's create_container keywords (``**options: object``)
            options,
            name=f"{self.run_id}-sandbox", labels={**self.labels, LABEL_ROLE: "sandbox"},
            environment=env, working_dir="/home/user", mounts=mounts,
            stdin_open=self.job is None or self.await_go,  # the go's way in; nothing else is ever written to it
        )
        self.seat = net.taken.seat if net is not None and net.taken is not None and self.b.runtime is None else None
        if self.seat is not None:  # the proxy's network, its hostname and ARP settings as the seat holds them
            kwargs["network_mode"] = f"container:{self.seat.id}"
        else:
            kwargs["hostname"] = SANDBOX_HOSTNAME
            if net is None:
                kwargs["network_mode"] = "none"
            else:
                kwargs["network"] = net.sandbox_network.name
                kwargs["sysctls"] = dict(SANDBOX_SYSCTLS)
        sandbox = self.made.container(self.b.engine.create_container(self.b.images.sandbox, command, **kwargs))
        self.b.engine.start(sandbox)
        self.watch.add("start", time.perf_counter() - started)
        if not self.next_at_go:
            self.start_next()
        return sandbox

    def start_next(self) -> None:
        """Start, each on its own thread, what the replay will want: its internet (the user's shells) and next
        session; once (at the start, the go, or a held run's ``Prepared.complete``, whichever comes first)."""
        if not self.next_started:
            self.next_started = True
            self.ahead, self.next_ready = self._ahead(self.net), self._next_ready()

    def _next_ready(self) -> Optional[NextReady]:
        """The next sandboxed session made ready now (``nextready``): a probe run's, on an engine binding its directory."""
        if self.job is not None or not isinstance(self.b.disk, HostDisk) or not replay.wanted(self.plan, None):
            return None
        b = self.b

        def make(plan: RunPlan, job: Job) -> Run:
            run = Run(b, plan, job, await_go=True)
            run.prepare()  # removes what it made if it fails
            return run

        return ready_for(self.plan, self.token, self.dir.canaries, self.dir.host_path(SETTINGS), make, b.remove_later)

    def _go_and_wait(self, sandbox: ContainerRef) -> tuple[bool, Optional[int]]:
        """Release the probe runner (a job's code runs already) and wait for the sandbox under its wall clock,
        which starts now; a run past its quota is never judged."""
        h = self.plan.hardening
        timeout_s = self.job.timeout_s if self.job is not None else h.timeout_s
        with self.watch.phase("probes"):
            started = time.monotonic()  # before the go: a grader slow to return from sending it gives no more time
            if self.job is None or self.await_go:
                try:
                    self.b.engine.send_stdin(sandbox, (GO + "\n").encode())
                except (Refused, Unanswered) as exc:  # stopped while it waited: never judged, tried again
                    raise InfrastructureError(f"the prepared sandbox could not be sent its go: {exc}") from None
            self.start_next()  # held with ``next_at_go``: now, during the probes, as a cold run's
            if self._ended(sandbox, max(0.0, timeout_s - (time.monotonic() - started))):
                timed_out, exit_code = False, None  # its exit (about 0.1 s of the engine's) is the removal's to see
            else:
                timed_out, exit_code = self._wait(sandbox, max(0.01, timeout_s - (time.monotonic() - started)))
            if self.dir.bounded and filled(self.dir.world):  # never judged: what it wrote past the quota never landed
                raise DiskQuotaExceeded()
            scratch = self.scratch
            if scratch and filled(self.dir.path / "scratch", h.scratch_bytes):
                raise DiskQuotaExceeded(h.scratch_bytes, f"the container's writable directories ({', '.join(scratch)})",
                                        SCRATCH_FILES)
            return timed_out, exit_code

    def _scratch(self, h: Hardening) -> dict[str, str]:
        """The image's writable directories (``Hardening.scratch_dirs``) as this run's: one tmpfs of
        ``scratch_bytes`` in the run directory (``quota.bound_scratch``), so a run that fills it is seen and refused;
        each directory → its stand-in, relative to the run directory. Only where the world copy is bounded the same
        way and the engine binds the run directory itself; elsewhere (not root, a remote engine, whose copy would
        carry the scratch into a volume on its disk) Docker's tmpfs from ``hardened_options`` stays."""
        if not h.scratch_dirs or not (self.dir.bounded and self.dir.handed and isinstance(self.b.disk, HostDisk)):
            return {}
        made = bound_scratch(self.dir.path / "scratch", h.scratch_dirs, h.scratch_bytes)
        return {d: f"scratch/{p.name}" for d, p in made.items()}

    def _ended(self, sandbox: ContainerRef, timeout_s: float) -> bool:
        """Did the probe runner say it ended (its ``end`` record, printed once every probe returned)? Only for the
        probe runner (a job's code is waited for until it exits: what it started may still run), where the engine
        shares this disk and clock (``HostDisk``). After it the runner only exits: its files are in the world copy,
        its records in what was followed (``followed``), its requests at the recorders (their checks after
        ``finished`` prove it). Any other end (a crash, a kill, too much output, the clock) waits for the exit."""
        if self.job is not None or not isinstance(self.b.disk, HostDisk):
            return False
        seen = bytearray()  # what ``logs`` would give of its stdout: one request of the engine's less
        ended = self.b.engine.follow(sandbox, runner_end, timeout=timeout_s, limit=MAX_OUTPUT, into=seen)
        self.followed = bytes(seen) if ended else None
        return ended

    def _wait(self, sandbox: ContainerRef, timeout_s: float) -> tuple[bool, Optional[int]]:
        """Wait for the sandbox under its wall clock: (whether it was killed, its exit code if it exited)."""
        try:
            return False, self.b.engine.wait(sandbox, timeout=timeout_s)
        except (Unanswered, Refused):  # the transport's errors, the engine's answers among them
            # The SDK reports its read timeout in more than one way; ask the engine
            # instead: still running means the wall clock ran out (an engine that
            # does not answer raises here, and the run is a backend error).
            if self.b.engine.inspect(sandbox).status != "running":
                return False, None
            try:
                self.b.engine.kill(sandbox)
            except Refused:  # it finished between the check and the kill (409): nothing to kill
                pass
            return True, None

    def _output(self, sandbox: ContainerRef) -> str:
        # a job's errors are part of what it did; the probe runner's stderr is not evidence
        raw = self.followed if self.followed is not None else self.b.engine.logs(sandbox, stdout=True, stderr=self.job is not None)
        if self.await_go:  # what it printed after its go: without the proof that it read it, nothing of it ran
            if not raw.startswith(replay.ACK):
                raise InfrastructureError("the prepared next session never read its go: nothing of it ran")
            raw = raw[len(replay.ACK):]
        return raw[:MAX_OUTPUT].decode("utf-8", "replace")
