"""Predict, then run: a learner's prediction of which probes succeed, scored against what a run showed.

A predict question (``quiz.Question`` of type ``predict``) names a sandbox (a
policy, or the plain container) and a few probes. The learner ticks the probes
they expect to *succeed*, the sandbox is run (``widgets.Prediction`` does it
with ``backends.default()``), and ``score_prediction`` compares probe by probe.

What the prediction is compared with depends on the backend, and the score
says so: a Docker run is an observation; the static backend (Binder) gives the
analyzer's prediction, so the learner's prediction is compared with another
prediction (``observed`` is False, and the views say "predicted"). A probe
whose evidence could not be collected (``error``) is neither right nor wrong.

Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional

from grader.core.outcomes import Outcome, RunNoteCode, RunResult
from grader.core.policy import Policy, parse_policy
from grader.core.probes import probe
from grader.course.quiz import InvalidAnswer, Question

__all__ = ["PredictionScore", "ProbeCall", "scenario_policy", "score_prediction"]


@dataclass(frozen=True)
class ProbeCall:
    """One probe: what the learner predicted, what happened, and whether they were right (None: no verdict)."""

    probe: str
    story: str
    predicted: bool  # True: "it will succeed"
    outcome: Outcome
    explanation: str
    evidence: tuple[str, ...] = ()

    @property
    def right(self) -> Optional[bool]:
        if self.outcome == "error":
            return None
        return self.predicted == (self.outcome == "succeeded")


@dataclass(frozen=True)
class PredictionScore:
    """A prediction scored probe by probe, and how the outcomes it was compared with were obtained."""

    question: str
    backend: str
    notes: tuple[str, ...]
    calls: tuple[ProbeCall, ...]
    ran_at: str = ""  # the run's ``RunResult.ran_at``
    codes: tuple[RunNoteCode, ...] = ()  # the run's ``RunResult.codes``

    @property
    def observed(self) -> bool:
        """True when the outcomes come from a real run, False when the static analyzer predicted them."""
        return self.backend != "static"

    @property
    def judged(self) -> int:
        return sum(c.right is not None for c in self.calls)

    @property
    def right(self) -> int:
        return sum(c.right is True for c in self.calls)

    @property
    def score(self) -> float:
        return self.right / self.judged if self.judged else 0.0

    @property
    def result(self) -> str:
        """The score in words, as the progress board keeps it: "4/6 right"."""
        return f"{self.right}/{self.judged} right" if self.judged else "no verdict"


def scenario_policy(q: Question) -> Optional[Policy]:
    """The sandbox a predict question runs: its policy, or None for the plain container."""
    if q.type != "predict" or q.scenario is None:
        raise InvalidAnswer(f"{q.id} is not a predict question")
    if q.scenario.policy is None:
        return None
    return parse_policy(q.scenario.policy, f"the scenario of {q.id}")


def score_prediction(q: Question, predicted: Iterable[str], result: RunResult) -> PredictionScore:
    """Score the probes predicted to succeed against ``result``, probe by probe, over the question's probes.

    ``InvalidAnswer`` when a predicted id is not one of the question's probes (a
    typo must not silently count as "predicted blocked").
    """
    if q.type != "predict" or q.scenario is None:
        raise InvalidAnswer(f"{q.id} is not a predict question")
    chosen = set(predicted)
    unknown = sorted(chosen - set(q.scenario.probes))
    if unknown:
        raise InvalidAnswer(f"not probes of {q.id}: {', '.join(unknown)}; predict among: {', '.join(q.scenario.probes)}")
    calls = []
    for pid in q.scenario.probes:
        try:
            p = result.outcome(pid)
        except KeyError:  # the run did not report it: no verdict, never a guess
            calls.append(ProbeCall(pid, probe(pid).story, pid in chosen, "error", "the run reported nothing for this probe"))
            continue
        calls.append(ProbeCall(pid, probe(pid).story, pid in chosen, p.outcome, p.explanation, p.evidence))
    return PredictionScore(q.id, result.backend, result.notes, tuple(calls), result.ran_at, result.codes)
