"""Where one run service keeps its state, and the limits it enforces: one place, read by the API, the workers and ``make serve``.

A service is its state directory (``SANDBOX_LAB_SERVICE_DIR``): the token file,
Redis's data and socket, the pid files of ``make serve``. Every Redis key and
the queue's name carry a prefix derived from that directory, so two services
(or two test sessions) sharing one Redis never read each other's jobs.

Imports nothing of the package but the version.
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

from grader.core.version import __version__

__all__ = ["BODY_LIMIT", "CACHE_SECONDS", "DIR_ENV", "HEARTBEAT_SECONDS", "JOB_TIMEOUT", "LIVE_SECONDS", "NAME_ENV",
           "REDIS_ENV", "RESULT_SECONDS", "ServiceSettings", "service_settings"]

DIR_ENV = "SANDBOX_LAB_SERVICE_DIR"
REDIS_ENV = "SANDBOX_LAB_REDIS_URL"
NAME_ENV = "SANDBOX_LAB_SERVICE_NAME"

# Refused before parsing: a policy is a few KiB, an attack script a few more; 256 KiB bounds what one
# request can make the API hold in memory and hash.
BODY_LIMIT = 256 * 1024
# A finished result answers the same token's identical requests for an hour (never another token's: jobs.cache_key):
# long enough for a learner re-running an unchanged policy, short enough that a redeployed world (whose hash is in the key anyway) is not the only expiry.
CACHE_SECONDS = 3600
# How long a job's record and result stay readable after it ends.
RESULT_SECONDS = 24 * 3600
# A run that has not ended after this long is stopped by the worker and reported failed.
JOB_TIMEOUT = 600
# How often a worker, idle or busy, writes its heartbeat into Redis (RQ's ``last_heartbeat``).
HEARTBEAT_SECONDS = 5
# A worker is counted live only while its last heartbeat is younger than this: two beats missed, plus slack
# for a slow engine check. A registration alone proves nothing: a SIGKILLed worker's stays for minutes.
LIVE_SECONDS = 2 * HEARTBEAT_SECONDS + 3


def _default_dir(env: Mapping[str, str]) -> Path:
    state = env.get("XDG_STATE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".local" / "state")
    return Path(state) / "sandbox-lab" / "service"


@dataclass(frozen=True)
class ServiceSettings:
    """One service's state directory, its Redis, and the names it uses there."""

    directory: Path
    redis_url: str
    name: str

    @property
    def prefix(self) -> str:
        """``sandbox-lab:<12 hex>:``, from the directory: every key of this service starts with it."""
        digest = hashlib.sha256(str(self.directory.resolve()).encode("utf-8")).hexdigest()[:12]
        return f"sandbox-lab:{digest}:"

    @property
    def queue_name(self) -> str:
        # RQ keys its queue and registries by the queue's name: the prefix keeps them this service's own
        return f"{self.prefix}runs"

    @property
    def tokens_file(self) -> Path:
        return self.directory / "tokens.json"

    @property
    def redis_socket(self) -> Path:
        return self.directory / "redis.sock"

    @property
    def version(self) -> str:
        """What a cached result is keyed by (``jobs.cache_key``): the release and the code itself, so a result
        made by other code (an upgrade that changed a record's fields, a patched checkout) never answers."""
        return f"{__version__}+{code_fingerprint()}"


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """The SHA-256 (12 hex digits) of the package's Python sources, path by path: what this service runs."""
    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*") if p.is_file() and p.suffix == ".py"):
        digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def service_settings(env: Optional[Mapping[str, str]] = None) -> ServiceSettings:
    """The settings the environment names: ``SANDBOX_LAB_SERVICE_DIR``, ``SANDBOX_LAB_REDIS_URL``, ``SANDBOX_LAB_SERVICE_NAME``.

    Without ``SANDBOX_LAB_REDIS_URL``, the Redis that ``make serve`` starts: a Unix
    socket in the state directory (no TCP port for another user of the machine to reach).
    """
    env = os.environ if env is None else env
    directory = Path(env.get(DIR_ENV) or _default_dir(env)).expanduser()
    redis_url = env.get(REDIS_ENV) or f"unix://{directory / 'redis.sock'}"
    return ServiceSettings(directory=directory, redis_url=redis_url, name=env.get(NAME_ENV) or socket.gethostname())
