"""Ways out for data: which channels a sandbox leaves open, and which secrets can take them.

A channel is a direct connection, DNS to the attacker's nameserver, or a
reachable host that accepts uploads. Download-only hosts are not channels here.
Probes predict the exfiltration attacks from this, and the probe board draws it.

Pure. Imports: access, world. Nothing downstream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .access import Access

__all__ = ["Channel", "ExfilPath", "channels", "exfil_paths"]


@dataclass(frozen=True)
class Channel:
    """A way out for data: a direct connection, DNS to the attacker's nameserver, or an upload host."""

    kind: Literal["direct", "dns", "upload"]
    host: str
    why: str


@dataclass(frozen=True)
class ExfilPath:
    """One secret that can leave over one channel."""

    secret: str  # world path
    label: str
    channel: Channel


def channels(access: Access) -> tuple[Channel, ...]:
    """Every channel out the sandbox leaves open; download-only hosts are not channels."""
    world = access.world
    attacker = world.attacker.name
    out: list[Channel] = []
    if access.network == "open":
        out.append(Channel("direct", attacker, "ordinary networking lets it connect straight to the attacker's server"))
        out.append(Channel("dns", attacker, "ordinary DNS lets its queries reach the attacker's nameserver"))
    elif access.reach_fresh_subdomain(attacker):
        out.append(Channel("dns", attacker, f'"*.{attacker}" makes the proxy look up any name under the attacker\'s domain'))
    for host in world.hosts:
        if host.uploads:
            d = access.reach(host.name)
            if d.allowed:
                out.append(Channel("upload", host.name, f"{host.name} accepts uploads ({host.how}); {d.why}"))
    if access.network == "proxy" and not access.reach(attacker).allowed and access.reach_fresh_subdomain(attacker):
        out.append(Channel("upload", f"*.{attacker}", "any name under the attacker's domain reaches the attacker's server"))
    return tuple(out)


def exfil_paths(access: Access) -> tuple[ExfilPath, ...]:
    """Which secrets can reach which hosts over which channel: what the probe board draws."""
    chans = channels(access)
    return tuple(
        ExfilPath(s.path, s.label, c) for s in access.world.loot if access.read(s.path).allowed for c in chans
    )
