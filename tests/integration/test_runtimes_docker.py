"""The sandbox's runtime against a real engine: an unregistered one fails closed before anything is made; runsc, where registered, is used.

The others need gVisor registered with the engine
(``sudo scripts/ensure-docker --runtime runsc``, which ``make test`` runs as
root on Debian); where it is not, they skip with that reason, except in CI,
where they fail, as every Docker test does without an engine.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest
from docker.models.containers import ContainerCollection

from grader import load_policy
from grader.backends.docker.backend import LABEL_ROLE, DockerBackend
from grader.backends.docker.images import BASE_TAG, ensure_images
from grader.backends.docker.runtimes import RuntimeUnavailable
from grader.backends.docker.engine import DockerEngine
from grader.core.plan import build_plan

from faultkit import PROXIED, assert_as_predicted
from private_engine import PrivateEngine, engine_problem

pytestmark = [pytest.mark.docker]


def test_a_runtime_the_engine_lacks_fails_closed_before_anything_is_made(docker_client: Any) -> None:
    images = ensure_images(DockerEngine(docker_client), lambda s: None)
    registered = set(docker_client.info().get("Runtimes") or {})
    assert "sl-no-such-runtime" not in registered
    with pytest.raises(RuntimeUnavailable) as info:
        DockerBackend(DockerEngine(docker_client), images, shared_idle=0, runtime="sl-no-such-runtime")
    assert "no runtime of that name" in str(info.value) and "runc" in str(info.value)


def _need_runsc(docker_client: Any) -> None:
    """Skip where gVisor is not registered, except in CI: `make test` registers it there (as root on Debian),
    and a gVisor test that skipped in CI would hide a missing install step behind a green run."""
    if "runsc" in (docker_client.info().get("Runtimes") or {}):
        return
    why = "gVisor's runsc is not registered with this engine: sudo scripts/ensure-docker --runtime runsc"
    if os.environ.get("CI"):
        pytest.fail(why + " (`make test` does this as root on Debian)")
    pytest.skip(why)


def test_a_run_under_runsc_has_every_sandbox_under_runsc_and_the_predicted_verdicts(
    docker_client: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    _need_runsc(docker_client)
    backend = DockerBackend(DockerEngine(docker_client), ensure_images(DockerEngine(docker_client), lambda s: None), shared_idle=0, runtime="runsc")
    seen: dict[str, str] = {}
    real_create = ContainerCollection.create

    def create(self: Any, image: str, command: Any = None, **kwargs: Any) -> Any:
        c = real_create(self, image, command, **kwargs)
        seen[kwargs.get("labels", {}).get(LABEL_ROLE, "?") + ":" + c.id] = docker_client.api.inspect_container(c.id)[
            "HostConfig"]["Runtime"]
        return c

    # every container this process creates (``client.containers`` is a new collection on each access)
    monkeypatch.setattr(ContainerCollection, "create", create)
    try:
        result = backend.run(build_plan(load_policy(PROXIED)))
    finally:
        backend.close()
    assert_as_predicted(result, PROXIED)
    sandboxes = {k: v for k, v in seen.items() if k.startswith("sandbox:")}
    assert sandboxes and set(sandboxes.values()) == {"runsc"}, seen
    # the services are the project's own code: they stay on the engine's default
    assert {v for k, v in seen.items() if not k.startswith("sandbox:")} <= {"runc"}, seen


def test_the_service_runs_a_tenants_code_under_the_code_runtime_and_a_policys_probes_under_the_default(
    docker_client: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``hosted.kinds``: an attack (the tenant's own code) under SANDBOX_LAB_CODE_RUNTIME; a probe (a policy,
    the project's code) under SANDBOX_LAB_RUNTIME, here unset: the engine's default. Same process, same env."""
    _need_runsc(docker_client)
    from pathlib import Path

    from grader.hosted.kinds import KINDS

    monkeypatch.setenv("SANDBOX_LAB_CODE_RUNTIME", "runsc")
    monkeypatch.delenv("SANDBOX_LAB_RUNTIME", raising=False)
    monkeypatch.delenv("SANDBOX_LAB_SERVICE_BACKEND", raising=False)
    monkeypatch.setenv("SANDBOX_LAB_SHARED_IDLE", "0")
    seen: list[tuple[str, str]] = []
    real_create = ContainerCollection.create

    def create(self: Any, image: str, command: Any = None, **kwargs: Any) -> Any:
        c = real_create(self, image, command, **kwargs)
        seen.append((kwargs.get("labels", {}).get(LABEL_ROLE, "?"),
                     docker_client.api.inspect_container(c.id)["HostConfig"]["Runtime"]))
        return c

    monkeypatch.setattr(ContainerCollection, "create", create)
    source = (Path(__file__).resolve().parents[2] / "solutions" / "attacks" / "plain-container.py").read_text()
    attacked = KINDS["attack"].run({"level": "plain-container", "source": source})
    assert attacked["captured"] is True, attacked
    under_attack = {runtime for role, runtime in seen if role == "sandbox"}
    seen.clear()
    probed = KINDS["probe"].run({"policy": PROXIED})
    under_probe = {runtime for role, runtime in seen if role == "sandbox"}
    assert under_attack == {"runsc"}, under_attack
    assert under_probe == {"runc"}, under_probe
    assert probed["backend"] == "docker" and not probed.get("error"), probed


# --- runsc's --network=host opens nothing ------------------------------------------------------
#
# Debian's runsc (20221219) runs on Linux 6.x only with --network=host (scripts/ensure-docker, docs/machine-changes.md):
# its sandboxes then use the host kernel's network stack instead of gVisor's netstack, still inside the
# container's own network namespace. So the same probes, under runc and under runsc, must end the same way,
# and nothing the engine's host listens on may be reached from the lab's internal network under either.

REPO = Path(__file__).resolve().parents[2]

HOST_LISTEN = r"""
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 0)); s.listen(16)
print(s.getsockname()[1], flush=True)
while True:
    c, a = s.accept(); c.settimeout(2)
    try: print("got", a[0], c.recv(200).decode("utf-8", "replace").strip(), flush=True)
    except OSError: pass
    c.close()
"""
LOCAL_CHECK = "import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=2).sendall(b'local check\\n')"


@dataclass
class _RunscEngine:
    """An engine with runsc registered as ``make test`` registers it, and a way into the network namespace it runs in
    (its host, as a sandbox sees it: the machine's own, or a private engine's)."""

    client: Any
    netns: list[str]  # the command prefix that runs a program in the engine's network namespace
    runsc_args: list[str]
    where: str


def _registered_args() -> list[str]:
    out = subprocess.run([str(REPO / "scripts" / "ensure-docker"), "--runsc-args"], capture_output=True, text=True, check=True)
    return [a.removeprefix("--runtime-arg=") for a in out.stdout.split()]


@pytest.fixture()
def runsc_engine(docker_client: Any, docker_backend: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[_RunscEngine]:
    """The suite's engine where runsc is registered there; else, where runsc is on PATH, a private engine
    (``private_engine.py``) with runsc registered with the arguments ensure-docker would give it, so this runs
    without changing the machine's engine. Skips otherwise; fails under CI, as ``_need_runsc``."""
    registered = (docker_client.info().get("Runtimes") or {}).get("runsc")
    if registered is not None:
        yield _RunscEngine(docker_client, [], list(registered.get("runtimeArgs") or []), "the machine's engine")
        return
    runsc = shutil.which("runsc")
    problem = engine_problem() if runsc else "gVisor's runsc is neither registered with this engine nor on PATH"
    if problem:
        _need_runsc(docker_client)  # skips, or fails under CI, with the fix
        pytest.skip(problem)
    args = _registered_args()
    engine = PrivateEngine.start(runtimes={"runsc": {"path": runsc, **({"runtimeArgs": args} if args else {})}})
    try:
        images = docker_backend.images
        engine.load_images(docker_client, [BASE_TAG, images.sandbox, images.services])
        monkeypatch.setenv("DOCKER_HOST", engine.host)
        client = engine.client()
        try:
            yield _RunscEngine(client, ["nsenter", f"--net={engine.root / 'netns'}", "--"], args, "a private engine")
        finally:
            client.close()
    finally:
        engine.stop()
    assert engine.leftovers() == [], engine.leftovers()


@contextmanager
def _host_listener(netns: list[str]) -> Iterator[tuple[int, list[str]]]:
    """A TCP listener on every address of the engine's host (its network namespace): its port, and what reached it.

    It has heard "local check" from the host itself before the body runs: its silence towards the sandboxes means something."""
    proc = subprocess.Popen([*netns, sys.executable, "-c", HOST_LISTEN], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        port = int(proc.stdout.readline())
        subprocess.run([*netns, sys.executable, "-c", LOCAL_CHECK, str(port)], check=True, timeout=10)
        heard: list[str] = []
        yield port, heard
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    heard += [line.split(" ", 2)[2] for line in out.splitlines() if line.startswith("got ")]


def _host_addresses(netns: list[str]) -> list[str]:
    out = subprocess.run([*netns, "ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True).stdout
    return [line.split()[3].split("/")[0] for line in out.splitlines() if line.split()[1] != "lo"]


def _kind(result: str) -> str:
    """"connected", or the exception's name: what a probe's outcome depends on."""
    return result if result == "connected" else result.split(":")[0]


def test_runsc_with_host_network_opens_nothing_runc_keeps_closed(
    runsc_engine: _RunscEngine, docker_backend: Any, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from test_hostile_code import LISTEN, REACH, _hardening, _Hostile, _wait_listening

    client = runsc_engine.client
    images = ensure_images(DockerEngine(client), lambda s: None)
    # 1. the same policy's probes under each runtime: the same verdicts, each the static prediction
    verdicts = {}
    for runtime in (None, "runsc"):
        backend = DockerBackend(DockerEngine(client), images, shared_idle=0, runtime=runtime)
        try:
            result = backend.run(build_plan(load_policy(PROXIED)))
        finally:
            backend.close()
        assert_as_predicted(result, PROXIED)
        verdicts[runtime or "runc"] = {o.id: o.outcome for o in result.probes}
    assert verdicts["runsc"] == verdicts["runc"]

    # 2. from the lab's internal network: its own sink only; never another run, the metadata address,
    #    the host's addresses (where a listener waits on every one) or anything beyond the network
    hostile = _Hostile(client, images.sandbox)
    reached: dict[str, dict[str, str]] = {}
    try:
        own, other = hostile.network("sbx"), hostile.network("other")
        own_sink, own_ip = hostile.service(images.services, ["python3", "-c", LISTEN], own, "internet")
        other_sink, other_ip = hostile.service(images.services, ["python3", "-c", LISTEN], other, "other-internet")
        _wait_listening(own_sink)
        _wait_listening(other_sink)
        with _host_listener(runsc_engine.netns) as (port, heard):
            targets = [("own-run", own_ip, 8080), ("other-run", other_ip, 8080),
                       ("metadata", "169.254.169.254", 80), ("beyond", "192.0.2.1", 53), ("internet", "1.1.1.1", 443)]
            targets += [(f"host-{a}", a, port) for a in _host_addresses(runsc_engine.netns)]
            targets += [(f"host-{a}-ssh", a, 22) for a in _host_addresses(runsc_engine.netns)]
            for runtime in ("runc", "runsc"):
                if runtime == "runsc":
                    monkeypatch.setenv("SANDBOX_LAB_RUNTIME", "runsc")
                else:
                    monkeypatch.delenv("SANDBOX_LAB_RUNTIME", raising=False)
                ran = hostile.run(["python3", "-c", REACH, f"token-{runtime}", json.dumps(targets)], _hardening(60.0),
                                  network=own, name=f"sandbox-{runtime}")
                reached[runtime] = ran.last_json()
        own_logs, other_logs = own_sink.logs(), other_sink.logs()
        ran_under = {c.name.rsplit("-", 1)[1]: client.api.inspect_container(c.id)["HostConfig"]["Runtime"]
                     for c in hostile.made if getattr(c, "name", "").rsplit("-", 2)[-2:-1] == ["sandbox"]}
    finally:
        hostile.remove_all()
    print(f"runsc {runsc_engine.runsc_args} on {runsc_engine.where}:", json.dumps(reached, indent=1))
    assert ran_under == {"runc": "runc", "runsc": "runsc"}, ran_under  # each sandbox ran where it claims
    for runtime, res in reached.items():
        # positive control: the sandbox's own network works, and the sink heard it
        assert res["own-run"] == "connected" and f"token-{runtime}".encode() in own_logs, (runtime, res)
        opened = [name for name, *_ in targets[1:] if res[name] == "connected"]
        assert opened == [], (runtime, opened, res)
    assert {k: _kind(v) for k, v in reached["runsc"].items()} == {k: _kind(v) for k, v in reached["runc"].items()}, reached
    assert b"token" not in other_logs
    assert heard == ["local check"], heard  # nothing of either sandbox's reached the host
