"""The on-disk record of a shared simulated internet (a hub): who keeps it, who uses it, what is warm, what is done.

A grader run from a terminal lives for one probe run; starting a simulated
internet and a proxy for each would cost more than the run. So graders on one
machine share a hub: one simulated internet and a few warm proxies in front of
it, kept by a small keeper process (``hub.py``) that outlives any one grader.
This module is the hub's directory under ``runs_root()``, written and read by
the keeper and the graders alike:

* the owner record: the keeper's pid (as in every run directory, so ``cleanup``
  removes the directory once the keeper is gone); the keeper is the owner of the
  internet and the warm proxies, and they carry its pid on their labels;
* ``state.json``: the running internet's container, network and address (``KeeperState``);
* ``leases/<pid>.json``: one per grader using the hub (``Lease``). A lease holds while its
  grader lives and has not released it, and for the idle period after its last
  use; a hub with no lease that holds is removed by its keeper;
* ``pool/<proxy>.json``: a warm proxy nobody has (``ProxyEntry``); a grader claims one by renaming
  it into ``claimed/<proxy>@<pid>.json`` (a rename succeeds once, so no proxy is
  handed to two runs at once); a claim whose grader died is removed by the keeper;
* ``trash/<run>.json``: what a finished run made (containers, networks,
  directories: ``Trash``), for the keeper to remove while the grader goes on (or exits),
  and the proxy a clean run claimed, for the keeper to put back in the pool if it may serve again.

Each file is a frozen record with one writer (``_write``) and one strict reader
(``read_record``, the project's codec with every field required): a missing
key, an unknown one or a wrong type is refused, naming the key. A file that is
missing, not JSON or refused is read as no record at all, and each caller
fails closed on that: a hub whose state cannot be read is retired, never
adopted; a lease that cannot be read holds nothing; a pool entry or a claim
that cannot be read is never handed to a run.

Every change that decides whether the hub lives (adopting it, starting it,
retiring it) is made under one lock: ``flock`` on ``runs_root()`` itself, so no
lock file is ever left behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, TypeVar, Union

from grader.backends.owners import (
    make_dir, pid_alive, private_root, read_owner, runs_root, stat_fields, write_file, write_owner,
)
from grader.protocol import codec

__all__ = [
    "DEFAULT_IDLE", "IDLE_ENV", "HubDir", "KeeperState", "Lease", "ProxyEntry", "StateError", "Trash", "hub_dir",
    "idle_seconds", "process_alive", "read_record", "stop_process",
]

IDLE_ENV = "SANDBOX_LAB_SHARED_IDLE"
# Long enough for a learner between two probe runs of a lesson; the keeper and
# three small containers are all that stands meanwhile.
DEFAULT_IDLE = 600.0


def idle_seconds() -> float:
    """How long a hub outlives its last use (``SANDBOX_LAB_SHARED_IDLE``); 0 turns sharing between processes off."""
    raw = os.environ.get(IDLE_ENV, "")
    try:
        return max(0.0, float(raw)) if raw.strip() else DEFAULT_IDLE
    except ValueError:
        return DEFAULT_IDLE


EXEC_WAIT_S = 2.0  # how long an empty command line (a process mid-exec) is read again before it is not ours


def process_alive(pid: int, marker: str = "") -> bool:
    """True while ``pid`` runs (not a zombie) and, if given, has ``marker`` in its command line.

    The marker guards against a recycled pid: a keeper is recognised by its
    hub's name in its arguments. Where there is no ``/proc``, the pid alone decides.

    A process in the middle of its ``execve`` has an empty command line for a
    moment: its parent's ``Popen`` returns once the old image is gone, before
    the kernel has set the new one's arguments (measured here: two of three
    keepers asked at once). So an empty command line is read again, for up to
    ``EXEC_WAIT_S``, before the process is counted as not ours.
    """
    if pid <= 0 or not pid_alive(pid):
        return False
    if not marker:
        return True
    deadline = time.monotonic() + EXEC_WAIT_S
    while True:
        try:
            line = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return not Path("/proc/self").exists()  # no /proc to ask: the pid alone decides
        if line or time.monotonic() >= deadline or not pid_alive(pid) or _kernel_thread(pid):
            return marker in line.decode("utf-8", "replace")
        time.sleep(0.005)  # mid-exec: its arguments are set within moments


PF_KTHREAD = 0x00200000  # a kernel thread's flag in /proc/<pid>/stat: its command line is empty for good


def _kernel_thread(pid: int) -> bool:
    """Whether ``pid`` is a kernel thread (a recycled pid can be one): no exec will ever give it arguments."""
    try:
        return bool(int(stat_fields(pid)[6]) & PF_KTHREAD)
    except (OSError, ValueError, IndexError):
        return False


KILL_WAIT_SECONDS = 10.0  # how long a SIGKILLed process may take to be gone (or a zombie) before stop_process returns


def stop_process(pid: int, marker: str, timeout: float) -> None:
    """SIGTERM ``pid`` (while it is the process ``marker`` names: ``process_alive``), then SIGKILL if it lingers."""
    if not process_alive(pid, marker):
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while process_alive(pid, marker) and time.monotonic() < deadline:
        time.sleep(0.02)
    if process_alive(pid, marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        # gone when this returns: a SIGKILL is not instant on a loaded machine (a keeper slow to stop under
        # load was still alive just after it), and a caller counts the process stopped
        deadline = time.monotonic() + KILL_WAIT_SECONDS
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)


class StateError(ValueError):
    """A hub's file that is not the record it should be: the file, the key and why."""


@dataclass(frozen=True)
class KeeperState:
    """``state.json``: the keeper's running internet; a grader adopts the hub through it."""

    gen: str  # this internet's generation: a warm proxy of another one is never handed out
    container: str
    network: str
    ip: str
    dir: str  # the internet's directory on this machine (its logs are under ``out``)


@dataclass(frozen=True)
class Lease:
    """``leases/<pid>.json``: a grader's use of the hub."""

    pid: int
    held: bool  # held while its grader lives; released, it lasts the idle period after ``at``
    at: float  # when it was last used (``time.time()``)


@dataclass(frozen=True)
class ProxyEntry:
    """``pool/<proxy>.json`` and ``claimed/<proxy>@<pid>.json``: a warm proxy of the keeper's internet."""

    container: str
    network: str
    workdir: str
    ip: str
    gen: str  # the internet it stands in front of (``KeeperState.gen``)
    runs: int  # the runs it has served: the keeper re-lists it after a clean one, fewer than ``simnet.PROXY_RUNS`` in all
    seat: str = ""  # its network's seat for the next run's sandbox (``seats``); "" when none was made

    def things(self) -> Trash:
        """What to remove when this proxy goes (its seat with it)."""
        return Trash((self.container, *([self.seat] if self.seat else [])), (self.network,), (self.workdir,), relist=None)


@dataclass(frozen=True)
class Trash:
    """``trash/<run>.json``: what a finished run made, for the keeper to remove, and the proxy it may re-list.

    ``relist``: the hub's proxy a clean run claimed (``HubSharing.hand_off``), not among the things to remove:
    the keeper puts it back in the pool if it may serve again (``hub._relist``), and removes it otherwise.
    Whoever else empties the trash removes it for good (``for_good``).
    """

    containers: tuple[str, ...]
    networks: tuple[str, ...]
    dirs: tuple[str, ...]
    relist: Optional[ProxyEntry]

    @staticmethod
    def of(entries: list[ProxyEntry]) -> Trash:
        """Every thing of ``entries`` (their proxies, seats, networks and directories), as one listing."""
        things = [e.things() for e in entries]
        return Trash(tuple(c for t in things for c in t.containers), tuple(n for t in things for n in t.networks),
                     tuple(d for t in things for d in t.dirs), relist=None)

    def for_good(self) -> Trash:
        """Everything to remove when nothing is re-listed: the run's things and its proxy's."""
        p = self.relist
        if p is None:
            return self
        return Trash((*self.containers, *p.things().containers), (*self.networks, p.network), (*self.dirs, p.workdir),
                     relist=None)


Record = Union[KeeperState, Lease, Trash, ProxyEntry]
R = TypeVar("R", KeeperState, Lease, Trash, ProxyEntry)


def read_record(cls: type[R], text: str, where: str) -> R:
    """The one strict reader: exactly a ``cls``, every key present, none unknown, each of its type; StateError
    naming ``where`` (the file), the key and why."""
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        raise StateError(f"{where}: not JSON ({exc})") from None
    try:
        return codec.decode(cls, value, where, rules=codec.EVERY_FIELD)
    except codec.CodecError as exc:
        raise StateError(str(exc)) from None


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON")


def _write(path: Path, record: Record) -> None:
    """The one writer: every field, always, replaced at once (a reader never sees half a file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write_file(tmp, json.dumps(codec.encode(record), allow_nan=False))
    os.replace(tmp, path)


def _read(cls: type[R], path: Path) -> Optional[R]:
    """The record in ``path``; None when it is missing, unreadable, not JSON or refused (``read_record``): the
    caller fails closed on None (retires the hub, counts no lease, hands out no proxy)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return None
    try:
        return read_record(cls, text, path.name)
    except StateError:
        return None


@dataclass(frozen=True)
class HubDir:
    """One hub's directory; every method is one small file operation, safe between processes."""

    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    # --- the lock and the keeper ----------------------------------------------------

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Held while a process decides whether the hub lives: adopting, starting or retiring it."""
        private_root()  # made if missing, and shown to be this user's alone
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    @contextlib.contextmanager
    def try_lock(self) -> Iterator[bool]:
        """The lock if it is free now (True), else nothing (False): the keeper never waits for a grader."""
        fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def keeper_pid(self) -> int:
        owner = read_owner(self.path)
        return owner.pid if owner is not None else 0

    def keeper_alive(self) -> bool:
        return process_alive(self.keeper_pid(), self.name)

    def make(self) -> None:
        """Create the directory and its parts; the owner record follows once the keeper's pid is known."""
        self.path.mkdir(mode=0o700)  # the grader's user's alone, like every run directory
        os.chmod(self.path, 0o700)
        for part in ("leases", "pool", "claimed", "trash"):
            make_dir(self.path / part, 0o700)

    def set_keeper(self, pid: int) -> None:
        write_owner(self.path, pid)  # cleanup reads it like any run's

    def state(self) -> Optional[KeeperState]:
        """The keeper's internet; None when there is none, or its record cannot be read: never adopted then."""
        return _read(KeeperState, self.path / "state.json")

    def write_state(self, state: KeeperState) -> None:
        _write(self.path / "state.json", state)

    # --- leases ---------------------------------------------------------------------

    def lease(self, pid: int, *, held: bool = True) -> None:
        """Record a use by ``pid`` now: held while it lives (``held``), and for the idle period after."""
        with contextlib.suppress(FileNotFoundError):  # the hub went meanwhile: the next use adopts anew
            _write(self.path / "leases" / f"{pid}.json", Lease(pid=pid, held=held, at=time.time()))

    def holds(self, idle: float, now: Optional[float] = None) -> bool:
        """True while some lease holds: its grader lives and holds it, or it was used within ``idle`` seconds."""
        now = time.time() if now is None else now
        for p in self._entries("leases"):
            lease = _read(Lease, p)
            if lease is None:
                continue  # one that cannot be read holds nothing
            if now - lease.at < idle:
                return True
            if lease.held and pid_alive(lease.pid):
                return True
            with contextlib.suppress(OSError):
                p.unlink()  # lapsed: nobody holds it any more
        return False

    # --- the pool of warm proxies ---------------------------------------------------

    def offer(self, name: str, entry: ProxyEntry) -> None:
        """The keeper puts a warm proxy in the pool."""
        _write(self.path / "pool" / f"{name}.json", entry)

    def pooled(self) -> list[tuple[str, ProxyEntry]]:
        out = []
        for p in self._entries("pool"):
            entry = _read(ProxyEntry, p)
            if entry is not None:
                out.append((p.stem, entry))
        return out

    def withdraw(self, name: str) -> bool:
        """The keeper takes a warm proxy back out of the pool; False if a grader claimed it first."""
        try:
            (self.path / "pool" / f"{name}.json").unlink()
            return True
        except FileNotFoundError:
            return False

    def claim(self, pid: int) -> Optional[tuple[Path, ProxyEntry]]:
        """Take one warm proxy for a run of ``pid``: (its claim, its entry), or None when the pool is empty."""
        for p in self._entries("pool"):
            entry = _read(ProxyEntry, p)
            if entry is None:
                continue  # one that cannot be read is never handed to a run
            claim = self.path / "claimed" / f"{p.stem}@{pid}.json"
            try:
                os.rename(p, claim)  # atomic: of two graders renaming one entry, one succeeds
            except FileNotFoundError:
                continue
            with contextlib.suppress(OSError):  # the claim is made: a stamp that fails loses it nothing
                os.utime(claim)  # when it was claimed (``quiet``), not when its proxy was offered
            return claim, entry
        return None

    def claim_built(self, name: str, pid: int, entry: ProxyEntry) -> Path:
        """Record a proxy a run of ``pid`` built itself (the pool was dry) as claimed, as ``claim`` records one taken
        from the pool: the keeper removes it if that grader dies mid-run, and re-lists it after a clean run."""
        claim = self.path / "claimed" / f"{name}@{pid}.json"
        _write(claim, entry)
        return claim

    def claims(self) -> list[tuple[Path, int, ProxyEntry]]:
        out = []
        for p in self._entries("claimed"):
            entry = _read(ProxyEntry, p)
            try:
                pid = int(p.stem.rpartition("@")[2])
            except ValueError:
                pid = 0
            if entry is not None:
                out.append((p, pid, entry))
        return out

    def quiet(self, within: float, now: Optional[float] = None) -> bool:
        """No run claimed a proxy in the last ``within`` seconds and no trash waits: a proxy built now competes with
        no sandbox's start. A claim held longer (a run prepared ahead, waiting for its go) is past its start, so it
        stops no refill: the pool is full again for the runs after it."""
        now = time.time() if now is None else now
        for p in self._entries("claimed"):
            try:
                if now - p.stat().st_mtime < within:
                    return False
            except FileNotFoundError:  # its run handed it back meanwhile
                continue
        return not self.trash()

    # --- the trash ------------------------------------------------------------------

    def discard(self, run: str, things: Trash) -> Path:
        """Ask the keeper to remove a finished run's ``containers``, ``networks`` and ``dirs``."""
        path = self.path / "trash" / f"{run}.json"
        _write(path, things)
        return path

    def trash(self) -> list[tuple[Path, Trash]]:
        out = []
        for p in self._entries("trash"):
            entry = _read(Trash, p)
            if entry is not None:
                out.append((p, entry))
        return out

    def _entries(self, part: str) -> list[Path]:
        try:
            return sorted(p for p in (self.path / part).iterdir() if p.suffix == ".json" and not p.name.startswith("."))
        except OSError:
            return []


def hub_dir(image: str, world: str) -> HubDir:
    """The hub for one services image and one world, under this ``runs_root()``.

    Graders share a hub only when the internet would be the same: same image,
    same world, same runs root (tests give each session a root of its own).
    """
    root = runs_root()
    key = hashlib.sha256("\0".join([image, world, str(root.resolve())]).encode()).hexdigest()[:12]
    return HubDir(root / f"sl-hub-{key}")
