"""A redis-server of a test's own: a temporary directory, a Unix socket, append-only persistence; stopped after.

A Unix socket in a fresh directory instead of a TCP port: no free-port race
between test sessions, nothing reachable from another user of the machine, and
nothing left behind (the directory is removed). ``restart`` stops and starts
the same server on the same data, as an operator's restart would.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Optional

import pytest

__all__ = ["RedisServer", "need_redis_server"]


def need_redis_server() -> str:
    """The redis-server binary; missing, a skip with the fix (a failure when CI is set)."""
    found = shutil.which("redis-server") or next((p for p in ("/usr/bin/redis-server", "/usr/sbin/redis-server")
                                                  if os.path.exists(p)), None)
    if found is None:
        message = "redis-server is not installed: run scripts/ensure-redis (apt-get install redis-server)"
        if os.environ.get("CI"):
            pytest.fail(message + "; CI is set, so this fails instead of skipping", pytrace=False)
        pytest.skip(message)
    return found


class RedisServer:
    """One redis-server process on its own directory and socket."""

    def __init__(self) -> None:
        self.binary = need_redis_server()
        self.directory = Path(tempfile.mkdtemp(prefix="slredis-"))  # short: a socket path is at most 107 bytes
        self.socket = self.directory / "redis.sock"
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.start()

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.binary, "--port", "0", "--unixsocket", str(self.socket), "--unixsocketperm", "700",
             "--dir", str(self.directory), "--appendonly", "yes", "--appendfsync", "always", "--save", "",
             "--daemonize", "no", "--logfile", str(self.directory / "redis.log")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        import redis

        deadline = time.monotonic() + 10
        while True:
            try:
                if redis.Redis(unix_socket_path=str(self.socket)).ping():
                    return
            except redis.RedisError:
                pass
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError(f"redis-server did not start: {(self.directory / 'redis.log').read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()  # SIGTERM: redis flushes the append-only file and exits
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
