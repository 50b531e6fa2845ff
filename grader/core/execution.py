"""Running a piece of code in a sandbox, and where what it sent arrived: ``Job``, ``Execution``, ``sightings``.

The probes are the grader's own code; a ``Job`` is anybody's: the learner's
attack in the capture-the-flag mode, the lessons' scripted agent. A real
backend runs it inside the sandbox a plan describes, under the same hardening
as the probes, and returns an ``Execution``: what the code printed and the
evidence the simulated internet recorded, collected outside the sandbox.

What the code prints decides nothing. ``sightings`` reads the recorders' logs
for a secret (a flag, a canary) in every encoding an exfiltration commonly
uses (as is, hex, base64, URL-encoded) and reports each place it arrived that
the attacker can read: the attacker's server (HTTP, raw TCP), a host that
stores uploads (a gist, a package registry), a download-only host whose
request URLs the attacker reads (in the URL only), or the attacker's
nameserver (a name spelled from the secret). Pure: no Docker, no files.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass, field
from typing import Mapping, Optional

from grader.core.evidence import Evidence, NextSession, encodings
from grader.core.evidence import sightings as judge_sightings
from grader.core.records import SinkHit
from grader.core.world import World

__all__ = ["Job", "Execution", "MAX_CODE_BYTES", "SIGNER_SOCKET", "encodings", "sightings", "signature"]

MAX_CODE_BYTES = 256 * 1024  # an attack or an agent is a script, not a payload
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]{0,63}$")
# what the sandbox's environment is made of: a job may add to it, never replace it
_RESERVED_ENV = frozenset({"HOME", "PATH", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "SSL_CERT_FILE",
                           "PYTHONDONTWRITEBYTECODE", "NO_PROXY", "no_proxy"})


@dataclass(frozen=True)
class Job:
    """Python source to run as the sandboxed agent's tool would, and what the world copy gets first.

    * ``plant``: world path → text appended to that file of the run's world copy
      before the sandbox starts (a level's flag); only files of the world.
    * ``env``: extra environment variables of the sandbox (a token an agent
      was started with); never the ones the run itself sets.
    * ``timeout_s``: the job's wall clock; the sandbox is killed after it.
    * ``signer``: a private key held by a signing agent *outside* the sandbox,
      reachable from inside through a Unix socket named by ``SSH_AUTH_SOCK``
      (what ssh-agent forwarding or an allowed agent socket gives an agent):
      the code can have data signed (``signature``) but never reads the key.
    * ``replay``: after the sandbox exits, play the user's next session
      outside it (``next_session``): a login shell that sources the world
      copy's start-up files, a commit that runs its hooks, and, if the
      sandbox's settings were rewritten, the same code once more in a sandbox
      under them. What that session sent is in ``sightings``.
    """

    code: str
    plant: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 20.0
    signer: Optional[str] = None
    replay: bool = False

    def check(self, world: World) -> None:
        """Raise ValueError naming what is wrong; a job that passes selects only parts of the run's own world."""
        if len(self.code.encode("utf-8", "replace")) > MAX_CODE_BYTES:
            raise ValueError(f"the code is larger than {MAX_CODE_BYTES // 1024} KiB; an attack is a short script")
        files = {f.path for f in world.files}
        for path in self.plant:
            if path not in files:
                raise ValueError(f"plant: {path!r} is not a file of the simulated world; plant into one of its files")
        for name in self.env:
            if not _ENV_NAME.match(name) or name in _RESERVED_ENV:
                raise ValueError(f"env: {name!r} is not an extra variable a job may set (upper-case name, not {sorted(_RESERVED_ENV)[0]}…)")
        if self.signer is not None and not 16 <= len(self.signer) <= 4096:
            raise ValueError("signer: a key of 16 to 4096 characters")
        if self.signer is not None and "SSH_AUTH_SOCK" in self.env:
            raise ValueError("env: SSH_AUTH_SOCK is set by the run when the job has a signer; leave it out")
        if not 1.0 <= self.timeout_s <= 120.0:
            raise ValueError("timeout_s: between 1 and 120 seconds")


SIGNER_SOCKET = "agent.sock"  # in the run's directory, mounted read-only in the sandbox; connecting needs no write


def signature(key: str, data: str) -> str:
    """What the signing agent answers for ``data`` (HMAC-SHA256 under ``key``, hex): only the key makes it,
    so finding it outside the sandbox proves the key was used there, though never read."""
    return hmac.new(key.encode("utf-8"), data.encode("utf-8"), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Execution:
    """What one job did in one sandbox: its output and the evidence the recorders kept.

    ``evidence`` is None only when the backend could not collect it; then
    nothing can be claimed about what left the sandbox.
    """

    backend: str
    output: str  # stdout and stderr, interleaved, cut at the backend's limit
    exit_code: Optional[int]  # None: killed at the wall clock
    timed_out: bool
    evidence: Optional[Evidence]
    run_id: str = ""
    seconds: float = 0.0
    notes: tuple[str, ...] = ()  # as a RunResult's: e.g. where a run service ran it (wording.ran_at_note)
    # where the run service that ran it is (its URL), or "" for a run made here: set by the client
    # (``backends.remote``), never by the service; code reads this, while ``notes`` say it to people
    ran_at: str = ""

    @property
    def infra_problem(self) -> str:
        if self.evidence is None:
            return "no evidence was collected"
        problems = [self.evidence.infra_problem, self.next_session.infra_problem if self.next_session else ""]
        return "; ".join(p for p in problems if p)

    @property
    def next_session(self) -> Optional[NextSession]:
        """What the user's next session did (``Job.replay``); None when it was not played."""
        return self.evidence.next_session if self.evidence is not None else None


def sightings(ex: Execution, world: World, secrets: Mapping[str, str]) -> tuple[SinkHit, ...]:
    """Where each named secret arrived that the attacker can read, proven by the recorders' logs.

    ``secrets`` maps a name for the report ("the flag", "~/.ssh/id_rsa's canary")
    to its value. One hit per (sink, secret); the earliest record is the evidence.
    The sandbox's own logs come first, then the next session's (``Job.replay``),
    whose hits say "in the next session".
    """
    ev = ex.evidence
    if ev is None:
        return ()
    hits = judge_sightings(ev, world, secrets)
    ns = ev.next_session
    if ns is not None:
        later = Evidence(token=ev.token, canaries={}, records=(), before={}, after={}, network="open",
                         http=ns.http, dns=ns.dns, tcp=ns.tcp, raw=ev.raw)
        hits += judge_sightings(later, world, secrets, "in the next session: ")
    return hits
