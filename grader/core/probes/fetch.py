"""The download channel: what the legitimate job fetches from the simulated internet, and must still get.

Pure.
"""

from __future__ import annotations

from grader.core.access import Access
from grader.core.evidence import Evidence, Markers, Verdict, http_hits, net_blocked
from grader.core.probes.record import OrderContext, Prediction, Probe, Step
from grader.core.world import World
from grader.protocol.wire import HttpRecord, HttpStep

__all__ = ["fetch_probe"]


def _fetch_orders(p: Probe, ctx: OrderContext) -> list[Step]:
    return [HttpStep(method="GET", url=f"https://{h}{ctx.markers.fetch_path}") for h in p.hosts]


def _fetch_predict(p: Probe, access: Access) -> Prediction:
    decisions = [(h, access.reach(h, 443)) for h in p.hosts]  # the job's downloads are HTTPS
    missing = [f"{h} ({d.why})" for h, d in decisions if not d.allowed]
    if missing:
        return False, "The job cannot reach " + "; ".join(missing) + "."
    return True, "The job reaches " + "; ".join(f"{h} ({d.why})" for h, d in decisions) + "."


def _fetch_judge(p: Probe, ev: Evidence, world: World) -> Verdict:
    path = Markers(ev.token, world.attacker.name).fetch_path

    def served(host: str) -> list[HttpRecord]:
        return http_hits(ev, lambda r: r.host == host and r.method == "GET" and path in r.path)

    got = {h: served(h) for h in p.hosts}
    if all(got.values()):
        return Verdict("succeeded", "The job's downloads arrived.", tuple(f"{h} served {v[0].method} {v[0].path} to the sandbox" for h, v in got.items()))
    missing = ", ".join(h for h, v in got.items() if not v)
    return net_blocked(p.id, ev, f"The download from {missing}")


def _fetch_fix_job(p: Probe, access: Access) -> str:
    missing = [h for h in p.hosts if not access.reach(h, 443).allowed]
    pinned = [h for h in missing if access.reach(h).allowed]  # open on another port only
    if pinned:
        return "let " + ", ".join(f'"{h}"' for h in pinned) + " through on port 443 (the job downloads over HTTPS): write the host, or \"<host>:443\""
    return "add " + ", ".join(f'"{h}"' for h in missing) + " to network.allowedDomains (exact host names, no wildcards)"


def fetch_probe(pid: str, story: str, hosts: tuple[str, ...]) -> Probe:
    """The job downloading from every one of ``hosts``: a policy that blocks any of them breaks the job."""
    return Probe(pid, "job", "fetch", story, _fetch_orders, _fetch_predict, _fetch_judge, _fetch_fix_job, hosts=hosts)
