"""The simulated machine and internet that every policy is judged against, loaded from ``world.json``.

The world is data a person can read (``world.json`` beside this module), not
code: files with roles (secret, persistence, settings, work, benign), output
paths a job creates, and the hosts of the simulated internet with whether each
accepts uploads from anyone holding an account.

This module imports nothing but the standard library and ``paths``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Literal, Optional

from .paths import covers

__all__ = ["Host", "World", "WorldDir", "WorldFile", "load_world"]

Role = Literal["secret", "persistence", "settings", "work", "benign", "output"]


@dataclass(frozen=True)
class WorldFile:
    """A file of the simulated machine; ``{canary}`` in its content is replaced per run."""

    path: str
    role: Role
    label: str
    content: str
    mode: int = 0o644
    runs_later: Optional[str] = None


@dataclass(frozen=True)
class WorldDir:
    """A directory of the simulated machine that exists even when empty, or a file a job creates."""

    path: str
    role: Role
    label: str


@dataclass(frozen=True)
class Host:
    """A host of the simulated internet."""

    name: str
    uploads: bool  # anyone with an account can store data there (an attacker brings their own)
    how: str
    attacker: bool = False


@dataclass(frozen=True)
class World:
    """The whole simulated world: machine and internet."""

    user: str
    uid: int
    home: str
    roots: tuple[str, ...]
    files: tuple[WorldFile, ...]
    dirs: tuple[WorldDir, ...]
    outputs: tuple[WorldDir, ...]
    hosts: tuple[Host, ...]

    @property
    def secrets(self) -> tuple[WorldFile, ...]:
        return tuple(f for f in self.files if f.role == "secret")

    def file(self, path: str) -> WorldFile:
        for f in self.files:
            if f.path == path:
                return f
        raise KeyError(path)

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    @property
    def attacker(self) -> Host:
        return next(h for h in self.hosts if h.attacker)

    @property
    def host_names(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.hosts)

    def root_of(self, path: str) -> Optional[str]:
        """The world root a path lies in, or None if the path is outside the simulated machine."""
        for r in self.roots:
            if covers(r, path):
                return r
        return None

    def directories(self) -> tuple[str, ...]:
        """Every directory of the world (roots, parents of files, declared dirs), sorted, shallow first."""
        found: set[str] = set(self.roots) | {d.path for d in self.dirs}
        for p in [f.path for f in self.files] + [d.path for d in self.dirs]:
            root = self.root_of(p)
            parent = p.rsplit("/", 1)[0]
            while root and parent and covers(root, parent):
                found.add(parent)
                parent = parent.rsplit("/", 1)[0]
        return tuple(sorted(found, key=lambda d: (d.count("/"), d)))


@lru_cache(maxsize=1)
def load_world() -> World:
    """The world of this version of Sandbox Lab (read once; it is immutable)."""
    raw = json.loads(resources.files(__package__).joinpath("world.json").read_text("utf-8"))
    return World(
        user=raw["user"]["name"],
        uid=int(raw["user"]["uid"]),
        home=raw["user"]["home"],
        roots=tuple(raw["roots"]),
        files=tuple(
            WorldFile(
                path=f["path"], role=f["role"], label=f["label"], content=f["content"],
                mode=int(f.get("mode", "0644"), 8), runs_later=f.get("runs_later"),
            )
            for f in raw["files"]
        ),
        dirs=tuple(WorldDir(d["path"], d["role"], d["label"]) for d in raw["dirs"]),
        outputs=tuple(WorldDir(o["path"], "output", o["label"]) for o in raw["outputs"]),
        hosts=tuple(
            Host(h["name"], bool(h["uploads"]), h["how"], bool(h.get("attacker", False))) for h in raw["hosts"]
        ),
    )
