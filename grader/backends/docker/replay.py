"""The next session, played in Docker: what the user runs after the sandbox exits, against the run's world copy.

A backdoor in ``~/.bashrc`` or a git hook does nothing inside the sandbox; it
fires in the user's next shell or commit, outside it, with full network. After
the sandbox has exited and its evidence is collected, ``play`` plays that
moment (``next_session`` says what it plays):

1. the user's shells and commit run in a *separate* container, as the user
   (uid of the world), with the world copy mounted at its paths, read-write,
   as the user's machine sees it, and nothing else of the host; hardened with
   the sandbox's limits (pids, memory, wall clock, no capabilities, read-only
   root) and on the plain container's network: an internet of its own
   (``simnet.start_internet``; the plain container's own, reused, when the
   run has one), its DNS server the only name server, on an internal bridge
   with no route off the machine;
2. the next *sandboxed* session, when the sandbox's settings file was
   rewritten: the settings are read as that session would read them, and the
   backend runs a session under them (the probes' next session sends the key;
   a job's is the same code again), on the same machine, so with the same key.

What the recorders logged is the ``NextSession`` evidence; what a backdoor
prints decides nothing. The replay is given the run's identity, world copy and
plan (``Session``), and the run's ``Resources``: everything made here is
labelled with the run's id and added to them, so the run removes it with its
own. The next sandboxed session is run by the caller (``next_sandbox``), who
compiles its plan from the settings the replay read.

A probe run plays only when something the next session runs changed (after
the scope scan's own marks are set aside): otherwise it would run the world's
own files, in which nothing waits. A job asks for it (``Job.replay``).

What it costs the learner who waits: at most one container start after the
sandbox exits, and usually none. The shells' own internet is started while the
sandbox runs (``Ahead``) when the policy lets the sandbox write a file the
shells run (``likely``: a hint for scheduling, never a verdict; the evidence
still decides whether anything plays). Where the engine binds the run directory
itself (a local engine, the world copy the sandbox's user's: the mounts' sources
are known before the sandbox exits), the shells' container is created and
started then too, on that internet, and waits for a go line on its stdin before
it runs anything (``ready_shells``): the go is sent only once the sandbox has
exited and its evidence is collected, and its bind mounts show the world copy
as the sandbox left it. If it could not be made, the shells start cold as
before; if they need not play, it is removed with the run's resources. The user's
shells run in one container, and the next sandboxed session runs at the same time
as they do (the two share nothing: the next session lays out its own world copy
and has its own logs); the run's sandbox and proxy are removed meanwhile. Where
the policy lets the probes rewrite the settings, that session too is made ready
while the sandbox runs, for the settings they will most likely write
(``nextready``), and fired only if they are the ones the replay reads here.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Generic, Optional, TypeVar, Union


from grader.core.errors import BackendError, InfrastructureError
from grader.core.evidence import Evidence, Markers, NextSession, sha256
from grader.protocol.wire import DnsRecord, HttpRecord, TcpRecord, WireError
from grader.core.execution import Execution, Job
from grader.core.next_session import KEY, SETTINGS, driver_script, parse_driver_output, read_settings, steal_code, steps
from grader.core.plan import Hardening, RunPlan
from grader.core.policy import Policy
from grader.core.probes import probe
from grader.backends.docker.engine import (
    ContainerRef, DockerEngine, DockerError, EngineError, Missing, NetworkRef, Refused, Unanswered, mount,
)
from grader.backends.docker.enginedisk import Disk, RunCopy
from grader.backends.docker.resources import Resources, gone
from grader.backends.runlogs import ANY_CLIENT, close_run, forget_run, open_run
from grader.backends.owners import make_dir, write_file
from grader.backends.runs import MAX_OUTPUT, RunDir, read_sinks, resolv_conf
from grader.backends.docker.simnet import LABEL_ROLE, Internet, Leftovers, start_internet

__all__ = [
    "REPLAY_HARDENING", "Ahead", "Session", "awaiting_go", "changed_paths", "likely", "next_job", "play", "prepares", "ready_shells", "wanted",
]

T = TypeVar("T")

# The sandbox's own limits, every restriction on: the replay runs what the sandbox wrote, which is hostile
REPLAY_HARDENING = Hardening()

NEXT = ["bash", "/opt/sandbox-lab/run/next.sh"]  # the user's shells and commits, in order (``driver_script``)
GO = "go"  # the line a prepared shells container waits for on stdin (as the probe runner's ``--await-go``)
ACK = b"@@go\n"  # what it prints once it read its go, before anything else: the proof the shells ran after it
# A prepared shells container runs nothing before its go: it reads one line, and anything else (end of input: the
# run was retired, or its grader went away) ends it with nothing run. Then it says so (``ACK``: a go written to a
# container that had stopped is lost without an error) and runs the driver as ``NEXT`` runs it cold: the same
# process (exec), its stdin /dev/null as a container's without one, so no step reads the go's pipe.


def awaiting_go(shell: str, command: list[str]) -> list[str]:
    """``command`` as ``shell`` runs it once it read its go line, ``ACK`` first; anything else ends it, nothing run
    (the prepared shells here, and the next sandboxed session's job made ready ahead: ``nextready``)."""
    return [shell, "-c", f'IFS= read -r line; [ "$line" = {GO} ] || exit 3; '
            f'echo {ACK.decode().strip()}; exec {" ".join(command)} </dev/null']


AWAIT_GO = awaiting_go("bash", NEXT)


@dataclass(frozen=True)
class Session:
    """What a run hands the replay: its engine and identity, its world copy and its plan."""

    engine: DockerEngine
    run_id: str
    token: str
    labels: dict[str, str]
    dir: RunDir
    copy: RunCopy
    plan: RunPlan
    job: Optional[Job]


def wanted(plan: RunPlan, job: Optional[Job]) -> bool:
    """Does this run play the next session at all? A job when it asks; a probe run when it writes anything."""
    if job is not None:
        return job.replay
    return plan.scan or any(probe(p).action == "write" for p in plan.probes)


def likely(plan: RunPlan, job: Optional[Job]) -> bool:
    """Will the user's shells probably play? True when a job asks for it, or the policy lets the sandbox write a
    file they run. Only a hint to start their internet early (``Ahead``): whether they play is the evidence's."""
    if job is not None:
        return job.replay
    if not wanted(plan, job):
        return False
    access = plan.access
    return any(access.write(p).allowed for s in steps(plan.world) for p in s.runs)


class _Thread(Generic[T]):
    """One call in a thread of its own; ``result`` waits for it and returns its value or raises what it raised."""

    def __init__(self, name: str, call: Callable[[], T]) -> None:
        self._call = call
        self._value: Optional[T] = None
        self._error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def _work(self) -> None:
        try:
            self._value = self._call()
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for the result
            self._error = exc

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._value is not None
        return self._value


@dataclass(frozen=True)
class _Up:
    """What the replay's start ahead made: its internet, and the user's shells waiting for their go (None: cold)."""

    internet: Internet
    shells: Optional[ContainerRef] = None
    why: str = ""  # why the shells were not prepared: they start cold, as without ``ready``


class Ahead:
    """The replay's own internet, started in a thread while the sandbox runs, and (given ``ready``) the user's
    shells on it, waiting for their go; added to the run's resources (removed with the run's own, whether the replay
    used them or not) once they are taken or the run ends."""

    def __init__(self, start: Callable[[], Internet], ready: Optional[Callable[[Internet], ContainerRef]] = None) -> None:
        self._start = _Thread("replay-internet", lambda: _up(start, ready))
        self._held = False

    def take(self, made: Resources) -> Internet:
        """The running internet (waits for its start; raises what the start raised)."""
        return self._take(made).internet

    def shells(self, made: Resources) -> Optional[ContainerRef]:
        """The user's shells, started and waiting for their go (None: not prepared; raises what the start raised)."""
        return self._take(made).shells

    def _take(self, made: Resources) -> _Up:
        up = self._start.result()
        if not self._held:
            made.internet(up.internet)
            if up.shells is not None:  # the run removes it, whether it plays or not
                made.container(up.shells)
            self._held = True
        return up

    def settle(self, made: Resources) -> None:
        """Wait for the start to end; whatever it made is the run's to remove (a failed start removed its own)."""
        try:
            self._take(made)
        except BaseException:  # noqa: BLE001 - the replay reported it if it needed the internet; nothing is left
            pass


def _up(start: Callable[[], Internet], ready: Optional[Callable[[Internet], ContainerRef]]) -> _Up:
    internet = start()
    if ready is None:
        return _Up(internet)
    try:
        return _Up(internet, ready(internet))
    except Exception as exc:  # noqa: BLE001 - never a verdict: the shells start cold after the sandbox, as before
        return _Up(internet, why=str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__)


def changed_paths(ev: Evidence, world_paths: set[str], scan_text: str) -> set[str]:
    """The world paths whose content differs from the run's start, the scope scan's own marks set aside."""
    out = set()
    for p in world_paths:
        after, before = ev.after.get(p), ev.before.get(p)
        if before is None:
            continue
        if after is None or sha256(after.replace(scan_text.encode(), b"")) != before:
            out.add(p)
    return out


def play(
    run: Session, ev: Evidence, made: Resources, *, images: tuple[str, str], leftovers: Leftovers, disk: Disk,
    harden: Callable[[Hardening], dict[str, Any]], next_sandbox: Callable[[Policy, Job], Execution],
    internet: Optional[Internet] = None, ahead: Optional[Ahead] = None, keep: frozenset[str] = frozenset(),
) -> NextSession:
    """Play the user's next session after ``run``'s sandbox exited; its evidence, never an exception for what it ran.

    Args:
        made: the run's resources: what the replay makes is added to them (the run removes it whatever
            happens), and the sandbox, its proxy and their networks in them are removed now.
        images: the sandbox image (the user's shells) and the services image (the internet).
        disk: where the engine finds the run's files (``enginedisk``): the world copy is bound from there.
        harden: turns a ``Hardening`` into container options (``docker.hardened_options``).
        next_sandbox: runs a job in a new sandbox under a policy, in the run's world (the backend compiles
            its plan): the next sandboxed session.
        internet: the plain container's own internet, when the run has one: the replay reuses it (the
            sandbox has exited, so whatever it logs from here on is the replay's); otherwise the replay
            starts an internet of its own and removes it as soon as it is done.
        ahead: the replay's own internet, started while the sandbox ran (``likely``); the run removes it.
        keep: ids in ``made`` not to remove now: a hub's proxy and its network that may serve the next run
            (``sharing.Taken.kept``); the run hands them back after the replay.
    """
    started = time.monotonic()
    world, job = run.plan.world, run.job
    scan_text = Markers(run.token, world.attacker.name).scan_text
    played_by_shells = {p for s in steps(world) for p in s.runs}
    changed = changed_paths(ev, played_by_shells | {SETTINGS}, scan_text)
    forced = job is not None and job.replay
    if not forced and not changed:
        return NextSession(skipped="nothing the next session runs was changed: it ran the world's own files",
                           seconds=time.monotonic() - started)
    release = _Thread("replay-release", _releasing(run, made, leftovers, keep))
    # the next sandboxed session shares nothing with the user's shells: it runs while they do
    later: Optional[_Thread[Union[Execution, str]]] = None
    said = ""
    if SETTINGS in changed:
        policy, why = _settings(run, ev)
        if policy is None:
            said = why
        else:
            said = "allowedDomains: " + (", ".join(policy.network.allowedDomains) or "no host")
            nxt = _next_job(run, ev)
            later = _Thread("next-sandbox", lambda: _next_execution(next_sandbox, policy, nxt))
    ns = NextSession()
    try:
        if forced or changed & played_by_shells:
            try:
                ns = _shells(run, made, images, leftovers, disk, harden, internet, ahead)
            except (EngineError, InfrastructureError) as exc:
                # the replay's own machinery failed: nothing can be said of what the next session did
                ns = NextSession(infra_problem=f"the next session could not be played: {str(exc).splitlines()[0][:200]}")
        else:
            ns = replace(ns, skipped="no start-up file or hook was changed: the user's shells and commits ran the world's own files")
    finally:
        got = later.result() if later is not None else None
        release.result()
    if SETTINGS not in changed:
        ns = replace(ns, settings="the settings were not changed: the next sandboxed session keeps the original rules")
    elif got is None:
        ns = replace(ns, settings=said)
    else:
        ns = _merge(ns, said, got)
    return replace(ns, seconds=time.monotonic() - started)


def _releasing(run: Session, made: Resources, leftovers: Leftovers, keep: frozenset[str] = frozenset()) -> Callable[[], bool]:
    """Removes the run's sandbox, its seat, proxy (and their network) and its copy's holder, while the replay plays: their
    evidence is collected (the world copy is back in the run directory), and a busy engine has few bridge networks
    to give. What to remove is listed now, before the replay adds its own things to ``made``; what ``keep`` names
    (a hub's proxy and its network that may serve again) stays for the run's removal to hand back."""
    done = [c for c in made.containers if c.id not in keep and (
            c.labels.get(LABEL_ROLE) in ("sandbox", "proxy", "seat") or run.copy.container is not None and c.id == run.copy.container.id)]
    things: list[Union[ContainerRef, NetworkRef]] = [*done, *(n for n in made.networks if n.id not in keep)]

    def release() -> bool:
        for thing in things:  # containers before their networks
            leftovers.remove(thing)
        return True

    return release


# --- the user's shells and commits ------------------------------------------------------------


def _shells(
    run: Session, made: Resources, images: tuple[str, str], leftovers: Leftovers, disk: Disk,
    harden: Callable[[Hardening], dict[str, Any]], internet: Optional[Internet], ahead: Optional[Ahead] = None,
) -> NextSession:
    world, engine = run.plan.world, run.engine
    ready: Optional[ContainerRef] = None
    if internet is None and ahead is not None:
        internet = ahead.take(made)  # started while the sandbox ran; the run removes it with its own
        ready = ahead.shells(made)  # on it, waiting for the go (None: they start cold)
    own = internet is None
    if internet is None:
        workdir = disk.files(f"{run.run_id}-next-internet", lambda: run.dir.path / "next-internet")
        internet = start_internet(engine, images[1], world, workdir, f"{run.run_id}-next", run.labels, leftovers)
        made.container(internet.container)  # the run removes them with its own, whatever happens here
        made.network(internet.network)
    try:
        return _drive(run, made, images[0], internet, disk, harden, ready, leftovers)
    finally:
        if own:  # freed now, not with the run: a bridge network is a scarce thing on a busy engine
            internet.remove(leftovers)


def _drive(run: Session, made: Resources, image: str, internet: Internet, disk: Disk,
           harden: Callable[[Hardening], dict[str, Any]], ready: Optional[ContainerRef], leftovers: Leftovers) -> NextSession:
    key = f"{run.run_id}-next"
    open_run(internet.out, key, [ANY_CLIENT])  # the replay's internet is its own: it claims every client
    try:
        return _play(run, made, image, internet, disk, harden, key, ready, leftovers)
    finally:
        forget_run(internet.out, key)


def prepares(run: Session, disk: Disk) -> bool:
    """Can the user's shells be made ready while the sandbox runs? Only where the engine binds the run directory
    itself (a local engine, the world copy given to the sandbox's user): there the mounts' sources are known now,
    and the shells see the sandbox's writes as it makes them. Elsewhere the world copy reaches the engine by a copy
    made after the sandbox exits (``enginedisk``), which a container made before would not see."""
    return not disk.remote and run.dir.handed


def ready_shells(run: Session, image: str, internet: Internet, harden: Callable[[Hardening], dict[str, Any]],
                 leftovers: Leftovers) -> ContainerRef:
    """Create and start the user's shells on ``internet`` while the sandbox runs, waiting for their go (``play``
    sends it, once the sandbox has exited and its evidence is collected); only where ``prepares`` says so.

    Its files (the driver, its resolv.conf, the internet's CA) go in the run directory now, read-only to the
    sandbox, which gains nothing from them: the driver is the world's, the CA a public certificate. A container
    that could not be started is removed here (it is nobody's yet), or kept in ``leftovers`` to try again.
    """
    assert run.copy.container is None, "ready_shells() where the engine binds the run directory itself (prepares)"
    source = _lay_out(run, internet)
    opts = _options(run, internet, source, harden)
    # its own name: a cold start after a failed go cannot collide with what is left of this one
    opts["name"] = f"{run.run_id}-next-ready"
    container = run.engine.create_container(image, AWAIT_GO, **opts, stdin_open=True)  # the go's way in
    try:
        run.engine.start(container)
    except BaseException:
        gone(leftovers, container)
        raise
    return container


def _lay_out(run: Session, internet: Internet) -> Callable[[str], str]:
    """Write the shells' files in the run directory and place it for the engine; where each of its paths is."""
    world = run.plan.world
    rdir = run.dir.path / "run"
    make_dir(rdir, exist_ok=True)
    write_file(rdir / "next.sh", driver_script(world))
    # the plain container's network: the replay's own DNS server is its only name server
    write_file(rdir / "next-resolv.conf", resolv_conf(internet.ip))
    # the user's machine trusts the simulated internet's certificates as a real one trusts real CAs:
    # a backdoor that speaks HTTPS to the attacker works in the next session as it would on a laptop
    ca = internet.out.read("ca.pem")
    if not ca:
        raise InfrastructureError("the next session's internet has no certificate authority (ca.pem)")
    write_file(rdir / "next-ca.pem", ca)
    return run.copy.place()  # the run directory as it is now: the world copy as the sandbox left it


def _options(run: Session, internet: Internet, source: Callable[[str], str],
             harden: Callable[[Hardening], dict[str, Any]]) -> dict[str, Any]:
    """The shells' container settings: the same for a cold start and a prepared one."""
    world = run.plan.world
    mounts = [
        mount("/opt/sandbox-lab/run", source("run"), type="bind", read_only=True),
        mount("/etc/resolv.conf", source("run/next-resolv.conf"), type="bind", read_only=True),
        # the world copy as the user's machine sees it: every root at its path, writable; nothing else of the host
        *(mount(root, source("world/" + root.lstrip("/")), type="bind", read_only=False) for root in world.roots),
    ]
    return dict(
        harden(replace(REPLAY_HARDENING, user=f"{world.uid}:{world.uid}")),
        name=f"{run.run_id}-next", labels={**run.labels, LABEL_ROLE: "next-session"},
        environment={"HOME": world.home, "USER": world.user, "LOGNAME": world.user, "SHELL": "/bin/bash",
                     "PYTHONDONTWRITEBYTECODE": "1", "SSL_CERT_FILE": "/opt/sandbox-lab/run/next-ca.pem"},
        working_dir=world.home, hostname="laptop", mounts=mounts, network=internet.network.name,
    )


def _go(engine: DockerEngine, ready: ContainerRef, leftovers: Leftovers) -> bool:
    """Send the prepared shells their go; False when it could not be sent and they ran nothing (removed now: the
    shells start cold). Raises InfrastructureError where the go may have reached them: a second start could play
    the world twice, and the first one's traffic is in the replay's logs."""
    try:
        # stopped before its go (nothing runs before it): it ran nothing, and a go written to it now would be lost
        if engine.inspect(ready).status != "running":
            gone(leftovers, ready)
            return False
        engine.send_stdin(ready, (GO + "\n").encode())
        return True
    except Missing:
        return False
    except (Refused, Unanswered) as exc:
        why = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    try:
        now = engine.inspect(ready)
        # the driver prints a line before each step: a stopped container that printed nothing ran nothing
        ran = now.status == "running" or bool(engine.logs(ready, stdout=True, stderr=True))
    except Missing:
        ran = False
    except (Refused, Unanswered):
        ran = True  # cannot tell
    if ran or not gone(leftovers, ready):
        raise InfrastructureError(f"the prepared next session could not be sent its go ({why})")
    return False


def _play(run: Session, made: Resources, image: str, internet: Internet, disk: Disk,
          harden: Callable[[Hardening], dict[str, Any]], key: str, ready: Optional[ContainerRef],
          leftovers: Leftovers) -> NextSession:
    engine = run.engine
    if ready is not None and _go(engine, ready, leftovers):
        container = ready  # its wall clock starts with the go
    else:
        try:
            source = _lay_out(run, internet)
        finally:
            if run.copy.container is not None:
                made.container(run.copy.container)
        container = made.container(engine.create_container(image, NEXT, **_options(run, internet, source, harden)))
    h = REPLAY_HARDENING
    try:
        if container is not ready:
            engine.start(container)
        timed_out = _wait(engine, container, h.timeout_s)
        finished = disk.finished(container)
        raw = engine.logs(container, stdout=True, stderr=True)
    finally:
        try:
            engine.remove_container(container)
        except DockerError:  # it is the run's too: removed (or kept for a retry) with the run's own
            pass
    if container is ready:
        if not raw.startswith(ACK):  # stopped between the check and the go: it played nothing, and proves nothing
            raise InfrastructureError("the prepared next session never read its go: nothing of it was played")
        raw = raw[len(ACK):]  # what the driver printed, as a cold start's
    output = raw[:MAX_OUTPUT].decode("utf-8", "replace")
    problem = internet.problem(answered_after=finished)
    http: tuple[HttpRecord, ...] = ()
    dns: tuple[DnsRecord, ...] = ()
    tcp: tuple[TcpRecord, ...] = ()
    if not problem:
        try:
            texts = close_run(internet.out, key)
            http, dns, tcp, incomplete = read_sinks(lambda name: texts[name], key)
            problem = incomplete  # a replay's log that lost records proves no absence
        except WireError as exc:  # read in part, the replay's logs prove nothing: an infrastructure error
            http, dns, tcp = (), (), ()
            problem = f"the next session's evidence cannot be read whole ({exc})"
    return NextSession(
        played=tuple(sid for sid, _, _ in parse_driver_output(output)), output=output,
        http=http, dns=dns, tcp=tcp, infra_problem=problem, timed_out=timed_out,
    )


def _wait(engine: DockerEngine, container: ContainerRef, timeout_s: float) -> bool:
    """Wait for the container under its wall clock; True when it had to be killed."""
    try:
        engine.wait(container, timeout=timeout_s)
        return False
    except (Unanswered, Refused):  # the transport's errors, the engine's answers among them
        if engine.inspect(container).status != "running":
            return False
        try:
            engine.kill(container)
        except Refused:  # it finished between the check and the kill
            pass
        return True


# --- the next sandboxed session -------------------------------------------------------------


def _settings(run: Session, ev: Evidence) -> tuple[Optional[Policy], str]:
    """The rewritten settings, read as the next session would read them (None and why it would not start)."""
    text = (ev.after.get(SETTINGS) or b"").replace(Markers(run.token, run.plan.world.attacker.name).scan_text.encode(), b"")
    return read_settings(text.decode("utf-8", "replace"))


def _next_job(run: Session, ev: Evidence) -> Job:
    """What the next sandboxed session runs: a job's own code once more, or the probes' key theft."""
    return next_job(run.plan, run.job, run.token, ev.canaries.get(KEY, ""))


def next_job(plan: RunPlan, job: Optional[Job], token: str, key_canary: str) -> Job:
    """What the next sandboxed session of a run of ``plan`` runs (``job``: the run's own, if any), given the run's
    token and the canary of the key it laid out: known before the probes fire (``nextready``)."""
    world = plan.world
    if job is not None:
        return Job(code=job.code, plant=job.plant, env=job.env, timeout_s=job.timeout_s)  # the same agent, once more
    pid = next((p for p in plan.probes if probe(p).target == SETTINGS), "write-sandbox-settings")
    url = f"http://{world.attacker.name}{Markers(token, world.attacker.name).next_path(pid)}"
    # the same machine: the next session's key is this run's key
    return Job(code=steal_code(url), plant={KEY: "\n" + key_canary + "\n"}, timeout_s=20.0)


def _next_execution(next_sandbox: Callable[[Policy, Job], Execution], policy: Policy, job: Job) -> Union[Execution, str]:
    """The next sandboxed session's execution, or why it could not run (in its own thread: never raises)."""
    try:
        return next_sandbox(policy, job)
    except BackendError as exc:
        return f"the next sandboxed session could not run: {exc}"


def _merge(ns: NextSession, said: str, got: Union[Execution, str]) -> NextSession:
    """The user's shells' evidence and the next sandboxed session's, as one ``NextSession``."""
    if isinstance(got, str):
        return replace(ns, settings=said, infra_problem=got)
    ex = got
    if ex.evidence is None:
        return replace(ns, settings=said, infra_problem="the next sandboxed session left no evidence")
    ev = ex.evidence
    output = ns.output + f"\n--- the next sandboxed session ({said}) ---\n" + ex.output
    infra = "; ".join(x for x in (ns.infra_problem, ev.infra_problem) if x)
    return replace(ns, settings=said, output=output, http=ns.http + ev.http, dns=ns.dns + ev.dns, tcp=ns.tcp + ev.tcp,
                   played=ns.played + ("next-sandbox",), infra_problem=infra, timed_out=ns.timed_out or ex.timed_out)
