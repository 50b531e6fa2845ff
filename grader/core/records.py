"""The small frozen records a run is told in: one probe's outcome, a reachable host, the scope, a sink hit.

The vocabulary below everything: ``wording``, ``scope``, ``evidence`` and the
probes speak it before any run exists. Outcomes use the learner's words:
``blocked``, ``succeeded``, or ``error`` when the evidence could not be
collected (never guessed as ``blocked``). ``outcomes`` re-exports every name.

Imports nothing of the package.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Outcome", "ProbeKind", "ProbeOutcome", "Reach", "Scope", "SinkHit"]

Outcome = Literal["blocked", "succeeded", "error"]
ProbeKind = Literal["attack", "job"]  # an attack should be blocked; a job is legitimate work that should succeed


@dataclass(frozen=True)
class ProbeOutcome:
    """The verdict on one probe, why, and (for real runs) the evidence it rests on."""

    id: str
    kind: ProbeKind
    outcome: Outcome
    explanation: str
    evidence: tuple[str, ...] = ()

    def to_json(self, *, with_evidence: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "kind": self.kind, "outcome": self.outcome, "explanation": self.explanation}
        if with_evidence:
            out["evidence"] = list(self.evidence)
        return out


@dataclass(frozen=True)
class Reach:
    """A host the sandbox can talk to, and whether it accepts uploads (an open channel out)."""

    host: str
    uploads: bool

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "uploads": self.uploads}


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
        return {
            "readable": list(self.readable),
            "writable": list(self.writable),
            "reachable": [r.to_json() for r in self.reachable],
        }


@dataclass(frozen=True)
class SinkHit:
    """A secret that arrived where the attacker can read it: which host, by what channel, and the log line that proves it."""

    host: str
    how: str  # "HTTP POST", "DNS", "raw TCP (port 4444)"
    evidence: str

    def to_json(self) -> dict[str, str]:
        return {"host": self.host, "how": self.how, "evidence": self.evidence}
