"""What runs leave behind and who may touch it, on a real engine (finding 6 of issue 22).

* a run's start sweeps what dead graders of this machine left (containers, networks, run
  directories), and keeps what live graders, other pid namespaces and older versions made;
* a grader that is not root (as the world's user, or as another user) runs with the world
  copy private to it, and judges exactly as root does.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

import pytest

from grader import load_policy
from grader.backends import runs
from grader.core.plan import build_plan
from owned import dead_pid, stamped_dir

pytestmark = pytest.mark.docker

FOREIGN = "another-boot/4:4026532999"  # a grader in another container or machine on the same engine


def test_a_run_start_sweeps_a_dead_graders_containers_networks_and_directories(
    docker_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every run's start sweeps, other test workers' too: one of them can remove a dead thing before this run's
    sweep reaches it. That proves nothing about this sweep, so the scenario is played again with new names (each
    time in a runs root of its own, so its first run sweeps); a sweep that leaves a dead thing, or sweeps a live,
    foreign or older one, fails at once."""
    monkeypatch.delenv(runs.SWEEP_ENV, raising=False)
    for attempt in range(3):
        root = tmp_path / f"runs-{attempt}"
        monkeypatch.setenv("SANDBOX_LAB_RUNS", str(root))
        taken = _sweep_scenario(docker_client, root, secrets.token_hex(3))
        if not taken:
            return
    pytest.fail(f"another process's sweep removed a dead thing first in all 3 attempts, last: {sorted(taken)}")


def _sweep_scenario(docker_client: Any, root: Path, tag: str) -> set[str]:
    """One run's start among a dead grader's, a live one's, a foreign one's and an older version's things; what of
    the dead grader's another sweep removed before this run's did (empty: this run's sweep removed all of it)."""
    from grader.backends.docker.backend import DockerBackend
    from grader.backends.docker.images import ensure_images
    from grader.backends.docker.simnet import LABEL, LABEL_NS, LABEL_PID, create_network
    from grader.backends.docker.engine import DockerEngine

    images = ensure_images(DockerEngine(docker_client), lambda s: None)
    here, dead = runs.namespace(), dead_pid()

    def labels(pid: int, ns: Optional[str]) -> dict[str, str]:
        return {LABEL: f"sl-hyg-{tag}", LABEL_PID: str(pid), **({LABEL_NS: ns} if ns is not None else {})}

    owners = {"dead": (dead, here), "live": (os.getpid(), here), "foreign": (dead, FOREIGN), "old": (dead, None)}
    containers: dict[str, Any] = {}
    networks: dict[str, Any] = {}
    try:
        for who, (pid, ns) in owners.items():
            c = docker_client.containers.create(images.services, ["true"], name=f"sl-hyg-{tag}-{who}", labels=labels(pid, ns), network_mode="none")
            c.start()  # it exits at once: what a killed grader's finished sandbox looks like
            containers[who] = c
        for who in ("dead", "live"):  # networks are scarce on a shared engine: two
            networks[who] = docker_client.networks.get(create_network(DockerEngine(docker_client), f"sl-hyg-{tag}-{who}", labels(*owners[who])).id)
        dirs = {who: stamped_dir(root, f"sl-hyg-{tag}-{who}", pid, ns) for who, (pid, ns) in owners.items()}
        backend = DockerBackend(DockerEngine(docker_client), images, shared_idle=0)
        try:
            result = backend.run(build_plan(load_policy({})))  # a run starts: nothing else is asked of it
        finally:
            backend.close()
        assert result.backend == "docker"
        record = runs.swept()
        removed = set(record.get("removed", []))

        def exists(kind: str, name: str) -> bool:
            found = docker_client.api.containers(all=True, filters={"name": name}) if kind == "c" else docker_client.api.networks(names=[name])
            return any((x.get("Names") or ["/" + x.get("Name", "")])[0].lstrip("/") == name for x in found)

        # gone, whoever removed them; a sweep that judged them wrongly leaves them here
        assert not exists("c", f"sl-hyg-{tag}-dead") and not exists("n", f"sl-hyg-{tag}-dead") and not dirs["dead"].exists()
        for who in ("live", "foreign", "old"):
            assert exists("c", f"sl-hyg-{tag}-{who}"), f"the {who} owner's container was swept"
            assert dirs[who].is_dir(), f"the {who} owner's directory was swept"
        assert exists("n", f"sl-hyg-{tag}-live")
        assert f"directory {dirs['dead']}" in removed, record  # under this run's own root: no other sweep reaches it
        return {f"container sl-hyg-{tag}-dead", f"network sl-hyg-{tag}-dead"} - removed
    finally:
        for c in containers.values():
            try:
                c.remove(force=True)
            except Exception:  # noqa: BLE001 - swept already
                pass
        for n in networks.values():
            try:
                n.remove()
            except Exception:  # noqa: BLE001 - swept already
                pass


_RUN_AS = r"""
import json, sys
from grader import load_policy
from grader.backends import runs
from grader.backends.docker import volumes
from grader.backends.docker.backend import DockerBackend
from grader.core.plan import build_plan
policy = json.loads(sys.argv[1])
sent = []
place = volumes.VolumeCopy.place
def counted(self):
    sent.append(self.dir.handed)
    return place(self)
volumes.VolumeCopy.place = counted
backend = DockerBackend.from_env(shared_idle=0)
try:
    result = backend.run(build_plan(load_policy(policy)))
finally:
    backend.close()
print(json.dumps({"outcomes": {p.id: p.outcome for p in result.probes}, "volume": sent}))
"""

# writes to the project, reads nothing secret: every file probe and the scope scan have something to find
POLICY = {"filesystem": {"allowWrite": ["/project", "/home/user/.cache"], "denyRead": ["/home/user/.ssh"]}}


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to start graders as other users (setpriv)")
@pytest.mark.parametrize("uid", [1000, 4001], ids=["as-the-worlds-user", "as-another-user"])
def test_a_grader_that_is_not_root_judges_as_root_does(docker_client: Any, docker_backend: Any, uid: int) -> None:
    """As the world's user, the run directory is bound as it is; as anyone else, the world goes to the engine in
    a volume owned by the world's user. Either way nothing is opened to other local users, and the verdicts are root's."""
    sock = Path("/var/run/docker.sock")
    if os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock") != "unix:///var/run/docker.sock" or not sock.exists():
        pytest.skip("needs the local engine's socket to hand to another user")
    expected = {p.id: p.outcome for p in docker_backend.run(build_plan(load_policy(POLICY))).probes}
    home = Path(tempfile.mkdtemp(prefix="sl-nonroot-", dir="/tmp"))
    try:
        home.chmod(0o755)
        os.chown(home, uid, uid)
        repo = Path(runs.__file__).resolve().parents[2]
        out = subprocess.run(
            ["setpriv", f"--reuid={uid}", f"--regid={uid}", f"--groups={sock.stat().st_gid}", sys.executable, "-c", _RUN_AS, json.dumps(POLICY)],
            capture_output=True, text=True, timeout=300, cwd="/",
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "PYTHONPATH": str(repo),
                 "SANDBOX_LAB_RUNS": str(home / "runs")},
        )
        assert out.returncode == 0, out.stderr[-3000:]
        got = json.loads(out.stdout.strip().splitlines()[-1])
        assert got["outcomes"] == expected
        assert "error" not in expected.values()
        # the world's user binds the run directory; anyone else sends a world it could not hand over
        # (placed once per container that mounts it: the sandbox, and the next session's replay if any)
        assert set(got["volume"]) == (set() if uid == 1000 else {False})
        left = sorted(str(p) for p in (home / "runs").rglob("*"))  # each file, to say whose it is when one stays
        assert left == [], [f"{p} ({Path(p).owner()})" for p in left]  # the run removed its directory, as root's does
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_the_listener_on_the_engines_host_listens_only_where_a_sandbox_reaches_it(docker_client: Any) -> None:
    """The remote engine's stand-in for the host listener bound every interface of the engine's host, too."""
    from grader.backends.docker.enginedisk import EngineDisk
    from grader.backends.docker.images import ensure_images
    from grader.backends.docker.simnet import Leftovers
    from grader.backends.docker.engine import DockerEngine

    images = ensure_images(DockerEngine(docker_client), lambda s: None)
    name = "sl-" + secrets.token_hex(5)
    listener = EngineDisk(DockerEngine(docker_client)).listener(images.services, name, Leftovers().labels(name))
    try:
        assert listener.container is not None
        first = json.loads(docker_client.api.logs(listener.container.id, stdout=True, stderr=False).decode().splitlines()[0])
        assert first["port"] == listener.port and "0.0.0.0" not in first["addresses"]
        # the engine's host is this machine here: the same places the grader's own listener uses
        assert first["addresses"] == list(runs.sandbox_addresses())
    finally:
        assert listener.container is not None
        docker_client.api.remove_container(listener.container.id, force=True, v=True)
