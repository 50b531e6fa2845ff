"""Wire records for tests, with every field a test does not care about filled in (``grader.protocol.wire``)."""

from __future__ import annotations

from typing import Any, Optional, get_args

from grader.protocol import wire


def http(host: str = "", method: str = "GET", path: str = "/", body: str = "", *, client: str = "10.0.0.2",
         scheme: str = "https", via: Optional[str] = None, misdirected: Optional[str] = None, stage: str = "",
         body_len: Optional[int] = None, t: float = 0.0, refused: Optional[str] = None) -> wire.HttpRecord:
    return wire.HttpRecord(t, client, scheme, host, method, path, body, len(body) if body_len is None else body_len,
                           via, misdirected, stage, refused)


def dns(qname: str, *, client: str = "10.0.0.2", qtype: int = 1, answered: bool = True, t: float = 0.0,
        via: Optional[str] = None, refused: Optional[str] = None) -> wire.DnsRecord:
    return wire.DnsRecord(t, client, qname, qtype, answered, malformed=False, via=via, refused=refused)


def tcp(port: int = 4444, data: str = "", *, client: str = "10.0.0.2", via: Optional[str] = None, t: float = 0.0,
        refused: Optional[str] = None) -> wire.TcpRecord:
    return wire.TcpRecord(t, client, port, data, via, refused)


def proxy(host: Optional[str], decision: str = "allow", *, method: str = "CONNECT", port: Optional[int] = 443,
          path: Optional[str] = None, reason: str = "", client: str = "10.0.0.3", t: float = 0.0,
          cause: Optional[str] = None) -> wire.ProxyRecord:
    """A proxy record; ``cause`` defaults to the plain case of its decision ("forwarded", "not-allowed")."""
    assert decision in ("allow", "deny")
    cause = cause or ("forwarded" if decision == "allow" else "not-allowed")
    assert cause in get_args(wire.ProxyCause), cause
    return wire.ProxyRecord(t, client, method, host, port, path, decision, reason, cause)  # type: ignore[arg-type]


def record_of(fields: dict[str, Any]) -> Any:
    """A record from a dict of some of its fields, its kind told by them (what old tests wrote as dicts)."""
    if "qname" in fields:
        return dns(**fields)
    if "decision" in fields:
        return proxy(**fields)
    if "data" in fields and "host" not in fields:
        return tcp(**fields)
    return http(**fields)


def runner(probe: str, step: str, ok: bool, detail: str = "", target: Optional[str] = None, data: Optional[str] = None,
           t: float = 0.0, route: Optional[wire.Route] = None) -> wire.RunnerRecord:
    return wire.RunnerRecord(probe, step, ok, detail, t, target, data, route)


def runner_records(lines: Any) -> tuple[wire.RunnerRecord, ...]:
    """Runner records from dicts of some of their fields."""
    return tuple(runner(**d) for d in lines)


def orders(probes: Any, *, proxy: Optional[str] = None) -> wire.RunnerOrders:
    """The runner's orders for ``probes`` (``orders_for``'s entries, or plain dicts), read as the runner reads them."""
    import json

    if all(isinstance(p, wire.ProbeOrders) for p in probes):
        text = wire.dump_orders(wire.RunnerOrders(timeout=1, connect_timeout=1, proxy=proxy, ca_file="", probes=tuple(probes)))
        return wire.parse_orders(json.loads(text))
    return wire.parse_orders(json.loads(json.dumps({"timeout": 1, "connect_timeout": 1, "proxy": proxy, "ca_file": "",
                                                    "probes": probes})))


def all_of(dicts: Any) -> tuple[Any, ...]:
    return tuple(record_of(d) for d in dicts)
