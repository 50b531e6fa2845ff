#!/usr/bin/env python3
"""The Docker engine's configuration file (/etc/docker/daemon.json) as Sandbox Lab needs it, merged into what is there.

``scripts/ensure-docker`` calls this before it starts dockerd (address pools)
and when asked for a sandbox runtime (``--runtime runsc``). Standard library
only: it runs as root before the project's virtualenv exists.

* **Address pools.** Docker's defaults are 31 ranges (15 /16s and 16 /20s), one
  per network: a machine running a few graders at once runs out ("could not
  find an available, non-overlapping IPv4 address pool"). A run's networks
  hold few containers (a proxy and a sandbox; the busiest, the shared
  internet's, one per proxy at most), so ``POOLS`` cuts one /16 into 1024 /26s
  (61 addresses each, 60 containers). An operator's own ``default-address-pools``
  is kept as it is: they chose their ranges to avoid their own networks.
* **A runtime** (gVisor's ``runsc``): registered under ``runtimes`` with its
  path and arguments; other runtimes are kept.

Every other key is kept, in its order. Writing the same thing twice changes
nothing (the file is rewritten only when its content would change).

Usage: docker_daemon_config.py [--file PATH] [--dry-run] [--pools] [--runtime NAME=PATH [--runtime-arg ARG]...]
Prints one line per change; exit 0 (changed or not), 2 on a file that is not a JSON object.
``--dry-run`` prints the same lines and writes nothing: ``ensure-docker`` says what it will change before it does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

__all__ = ["DEFAULT_FILE", "POOLS", "merge", "main"]

DEFAULT_FILE = Path("/etc/docker/daemon.json")
# 10.213.0.0/16: away from Docker's own defaults (172.17-31, 192.168) and the 10.0/10.1 that home routers and
# VPNs favour. Cut in /26s: 1024 networks of up to 60 containers each.
POOLS: list[dict[str, Any]] = [{"base": "10.213.0.0/16", "size": 26}]


def merge(config: dict[str, Any], *, pools: bool = False, runtime: Optional[tuple[str, str, list[str]]] = None,
          ) -> tuple[dict[str, Any], list[str]]:
    """``config`` with what was asked added, and a line for each change; ``config`` itself is not changed.

    Args:
        pools: set ``default-address-pools`` to ``POOLS`` unless the file already sets some.
        runtime: (name, path, arguments) to register under ``runtimes``, replacing an entry of that name.
    """
    out = json.loads(json.dumps(config))  # a deep copy: the caller's value stays as it was
    changes: list[str] = []
    if pools:
        if "default-address-pools" not in out:  # an operator's own ranges stay: they know their networks
            out["default-address-pools"] = json.loads(json.dumps(POOLS))
            changes.append("default-address-pools: " + json.dumps(POOLS))
    if runtime is not None:
        name, path, args = runtime
        entry: dict[str, Any] = {"path": path}
        if args:
            entry["runtimeArgs"] = list(args)
        runtimes = out.get("runtimes", {})
        if not isinstance(runtimes, dict):
            raise ValueError('"runtimes" is not a JSON object')
        if runtimes.get(name) != entry:
            out["runtimes"] = {**runtimes, name: entry}
            changes.append(f"runtimes.{name}: " + json.dumps(entry))
    return out, changes


def _read(path: Path) -> dict[str, Any]:
    if not path.exists() or not path.read_text("utf-8").strip():
        return {}
    data = json.loads(path.read_text("utf-8"))
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def _write(path: Path, config: dict[str, Any]) -> None:
    """Atomically: a dockerd starting (or reloading) meanwhile reads the old file or the new, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".daemon.json.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(config, fh, indent=2)
        fh.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--file", type=Path, default=DEFAULT_FILE)
    ap.add_argument("--dry-run", action="store_true", help="print what would change, write nothing")
    ap.add_argument("--pools", action="store_true", help="set default-address-pools unless the file sets some")
    ap.add_argument("--runtime", metavar="NAME=PATH", help="register a runtime, e.g. runsc=/usr/bin/runsc")
    ap.add_argument("--runtime-arg", action="append", default=[], metavar="ARG", help="an argument of that runtime")
    a = ap.parse_args(argv)
    runtime = None
    if a.runtime:
        name, sep, path = a.runtime.partition("=")
        if not sep or not name or not path:
            ap.error("--runtime takes NAME=PATH")
        runtime = (name, path, list(a.runtime_arg))
    try:
        config, changes = merge(_read(a.file), pools=a.pools, runtime=runtime)
    except ValueError as exc:
        print(f"{a.file}: {exc}; fix or remove it, then run again", file=sys.stderr)
        return 2
    if changes and not a.dry_run:
        _write(a.file, config)
    for line in changes:
        print(f"{a.file}: {line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
