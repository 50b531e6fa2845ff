#!/usr/bin/env python3
"""Keep one command running: `make serve`'s supervisor of a run-service worker (standard library only).

A worker survives a Redis outage by itself (grader/hosted/worker.py); what it
cannot survive is its own death: SIGKILL, the OOM killer, a crash. This
restarts the command whenever it ends without having been asked to, after a
backoff of 1 s doubling to 30 s (back to 1 s once a run lasted a minute), so a
worker that dies at once does not spin. SIGTERM or SIGINT to the supervisor is
passed to the command once (a worker's warm shutdown: it ends its job first),
then the supervisor waits for it and exits with it; nothing is restarted.

Each start and end is one line on stderr, with the time, so the worker's log
says when and why it came back. Why not RQ's WorkerPool: it forks workers from
one parent (a pool dies with its parent) and is marked beta in RQ 3; the
kubelet does this job in deploy/k8s, and this file does it on one machine.

Usage: supervise.py [--name NAME] -- COMMAND [ARG...]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from types import FrameType
from typing import Optional

__all__ = ["BACKOFF_MAX_SECONDS", "STEADY_SECONDS", "Supervisor", "main"]

BACKOFF_MAX_SECONDS = 30.0
STEADY_SECONDS = 60.0  # a run this long was healthy: the next death starts the backoff again from 1 s


class Supervisor:
    """Runs ``argv`` until stopped; counts its restarts."""

    def __init__(self, argv: list[str], name: str = "", *, first_delay: float = 1.0) -> None:
        self.argv = argv
        self.name = name or argv[0]
        self.first_delay = first_delay
        self.restarts = 0
        self.stopping = False
        self.child: Optional[subprocess.Popen[bytes]] = None

    def say(self, text: str) -> None:
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} supervise {self.name}: {text}", file=sys.stderr, flush=True)

    def stop(self, signum: int, frame: Optional[FrameType] = None) -> None:
        if self.stopping:
            return  # once: a second SIGTERM to an RQ worker is a cold shutdown, which kills the job it runs
        self.stopping = True
        if self.child is not None and self.child.poll() is None:
            self.say(f"{signal.Signals(signum).name}: asking pid {self.child.pid} to stop")
            self.child.send_signal(signal.SIGTERM)

    def run(self) -> int:
        delay = self.first_delay
        while True:
            started = time.monotonic()
            self.child = subprocess.Popen(self.argv)
            self.say(f"started pid {self.child.pid}" + (f" (restart {self.restarts})" if self.restarts else ""))
            code = self.child.wait()
            if self.stopping:
                self.say(f"pid {self.child.pid} ended ({code}); stopped")
                return code if code >= 0 else 128 - code
            if time.monotonic() - started >= STEADY_SECONDS:
                delay = self.first_delay
            why = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with {code}"
            self.say(f"pid {self.child.pid} {why}; restarting in {delay:g} s")
            end = time.monotonic() + delay
            while not self.stopping and time.monotonic() < end:
                time.sleep(min(0.1, end - time.monotonic()))
            if self.stopping:
                self.say("stopped during the backoff")
                return 0
            self.restarts += 1
            delay = min(delay * 2, BACKOFF_MAX_SECONDS)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="", help="how the log lines name the command")
    parser.add_argument("--first-delay", type=float, default=1.0, metavar="SECONDS",
                        help="the first restart's wait; each restart in a row doubles it (default 1)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to supervise")
    supervisor = Supervisor(command, args.name, first_delay=args.first_delay)
    signal.signal(signal.SIGTERM, supervisor.stop)
    signal.signal(signal.SIGINT, supervisor.stop)
    return supervisor.run()


if __name__ == "__main__":
    sys.exit(main())
