"""Run directories as a grader leaves them, for the tests of the sweep that removes dead graders' leftovers.

``stamped_dir`` makes a run directory with the owner record a grader writes
(``grader/backends/owners.py``), for any pid and namespace, so a test can
stand in for a live grader, a dead one, one in another container, or one from
before owner records had a namespace (``ns`` None). ``dead_pid`` is a pid
whose process has exited.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

from grader.backends.owners import OWNER


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def stamped_dir(root: Path, name: str, pid: int, ns: Optional[str]) -> Path:
    """``root/name`` with an owner record naming ``pid`` in namespace ``ns`` (None: a record without one)."""
    d = root / name
    d.mkdir(parents=True)
    record: dict[str, Any] = {"pid": pid, "run": name}
    if ns is not None:
        record["ns"] = ns
    (d / OWNER).write_text(json.dumps(record))
    return d
