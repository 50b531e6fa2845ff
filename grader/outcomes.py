"""What happened when a sandbox met the probes: ``ProbeOutcome`` and ``RunResult``, with evidence.

Outcomes use the learner's words: ``blocked``, ``succeeded``, or ``error`` when
the evidence could not be collected (never guessed as ``blocked``).

Imports nothing downstream (no grade, no report).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

__all__ = ["Outcome", "ProbeKind", "ProbeOutcome", "RunResult"]

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
        if self.notes:
            out["notes"] = list(self.notes)
        if with_evidence:
            out["run_id"] = self.run_id
            out["seconds"] = round(self.seconds, 3)
        return out
