"""Ways out for data: which channels a sandbox leaves open, and which secrets can take them.

A channel is a direct connection, DNS to the attacker's nameserver, a
reachable host that accepts uploads, or a reachable download-only host whose
request URLs the attacker reads (public per-file statistics): the URL of a GET
is data too. Other download-only hosts are not channels here.
An allowed name the world does not know (``webhook.site``, ``*.ngrok.io``,
``localhost``, an IP address) is one: nobody vouches for it, so it counts as the
attacker's own server (fail closed), as it does in the simulated internet.
Probes predict the exfiltration attacks from this, and the probe board draws it.

Pure. Imports: access, domains, world. Nothing downstream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .access import Access
from .domains import is_ipv4

__all__ = ["Channel", "ExfilPath", "channels", "exfil_paths", "unknown_name_why"]

_FRESH = "x0fresh0x"  # stands for any label the agent invents under a wildcard

# What some names the world does not know are on a real machine: worse than an attacker's server.
_REAL_MEANING = {
    "localhost": "on a real machine it is the machine itself, with every service listening there",
    "host.docker.internal": "in a container it is the machine that runs it",
    "169.254.169.254": "on a cloud machine it is the metadata service, which hands out the machine's credentials",
}


@dataclass(frozen=True)
class Channel:
    """A way out for data: a direct connection, DNS to the attacker's nameserver, an upload host,
    or a host whose request URLs the attacker reads ("url": data rides in the URL of a GET)."""

    kind: Literal["direct", "dns", "upload", "url"]
    host: str
    why: str


@dataclass(frozen=True)
class ExfilPath:
    """One secret that can leave over one channel."""

    secret: str  # world path
    label: str
    channel: Channel


def channels(access: Access) -> tuple[Channel, ...]:
    """Every channel out the sandbox leaves open; download-only hosts are not, unless the attacker reads their request URLs."""
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
        elif host.urls_public:
            d = access.reach(host.name)
            if d.allowed:
                out.append(Channel("url", host.name, f"{host.name} serves downloads only, but the attacker reads the URL of every request it gets ({host.how}); {d.why}"))
    if access.network == "proxy" and not access.reach(attacker).allowed and access.reach_fresh_subdomain(attacker):
        out.append(Channel("upload", f"*.{attacker}", "any name under the attacker's domain reaches the attacker's server"))
    if access.network == "proxy" and access.policy is not None:
        for entry in access.policy.network.allowedDomains:
            name = f"{_FRESH}.{entry[2:]}" if entry.startswith("*.") else entry
            if entry in world.host_names or entry == f"*.{attacker}":
                continue  # said above
            if world.attacker_owns(name) and access.reach(name).allowed:
                out.append(Channel("upload", entry, unknown_name_why(access, entry)))
    return tuple(out)


def unknown_name_why(access: Access, entry: str) -> str:
    """Why an allowed entry the world does not know (or one under the attacker's domain) is a way out."""
    world = access.world
    attacker = world.attacker.name
    zone = entry[2:] if entry.startswith("*.") else entry
    if zone == attacker or zone.endswith("." + attacker):
        return f'"{entry}" lies in the attacker\'s domain: it reaches the attacker\'s server'
    if entry.startswith("*."):
        return (f'"{entry}" lets the agent make up any name under {zone}, a domain the simulated internet does not know: '
                "nobody vouches for such a name, so it counts as the attacker's own server (fail closed)")
    what = "an IP address, not a host" if is_ipv4(entry) else "not a host"
    real = f"; {_REAL_MEANING[entry]}" if entry in _REAL_MEANING else ("; on a real machine it is whatever answers at that address" if is_ipv4(entry) else "")
    return (f'"{entry}" is {what} of the simulated internet: nobody vouches for it, so it counts as '
            f"the attacker's own server (fail closed){real}")


def exfil_paths(access: Access) -> tuple[ExfilPath, ...]:
    """Which secrets can reach which hosts over which channel: what the probe board draws."""
    chans = channels(access)
    return tuple(
        ExfilPath(s.path, s.label, c) for s in access.world.loot if access.read(s.path).allowed for c in chans
    )
