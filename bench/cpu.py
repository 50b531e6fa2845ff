"""What a run costs in CPU, by whose work it is: the sandbox's own (its cgroup), the grader's, the simulated internet's, the engine's.

A bench helper (``bench/probe_speed.py``, ``bench/service.py``), never part
of a run: nothing here changes what a run does or how it is judged.

* **The sandbox's own work** (the probe runner and every probe it starts) is
  the CPU its container's cgroup counted. The cgroup goes when the container
  stops, so a watcher *process* (``python bench/cpu.py watch``: its own CPU is
  nobody's run) follows ``docker events`` for every container labelled
  ``org.sandbox-lab.role=sandbox`` and reads its ``cpuacct.usage`` (cgroup v1;
  ``cpu.stat`` on v2) every 5 ms until the cgroup is gone, then prints the
  last reading: at most 5 ms of a sandbox's CPU is missed. Each line names
  the run label, the pid label (the grader process that made it) and that
  process's parent, read while the sandbox is made: a bench keeps the lines
  of its own graders (its own pid, a child's, a service worker's horse).
* **The grader's work** is the grader process's own CPU (``getrusage``, the
  children's for a one-shot command, ``/proc/<pid>/stat`` with the reaped
  horses for a service worker).
* **The simulated internet's** is the cgroup CPU of the proxy and internet
  containers that served the runs (the backend's own, or the machine hub's).
* **The engine's** is dockerd's and containerd's CPU over the same window.
  The engine is shared with other engineers' tests, so this is an upper bound
  of what the runs cost it; the containerd shims and runc (per container,
  short-lived) are in nobody's figure here; ``machine_cpu`` counts the
  whole machine, so a quiet machine's window has them too.

    python bench/cpu.py watch    # the watcher itself (started by Watcher)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

TICK = os.sysconf("SC_CLK_TCK")
ROLE = "org.sandbox-lab.role"
RUN = "org.sandbox-lab.run"
PID = "org.sandbox-lab.pid"
HUB = "org.sandbox-lab.hub"
POLL_S = 0.005


def cgroup_cpu(container_id: str) -> Optional[float]:
    """CPU seconds a running container's cgroup has counted, or None when it has no cgroup (stopped, gone)."""
    for path in (Path("/sys/fs/cgroup/cpuacct/docker") / container_id / "cpuacct.usage",):
        try:
            return int(path.read_text()) / 1e9
        except (OSError, ValueError):
            pass
    for path in (Path("/sys/fs/cgroup/system.slice") / f"docker-{container_id}.scope" / "cpu.stat",
                 Path("/sys/fs/cgroup/docker") / container_id / "cpu.stat"):
        try:
            for line in path.read_text().splitlines():
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
        except (OSError, ValueError):
            pass
    return None


def proc_cpu(pid: int, *, children: bool = False) -> float:
    """utime + stime of a process (and of its reaped children, with ``children``), in seconds; 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12]) + ((int(fields[13]) + int(fields[14])) if children else 0)
    return ticks / TICK


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def engine_cpu() -> float:
    """dockerd's and containerd's CPU so far (shared with everyone using the engine)."""
    total = 0.0
    for name in ("dockerd", "containerd"):
        out = subprocess.run(["pgrep", "-x", name], capture_output=True, text=True).stdout.split()
        total += sum(proc_cpu(int(p)) for p in out)
    return total


def machine_cpu() -> float:
    """Core-seconds this whole machine has been busy (``/proc/stat``: user, nice, system, irq and softirq of every
    process and of the kernel), so a window's difference counts what nobody's figure above does: the containerd
    shims, runc, the kernel's namespace, mount and network work."""
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in Path("/proc/stat").read_text().split()[1:8])
    return (user + nice + system + irq + softirq) / TICK


def services_cpu(engine: Any, *, pid: Optional[int] = None) -> float:
    """The running proxy and internet containers' cgroup CPU: the ones labelled with grader ``pid`` (a backend's
    own), or with none, the machine hub's (shared with any other grader on the machine that uses the hub)."""
    filters = [f"{PID}={pid}"] if pid is not None else [HUB]
    total = 0.0
    for c in engine.containers({"label": filters}, all=False):  # the engine adapter (DockerEngine): running ones
        if c.labels.get(ROLE) in ("proxy", "internet"):
            total += cgroup_cpu(c.id) or 0.0
    return total


# --- the watcher process ---------------------------------------------------------------------


def _watch() -> int:
    """Print one JSON line per sandbox container that stopped: its run, pid label, that pid's parent, CPU seconds."""
    live: dict[str, dict[str, Any]] = {}
    lock = threading.Lock()
    out_lock = threading.Lock()

    def poll() -> None:
        while True:
            time.sleep(POLL_S)
            with lock:
                items = list(live.items())
            for cid, rec in items:
                got = cgroup_cpu(cid)
                if got is not None:
                    rec["cpu_s"], rec["seen"] = got, True
                elif rec["seen"] or time.monotonic() - rec["since"] > 120:
                    with lock:
                        live.pop(cid, None)
                    rec.pop("since"), rec.pop("seen")
                    with out_lock:
                        sys.stdout.write(json.dumps(rec) + "\n")
                        sys.stdout.flush()

    threading.Thread(target=poll, daemon=True).start()
    events = subprocess.Popen(["docker", "events", "--filter", "type=container", "--filter", "event=create",
                               "--filter", f"label={ROLE}=sandbox", "--format", "{{json .}}"],
                              stdout=subprocess.PIPE, text=True)
    assert events.stdout is not None
    signal.signal(signal.SIGTERM, lambda *_: (events.kill(), os._exit(0)))  # docker events ends with its watcher
    parent = os.getppid()

    def orphaned() -> None:  # a bench killed outright never stops its watcher: end with it
        while os.getppid() == parent:
            time.sleep(1)
        events.kill()
        os._exit(0)

    threading.Thread(target=orphaned, daemon=True).start()
    with out_lock:
        sys.stdout.write("READY\n")
        sys.stdout.flush()
    for line in events.stdout:
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        attrs = ev.get("Actor", {}).get("Attributes", {})
        pid = int(attrs.get(PID, "0") or 0)
        rec = {"id": ev["id"], "name": attrs.get("name", ""), "run": attrs.get(RUN, ""), "pid": pid, "ppid": _ppid(pid),
               "cpu_s": 0.0, "seen": False, "since": time.monotonic()}
        with lock:
            live[ev["id"]] = rec
    return 0


@dataclass
class Watcher:
    """The watcher process, and the sandboxes it has reported so far."""

    proc: Optional["subprocess.Popen[str]"] = None
    seen: list[dict[str, Any]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> "Watcher":
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "watch"], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "READY":
            raise SystemExit("the CPU watcher did not start (is `docker events` available?)")
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.seen.append(json.loads(line))

    def mark(self) -> int:
        with self._lock:
            return len(self.seen)

    def sandbox_cpu(self, since: int, pids: Iterable[int], *, expect: int = 1, wait_s: float = 3.0) -> tuple[float, int]:
        """(CPU seconds, count) of the sandboxes reported since ``mark()`` ``since`` that graders ``pids`` (or their
        children) made; waits up to ``wait_s`` for at least ``expect`` of them (a cgroup goes a moment after the run)."""
        wanted = set(pids)
        deadline = time.monotonic() + wait_s
        while True:
            with self._lock:
                mine = [r for r in self.seen[since:] if r["pid"] in wanted or r["ppid"] in wanted]
            if len(mine) >= expect or time.monotonic() > deadline:
                return sum(r["cpu_s"] for r in mine), len(mine)
            time.sleep(0.02)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # the watcher's own child (docker events) ends with its pipe
            self.proc.wait(10)


if __name__ == "__main__" and sys.argv[1:] == ["watch"]:
    raise SystemExit(_watch())
