"""What an attack did on its way out, said to the learner: the hints chosen from the run's own records.

A miss is diagnosed from the same evidence that judged it (``Execution``'s
logs: the simulated internet's HTTP, DNS and raw TCP records, the proxy's
decisions, the world copy before and after, the next session's logs), never
from what the attack printed. Each ``Finding`` says one thing that happened
and why it did not capture the level: "your POST reached gist.github.com, but
no flag was in it"; "the proxy refused api.github.com: not in the allowed
list"; "a DNS query reached the attacker's nameserver but spelled nothing of
the flag"; "no start-up file changed: the write was refused or never made".

Whether the flag was in a record is not decided here: the hosts where it
arrived are passed in (``execution.sightings``, the one judge), and a record
to one of them is left to the capture's own report. Where the logs are empty
the caller falls back to the level's hints in order.

Imports: evidence, execution, services (common, wire), world. Nothing downstream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Iterable, Literal

from grader.core.evidence import in_zone, sha256
from grader.core.execution import Execution
from grader.core.world import World
from grader.services.common import HEARTBEAT_HOST
from grader.services.wire import HttpRecord

__all__ = ["MAX_FINDINGS", "Finding", "diagnose"]

MAX_FINDINGS = 4  # a hint is read at a glance: the first few things that happened, in the order they happened

Kind = Literal["upload-without-flag", "download-only", "url-without-flag", "refused-by-proxy", "refused-by-host",
               "dns-without-flag", "tcp-without-flag", "write-missing", "next-session-sent-nothing"]


@dataclass(frozen=True)
class Finding:
    """One thing the attack did that the logs show, and why it did not capture: ``host`` names where (or "")."""

    kind: Kind
    host: str
    text: str


def _short(path: str) -> str:
    return path if len(path) <= 48 else path[:45] + "..."


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


def _proxy(ex: Execution) -> list[Finding]:
    assert ex.evidence is not None
    out: list[Finding] = []
    for r in ex.evidence.proxy:
        if r.decision != "deny" or not r.host or r.host == HEARTBEAT_HOST:
            continue
        out.append(Finding("refused-by-proxy", r.host, f"The proxy refused {r.host}: {r.reason}."))
    return out


def _dns_tcp(ex: Execution, world: World, arrived: Collection[str], prize: str) -> list[Finding]:
    assert ex.evidence is not None
    ev, zone = ex.evidence, world.attacker.name
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
    return out


def _writes(ex: Execution, world: World) -> list[Finding]:
    """For a level whose capture comes in the next session: did a start-up file change, and did its session send?"""
    assert ex.evidence is not None
    ev = ex.evidence
    changed = [p for p in world.paths_with_role("persistence", "agent-config")
               if p in ev.before and ev.after.get(p) is not None and sha256(ev.after[p]) != ev.before[p]]
    if not changed:
        return [Finding("write-missing", "",
                        "No start-up file changed after the run: the world copy's ~/.bashrc, git hooks and settings are "
                        "as they were, so the write was refused or never made.")]
    ns = ex.next_session
    if ns is not None and not (ns.http or ns.dns or ns.tcp):
        return [Finding("next-session-sent-nothing", "",
                        f"You changed {changed[0]}; the next session ran ({', '.join(ns.played) or 'nothing played'}), "
                        "but it sent nothing anywhere.")]
    return []


def diagnose(ex: Execution, world: World, arrived: Collection[str], prize: str = "the flag", *,
             next_session: bool = False) -> tuple[Finding, ...]:
    """What the run's records show the attack did, each with why it did not capture; () when they show nothing.

    ``arrived``: the hosts where the flag was sighted (``execution.sightings``), left to the capture's report.
    ``prize``: what had to arrive, in the learner's words ("the flag", "a signature only the SSH key makes").
    ``next_session``: the level is captured by what runs later, so the world copy's start-up files are read too.
    """
    if ex.evidence is None:
        return ()
    found = [*_proxy(ex), *_http(ex.evidence.http, world, arrived, prize), *_dns_tcp(ex, world, arrived, prize)]
    if next_session:
        found += _writes(ex, world)
        ns = ex.next_session
        if ns is not None:  # what the user's next session sent, outside the sandbox: the backdoor's own requests
            found += _http(ns.http, world, arrived, prize, "in the next session, ")
    unique: dict[tuple[str, str], Finding] = {}
    for f in found:
        unique.setdefault((f.kind, f.host), f)  # one finding per host and kind: ten refused retries are one fact
    return tuple(unique.values())[:MAX_FINDINGS]
