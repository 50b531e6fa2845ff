"""The sandbox's runtime against a real engine: an unregistered one fails closed before anything is made; runsc, where registered, is used.

The others need gVisor registered with the engine
(``sudo scripts/ensure-docker --runtime runsc``, which ``make test`` runs as
root on Debian); where it is not, they skip with that reason, except in CI,
where they fail, as every Docker test does without an engine.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from docker.models.containers import ContainerCollection

from grader import load_policy
from grader.backends.docker.backend import LABEL_ROLE, DockerBackend
from grader.backends.docker.images import ensure_images
from grader.backends.docker.runtimes import RuntimeUnavailable
from grader.core.plan import build_plan

from faultkit import PROXIED, assert_as_predicted

pytestmark = [pytest.mark.docker]


def test_a_runtime_the_engine_lacks_fails_closed_before_anything_is_made(docker_client: Any) -> None:
    images = ensure_images(docker_client, lambda s: None)
    registered = set(docker_client.info().get("Runtimes") or {})
    assert "sl-no-such-runtime" not in registered
    with pytest.raises(RuntimeUnavailable) as info:
        DockerBackend(docker_client, images, shared_idle=0, runtime="sl-no-such-runtime")
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
    backend = DockerBackend(docker_client, ensure_images(docker_client, lambda s: None), shared_idle=0, runtime="runsc")
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
