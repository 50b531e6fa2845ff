"""Removing what runs left behind: ``cleanup`` (every real backend's leftovers, then the run directories),
and the cheap sweep at every run's start (``sweep_soon``).

What a killed grader or an engine restart leaves is swept when the next run
starts: at most once a minute per runs root, in the background, and only what
a dead process of this machine and pid namespace owned (``owners.namespace``);
never a live grader's, never a hub's while its keeper lives.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Protocol, Sequence

from grader.backends.quota import remove_dir
from grader.backends.owners import namespace, pid_alive, private_root, read_owner, runs_root, staging_pid

__all__ = [
    "CLEANERS", "SWEEP_ENV", "SWEEP_EVERY", "SWEEP_STAMP", "Engine", "Labelled", "Scope", "cleanup", "sweep_soon", "swept",
]

# Every real backend's part of ``cleanup``, in the order it runs: each module
# named here has ``sweep(scope) -> list[str]``. A table rather than a
# registration at import time, because cleanup must find every backend's
# leftovers in a process that never imported that backend (the CLI, after a
# killed grader). Engine objects go first (they hold mounts of run directories),
# host processes next, the run directories themselves last (``cleanup``).
CLEANERS = ("docker.backend", "srt")


# A run directory without an owner record is one being made (a hub's, for a keeper's start: seconds), or what a
# removal left: a quota tmpfs mounted while the tree was being removed stays, with nothing else (measured: a plain
# container's scratch, seen an hour later). Past this age, unchanged, it is nobody's.
ABANDONED_S = 600.0


def _abandoned(d: Path) -> bool:
    try:
        return time.time() - d.stat().st_mtime > ABANDONED_S
    except OSError:
        return False


class Labelled(Protocol):
    """A container or a network as a sweep sees it: who it is, and the labels that say whose it is."""

    @property
    def id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...


class Engine(Protocol):
    """What a sweep asks of a container engine: its labelled containers and networks, and their removal.

    The Docker backend's adapter (``docker.engine.DockerEngine``) is one, by its shape: this module is below
    the ``docker`` package, which imports it, so it names the operations the sweep calls instead of the class.
    A removal of what is gone raises the adapter's ``Missing`` (or ``Refused``), which its sweep expects.
    """

    def containers(self, filters: Mapping[str, object]) -> Sequence[Labelled]: ...

    def remove_container(self, c: str) -> None: ...

    def networks(self, filters: Mapping[str, object]) -> Sequence[Labelled]: ...

    def remove_network(self, n: str) -> None: ...


@dataclass(frozen=True)
class Scope:
    """Which runs a cleanup removes: those whose grader process is gone, or, with ``everything``, all.

    ``engine`` is the Docker backend's engine adapter for its sweep; None lets it
    connect from the environment, except in an ``automatic`` sweep (a run's
    start: ``sweep_soon``), which reaches only the engine it is given and
    judges only what carries this machine's and pid namespace's stamp.
    """

    everything: bool = False
    engine: Optional[Engine] = None
    automatic: bool = False

    def gone(self, pid: int, ns: Optional[str] = None, started: Optional[int] = None) -> bool:
        """True if what ``pid`` made is to be removed now.

        Args:
            ns: the ``namespace()`` the thing was stamped with; None for one
                made before stamps (judged by its pid in an explicit cleanup
                only). A pid of another namespace says nothing here: kept.
            started: when the process meant started (``owners.process_start``), if it was recorded: a pid
                now held by a process that started at another time was reused, and its maker is gone.
        """
        if self.everything:
            return True
        if ns is None:
            return not self.automatic and not pid_alive(pid, started)
        return ns == namespace() and not pid_alive(pid, started)

    def stale_dirs(self) -> list[Path]:
        """Run directories to remove. One without a readable owner record is a hub's being made right now: kept;
        a staging directory (``owners.make_run_dir``) without one is judged by the pid in its name."""
        root = runs_root()
        if not root.is_dir():
            return []
        out = []
        for d in sorted(root.iterdir()):
            if d.is_symlink() or not d.is_dir():
                continue  # the sweep's stamp, or nothing of ours
            owner = read_owner(d)
            if self.everything or (owner is not None and self.gone(owner.pid, owner.ns, owner.started)):
                out.append(d)
            elif owner is None and (pid := staging_pid(d)) is not None and self.gone(pid):
                out.append(d)  # a grader killed while it made this directory: its name says whose it was
            elif owner is None and staging_pid(d) is None and _abandoned(d):
                out.append(d)  # its record removed long ago with the rest, a mount left behind: nobody's
        return out


def cleanup(*, everything: bool = False, engine: Optional[Engine] = None, automatic: bool = False) -> list[str]:
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
            remove_dir(d)  # a dead run's world quota unmounted first
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
            if owner is not None and scope.gone(owner.pid, owner.ns, owner.started):
                remove_dir(d)
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


def sweep_soon(engine: Optional[Engine] = None, *, every: float = SWEEP_EVERY) -> Optional[threading.Thread]:
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


def _sweep(fd: int, engine: Optional[Engine]) -> None:
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
