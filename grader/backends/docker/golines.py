"""The lines a prepared sandbox and its grader exchange around its go.

A run made ready ahead (``prepared``, ``nextready``) waits in its sandbox for one line on its stdin, ``GO``. The
probe runner says first that it waits (its ``ready`` record), and last that every probe returned (its ``end``
record): the grader reads both from the sandbox's stdout as they are written (``engine.follow``), each only as a
whole line the strict reader takes for that record. A job's shell says nothing before its go; after it,
``replay.ACK`` first in its output proves that what ran came after it.
"""

from __future__ import annotations

from grader.backends.runs import read_runner_output
from grader.backends.docker import replay

__all__ = ["GO", "JOB", "JOB_AWAIT_GO", "RUNNER", "runner_end", "runner_ready"]

# the line a prepared probe runner waits for on stdin (``probe_runner.GO``; not imported: the runner's module is heavy)
GO = "go"
_END = b'{"probe": "runner", "step": "end", '  # how the runner's last record starts (``wire.dump``)
_READY = b'{"probe": "runner", "step": "ready", '  # its first, once it waits for its go
JOB = ["python3", "-u", "/opt/sandbox-lab/run/job.py"]
# the prepared probe runner: imported, not run as a script, so its bytecode comes compiled from the image (a script
# is compiled afresh each run: 9 ms of its start), and without ``site`` (-S: it needs the standard library alone)
RUNNER = ["python3", "-S", "-c", "import sys; sys.path[0] = '/opt/sandbox-lab'; import probe_runner; "
          "sys.exit(probe_runner.main(await_go=True))"]
# a job made ready ahead (``nextready``) waits for its go as the replay's shells do (``replay.AWAIT_GO``): nothing
# runs before it, and ``replay.ACK`` first in its output proves that what ran came after it
JOB_AWAIT_GO = replay.awaiting_go("sh", JOB)


def runner_end(line: bytes) -> bool:
    """Is ``line`` the probe runner's ``end`` record, whole and well formed (read by the strict reader)?"""
    return _runner_said(line, _END, "end")


def runner_ready(line: bytes) -> bool:
    """Is ``line`` the prepared probe runner's ``ready`` record (it waits for its go), whole and well formed?"""
    return _runner_said(line, _READY, "ready")


def _runner_said(line: bytes, start: bytes, step: str) -> bool:
    if not line.startswith(start):
        return False
    records, unreadable = read_runner_output(line.decode("utf-8", "replace") + "\n")
    return not unreadable and len(records) == 1 and (records[0].probe, records[0].step, records[0].ok) == ("runner", step, True)
