"""Which OCI runtime a sandbox runs under: the engine's default (runc), or one it has registered, such as gVisor's runsc.

The operator's choice, never a policy's: ``SANDBOX_LAB_RUNTIME=runsc`` (or
``DockerBackend(..., runtime="runsc")``) runs every sandbox container (the
probes, a learner's attack code, the next sessions of a replay) under that
runtime, so a kernel bug reached from the sandbox meets gVisor's kernel, not
the host's. The services (internet, proxy, listener) are the project's own
code and stay on the engine's default. ``scripts/ensure-docker --runtime runsc``
installs and registers runsc (docs/scaling.md, "Sandbox runtime (gVisor)").

The run service tells the two kinds of sandbox apart (``hosted.kinds``): a
sandbox that runs a tenant's own code (an attack, an execution's job) runs
under ``SANDBOX_LAB_CODE_RUNTIME`` when it is set (``scripts/serve`` sets it to
runsc where the engine has it); one that runs only the project's probes and
jobs against a tenant's policy (JSON, never code) runs under
``SANDBOX_LAB_RUNTIME``. ``code_runtime_from_env`` reads the first.

Fail closed: a runtime asked for that the engine does not know is an error
naming it, the runtimes the engine has and the fix, checked once when the
backend is made; never a run quietly under runc.

How many processes a sandbox may run is the plan's ``pids_limit`` under any
runtime, but where it is counted differs (``process_limits``). Under runc the
kernel's pids cgroup counts the sandbox's own processes. Under runsc that
cgroup, and the memory cgroup, hold gVisor's kernel, which on this platform
(ptrace) keeps a host stub process per address space: measured, a fork bomb's
256 Python tasks took 1,415 host threads and 1.19 GiB. The plan's numbers
there killed gVisor itself, and with it the run's evidence, long before the
bomb met its limit. So under runsc the plan's ``pids_limit`` is the sandbox's
RLIMIT_NPROC, which gVisor counts for its own tasks only (a fork bomb gets
EAGAIN at it, as under runc), and the cgroups are left bounds on gVisor's
footprint: ``GVISOR_THREADS_PER_TASK`` host threads and ``GVISOR_BYTES_PER_TASK``
more memory per task. The price is written down: under runsc one sandbox may
hold up to 256 MiB + 256 × 6 MiB (1.75 GiB) of the machine's memory, not
256 MiB. (RLIMIT_NPROC is never used under runc: there the kernel counts it per
user across every container of the machine.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

from grader.core.errors import BackendError
from grader.backends.docker.engine import DockerEngine, worded

__all__ = [
    "GVISOR", "GVISOR_BYTES_PER_TASK", "GVISOR_THREADS_PER_TASK", "RUNTIME_ENV", "ProcessLimits", "RuntimeUnavailable", "check_runtime",
    "process_limits", "runtime_from_env", "sandbox_runtime", "CODE_RUNTIME_ENV", "code_runtime_from_env",
]

RUNTIME_ENV = "SANDBOX_LAB_RUNTIME"
CODE_RUNTIME_ENV = "SANDBOX_LAB_CODE_RUNTIME"  # the run service's sandboxes that run a tenant's code
GVISOR = "runsc"
GVISOR_THREADS_PER_TASK = 8  # measured 5.5 (256 tasks: 1,415 host threads), with room for gVisor's own
GVISOR_BYTES_PER_TASK = 6 << 20  # measured 4.6 MiB (256 forked Python tasks: 1.19 GiB)
# what dockerd accepts as a runtime's name in daemon.json; anything else is a typo or an injection, refused
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class RuntimeUnavailable(BackendError):
    """The runtime asked for is not one the Docker engine has registered: no sandbox is started."""


def runtime_from_env(env: Mapping[str, str], var: str = RUNTIME_ENV) -> Optional[str]:
    """The runtime ``var`` (``SANDBOX_LAB_RUNTIME``) asks for; None when it is unset or empty (the engine's default)."""
    value = env.get(var, "").strip()
    if not value:
        return None
    if not _NAME.fullmatch(value):
        raise RuntimeUnavailable(
            f"{var}={value!r} is not a runtime's name: use a name the engine registered, e.g. runsc, "
            f"or unset {var} for the engine's default"
        )
    return value


def code_runtime_from_env(env: Mapping[str, str]) -> Optional[str]:
    """The runtime for a sandbox that runs a tenant's code: ``SANDBOX_LAB_CODE_RUNTIME``, else ``SANDBOX_LAB_RUNTIME``'s."""
    return runtime_from_env(env, CODE_RUNTIME_ENV) or runtime_from_env(env)


def check_runtime(name: Optional[str], registered: Iterable[str]) -> Optional[str]:
    """``name`` if the engine has it (None: the engine's default, always there); else ``RuntimeUnavailable``."""
    if name is None:
        return None
    known = sorted(registered)
    if name not in known:
        raise RuntimeUnavailable(
            f"sandboxes are to run under the runtime {name!r} ({RUNTIME_ENV} or the backend's settings), "
            f"but the Docker engine has no runtime of that name (it has: {', '.join(known) or 'none listed'}). "
            + ("Register gVisor with `sudo scripts/ensure-docker --runtime runsc`, or unset "
               if name == "runsc" else "Register it in /etc/docker/daemon.json (\"runtimes\"), or unset ")
            + f"{RUNTIME_ENV} to use the engine's default."
        )
    return name


def sandbox_runtime(engine: DockerEngine, name: Optional[str]) -> Optional[str]:
    """``name`` once ``engine`` is seen to have it registered (None: nothing to check)."""
    if name is None:
        return None
    with worded("reading the engine's runtimes"):
        registered = engine.runtimes()
    return check_runtime(name, registered)


@dataclass(frozen=True)
class ProcessLimits:
    """Where a sandbox's process limit is counted: the engine's cgroups, and RLIMIT_NPROC (None: unset)."""

    cgroup_pids: int
    cgroup_mem: int
    nproc: Optional[int]


def process_limits(pids_limit: int, mem_bytes: int, runtime: Optional[str]) -> ProcessLimits:
    """The plan's limits as ``runtime`` must be told them, so that a fork bomb meets its limit inside the sandbox."""
    if runtime == GVISOR:
        return ProcessLimits(cgroup_pids=pids_limit * GVISOR_THREADS_PER_TASK,
                             cgroup_mem=mem_bytes + pids_limit * GVISOR_BYTES_PER_TASK, nproc=pids_limit)
    return ProcessLimits(cgroup_pids=pids_limit, cgroup_mem=mem_bytes, nproc=None)
