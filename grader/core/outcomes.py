"""What happened when a sandbox met the probes: ``ProbeOutcome`` and ``RunResult``, with evidence.

Outcomes use the learner's words: ``blocked``, ``succeeded``, or ``error`` when
the evidence could not be collected (never guessed as ``blocked``).

Imports nothing downstream (no grade, no report).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

__all__ = ["Outcome", "ProbeKind", "ProbeOutcome", "Reach", "RunResult", "Scope", "SinkHit"]

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


@dataclass(frozen=True)
class RunResult:
    """All probe outcomes of one run of one sandbox."""

    backend: str  # "static" or "docker"
    sandbox: Literal["policy", "baseline"]
    policy: Optional[dict[str, Any]]  # the normalized policy; None for the baseline
    probes: tuple[ProbeOutcome, ...]
    notes: tuple[str, ...] = ()  # e.g. "predicted, not run: no Docker engine answers"
    seconds: float = 0.0
    run_id: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    scope: Optional[Scope] = None  # None when the run could not measure it
    # seconds per phase of a real run (timings.PHASES: world copy, network, start, probes, evidence);
    # for benchmarks, never in the JSON: the same policy's report stays the same from run to run
    timings: dict[str, float] = field(default_factory=dict, compare=False)

    def outcome(self, probe_id: str) -> ProbeOutcome:
        for p in self.probes:
            if p.id == probe_id:
                return p
        raise KeyError(probe_id)

    def to_json(self) -> dict[str, Any]:
        with_evidence = self.backend != "static"
        out: dict[str, Any] = {
            "backend": self.backend,
            "sandbox": self.sandbox,
            "policy": self.policy,
            "probes": [p.to_json(with_evidence=with_evidence) for p in self.probes],
        }
        if self.scope is not None:
            out["scope"] = self.scope.to_json()
        if self.notes:
            out["notes"] = list(self.notes)
        if with_evidence:
            out["run_id"] = self.run_id
            out["seconds"] = round(self.seconds, 3)
        return out
