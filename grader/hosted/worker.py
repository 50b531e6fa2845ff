"""A worker of the run service: serves this service's queue on the local Docker engine (``DOCKER_HOST`` honoured).

Capacity grows by starting workers, on this machine or on others that reach
the same Redis; each runs one job at a time, in a forked work horse (RQ's
``Worker``), so a run that crashes or leaks ends with its horse. Heartbeats
every ``MONITOR_SECONDS``: a worker killed mid-job is found by the next
maintenance (its own, another worker's, or the API's poll) about a minute
later, and the job retried once, then failed as ``worker_lost``.

Imports the jobs (the queue's name and serializer) and the settings.
"""

from __future__ import annotations

import logging
from typing import Optional

from rq import Queue, Worker
from rq.serializers import JSONSerializer

from grader.hosted.jobs import open_redis
from grader.hosted.settings import ServiceSettings

__all__ = ["MAINTENANCE_SECONDS", "MONITOR_SECONDS", "serve_jobs"]

MONITOR_SECONDS = 5  # how often a busy worker says it is alive; RQ adds 60 s before it counts the job abandoned
MAINTENANCE_SECONDS = 15  # how often a worker looks for abandoned jobs (RQ's default, 10 min, leaves them too long)


def serve_jobs(settings: ServiceSettings, *, name: Optional[str] = None, burst: bool = False) -> bool:
    """Serve jobs until stopped (SIGTERM ends the current job first); ``burst``: until the queue is empty."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    conn = open_redis(settings)
    queue = Queue(settings.queue_name, connection=conn, serializer=JSONSerializer)
    worker = Worker([queue], connection=conn, serializer=JSONSerializer, name=name,
                    job_monitoring_interval=MONITOR_SECONDS, maintenance_interval=MAINTENANCE_SECONDS)
    return bool(worker.work(burst=burst, with_scheduler=False))
