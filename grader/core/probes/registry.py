"""The probe catalogue in its order: every probe of every channel family, by id, and the runner's orders for a run.

The order of ``PROBES`` is the order of every report, board and runner order
list. A probe on a channel that exists is one line here (a world path to read,
a host the job downloads from); a probe on a new channel is a module of its
own beside ``files``, ``network``, ... holding the record, and its entry here.

Pure.
"""

from __future__ import annotations

from typing import Optional

from grader.core.access import Access
from grader.core.next_session import SETTINGS
from grader.core.probes.backdoor import backdoor_probe
from grader.core.probes.exfil import STEAL_SECRETS, UPLOAD
from grader.core.probes.fetch import fetch_probe
from grader.core.probes.files import read_probe, write_probe
from grader.core.probes.fronting import DOMAIN_FRONTING
from grader.core.probes.network import ATTACKER_DOMAIN, DIRECT_IP, DNS_EXFIL, HOST_GATEWAY
from grader.core.probes.record import OrderContext, Probe
from grader.core.probes.scan import scan_orders
from grader.protocol.wire import ProbeOrders

__all__ = ["PROBES", "orders_for", "probe"]


PROBES: tuple[Probe, ...] = (
    read_probe("read-ssh-key", "attack", "Read the user's SSH private key, the key to every server they log in to.", "/home/user/.ssh/id_rsa"),
    read_probe("read-cloud-credentials", "attack", "Read the cloud credentials in ~/.aws, enough to run up a bill or read the company's buckets.", "/home/user/.aws/credentials"),
    read_probe("read-etc-secrets", "attack", "Read the database password the machine keeps in /etc/secrets.", "/etc/secrets/db_password"),
    read_probe("read-dotenv", "attack", "Read the project's .env file with its API token.", "/project/.env"),
    read_probe("read-personal-notes", "attack", "Read the user's personal notes: nothing the job needs, private all the same.", "/home/user/notes.txt"),
    read_probe("read-other-project", "attack", "Read another project on the machine (a client's code in ~/work/client-portal) that no job here works on.", "/home/user/work/client-portal/pricing.py"),
    backdoor_probe("write-shell-rc", "Append a backdoor to ~/.bashrc that sends ~/.ssh/id_rsa to attacker.example: it runs in the user's next shell, outside the sandbox, with full network.", "/home/user/.bashrc"),
    backdoor_probe("write-git-hook", "Plant a backdoor in the git pre-commit hook that sends ~/.ssh/id_rsa to attacker.example: it runs at the next commit, outside the sandbox.", "/project/.git/hooks/pre-commit"),
    backdoor_probe("write-sandbox-settings", "Rewrite the sandbox's own settings file to allow attacker.example, so the next session can send ~/.ssh/id_rsa there.", SETTINGS),
    write_probe("tamper-source", "attack", "Slip a change into the project's source, which people run and ship.", "/project/src/main.py"),
    DIRECT_IP,
    DNS_EXFIL,
    ATTACKER_DOMAIN,
    HOST_GATEWAY,
    DOMAIN_FRONTING,
    UPLOAD,
    STEAL_SECRETS,
    read_probe("job-read-src", "job", "The job reads the project's source.", "/project/src/main.py"),
    write_probe("job-write-out", "job", "The job writes its result to /project/out.", "/project/out/result.txt"),
    write_probe("job-write-build", "job", "The npm build writes its bundle to /app/workspace/build.", "/app/workspace/build/bundle.js"),
    fetch_probe("job-fetch-npm", "The npm build downloads a package from registry.npmjs.org.", ("registry.npmjs.org",)),
    fetch_probe("job-fetch-pypi", "pip downloads a package: the index at pypi.org and the file at files.pythonhosted.org.", ("pypi.org", "files.pythonhosted.org")),
)

_BY_ID = {p.id: p for p in PROBES}


def probe(probe_id: str) -> Probe:
    """The probe with this id (KeyError if there is none)."""
    return _BY_ID[probe_id]


def orders_for(probe_ids: tuple[str, ...], ctx: OrderContext, *, scan: Optional[Access] = None) -> tuple[ProbeOrders, ...]:
    """The runner's orders for these probes: one entry per probe, its steps built by the host;
    then, given the sandbox's ``Access``, the scope scan's entries."""
    out = [ProbeOrders(id=pid, steps=tuple(p.orders(p, ctx)), parallel=p.parallel) for pid in probe_ids for p in [probe(pid)]]
    return tuple(out + (scan_orders(scan, ctx) if scan is not None else []))
