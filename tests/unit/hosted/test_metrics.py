"""The service's metrics live in Redis, so every worker adds to the same counts (grader/hosted/metrics.py)."""

from __future__ import annotations

from typing import Any

from hosted_fixtures import redis_server, settings  # noqa: F401 - fixtures

from grader.hosted.jobs import open_redis
from grader.hosted.metrics import ServiceCollector, metrics_text, record_run


def test_runs_and_latency_are_counted_across_processes(settings: Any) -> None:
    conn = open_redis(settings)
    record_run(conn, settings.prefix, "probe", "finished", 0.2)
    record_run(open_redis(settings), settings.prefix, "probe", "unavailable", 3.0)  # another worker's connection
    text = metrics_text(ServiceCollector(conn, settings.prefix, lambda: 7)).decode()
    assert "sandbox_lab_queue_depth 7.0" in text
    assert 'sandbox_lab_runs_total{kind="probe",outcome="finished"} 1.0' in text
    assert 'sandbox_lab_runs_total{kind="probe",outcome="unavailable"} 1.0' in text
    assert 'sandbox_lab_run_seconds_bucket{kind="probe",le="0.25"} 1.0' in text
    assert 'sandbox_lab_run_seconds_bucket{kind="probe",le="+Inf"} 2.0' in text
    assert 'sandbox_lab_run_seconds_count{kind="probe"} 2.0' in text
