"""Where a sandbox that reaches the real host would arrive, and a job's signing agent: small servers on the grader's side.

``HostListener`` listens on loopback and the host's address on each bridge
(``sandbox_addresses``: never every interface, where other machines arrive),
and records what arrived; ``SigningAgent`` answers a job's signing requests
on a Unix socket, the key staying in this process. Both backends use them.
"""

from __future__ import annotations

import fcntl
import selectors
import socket
import struct
import sys
import threading
from pathlib import Path
from typing import Optional, Protocol, Sequence

from grader.core.errors import InfrastructureError
from grader.core.execution import signature

__all__ = ["HostListener", "Listening", "SigningAgent", "sandbox_addresses"]


class _Server:
    """Listening sockets served by a daemon thread, one connection at a time, until ``close``.

    ``_handle`` answers one accepted connection; an error in it never stops the server.
    """

    def __init__(self, socks: Sequence[socket.socket], timeout: float) -> None:
        self.socks = list(socks)
        self._timeout = timeout
        self._stop = threading.Event()
        self._selector = selectors.DefaultSelector()
        for sock in self.socks:
            sock.setblocking(False)
            self._selector.register(sock, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _handle(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                ready = self._selector.select(timeout=0.2)
            except OSError:
                return  # closed under us
            for key, _ in ready:
                try:
                    conn, _ = key.fileobj.accept()  # type: ignore[union-attr]
                except OSError:  # another thread's close, or a peer that went: nothing to answer
                    continue
                if self._stop.is_set():
                    conn.close()
                    return
                with conn:
                    conn.settimeout(self._timeout)
                    try:
                        self._handle(conn)
                    except OSError:
                        pass

    def close(self) -> None:
        self._stop.set()
        for sock in self.socks:
            try:
                # wakes the select() that waits in the thread: every run would otherwise wait out its timeout
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(timeout=2)
        self._selector.close()
        for sock in self.socks:
            sock.close()


_SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address


def sandbox_addresses() -> tuple[str, ...]:
    """Where a sandbox on this machine finds the machine itself: loopback, and its address on each local bridge.

    A Docker container's only way to its host is the host's address on the
    container's bridge (its default gateway: ``docker0``, ``br-…``); srt's
    sandbox, without its network namespace, would be on loopback. Never the
    addresses of other interfaces: those are where other machines arrive.
    Only Linux has bridges to list; elsewhere, loopback alone.
    """
    found = ["127.0.0.1"]
    net = Path("/sys/class/net")
    if sys.platform != "linux" or not net.is_dir():
        return tuple(found)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for iface in sorted(p.name for p in net.iterdir() if (p / "bridge").is_dir()):
            try:
                raw = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", iface.encode()[:15]))
            except OSError:
                continue  # a bridge without an IPv4 address (Sandbox Lab's own internal ones): nothing to reach
            found.append(socket.inet_ntoa(raw[20:24]))
    return tuple(dict.fromkeys(found))


class HostListener(_Server):
    """A TCP listener on the real host: if a sandbox's token ever arrives here, the host was reachable.

    It listens, on one port, only where a sandbox would reach this machine
    (``sandbox_addresses``): never on every interface, where any other machine
    could connect, hold its one-at-a-time loop, or learn that a grader runs here.
    """

    def __init__(self, addresses: Optional[Sequence[str]] = None) -> None:
        wanted = tuple(addresses) if addresses is not None else sandbox_addresses()
        if not wanted or any(a in ("", "0.0.0.0", "::") for a in wanted):
            raise ValueError(f"the host listener listens on named addresses only, not {wanted!r}")
        socks = self._bind(wanted)
        self.port: int = socks[0].getsockname()[1]
        self.addresses: tuple[str, ...] = tuple(str(s.getsockname()[0]) for s in socks)
        self.hits: list[str] = []
        super().__init__(socks, timeout=1.0)

    @staticmethod
    def _bind(addresses: tuple[str, ...], tries: int = 20) -> list[socket.socket]:
        """One socket per address, all on the port the first was given (the runner is told one port)."""
        for _ in range(tries):
            socks: list[socket.socket] = []
            try:
                for address in addresses:
                    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    socks.append(sock)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.bind((address, socks[0].getsockname()[1] if len(socks) > 1 else 0))
                    sock.listen(16)
                return socks
            except OSError:  # that port is taken on another address: all again, on another port
                for sock in socks:
                    sock.close()
        raise InfrastructureError(f"no free port on all of {', '.join(addresses)} for the host listener")

    def _handle(self, conn: socket.socket) -> None:
        self.hits.append(conn.recv(1024).decode("utf-8", "replace"))


class SigningAgent(_Server):
    """A stand-in for ssh-agent on the real host: it holds a key and signs what arrives on its Unix socket.

    The protocol is one line each way: ``SIGN <text>`` is answered with
    ``SIG <execution.signature(key, text)>``; anything else with ``ERR``. The
    key never crosses the socket, as with a real agent: what a sandboxed
    process gains is the use of the key, for as long as the socket is there.
    """

    def __init__(self, path: Path, key: str) -> None:
        self._key = key
        self.path = path
        self.requests: list[str] = []
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(path))
        # the sandbox's user connects through its mount; nobody else reaches it: the run directory is private
        path.chmod(0o777)
        sock.listen(8)
        super().__init__([sock], timeout=2.0)

    def _handle(self, conn: socket.socket) -> None:
        line = conn.recv(4096).decode("utf-8", "replace").strip()
        self.requests.append(line[:200])
        reply = f"SIG {signature(self._key, line[5:])}\n" if line.startswith("SIGN ") else "ERR one line: SIGN <text>\n"
        conn.sendall(reply.encode("ascii"))


class Listening(Protocol):
    """What the evidence needs of a listener where "the host" is: its port, and what arrived there.

    ``HostListener`` on the grader's machine; for a Docker engine elsewhere, one on the engine's host.
    """

    @property
    def port(self) -> int: ...

    @property
    def hits(self) -> list[str]: ...

