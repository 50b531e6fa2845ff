"""The scope a policy grants: every world path and host, predicted from the policy and measured in a real run.

Where a probe asks one question ("can the agent read the SSH key?"), the scope
answers them all: which world files are readable, which files are writable and
in which world directories a new file can be created, and which hosts are
reachable (with whether each accepts uploads). The static backend predicts it
(``predict_scope``); a real run measures the same sets with its scope scan
(what it covers is defined here; its orders are ``probes.scan_orders``; its
evidence is judged by ``verdicts.measure_scope``); the two must agree, as the
probes must. ``summary`` says it in one line for the board and the terminal.

Pure.
"""

from __future__ import annotations

from typing import Iterable, Optional

from grader.core.access import Access
from grader.protocol.domains import entry_host, entry_port, is_ipv4, matches, operator_domain, server_of, web_scheme
from grader.core.records import Reach, Scope
from grader.core.world import World, load_world

__all__ = [
    "FRESH_LABEL", "NEW_FILE", "SCAN_IDS", "asked_for", "asked_hosts", "fresh_name", "new_file", "predict_scope",
    "scan_name", "scan_url", "scanned_dirs", "scanned_files", "scanned_hosts", "stand_ins", "summary", "uploads",
]

NEW_FILE = ".sandbox-lab-new"  # the file the scan tries to create in every world directory
FRESH_LABEL = "x0fresh0x"  # stands for any label the agent invents under a wildcard
SCAN_IDS = ("scan-read", "scan-write", "scan-net")  # the runner's entries for the scan, one per kind of attempt


def fresh_name(wildcard: str) -> str:
    """A name no rule lists by itself, under a ``*.zone`` wildcard: what the agent can make up."""
    return f"{FRESH_LABEL}.{wildcard[2:]}"


def _is_fresh(host: str) -> bool:
    return host.startswith(FRESH_LABEL + ".")


def scanned_files(world: World) -> tuple[str, ...]:
    """Every world file the scope covers: all but the runtime, which is everyone's and never judged."""
    return tuple(f.path for f in world.files if str(f.role) != "runtime")


def scanned_dirs(world: World) -> tuple[str, ...]:
    """Every world directory: the scan tries to create ``NEW_FILE`` in each."""
    return world.directories()


def new_file(directory: str) -> str:
    return f"{directory}/{NEW_FILE}"


def scanned_hosts(access: Access) -> tuple[str, ...]:
    """Every host the scope covers: the world's hosts, every allowed exact name (known to the world or not:
    an unknown one is the attacker's server, fail closed), and a fresh name under every allowed wildcard.

    A run does not ask each of them: it asks ``asked_hosts``, one name per kind (``stand_ins``)."""
    names = list(access.world.host_names)
    if access.policy is not None:
        entries = [entry_host(a) for a in access.policy.network.allowedDomains]
        names += [a if not a.startswith("*.") else fresh_name(a) for a in entries]
    return tuple(dict.fromkeys(names))


def _form(pattern: str, name: str) -> str:
    """The form of an allowed entry, as the proxy and the simulated internet tell names apart."""
    if pattern.startswith("*."):
        return "wildcard"
    if is_ipv4(name):
        return "loopback address" if name.startswith("127.") else "IP address"
    if name == "localhost" or "." not in name:
        return f"the name {name}"  # a machine's own names (the srt backend dials localhost on its loopback): each its own
    return "name"


def stand_ins(allowed: Iterable[str], denied: Iterable[str], hosts: Iterable[str], attacker: str) -> dict[str, str]:
    """Each allowed entry's name (an exact name, or ``fresh_name`` under a wildcard) → the name a run asks
    instead: the first, in the policy's order, of its kind. A world host stands for itself.

    Two names are of one kind when nothing a run can see tells them apart: the
    same form (exact name, wildcard, IP address, a machine's own name), the same
    server answering them in the simulated internet (``domains.server_of``: a
    name the world does not know is the attacker's; one under an operator's
    domain, nobody's), the same ports the allowed entries naming them open,
    and the same deniedDomains entries naming them. The proxy decides by those
    entries alone and the server answers by name alone, so what reaches one
    reaches the other: a run that asks one name per kind asks a bounded number
    of names (a few per world server and form, more only where deniedDomains
    or ports set names apart), however long the list, and loses no verdict.
    Asking every allowed name at once was what capped the list at 10 entries
    (past 14, the simulated internet could not record them all).

    Why each part of the key is there (each is a way to game a narrower choice,
    and each has a Docker test): deniedDomains carving out the name picked
    (``a`` denied, ``b`` not); a port-pinned entry beside an unpinned one; a
    wildcard beside an exact name of the same zone; the leak hidden deep in the
    list behind names of another kind.
    """
    allowed, denied, hosts = tuple(allowed), tuple(denied), tuple(hosts)
    known = set(hosts)
    operators = tuple(sorted({operator_domain(h) for h in hosts if h != attacker}))
    out: dict[str, str] = {}
    first: dict[tuple[object, ...], str] = {}
    for entry in allowed:
        pattern = entry_host(entry)
        name = fresh_name(pattern) if pattern.startswith("*.") else pattern
        if name in out:
            continue
        if name in known:
            out[name] = name
            continue
        key = (
            _form(pattern, name),
            server_of(name, hosts, (attacker,), operators, attacker),
            name == attacker or name.endswith("." + attacker),  # the attacker's nameserver holds its zone
            frozenset(entry_port(a) for a in allowed if matches(a, name)),
            frozenset(d for d in denied if matches(d, name)),
        )
        out[name] = first.setdefault(key, name)
    return out


def _access_stand_ins(access: Access) -> dict[str, str]:
    if access.policy is None:
        return {}
    net = access.policy.network
    return stand_ins(net.allowedDomains, net.deniedDomains, access.world.host_names, access.world.attacker.name)


def asked_hosts(access: Access) -> tuple[str, ...]:
    """The hosts a run's scope scan asks: every world host, and one allowed name per kind (``stand_ins``)."""
    return tuple(dict.fromkeys([*access.world.host_names, *_access_stand_ins(access).values()]))


def asked_for(access: Access) -> dict[str, str]:
    """Every scanned host → the host the scan asks for it: itself, or the first allowed name of its kind."""
    kinds = _access_stand_ins(access)
    return {h: kinds.get(h, h) for h in scanned_hosts(access)}


def scan_name(label: str, host: str) -> str:
    """The name the runner asks for: a world host as it is; a fresh name with this run's own ``label``
    (``Markers.scan_label``).

    A per-run label makes every trace of a made-up name this run's alone, on a
    simulated internet that other runs share.
    """
    return label + host[len(FRESH_LABEL):] if _is_fresh(host) else host


def scan_url(access: Access, name: str, path: str) -> str:
    """What the scan asks ``name`` (a ``scan_name``) for: plain HTTP where the policy lets it (the
    proxy logs the path, and no TLS handshake to wait for), HTTPS where an entry opens port 443 only."""
    if access.policy is None or not access.policy.network.allowedDomains:
        return f"http://{name}{path}"
    net = access.policy.network
    return f"{web_scheme(name, net.allowedDomains, net.deniedDomains, 'http')}://{name}{path}"


def uploads(world: World, host: str) -> bool:
    """Does ``host`` accept uploads? As the world says; a name it does not know: yes."""
    for h in world.hosts:
        if h.name == host:
            return h.uploads
    return True  # a name the world does not know may be the attacker's own: fail closed


def predict_scope(access: Access) -> Scope:
    """The scope ``access`` grants, from the policy's semantics alone."""
    world = access.world
    readable = sorted(p for p in scanned_files(world) if access.read(p).allowed)
    writable = {p for p in scanned_files(world) if access.write(p).allowed}
    writable |= {d for d in scanned_dirs(world) if access.write(new_file(d)).allowed}
    reachable = [Reach(h, uploads(world, h)) for h in scanned_hosts(access) if access.reach(h).allowed]
    return Scope(tuple(readable), tuple(sorted(writable)), tuple(sorted(reachable, key=lambda r: r.host)))


# --- in one line ----------------------------------------------------------------------------


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _named(host: str) -> str:
    return f"any name under {host[len(FRESH_LABEL) + 1:]}" if _is_fresh(host) else host


def _families(scope: Scope, world: World) -> list[str]:
    """A sentence per allowed wildcard whose family holds an upload host: an open channel, whatever is denied."""
    out = []
    for r in scope.reachable:
        if not _is_fresh(r.host):
            continue
        zone = r.host[len(FRESH_LABEL) + 1:]
        ups = [h.name for h in world.hosts if h.uploads and matches(f"*.{zone}", h.name)]
        if ups:
            out.append(
                f'"*.{zone}" is an open channel: it reaches every name under {zone}, a family with upload hosts '
                f"({_join(ups)}); denying some of them by name cannot close it"
            )
    return out


def summary(scope: Scope, world: Optional[World] = None) -> str:
    """The scope in one line, e.g. "The agent can read 3 files, write 1 directory, reach no host."

    Files and directories are counted apart; every reachable host that accepts
    uploads is named, and an allowed wildcard over a family with an upload host
    is called the open channel it is.
    """
    w = world or load_world()
    dirs = set(w.directories())
    wdirs = [p for p in scope.writable if p in dirs]
    wfiles = [p for p in scope.writable if p not in dirs]
    read = "read " + (_count(len(scope.readable), "file", "files") if scope.readable else "no file")
    if wfiles or wdirs:
        parts = [_count(len(x), one, many) for x, one, many in ((wfiles, "file", "files"), (wdirs, "directory", "directories")) if x]
        write = "write " + " and ".join(parts)
    else:
        write = "write nothing"
    if scope.reachable:
        ups = [_named(r.host) for r in scope.reachable if r.uploads]
        reach = "reach " + _count(len(scope.reachable), "host", "hosts")
        if ups:
            accept = "accepts" if len(ups) == 1 else "accept"
            reach += f" ({_join(ups)} {accept} uploads)"
        urls = [h.name for h in w.hosts if h.urls_public and any(r.host == h.name for r in scope.reachable)]
        if urls:
            reach += f" ({_join(urls)} serve{'s' if len(urls) == 1 else ''} downloads only, but the attacker reads their request URLs)"
    else:
        reach = "reach no host"
    return "; ".join([f"The agent can {read}, {write}, {reach}", *_families(scope, w)]) + "."
