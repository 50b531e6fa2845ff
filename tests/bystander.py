"""A bystander on the Docker engine: a container, network and volume the test run did not make, which it must leave alone.

The engine a suite runs on is usually the user's own, with their database or
another project's containers on it. So before the first test runs, the
session (``conftest.py``) starts a small long-running container from an image
already there, on a network and with a volume of its own, labelled as the
bystander and carrying none of Sandbox Lab's labels: no cleanup, sweep or
prune of ours may count it as its own. When the last test has ended (on every
worker: the run's controller checks it, ``pytest_sessionfinish``), the run
checks that all three are still there and the container still running, then
removes them. A test that stops the engine, prunes it or sweeps too wide fails
the run there, with what happened in the summary.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Optional

import pytest

__all__ = ["ENV", "KEY", "LABEL", "Bystander", "check", "remove", "start"]

ENV = "TEST_BYSTANDER"  # the run's bystander container, for every process of the run (pytest-xdist's workers)

LABEL = "org.example.bystander"  # not org.sandbox-lab.*: nothing of ours may own it
# sleep(1) in every Debian-based image; the lab's base image is there wherever `make images` ran
IMAGE_PREFERENCE = ("sandbox-lab/base:bookworm", "debian:bookworm-slim", "debian:bookworm", "busybox:latest")


@dataclass(frozen=True)
class Bystander:
    """What was started, or why nothing was (``why`` non-empty, names empty)."""

    container: str = ""
    network: str = ""
    volume: str = ""
    why: str = ""


KEY = pytest.StashKey[Bystander]()


def _image(client: Any) -> Optional[str]:
    tags = {t for image in client.images.list() for t in image.tags}
    return next((t for t in IMAGE_PREFERENCE if t in tags), None)


def start(client: Any) -> Bystander:
    """A running container on a network and with a volume of its own, none of which the run made."""
    image = _image(client)
    if image is None:
        return Bystander(why=f"no image to start a bystander from on this engine (one of {', '.join(IMAGE_PREFERENCE)}): "
                             "run `make images`")
    name = "bystander-" + secrets.token_hex(4)
    labels = {LABEL: "a container the test run did not create; it must outlive the run"}
    # internal: it needs no way out, and takes none of the engine's routes
    network = client.networks.create(name + "-net", driver="bridge", internal=True, labels=labels)
    volume = client.volumes.create(name + "-vol", labels=labels)
    try:
        client.containers.run(image, ["sleep", "infinity"], name=name, detach=True, labels=labels, network=network.name,
                              volumes={volume.name: {"bind": "/data", "mode": "rw"}}, mem_limit="32m", pids_limit=8,
                              cap_drop=["ALL"], read_only=True)
    except BaseException:
        remove(client, Bystander(name, network.name, volume.name))
        raise
    return Bystander(name, network.name, volume.name)


def check(client: Any, b: Bystander) -> list[str]:
    """What happened to the bystander during the run: one line per thing missing or stopped ([] when untouched)."""
    import docker.errors

    problems = []
    try:
        state = client.api.inspect_container(b.container)["State"]
        if not state.get("Running"):
            problems.append(f"container {b.container} is no longer running ({state.get('Status')}, "
                            f"finished {state.get('FinishedAt')}): the engine was stopped or restarted, or a test stopped it")
    except docker.errors.NotFound:
        problems.append(f"container {b.container} was removed: a cleanup or prune took what was not the run's")
    for kind, name, get in (("network", b.network, client.networks.get), ("volume", b.volume, client.volumes.get)):
        try:
            get(name)
        except docker.errors.NotFound:
            problems.append(f"{kind} {name} was removed: a cleanup or prune took what was not the run's")
    return problems


def remove(client: Any, b: Bystander) -> None:
    """The bystander gone, whatever is left of it."""
    import docker.errors

    for remover in (lambda: client.api.remove_container(b.container, force=True, v=True),
                    lambda: client.networks.get(b.network).remove(),
                    lambda: client.volumes.get(b.volume).remove(force=True)):
        try:
            remover()
        except docker.errors.NotFound:
            pass
