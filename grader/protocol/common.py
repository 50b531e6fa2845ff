"""The plumbing both service programs share: ports, config, JSON-lines logs, the ready file, threads, listeners.

Run inside the services image beside ``internet.py`` and ``proxy.py``, which
import it as the top-level module ``common`` (and, on the host, as
``grader.protocol.common``). Standard library only, since the static
install (pydantic alone) imports its ports too: it must not import the
package, nor ``domains``, ``http1`` or ``nameserver`` (which need ``h11`` and
``dnslib``), nor anything of either service; it imports only ``wire``, the
records it writes. Reading from sockets and HTTP heads are ``http1``'s. What
differs between the services (their config keys, limits and timeouts) is
passed in, never kept here.

The ports below are the one place they are written: the services take them as
their defaults, and the backends (``grader.backends``) import them from here to
configure the services and the probe runner.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

if TYPE_CHECKING:
    from grader.protocol import wire
else:
    try:  # in the image: plain scripts side by side in /opt/sandbox-lab/
        import wire
    except ImportError:  # on the host: imported from the package
        from grader.protocol import wire

__all__ = [
    "DNS_PORT",
    "HEARTBEAT_HOST",
    "HTTPS_PORT",
    "HTTP_PORT",
    "RUNS_DIR",
    "RUN_LOG_CAP",
    "POKE_SIGNAL",
    "PROXY_PORT",
    "TARGET_PREFIX",
    "TCP_SINK_PORT",
    "Admission",
    "Handler",
    "JsonlLog",
    "KindLog",
    "Recorder",
    "exchange",
    "expect_http",
    "heartbeat",
    "install_hint",
    "read_target",
    "serve_forever",
    "spawn",
    "stop_on_signals",
    "target_line",
    "wait_for",
    "write_atomically",
    "write_ready",
]

Handler = Callable[[socket.socket, str], None]  # (connection, client address)


# --- installing what is missing ----------------------------------------------------------


def install_hint(extra: str) -> str:
    """The one wording of "install this optional part": every missing-dependency message, here and on the host, says it.

    No package named sandbox-lab is published (anyone could register the name, and a user would install
    theirs), so the command installs the extra from a checkout of this repository, the one source there is.
    """
    return f"install the {extra} extra: pip install '.[{extra}]' in a Sandbox Lab checkout"


# --- ports and names ---------------------------------------------------------------------

# Where the services listen inside the services image. On the host (the srt
# backend, the tests) they listen on free loopback ports instead, given in
# their configs; these are then the ports a client *asks* for.
DNS_PORT = 53
HTTP_PORT = 80
HTTPS_PORT = 443
TCP_SINK_PORT = 4444  # the attacker's raw listener: what the probes' raw channel targets
PROXY_PORT = 3128  # the egress proxy, the sandbox's only way out behind a policy
# The name the services' self-checks ask for: reserved (RFC 6761), so it never
# exists, and a reader of the logs can tell a heartbeat from a sandbox's request.
HEARTBEAT_HOST = "heartbeat.invalid"


# --- the proxy's word: which host a connection is for ------------------------------------

# Real origins have addresses of their own; in the simulated internet every host
# shares one. So the egress proxy says which host it dialled, in one line before
# any byte of its client's (as HAProxy's PROXY protocol carries a client's
# address), and the sinks answer only for that host's names: a tunnel opened to
# one host cannot be used to talk to another. A connection without the line
# came straight from the plain container's own resolver, to the shared address,
# which answers for every name (the plain container reaches every host anyway).
# A forged line can only narrow what its own connection reaches.
TARGET_PREFIX = b"SANDBOX-LAB-TARGET "
_MAX_TARGET_LINE = 300


def target_line(host: str) -> bytes:
    """The line the proxy sends first on every connection it opens into the simulated internet."""
    return TARGET_PREFIX + host.encode("ascii") + b"\r\n"


def read_target(sock: socket.socket, timeout: float) -> str | None:
    """Take the proxy's line off the front of ``sock`` and return its host; None when the connection has none.

    Only the line is consumed (the bytes are peeked first), so a TLS
    ClientHello or a request right behind it stays unread for its handler.
    """
    deadline = time.monotonic() + timeout
    seen = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        sock.settimeout(remaining)
        try:
            peeked = sock.recv(_MAX_TARGET_LINE, socket.MSG_PEEK)
        except OSError:
            return None
        if not peeked:
            return None
        head = peeked[: len(TARGET_PREFIX)]
        if not TARGET_PREFIX.startswith(head):
            return None  # not the proxy's line: leave everything for the handler
        end = peeked.find(b"\r\n")
        if len(peeked) >= len(TARGET_PREFIX) and end >= 0:
            line = b""
            while len(line) < end + 2:
                chunk = sock.recv(end + 2 - len(line))
                if not chunk:
                    return None
                line += chunk
            return line[len(TARGET_PREFIX) : end].decode("ascii", "replace").strip()
        if len(peeked) >= _MAX_TARGET_LINE:
            return None
        if peeked == seen:
            time.sleep(0.002)  # the rest of the line is on its way
        seen = peeked


# --- logs, the ready file --------------------------------------------------------


class JsonlLog:
    """An append-only JSON-lines file of wire records (``wire.dump_line``) that readers may tail while it grows.

    Each record is one ``os.write`` of a whole line under a lock, so a reader
    never sees two records interleaved, at worst a last line still missing.
    """

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()
        self._seq = 0

    def write(self, record: Any) -> None:
        with self._lock:
            os.write(self._fd, (wire.dump_line(record, self._seq) + "\n").encode("ascii"))
            self._seq += 1


RUN_LOG_CAP = 8 * 1024 * 1024  # bytes per log per run: past it, records are dropped and the run is told so
RUNS_DIR = "runs"  # under out_dir: the grader's requests (<run>.open/.close/.gone) and each run's logs (<run>/)
_RUN_KEY = re.compile(r"[A-Za-z0-9_-]{1,64}")
RUN_EXPIRY = 3600.0  # seconds: a run its grader never closed (killed) stops claiming its clients
STAMP_GRAIN_S = 0.05  # a directory's mtime is the kernel's coarse clock: a tick of 1-10 ms, with room to spare
REPOLL_S = 1.0  # ``Recorder.watch`` lists its requests at least this often, whatever the directory's stamp says


def _loopback(client: str) -> bool:
    return client.startswith("127.") or client == "::1"


class _RunLogs:
    """One run's logs: one file per kind, capped, closed by an ``EndRecord`` each."""

    def __init__(self, directory: str, key: str, kinds: Sequence[str], cap: int) -> None:
        os.makedirs(directory, mode=0o755, exist_ok=True)
        self.key = key
        self.dir = directory
        self.cap = cap
        self.opened = time.monotonic()
        self._fds = {k: os.open(os.path.join(directory, f"{k}.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC, 0o644)
                     for k in kinds}
        self._count = dict.fromkeys(kinds, 0)
        self._bytes = dict.fromkeys(kinds, 0)
        self._overflowed = dict.fromkeys(kinds, False)
        self._closed = False

    def write(self, kind: str, record: Any) -> None:
        """Under the caller's lock."""
        if self._closed:
            return
        line = (wire.dump_line(record, self._count[kind]) + "\n").encode("ascii")
        if self._bytes[kind] + len(line) > self.cap:
            self._overflowed[kind] = True  # said in the closing record: the rest of this run's evidence is gone
            return
        os.write(self._fds[kind], line)
        self._count[kind] += 1
        self._bytes[kind] += len(line)

    def lost(self) -> None:
        """Something of this run's went unrecorded (a connection refused at its limit): every log says so."""
        for kind in self._overflowed:
            self._overflowed[kind] = True

    def close(self) -> None:
        """Under the caller's lock: write each log's closing record, then say so in ``closed``."""
        if self._closed:
            return
        self._closed = True
        for kind, fd in self._fds.items():
            os.write(fd, (wire.dump_end(self.key, self._count[kind], self._overflowed[kind], time.time()) + "\n").encode("ascii"))
            os.close(fd)
        write_atomically(os.path.join(self.dir, "closed"), b"")


class Recorder:
    """Where every record of a service goes: to the run that claims its client, else to the general log.

    A run claims its clients by the grader's file ``runs/<run>.open`` (JSON
    ``{"run": key, "clients": [addresses]}``; ``"*"`` claims every client no
    other run claims, for an internet that serves one run). The run's records
    then go to ``runs/<run>/<kind>.jsonl``, at most ``cap`` bytes each; past it
    they are dropped and the closing record says so. ``runs/<run>.close``
    closes them (each log gets its ``EndRecord``, then ``runs/<run>/closed``
    appears); ``runs/<run>.gone`` removes them. Records of clients no run
    claims (and the services' own self-checks, from loopback) go to
    ``<kind>.jsonl`` in ``out_dir``, which no verdict reads. Only the grader
    writes in ``runs/``: a tenant can neither claim nor close another's run.
    """

    def __init__(self, out_dir: str, kinds: Sequence[str], cap: int = RUN_LOG_CAP) -> None:
        self._out = out_dir
        self._control = os.path.join(out_dir, RUNS_DIR)
        os.makedirs(self._control, mode=0o755, exist_ok=True)
        self._kinds = tuple(kinds)
        self._cap = cap
        self._general = {k: JsonlLog(os.path.join(out_dir, f"{k}.jsonl")) for k in kinds}
        self._lock = threading.Lock()
        self._runs: dict[str, _RunLogs] = {}
        self._clients: dict[str, str] = {}  # address -> run key
        self._any: str | None = None  # the run that claims every other client
        self._seen: set[str] = set()  # control files already acted on
        self._asked = float("-inf")  # when the grader's last request was acted on (``watch`` polls faster after one)

    def log(self, kind: str) -> "KindLog":
        return KindLog(self, kind)

    def _run_of(self, client: str) -> _RunLogs | None:
        key = self._clients.get(client) or (None if _loopback(client) else self._any)
        return self._runs.get(key) if key else None

    def write(self, kind: str, record: Any) -> None:
        with self._lock:
            run = self._run_of(str(record.client))
            if run is not None:
                run.write(kind, record)
                self._asked = time.monotonic()  # a run's traffic: its grader's close is coming
                return
        self._general[kind].write(record)

    def lost(self, client: str) -> None:
        """A connection of ``client``'s went unrecorded: its run's evidence is incomplete."""
        with self._lock:
            run = self._run_of(client)
            if run is not None:
                run.lost()

    def poll(self) -> None:
        """Act on the grader's requests in ``runs/``: open, close, remove (called every few ms)."""
        try:
            names = sorted(os.listdir(self._control))
        except OSError:
            return
        for name in names:
            key, dot, action = name.rpartition(".")
            if not dot or action not in ("open", "close", "gone") or not _RUN_KEY.fullmatch(key) or name in self._seen:
                continue
            self._seen.add(name)
            self._asked = time.monotonic()
            try:
                getattr(self, f"_{action}")(key, os.path.join(self._control, name))
            except ValueError:  # a request still being written (an engine's archive API is not atomic): next poll
                self._seen.discard(name)
            except FileNotFoundError:  # withdrawn between the listing and the reading (its run is gone): nothing to do
                pass
            except Exception:  # noqa: BLE001 - one bad request must never stop the recorder
                traceback.print_exc()
        with self._lock:  # a run its grader never closed (killed) gives its clients back
            stale = [k for k, r in self._runs.items() if time.monotonic() - r.opened > RUN_EXPIRY]
        for key in stale:
            self._close(key, "")

    def _open(self, key: str, path: str) -> None:
        with open(path, encoding="utf-8") as f:
            request = json.load(f)
        clients = [str(c) for c in request["clients"]]
        if request["run"] != key:
            raise ValueError(f"{path}: names run {request['run']!r}")
        with self._lock:
            run = _RunLogs(os.path.join(self._control, key), key, self._kinds, self._cap)
            self._runs[key] = run
            for client in clients:
                if client == "*":
                    self._any = key
                else:
                    self._clients[client] = key  # a newer claim of an address wins: the old run is over
        write_atomically(os.path.join(self._control, key, "opened"), b"")

    def _close(self, key: str, _path: str) -> None:
        with self._lock:
            run = self._runs.pop(key, None)
            self._clients = {c: k for c, k in self._clients.items() if k != key}
            if self._any == key:
                self._any = None
            if run is not None:
                run.close()

    def _gone(self, key: str, _path: str) -> None:
        self._close(key, _path)
        shutil.rmtree(os.path.join(self._control, key), ignore_errors=True)
        for action in ("open", "close", "gone"):
            name = f"{key}.{action}"
            try:
                os.remove(os.path.join(self._control, name))
            except OSError:
                pass
            self._seen.discard(name)

    def watch(self, interval: float = 0.02, busy: float = 0.004, busy_for: float = 2.0) -> None:
        """Poll for the grader's requests in a thread of its own, forever: every ``busy`` seconds for ``busy_for``
        seconds after a request, a record of a run's or a poke (its grader waits for the close and the removal
        that follow), every ``interval`` when idle (a run's open may wait a whole interval). A look is a stat of
        the control directory, and a listing only when that may have changed (``due``)."""

        def loop() -> None:
            last: tuple[tuple[int, int, int] | None, float, float] | None = None
            while True:
                stamp = self.stamp()
                if self.due(stamp, last):
                    at = (stamp, time.time(), time.monotonic())  # taken before the listing: it sees all before
                    self.poll()
                    last = at
                time.sleep(self.pause(interval, busy, busy_for))

        spawn(loop)

    def stamp(self) -> tuple[int, int, int] | None:
        """The control directory's (mtime, ctime, inode): a request's file added or removed changes it."""
        try:
            st = os.stat(self._control)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_ctime_ns, st.st_ino)

    @staticmethod
    def due(stamp: tuple[int, int, int] | None, last: tuple[tuple[int, int, int] | None, float, float] | None) -> bool:
        """Must ``watch`` list the requests now? Not when the last listing saw this stamp and came after all it can
        hide: a timestamp's grain is the kernel's tick (a second on some file systems), so two changes within one
        share a stamp, and a listing within ``STAMP_GRAIN_S`` of it lists again. Always once a ``REPOLL_S``."""
        if stamp is None or last is None:
            return True
        seen, listed_wall, listed_mono = last
        if stamp != seen or time.monotonic() - listed_mono >= REPOLL_S:
            return True
        grain = 2.0 if stamp[0] % 1_000_000_000 == 0 else STAMP_GRAIN_S  # whole seconds: a coarse file system
        return listed_wall - stamp[0] / 1e9 < grain

    def pause(self, interval: float, busy: float, busy_for: float) -> float:
        """How long ``watch`` waits before it looks again: ``busy`` soon after a request, a record of a run's, or a
        poke (``nudge``); else ``interval``. Not for a run merely open: a prepared run held for minutes would keep
        the recorder waking 250 times a second (each wake-up costs ~60 us of CPU in a VM: 1.5% of a core)."""
        return busy if time.monotonic() - self._asked < busy_for else interval

    def nudge(self) -> None:
        """A run's grader is at work (it poked the service when its sandbox finished): its close follows."""
        self._asked = time.monotonic()


@dataclass(frozen=True)
class KindLog:
    """The log of one kind of record (``http``, ``dns``, ``tcp``) of a ``Recorder``: what a handler writes to."""

    recorder: Recorder
    kind: str

    def write(self, record: Any) -> None:
        self.recorder.write(self.kind, record)


class Admission:
    """Which connections get a thread: every client together at most ``total``, one client at most ``per_client``.

    One client (a run's proxy) holding every slot would starve every other
    run, and the grader would then retire a healthy service. So no client
    holds more than ``per_client`` (well under the total) at once; the
    self-check has listeners and slots of its own besides. A connection over
    a limit is closed at once, and ``refused(client)`` is told (the recorder
    marks that client's run incomplete: a refused attempt is no evidence).
    """

    def __init__(self, total: int, per_client: int, refused: Callable[[str], None] = lambda c: None) -> None:
        self._slots = threading.BoundedSemaphore(total)
        self._per_client = per_client
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()
        self.refused = refused

    def admit(self, client: str) -> Callable[[], None] | None:
        """A release function when ``client`` may have a thread now; None when it may not."""
        with self._lock:
            if self._held.get(client, 0) >= self._per_client or not self._slots.acquire(blocking=False):
                return None
            self._held[client] = self._held.get(client, 0) + 1

        def release() -> None:
            with self._lock:
                self._held[client] -= 1
                if not self._held[client]:
                    del self._held[client]
            self._slots.release()

        return release


def write_atomically(path: str, data: bytes) -> None:
    """Replace ``path`` in one step, so a reader never sees it half written."""
    # 0o644, not mkstemp's 0o600: the grader reads out_dir as another user.
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def write_ready(out_dir: str, address: str) -> None:
    """Announce that the service is listening: the grader waits for this file."""
    ready = {"address": address, "pid": os.getpid()}
    write_atomically(os.path.join(out_dir, "ready"), json.dumps(ready).encode("ascii"))


# --- threads and signals -----------------------------------------------------------------


def spawn(target: Callable[..., None], *args: Any) -> None:
    threading.Thread(target=target, args=args, daemon=True).start()


# seconds between self-checks when nobody asks: the grader pokes a recorder (POKE_SIGNAL) whenever it needs a
# fresh beat, so the interval only bounds how stale an idle recorder's beat gets, and each check costs a few ms
# of CPU and (the proxy's) a log line: at 0.1 s an idle lab's warm proxies and internet took ~6% of a core
HEARTBEAT_INTERVAL = 1.0
POKE_SIGNAL = signal.SIGUSR1  # a self-check now (``heartbeat``): the grader sends it when a sandbox has finished


def exchange(port: int, request: bytes, timeout: float = 1.0) -> bytes:
    """Send ``request`` to one of this service's own listeners on loopback and return the first reply bytes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)  # the raw sinks answer once the peer has finished sending
        return sock.recv(64)


def expect_http(port: int, target: str, what: str) -> None:
    """Ask one of this service's own HTTP listeners for ``target``; raise OSError unless an HTTP answer comes.

    Any status counts (a refusal too): the listener read a request and decided.
    """
    request = f"GET {target} HTTP/1.1\r\nHost: {HEARTBEAT_HOST}\r\nConnection: close\r\n\r\n"
    if not exchange(port, request.encode("ascii")).startswith(b"HTTP/1.1 "):
        raise OSError(f"{what} gave no answer")


def heartbeat(out_dir: str, check: Callable[[], None], on_poke: Callable[[], None] | None = None) -> None:
    """Rewrite ``out_dir/heartbeat`` after each successful self-check, forever.

    ``check`` makes real requests to the service's own listeners. The grader
    trusts a recorder's silence only if a heartbeat arrived after the sandbox
    finished: a service that is running but hung (stopped, deadlocked) stops
    beating, and its silence then proves nothing.

    A check runs every ``HEARTBEAT_INTERVAL``, and at once on ``POKE_SIGNAL``:
    the grader sends it when a sandbox has finished, so it waits for a check's
    few milliseconds rather than for the rest of an interval. A poke only
    brings the next check forward (and calls ``on_poke``: the internet's
    recorder looks often for the close that follows); what a beat proves is unchanged. Called
    from the main thread (signal handlers live there); elsewhere the checks
    keep their interval alone.
    """
    path = os.path.join(out_dir, "heartbeat")
    poked = threading.Event()
    def on_signal(*_: object) -> None:
        poked.set()
        if on_poke is not None:
            on_poke()

    try:
        signal.signal(POKE_SIGNAL, on_signal)
    except ValueError:  # not the main thread: no handler, the interval alone
        pass

    def beat() -> None:
        while True:
            try:
                check()
                write_atomically(path, repr(time.time()).encode("ascii"))
            except Exception:  # noqa: BLE001 - a failed check is a missed beat, which is the signal
                pass
            poked.wait(HEARTBEAT_INTERVAL)
            poked.clear()  # a poke that comes during the next check sets it again: another check follows at once

    spawn(beat)


def stop_on_signals() -> threading.Event:
    """An event that SIGTERM and SIGINT set, for a clean shutdown."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # PID 1 in a container ignores SIGTERM otherwise
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    return stop


def wait_for(stop: threading.Event) -> None:
    """Block until ``stop`` is set, waking each second so signal handlers get to run."""
    while not stop.wait(1.0):
        pass


def serve_forever(listener: socket.socket, handle: Handler, slots: threading.Semaphore | Admission) -> None:
    """Accept connections and run ``handle`` on each in its own thread, whatever it raises.

    ``slots`` caps the threads: a semaphore makes more clients wait in the
    listen backlog; an ``Admission`` accepts first and closes a connection
    over its client's limit (so nobody's backlog is starved by one client).
    """
    if isinstance(slots, Admission):
        _serve_admitted(listener, handle, slots)
        return

    while True:
        slots.acquire()
        try:
            conn, addr = listener.accept()
        except OSError:
            slots.release()
            if listener.fileno() == -1:
                return  # closed at shutdown
            time.sleep(0.05)  # e.g. out of file descriptors: back off, keep serving
            continue
        spawn(_run_one, handle, conn, addr[0], slots.release)


def _run_one(handle: Handler, conn: socket.socket, client: str, release: Callable[[], None]) -> None:
    """Serve one connection, whatever ``handle`` raises; then close it and give its slot back."""
    try:
        handle(conn, client)
    except Exception:  # one broken client must never stop the service
        print(f"error serving {client}:", file=sys.stderr)
        traceback.print_exc()
    finally:
        conn.close()
        release()


def _serve_admitted(listener: socket.socket, handle: Handler, admission: Admission) -> None:
    while True:
        try:
            conn, addr = listener.accept()
        except OSError:
            if listener.fileno() == -1:
                return  # closed at shutdown
            time.sleep(0.05)  # e.g. out of file descriptors: back off, keep serving
            continue
        client = str(addr[0])
        release = admission.admit(client)
        if release is None:
            conn.close()  # over its limit: refused at once, and its run is told its evidence is incomplete
            admission.refused(client)
            continue
        spawn(_run_one, handle, conn, client, release)
