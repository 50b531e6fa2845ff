"""What a sandbox grants, found once where its ``RunResult`` is made: access, readable secrets, channels, exfiltration paths.

A run is judged against one policy and one world. Every view and every grade
that needs more than the probe outcomes (the board's exfiltration picture,
``grade``'s rule-by-rule feedback and over-grants) reads it from here, so none
of them parses the policy back or loads the world again: the plan's world is
the one the findings were made from.

Over-grants are not here: they depend on a task's needs, which a run does not
know. ``needs.overgrants`` takes the run's scope and ``Findings.access``.

Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from grader.core.access import Access
from grader.core.channels import Channel, ExfilPath, channels, exfil_paths
from grader.core.policy import Policy
from grader.core.world import World

__all__ = ["Findings", "find"]


@dataclass(frozen=True)
class Findings:
    """One sandbox's grants, computed once: which secrets it can read, which channels lead out, and their pairs.

    ``access`` answers any further path or host question (the rule that
    decides, in the policy's terms) against the run's own world.
    """

    access: Access
    readable: tuple[str, ...]  # world paths of the secrets (``World.loot``) the sandbox can read
    channels: tuple[Channel, ...]  # every way out it leaves open
    paths: tuple[ExfilPath, ...]  # every readable secret over every channel: what the board draws

    @property
    def sandbox(self) -> Literal["policy", "baseline"]:
        return self.access.kind

    @property
    def policy(self) -> Optional[Policy]:
        """The parsed policy (None for the plain container)."""
        return self.access.policy

    @property
    def world(self) -> World:
        return self.access.world


def find(access: Access) -> Findings:
    """The findings of the sandbox ``access`` describes."""
    readable = tuple(s.path for s in access.world.loot if access.read(s.path).allowed)
    return Findings(access, readable, channels(access), exfil_paths(access))
