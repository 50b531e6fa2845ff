"""The job probes one job needs, derived from its needs, and a run counted by them: "2 of 2 jobs work".

The probe suite runs every job probe on every sandbox (the practice task's
job reads /project/src, the npm build writes /app/workspace/build, pip
fetches from pypi.org, ...). A lesson about one job must count only that
job's probes: lesson 02's npm build never reads /project/src, so a board
that says "3 of 5 jobs work" for its secure setup counts jobs the build
never needs (and shows the build's least privilege, job-write-out blocked,
as a failure). ``needed_jobs`` derives a job's probes from its ``Needs``
(a read probe whose target the job reads, a write probe whose target it
writes, a fetch probe whose hosts it talks to); ``only_jobs`` keeps every
attack of a run and only the job probes named.

Pure.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable

from grader.core.needs import Needs
from grader.core.outcomes import RunResult
from grader.core.paths import covers
from grader.core.probes import PROBES

__all__ = ["needed_jobs", "only_jobs"]


def needed_jobs(needs: Needs) -> tuple[str, ...]:
    """The job probes a job with ``needs`` runs, in the catalogue's order."""
    out = []
    for p in PROBES:
        if p.kind != "job":
            continue
        if p.hosts:
            needed = all(h in needs.host_names for h in p.hosts)
        elif p.action == "write" and p.target:
            needed = any(covers(w, p.target) for w in needs.write)
        elif p.action == "read" and p.target:
            needed = any(covers(r, p.target) for r in needs.read)
        else:
            raise ValueError(f"job probe {p.id} names neither a path nor a host: no need can cover it")
        if needed:
            out.append(p.id)
    return tuple(out)


def only_jobs(result: RunResult, jobs: Iterable[str]) -> RunResult:
    """``result`` with every attack and only the job probes in ``jobs``: what a board about that job counts.

    A job named that the run did not report stays missing (a board then shows it absent; a goal's ``check``,
    which reads the full run, says to rerun).
    """
    keep = set(jobs)
    return replace(result, probes=tuple(p for p in result.probes if p.kind != "job" or p.id in keep))
