"""The Docker backend's promises: evidence, isolation from the host, nothing left behind, nothing leaves the machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from grader import load_policy
from grader.core.plan import build_plan

pytestmark = pytest.mark.docker

NAIVE = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}


def test_naive_setup_leaks_the_ssh_key_with_evidence(docker_backend: Any, no_leftovers: None) -> None:
    r = docker_backend.run(build_plan(load_policy(NAIVE)))
    key = r.outcome("read-ssh-key")
    assert key.outcome == "succeeded" and "canary of /home/user/.ssh/id_rsa" in key.evidence[0]
    exfil = r.outcome("exfil-secret")
    assert exfil.outcome == "succeeded"
    assert any("github.com" in e for e in exfil.evidence), exfil.evidence
    # srt, started in the home, keeps ~/.bashrc read-only whatever allowWrite says; its own settings file it does not
    assert r.outcome("write-shell-rc").outcome == "blocked"
    assert r.outcome("write-sandbox-settings").outcome == "succeeded"
    assert r.outcome("net-direct-ip").outcome == "blocked"
    assert r.backend == "docker" and r.run_id.startswith("sl-")


def test_host_is_untouched_by_a_policy_that_names_it(docker_backend: Any, tmp_path: Path, no_leftovers: None) -> None:
    """allowWrite of / and of host paths selects only the run's world copy; host canaries stay as they were."""
    canaries = {
        Path("/home/user/.bashrc"): "host canary: bashrc\n",
        Path("/project/.env"): "host canary: env\n",
        tmp_path / "plain.txt": "host canary: tmp\n",
    }
    created: list[Path] = []
    made_dirs: list[Path] = []  # directories this test made for its canaries, shallow first
    saved: dict[Path, bytes] = {}
    for p, text in canaries.items():
        if p.exists():
            saved[p] = p.read_bytes()
        else:
            created.append(p)
            made_dirs += [d for d in reversed(p.parents) if not d.exists() and d not in made_dirs]
            p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    sock = Path("/var/run/docker.sock")
    sock_stat = sock.stat() if sock.exists() else None
    left: list[str] = []
    try:
        policy = load_policy({"filesystem": {"allowWrite": ["/", "/var/run/docker.sock", "/proc", "/sys", "/dev", str(tmp_path)]}})
        r = docker_backend.run(build_plan(policy))
        # the world copy was writable, so the probes' writes succeeded there...
        assert r.outcome("write-shell-rc").outcome == "blocked"  # srt's own protection in the home it starts in
        assert r.outcome("write-git-hook").outcome == "succeeded"  # the world copy's, never the host's
        assert r.outcome("tamper-source").outcome == "succeeded"
        # ...and never on the host
        for p, text in canaries.items():
            assert p.read_text() == text, f"{p} changed on the host"
        if sock_stat is not None:
            assert sock.stat().st_mtime == sock_stat.st_mtime and sock.is_socket()
    finally:
        # Put back what was there, and remove what this test made (only that):
        # directories deepest first, and only while empty.
        for p, data in saved.items():
            p.write_bytes(data)
        for p in created:
            p.unlink(missing_ok=True)
        for d in reversed(made_dirs):
            try:
                d.rmdir()
            except OSError as exc:
                left.append(f"{d} ({exc.strerror})")
    assert not left, f"directories this test made could not be removed: {', '.join(left)}; something else wrote into them"


def _uplink() -> str:
    out = subprocess.run(["ip", "route", "show", "default"], capture_output=True, text=True, check=True).stdout.split()
    return out[out.index("dev") + 1]


def _engine_ranges() -> list[str]:
    """The ranges the engine gives its networks: its configured pools, or Docker's defaults when none are set."""
    out = subprocess.run(["docker", "info", "--format", "{{json .DefaultAddressPools}}"], capture_output=True, text=True, check=True).stdout
    pools = json.loads(out) or []
    return [p["Base"] for p in pools] or ["172.16.0.0/12", "192.168.0.0/16"]


@pytest.fixture()
def uplink_counters() -> Iterator[dict[str, Any]]:
    """iptables counters: packets from the engine's private ranges leaving by the uplink, and DNS to it.

    A positive control counts the same ranges going into bridges, to prove the
    counters see the run's traffic at all.
    """
    if os.geteuid() != 0:
        pytest.skip("needs root to read iptables counters")
    dev = _uplink()
    ranges = _engine_ranges()
    rules = [
        *(["-o", dev, "-s", r] for r in ranges),
        *(["-o", dev, "-p", "udp", "--dport", "53", "-s", r] for r in ranges),
        *(["-o", "br-+", "-s", r] for r in ranges),
    ]
    tag = ["-m", "comment", "--comment", "sandbox-lab-test"]
    for r in rules:
        subprocess.run(["iptables", "-t", "mangle", "-I", "POSTROUTING", "1", *r, *tag], check=True)

    def read() -> dict[str, int]:
        text = subprocess.run(["iptables", "-t", "mangle", "-L", "POSTROUTING", "-n", "-v", "-x"], capture_output=True, text=True, check=True).stdout
        out = {"uplink": 0, "bridges": 0}
        for line in text.splitlines():
            if "sandbox-lab-test" in line:
                pkts = int(line.split()[0])
                out["uplink" if f" {dev} " in f" {line} " else "bridges"] += pkts
        return out

    try:
        yield {"read": read, "dev": dev}
    finally:
        for r in rules:
            subprocess.run(["iptables", "-t", "mangle", "-D", "POSTROUTING", *r, *tag], check=False)


def test_no_packet_reaches_the_uplink_from_the_plain_container(docker_backend: Any, uplink_counters: dict[str, Any]) -> None:
    read = uplink_counters["read"]
    before = read()
    r = docker_backend.run(build_plan(None))
    after = read()
    assert r.outcome("net-direct-ip").outcome == "succeeded"  # traffic did flow, inside the simulated internet
    assert after["bridges"] > before["bridges"], "positive control: the counters saw no run traffic at all"
    assert after["uplink"] == before["uplink"], f"packets left by {uplink_counters['dev']}"


def test_unknown_host_name_is_never_resolved_outside(docker_backend: Any) -> None:
    """Every DNS query of the plain container lands on the run's own DNS server."""
    r = docker_backend.run(build_plan(None))
    dns = r.outcome("net-dns-exfil")
    assert dns.outcome == "succeeded" and "nameserver logged" in dns.evidence[0]


def _kill_a_grader_mid_run_and_clean_up(docker_client: Any) -> tuple[int, list[str]]:
    """A grader killed while its run has containers up, then ``cleanup``: the grader's pid and what cleanup said."""
    from grader.backends.docker.backend import cleanup
    from grader.backends.docker.engine import DockerEngine

    script = (
        "import time, threading\n"
        "from grader import load_policy\n"
        "from grader.core.plan import build_plan\n"
        "from grader.backends.docker.backend import DockerBackend\n"
        "b = DockerBackend.from_env()\n"
        "print('ready', flush=True)\n"
        "b.run(build_plan(load_policy({'network': {'allowedDomains': ['github.com']}})))\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    # wait until the run has made something, then kill the grader without a chance to clean up
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if docker_client.api.containers(all=True, filters={"label": f"{LABEL_PID_KEY}={proc.pid}"}):
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    left = docker_client.api.containers(all=True, filters={"label": f"{LABEL_PID_KEY}={proc.pid}"})
    assert left, "the killed run should have left containers behind (otherwise this test proves nothing)"
    return proc.pid, cleanup(DockerEngine(docker_client))


def test_cleanup_removes_what_a_killed_grader_left(docker_client: Any, tmp_path: Path) -> None:
    """Every run's start sweeps the engine, another test worker's too, and can remove the killed grader's containers
    before this cleanup does: that proves nothing about it, so the kill is played again (three times at most). A
    cleanup that leaves the killed grader's things fails at once."""
    from grader.backends.docker.backend import runs_root

    for _ in range(3):
        pid, removed = _kill_a_grader_mid_run_and_clean_up(docker_client)
        assert not docker_client.api.containers(all=True, filters={"label": f"{LABEL_PID_KEY}={pid}"})
        assert not docker_client.api.networks(filters={"label": f"{LABEL_PID_KEY}={pid}"})
        root = runs_root()
        for d in root.iterdir() if root.is_dir() else []:
            owner = json.loads((d / "owner.json").read_text()) if (d / "owner.json").exists() else {}
            assert owner.get("pid") != pid
        if any("container" in r for r in removed):
            break
    else:
        pytest.fail("another process's sweep removed the killed grader's containers first in all 3 attempts")
    # and the next run is correct
    from grader.backends.docker.backend import DockerBackend

    r = DockerBackend.from_env().run(build_plan(load_policy(NAIVE)))
    assert r.outcome("read-ssh-key").outcome == "succeeded"


LABEL_PID_KEY = "org.sandbox-lab.pid"


def test_cli_probe_json_with_docker(tmp_path: Path) -> None:
    f = tmp_path / "p.json"
    f.write_text(json.dumps(NAIVE))
    out = subprocess.run([sys.executable, "-m", "grader", "probe", str(f), "--backend", "docker", "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["backend"] == "docker"
    assert {"id", "kind", "outcome", "explanation", "evidence"} <= set(data["probes"][0])


def test_close_removes_the_shared_internet_and_warm_proxies(docker_client: Any) -> None:
    from grader.backends.docker.backend import DockerBackend
    from grader.backends.docker.images import find_images
    from grader.backends.docker.engine import DockerEngine

    images = find_images(DockerEngine(docker_client))
    assert images is not None
    # an internet of the backend's own: one shared between processes outlives it (test_shared_internet)
    backend = DockerBackend(DockerEngine(docker_client), images, shared_idle=0)
    r = backend.run(build_plan(load_policy({"network": {"allowedDomains": ["registry.npmjs.org"]}})))
    assert r.outcome("job-fetch-npm").outcome == "succeeded"
    backend.drain()
    standing = backend.standing()
    shared = backend.sharing.internet()
    assert {shared.container.name, shared.network.name} <= standing
    assert any(n.startswith("sl-proxy-") for n in standing), "the pool keeps a proxy warm"
    backend.close()
    names = {c["Names"][0].lstrip("/") for c in docker_client.api.containers(all=True)}
    names |= {n["Name"] for n in docker_client.api.networks()}
    assert not standing & names, standing & names
    assert backend.standing() == set()


# --- names the world does not know, and host identity ------------------------------------------

PIP = ["pypi.org", "files.pythonhosted.org"]


@pytest.mark.parametrize("extra", ["webhook.site", "x.attacker.example"])
def test_an_allowed_name_the_world_does_not_know_gets_the_ssh_key(docker_backend: Any, extra: str, no_leftovers: None) -> None:
    """It lands at the simulated internet's attacker server, and is judged as the open channel it is."""
    r = docker_backend.run(build_plan(load_policy({"network": {"allowedDomains": [*PIP, extra]}})))
    exfil = r.outcome("exfil-secret")
    assert exfil.outcome == "succeeded", exfil
    assert exfil.evidence[0].startswith(f"{extra} logged POST /upload/"), exfil.evidence
    assert "with the canary of /home/user/.ssh/id_rsa in its body" in exfil.evidence[0], exfil.evidence
    upload = r.outcome("exfil-via-allowed-domain")
    assert upload.outcome == "succeeded" and any(e.startswith(f"{extra} stored POST") for e in upload.evidence), upload
    assert r.outcome("job-fetch-pypi").outcome == "succeeded"


def test_a_name_smuggled_into_an_allowed_hosts_tunnel_delivers_nothing(docker_backend: Any, no_leftovers: None) -> None:
    """CONNECT pypi.org, then SNI and Host of upload.pypi.org or attacker.example: pypi.org's server refuses them."""
    r = docker_backend.run(build_plan(load_policy({"network": {"allowedDomains": PIP}})))
    front = r.outcome("net-domain-fronting")
    assert front.outcome == "blocked", front
    (evidence,) = front.evidence
    assert evidence.startswith("the proxy opened tunnels to files.pythonhosted.org, pypi.org;"), evidence
    refused = int(evidence.split("refused ", 1)[1].split(" ", 1)[0])
    assert refused > 0, evidence  # the servers saw the requests, and refused them
    assert r.outcome("exfil-secret").outcome == "blocked" and r.outcome("net-attacker-domain").outcome == "blocked"


def test_a_tunnel_to_a_name_the_attacker_owns_reaches_the_attackers_other_names(docker_backend: Any, no_leftovers: None) -> None:
    r = docker_backend.run(build_plan(load_policy({"network": {"allowedDomains": [*PIP, "webhook.site"]}})))
    front = r.outcome("net-domain-fronting")
    assert front.outcome == "succeeded", front
    assert any("attacker.example received POST /front/" in e and "opened to webhook.site" in e for e in front.evidence), front.evidence
    assert r.outcome("net-attacker-domain").outcome == "blocked"  # attacker.example itself stays refused by the proxy


def test_a_recorder_on_this_machine_is_poked_straight_to_its_process(docker_client: Any, docker_backend: Any) -> None:
    """``liveness.poke`` signals a local engine's container process itself (its pid, held by a pidfd, checked by
    its cgroup), not through the engine. The engine's own kill is made to fail here, so only a direct signal can
    reach the process; and ``signal_directly`` says True."""
    from grader.backends.docker.engine import ContainerRef, DockerEngine, Refused
    from grader.backends.docker.liveness import poke, signal_directly

    handler = ("import signal, sys, time\n"
               "signal.signal(signal.SIGUSR1, lambda *_: print('poked', flush=True))\n"
               "print('up', flush=True)\n"
               "time.sleep(60)\n")
    c = docker_client.containers.run(docker_backend.images.services, ["python3", "-c", handler], detach=True,
                                     network_mode="none", labels={"org.sandbox-lab.test": "poke"})
    try:
        deadline = time.monotonic() + 20
        while b"up" not in c.logs() and time.monotonic() < deadline:
            time.sleep(0.05)

        class NoKill(DockerEngine):
            def kill(self, c: ContainerRef, signal: Any = None) -> None:
                raise Refused("the engine's kill is not used for a local recorder")

        engine = NoKill(docker_client)
        ref = ContainerRef(c.id, c.name)
        poke(engine, ref)
        while c.logs().count(b"poked") < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.logs().count(b"poked") == 1, c.logs()
        assert signal_directly(engine, ref)
        while c.logs().count(b"poked") < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.logs().count(b"poked") == 2, c.logs()
    finally:
        c.remove(force=True)
