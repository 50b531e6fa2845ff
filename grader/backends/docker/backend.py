"""The Docker backend: runs a plan in real containers and judges the probes from what really happened.

The only module that imports ``docker`` (apart from ``images``, which builds
what this one runs). Per run it:

1. lays out a fresh copy of the world in its run directory, a random
   canary in every file (``runs.RunDir``, shared with the srt backend);
2. connects the simulated internet (``simnet``) when the plan has any network:
   the plain container gets an internet of its own; a scoped network gets its
   own filtering ``proxy`` in front of the shared internet (the machine's,
   kept by ``hub``'s keeper process, or with sharing off the backend's own);
3. starts the sandbox, hardened as the plan says, with only the plan's mounts
   of the world copy, and waits for it under a wall clock;
4. collects the evidence outside the sandbox and hands it to ``evidence.judge``;
5. removes every container, network and directory it made, whatever happened
   (a run behind a proxy hands them to the hub's keeper, so nobody waits).

Every object is labelled ``org.sandbox-lab.run=<run id>`` so ``cleanup`` can
remove what a killed run left behind (``sweep`` is this backend's part of
``runs.cleanup``).

An engine on another machine (``DOCKER_HOST=tcp://…`` or ``ssh://…``) cannot
bind the grader's directories: there ``enginedisk`` sends the world copy and
the services' files through the engine's API, and listens on the engine's
host. Which one is chosen once per backend (``enginedisk.disk_for``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import threading
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional


from grader.core.errors import BackendError, DockerUnavailable, InfrastructureError
from grader.core.evidence import Evidence, log_window, self_checked_after
from grader.core.execution import SIGNER_SOCKET, Execution, Job
from grader.core.outcomes import RunResult
from grader.core.verdicts import run_result
from grader.core.plan import Hardening, RunPlan
from grader.core.timings import Stopwatch, Tally
from grader.services.common import PROXY_PORT, TCP_SINK_PORT
from grader.services.wire import WireError
from grader.backends import runs
from grader.backends.docker import replay
from grader.backends.base import Closing
from grader.backends.files import Files, host_path
from grader.backends.docker.engine import LogConfig, Missing, Mount, Refused, Ulimit, Unanswered, engine_errors, open_client
from grader.backends.docker.enginedisk import Disk, HostDisk, Listener, disk_for
from grader.backends.docker.hub import Hub, HubInternet, HubPool, make_hub, stop_keepers
from grader.backends.docker.lease import IDLE_ENV, idle_seconds
from grader.backends.docker.images import Images, ensure_images
from grader.backends.runs import (
    MAX_OUTPUT,
    RunDir,
    SigningAgent,
    gather_evidence,
    read_runner_output,
    run_with_retries,
    runner_config,
    runs_root,
)
from grader.backends.docker.simnet import (
    LABEL,
    LABEL_NS,
    LABEL_PID,
    LABEL_ROLE,
    Internet,
    Leftovers,
    BEAT_WAIT,
    beat_after,
    ProxyPool,
    SharedInternet,
    WarmProxy,
    container_ip,
    start_internet,
)
from grader.backends.runlogs import ANY_CLIENT, close_run, forget_run, open_run

__all__ = ["LABEL", "LABEL_PID", "DockerBackend", "cleanup", "client_from_env", "hardened_options", "runs_root", "sweep"]

# how far before a run's window of the proxy's log to read for the line that numbers it: a proxy record is at
# most a 64 KiB request head, JSON-escaped (up to 6 bytes a byte), plus its other fields
PROXY_TAIL = 1 << 20
HTTP_TIMEOUT = 5.0  # an HTTP exchange inside the sandbox: the proxy answers at once, even to refuse
CONNECT_TIMEOUT = 1.0  # a raw connect to a black hole; a local bridge answers in microseconds
# TEST-NET-2 (RFC 5737), a documentation address. Only used where the sandbox
# has no network interface at all (network_mode=none), so no packet can exist
# whatever the address; it stands for the attacker's address that a
# hard-coded payload would carry.
UNROUTABLE_ATTACKER_IP = "198.51.100.66"


def client_from_env() -> Any:
    """A docker client for ``DOCKER_HOST`` (or the default socket), at the API version the engine speaks."""
    try:
        client = open_client()
        client.ping()
        return client
    except Exception as exc:  # noqa: BLE001 - any failure here means "no engine"
        raise DockerUnavailable(str(exc).splitlines()[0][:160]) from None


def cleanup(client: Any, *, everything: bool = False) -> list[str]:
    """Remove leftovers of runs whose grader process is gone (or of all runs, with ``everything``).

    Every real backend's leftovers, not only Docker's: this is ``runs.cleanup``
    with ``client`` as the engine to sweep.
    """
    return runs.cleanup(everything=everything, engine=client)


def sweep(scope: runs.Scope) -> list[str]:
    """This backend's part of ``runs.cleanup``: labelled containers and networks of the runs in ``scope``."""
    if scope.automatic and scope.engine is None:
        return []  # a run's own sweep reaches only the engine its backend holds
    client = scope.engine if scope.engine is not None else client_from_env()
    # a hub's keeper removes what it keeps as it stops; then the labels find whatever it could not
    removed: list[str] = stop_keepers() if scope.everything else []

    def stale(labels: dict[str, str]) -> bool:
        try:
            return scope.gone(int(labels.get(LABEL_PID, "0")), labels.get(LABEL_NS))
        except ValueError:
            return not scope.automatic  # no pid to judge: only an explicit cleanup takes it

    # the low-level list carries labels: no per-container lookup that a concurrent removal could race
    for c in client.api.containers(all=True, filters={"label": LABEL}):
        if stale(c.get("Labels") or {}):
            with engine_errors(ignore=(Missing,)):
                client.api.remove_container(c["Id"], force=True, v=True)
                removed.append(f"container {c['Names'][0].lstrip('/') if c.get('Names') else c['Id'][:12]}")
    for n in client.api.networks(filters={"label": LABEL}):
        if stale(n.get("Labels") or {}):
            with engine_errors(ignore=(Refused,)):
                client.api.remove_network(n["Id"])
                removed.append(f"network {n['Name']}")
    return removed


def _shutdown(reaper: ThreadPoolExecutor, proxies: ProxyPool, shared: SharedInternet, leftovers: Leftovers) -> None:
    # The last reference to a backend may drop inside a removal it scheduled; a
    # thread cannot wait for itself, and the removals still queued run anyway.
    inside = threading.current_thread().name.startswith("sandbox-lab-reaper")
    reaper.shutdown(wait=not inside)
    proxies.close()
    shared.close()
    leftovers.retry()


class DockerBackend(Closing):
    """Runs plans in Docker containers; one sandbox container per run, all probes inside it."""

    name = "docker"
    # set to a Tally to add every run's phase times to it (bench/batch.py); None: only RunResult.timings
    tally: Optional[Tally] = None

    def __init__(
        self, client: Any, images: Images, *, retries: int = 1, disk: Optional[Disk] = None, shared_idle: Optional[float] = None,
    ) -> None:
        """Args:
            disk: where a run's files live for the engine; None chooses from ``DOCKER_HOST``
                (``enginedisk.disk_for``).
            shared_idle: how long the internet behind proxies outlives this
                backend's last use, shared with every grader on the machine
                (``hub``); 0 keeps one to this backend, removed when it closes.
                None: ``SANDBOX_LAB_SHARED_IDLE`` if it is set, else 0. One-shot
                commands ask for sharing (``backends.get(..., shared=True)``).
                A remote engine's disk is reached through this process's
                client only, so there the internet is always this backend's own.
        """
        from grader.core.world import load_world

        self.client = client
        self.images = images
        self.retries = retries
        # the grader's disk, or the engine's own when it runs elsewhere: chosen once, for every run and service
        self.disk = disk if disk is not None else disk_for(client)
        self.leftovers = Leftovers()
        if shared_idle is None:
            shared_idle = idle_seconds() if IDLE_ENV in os.environ else 0.0
        self.hub: Optional[Hub] = (
            make_hub(client, images.services, self.leftovers, shared_idle) if isinstance(self.disk, HostDisk) else None
        )
        if self.hub is not None:
            self.proxies: ProxyPool = HubPool(client, images.services, self.hub, self.leftovers)
            self.shared: SharedInternet = HubInternet(self.hub)
        else:
            self.shared = SharedInternet(client, images.services, load_world(), self.leftovers, disk=self.disk)
            self.proxies = ProxyPool(client, images.services, self.shared, self.leftovers, disk=self.disk)
        # Removing a finished run's containers takes a few hundred milliseconds that
        # nobody waits for: it happens here, behind the result. drain() waits for it.
        self._reaper = ThreadPoolExecutor(max_workers=4, thread_name_prefix="sandbox-lab-reaper")
        self._removals: list[Future[None]] = []
        # everything goes when the backend does, or at interpreter exit
        self._finalizer = weakref.finalize(self, _shutdown, self._reaper, self.proxies, self.shared, self.leftovers)

    @classmethod
    def from_env(cls, progress: Callable[[str], None] = lambda s: None, *, shared_idle: Optional[float] = None) -> "DockerBackend":
        client = client_from_env()
        return cls(client, ensure_images(client, progress), shared_idle=shared_idle)

    def drain(self) -> None:
        """Wait until every finished run's containers, networks and directories are removed,
        and the proxy pool has finished refilling."""
        self._finish_removals()
        if self.hub is not None:
            self.hub.settle()  # what the runs handed the hub's keeper is gone too
        self.proxies.settle()

    def _finish_removals(self) -> None:
        pending, self._removals = self._removals, []
        wait(pending)
        self.leftovers.retry()

    def standing(self) -> set[str]:
        """Names of the containers, networks and directories the backend keeps between runs."""
        return self.proxies.standing() | self.shared.standing()

    def close(self) -> None:
        """Finish the removals, then remove the warm proxies and the shared internet (all also happen at exit).

        A shared hub is not removed: this backend's lease on it lapses after the
        idle period, and what its runs handed the keeper is removed without
        anyone waiting (a terminal's one-shot run exits at once).
        """
        self._finish_removals()
        self.proxies.settle()
        self.proxies.close()
        self.shared.close()
        self.leftovers.retry()
        self.leftovers.sweep(self.client)

    def _remove_later(self, removal: Callable[[], None]) -> None:
        if len(self.leftovers):
            self._reaper.submit(self.leftovers.retry)
        self._removals = [f for f in self._removals if not f.done()]
        self._removals.append(self._reaper.submit(removal))

    def run(self, plan: RunPlan) -> RunResult:
        return run_with_retries(lambda final: _Run(self, plan).execute(final=final), self.retries)

    def execute(self, plan: RunPlan, job: Job) -> Execution:
        """Run ``job``'s code in the sandbox ``plan`` describes, in place of the probes; never retried
        (the code is the learner's: it runs once, and what it did is what is reported)."""
        job.check(plan.world)
        return _Run(self, plan, job).execute_job()


@dataclass
class _Net:
    """What the sandbox is attached to for one run."""

    internet: Internet
    owned: bool  # the plain container's own internet, removed with the run
    key: str  # the run's key at the internet (``runlogs``): its clients' records go to the run's own logs
    sandbox_network: Any
    proxy_ip: Optional[str] = None


def hardened_options(h: Hardening) -> dict[str, Any]:
    """The container settings that lock a sandbox down, exactly as ``h`` says; pure, no Docker call.

    The one place a ``Hardening`` becomes ``containers.create`` keywords, so the
    backend's sandbox and the tests that start hostile code in the same
    hardening cannot drift apart. The caller adds what belongs to one run:
    name, labels, environment, working directory, hostname, mounts, network.
    """
    opts: dict[str, Any] = dict(
        user=h.user,
        read_only=h.read_only_root,
        # a private, bounded /tmp: filling it fills only this run's
        tmpfs={"/tmp": f"size={h.tmp_bytes},mode=1777"},
        shm_size=h.shm_bytes,
        # explicit, not the daemon's default: a connection flood stops at the plan's number
        ulimits=[Ulimit(name="nofile", soft=h.nofile, hard=h.nofile)],
        # swap equal to memory: a run cannot page the machine to a halt
        pids_limit=h.pids_limit, mem_limit=h.mem_bytes, memswap_limit=h.mem_bytes, nano_cpus=h.nano_cpus,
        # bounded logs: a chatty or hostile run cannot fill the engine's disk
        log_config=LogConfig(type="json-file", config={"max-size": "8m"}),
    )
    if h.cap_drop_all:
        opts["cap_drop"] = ["ALL"]
    if h.no_new_privileges:
        opts["security_opt"] = ["no-new-privileges"]
    return opts


def _gone(leftovers: Leftovers, container: Any) -> bool:
    """Remove ``container``; True once it is gone. A failed removal is kept in ``leftovers`` to try again."""
    try:
        with engine_errors():
            container.remove(force=True, v=True)
        return True
    except Missing:
        return True
    except Exception:  # noqa: BLE001 - the engine may be away: kept and retried, and not gone
        leftovers.remove(container)
        return False


class _Run:
    """One run of one plan; owns every resource it creates and removes them all."""

    def __init__(self, backend: DockerBackend, plan: RunPlan, job: Optional[Job] = None) -> None:
        self.b = backend
        self.client = backend.client
        self.plan = plan
        self.job = job
        self.exit_code: Optional[int] = None
        self.signer: Optional[SigningAgent] = None  # the job's signing agent, on this side of the socket
        self.run_id = "sl-" + secrets.token_hex(5)
        self.token = secrets.token_hex(6)
        self.labels = backend.leftovers.labels(self.run_id)
        self.containers: list[Any] = []
        self.networks: list[Any] = []
        self.owned_internet: Optional[Internet] = None
        self.extra_dirs: list[Files] = []
        self.proxy_out: Optional[Files] = None
        self.claim: Optional[Path] = None  # the warm proxy's claim in the hub's directory
        self.warm: Optional[WarmProxy] = None  # borrowed from the backend's own pool; given back once the sandbox is gone
        self.proxy_since = 0  # where the borrowed proxy's log ended when this run took it
        self.claimed: Optional[Files] = None  # the internet's files where this run claimed its clients (``runlogs``)
        self.clean = False  # the run finished and every recorder answered: its proxy may serve again
        self.watch = Stopwatch()
        with self.watch.phase("world"):
            self.dir = RunDir.create(self.run_id, engine=backend.client)  # and sweeps dead graders' leftovers
            self.copy = backend.disk.copy(self.dir, backend.images.services, self.run_id, self.labels)

    # --- lifecycle ----------------------------------------------------------------------

    def execute(self, *, final: bool) -> RunResult:
        started = time.monotonic()
        ev = self._run_and_collect(final=final)
        with self.watch.phase("evidence"):
            result = run_result(
                ev, self.plan, backend="docker", run_id=self.run_id, seconds=time.monotonic() - started,
                stopped="the sandbox was killed", disagreement="the static prediction was",
            )
        if self.b.tally is not None:
            self.b.tally.add(self.watch.seconds)
        return dataclasses.replace(result, timings=dict(self.watch.seconds))

    def execute_job(self) -> Execution:
        started = time.monotonic()
        output: list[str] = []
        timed: list[bool] = []
        ev = self._run_and_collect(final=True, output=output, timed=timed)
        return Execution(
            backend="docker", output=output[0] if output else "", exit_code=None if timed and timed[0] else self.exit_code,
            timed_out=bool(timed and timed[0]), evidence=ev, run_id=self.run_id, seconds=time.monotonic() - started,
        )

    def _run_and_collect(self, *, final: bool, output: Optional[list[str]] = None, timed: Optional[list[bool]] = None) -> Evidence:
        """Lay out the world, connect, run the sandbox, collect the evidence; remove everything after."""
        listener: Optional[Listener] = None
        watch = self.watch
        try:
            with engine_errors(f"run {self.run_id}"):
                with watch.phase("world"):
                    before = self.dir.lay_out(self.plan)
                    if self.job is not None:
                        self._plant(self.job)
                with watch.phase("network"):
                    listener = self.b.disk.listener(self.b.images.services, self.run_id, self.labels)
                    if listener.container is not None:
                        self.containers.append(listener.container)
                    net = self._connect(listener.port)
                sandbox, timed_out = self._run_sandbox(net, listener.port)  # times "start" and "probes"
                evidence_started = time.perf_counter()
                finished = self.b.disk.finished(sandbox)
                if self.plan.network == "proxy" and self.warm is None:
                    self.b.proxies.refill()  # now, not earlier: the build would compete with the sandbox's start
                text = self._output(sandbox)
                # a listener that stopped heard nothing it could report: its silence proves nothing
                infra = self._infra_problem(net, finished) or listener.problem()
                if infra and not final:
                    raise InfrastructureError(infra)
                if output is not None:
                    output.append(text)
                if timed is not None:
                    timed.append(timed_out)
                self.copy.fetch()

                sinks: dict[str, str] = {}

                def logs(name: str) -> str:
                    if name == "proxy.jsonl":
                        return self._proxy_log(finished)
                    if net is None:
                        return ""
                    if not sinks:  # the run's own logs, closed by the internet with records that count them
                        sinks.update(close_run(net.internet.out, net.key))
                    return sinks[name]

                records, unreadable = read_runner_output(text) if self.job is None else ((), "")
                ev = gather_evidence(
                    self.dir, self.plan, token=self.token, records=records, before=before,
                    network=self.plan.network, logs=logs, listener=listener, tcp_port=TCP_SINK_PORT,
                    infra=infra, timed_out=timed_out, unreadable=unreadable,
                    run_key=net.key if net is not None and not infra else None,
                )
                watch.add("evidence", time.perf_counter() - evidence_started)
                self.clean = not infra
                if replay.wanted(self.plan, self.job):  # the user's next session, outside the sandbox
                    ev = dataclasses.replace(ev, next_session=replay.play(
                        self, ev, images=(self.b.images.sandbox, self.b.images.services), leftovers=self.b.leftovers,
                        disk=self.b.disk, harden=hardened_options, execute=self.b.execute, internet=self.owned_internet,
                    ))
                return ev
        finally:
            if self.claimed is not None:
                forget_run(self.claimed, self.run_id)  # read or not, the run's logs at the internet go
            if listener:
                listener.close()
            if self.signer:
                self.signer.close()
            try:
                self.b._remove_later(self._remove_all)
            except RuntimeError:  # the reaper is shut down (interpreter exit): remove now
                self._remove_all()

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
        # a proxy the hub's pool could not give (none warm) was built by this process: it goes with the rest
        own = [self.warm] if self.b.hub is not None and self.warm is not None and self.warm.container is not None else []
        if self.plan.network == "proxy" and self.b.hub is not None and self.b.hub.discard(self.run_id, {
            "containers": [c.id for c in [*self.containers, *(w.container for w in own)]],
            "networks": [n.id for n in [*self.networks, *(w.network for w in own)]],
            "dirs": [str(self.dir.path), *(str(host_path(d)) for d in [*self.extra_dirs, *(w.workdir for w in own)])],
        }, self.claim):
            return  # the hub's keeper removes them: nobody waits for it
        remove = self.b.leftovers.remove  # a failed removal is kept and retried, never dropped
        gone: list[bool] = []

        def remove_container(c: Any) -> None:
            gone.append(_gone(self.b.leftovers, c))

        threads = [threading.Thread(target=remove_container, args=(c,)) for c in self.containers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.warm is not None:
            # The proxy and its network serve the next run only once this run's sandbox is
            # gone from that network, and only after a clean run; otherwise they go too.
            if self.clean and all(gone):
                kept = self.b.proxies.give_back(self.warm)
            else:
                self.warm.remove(self.b.leftovers)
                kept = False
            if not kept:
                self.b.proxies.refill()  # now, not earlier: the build would compete with the sandbox's start
        for n in self.networks:
            remove(n)
        if self.owned_internet is not None:
            self.owned_internet.remove(self.b.leftovers)
        for d in self.extra_dirs:
            d.remove()
        shutil.rmtree(self.dir.path, ignore_errors=True)

    # --- the network --------------------------------------------------------------------

    def _connect(self, host_port: int) -> Optional[_Net]:
        """Attach the run to the simulated internet as its plan says (None: no network at all)."""
        if self.plan.network == "none":
            return None
        if self.plan.network == "open":
            # the plain container sits on the internet's own network: it gets one to itself
            workdir = self.b.disk.files(f"{self.run_id}-internet", lambda: self.dir.path / "internet")
            internet = start_internet(
                self.client, self.b.images.services, self.plan.world, workdir,
                self.run_id, self.labels, self.b.leftovers, host_stand_in_port=host_port,
            )
            self.owned_internet = internet
            # its own internet: the run claims every client (the plain container's address is not known yet)
            self._claim(internet, [ANY_CLIENT])
            return _Net(internet, True, self.run_id, internet.network)
        warm = self.b.proxies.take()
        if warm.claim is not None:
            # a hub's proxy (shared between processes): this run's alone, removed with it
            self.containers.append(warm.container)
            self.networks.append(warm.network)
            self.extra_dirs.append(warm.workdir)
            self.claim = warm.claim
        else:
            self.warm = warm  # this run's alone until its removal gives it back (or removes it)
        self.proxy_out = warm.workdir.sub("out")
        self.proxy_since = st.size if (st := self.proxy_out.stat("proxy.jsonl")) is not None else 0
        warm.hand_over(list(self.plan.allowed_domains), list(self.plan.denied_domains))
        # the shared internet writes what this run's proxy sends to this run's own logs: nobody else's traffic
        # can push it out of a window, hide or forge it
        assert warm.container is not None
        self._claim(warm.internet, [container_ip(warm.container, warm.internet.network)])
        return _Net(warm.internet, False, self.run_id, warm.network, warm.ip)

    def _claim(self, internet: Internet, clients: list[str]) -> None:
        self.claimed = internet.out
        open_run(internet.out, self.run_id, clients)

    def _proxy_log(self, finished: float) -> str:
        """What the run's proxy logged since the run took it, shown whole up to a moment after the sandbox
        finished; WireError past the cap (a flood of its own run), or where a line is lost, repeated, moved or cut.

        Whole: its lines number on from the line before the window (``evidence.log_window``), and it holds one
        of the proxy's own self-checks decided after ``finished`` (``evidence.self_checked_after``; the proxy
        makes one every ``HEARTBEAT_INTERVAL``), so nothing it logged before then is missing at the end.
        """
        if self.proxy_out is None:
            return ""
        deadline = time.monotonic() + BEAT_WAIT
        while True:
            # with the tail before the run's window: its last line numbers the window's first
            start = max(0, self.proxy_since - PROXY_TAIL)
            data = self.proxy_out.read("proxy.jsonl", start, self.proxy_since - start + MAX_OUTPUT + 1)
            before, window = data[: self.proxy_since - start], data[self.proxy_since - start :]
            if len(window) > MAX_OUTPUT:
                raise WireError(f"proxy.jsonl: more than {MAX_OUTPUT} bytes in this run")
            # a last line not yet whole is one the proxy is writing now: it is after the self-check that proves the
            # rest whole, or that check is not there yet; either way it is read on the next pass
            window = window[: window.rfind(b"\n") + 1]
            text = log_window(before.decode("utf-8", "replace"), window.decode("utf-8", "replace"), "proxy.jsonl",
                              from_start=start == 0)
            if self_checked_after(text, finished):
                return text
            if time.monotonic() > deadline:
                raise WireError("proxy.jsonl: no self-check of the proxy logged after the sandbox finished, so the log "
                                "cannot be shown whole up to then (cut at its end, or the proxy stopped deciding)")
            time.sleep(0.02)

    def _infra_problem(self, net: Optional[_Net], finished: float) -> str:
        """Empty only if every recorder still runs and answered after the sandbox finished."""
        if net is None:
            return ""
        problem = net.internet.problem(answered_after=finished)
        if problem:
            return problem
        if self.proxy_out is not None and not beat_after(self.proxy_out, finished):
            return "the proxy stopped answering (no heartbeat after the sandbox finished)"
        for c in [*self.containers, *([self.warm.container] if self.warm is not None else [])]:
            if c.labels.get(LABEL_ROLE) == "proxy":
                c.reload()
                if c.status != "running":
                    code = c.attrs.get("State", {}).get("ExitCode")
                    return f"the proxy stopped during the run (status {c.status}, exit code {code})"
        return ""

    # --- the sandbox --------------------------------------------------------------------

    def _mounts(self, source: Callable[[str], str]) -> list[Any]:
        """The plan's mounts of the run directory; ``source`` says where a path of it is for the engine."""
        mounts = [
            Mount("/opt/sandbox-lab/run", source("run"), type="bind", read_only=True),
            Mount("/etc/resolv.conf", source("resolv.conf"), type="bind", read_only=True),
        ]
        for m in self.plan.mounts:
            if m.kind == "bind":
                # the same path as RunDir.host_path(m.source), relative to the run directory
                world_path = "world/" + m.source.lstrip("/")
                mounts.append(Mount(m.target, source(world_path), type="bind", read_only=m.mode != "rw"))
            elif m.kind == "tmpfs":
                # private and tiny: writes here never reach the world copy
                mounts.append(Mount(m.target, None, type="tmpfs", tmpfs_size=64 * 1024, tmpfs_mode=0o755))
            else:
                mounts.append(Mount(m.target, source("mask/empty"), type="bind", read_only=True))
        return mounts

    def _run_sandbox(self, net: Optional[_Net], host_port: int) -> tuple[Any, bool]:
        started = time.perf_counter()
        plan, h = self.plan, self.plan.hardening
        rdir = self.dir.path / "run"
        rdir.mkdir()
        env = {"HOME": "/home/user", "PYTHONDONTWRITEBYTECODE": "1"}
        command = ["python3", "/opt/sandbox-lab/probe_runner.py"]
        timeout_s = h.timeout_s
        if self.job is not None:
            env.update(self.job.env)
            (rdir / "job.py").write_text(self.job.code, encoding="utf-8")
            if self.job.signer is not None and not isinstance(self.b.disk, HostDisk):
                raise BackendError(
                    "this job needs an SSH-agent socket beside the sandbox, which only a local Docker engine can "
                    "share; unset DOCKER_HOST (or SANDBOX_LAB_ENGINE_DISK=remote) to run it"
                )
            if self.job.signer is not None:
                # the key stays in this process; the sandbox gets only the socket, inside the
                # read-only run directory (connecting to a socket is no write)
                self.signer = SigningAgent(rdir / SIGNER_SOCKET, self.job.signer)
                env["SSH_AUTH_SOCK"] = f"/opt/sandbox-lab/run/{SIGNER_SOCKET}"
            command = ["python3", "-u", "/opt/sandbox-lab/run/job.py"]
            timeout_s = self.job.timeout_s
        cfg = runner_config(
            plan, token=self.token, timeout=HTTP_TIMEOUT, connect_timeout=CONNECT_TIMEOUT,
            attacker_ip=net.internet.ip if net else UNROUTABLE_ATTACKER_IP, tcp_port=TCP_SINK_PORT,
            host_port=host_port, gateway_names=["host.docker.internal"], ca_file="/opt/sandbox-lab/run/ca.pem",
        )
        if net is None:
            resolv_text = "# no network: no name server\n"
        else:
            ca = net.internet.out.read("ca.pem")
            if not ca:
                raise InfrastructureError("the simulated internet wrote no CA certificate")
            (rdir / "ca.pem").write_bytes(ca)
            env["SSL_CERT_FILE"] = "/opt/sandbox-lab/run/ca.pem"
            if net.proxy_ip:
                # Behind a proxy the sandbox has no name server: its queries go to its own
                # loopback, where nothing listens, and fail at once (no query leaves it).
                resolv_text = "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n"
                cfg["proxy"] = f"http://{net.proxy_ip}:{PROXY_PORT}"
                for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
                    env[k] = cfg["proxy"]
            else:
                # the plain container: every DNS query goes to the run's own DNS server
                resolv_text = f"nameserver {net.internet.ip}\noptions timeout:1 attempts:1\n"
        (rdir / "config.json").write_text(json.dumps(cfg))
        (self.dir.path / "resolv.conf").write_text(resolv_text)
        try:
            source = self.copy.place()  # the run directory as it is now: world, mask, runner config, resolv.conf
        finally:
            if self.copy.container is not None:
                self.containers.append(self.copy.container)
        kwargs: dict[str, Any] = dict(
            hardened_options(h),
            name=f"{self.run_id}-sandbox", labels={**self.labels, LABEL_ROLE: "sandbox"},
            environment=env, working_dir="/home/user", hostname="sandbox", mounts=self._mounts(source),
        )
        if net is None:
            kwargs["network_mode"] = "none"
        else:
            kwargs["network"] = net.sandbox_network.name
            # An address no one answers on this bridge (the phantom gateway, other
            # networks) fails after one 100 ms ARP try instead of three 1 s tries:
            # the kernel says "no route to host" sooner; nothing becomes reachable.
            kwargs["sysctls"] = {"net.ipv4.neigh.eth0.retrans_time_ms": "100", "net.ipv4.neigh.eth0.mcast_solicit": "1"}
        sandbox = self.client.containers.create(self.b.images.sandbox, command, **kwargs)
        self.containers.append(sandbox)
        sandbox.start()
        self.watch.add("start", time.perf_counter() - started)
        with self.watch.phase("probes"):
            return self._wait(sandbox, timeout_s)

    def _wait(self, sandbox: Any, timeout_s: float) -> tuple[Any, bool]:
        """Wait for the sandbox under its wall clock: (the sandbox, whether it was killed)."""
        try:
            with engine_errors():
                status = sandbox.wait(timeout=timeout_s)
            self.exit_code = int(status.get("StatusCode", -1)) if isinstance(status, dict) else None
            return sandbox, False
        except (Unanswered, Refused):  # the transport's errors, the engine's answers among them
            # The SDK reports its read timeout in more than one way; ask the engine
            # instead: still running means the wall clock ran out (an engine that
            # does not answer raises here, and the run is a backend error).
            sandbox.reload()
            if sandbox.status != "running":
                return sandbox, False
            with engine_errors(ignore=(Refused,)):
                sandbox.kill()  # it finished between the check and the kill (409): nothing to kill
            return sandbox, True

    def _output(self, sandbox: Any) -> str:
        # a job's errors are part of what it did; the probe runner's stderr is not evidence
        raw: bytes = sandbox.logs(stdout=True, stderr=self.job is not None)
        return raw[:MAX_OUTPUT].decode("utf-8", "replace")
