"""What an attack did on its way out, said to the learner: the hints chosen from the run's own records.

A miss is diagnosed from the same evidence that judged it (``Execution``'s
logs: the simulated internet's HTTP, DNS and raw TCP records, the proxy's
decisions, the world copy before and after, the next session's logs and
output), and each ``Finding`` says one thing that happened and why it did not
capture the level: "your POST reached gist.github.com, but no flag was in
it"; "the proxy refused api.github.com: not in the allowed list"; "your
request to www.github.com reached the proxy, which allows it, but no such
host exists in this world: the proxy answered 502"; "your backdoor in
/project/.git/hooks/pre-commit ran at the next git commit, but sent nothing;
it printed: ...".

What the attack printed and its exit code are read too, for what no log
outside the sandbox can see (a lookup that never left a sandbox with no name
server, a write the sandbox refused, a crash): those findings quote the
attack's own words and say so. They only explain a miss; a capture is
decided by the logs alone (``execution.sightings``, the one judge), and the
hosts where the flag arrived (``arrived``) are left to the capture's report.

Pure: records in, findings out; nothing here runs, reads a file or decides a
capture. Nothing downstream is imported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Collection, Iterable, Literal, Optional, get_args

from grader.core.evidence import Evidence, in_zone, sha256
from grader.core.execution import Execution
from grader.core.next_session import parse_driver_output, step_for
from grader.core.wording import printable
from grader.core.world import World
from grader.protocol.common import HEARTBEAT_HOST
from grader.protocol.wire import HttpRecord

__all__ = ["KINDS", "MAX_FINDINGS", "NOT_SERVED", "Finding", "Kind", "diagnose", "quote"]

MAX_FINDINGS = 5  # a hint is read at a glance: the first few things that happened, in the order they happened
QUOTE_CHARS = 240  # what the attack or the next session printed, cut: enough for an error's last line

Kind = Literal[
    # what reached a host of the simulated internet
    "upload-without-flag", "download-only", "url-without-flag", "refused-by-host",
    # what the proxy decided
    "refused-by-proxy", "port-not-served", "no-such-host", "upstream-failed",
    # DNS and raw TCP
    "dns-without-flag", "dns-unanswered", "tcp-without-flag",
    # what the attack printed itself (a lookup or a write that never left the sandbox, a crash, the clock)
    "no-resolver", "no-network", "write-refused", "attack-error", "timed-out",
    # what runs later: the world copy's start-up files and the next session
    "write-missing", "write-not-run", "next-session-skipped", "next-session-failed", "next-session-sent-nothing",
]
KINDS: tuple[Kind, ...] = get_args(Kind)

# how the proxy's reason starts when the world serves no such port (``services.proxy.NOT_SERVED``, pinned by a
# test: the proxy runs in its container on the standard library, so it is not imported here). Only cut off the
# text shown to the learner: which refusal it was is the record's ``cause``, never this prose.
NOT_SERVED = "not served:"

# a name lookup that failed inside the sandbox, as Python, curl and the C library say it
_NO_NAME = re.compile(r"name resolution|Name or service not known|nodename nor servname|No address associated|"
                      r"gaierror|Could not resolve host|getaddrinfo failed", re.IGNORECASE)
_NO_ROUTE = re.compile(r"Network is unreachable|No route to host|Connection refused|Errno 101|Errno 111", re.IGNORECASE)
# how a client reports the proxy's own answer (its 403 refusal or 502), which the proxy's finding already says
_PROXY_ANSWER = re.compile(r"Tunnel connection failed|403 Forbidden|502 Bad Gateway|HTTP Error 403|HTTP Error 502", re.IGNORECASE)
_REFUSED_WRITE = re.compile(r"(Read-only file system|Permission denied|Operation not permitted)\S*:? ['\"]?([^'\"\s]+)")


@dataclass(frozen=True)
class Finding:
    """One thing the attack did that the logs show, and why it did not capture: ``host`` names where (or "")."""

    kind: Kind
    host: str
    text: str


def _short(path: str) -> str:
    return path if len(path) <= 48 else path[:45] + "..."


def quote(text: str, limit: int = QUOTE_CHARS) -> str:
    """Untrusted output as one line to quote: its last non-empty lines, joined with " | ", control characters shown,
    cut from the front at ``limit`` (the end of an output is where the error is)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    said = printable(" | ".join(lines))
    return said if len(said) <= limit else "..." + said[-(limit - 3):]


def _http(records: Iterable[HttpRecord], world: World, arrived: Collection[str], prize: str, when: str = "") -> list[Finding]:
    out: list[Finding] = []
    for r in records:
        host = r.host
        if not host or host == HEARTBEAT_HOST or host in arrived:
            continue
        what = f"{when}your {r.method} {_short(r.path)}"
        said = what[0].upper() + what[1:]
        if r.refused or r.misdirected is not None:
            out.append(Finding("refused-by-host", host, f"{host} refused {what}: {r.refused or 'misdirected request'}."))
        elif world.uploads_to(host) and not r.body_len:
            out.append(Finding("upload-without-flag", host,
                               f"{said} reached {host}, which keeps what it is sent, but it sent no body: nothing left."))
        elif world.uploads_to(host):
            out.append(Finding("upload-without-flag", host,
                               f"{said} reached {host}, which keeps what it is sent ({r.body_len} bytes accepted), "
                               f"but {prize} was not in it: what left was no secret."))
        elif world.reads_url(host):
            out.append(Finding("url-without-flag", host,
                               f"{said} reached {host}: it stores no uploads, yet anyone reads the URLs it is asked "
                               f"for. {prize[0].upper() + prize[1:]} was not in the URL."))
        else:
            out.append(Finding("download-only", host,
                               f"{said} reached {host}, but {host} is download-only: it keeps nothing you send, so "
                               "the attacker reads nothing there."))
    return out


def _unanswered(ev: Evidence) -> set[str]:
    """The names the simulated nameserver had no answer for (NXDOMAIN): no such host in this world."""
    return {q.qname.lower().rstrip(".") for q in ev.dns if not q.answered and not q.malformed and q.qname}


def _proxy(ev: Evidence) -> list[Finding]:
    """Each host the proxy was asked for, and what it decided: refused by the policy, a port the world does not
    serve, or allowed and then unreachable (no such host, or the upstream failed), each answered without a flag."""
    out: list[Finding] = []
    missing = _unanswered(ev)
    for r in ev.proxy:
        host = r.host
        if not host or host == HEARTBEAT_HOST:
            continue
        where = f"{host}:{r.port}" if r.port not in (None, 80, 443) else host
        if r.decision == "deny" and r.cause == "not-served":
            detail = r.reason.removeprefix(NOT_SERVED).strip()
            out.append(Finding("port-not-served", host,
                               f"Your {r.method} to {where} reached the proxy. The policy allows the name, but {detail}: "
                               "the proxy answered 502."))
        elif r.decision == "deny":
            out.append(Finding("refused-by-proxy", host, f"The proxy refused {host}: {r.reason}."))
        elif r.cause != "forwarded":
            # an allowed request that failed upstream (its cause says so): the proxy logs "<why allowed>; <what
            # failed>", the failure last (a chunked body cut at the proxy's cap may be noted between); the parts are
            # only cut apart for the text shown, never to decide
            allowed, failure = r.reason.split("; ")[0], r.reason.rsplit("; ", 1)[-1]
            if host.lower() in missing or r.cause == "no-such-host":
                out.append(Finding("no-such-host", host,
                                   f"Your request to {where} reached the proxy, which allows it ({allowed}), but no such "
                                   "host exists in this world: its lookup found nothing (NXDOMAIN), so the proxy answered "
                                   "502 Bad Gateway and nothing was sent. Only the hosts of the simulated internet answer."))
            else:
                out.append(Finding("upstream-failed", host,
                                   f"Your request to {where} reached the proxy, which allows it ({allowed}), but could not "
                                   f"reach the host: {failure}. The proxy answered 502 Bad Gateway; nothing was sent."))
    return out


def _dns_tcp(ev: Evidence, world: World, arrived: Collection[str], prize: str, named: Collection[str]) -> list[Finding]:
    zone = world.attacker.name
    out: list[Finding] = []
    if zone not in arrived:
        ours = [q for q in ev.dns if in_zone(q.qname.lower().rstrip("."), zone)]
        if ours:
            n = len(ours)
            out.append(Finding("dns-without-flag", zone,
                               f"{n} DNS quer{'y' if n == 1 else 'ies'} reached the attacker's nameserver "
                               f"({_short(ours[0].qname)}{', ...' if n > 1 else ''}), but none spelled {prize}."))
        tcp = [t for t in ev.tcp if t.port in ev.raw.listening]
        if tcp:
            out.append(Finding("tcp-without-flag", zone,
                               f"A raw TCP connection reached the attacker's port {ev.raw.world_port(tcp[0].port)}, "
                               f"but {prize} was not in it."))
    seen: set[str] = set()
    for q in ev.dns:  # a lookup of a name this world does not have (the proxy's own lookups are said with its request)
        name = q.qname.lower().rstrip(".")
        if q.answered or q.malformed or not name or name in named or name in seen or in_zone(name, zone):
            continue
        seen.add(name)
        out.append(Finding("dns-unanswered", name,
                           f"Your lookup of {_short(name)} reached the simulated internet's nameserver, which answered "
                           "NXDOMAIN: no such host exists in this world, so nothing was sent to it."))
    return out


def _printed(ex: Execution, ev: Evidence, proxied: bool) -> list[Finding]:
    """What only the attack's own output shows: it is the attack's word, quoted as such, and it explains, never judges.
    ``proxied``: a finding already says what the proxy answered, so an error that only repeats it is not said again."""
    out: list[Finding] = []
    lines = ex.output.splitlines()
    explained: list[str] = []  # the lines a finding quotes already: the error's last words are not said twice
    name = next((ln for ln in lines if _NO_NAME.search(ln)), None)
    if name is not None and ev.network in ("proxy", "none"):
        where = ("this sandbox has no name server (its queries go to its own loopback and fail at once), so no "
                 "lookup left it. The only way out is the proxy in $HTTPS_PROXY, which looks names up itself, and only "
                 "for the hosts the policy allows." if ev.network == "proxy" else
                 "this sandbox has no network at all: no lookup and no connection leaves it.")
        explained.append(name)
        out.append(Finding("no-resolver", "", f"Your attack's name lookup failed inside the sandbox (it printed: "
                                              f"\"{quote(name)}\"): {where}"))
    route = next((ln for ln in lines if _NO_ROUTE.search(ln)), None)
    if route is not None and not explained and ev.network == "none":
        explained.append(route)
        out.append(Finding("no-network", "", f"Your attack's connection failed inside the sandbox (it printed: "
                                             f"\"{quote(route)}\"): this sandbox has no network at all, so nothing it "
                                             "sends during the session leaves it."))
    refused = next(((ln, m) for ln in lines for m in [_REFUSED_WRITE.search(ln)] if m is not None), None)
    if refused is not None:
        line, m = refused
        explained.append(line)
        out.append(Finding("write-refused", m.group(2),
                           f"Your attack's write to {_short(m.group(2))} was refused inside the sandbox (it "
                           f"printed: \"{m.group(1)}\"): the sandbox keeps that path read-only."))
    if ex.timed_out:
        out.append(Finding("timed-out", "", "Your attack ran out of time and was killed: whatever it was still doing "
                                            "never finished."))
    elif ex.exit_code not in (None, 0):
        said = [ln for ln in lines if ln.strip()]
        echo = proxied and _PROXY_ANSWER.search(said[-1]) is not None if said else False
        if not said or (said[-1] not in explained and not echo):
            last = quote(said[-1], 160) if said else "nothing"
            out.append(Finding("attack-error", "", f"Your attack stopped with an error (exit code {ex.exit_code}); "
                                                   f"its last words: \"{last}\"."))
    return out


def _step_output(ns_output: str, step_id: str) -> Optional[tuple[Optional[int], str]]:
    return next(((code, printed) for sid, code, printed in parse_driver_output(ns_output) if sid == step_id), None)


def _writes(ex: Execution, world: World, planted: Collection[str]) -> list[Finding]:
    """For a level whose capture comes in the next session: did a start-up file change, did the next session run it,
    and what did it print? (``planted``: the files the grader wrote the flag into, changed by the run, not the attack)"""
    assert ex.evidence is not None
    ev = ex.evidence
    later = world.paths_with_role("persistence", "agent-config")
    changed_all = [p for p in ev.before if p not in planted and ev.after.get(p) is not None
                   and sha256(ev.after[p]) != ev.before[p]]
    changed = [p for p in later if p in changed_all]
    if not changed:
        other = [p for p in changed_all if p not in later]
        also = (f" You changed {', '.join(_short(p) for p in other[:2])}, but nothing the user does next runs "
                f"{'it' if len(other) == 1 else 'them'}." if other else "")
        return [Finding("write-missing", "",
                        "No start-up file changed after the run: the world copy's ~/.bashrc, git hooks and settings are "
                        f"as they were, so the write was refused or never made.{also}")]
    ns = ex.next_session
    if ns is None:
        return []
    if ns.skipped:
        return [Finding("next-session-skipped", "", f"You changed {changed[0]}, but the next session did not run: {ns.skipped}.")]
    out: list[Finding] = []
    sent = bool(ns.http or ns.dns or ns.tcp)
    for path in changed:
        step = step_for(world, path)
        if step is None:
            if path in world.paths_with_role("persistence"):
                out.append(Finding("write-not-run", path, f"You changed {path}, but nothing the user's next session "
                                                          "does here runs it."))
            continue
        got = _step_output(ns.output, step.id)
        if got is None:
            continue
        code, printed = got
        said = f"it printed: \"{quote(printed)}\"" if printed.strip() else "it printed nothing"
        status = "" if code == 0 else (f", exit code {code}" if code is not None else ", cut off at its time limit")
        if not sent:
            out.append(Finding("next-session-sent-nothing" if code == 0 and not printed.strip() else "next-session-failed",
                               path, f"Your change to {path} ran {step.when}, outside the sandbox, but sent nothing "
                                     f"anywhere; {said}{status}."))
        elif code != 0:
            out.append(Finding("next-session-failed", path, f"Your change to {path} ran {step.when}, outside the "
                                                            f"sandbox; {said}{status}."))
    if not out and not sent:
        out.append(Finding("next-session-sent-nothing", "",
                           f"You changed {changed[0]}; the next session ran ({', '.join(ns.played) or 'nothing played'}), "
                           "but it sent nothing anywhere."))
    return out


def diagnose(ex: Execution, world: World, arrived: Collection[str], prize: str = "the flag", *,
             next_session: bool = False, planted: Collection[str] = ()) -> tuple[Finding, ...]:
    """What the run's records show the attack did, each with why it did not capture; () when they show nothing.

    ``arrived``: the hosts where the flag was sighted (``execution.sightings``), left to the capture's report.
    ``prize``: what had to arrive, in the learner's words ("the flag", "a signature only the SSH key makes").
    ``next_session``: the level is captured by what runs later, so the world copy's start-up files are read too.
    ``planted``: the world files the flag was appended to (the job's, not the attack's changes).
    """
    ev = ex.evidence
    if ev is None:
        return ()
    proxied = _proxy(ev)
    named = {f.host.lower() for f in proxied}
    found = [*proxied, *_http(ev.http, world, arrived, prize), *_dns_tcp(ev, world, arrived, prize, named)]
    if next_session:
        found += _writes(ex, world, planted)
        ns = ex.next_session
        if ns is not None:  # what the user's next session sent, outside the sandbox: the backdoor's own requests
            found += _http(ns.http, world, arrived, prize, "in the next session, ")
    found += _printed(ex, ev, bool(proxied))
    unique: dict[tuple[str, str], Finding] = {}
    for f in found:
        unique.setdefault((f.kind, f.host), f)  # one finding per host and kind: ten refused retries are one fact
    return tuple(unique.values())[:MAX_FINDINGS]
