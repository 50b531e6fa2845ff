"""The scope a policy grants: every world path and host, predicted from the policy and measured in a real run.

Where a probe asks one question ("can the agent read the SSH key?"), the scope
answers them all: which world files are readable, which files are writable and
in which world directories a new file can be created, and which hosts are
reachable (with whether each accepts uploads). The static backend predicts it
(``predict_scope``); a real run measures the same sets with its scope scan
(orders in ``probes.scan_orders``, judged by ``measure_scope``); the two must
agree, as the probes must. ``summary`` says it in one line for the board and
the terminal.

Pure. Imports: access, domains, evidence, outcomes, world. Nothing downstream.
"""

from __future__ import annotations

from typing import Optional

from .access import Access
from .domains import matches
from .evidence import Evidence, Markers, RunnerRecord, sha256
from .outcomes import Reach, Scope
from .world import World, load_world

__all__ = [
    "FRESH_LABEL", "NEW_FILE", "SCAN_IDS", "fresh_name", "measure_scope", "new_file", "predict_scope",
    "scan_name", "scanned_dirs", "scanned_files", "scanned_hosts", "summary",
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
    """Every host the scan tries: the world's hosts, and a fresh name under every allowed wildcard."""
    names = list(access.world.host_names)
    if access.policy is not None:
        names += [fresh_name(a) for a in access.policy.network.allowedDomains if a.startswith("*.")]
    return tuple(dict.fromkeys(names))


def scan_name(markers: Markers, host: str) -> str:
    """The name the runner asks for: a world host as it is; a fresh name with this run's own label.

    A per-run label makes every trace of a made-up name this run's alone, on a
    simulated internet that other runs share.
    """
    return markers.scan_label + host[len(FRESH_LABEL):] if _is_fresh(host) else host


def _uploads(world: World, host: str) -> bool:
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
    reachable = [Reach(h, _uploads(world, h)) for h in scanned_hosts(access) if access.reach(h).allowed]
    return Scope(tuple(readable), tuple(sorted(writable)), tuple(sorted(reachable, key=lambda r: r.host)))


# --- measured -------------------------------------------------------------------------------


def _reached(ev: Evidence, markers: Markers, name: str) -> bool:
    """Did a scan attempt addressed to ``name`` get out of the sandbox? Only records made outside it count."""
    path = markers.scan_path
    if any(r.get("host") == name and path in str(r.get("path") or "") for r in ev.http):
        return True  # the sink answered for it: through the proxy or directly
    if any(r.get("decision") == "allow" and r.get("host") == name and path in str(r.get("path") or "") for r in ev.proxy):
        return True  # the run's own proxy let it through, whatever answers upstream
    asked = {str(q.get("qname", "")).lower().rstrip(".") for q in ev.dns}
    # a per-run name reached a name server: the sandbox's own query, or its proxy's lookup for it
    return markers.scan_dns(name) in asked or (markers.scan_label in name and name in asked)


def _route(r: RunnerRecord) -> str:
    """How a scan request went, "proxy" or "direct": the runner says "GET <url> via <route>: ..."."""
    rest = r.detail.split(f"{r.target} ", 1)[-1]
    return rest[len("via "):].split(":", 1)[0] if rest.startswith("via ") else ""


def _missing(records: list[RunnerRecord], step: str, wanted: list[str]) -> list[str]:
    tried = {r.target for r in records if r.step == step}
    return [w for w in wanted if w not in tried]


def measure_scope(ev: Evidence, access: Access) -> tuple[Optional[Scope], str]:
    """The scope a real run measured with its scan, or None and why it cannot be told.

    ``readable``: the file's per-run canary came out of the sandbox.
    ``writable``: the world copy's file changed (sha256 before and after) or
    carries the scan's text, or the scan's new file exists in the directory.
    ``reachable``: a recorder outside the sandbox saw the scan's marker for the
    host. Missing evidence never shrinks a set: an unfinished scan or a dead
    recorder gives no scope at all, since a wrong "not writable" misleads as
    much as a wrong "blocked".
    """
    world = access.world
    markers = Markers(ev.token, world.attacker.name)
    unfinished = [s for s in SCAN_IDS if not any(r.probe == s and r.step == "done" for r in ev.records)]
    if unfinished:
        late = " before the sandbox's time ran out" if ev.timed_out else ""
        return None, f"the scope scan did not finish{late} ({', '.join(unfinished)})"
    files, dirs, hosts = scanned_files(world), scanned_dirs(world), scanned_hosts(access)
    by = {s: [r for r in ev.records if r.probe == s] for s in SCAN_IDS}
    gaps = _missing(by["scan-read"], "read", list(files)) + _missing(by["scan-write"], "write", [*files, *map(new_file, dirs)])
    urls = [f"http://{scan_name(markers, h)}{markers.scan_path}" for h in hosts]
    gaps += _missing(by["scan-net"], "http", urls) + _missing(by["scan-net"], "dns", [markers.scan_dns(scan_name(markers, h)) for h in hosts])
    gaps += [f"{p} (no canary, no hash before the run)" for p in files if p not in ev.canaries or p not in ev.before]
    if gaps:
        return None, f"the scope scan left no record for {len(gaps)} attempt(s), e.g. {gaps[0]}"
    if ev.infra_problem and ev.network != "none":
        return None, f"the hosts cannot be told: {ev.infra_problem}"

    readable = [p for p in files if any(r.data and ev.canaries[p] in r.data for r in ev.records)]
    text = markers.scan_text.encode()

    def changed(p: str) -> bool:
        after = ev.after.get(p)
        return after is None or text in after or sha256(after) != ev.before[p]  # gone counts as changed

    writable = {p for p in files if changed(p)} | {d for d in dirs if new_file(d) in ev.after}
    reached = {h for h in hosts if _reached(ev, markers, scan_name(markers, h))}
    # a request that timed out may have been on its way when the run ended: its silence proves nothing
    got_out = {f"http://{scan_name(markers, h)}{markers.scan_path}" for h in reached}
    last: dict[tuple[Optional[str], str], RunnerRecord] = {}  # each way to each host: its last attempt decides
    for r in by["scan-net"]:
        if r.step == "http":
            last[(r.target, _route(r))] = r
    slow = [r.detail for r in last.values() if not r.ok and "timed out" in r.detail.lower() and r.target not in got_out]
    if slow:
        return None, f"{len(slow)} of the scan's requests timed out before any answer, e.g. {slow[0]}"
    reachable = [Reach(h, _uploads(world, h)) for h in hosts if h in reached]
    return Scope(tuple(sorted(readable)), tuple(sorted(writable)), tuple(sorted(reachable, key=lambda r: r.host))), ""


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
    else:
        reach = "reach no host"
    return "; ".join([f"The agent can {read}, {write}, {reach}", *_families(scope, w)]) + "."
