"""The container settings that lock a sandbox down: a plan's ``Hardening`` as the engine's create keywords, and
its mounts (the sandbox's view of the world).

Pure, no Docker call: the backend's sandbox (``run.Run``) and the tests that start hostile code in the same
hardening build their containers from this one function, so the two cannot drift apart.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from grader.core.plan import Hardening, RunPlan
from grader.backends.quota import SCRATCH_FILES
from grader.backends.docker.engine import Spec, log_config, mount, ulimit
from grader.backends.docker.runtimes import process_limits

__all__ = ["hardened_options", "plan_mounts"]


def hardened_options(h: Hardening, runtime: Optional[str] = None) -> dict[str, Any]:
    """The container settings that lock a sandbox down, exactly as ``h`` says (under ``runtime``, if one
    is given: ``runtimes``); pure, no Docker call.

    The one place a ``Hardening`` becomes ``containers.create`` keywords, so the
    backend's sandbox and the tests that start hostile code in the same
    hardening cannot drift apart. The caller adds what belongs to one run:
    name, labels, environment, working directory, hostname, mounts, network.
    """
    procs = process_limits(h.pids_limit, h.mem_bytes, runtime)  # under gVisor, counted by its kernel (runtimes)
    # a private, bounded /tmp: filling it fills only this run's
    tmpfs = {"/tmp": f"size={h.tmp_bytes},mode=1777"}
    # The image's directories its user may write (the plain container's /var/tmp, /run/lock), each bounded here;
    # a run that can mount its own scratch replaces these with one bounded tmpfs it can see full (``Run._scratch``).
    # exec, as a default container's /var/tmp allows (Docker's --tmpfs defaults to noexec).
    tmpfs.update({d: f"size={h.scratch_bytes},nr_inodes={SCRATCH_FILES},mode=1777,exec" for d in h.scratch_dirs})
    opts: dict[str, Any] = dict(
        user=h.user,
        read_only=h.read_only_root,
        tmpfs=tmpfs,
        shm_size=h.shm_bytes,
        # explicit, not the daemon's default: a connection flood stops at the plan's number; no core file, whose
        # size only the memory bounds, written where the engine host's core_pattern says (a pipe to a handler on
        # the host's disk, on many distributions)
        ulimits=[ulimit("nofile", h.nofile, h.nofile), ulimit("core", 0, 0)]
        + ([ulimit("nproc", procs.nproc, procs.nproc)] if procs.nproc is not None else []),
        # swap equal to memory: a run cannot page the machine to a halt
        pids_limit=procs.cgroup_pids, mem_limit=procs.cgroup_mem, memswap_limit=procs.cgroup_mem, nano_cpus=h.nano_cpus,
        # bounded logs: a chatty or hostile run cannot fill the engine's disk
        log_config=log_config("json-file", {"max-size": "8m"}),
    )
    if h.cap_drop_all:
        opts["cap_drop"] = ["ALL"]
    if h.no_new_privileges:
        opts["security_opt"] = ["no-new-privileges"]
    if runtime is not None:
        opts["runtime"] = runtime  # the operator's (e.g. gVisor's runsc), checked registered when the backend was made
    return opts


def plan_mounts(plan: RunPlan, source: Callable[[str], str]) -> list[Spec]:
    """The plan's mounts of the run directory, the sandbox's whole view of the world; ``source`` says where a path
    of the run directory is for the engine. Pure, no Docker call."""
    mounts = [
        mount("/opt/sandbox-lab/run", source("run"), type="bind", read_only=True),
        mount("/etc/resolv.conf", source("resolv.conf"), type="bind", read_only=True),
    ]
    for m in plan.mounts:
        if m.kind == "bind":
            # the same path as RunDir.host_path(m.source), relative to the run directory
            world_path = "world/" + m.source.lstrip("/")
            mounts.append(mount(m.target, source(world_path), type="bind", read_only=m.mode != "rw"))
        elif m.kind == "tmpfs":
            # private and tiny: writes here never reach the world copy
            mounts.append(mount(m.target, None, type="tmpfs", tmpfs_size=64 * 1024, tmpfs_mode=0o755))
        else:
            mounts.append(mount(m.target, source("mask/empty"), type="bind", read_only=True))
    return mounts
