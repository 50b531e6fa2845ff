"""What one run made, as a value: added once, listed for a hub's keeper, removed containers first, failures kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import docker

from grader.backends.docker.engine import ContainerRef, DockerEngine, NetworkRef
from grader.backends.docker.resources import Resources, gone
from grader.backends.files import host_files


def _Thing(ident: str, log: list[str], fails: Exception | None = None) -> Any:
    """A container's or network's ref; how its removal goes is the fake engine's (``_Api``)."""
    _FAILS[ident] = fails
    return NetworkRef(ident, ident) if ident.startswith("n") else ContainerRef(ident, ident)


_FAILS: dict[str, Exception | None] = {}


class _Api:
    """The SDK's low-level client as the adapter reaches it to remove a container: fails as told, else logs it."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def remove_container(self, ident: str, **_: Any) -> None:
        if _FAILS.get(ident) is not None:
            raise _FAILS[ident]  # type: ignore[misc]
        self.log.append(ident)


class _Client:
    def __init__(self, log: list[str]) -> None:
        self.api = _Api(log)


class _Leftovers:
    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.engine = DockerEngine(_Client(log))  # the adapter, mapping the SDK's errors

    def remove(self, thing: Any) -> None:
        self.log.append(thing.id)


def test_a_container_is_added_once_and_everything_is_listed_in_order(tmp_path: Path) -> None:
    log: list[str] = []
    made = Resources()
    c = _Thing("c1", log)
    assert made.container(c) is c and made.container(c) is c  # a run copy placed twice holds one container
    made.container(_Thing("c2", log))
    made.network(_Thing("n1", log))
    made.directory(host_files(tmp_path / "run"))
    assert made.listing() == {"containers": ["c1", "c2"], "networks": ["n1"], "dirs": [str(tmp_path / "run")]}


def test_removal_takes_containers_then_networks_then_directories(tmp_path: Path) -> None:
    log: list[str] = []
    (tmp_path / "run").mkdir()
    made = Resources()
    made.container(_Thing("c1", log))
    made.network(_Thing("n1", log))
    made.directory(host_files(tmp_path / "run"))
    left = _Leftovers(log)
    assert made.remove_containers(left)  # type: ignore[arg-type]
    made.remove_rest(left)  # type: ignore[arg-type]
    assert log == ["c1", "n1"] and not (tmp_path / "run").exists()


def test_a_container_already_gone_is_gone_and_a_failed_removal_is_kept() -> None:
    log: list[str] = []
    left = _Leftovers(log)
    missing = _Thing("c1", log, docker.errors.NotFound("No such container: c1"))
    assert gone(left, missing)  # type: ignore[arg-type]
    away = _Thing("c2", log, ConnectionError("engine away"))
    assert not gone(left, away)  # type: ignore[arg-type]
    assert log == ["c2"]  # handed to the leftovers, to be retried
