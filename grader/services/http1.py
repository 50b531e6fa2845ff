"""Reading from clients: buffered socket reads under deadlines, HTTP heads, and HTTP/1.1 request framing by ``h11``.

Run inside the services image beside ``internet.py`` and ``proxy.py`` (and on
the host as ``grader.services.http1``). Where a request's body ends is the
question request smuggling lives on, so this module does not answer it by
hand: ``h11`` (Debian's ``python3-h11`` in the image, the ``h11`` wheel on
the host) reads Content-Length and chunked bodies, refuses a bad chunk size,
conflicting Content-Lengths and any Transfer-Encoding but ``chunked``, and
keeps whatever follows the body (a second, unjudged request) out of it.

``parse_head`` stays in front of it, stricter than ``h11``, which tolerates
what RFC 9112 lets a recipient tolerate and what a smuggler relies on:
obsolete line folding (h11 unfolds it), bare LF line ends, NUL, and
Content-Length beside Transfer-Encoding (h11 lets chunked win). Each is refused
here before ``h11`` sees the head. It also parses the origin's response head
for the proxy, which then relays the body to the end of the connection, so no
response framing is needed. Standard library and ``h11`` only: of the package
it imports ``common`` alone (for the wording of a missing ``h11``), and nothing
of either service.
"""

from __future__ import annotations

import re
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from grader.protocol import common
else:
    try:  # in the image: plain scripts side by side in /opt/sandbox-lab/
        import common
    except ImportError:  # on the host: imported from the package
        from grader.protocol import common

try:
    import h11
except ImportError as exc:  # the host without the extra that runs the services
    raise ImportError(f"the services frame HTTP with h11: {common.install_hint('docker')} "
                      "(the services image has it from Debian: python3-h11)") from exc

__all__ = [
    "BadHead",
    "Body",
    "Head",
    "Reader",
    "TooLarge",
    "header_fields",
    "parse_head",
]


def header_fields(lines: Sequence[str]) -> list[tuple[str, str]]:
    """A head's header lines as (name, value) pairs in order, names as sent, blank lines skipped.

    Raises ValueError on a line that is not ``name: value``.
    """
    fields = []
    for line in lines:
        if not line:
            continue
        name, sep, value = line.partition(":")
        # Obsolete line folding, spaces before the colon and bare CR, LF or NUL
        # (which some servers take for a line end) are classic smuggling
        # tricks: refuse rather than guess.
        if not sep or not name or name != name.strip() or line[0] in " \t" or _FORBIDDEN.search(line):
            raise ValueError("malformed header line")
        fields.append((name, value.strip()))
    return fields


_FORBIDDEN = re.compile(r"[\r\n\x00]")
# RFC 9112: a method is a token, a target has no white space or control
# character, a version is HTTP/<digit>.<digit>; a status is three digits, and a
# reason phrase is printable (obs-text allowed).
_REQUEST_LINE = re.compile(r"([!#$%&'*+.^_`|~0-9A-Za-z-]+) ([^\x00-\x20\x7f]+) (HTTP/[0-9]\.[0-9])")
_STATUS_LINE = re.compile(r"(HTTP/[0-9]\.[0-9]) ([0-9]{3}) ([\t\x20-\x7e\x80-\xff]*)")


class TooLarge(Exception):
    """More bytes arrived before the awaited marker (or more header lines) than the caller allows."""


class BadHead(ValueError):
    """Bytes that are not an HTTP head; the text says what is wrong."""


@dataclass(frozen=True)
class Head:
    """One HTTP head: its start line in three parts and its header fields as sent, in order."""

    start: tuple[str, str, str]  # request: method, target, version; response: version, status, reason
    headers: tuple[tuple[str, str], ...]  # (name as sent, value)

    def values(self, name: str) -> list[str]:
        """Every value of the header ``name`` (compared case-insensitively), in order."""
        wanted = name.lower()
        return [v for k, v in self.headers if k.lower() == wanted]

    def value(self, name: str) -> str | None:
        """The first value of the header ``name``, None when there is none."""
        found = self.values(name)
        return found[0] if found else None


def parse_head(raw: bytes, max_headers: int, *, response: bool = False) -> Head:
    """Parse a request head (or, with ``response``, a response head), up to and including its blank line.

    The one HTTP head parser of the services: the sink and the proxy read the
    same bytes the same way. A request line is exactly ``METHOD SP TARGET SP
    HTTP/d.d``; a response line is ``HTTP/d.d SP STATUS SP reason`` (the
    reason may hold spaces). Raises BadHead on anything else, or on a malformed
    header line, and TooLarge past ``max_headers`` header lines.
    """
    lines = raw.decode("latin-1").split("\r\n")
    start = (_STATUS_LINE if response else _REQUEST_LINE).fullmatch(lines[0])
    if start is None:
        raise BadHead("malformed start line")
    try:
        headers = header_fields(lines[1:])
    except ValueError as exc:
        raise BadHead(str(exc)) from None
    if len(headers) > max_headers:
        raise TooLarge("too many headers")
    return Head((start[1], start[2], start[3]), tuple(headers))


class Reader:
    """Buffered reads from a socket under an idle timeout and optional deadlines.

    ``deadline`` (a ``time.monotonic()`` value) caps every read of this
    reader; a deadline passed to one call caps that call as well. Deadlines
    bound the whole exchange, so slow drip-feeding cannot pin a thread.
    """

    def __init__(self, sock: socket.socket, idle: float, deadline: float | None = None) -> None:
        self.sock = sock
        self.buf = bytearray()
        self._idle = idle
        self._deadline = deadline

    def fill(self, deadline: float | None = None) -> bool:
        """Read more; False on EOF, timeout or error (a silent peer is treated as gone)."""
        timeout = self._idle
        for cap in (self._deadline, deadline):
            if cap is not None:
                timeout = min(timeout, cap - time.monotonic())
        if timeout <= 0:
            return False
        self.sock.settimeout(timeout)
        try:
            chunk = self.sock.recv(65536)
        except OSError:  # timeout, reset, TLS error: the peer is gone either way
            return False
        self.buf += chunk
        return bool(chunk)

    def read_until(self, marker: bytes, limit: int, deadline: float | None = None) -> bytes | None:
        """Bytes up to and including ``marker``; None if the stream ends first.

        Raises TooLarge once more than ``limit`` bytes are buffered without it.
        """
        while True:
            index = self.buf.find(marker)
            if index >= 0:
                end = index + len(marker)
                out = bytes(self.buf[:end])
                del self.buf[:end]
                return out
            if len(self.buf) > limit:
                # The proxy reports this text to its client; the sink ignores it.
                raise TooLarge("request head too large")
            if not self.fill(deadline):
                return None

    def read_exact(self, n: int) -> bytes:
        """Up to ``n`` bytes: fewer only if the stream ends first."""
        while len(self.buf) < n and self.fill():
            pass
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def take(self, limit: int) -> bytes:
        """Up to ``limit`` bytes, reading once if nothing is buffered; b"" at the end."""
        if not self.buf and not self.fill():
            return b""
        out = bytes(self.buf[:limit])
        del self.buf[:limit]
        return out


class Body:
    """One request's body, read through ``h11`` from a ``Reader`` that holds what follows the head.

    ``h11`` decides where the body ends; bytes past it stay in its buffer and
    are never returned. ``raw`` keeps the bytes as received (up to ``keep``),
    so a body that turns out malformed is still evidence.
    """

    def __init__(self, raw_head: bytes, head: Head, reader: Reader, keep: int) -> None:
        self._reader = reader
        self._keep = keep
        self.raw = bytearray()
        if head.values("transfer-encoding") and head.values("content-length"):
            # h11 lets chunked win (RFC 9112 section 6.3); a server behind us might not. Either reading
            # leaves the other's request in the stream: refuse, as RFC 9112 lets a server do.
            raise BadHead("both Transfer-Encoding and Content-Length")
        if head.value("host") is None:
            # h11 answers a Host-less HTTP/1.1 request with 400 (RFC 9112 section 3.2); these services do
            # not: the proxy takes the host from the absolute target and the sink from the SNI or the
            # proxy's line, and record the request either way. An empty Host, after the start line,
            # changes nothing of the framing.
            line_end = raw_head.index(b"\r\n") + 2
            raw_head = raw_head[:line_end] + b"Host: \r\n" + raw_head[line_end:]
        # the head is already bounded by the caller's read; a chunk-size line gets as much room
        self._conn = h11.Connection(h11.SERVER, max_incomplete_event_size=max(len(raw_head), 4096))
        self._conn.receive_data(raw_head)
        try:
            event = self._conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise BadHead(str(exc)) from None
        if not isinstance(event, h11.Request):  # the head is whole, so h11 has a request or an error
            raise BadHead("not a request")
        self.chunked = any(name == b"transfer-encoding" for name, _ in event.headers)
        self.trailers: list[tuple[bytes, bytes]] = []
        self.done = False

    def next(self) -> bytes | None:
        """The next piece of the body; None once it has ended. Raises BadHead on a malformed body or one cut short."""
        while not self.done:
            try:
                event = self._conn.next_event()
            except h11.RemoteProtocolError as exc:
                raise BadHead(str(exc)) from None
            if event is h11.NEED_DATA:
                chunk = self._reader.take(65536)
                if len(self.raw) < self._keep:
                    self.raw += chunk[: self._keep - len(self.raw)]
                self._conn.receive_data(chunk)  # b"": the client closed, which h11 turns into an error mid-body
            elif isinstance(event, h11.Data):
                return bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self.trailers = list(event.headers.raw_items())
                self.done = True
            else:  # PAUSED cannot come before the end of the message
                raise BadHead(f"unexpected {type(event).__name__} in a request body")
        return None
