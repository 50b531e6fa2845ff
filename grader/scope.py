"""The scope a policy grants, predicted: every world path and host, not a sample of attacks.

Where a probe asks one question ("can the agent read the SSH key?"), the scope
answers them all: which world files are readable, which files are writable and
in which world directories a new file can be created, and which hosts are
reachable (with whether each accepts uploads). A real run measures the same
sets with its scope scan; the two must agree, as the probes must.

Pure. Imports: access, domains, outcomes, world. Nothing downstream.
"""

from __future__ import annotations

from .access import Access
from .outcomes import Reach, Scope

__all__ = ["FRESH_LABEL", "NEW_FILE", "fresh_name", "predict_scope", "scanned_hosts"]

NEW_FILE = ".sandbox-lab-new"  # the file the scan tries to create in every world directory
FRESH_LABEL = "x0fresh0x"  # stands for any label the agent invents under a wildcard


def fresh_name(wildcard: str) -> str:
    """A name no rule lists by itself, under a ``*.zone`` wildcard: what the agent can make up."""
    return f"{FRESH_LABEL}.{wildcard[2:]}"


def scanned_hosts(access: Access) -> tuple[str, ...]:
    """Every host the scan tries: the world's hosts, and a fresh name under every allowed wildcard."""
    names = list(access.world.host_names)
    if access.policy is not None:
        names += [fresh_name(a) for a in access.policy.network.allowedDomains if a.startswith("*.")]
    return tuple(dict.fromkeys(names))


def _uploads(access: Access, host: str) -> bool:
    for h in access.world.hosts:
        if h.name == host:
            return h.uploads
    return True  # a name the world does not know may be the attacker's own: fail closed


def predict_scope(access: Access) -> Scope:
    """The scope ``access`` grants, from the policy's semantics alone."""
    world = access.world
    files = [f.path for f in world.files if str(f.role) != "runtime"]  # the runtime is everyone's: never judged
    readable = sorted(p for p in files if access.read(p).allowed)
    writable = {p for p in files if access.write(p).allowed}
    writable |= {d for d in world.directories() if access.write(f"{d}/{NEW_FILE}").allowed}
    reachable = []
    for host in scanned_hosts(access):
        if access.reach(host).allowed:
            reachable.append(Reach(host, _uploads(access, host)))
    return Scope(tuple(readable), tuple(sorted(writable)), tuple(sorted(reachable, key=lambda r: r.host)))
