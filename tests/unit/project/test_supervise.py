"""scripts/supervise.py, `make serve`'s supervisor of a worker: restarts with backoff, stops once and cleanly."""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("supervise", ROOT / "scripts" / "supervise.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


supervise = _load()


def test_a_command_that_dies_is_restarted_with_a_doubling_backoff(tmp_path: Path) -> None:
    count = tmp_path / "count"
    # dies at once, three times; the fourth start stays up until the supervisor is told to stop
    script = (f"import os, sys, time; p = {str(count)!r}; n = int(open(p).read()) + 1 if os.path.exists(p) else 1; "
              "open(p, 'w').write(str(n)); sys.exit(1) if n < 4 else time.sleep(60)")
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "supervise.py"), "--name", "t", "--first-delay", "0.25", "--",
                             sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (count.exists() and count.read_text() == "4"):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.1)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, log = proc.communicate(timeout=10)
    assert proc.returncode == 128 + signal.SIGTERM  # the command's own end, passed on
    assert time.monotonic() - started < 5  # passed on at once: the command ends, nothing is restarted
    delays = [line.rsplit("restarting in ", 1)[1] for line in log.splitlines() if "exited with 1; restarting in" in line]
    assert delays == ["0.25 s", "0.5 s", "1 s"]
    assert "SIGTERM: asking pid" in log and log.count("started pid") == 4


def test_a_stop_during_the_backoff_restarts_nothing() -> None:
    sup = supervise.Supervisor([sys.executable, "-c", "raise SystemExit(3)"], "t", first_delay=30)
    say = sup.say

    def stop_once_in_the_backoff(line: str) -> None:  # the command has died, its 30 s wait begins: never before
        say(line)
        if "restarting in" in line:
            __import__("threading").Thread(target=sup.stop, args=(signal.SIGTERM,), daemon=True).start()

    sup.say = stop_once_in_the_backoff  # type: ignore[method-assign]
    started = time.monotonic()
    assert sup.run() == 0
    assert time.monotonic() - started < 5 and sup.restarts == 0
