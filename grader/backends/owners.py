"""The runs root and who owns each directory in it: where run directories live, and which grader process made each.

Every run directory (and a hub's) holds an owner record (``owner.json``: the
grader's pid, and where that pid means something: ``namespace``), so
``cleanup`` can tell a dead grader's leftovers from a live one's. The root is
this user's alone (``private_root``): nothing is ever opened to every local user.

Every directory and file the grader makes for a run is given its mode
explicitly (``make_dir``, ``write_file``), never left to the umask: a grader
started with umask 000 used to make the world copy 0777 and its files 0666,
kept private only by the 0700 directory around them. The modes are what umask
022 gave before: the sandbox's user and the services' containers may pass and
read, nobody but the owner writes.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from grader.core.errors import BackendError

__all__ = ["DIR_MODE", "FILE_MODE", "OWNER", "STAGING", "Owner", "make_dir", "make_run_dir", "namespace", "pid_alive", "private_root", "read_owner", "runs_root", "staging_pid", "write_file", "write_owner"]

OWNER = "owner.json"
# A run directory while ``make_run_dir`` makes it: ``.new-<pid>-<name>``, judged by the pid in its name.
STAGING = ".new-"
# A run's directories and files: its sandbox's user and the services' containers pass through and read them, only
# their owner writes. Given explicitly, whatever the umask (000 would make them writable by everyone).
DIR_MODE = 0o755
FILE_MODE = 0o644


def make_dir(path: Path, mode: int = DIR_MODE, *, parents: bool = False, exist_ok: bool = False) -> None:
    """``mkdir`` with ``mode`` exactly (and each missing parent with it, under ``parents``), whatever the umask;
    a directory that was there already (``exist_ok``) is left as it is."""
    missing = [path] + ([p for p in path.parents if not p.exists()] if parents else [])
    for d in reversed(missing):
        try:
            d.mkdir(mode=mode)
        except FileExistsError:
            if not exist_ok or not d.is_dir():
                raise
            continue
        os.chmod(d, mode)  # mkdir's mode is masked by the umask: set it, so no umask decides it


def write_file(path: Path, data: "bytes | str", mode: int = FILE_MODE) -> None:
    """Create or replace the contents of ``path`` (text as UTF-8) with ``mode`` exactly, whatever the umask; a
    symbolic link in its place is refused, never written through."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


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
    # the process's start (``process_start``) when the record was written; None in an older record. A pid the
    # kernel has since handed to another process (pids wrap at pid_max: a fork bomb's test cycles thousands a
    # second) is then seen as dead, not as the owner still at work.
    started: Optional[int] = None


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

    The directory appears with its record already in it: it is made under a
    staging name that carries this pid (``staging_pid``), the record written,
    then renamed into place. A grader killed in between leaves a staging
    directory its name judges, never an unowned directory that no sweep would
    dare to remove (one was seen after a batch was killed mid-run).
    """
    root = private_root()
    path = root / name
    if os.path.lexists(path):
        raise FileExistsError(errno.EEXIST, "a run directory of that name exists: never reuse another run's", str(path))
    staging = root / f"{STAGING}{os.getpid()}-{name}"
    staging.mkdir(mode=0o700)
    os.chmod(staging, 0o700)
    write_owner(staging, os.getpid(), run=name)
    try:
        _rename_new(staging, path)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return path


def staging_pid(directory: Path) -> Optional[int]:
    """The pid in a staging directory's name (``make_run_dir`` while it works), or None for any other name."""
    rest = directory.name[len(STAGING):] if directory.name.startswith(STAGING) else ""
    pid, _, run = rest.partition("-")
    return int(pid) if pid.isdigit() and run else None


def _rename_new(src: Path, dst: Path) -> None:
    """Rename ``src`` to ``dst``, refusing an existing ``dst`` (rename(2) would replace an empty directory)."""
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:  # no renameat2 (not glibc, not Linux): the check above is the guard
        os.rename(src, dst)
        return
    at_fdcwd, rename_noreplace = -100, 1
    if renameat2(at_fdcwd, os.fsencode(src), at_fdcwd, os.fsencode(dst), rename_noreplace) != 0:
        err = ctypes.get_errno()
        if err in (errno.ENOSYS, errno.EINVAL):  # a kernel or filesystem without the flag
            os.rename(src, dst)
            return
        raise OSError(err, os.strerror(err), str(dst))


def write_owner(directory: Path, pid: int, *, run: Optional[str] = None) -> None:
    """Record ``pid`` as the owner of ``directory``: ``cleanup`` removes it once that process is gone.

    A shared internet's directory names its keeper, which outlives the grader that made it. ``run``: the
    directory's name to record, when it is written under another (``make_run_dir``'s staging name).
    """
    # json.dumps' own spacing, as before: tests look for '"pid": N,' in the text
    write_file(directory / OWNER, json.dumps({"pid": pid, "run": run or directory.name, "ns": namespace(),
                                              "started": process_start(pid)}))


def read_owner(directory: Path) -> Optional[Owner]:
    """The owner record of a run directory; None when it is missing or unreadable."""
    try:
        raw = json.loads((directory / OWNER).read_text())
        ns, started = raw.get("ns"), raw.get("started")
        return Owner(int(raw["pid"]), str(raw["run"]), None if ns is None else str(ns),
                     None if started is None else int(started))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def stat_fields(pid: int) -> list[str]:
    """The fields of ``/proc/<pid>/stat`` after the command name (which may hold spaces and parentheses): [0] is the
    state, [3] the session, [6] the flags, [19] the start time. OSError where there is no such process or no /proc;
    ValueError where the line has no command name."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2:].split()


def process_start(pid: int) -> Optional[int]:
    """When process ``pid`` started, in clock ticks after boot (``/proc/<pid>/stat``'s 22nd field); None where
    there is no such process or no /proc to ask. With the pid, it names one process: pids are reused."""
    try:
        return int(stat_fields(pid)[19])
    except (OSError, ValueError, IndexError):
        return None


def pid_alive(pid: int, started: Optional[int] = None) -> bool:
    """True while a process ``pid`` exists (also one we may not signal), and is not a zombie.

    A killed process whose parent has not reaped it yet (an init that reaps
    slowly, a grader that started it) is gone for every purpose of ours. With
    ``started`` (``process_start`` of the process meant), a process that now
    holds the pid but started at another time is another process: gone too.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's: it exists, and /proc still says whether it is the one meant
    try:
        fields = stat_fields(pid)
    except (OSError, ValueError):
        return True  # no /proc to ask: it exists
    if fields[0] in ("Z", "X"):
        return False
    try:
        return started is None or int(fields[19]) == started
    except (ValueError, IndexError):
        return True

