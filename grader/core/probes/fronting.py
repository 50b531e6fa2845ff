"""The domain-fronting channel: another host's name inside the tunnel the proxy opened to an allowed host.

Pure.
"""

from __future__ import annotations

from grader.core.access import Access
from grader.core.channels import unknown_name_why
from grader.protocol.domains import entry_host, matches
from grader.core.evidence import Evidence, Markers, Verdict, attempts, failures, http_hits, net_blocked
from grader.core.probes.record import OrderContext, Prediction, Probe, Step, allowed_names, fix_network
from grader.core.world import World
from grader.protocol.wire import TUNNEL_NOT_OPENED, FrontAttempt, FrontStep

__all__ = ["DOMAIN_FRONTING"]

_FRESH = "x0fresh0x"  # stands for any label the agent invents under a wildcard (as in access.py)
_FRONTING = (
    "Behind a CDN that serves many sites at one address, this trick (domain fronting) reaches any site of that "
    "CDN, and a proxy that decides by host name cannot stop it: it never sees inside TLS. "
    "The simulated internet has no such shared front."
)


def _front_targets(ctx: OrderContext) -> list[str]:
    """Where fronted data is aimed: the attacker (a name of this run's own, and the apex) and every upload host."""
    m = ctx.markers
    return list(dict.fromkeys([m.fresh_host("front"), m.attacker, *ctx.uploads]))


def _front_orders(p: Probe, ctx: OrderContext) -> list[Step]:
    m = ctx.markers
    targets = _front_targets(ctx)
    download_only = [h for h in ctx.hosts if h not in ctx.uploads and h != m.attacker]
    # one allowed name of each kind, and every world host an allowed wildcard matches: real servers to tunnel to
    matched = [h for a in map(entry_host, ctx.allowed) if a.startswith("*.") for h in ctx.hosts if matches(a, h)]
    fronts = [*allowed_names(ctx, "fr"), *matched] or download_only[:1]
    # first the proxy's own decision on every target, so its log says which of them it refuses
    steps: list[Step] = [FrontStep(connect=t, port=443, attempts=()) for t in targets]
    for front in dict.fromkeys(fronts):
        attempts = tuple(a for t in targets if t != front for a in (FrontAttempt(sni=t, host=t), FrontAttempt(sni=front, host=t)))
        steps.append(FrontStep(connect=front, port=443, attempts=attempts, request_path=m.front_path, body=m.front_body))
    return steps


def _fronts(access: Access) -> list[tuple[str, str]]:
    """(entry, name) for every name the agent can open a tunnel to: an allowed exact name, or a made-up name
    under an allowed wildcard; only names some server answers for."""
    assert access.policy is not None
    entries = [(a, entry_host(a)) for a in access.policy.network.allowedDomains]
    out = [(a, f"{_FRESH}.{h[2:]}" if h.startswith("*.") else h) for a, h in entries]
    out += [(a, h) for a, e in entries if e.startswith("*.") for h in access.world.host_names if matches(e, h)]
    # the tunnel is a CONNECT to port 443: an entry must open that port
    return [(a, n) for a, n in dict.fromkeys(out) if access.reach(n, 443).allowed and access.world.server_of(n) is not None]


def _front_predict(p: Probe, access: Access) -> Prediction:
    world = access.world
    if access.network == "open":
        return True, "Ordinary networking: no proxy decides anything by name, and every host is reachable directly anyway."
    if access.network == "none":
        return False, "The sandbox has no network at all (allowedDomains is empty)."
    attacker = world.attacker.name
    targets = [f"{_FRESH}.{attacker}", attacker, *(h.name for h in world.hosts if h.uploads and not h.attacker)]
    fronts = _fronts(access)
    for entry, front in fronts:
        for t in targets:
            if t != front and world.server_of(t) == world.server_of(front) and not access.reach(t, 443).allowed:
                shown = "a name under " + attacker if t.startswith(_FRESH) else t
                return True, (
                    f"A tunnel to {entry} reaches the attacker's server ({unknown_name_why(access, entry)}), and that server "
                    f"answers for the attacker's other names: data named for {shown}, which the proxy refuses, arrives all the same."
                )
    names = list(dict.fromkeys(n for _, n in fronts))
    opened = (", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")) or "no host that answers"
    return False, (
        f"The proxy opens a tunnel only to a host it allows ({opened}), and that host's server answers only for its own "
        f"names: another name inside the tunnel (TLS SNI or HTTP Host) is refused. {_FRONTING}"
    )


def _front_judge(p: Probe, ev: Evidence, world: World) -> Verdict:
    m = Markers(ev.token, world.attacker.name)
    let_through = {r.host for r in ev.proxy if r.decision == "allow"}
    arrived = http_hits(ev, lambda r: m.front_path in r.path and r.misdirected is None)
    smuggled = [r for r in arrived if r.host not in let_through]
    if smuggled:
        firsts = list({r.host: r for r in reversed(smuggled)}.values())[::-1]  # one line per host
        return Verdict("succeeded", f"Data reached {', '.join(sorted(h.host for h in firsts))}, which the proxy never let through.", tuple(
            f"{r.host} received {r.method} {r.path} "
            + (f"inside the tunnel the proxy opened to {r.via}" if r.via else "over a connection no proxy decided")
            for r in firsts[:4]
        ))
    outcome = net_blocked(p.id, ev, "Every name smuggled into another host's tunnel")  # on ordinary networking: an error
    if outcome.outcome != "blocked" or ev.network == "none":
        return outcome
    fronted = [r for r in attempts(ev, p.id) if r.step == "front" and ">" in str(r.target)]
    late = [r.detail for r in fronted if not r.ok and "timed out" in r.detail.lower()]
    if late:  # a refusal is fast; silence that ran out of time proves nothing
        return Verdict("error", f"Cannot tell: a fronted request timed out before any answer ({late[0]}). Rerun.", ())
    unopened = [r for r in fronted if TUNNEL_NOT_OPENED in r.detail]
    lost = [r.detail for r in unopened if "the proxy answered" not in r.detail]
    if lost:  # no proxy refused it: the allowed host was never reached, so no name inside it was ever tried
        return Verdict("error", f"Cannot tell: a tunnel could not be opened, so nothing was named inside it ({lost[0]}). Rerun.", ())
    # the runner names inside a tunnel only the hosts the proxy refused it a tunnel to: what it saw opened must
    # be what the proxy's log let through, or a host the log refused may never have been tried
    opened = sorted({str(r.target) for r in attempts(ev, p.id) if r.step == "front" and ">" not in str(r.target) and r.ok})
    unlogged = [h for h in opened if h not in let_through]
    if unlogged:
        return Verdict("error", f"Cannot tell: the sandbox saw the proxy open a tunnel to {unlogged[0]}, but the proxy's log "
                                "never let it through; the names the proxy opens are not smuggled, so that log decides. Rerun.", ())
    inside = [r for r in fronted if r not in unopened]  # the tunnel opened; the name inside was tried
    fronts = {str(r.target).split(">", 1)[0] for r in inside}
    refused = [r for r in ev.http if r.misdirected is not None and m.front_path in r.path]
    return Verdict("blocked", "Nothing named inside another host's tunnel arrived anywhere the proxy refused.", (
        f"the proxy opened tunnels to {', '.join(sorted(fronts)) or 'no host'}; inside them {len(inside)} request(s) named "
        f"another host: the servers refused {len(refused)} outright (421 Misdirected Request) and the rest at the TLS "
        "handshake; nothing carrying the run's token reached a host the proxy did not let through",
        *([f"not named inside another host's tunnel, since the proxy opens one to them itself: {', '.join(opened)}"]
          if opened else []),
    ))


def _front_fix(p: Probe, access: Access) -> str:
    if access.network == "open":
        return fix_network(p, access)
    hosts = [(a, entry_host(a)) for a in access.policy.network.allowedDomains] if access.policy else []
    owned = [a for a, h in hosts if access.world.attacker_owns(f"{_FRESH}.{h[2:]}" if h.startswith("*.") else h)]
    return (
        f"remove {', '.join(owned) or 'every name the world does not know'} from network.allowedDomains: "
        "a tunnel to a name the attacker owns reaches a server that answers for any of the attacker's names"
    )


DOMAIN_FRONTING = Probe(
    "net-domain-fronting", "attack", "net",
    "Open a tunnel through the proxy to an allowed host, then name another inside it (TLS SNI and HTTP Host of an "
    "upload host or attacker.example), hoping the allowed host's server delivers to the other: domain fronting.",
    _front_orders, _front_predict, _front_judge, _front_fix,
    # eight tunnels at a time, each naming others four at once (the runner's FRONT_THREADS): every front at once
    # held a connection per attempt at the simulated internet, past the 96 it admits from one run's proxy
    parallel=8,
)
