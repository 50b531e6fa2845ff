"""Test-only: with ``SANDBOX_LAB_TEST_HOLD=<dir>`` (a test's service stack sets it), the first run in any process
of the stack that reads its probe runner's output while ``<dir>/armed`` exists is held there, before its runner's
end can count, until ``<dir>/release`` exists: a fault a test injects then always meets a job still running
(``tests/service_stack.py``: ``arm``, ``wait_held``, ``release``). The held run writes ``<dir>/held`` (its pid).
Never on the package's path: only a stack's processes get this directory on theirs."""

import os

_HOLD = os.environ.get("SANDBOX_LAB_TEST_HOLD")


def _install(where: str) -> None:
    import time
    from pathlib import Path

    from grader.backends.docker import run

    real = run.runner_end
    hold = Path(where)

    def held(raw: bytes) -> bool:
        if (hold / "armed").exists():
            try:
                fd = os.open(hold / "held", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:  # another run is the held one
                return real(raw)
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            deadline = time.monotonic() + 300
            while not (hold / "release").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        return real(raw)

    run.runner_end = held


if _HOLD:
    _install(_HOLD)
