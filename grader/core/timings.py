"""How long each phase of a run took: a per-run ``Stopwatch`` and a thread-safe ``Tally`` across runs.

Pure data and the standard library: a backend times its phases with a
``Stopwatch`` (its ``seconds`` travel on ``RunResult.timings``), and whoever
wants the breakdown of many runs (``bench/batch.py``) hands the backend a
``Tally`` to add each run's phases to, including the ones that happen after
the result is returned (removal, in the reaper). Timing costs two clock reads
per phase; nothing is kept when no one asks.

Imports nothing of the package.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping

__all__ = ["PHASES", "PhaseStats", "Stopwatch", "Tally"]

# The phases of one Docker run, in the order they happen ("replay": the user's next session, when it plays).
# "removal" runs off the critical path.
PHASES = ("world", "network", "start", "probes", "evidence", "replay", "removal")


class Stopwatch:
    """Seconds per named phase of one run; a phase timed twice adds up."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.seconds: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the block as ``name`` (also when it raises: a failed phase still took its time)."""
        started = self._clock()
        try:
            yield
        finally:
            self.add(name, self._clock() - started)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds


@dataclass(frozen=True)
class PhaseStats:
    """One phase over many runs: how many runs had it, and their total seconds."""

    name: str
    runs: int
    total: float

    @property
    def mean(self) -> float:
        return self.total / self.runs if self.runs else 0.0


class Tally:
    """Phase times of many runs, added from any thread (the runs' workers and the reaper)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[str, float] = {}
        self._counts: dict[str, int] = {}

    def add(self, seconds: Mapping[str, float]) -> None:
        """Add one run's phases (a mapping of phase → seconds)."""
        with self._lock:
            for name, s in seconds.items():
                self._totals[name] = self._totals.get(name, 0.0) + s
                self._counts[name] = self._counts.get(name, 0) + 1

    def stats(self) -> tuple[PhaseStats, ...]:
        """Every phase seen: the known ``PHASES`` in their order first, then any other in name order."""
        with self._lock:
            names = [p for p in PHASES if p in self._totals] + sorted(set(self._totals) - set(PHASES))
            return tuple(PhaseStats(n, self._counts[n], self._totals[n]) for n in names)

    def clear(self) -> None:
        with self._lock:
            self._totals.clear()
            self._counts.clear()
