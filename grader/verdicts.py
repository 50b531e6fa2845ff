"""A real run's result: every probe judged from evidence, then explained against the static prediction.

Each probe's judge lives in its record (``probes.py``); this module runs them,
turns an unfinished probe into ``error`` (never ``blocked``), measures the
scope from the scan's evidence (``scope.measure_scope``), and builds the
``RunResult`` every real backend returns. One function for every backend, so
they cannot differ in how they read the same facts.

Imports: analyzer, evidence, outcomes, plan, probes, scope, world. Nothing downstream.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from .analyzer import predict
from .evidence import Evidence, finished
from .outcomes import ProbeOutcome, RunResult
from .plan import RunPlan
from .probes import PROBES
from .scope import measure_scope
from .world import World

__all__ = ["judge", "run_result"]


def judge(ev: Evidence, world: World, probe_ids: Iterable[str]) -> tuple[ProbeOutcome, ...]:
    """Every requested probe's verdict, from evidence alone."""
    wanted = set(probe_ids)
    out = []
    for p in PROBES:
        if p.id not in wanted:
            continue
        verdict = p.judge(p, ev, world)
        if not finished(ev, p.id) and verdict[0] != "succeeded":
            # an unfinished probe proves nothing blocked; a success still counts: its trace cannot be faked
            late = " before the sandbox's time ran out." if ev.timed_out else "."
            verdict = ("error", "The probe did not finish" + late + " Rerun; if it persists, report it.", ())
        outcome, why, proof = verdict
        out.append(ProbeOutcome(p.id, p.kind, outcome, why, proof))  # type: ignore[arg-type]
    return tuple(out)


def _explain(outcomes: tuple[ProbeOutcome, ...], plan: RunPlan, disagreement: str) -> tuple[ProbeOutcome, ...]:
    """Say why in the policy's terms when a run agrees with the prediction; flag it when not."""
    predicted = {p.id: p for p in predict(plan.policy, plan.world).probes}
    out = []
    for o in outcomes:
        pred = predicted[o.id]
        if o.outcome == pred.outcome:
            out.append(ProbeOutcome(o.id, o.kind, o.outcome, pred.explanation, o.evidence))
        else:
            note = f"{o.explanation} ({disagreement} {pred.outcome}: {pred.explanation})"
            out.append(ProbeOutcome(o.id, o.kind, o.outcome, note, o.evidence))
    return tuple(out)


def run_result(
    ev: Evidence, plan: RunPlan, *, backend: str, run_id: str, seconds: float, stopped: str,
    disagreement: str, extra: Optional[dict[str, Any]] = None,
) -> RunResult:
    """A real run's result: every probe judged from ``ev`` and explained against the static prediction.

    ``stopped`` names what the wall clock ended ("the sandbox was killed");
    ``disagreement`` introduces the prediction when the run differs from it.
    """
    notes = [f"infrastructure error, evidence incomplete: {ev.infra_problem}"] if ev.infra_problem else []
    if ev.timed_out:
        notes.append(f"{stopped} after {plan.hardening.timeout_s:.0f} s")
    scope, unmeasured = measure_scope(ev, plan.access) if plan.scan else (None, "")
    if unmeasured:
        notes.append(f"scope not measured: {unmeasured}")
    return RunResult(
        backend=backend,
        sandbox=plan.sandbox,
        policy=plan.policy.normalize() if plan.policy else None,
        probes=_explain(judge(ev, plan.world, plan.probes), plan, disagreement),
        notes=tuple(notes),
        seconds=seconds,
        run_id=run_id,
        extra=extra or {},
        scope=scope,
    )
