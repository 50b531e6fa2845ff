"""Arm, watch and release ``holdhook/sitecustomize.py`` in processes a test starts (a service stack's workers, the
warm engine): the first run that reads its runner's output while armed waits there until released."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

HOOK = Path(__file__).resolve().parent / "holdhook"


class Hold:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(exist_ok=True)

    def env(self, pythonpath: str = "") -> dict[str, str]:
        """What a started process needs in its environment to take the hook (``pythonpath``: its own, kept after)."""
        return {"PYTHONPATH": os.pathsep.join(p for p in (str(HOOK), pythonpath) if p), "SANDBOX_LAB_TEST_HOLD": str(self.path)}

    def arm(self) -> None:
        """The next run any such process fires is held while it waits on its sandbox, until ``release``."""
        for name in ("held", "release"):
            (self.path / name).unlink(missing_ok=True)
        (self.path / "armed").touch()

    def wait_held(self, timeout: float = 120.0, alive: Callable[[], bool] = lambda: True,
                  said: Callable[[], str] = lambda: "") -> int:
        """Until a run is held; the pid of the process that holds it. ``alive`` false first, or the time out: an
        AssertionError with what ``said`` says."""
        deadline = time.monotonic() + timeout
        held = self.path / "held"
        while not (held.exists() and held.read_text()):
            if time.monotonic() > deadline or not alive():
                raise AssertionError("no run was held: " + said())
            time.sleep(0.02)
        return int(held.read_text())

    def release(self) -> None:
        """The held run goes on; no other is held."""
        (self.path / "armed").unlink(missing_ok=True)
        (self.path / "release").touch()
