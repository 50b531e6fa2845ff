"""What happened when a sandbox met the probes: ``RunResult``, its probe outcomes, evidence and findings.

Outcomes use the learner's words: ``blocked``, ``succeeded``, or ``error`` when
the evidence could not be collected (never guessed as ``blocked``). A result
carries its ``Findings`` (what the sandbox grants, computed once where the
result is made: ``verdicts.run_result`` and ``analyzer.predict``), so views and
grading read them instead of parsing the policy back and loading the world again.

The records a result is made of live in ``records`` and are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from grader.core.findings import Findings
from grader.core.policy import Policy
from grader.core.records import Outcome, ProbeKind, ProbeOutcome, Reach, RunNoteCode, Scope, SinkHit
from grader.protocol.codec import encode

__all__ = ["Findings", "Outcome", "ProbeKind", "ProbeOutcome", "Reach", "RunNoteCode", "RunResult", "Scope", "SinkHit"]


@dataclass(frozen=True)
class RunResult:
    """All probe outcomes of one run of one sandbox."""

    backend: str  # "static" or "docker"
    sandbox: Literal["policy", "baseline"]
    policy: Optional[Policy]  # the policy as parsed; None for the baseline
    probes: tuple[ProbeOutcome, ...]
    notes: tuple[str, ...] = ()  # e.g. "predicted, not run: no Docker engine answers"; said to people
    codes: tuple[RunNoteCode, ...] = ()  # the cause of each note code decides by (``wording.backend_phrase``)
    seconds: float = 0.0
    run_id: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # where the run service that made this run is (its URL), or "" for a run made here: set by the client
    # (``backends.remote``), never by the service; code reads this, while ``notes`` say it to people
    ran_at: str = ""
    scope: Optional[Scope] = None  # None when the run could not measure it
    # seconds per phase of a real run (timings.PHASES: world copy, network, start, probes, evidence);
    # for benchmarks, never in the JSON: the same policy's report stays the same from run to run
    timings: dict[str, float] = field(default_factory=dict, compare=False)
    # what the sandbox grants (None: not known, e.g. a result built by hand); derived from the policy and the
    # world, so it takes no part in ``==``
    findings: Optional[Findings] = field(default=None, compare=False)

    def outcome(self, probe_id: str) -> ProbeOutcome:
        for p in self.probes:
            if p.id == probe_id:
                return p
        raise KeyError(probe_id)

    def to_json(self) -> dict[str, Any]:
        """The one JSON form of a run: every field, always, each record by the one codec (``protocol/codec.py``).

        The run service sends it as it is (``transport.result_to_json``, read back by ``result_from_json``);
        the CLI's ``--json`` shows a view of it (``report.result_json``). The findings and the timings stay
        behind: the first are derived from the policy and the world, the second are for benchmarks.
        """
        return {
            "backend": self.backend,
            "sandbox": self.sandbox,
            "policy": self.policy.normalize() if self.policy is not None else None,
            "probes": [encode(p) for p in self.probes],
            "notes": list(self.notes),
            "codes": list(self.codes),
            "seconds": self.seconds,
            "run_id": self.run_id,
            "extra": dict(self.extra),
            "scope": encode(self.scope) if self.scope is not None else None,
            "ran_at": self.ran_at,
        }
