"""The ``sandbox-lab`` command's first step (``cli.launch.entry``): hand a one-shot command to this machine's warm engine.

A one-shot ``sandbox-lab probe`` pays, before its sandbox starts, for an
interpreter, the grader's imports, a Docker client, the images' check and the
shared internet's adoption; the warm engine (``cli.engine``) has paid them
once. This module imports the standard library alone, so a handed command
costs the CLI's own module, a connection and the run itself.

A command is handed when it is one the engine serves (``SERVED``), reads no
standard input (no ``-`` argument), asks for no help, ``$SANDBOX_LAB_ENGINE``
is not ``off``, and an engine for this caller answers on its socket: same
interpreter, same checkout and the same environment its backends were made
under (``engine_key``), owned by this user (the peer's uid is checked on both
ends). Otherwise, and whenever the engine cannot finish what it was handed
(stopped mid-run, stale, busy with another checkout's code), the command runs
here as it always did, from the start: the verdict is always a run of this
caller's policy, never a guess. What a handed command prints is what it
would print here: its messages stream as they come, its results are held
until its exit code arrives, so an engine that dies mid-run leaves no half
report behind the one the local run prints.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import struct
import sys

TYPE_CHECKING = False  # typing's own, without importing typing on the command's path (mypy reads the name)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import IO, Optional, Sequence

__all__ = ["ENGINE_ENV", "INTERRUPTED", "SERVED", "engine_key", "exit_if_handed", "handed", "peer_uid", "served", "socket_path"]

ENGINE_ENV = "SANDBOX_LAB_ENGINE"  # "off": never hand a command to an engine, never start one
SERVED = frozenset({"probe", "grade", "check", "attack"})  # one-shot commands that read files, never stdin
INTERRUPTED = 130  # terminal.EXIT_INTERRUPTED, not imported from there (a test keeps the two equal)
_UNIX_PATH_MAX = 100  # AF_UNIX paths are cut at 108 bytes on Linux: longer ones are not used
# the environment a backend reads when it is made (the engine keeps backends): a caller whose differs gets its own engine
_KEYED_PREFIXES = ("SANDBOX_LAB_", "DOCKER_")
_KEYED = ("HOME", "PATH", "TMPDIR", "XDG_STATE_HOME", "XDG_CACHE_HOME")
_NOT_KEYED = frozenset({ENGINE_ENV, "SANDBOX_LAB_TARGET", "SANDBOX_LAB_DEBUG"})  # read per command, not per backend


def engine_key(env: Optional[dict[str, str]] = None) -> str:
    """Which engine may serve this caller: its interpreter, its checkout and the environment its backends read."""
    env = dict(os.environ) if env is None else env
    keyed = sorted((k, v) for k, v in env.items()
                   if (k.startswith(_KEYED_PREFIXES) or k in _KEYED) and k not in _NOT_KEYED)
    package = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    text = json.dumps([sys.executable, package, os.geteuid(), keyed])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _runs_root(env: dict[str, str]) -> str:
    # owners.runs_root's rule (a test keeps the two equal), without importing the backends
    chosen = env.get("SANDBOX_LAB_RUNS")
    if chosen:
        return chosen
    import tempfile

    euid = os.geteuid()
    return os.path.join(tempfile.gettempdir(), "sandbox-lab-runs" if euid == 0 else f"sandbox-lab-runs-{euid}")


def socket_path(env: Optional[dict[str, str]] = None) -> Optional[Path]:
    """Where this caller's engine listens (under the runs root, which only its user may enter); None: too long."""
    from pathlib import Path  # not on a handed command's path: it connects by the string

    path = _socket_file(dict(os.environ) if env is None else env)
    return Path(path) if path is not None else None


def _socket_file(env: dict[str, str]) -> Optional[str]:
    path = os.path.join(_runs_root(env), f"sl-engine-{engine_key(env)}.sock")
    return path if len(os.fsencode(path)) <= _UNIX_PATH_MAX else None


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket (SO_PEERCRED: the kernel's word, not the peer's)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return int(struct.unpack("3i", creds)[1])


def served(argv: Sequence[str]) -> bool:
    return (os.environ.get(ENGINE_ENV, "") != "off" and bool(argv) and argv[0] in SERVED
            and not any(a in ("-", "-h", "--help", "--version") for a in argv[1:]))


def _connect(path: str) -> Optional[socket.socket]:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(1.0)
        conn.connect(path)
        if peer_uid(conn) != os.geteuid():  # someone else's socket where ours should be: never talk to it
            conn.close()
            return None
        conn.settimeout(None)  # a run takes as long as it takes; the engine bounds it
        return conn
    except OSError:
        conn.close()
        return None


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def handed(argv: Sequence[str]) -> Optional[int]:
    """Run ``argv`` on the warm engine and return its exit code; None: run it here (no engine, or it could not finish)."""
    if not served(argv):
        return None
    path = _socket_file(dict(os.environ))
    conn = _connect(path) if path is not None else None
    if conn is None:
        return None
    request = {"argv": list(argv), "cwd": os.getcwd(), "env": dict(os.environ),
               "tty": [_isatty(sys.stdout), _isatty(sys.stderr)]}
    held: list[str] = []
    with conn, conn.makefile("rb") as replies:
        try:
            conn.sendall(json.dumps(request).encode() + b"\n")
            for line in replies:
                frame = json.loads(line)
                if "err" in frame:
                    sys.stderr.write(frame["err"])
                    sys.stderr.flush()
                elif "out" in frame:
                    held.append(frame["out"])
                elif "exit" in frame:
                    sys.stdout.write("".join(held))
                    sys.stdout.flush()
                    return int(frame["exit"])
                else:  # "declined": stale code, another caller's environment: the command runs here
                    return None
        except (OSError, ValueError):
            pass
    sys.stderr.write("sandbox-lab: the warm engine stopped before the command finished; running it here instead\n")
    return None


def exit_if_handed(argv: Sequence[str]) -> None:
    """Exit with the engine's code once it ran ``argv`` (``handed``); return where the command is to run here. A
    Ctrl-C while waiting exits ``INTERRUPTED``: the engine finishes that run and removes it, nothing of it is printed."""
    try:
        done = handed(argv)
    except KeyboardInterrupt:
        sys.stderr.write("sandbox-lab: interrupted\n")
        sys.exit(INTERRUPTED)
    if done is not None:
        sys.exit(done)
