"""The service's Prometheus metrics, kept in Redis so every worker and API process adds to the same counts.

Workers are separate processes (on separate machines, once there are many):
a per-process ``prometheus_client`` counter would show one worker's share. So
a worker writes what it finished into Redis (``record_run``), and the API's
``/metrics`` reads it on each scrape (``ServiceCollector``): queue depth, runs
by kind and outcome, and a latency histogram per kind. A fresh registry per
app: no module-level metric state.

Imports nothing of the package.
"""

from __future__ import annotations

from typing import Callable, Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from redis import Redis

__all__ = ["BUCKETS", "ServiceCollector", "metrics_text", "record_run"]

# seconds: a cached answer, a static prediction, a warm Docker run (~2-5 s), a cold one, a slow attack
BUCKETS = (0.05, 0.25, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


def record_run(conn: Redis, prefix: str, kind: str, outcome: str, seconds: float) -> None:
    """Count one ended run of ``kind`` with ``outcome`` that took ``seconds`` (cumulative buckets, as Prometheus reads them)."""
    with conn.pipeline() as pipe:
        pipe.hincrby(f"{prefix}metrics:outcomes", f"{kind}|{outcome}", 1)
        key = f"{prefix}metrics:latency:{kind}"
        for bound in BUCKETS:
            if seconds <= bound:
                pipe.hincrby(key, str(bound), 1)
        pipe.hincrby(key, "+Inf", 1)
        pipe.hincrbyfloat(key, "sum", seconds)
        pipe.sadd(f"{prefix}metrics:kinds", kind)
        pipe.execute()


def _text(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


class ServiceCollector:
    """Reads the service's counts from Redis at scrape time; ``depth`` is the queue's length."""

    def __init__(self, conn: Redis, prefix: str, depth: Callable[[], int]) -> None:
        self._conn = conn
        self._prefix = prefix
        self._depth = depth

    def collect(self) -> Iterable[Metric]:
        depth = GaugeMetricFamily("sandbox_lab_queue_depth", "Jobs waiting for a worker.")
        depth.add_metric([], float(self._depth()))
        yield depth
        runs = CounterMetricFamily("sandbox_lab_runs", "Runs ended, by kind and outcome.", labels=["kind", "outcome"])
        for field, count in sorted(self._conn.hgetall(f"{self._prefix}metrics:outcomes").items()):
            kind, _, outcome = _text(field).partition("|")
            runs.add_metric([kind, outcome], float(count))
        yield runs
        latency = HistogramMetricFamily("sandbox_lab_run_seconds", "How long a run took on its worker.", labels=["kind"])
        for raw_kind in sorted(self._conn.smembers(f"{self._prefix}metrics:kinds")):
            kind = _text(raw_kind)
            fields = {_text(k): _text(v) for k, v in self._conn.hgetall(f"{self._prefix}metrics:latency:{kind}").items()}
            buckets = [(str(b), float(fields.get(str(b), 0))) for b in BUCKETS] + [("+Inf", float(fields.get("+Inf", 0)))]
            latency.add_metric([kind], buckets, float(fields.get("sum", 0)))
        yield latency


def metrics_text(collector: ServiceCollector) -> bytes:
    """The Prometheus text exposition of ``collector``, from a registry of its own."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry)
