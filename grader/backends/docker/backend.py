"""The Docker backend: runs a plan in real containers and judges the probes from what really happened.

This module is the backend object: what it keeps between runs (images, the
engine's disk, the shared internet, the reaper that removes finished runs) and
the sweep of dead graders' leftovers. One run is ``run.Run``; the docker SDK is
imported and its client held by the adapter (``engine.DockerEngine``) alone, where its errors become ours. Per run:

1. lays out a fresh copy of the world in its run directory, a random
   canary in every file (``runs.RunDir``, shared with the srt backend);
2. connects the simulated internet (``simnet``) when the plan has any network:
   the plain container gets an internet of its own; a scoped network gets its
   own filtering ``proxy`` in front of the shared internet (``sharing``: the
   machine's, kept by ``hub``'s keeper process, or with sharing off the backend's own);
3. starts the sandbox, hardened as the plan says, with only the plan's mounts
   of the world copy, and waits for it under a wall clock;
4. collects the evidence outside the sandbox and hands it to ``evidence.judge``;
5. removes every container, network and directory it made, whatever happened
   (a run behind a proxy hands them to the hub's keeper, so nobody waits).

Steps 1-3 can happen ahead of time: ``prepare(plan)`` holds a run ready up to
its probes, and its ``go`` does the rest (``prepared``); ``run`` is
``prepare(plan).go()``, one path.

Every object is labelled ``org.sandbox-lab.run=<run id>`` so ``cleanup`` can
remove what a killed run left behind (``sweep`` is this backend's part of
``cleanup.cleanup``).

An engine on another machine (``DOCKER_HOST=tcp://…`` or ``ssh://…``) cannot
bind the grader's directories: there ``enginedisk`` sends the world copy and
the services' files through the engine's API, and listens on the engine's
host. Which one is chosen once per backend (``enginedisk.disk_for``).
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Callable, Optional

from grader.core.errors import DockerUnavailable, InfrastructureError
from grader.core.execution import Execution, Job
from grader.core.outcomes import RunResult
from grader.core.plan import RunPlan
from grader.core.timings import Tally
from grader.backends import cleanup as cleaning
from grader.backends.base import Closing
from grader.backends.owners import runs_root
from grader.backends.docker.engine import BeingRemoved, DockerEngine, EngineError, Missing, Refused, open_engine, worded
from grader.backends.docker.enginedisk import Disk, HostDisk, disk_for
from grader.backends.docker.hub import HubSharing, make_hub, stop_keepers
from grader.backends.docker.images import Images, ensure_images
from grader.backends.docker.lease import IDLE_ENV, idle_seconds
from grader.backends.docker.prepared import IDLE_S, Prepared
from grader.backends.docker.run import Backing, Run, hardened_options
from grader.backends.docker.runtimes import runtime_from_env, sandbox_runtime
from grader.backends.docker.sharing import InProcess, Sharing
from grader.backends.docker.simnet import LABEL, LABEL_NS, LABEL_PID, LABEL_ROLE, LABEL_STARTED, Leftovers, SharedInternet
from grader.backends.docker.proxies import ProxyPool
from grader.backends.docker.seats import PoolSeats

# how long a sweep waits before it asks once more for a network the engine refused: a container just removed
# from it can hold its endpoint that long (``hubpool.retry_once`` waits the same)
NETWORK_SETTLE_S = 0.2

__all__ = [
    "LABEL", "LABEL_PID", "LABEL_ROLE", "DockerBackend", "Prepared", "cleanup", "client_from_env", "hardened_options", "runs_root",
    "sharing_for", "sweep",
]


def client_from_env() -> DockerEngine:
    """The engine adapter for ``DOCKER_HOST`` (or the default socket), at the API version the engine speaks, seen to
    answer; ``DockerUnavailable`` otherwise."""
    try:
        engine = open_engine()
        engine.ping()
        return engine
    # any failure here means "no engine": the SDK's and its transport's are the adapter's EngineErrors by now;
    # OSError: a socket or a certificate file the SDK opens itself
    except (EngineError, OSError) as exc:
        raise DockerUnavailable(str(exc).splitlines()[0][:160]) from None


def cleanup(engine: DockerEngine, *, everything: bool = False) -> list[str]:  # the CLI's (and tests') name
    """Remove leftovers of runs whose grader process is gone (or of all runs, with ``everything``).

    Every real backend's leftovers, not only Docker's: this is ``cleanup.cleanup``
    with ``engine`` as the engine to sweep.
    """
    return cleaning.cleanup(everything=everything, engine=engine)


def sweep(scope: cleaning.Scope) -> list[str]:
    """This backend's part of ``cleanup.cleanup``: labelled containers and networks of the runs in ``scope``."""
    if scope.automatic and scope.engine is None:
        return []  # a run's own sweep reaches only the engine its backend holds
    engine = scope.engine if scope.engine is not None else client_from_env()
    # a hub's keeper removes what it keeps as it stops; then the labels find whatever it could not
    removed: list[str] = stop_keepers() if scope.everything else []

    def stale(labels: dict[str, str]) -> bool:
        try:
            started = labels.get(LABEL_STARTED) or None
            return scope.gone(int(labels.get(LABEL_PID, "0")), labels.get(LABEL_NS), int(started) if started else None)
        except ValueError:
            return not scope.automatic  # no pid to judge: only an explicit cleanup takes it

    with worded("cleanup"):  # an engine that goes away mid-sweep is said so, with what to check
        return removed + _sweep_labelled(engine, stale)


def _sweep_labelled(engine: cleaning.Engine, stale: Callable[[dict[str, str]], bool]) -> list[str]:
    removed: list[str] = []
    # the engine's list carries labels: no per-container lookup that a concurrent removal could race
    for c in engine.containers({"label": LABEL}):
        if stale(dict(c.labels)):
            try:
                engine.remove_container(c.id)
            except BeingRemoved:
                pass  # its dead maker's own removal, still under way in the engine: it goes, and is said to
            except Missing:
                continue
            removed.append(f"container {c.name or c.id[:12]}")
    refused = [n for n in engine.networks({"label": LABEL}) if stale(dict(n.labels)) and not _remove_network(engine, n, removed)]
    if refused:
        # a network whose container the loop above just removed can still hold its endpoint for a moment (the
        # engine tears it down after the removal returns): asked once more, it goes; one still in use stays
        time.sleep(NETWORK_SETTLE_S)
        for n in refused:
            _remove_network(engine, n, removed)
    return removed


def _remove_network(engine: cleaning.Engine, n: cleaning.Labelled, removed: list[str]) -> bool:
    """Remove ``n``, said in ``removed``; False only when the engine refused it (still in use), True once it is gone."""
    try:
        engine.remove_network(n.id)
    except Missing:  # gone meanwhile (a Refused too): nothing to ask again
        return True
    except Refused:
        return False
    removed.append(f"network {n.name}")
    return True


def sharing_for(engine: DockerEngine, image: str, leftovers: Leftovers, disk: Disk, idle: Optional[float], *,
                seated: bool = True) -> Sharing:
    """Where runs behind a proxy find their internet: the one place the mode is chosen.

    The machine's hub when sharing between processes is on (an idle period
    above 0) and the engine shares the grader's disk; else the backend's own
    internet and proxies. ``idle``: None reads ``SANDBOX_LAB_SHARED_IDLE`` if
    it is set, else 0 (off).
    """
    if idle is None:
        idle = idle_seconds() if IDLE_ENV in os.environ else 0.0
    # a remote engine's disk is reached through this process's client only: there the internet is always our own
    hub = make_hub(engine, image, leftovers, idle) if isinstance(disk, HostDisk) else None
    if hub is not None:
        return HubSharing(engine, image, hub, leftovers)
    shared = SharedInternet(engine, image, leftovers, disk=disk)  # for the world of the runs' plans, from the first
    # seats for its proxies unless its sandboxes run under another runtime (they never join one: ``run.Run``)
    seating = PoolSeats(engine, image, leftovers) if seated else None
    return InProcess(shared, ProxyPool(engine, image, shared, leftovers, disk=disk, seating=seating))


def _shutdown(reaper: ThreadPoolExecutor, sharing: Sharing, leftovers: Leftovers, held: set[Prepared]) -> None:
    for prepared in list(held):  # first: their removals go to the reaper, which finishes them below
        prepared.close()
    # The last reference to a backend may drop inside a removal it scheduled; a
    # thread cannot wait for itself, and the removals still queued run anyway.
    inside = threading.current_thread().name.startswith("sandbox-lab-reaper")
    reaper.shutdown(wait=not inside)
    sharing.close()
    leftovers.retry()


class DockerBackend(Closing):
    """Runs plans in Docker containers; one sandbox container per run, all probes inside it."""

    name = "docker"
    # set to a Tally to add every run's phase times to it (bench/batch.py); None: only RunResult.timings
    tally: Optional[Tally] = None

    def __init__(
        self, engine: DockerEngine, images: Images, *, retries: int = 1, disk: Optional[Disk] = None, shared_idle: Optional[float] = None,
        runtime: Optional[str] = None,
    ) -> None:
        """Args:
            engine: the engine adapter (``engine.open_engine``, or ``DockerEngine`` over a client).
            disk: where a run's files live for the engine; None chooses from ``DOCKER_HOST``
                (``enginedisk.disk_for``).
            shared_idle: how long the internet behind proxies outlives this
                backend's last use, shared with every grader on the machine
                (``hub``); 0 keeps one to this backend, removed when it closes.
                None: ``SANDBOX_LAB_SHARED_IDLE`` if it is set, else 0. One-shot
                commands ask for sharing (``backends.get(..., shared=True)``).
                A remote engine's disk is reached through this process's
                client only, so there the internet is always this backend's own.
            runtime: the OCI runtime every sandbox runs under (e.g. gVisor's
                ``runsc``); None: ``SANDBOX_LAB_RUNTIME`` if set, else the engine's
                default. One the engine has not registered is refused here
                (``runtimes.RuntimeUnavailable``), before anything is made.
        """
        # first: a runtime asked for and missing fails before any internet or proxy exists
        self.engine = engine
        self.runtime = sandbox_runtime(engine, runtime if runtime is not None else runtime_from_env(os.environ))
        self.images = images
        self.retries = retries
        # the grader's disk, or the engine's own when it runs elsewhere: chosen once, for every run and service
        self.disk = disk if disk is not None else disk_for(engine)
        self.leftovers = Leftovers(engine)
        self.sharing = sharing_for(engine, images.services, self.leftovers, self.disk, shared_idle, seated=self.runtime is None)
        # Removing a finished run's containers takes a few hundred milliseconds that
        # nobody waits for: it happens here, behind the result. drain() waits for it.
        self._reaper = ThreadPoolExecutor(max_workers=4, thread_name_prefix="sandbox-lab-reaper")
        self._removals: list[Future[None]] = []
        # the prepared runs held (``prepare``), each until its go or its retirement: retired when the backend goes
        self._held: set[Prepared] = set()
        # everything goes when the backend does, or at interpreter exit
        self._finalizer = weakref.finalize(self, _shutdown, self._reaper, self.sharing, self.leftovers, self._held)

    @classmethod
    def from_env(
        cls, progress: Callable[[str], None] = lambda s: None, *, shared_idle: Optional[float] = None, runtime: Optional[str] = None,
    ) -> "DockerBackend":
        engine = client_from_env()
        return cls(engine, ensure_images(engine, progress), shared_idle=shared_idle, runtime=runtime)

    def drain(self) -> None:
        """Wait until every finished run's containers, networks and directories are removed,
        and the proxy pool has finished refilling."""
        self._finish_removals()
        self.sharing.settle()  # and what the runs handed a hub's keeper is gone too

    def _finish_removals(self) -> None:
        while self._removals:  # and the removals those scheduled (a preparation that ended after its run)
            pending, self._removals = self._removals, []
            wait(pending)
        self.leftovers.retry()

    def standing(self) -> set[str]:
        """Names of the containers, networks and directories the backend keeps between runs."""
        return self.sharing.standing()

    def close(self) -> None:
        """Finish the removals, then remove the warm proxies and the shared internet (all also happen at exit).

        A shared hub is not removed: this backend's lease on it lapses after the
        idle period, and what its runs handed the keeper is removed without
        anyone waiting (a terminal's one-shot run exits at once).
        """
        for prepared in list(self._held):
            prepared.close()
        self._finish_removals()
        self.sharing.close()
        self.leftovers.retry()
        self.leftovers.sweep()

    def _remove_later(self, removal: Callable[[], None]) -> None:
        if len(self.leftovers):
            self._reaper.submit(self.leftovers.retry)
        self._removals = [f for f in self._removals if not f.done()]
        self._removals.append(self._reaper.submit(removal))

    def _backing(self) -> Backing:
        return Backing(self.engine, self.images, self.disk, self.leftovers, self.sharing, self._remove_later, self.execute,
                       self.tally, self.runtime)

    def run(self, plan: RunPlan) -> RunResult:
        return self.prepare(plan, idle_s=None).go()

    def prepare(self, plan: RunPlan, *, idle_s: Optional[float] = IDLE_S, next_at_go: bool = False) -> Prepared:
        """Make ``plan``'s run ready up to its probes (``prepared``); its ``go`` returns what ``run`` would.

        Held until its go, retired after ``idle_s`` unused (None: never; ``run`` fires it at once), and at
        ``close`` or exit. A preparation that failed in a way worth trying again leaves ``go`` to run cold.
        ``next_at_go``: what the replay will want (its internet, the next sandboxed session) is started at the
        go, during the probes, as a cold run's is, not now: the held run is one waiting sandbox, and making it
        ready costs the machine one container start while the learner may be running something else.
        """
        held = idle_s is not None
        made = Run(self._backing(), plan, next_at_go=next_at_go)
        run: Optional[Run] = made
        try:
            made.prepare()
        except InfrastructureError:
            run = None  # go() tries again, cold, as many times as a run is retried
        prepared = Prepared(plan, run, fresh=lambda: Run(self._backing(), plan),
                            images=(lambda: self._image_ids()) if held else None,  # looked up at each go
                            retries=self.retries, idle_s=idle_s, on_done=self._held.discard)
        if held and prepared.state == "ready":
            self._held.add(prepared)
        return prepared

    def _image_ids(self) -> tuple[str, str]:
        """The ids the two images' tags name now: another id is another build (``sandbox-lab setup`` rebuilt it)."""
        with worded("images"):
            return self.engine.image_id(self.images.sandbox), self.engine.image_id(self.images.services)

    def execute(self, plan: RunPlan, job: Job) -> Execution:
        """Run ``job``'s code in the sandbox ``plan`` describes, in place of the probes; never retried
        (the code is the learner's: it runs once, and what it did is what is reported)."""
        job.check(plan.world)
        return Run(self._backing(), plan, job).execute_job()
