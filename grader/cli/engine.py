"""The warm engine: one long-lived process that runs the one-shot commands a terminal hands it (issue 40).

``sandbox-lab probe`` from a terminal starts an interpreter, imports the
grader, makes a Docker client, checks the images and adopts the machine's
shared internet (``backends.docker.hub``) before its sandbox starts, and lets
it all go at exit. The engine pays that once: it keeps its backends between
commands (``lend_backends``), its Docker backend on that same hub (so a
terminal holds one simulated internet and one pool of proxies), and a command
handed to it (``cli.client``) runs exactly as it would in the terminal
(``main`` with the caller's argv, working directory, environment and
streams), one at a time.

One engine per user, checkout, interpreter and environment the backends read
(``client.engine_key``), on a Unix socket in the runs root (only its user
may enter; the peer's uid is checked on both ends). It is started by
``sandbox-lab engine start``, or by the first one-shot command that ran a
Docker backend in the terminal (after its report, detached; set
``SANDBOX_LAB_ENGINE=off`` for neither), and it ends:

* after the shared internet's idle period with no command
  (``SANDBOX_LAB_SHARED_IDLE``; 0 turns the engine off with the sharing);
* when the checkout's code changed under it (it declines the command, which
  then runs in the terminal, and exits): a command never runs stale code;
* on SIGTERM (``sandbox-lab engine stop``, ``cleanup --all``), closing its
  backends (their internet, warm proxies and held runs go).

Killed outright, it leaves what any killed grader leaves: containers and run
directories carrying its pid, which ``cleanup`` removes, and a terminal whose
command it had not finished runs that command itself, from the start.
A kept backend that failed (an engine restart, images removed) is closed and
made afresh for the next command. Commands are not interrupted: a terminal's
Ctrl-C stops the waiting, and the engine finishes that run and removes it.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

from grader.backends import BACKEND_ENV
from grader.backends.base import Backend
from grader.cli.ahead import Ahead
from grader.cli.client import ENGINE_ENV, engine_key, peer_uid, socket_path
from grader.plumbing.terminal import EXIT_OK, PROG, Streams, UsageError, dump, lend_backends, make_backend
from grader.core.errors import BackendError, InfrastructureError

__all__ = ["Engine", "run_engine", "start", "start_soon", "stop_engines"]

START_TIMEOUT = 60.0  # an engine's start: an interpreter, the grader's imports, a Docker backend
_MARK = "engine\0serve"  # in an engine's command line (NUL-separated), with its socket: a recycled pid is not ours
_DOCKER = ("docker", True)  # the one-shot commands' Docker backend: where runs are prepared ahead
Main = Callable[[Sequence[str], Streams], int]  # cli.main.main: the engine runs commands exactly as the terminal does


def _idle_seconds() -> float:
    from grader.backends.docker.lease import idle_seconds

    return idle_seconds()


def _sources() -> str:
    """The checkout's code as it is now: every file under ``grader/``, by name, size and last change."""
    root = Path(__file__).resolve().parents[1]
    seen = hashlib.sha256()
    for d, dirs, files in sorted(os.walk(root)):
        dirs[:] = [x for x in dirs if x != "__pycache__"]
        for f in sorted(files):
            with contextlib.suppress(OSError):
                st = os.stat(os.path.join(d, f))
                seen.update(f"{d}/{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return seen.hexdigest()


class _Frames:
    """One of a handed command's streams: each write is a frame to the terminal; a terminal gone drops the rest."""

    def __init__(self, conn: socket.socket, kind: str, tty: bool) -> None:
        self._conn, self._kind, self._tty = conn, kind, tty
        self.gone = False

    def write(self, text: str) -> int:
        if text and not self.gone:
            try:
                self._conn.sendall(json.dumps({self._kind: text}).encode() + b"\n")
            except OSError:
                self.gone = True  # the run goes on and is removed as usual; nobody reads its report
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return self._tty


class _Lent:
    """A kept backend lent to one command: ``with`` leaves it open; a failure of the engine's makes it be made afresh."""

    def __init__(self, backend: Backend, drop: Callable[[], None]) -> None:
        self._backend, self._drop = backend, drop

    def __enter__(self) -> Backend:
        return self._backend

    def __exit__(self, kind: Optional[type[BaseException]], exc: Optional[BaseException], tb: Any) -> None:
        if kind is not None and issubclass(kind, (BackendError, InfrastructureError)):
            self._drop()


class Engine:
    """The backends kept between commands, and how one handed command runs."""

    def __init__(self, main: Main) -> None:
        self._main = main
        self._kept: dict[tuple[str, bool], Backend] = {}
        self._progress: Callable[[str], None] = lambda line: None
        # the files the terminal probes, their next runs prepared on the kept one-shot Docker backend
        self.ahead = Ahead(lambda: self._kept[_DOCKER])

    def lend(self, name: Optional[str], shared: bool, progress: Callable[[str], None]) -> contextlib.AbstractContextManager[Backend]:
        self._progress = progress
        chosen = name or os.environ.get(BACKEND_ENV, "") or "auto"
        # auto is docker wherever an engine answers; where it does not, the static fallback is made per command
        key = ("docker" if chosen in ("auto", "docker") else chosen, shared)
        kept = self._kept.get(key)
        if kept is None:
            # shared=True: the engine adopts the machine's hub, as a one-shot command does, so a terminal holds one
            # simulated internet and one pool of proxies, not two (measured: a naive rerun 1.50 s here, 1.45 s on an
            # internet of its own, once the hub's pool kept 4 proxies; docs/scaling.md)
            made = make_backend(name, shared=True, progress=lambda line: self._progress(line))
            if made.name != "docker":
                return made  # cheap to make (static), or another machine's (remote): per command, closed by its with
            kept = self._kept[key] = made
        return _Lent(self.ahead.serving(kept) if key == _DOCKER else kept, lambda: self._forget(key))

    def _forget(self, key: tuple[str, bool]) -> None:
        if key == _DOCKER:  # what was prepared on it goes with it
            self.ahead.close()
            self.ahead = Ahead(lambda: self._kept[_DOCKER])
        backend = self._kept.pop(key, None)
        if backend is not None:
            with contextlib.suppress(Exception):
                backend.close()

    def warm(self) -> None:
        """Pay now what the first command would: the default Docker backend, where an engine answers."""
        with contextlib.suppress(Exception), self.lend(None, True, lambda line: None):
            pass

    def run(self, request: dict[str, Any], conn: socket.socket) -> int:
        """One handed command, as ``main`` runs it in the caller's directory, environment and streams."""
        tty = request.get("tty") or [False, False]
        io = Streams(_Frames(conn, "out", bool(tty[0])), _Frames(conn, "err", bool(tty[1])))  # type: ignore[arg-type]
        with _as_caller(request):
            lend_backends(self.lend)
            argv = [str(a) for a in request["argv"]]
            try:
                return self._main(argv, io)
            finally:
                lend_backends(None)

    def after(self, request: dict[str, Any]) -> None:
        """What a command leaves to its engine (``Ahead.after``: watch its files, make their reruns ready), in the
        caller's directory and environment, once the caller has its answer: the preparing thread it starts took
        the interpreter's lock from the reply for up to 30 ms."""
        with _as_caller(request):
            self.ahead.after([str(a) for a in request["argv"]], os.getcwd())

    def close(self) -> None:
        self.ahead.close()
        for key in list(self._kept):
            self._forget(key)


@contextlib.contextmanager
def _as_caller(request: dict[str, Any]) -> Iterator[None]:
    """The caller's environment and working directory for one command (commands run one at a time)."""
    env, cwd = dict(os.environ), os.getcwd()
    try:
        _become(env, {str(k): str(v) for k, v in dict(request["env"]).items()})
        os.chdir(str(request["cwd"]))
        yield
    finally:
        _become(dict(os.environ), env)
        os.chdir(cwd)


def _become(now: dict[str, str], wanted: dict[str, str]) -> None:
    """Change only the variables that differ: what the backends read is the same by the engine's key, and a
    preparing thread reading it meanwhile never sees an emptied environment."""
    for k in now.keys() - wanted.keys():
        os.environ.pop(k, None)
    for k, v in wanted.items():
        if now.get(k) != v:
            os.environ[k] = v


def _pid_file(sock: Path) -> Path:
    return sock.with_suffix(".pid")


def serve(sock: Path, idle_s: float, main: Main) -> int:
    """The engine's life: listen on ``sock``, run what is handed, exit when idle, stale or told to."""
    lock = open(sock.with_suffix(".lock"), "a+")  # noqa: SIM115 - held for the process's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return EXIT_OK  # another engine for this key runs: it serves
    stop = False

    def told(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, told)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C in the terminal that started it is not for the engine
    _pid_file(sock).write_text(json.dumps({"pid": os.getpid(), "socket": str(sock)}))  # stop finds it from now on
    code = _sources()
    engine = Engine(main)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        engine.warm()
        with contextlib.suppress(FileNotFoundError):
            sock.unlink()
        listener.bind(str(sock))
        os.chmod(sock, 0o600)
        listener.listen(16)
        listener.settimeout(0.5)
        last = time.monotonic()
        # until idle, told to stop, or its socket gone (the runs root removed: nobody can reach it)
        while not stop and time.monotonic() - last < idle_s and sock.exists():
            try:
                conn, _ = listener.accept()
            except (socket.timeout, InterruptedError):
                continue
            with conn:
                stale = _sources() != code
                _answer(engine, conn, stale)
                if stale:
                    break
            last = time.monotonic()
    finally:
        with contextlib.suppress(OSError):
            sock.unlink()
        with contextlib.suppress(OSError):
            _pid_file(sock).unlink()
        listener.close()
        engine.close()
    return EXIT_OK


REQUEST_BYTES = 1 << 20  # argv, directory and environment: a longer request is not one
IO_TIMEOUT_S = 30.0  # a terminal that sends no request, or reads nothing of its report (stopped), holds no one up


def _answer(engine: Engine, conn: socket.socket, stale: bool) -> None:
    conn.settimeout(IO_TIMEOUT_S)  # each read and each write: the run itself takes as long as it takes
    try:
        if peer_uid(conn) != os.geteuid():
            return
        with conn.makefile("rb") as lines:
            request = json.loads(lines.readline(REQUEST_BYTES) or b"null")
        if stale or not isinstance(request, dict):
            conn.sendall(json.dumps({"declined": "stale" if stale else "bad request"}).encode() + b"\n")
            return
        try:
            exit_code = engine.run(request, conn)
            conn.sendall(json.dumps({"exit": exit_code}).encode() + b"\n")
        finally:
            engine.after(request)
    except (OSError, ValueError, KeyError, TypeError):
        return  # the terminal went away, or sent nothing we read: it runs the command itself


# --- starting and stopping -----------------------------------------------------------------------


def _answers(sock: Path) -> bool:
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(1.0)
        s.connect(str(sock))
        return True
    return False


def _spawn(sock: Path) -> subprocess.Popen[bytes]:
    log = open(sock.with_suffix(".log"), "ab")  # noqa: SIM115 - the child's, closed here once handed over
    with log:
        return subprocess.Popen(
            [sys.executable, "-m", "grader", "engine", "serve", str(sock)], cwd="/", stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            start_new_session=True, close_fds=True,
        )


def start(*, wait: bool = True) -> Path:
    """Start this caller's engine unless one answers; with ``wait``, until it answers. Returns its socket."""
    sock = socket_path()
    if sock is None:
        raise UsageError("the runs root's path is too long for a Unix socket: set SANDBOX_LAB_RUNS to a shorter one")
    if os.environ.get(ENGINE_ENV) == "off" or _idle_seconds() <= 0:
        raise UsageError(f"the engine is turned off (${ENGINE_ENV}=off, or SANDBOX_LAB_SHARED_IDLE=0)")
    if _answers(sock):
        return sock
    sock.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    child = _spawn(sock)
    if wait:
        deadline = time.monotonic() + START_TIMEOUT
        while not _answers(sock):
            if child.poll() is not None and not _answers(sock):
                raise BackendError(f"the warm engine exited ({child.returncode}) before it answered; "
                                   f"its log: {sock.with_suffix('.log')}")
            if time.monotonic() > deadline:
                raise BackendError(f"the warm engine did not answer in {START_TIMEOUT:.0f} s; its log: {sock.with_suffix('.log')}")
            time.sleep(0.05)
    return sock


def start_soon() -> None:
    """After a one-shot command ran a Docker backend here: start the engine for the next one, without waiting."""
    with contextlib.suppress(Exception):
        if os.environ.get(ENGINE_ENV) != "off":
            start(wait=False)


def _engines() -> list[tuple[int, Path]]:
    from grader.backends.docker.lease import process_alive
    from grader.backends.owners import runs_root

    root = runs_root()
    found = []
    for pid_file in sorted(root.glob("sl-engine-*.pid")) if root.is_dir() else []:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            record = json.loads(pid_file.read_text())
            pid, sock = int(record["pid"]), Path(record["socket"])
            if process_alive(pid, _MARK):
                found.append((pid, sock))
    return found


def stop_engines(only: Optional[Path] = None, timeout: float = 15.0) -> list[str]:
    """SIGTERM every engine under the runs root (or the one on ``only``), SIGKILL one that lingers; say which."""
    from grader.backends.docker.lease import stop_process

    stopped = []
    for pid, sock in _engines():
        if only is not None and sock != only:
            continue
        stop_process(pid, _MARK, timeout)
        stopped.append(f"engine {pid} on {sock.name}")
    return stopped


def run_engine(args: argparse.Namespace, io: Streams, main: Main) -> int:
    """``sandbox-lab engine start|stop|status``, and ``serve``: the engine's own process, on ``args.socket``."""
    if args.action == "serve":
        if not args.socket:
            raise UsageError("engine serve needs the socket's path (sandbox-lab engine start runs it)")
        return serve(Path(args.socket), _idle_seconds(), main)
    if args.action == "start":
        sock = start()
        pid = next((p for p, s in _engines() if s == sock), 0)
        report: dict[str, Any] = {"running": True, "pid": pid, "socket": str(sock)}
    elif args.action == "stop":
        report = {"stopped": stop_engines(None if args.all else socket_path())}
    else:
        mine = socket_path()
        report = {"engines": [{"pid": p, "socket": str(s), "yours": s == mine} for p, s in _engines()]}
    if args.json:
        io.out.write(dump(report))
    elif args.action == "start":
        io.out.write(f"{PROG}: the warm engine runs (pid {report['pid']}); one-shot commands from this shell use it\n")
    elif args.action == "stop":
        io.out.write("".join(f"stopped {s}\n" for s in report["stopped"]) or "no engine was running\n")
    else:
        rows = report["engines"]
        io.out.write("".join(f"engine {r['pid']} on {r['socket']}{' (this shell)' if r['yours'] else ''}\n" for r in rows)
                     or "no engine runs\n")
    return EXIT_OK
