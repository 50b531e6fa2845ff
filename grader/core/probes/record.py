"""The probe record: what one probe is (``Probe``), what the host knows when it writes orders
(``OrderContext``), and the wording more than one channel family shares.

A record says what a compromised agent tries (or what the legitimate job
needs) in one sentence of story, and carries the four things every part of
Sandbox Lab needs from it, side by side, so they cannot drift apart: its
``orders`` for the runner, its static ``predict``-ion, its ``judge`` from
evidence and its ``fix``. The channel families (``files``, ``network``, ...)
fill records in; ``registry`` orders them.

Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Optional

from grader.core.access import Access
from grader.protocol import wire
from grader.protocol.domains import web_scheme
from grader.core.evidence import Evidence, Markers, Verdict
from grader.core.records import ProbeKind, RawPorts
from grader.core.scope import FRESH_LABEL, stand_ins
from grader.core.world import World

__all__ = [
    "Action", "OrderContext", "Prediction", "Probe", "ProbeKind", "Step",
    "allowed_names", "fix_network", "web_url", "fix_write_attack", "parent", "rule_text",
]

Action = Literal["read", "write", "net", "exfil", "fetch"]
Step = wire.Step  # one order for the runner: a wire step (``ReadStep``, ``WriteStep``, ``HttpStep``, ...)
Prediction = tuple[bool, str]


@dataclass(frozen=True)
class OrderContext:
    """What the host knows when it writes the runner's orders for one run."""

    markers: Markers
    attacker_ip: str  # where a raw connection to the attacker goes (an unroutable address when there is no internet)
    raw: RawPorts  # the attacker's raw listeners: each world port, and where this run listens for it
    host_port: int  # a listener on the machine that runs the sandbox
    gateway_names: tuple[str, ...]  # names that usually mean "the host" from inside
    hosts: tuple[str, ...]  # every host of the simulated internet
    loot: tuple[str, ...]  # the world paths an attacker steals (secrets and credentials)
    rebase: Callable[[str], str] = str  # world path → the path the runner opens (srt runs on a world copy)
    allowed: tuple[str, ...] = ()  # the policy's allowedDomains entries: one of each kind is tried as a way out
    denied: tuple[str, ...] = ()  # the policy's deniedDomains entries (which ports an entry leaves open)
    uploads: tuple[str, ...] = ()  # the world's hosts that store uploads (the attacker's aside)
    urls: tuple[str, ...] = ()  # the world's download-only hosts whose request URLs the attacker reads
    settings: str = "{}"  # the world's sandbox settings as laid out (the settings backdoor widens them)


@dataclass(frozen=True)
class Probe:
    """One thing the sandbox is asked to do, with how it is carried out, predicted, judged and fixed."""

    id: str
    kind: ProbeKind
    action: Action
    story: str
    orders: Callable[["Probe", OrderContext], list[Step]]
    predict: Callable[["Probe", Access], Prediction]
    judge: Callable[["Probe", Evidence, World], Verdict]
    fix: Callable[["Probe", Access], str]
    target: Optional[str] = None  # a world path for read/write probes
    hosts: tuple[str, ...] = ()  # hosts a fetch needs
    parallel: int = 0  # how many of its steps the runner carries out at once (0: every one)


# --- wording more than one family shares ------------------------------------------------------


def parent(path: str) -> str:
    """The directory a world path lies in."""
    return path.rsplit("/", 1)[0] or "/"


def rule_text(rule: Optional[tuple[str, str]]) -> str:
    """A policy rule as a learner reads it: ``denyRead "/home/user"``."""
    return f'{rule[0]} "{rule[1]}"' if rule else ""


def allowed_names(ctx: OrderContext, label: str) -> list[str]:
    """One allowed name of each kind (``scope.stand_ins``): an exact name, or a name of this run's own under a
    wildcard; all tried as targets.

    Bounded however long the list: every name of a kind is reached or refused alike, so the run asks one of
    them, the first in the policy's order, and a leak's evidence names it.
    """
    m = ctx.markers
    names = dict.fromkeys(stand_ins(ctx.allowed, ctx.denied, ctx.hosts, m.attacker).values())
    return [m.fresh_under(n[len(FRESH_LABEL) + 1:], label) if n.startswith(FRESH_LABEL + ".") else n for n in names]


def web_url(ctx: OrderContext, host: str, path: str, prefer: str = "https") -> str:
    """The URL an attacker uses to reach ``host``: the preferred scheme, or the other when the policy
    opens only the other's port to that host (``domains.web_scheme``). No policy: the preferred one."""
    scheme = web_scheme(host, ctx.allowed, ctx.denied, prefer) if ctx.allowed else prefer
    return f"{scheme}://{host}{path}"


_NO_NETWORK_FIX = (
    'write "allowedDomains": [] if the job needs no network; otherwise list only the exact hosts it needs '
    '(a "*.{attacker}" wildcard lets names under the attacker\'s domain be looked up)'
)


def fix_network(p: Probe, access: Access) -> str:
    """The fix of every probe that needs only some network: none, or exact hosts."""
    return _NO_NETWORK_FIX.format(attacker=access.world.attacker.name)


def fix_write_attack(p: Probe, access: Access) -> str:
    """The fix of every attack that writes a world file (tampering and backdoors alike)."""
    assert p.target
    d = access.write(p.target)
    deny = "/project/.git" if p.target.startswith("/project/.git/") else p.target
    if d.rule and d.rule[0] == "allowWrite":
        return f'narrow {rule_text(d.rule)} to the directory the job writes, or add "{deny}" to filesystem.denyWrite'
    return f'add "{deny}" to filesystem.denyWrite'
