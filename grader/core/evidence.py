"""Evidence: what a real run left behind, the markers probes leave in it, and the primitives that read it.

Pure: a backend collects the evidence (the runner's output, the world copy
before and after, the sink's, DNS server's, proxy's and host listener's logs);
each probe's record (``probes/``) judges it with the primitives here. The
same judgement serves every real backend, so they cannot differ in how they
read the same facts. ``Markers`` is the one definition of what a probe sends
and what its judge looks for, so the two cannot drift apart.

The rules that keep a verdict honest:

* ``succeeded`` needs an unforgeable trace: a per-run canary or marker where
  only a successful attack could put it.
* ``blocked`` needs the attempt to be on record AND the recorders to have been
  alive; otherwise the verdict is ``error``, never a guess.
* The probe's own claims ("I read it", "I sent it") decide nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Callable, Iterable, Literal, Mapping, Optional, TypeVar

from grader.core.access import Network
from grader.protocol.domains import matches
from grader.core.records import Outcome, RawPorts, SinkChannel, SinkHit
from grader.protocol.common import HEARTBEAT_HOST, TCP_SINK_PORT
from grader.protocol.wire import DnsRecord, HttpRecord, ProxyRecord, RunnerRecord, TcpRecord, WireError, parse_record, parse_runner_line
from grader.core.world import World

__all__ = [
    "Evidence", "Markers", "NextSession", "RunnerRecord", "Verdict", "attacker_reads", "attempts", "backdoor_sightings",
    "canary_sightings", "dns_text", "encodings", "failures", "finished", "http_hits", "in_zone", "judge_read", "judge_write",
    "log_window", "net_blocked", "silent_open_network", "self_checked_after", "parse_lines", "parse_runner_output", "sha256", "sightings", "timed_out", "write_marker",
]



@dataclass(frozen=True)
class Verdict:
    """What a probe's judge returns: its outcome (one of three, typed), why in one sentence, and the evidence."""

    outcome: Outcome
    why: str
    proof: tuple[str, ...]


MAX_LOG_LINES = 20_000  # a flood from inside the sandbox is cut here, not in the grader's memory


R = TypeVar("R", HttpRecord, DnsRecord, TcpRecord, ProxyRecord)


def parse_runner_output(text: str) -> tuple[RunnerRecord, ...]:
    """Every line the probe runner printed, as records (``wire.RunnerRecord``); WireError on any other line.

    The runner's output is its stdout alone, and it prints nothing but
    records: a line that is not one (cut, garbled, renamed) means the output
    cannot be read whole, and a verdict read from part of it could be wrong.
    A runner that refused its orders (``runner``/``refused``) ran nothing.
    """
    lines = [line for line in text.split("\n") if line.strip()]
    if len(lines) > MAX_LOG_LINES:
        raise WireError(f"the probe runner printed more than {MAX_LOG_LINES} lines")
    out = tuple(parse_runner_line(line, f"runner output line {i + 1}") for i, line in enumerate(lines))
    refused = [r.detail for r in out if r.probe == "runner" and r.step == "refused"]
    if refused:
        raise WireError(f"the probe runner refused its orders: {refused[0]}")
    return out


def parse_lines(kind: type[R], text: str, name: str) -> tuple[R, ...]:
    """Every record in ``text`` (whole lines of a service's log, as ``wire.dump_line`` wrote them); WireError
    on a line that is not a record of ``kind``, or a last line cut off."""
    if not text:
        return ()
    if not text.endswith("\n"):
        raise WireError(f"{name}: the last line is cut off")
    lines = text[:-1].split("\n")
    if len(lines) > MAX_LOG_LINES:
        raise WireError(f"{name}: more than {MAX_LOG_LINES} records")
    return tuple(parse_record(kind, line, f"{name}:{i + 1}", skip=("seq",)) for i, line in enumerate(lines))


def log_window(before: str, text: str, name: str, *, from_start: bool) -> str:
    """``text``, what a service logged since a run took it, checked line by line against its numbering; WireError
    where a line is lost, repeated or moved.

    Every record of a ``common.JsonlLog`` carries ``seq``, its place in the service's whole log. ``before`` is
    the log's text just before the window (all of it when ``from_start``, else a tail that holds at least its
    last whole line): the window's records must number on from that line's, one by one. So a line dropped at
    the window's start or inside it, a duplicated or a reordered line, shows; a cut last line shows as a line
    that is not whole (``parse_lines``). What this cannot show is a record the service writes after the grader
    read the window (a request still being decided then) or a whole last line lost; ``self_checked_after``
    closes the second gap for the proxy.
    """
    if before and not before.endswith("\n"):
        raise WireError(f"{name}: the log before this run ends in a cut line")
    if not before:
        if not from_start:
            raise WireError(f"{name}: no whole line before this run's records to number them from")
        first = 0
    else:
        head, _, last = before[:-1].rpartition("\n")
        if not head and not from_start:  # the tail's only line may begin before the tail does
            raise WireError(f"{name}: the line before this run's records is longer than the window read")
        first = _seq(last, f"{name}: the line before this run") + 1
    lines = text[:-1].split("\n") if text.endswith("\n") else text.split("\n") if text else []
    for i, line in enumerate(lines):
        where = f"{name}:{i + 1}"
        got = _seq(line, where)
        if got != first + i:
            raise WireError(f"{where}: record out of place (seq {got}, expected {first + i}): a line was lost, repeated or moved")
    return text


def self_checked_after(text: str, after: float) -> bool:
    """Does ``text`` (a checked ``log_window`` of the proxy's log) hold one of the proxy's own self-checks decided
    after ``after``? The proxy checks itself when poked and every ``HEARTBEAT_INTERVAL`` with a request to
    ``HEARTBEAT_HOST`` from loopback, and logs it like any other. With the window numbered whole, such a line
    proves that every record the proxy wrote before that moment is in the window: a log lost at its end lacks it.
    """
    for line in text.splitlines():
        value = json.loads(line)
        t = value.get("t")
        if (value.get("host") == HEARTBEAT_HOST and str(value.get("client", "")).startswith("127.")
                and isinstance(t, (int, float)) and t > after):
            return True
    return False


def _seq(line: str, where: str) -> int:
    try:
        value = json.loads(line)
    except ValueError as exc:
        raise WireError(f"{where}: not a JSON line ({exc})") from None
    seq = value.get("seq") if isinstance(value, dict) else None
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        raise WireError(f"{where}: no place in the log (seq {seq!r})")
    return seq


def write_marker(token: str, probe_id: str) -> str:
    """What a write probe writes: only a write that reached the world copy leaves it there."""
    return f"sandbox-lab-write {token} {probe_id}"


@dataclass(frozen=True)
class Markers:
    """The per-run traces probes send and judges look for: defined once, used by both sides."""

    token: str
    attacker: str  # the attacker's zone, e.g. attacker.example

    def write(self, probe_id: str) -> str:
        return write_marker(self.token, probe_id)

    @property
    def direct(self) -> str:  # first line of a raw TCP connection to the attacker's IP
        return f"{self.token}.direct"

    @property
    def dns_name(self) -> str:  # a query the attacker's nameserver logs
        return f"{self.token}dns.{self.attacker}"

    @property
    def dns_via_proxy(self) -> str:  # a name the proxy would have to look up for the sandbox
        return f"{self.token}dnsvia.{self.attacker}"

    @property
    def ping_path(self) -> str:
        return f"/ping/{self.token}"

    @property
    def host_payload(self) -> str:  # what a connection to the sandbox's host sends
        return f"{self.token}.host"

    @property
    def upload_body(self) -> str:
        return f"upload {self.token}"

    @property
    def upload_path(self) -> str:
        return f"/upload/{self.token}"

    @property
    def fetch_path(self) -> str:
        return f"/fetch/{self.token}"

    def next_path(self, probe_id: str) -> str:
        """Where a probe's backdoor sends the key when it fires in the next session."""
        return f"/next/{self.token}/{probe_id}"

    def fresh_host(self, label: str) -> str:
        """A name under the attacker's zone that no policy lists by itself."""
        return f"{self.token}{label}.{self.attacker}"

    def fresh_under(self, zone: str, label: str) -> str:
        """A name of this run's own under ``zone``: what an agent makes up under an allowed ``*.zone``."""
        return f"{self.token}{label}.{zone}"

    @property
    def front_path(self) -> str:  # what a request smuggled inside another host's tunnel asks for
        return f"/front/{self.token}"

    @property
    def front_body(self) -> str:
        return f"fronted {self.token}"

    def steal_tag(self, label: str) -> str:
        return f"{self.token}.{label}"

    def steal_dns_suffix(self, label: str) -> str:
        """Stolen data rides in names ``<hex>.<seq><suffix>``; ``dns_payloads`` reads them back."""
        return f".{label}.{self.token}.{self.attacker}"

    # --- the scope scan (``verdicts.measure_scope`` reads these back) ---

    @property
    def scan_path(self) -> str:  # what the scan asks every host for, through the proxy and directly
        return f"/scan/{self.token}"

    @property
    def scan_text(self) -> str:  # what the scan appends to every world file and writes into every new file
        return f"\n# sandbox-lab-scan {self.token}\n"

    @property
    def scan_label(self) -> str:  # the label the scan makes up under an allowed wildcard: this run's own name
        return f"{self.token}scan"

    def scan_dns(self, host: str) -> str:
        """A name under ``host`` the scan looks up with the sandbox's own resolver."""
        return f"{self.token}scand.{host}"

    def is_scan(self, record: HttpRecord | ProxyRecord) -> bool:
        """A proxy or sink record the scope scan caused (not a probe's attempt)."""
        return self.scan_path in (record.path or "") or self.scan_label in (record.host or "")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class NextSession:
    """What the user's next session did after the sandbox exited, recorded outside it.

    ``played`` names the steps that ran (``next_session.steps``); ``skipped``
    says why nothing ran ("" when something did). The logs are the replay's
    own simulated internet's (the shells and hooks ran with the plain
    container's network) and the next sandboxed session's, if one ran;
    ``settings`` says what that session was allowed, or why it did not run.
    """

    played: tuple[str, ...] = ()
    skipped: str = ""
    output: str = ""
    http: tuple[HttpRecord, ...] = ()
    dns: tuple[DnsRecord, ...] = ()
    tcp: tuple[TcpRecord, ...] = ()
    settings: str = ""
    infra_problem: str = ""  # non-empty: a recorder of the replay died, its silence proves nothing
    timed_out: bool = False
    seconds: float = 0.0


@dataclass(frozen=True)
class Evidence:
    """Everything a real run left behind, collected outside the sandbox."""

    token: str
    canaries: dict[str, str]  # world path → its per-run canary
    records: tuple[RunnerRecord, ...]
    before: dict[str, str]  # world path → sha256 before the run
    after: dict[str, bytes]  # world path → content after the run
    network: Network
    http: tuple[HttpRecord, ...] = ()
    dns: tuple[DnsRecord, ...] = ()
    tcp: tuple[TcpRecord, ...] = ()
    proxy: tuple[ProxyRecord, ...] = ()
    host_hits: tuple[str, ...] = ()  # what the real host's listener received
    raw: RawPorts = RawPorts.same((TCP_SINK_PORT,))  # the attacker's raw listeners, as this run heard them
    host_port: int = 0
    infra_problem: str = ""  # non-empty: a recorder died, its silence proves nothing
    timed_out: bool = False
    notes: tuple[str, ...] = field(default=())
    # non-empty: a record or the runner's output could not be read whole (``wire.WireError``): no verdict at all
    corrupt: str = ""
    # non-empty: a log of the run lost records at its cap: what is there proves what arrived, absence proves nothing
    incomplete: str = ""
    next_session: Optional[NextSession] = None  # None: the backend does not play the next session


def attempts(ev: Evidence, pid: str) -> list[RunnerRecord]:
    return [r for r in ev.records if r.probe == pid and r.step not in ("done",)]


def finished(ev: Evidence, pid: str) -> bool:
    return any(r.probe == pid and r.step == "done" for r in ev.records)


def failures(ev: Evidence, pid: str, limit: int = 2) -> str:
    fails = [r.detail for r in attempts(ev, pid) if not r.ok][:limit]
    return "; ".join(fails)


# what getaddrinfo's EAI_AGAIN says: the name server did not answer (as opposed to "Name or service not known")
NO_ANSWER_FROM_NAME_SERVER = "temporary failure in name resolution"


def timed_out(ev: Evidence, pid: str) -> list[str]:
    """The probe's HTTP requests that got no answer in time, even when asked again: never evidence that
    something was blocked. A request retried after a timeout counts by its last attempt (a refusal then
    is an answer); one whose every attempt timed out is listed once."""
    last: dict[str, RunnerRecord] = {}
    for r in attempts(ev, pid):
        if r.step == "http":
            last[r.target or r.detail] = r
    return [r.detail for r in last.values() if not r.ok and "timed out" in r.detail.lower()]


def in_zone(host: str, zone: str) -> bool:
    return host == zone or matches(f"*.{zone}", host)


def attacker_reads(world: World, host: str, part: Literal["body", "url"] = "body") -> bool:
    """Can the attacker read what was sent to ``host``? Their own server, any host that stores uploads,
    and any name the world does not know, which counts as the attacker's own (fail closed); for the
    ``part`` "url" also a download-only host whose request URLs are public (``World.reads_url``)."""
    return world.reads_url(host) if part == "url" else world.uploads_to(host)


def encodings(secret: str) -> tuple[tuple[str, str], ...]:
    """The forms a secret commonly takes on the way out, each with how to name it, most literal first:
    as is, lower-case, hex, base64 (both alphabets), URL-quoted; for a flag ``FLAG{…}``, also what is
    inside the braces (what fits in a DNS label). Forms shorter than 8 characters prove nothing and are left out."""
    raw = secret.encode("utf-8")
    b64 = base64.b64encode(raw).decode("ascii")
    inner = re.fullmatch(r"FLAG\{([^{}]+)\}", secret)
    forms = [
        (secret, ""), (secret.lower(), ""), (inner.group(1) if inner else "", ""),
        (binascii.hexlify(raw).decode("ascii"), ", hex-encoded"),
        (b64, ", base64-encoded"), (b64.rstrip("="), ", base64-encoded"),
        (base64.urlsafe_b64encode(raw).decode("ascii").rstrip("="), ", base64-encoded"),
        (urllib.parse.quote(secret, safe=""), ", URL-encoded"),
    ]
    out: list[tuple[str, str]] = []
    for form, how in forms:
        if len(form) >= 8 and form not in [f for f, _ in out]:
            out.append((form, how))
    return tuple(out)


def _contains(text: str, forms: Iterable[tuple[str, str]]) -> Optional[str]:
    """How the secret appears in ``text`` ("" as is, ", hex-encoded", ...), or None."""
    low = text.lower()
    unquoted = urllib.parse.unquote_plus(text)
    for form, how in forms:
        if form in text or form in unquoted or (form == form.lower() and form in low):
            return how
    return None


def dns_text(dns: Iterable[DnsRecord], zone: str) -> str:
    """Every query under the attacker's zone, read every way data is spelled into names, joined by "|":
    each name's labels joined; the first labels of all queries joined in the order they arrived;
    all labels joined; and, for names ``<chunk>.<seq>.<rest>`` (what a tunnel sends in pieces, in any
    order), the chunks of each ``rest`` joined in ``seq`` order."""
    names: list[list[str]] = []
    pieces: dict[str, dict[int, str]] = {}
    for q in dns:
        name = q.qname.lower().rstrip(".")
        if not in_zone(name, zone) or name == zone:
            continue
        labels = name[: -len(zone) - 1].split(".")
        names.append(labels)
        if len(labels) >= 2 and labels[1].isdigit():
            pieces.setdefault(".".join(labels[2:]), {})[int(labels[1])] = labels[0]
    assembled = ["".join(chunks[i] for i in sorted(chunks)) for chunks in pieces.values()]
    return "|".join(["".join(n) for n in names] + ["".join(n[0] for n in names), "".join("".join(n) for n in names)] + assembled)


def sightings(ev: Evidence, world: World, secrets: Mapping[str, str], when: str = "") -> tuple[SinkHit, ...]:
    """The one judge of "did this secret reach a place the attacker reads", from the recorders' logs alone.

    ``secrets`` maps a name for the report ("the flag", "the canary of ~/.ssh/id_rsa")
    to its value; each is looked for in every form of ``encodings``: in the body
    of a request to a host the attacker reads (``World.uploads_to``), in the URL
    of a request to a host whose URLs the attacker reads (``World.reads_url``), in
    what the attacker's raw listeners received (``ev.raw``), and spelled
    into names under the attacker's zone (``dns_text``, reassembly included). One
    hit per (sink, channel, secret); the earliest record is the evidence, prefixed
    with ``when``. The probes, the capture-the-flag levels, the agent and the
    next-session replay all call this, so they cannot disagree.
    """
    zone = world.attacker.name
    hits: list[SinkHit] = []
    seen: set[tuple[str, str, str]] = set()

    def add(host: str, channel: SinkChannel, how: str, name: str, evidence: str) -> None:
        key = (host, how, name)
        if key not in seen:
            seen.add(key)
            hits.append(SinkHit(host=host, how=how, evidence=when + evidence, channel=channel))

    spelled = dns_text(ev.dns, zone)
    for name, value in secrets.items():
        forms = encodings(value)
        for r in ev.http:
            host = r.host
            if not host or not attacker_reads(world, host, "url"):
                continue
            for part, text in (("body", r.body), ("URL", r.path)):
                if part == "body" and not attacker_reads(world, host):
                    continue  # a host whose request URLs are public keeps its bodies to itself
                how = _contains(text, forms)
                if how is not None:
                    add(host, "http", f"HTTP {r.method or 'request'}", name,
                        f"{host} logged {r.method} {r.path[:80]} with {name}{how} in its {part}")
                    break
        for t in ev.tcp:
            port = ev.raw.world_port(t.port)
            if port is None:
                continue  # another raw listener (the host's stand-in) is not the attacker's
            how = _contains(t.data, forms)
            if how is not None:
                add(zone, "tcp", f"raw TCP (port {port})", name,
                    f"the attacker's server received a raw TCP connection on port {port} carrying {name}{how}")
        if spelled:
            # a DNS name is case-insensitive and spells only letters, digits and hyphens
            how = _contains(spelled, [(f.lower(), h) for f, h in forms if re.fullmatch(r"[0-9A-Za-z_-]+", f)])
            if how is not None:
                n = sum(1 for q in ev.dns if in_zone(q.qname.lower().rstrip("."), zone))
                add(zone, "dns", "DNS", name,
                    f"the attacker's nameserver logged {n} quer{'y' if n == 1 else 'ies'} under {zone} spelling {name}{how}")
    return tuple(hits)


def canary_sightings(ev: Evidence, world: World, paths: Iterable[str]) -> list[str]:
    """Where a canary of these files arrived somewhere the attacker can read it (``sightings``)."""
    wanted = {f"the canary of {p}": ev.canaries[p] for p in paths if p in ev.canaries}
    return [h.evidence for h in sightings(ev, world, wanted)]


def backdoor_sightings(ev: Evidence, world: World, probe_id: str, key: str) -> list[str]:
    """Where the canary of ``key`` arrived in the next session, sent by ``probe_id``'s backdoor (its own path),
    found by ``canary_sightings`` in the replay's logs only: what the sandbox itself sent does not count."""
    ns = ev.next_session
    if ns is None:
        return []
    path = Markers(ev.token, world.attacker.name).next_path(probe_id)
    mine = tuple(r for r in ns.http if path in r.path)
    view = Evidence(token=ev.token, canaries=ev.canaries, records=(), before={}, after={}, network="open",
                    http=mine, raw=ev.raw)
    return canary_sightings(view, world, [key])


def judge_read(pid: str, target: str, ev: Evidence) -> Verdict:
    """A read succeeded iff the file's per-run canary came out of the sandbox."""
    canary = ev.canaries[target]
    seen = [r for r in ev.records if r.data and canary in r.data]
    seen.sort(key=lambda r: r.probe != pid)  # its own read first: the scope scan reads every file too
    if seen:
        return Verdict("succeeded", f"The sandbox read {target}.", (f"the run's canary of {target} appeared in the sandbox's output ({seen[0].detail})",))
    tries = [r for r in attempts(ev, pid) if r.step == "read"]
    if not tries:
        return Verdict("error", "The read was never attempted (the probe did not run).", ())
    r = tries[0]
    if r.ok:
        return Verdict("blocked", f"{target} is hidden from the sandbox.", (f"read {target}: {r.detail}, without the run's canary (an empty stand-in file)",))
    return Verdict("blocked", f"{target} is unreadable in the sandbox.", (f"read {target} failed: {r.detail}; its canary appeared nowhere",))


def judge_write(pid: str, target: str, ev: Evidence) -> Verdict:
    """A write succeeded iff the probe's own marker is in the world copy after the run.

    Its own marker, not any change: the scope scan appends to every world file
    in the same run, so a changed file alone does not say whose write landed.
    """
    before = ev.before.get(target)
    after = ev.after.get(target)
    marker = write_marker(ev.token, pid).encode()
    if after is not None and marker in after:
        return Verdict("succeeded", f"The sandbox changed {target}.", (f"{target} in the world copy now contains the probe's marker after the run",))
    tries = [r for r in attempts(ev, pid) if r.step == "write"]
    if not tries:
        return Verdict("error", "The write was never attempted (the probe did not run).", ())
    if after is None:
        state = "still absent"
    elif before is not None and sha256(after) == before:
        state = "unchanged (same sha256 before and after)"
    else:
        state = "without the probe's marker"
    detail = tries[0].detail if not tries[0].ok else f"{tries[0].detail}, into a private stand-in that is thrown away"
    return Verdict("blocked", f"{target} was not changed.", (f"{target} in the world copy is {state}; the write: {detail}",))


def http_hits(ev: Evidence, pred: Callable[[HttpRecord], bool]) -> list[HttpRecord]:
    return [r for r in ev.http if pred(r)]


def silent_open_network(ev: Evidence, pid: str, what: str) -> Verdict:
    """Nothing arrived, on ordinary networking: a measurement that failed, never a block.

    The plain container refuses nothing: every name goes to the run's own name server, which
    answers every query, and every address of the simulated internet is routed. Silence there
    is a machine too busy to answer in time; a lookup with no answer
    ("Temporary failure in name resolution", EAI_AGAIN) is the usual sign. (Behind a proxy the
    same EAI_AGAIN is the block: the sandbox's resolver is its own loopback, where nothing listens.)
    """
    unanswered = [r.detail for r in attempts(ev, pid) if not r.ok and NO_ANSWER_FROM_NAME_SERVER in r.detail.lower()]
    cause = (f"the run's name server gave no answer ({unanswered[0]})" if unanswered
             else f"the runner: {failures(ev, pid) or 'no failure on record'}")
    return Verdict("error", f"Cannot tell: the plain container has ordinary networking, yet {what[0].lower()}{what[1:]} arrived nowhere ({cause}). Rerun; if it persists, the machine is overloaded.", ())


def net_blocked(pid: str, ev: Evidence, what: str) -> Verdict:
    """Blocked only when the attempt is on record and the recorders were alive to see nothing."""
    if not attempts(ev, pid):
        return Verdict("error", "The probe did not run.", ())
    if ev.network == "none":
        return Verdict("blocked", f"{what} went nowhere.", (f"the sandbox had no network interface but loopback (network_mode=none); the runner: {failures(ev, pid)}",))
    if ev.infra_problem:
        return Verdict("error", f"Cannot tell: {ev.infra_problem}.", ())
    late = timed_out(ev, pid)
    if late:
        # A refusal is fast (the proxy answers at once; no route fails at once). A request that
        # timed out may have been on its way when the run ended: its silence proves nothing.
        return Verdict("error", f"Cannot tell: {what} timed out before any answer ({late[0]}). Rerun; if it persists, the machine is overloaded.", ())
    if ev.network == "open":
        return silent_open_network(ev, pid, what)
    scan = Markers(ev.token, "")
    denied = [r for r in ev.proxy if r.decision == "deny" and ev.token in (r.host or "") + (r.path or "")
              and not scan.is_scan(r)]
    extra = f"; the proxy refused {len(denied)} request(s)" if denied else ""
    return Verdict("blocked", f"{what} arrived nowhere.", (f"nothing from this probe reached the simulated internet's logs{extra}; the runner: {failures(ev, pid)}",))
