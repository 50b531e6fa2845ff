"""The static backend: the analyzer's predictions behind the ``Backend`` protocol.

For Binder (no Docker) and for instant feedback while a learner types. It runs
nothing; every result says it was predicted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from grader.core.analyzer import predict
from grader.core.errors import BackendError
from grader.core.execution import Execution, Job
from grader.core.outcomes import RunNoteCode, RunResult
from grader.core.plan import RunPlan
from grader.backends.base import Closing

__all__ = ["StaticBackend"]


@dataclass(frozen=True)
class StaticBackend(Closing):
    """Predicts outcomes from the policy and the world alone; holds nothing, so ``close()`` does nothing."""

    name: str = "static"
    notice: str = ""  # the note its results carry, for people
    cause: Optional[RunNoteCode] = None  # why it stands in for a real backend, for code (``wording.backend_phrase``)

    def run(self, plan: RunPlan) -> RunResult:
        notes = (self.notice,) if self.notice else ()
        return predict(plan.policy, plan.world, notes=notes, codes=(self.cause,) if self.cause else (), target=plan.target)

    def execute(self, plan: RunPlan, job: Job) -> Execution:
        raise BackendError(
            "the static backend predicts the fixed probes from the policy alone; it cannot predict what "
            "arbitrary code does. Run it for real with the Docker backend (`--backend docker`; `make images` sets it up)."
        )
