"""The phase timings of runs: a per-run stopwatch and a tally across runs, with a fake clock."""

from __future__ import annotations

import threading

import pytest

from grader.core.outcomes import RunResult
from grader.core.timings import PHASES, Stopwatch, Tally


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_phase_is_timed_by_the_clock_and_a_phase_timed_twice_adds_up() -> None:
    clock = FakeClock()
    watch = Stopwatch(clock)
    with watch.phase("world"):
        clock.now += 0.25
    with watch.phase("network"):
        clock.now += 1.0
    with watch.phase("world"):
        clock.now += 0.5
    watch.add("start", 0.125)
    assert watch.seconds == {"world": 0.75, "network": 1.0, "start": 0.125}


def test_a_phase_that_raises_still_counts_its_time() -> None:
    clock = FakeClock()
    watch = Stopwatch(clock)
    with pytest.raises(RuntimeError):
        with watch.phase("probes"):
            clock.now += 2.0
            raise RuntimeError("engine went away")
    assert watch.seconds == {"probes": 2.0}


def test_the_tally_averages_each_phase_over_the_runs_that_had_it_in_phase_order() -> None:
    tally = Tally()
    tally.add({"probes": 1.0, "world": 0.5, "custom": 3.0})
    tally.add({"world": 0.25, "probes": 2.0})
    tally.add({"removal": 0.5})  # the reaper adds removal on its own, later
    stats = tally.stats()
    assert [s.name for s in stats] == ["world", "probes", "removal", "custom"]  # PHASES order, then the others
    by = {s.name: s for s in stats}
    assert (by["world"].runs, by["world"].total, by["world"].mean) == (2, 0.75, 0.375)
    assert (by["probes"].runs, by["probes"].mean) == (2, 1.5)
    assert (by["removal"].runs, by["removal"].mean) == (1, 0.5)
    tally.clear()
    assert tally.stats() == ()


def test_the_tally_loses_nothing_when_many_threads_add_at_once() -> None:
    tally = Tally()

    def add() -> None:
        for _ in range(1000):
            tally.add({"world": 1.0, "removal": 2.0})

    threads = [threading.Thread(target=add) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    by = {s.name: s for s in tally.stats()}
    assert by["world"].runs == 8000 and by["world"].total == 8000.0 and by["removal"].total == 16000.0


def test_the_phases_name_the_breakdown_the_batch_bench_prints() -> None:
    assert PHASES == ("world", "network", "start", "probes", "evidence", "replay", "removal")


def test_timings_ride_on_the_result_but_neither_in_its_json_nor_in_its_equality() -> None:
    a = RunResult("docker", "policy", None, (), timings={"world": 0.1})
    b = RunResult("docker", "policy", None, (), timings={"world": 0.2})
    assert a == b
    assert "timings" not in a.to_json()
    assert RunResult("static", "policy", None, ()).timings == {}
