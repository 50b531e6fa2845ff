"""The small frozen records a run is told in: one probe's outcome, a reachable host, the scope, a sink hit,
the attacker's raw listeners.

The vocabulary below everything: ``wording``, ``scope``, ``evidence`` and the
probes speak it before any run exists. Outcomes use the learner's words:
``blocked``, ``succeeded``, or ``error`` when the evidence could not be
collected (never guessed as ``blocked``). ``outcomes`` re-exports every name.

Imports nothing of the package.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Literal, Optional

from grader.protocol.codec import encode

__all__ = ["Outcome", "ProbeKind", "ProbeOutcome", "RawPorts", "Reach", "RunNoteCode", "Scope", "SinkChannel", "SinkHit"]

Outcome = Literal["blocked", "succeeded", "error"]
ProbeKind = Literal["attack", "job"]  # an attack should be blocked; a job is legitimate work that should succeed
# Why a run carries a note, where code decides by it (``RunResult.codes``; never the note's prose, which is for people
# and may be reworded): a prediction stands in for a run because no Docker engine answers ("no-engine"), or because
# the run service could not run it ("run-service").
RunNoteCode = Literal["no-engine", "run-service"]


@dataclass(frozen=True)
class ProbeOutcome:
    """The verdict on one probe, why, and (for real runs) the evidence it rests on."""

    id: str
    kind: ProbeKind
    outcome: Outcome
    explanation: str
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reach:
    """A host the sandbox can talk to, and whether it accepts uploads (an open channel out)."""

    host: str
    uploads: bool

    def to_json(self) -> dict[str, Any]:
        return encode(self)  # its one JSON form, the codec's


@dataclass(frozen=True)
class Scope:
    """Everything a sandbox grants, path by path and host by host: measured by a real run's scope scan, or predicted.

    Not a sample: every world file (``readable``: its content can be read;
    ``writable``: it can be changed), every world directory (``writable``: a new
    file can be created in it) and every host, plus a fresh name under every
    allowed wildcard (``reachable``). Sorted, so two scopes compare with ``==``.
    """

    readable: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    reachable: tuple[Reach, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return encode(self)  # its one JSON form, the codec's (as in ``RunResult.to_json``)


# By what kind of channel a secret arrived, as code reads it (``SinkHit.how`` says it to people)
SinkChannel = Literal["http", "tcp", "dns"]


@dataclass(frozen=True)
class SinkHit:
    """A secret that arrived where the attacker can read it: which host, by what channel, and the log line that proves it."""

    host: str
    how: str  # for people: "HTTP POST", "DNS", "raw TCP (port 4444)"
    evidence: str
    channel: SinkChannel  # for code: what ``how`` says, as a code (``ladder.channel_of``)

    def to_json(self) -> dict[str, str]:
        return {"host": self.host, "how": self.how, "evidence": self.evidence}


@dataclass(frozen=True)
class RawPorts:
    """The attacker's raw listeners in one run: each port the world gives its server beyond DNS and the web
    (``World.raw_ports``), and the port this run listens on for it.

    Docker's simulated internet listens on the world's own ports; the srt backend's, on the machine's loopback,
    on free ports it picks. Probes dial ``at(world port)``; judges read what arrived on ``listening`` and say
    it in the world's port (``world_port``). A port the world does not give the attacker is no raw channel:
    asking for one is an error, never a quiet default.
    """

    pairs: tuple[tuple[int, int], ...]  # (the world's port, where this run listens for it)

    @classmethod
    def same(cls, ports: Iterable[int]) -> "RawPorts":
        """Each world port listened on as itself (Docker, and tests)."""
        return cls(tuple((p, p) for p in ports))

    def at(self, world_port: int) -> int:
        """Where this run listens for the attacker's ``world_port``."""
        for world, here in self.pairs:
            if world == world_port:
                return here
        served = ", ".join(str(w) for w, _ in self.pairs) or "none"
        raise LookupError(f"the attacker serves no raw port {world_port} in this world (its raw ports: {served})")

    @property
    def listening(self) -> frozenset[int]:
        return frozenset(here for _, here in self.pairs)

    def world_port(self, listening: int) -> Optional[int]:
        """The world's port a listener of this run stands for; None for a listener that is not the attacker's."""
        return next((world for world, here in self.pairs if here == listening), None)
