"""What one run made, as a value: added once, listed for a hub's keeper, removed containers first, failures kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import docker

from grader.backends.docker.resources import Resources, gone
from grader.backends.files import host_files


class _Thing:
    def __init__(self, ident: str, log: list[str], fails: Exception | None = None) -> None:
        self.id = ident
        self.log = log
        self.fails = fails

    def remove(self, **_: Any) -> None:
        if self.fails is not None:
            raise self.fails
        self.log.append(self.id)


class _Leftovers:
    def __init__(self, log: list[str]) -> None:
        self.log = log

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
