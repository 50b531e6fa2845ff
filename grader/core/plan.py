"""``Policy + probes → RunPlan``: the one place where policy fields become container settings.

Everything a backend needs is decided here, before anything runs, so it can be
tested without Docker: which parts of the run's world copy are mounted and how,
which network the sandbox gets, and how the container is hardened.

The host is sacred: mounts are computed from the *world's* files, never from
the paths a learner wrote. A rule such as ``allowWrite: ["/"]`` only selects
parts of the run's own world copy; ``/var/run/docker.sock`` names nothing in
the world and so mounts nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional, Union

from grader.core.access import Access, Mode, Network, Target, access_for, baseline_access
from grader.core.paths import covers
from grader.core.policy import Policy
from grader.core.probes import PROBES
from grader.core.world import World, load_world

__all__ = ["BASELINE_HARDENING", "BASELINE_SCRATCH", "Hardening", "Mount", "RunPlan", "build_plan"]

MountKind = Literal["bind", "tmpfs", "mask"]


@dataclass(frozen=True)
class Mount:
    """One mount into the sandbox. ``source`` is a path of the world, relative to the run's world copy.

    * ``bind``: the world copy's file or directory, read-only or read-write;
    * ``tmpfs``: an empty private directory over a hidden world directory;
    * ``mask``: an empty read-only file over a hidden world file.
    """

    source: str  # world path; the backend maps it under the run's world copy
    target: str  # path inside the sandbox (the same world path)
    mode: Mode
    kind: MountKind
    is_dir: bool
    precreate: bool = False  # an output file that must exist before the run to carry its own mode


@dataclass(frozen=True)
class Hardening:
    """How the sandbox container is locked down (the baseline keeps Docker's defaults but its limits and its root)."""

    read_only_root: bool = True  # so one probe cannot plant a payload for the next
    cap_drop_all: bool = True  # no capability survives: no raw sockets, no chown, no mount
    no_new_privileges: bool = True  # setuid binaries cannot raise privileges
    user: str = "1000:1000"  # the simulated user, never root
    pids_limit: int = 256  # a fork bomb hits this, not the machine
    mem_bytes: int = 256 * 1024 * 1024
    nano_cpus: int = 1_000_000_000  # one core of two: other runs and the machine stay usable
    tmp_bytes: int = 16 * 1024 * 1024  # private /tmp; filling it fills only this
    shm_bytes: int = 1024 * 1024  # /dev/shm is another writable tmpfs: keep it tiny (Docker's default is 64 MiB)
    # The image's own directories its user may write, as in a default container (the plain container's /var/tmp
    # and /run/lock): each an empty private directory over the read-only root, all of them together bounded by
    # scratch_bytes (backends.quota.bound_scratch). None under a policy: there only /tmp is writable.
    scratch_dirs: tuple[str, ...] = ()
    scratch_bytes: int = 16 * 1024 * 1024
    nofile: int = 1024  # open files: a connection flood stops here, whatever the daemon's default
    timeout_s: float = 60.0  # wall clock, then the container is killed


# Measured in the sandbox image (``find / -xdev -writable`` as its user in a default container): /tmp, /var/tmp,
# /run/lock (and /var/lock, a link to it) are every directory of the image that user can write; the test
# tests/integration/test_plain_container_disk.py finds them again and fails on a new one.
BASELINE_SCRATCH = ("/var/tmp", "/run/lock")

BASELINE_HARDENING = Hardening(
    cap_drop_all=False, no_new_privileges=False,
    # The baseline is weak on purpose (Docker's capabilities, setuid binaries, every mount, the open network), but
    # it must not hurt the machine: its limits stay, and its root is read-only too. A default container's writable
    # layer lives on the engine's disk with no bound this engine can set (overlay2 on ext4 refuses
    # --storage-opt size=), and a job wrote 2 GiB there in 1.5 s. What its user could write in a default container
    # stays writable (scratch_dirs), bounded; a write to a system path fails with EROFS instead of EACCES.
    scratch_dirs=BASELINE_SCRATCH,
)


@dataclass(frozen=True)
class RunPlan:
    """Exactly what will run: the sandbox's mounts, network and hardening, and the probes."""

    sandbox: Literal["policy", "baseline"]
    policy: Optional[Policy]
    world: World
    network: Network
    allowed_domains: tuple[str, ...]
    denied_domains: tuple[str, ...]
    mounts: tuple[Mount, ...]
    hardening: Hardening
    probes: tuple[str, ...] = field(default_factory=lambda: tuple(p.id for p in PROBES))
    scan: bool = True  # a real run also measures the whole scope (every world path and host); off only to time it
    target: Target = "srt"  # who starts the sandbox: its rules decide (access.py)

    @property
    def access(self) -> Access:
        return baseline_access(self.world) if self.policy is None else access_for(self.policy, self.world, self.target)


def _children(world: World) -> dict[str, list[tuple[str, bool]]]:
    """World tree: directory → its direct children (path, is_dir), directories included."""
    nodes: dict[str, bool] = {d: True for d in world.directories()}
    nodes.update({f.path: False for f in world.files})
    kids: dict[str, list[tuple[str, bool]]] = {}
    for path, is_dir in nodes.items():
        if path in world.roots:
            continue
        parent = path.rsplit("/", 1)[0]
        kids.setdefault(parent, []).append((path, is_dir))
    for v in kids.values():
        v.sort()
    return kids


def _mounts(access: Access) -> tuple[Mount, ...]:
    """Mount each world node whose mode differs from what its parent already gives it.

    A root not mounted at all shows the image's empty skeleton directory, which
    is what "hidden" means at the top. Inside a mounted directory, a hidden
    directory gets an empty tmpfs and a hidden file an empty read-only file, as
    sandbox-runtime does with bubblewrap.
    """
    world = access.world
    kids = _children(world)
    out: list[Mount] = []

    def visit(path: str, is_dir: bool, inherited: Union[Mode, Literal["absent"]]) -> None:
        mode = access.mode(path)
        effective: Union[Mode, Literal["absent"]] = inherited
        if mode != inherited and not (mode == "hidden" and inherited == "absent"):
            if mode == "hidden":
                out.append(Mount(path, path, "hidden", "tmpfs" if is_dir else "mask", is_dir))
            else:
                out.append(Mount(path, path, mode, "bind", is_dir))
            effective = mode
        for child, child_is_dir in kids.get(path, []):
            visit(child, child_is_dir, effective)
        if is_dir:
            # Files a job creates: they inherit their directory's mode unless a
            # rule names them; then they must exist beforehand to carry their own.
            for o in world.outputs:
                if o.path.rsplit("/", 1)[0] == path:
                    omode = access.mode(o.path)
                    eff_here = effective if effective != "absent" else "hidden"
                    if omode != eff_here:
                        kind: MountKind = "mask" if omode == "hidden" else "bind"
                        out.append(Mount(o.path, o.path, omode, kind, False, precreate=True))

    for root in world.roots:
        visit(root, True, "absent")
    return tuple(out)


def build_plan(policy: Optional[Policy], world: Optional[World] = None, target: Target = "srt") -> RunPlan:
    """Compile a policy (or ``None``: the plain-container baseline) into a run plan, as ``target`` starts the sandbox."""
    w = world or load_world()
    access = baseline_access(w) if policy is None else access_for(policy, w, target)
    mounts = _mounts(access)
    # Defence in depth: every mount names a world path, whatever the policy said.
    for m in mounts:
        if w.root_of(m.source) is None:  # pragma: no cover - guarded by construction, fuzzed in tests
            raise AssertionError(f"plan would mount {m.source!r}, outside the world")
    return RunPlan(
        sandbox=access.kind,
        policy=policy,
        world=w,
        network=access.network,
        allowed_domains=policy.network.allowedDomains if policy else (),
        denied_domains=policy.network.deniedDomains if policy else (),
        mounts=mounts,
        hardening=BASELINE_HARDENING if policy is None else Hardening(),
        target=target,
    )


def mount_table(plan: RunPlan) -> list[str]:
    """Human-readable mounts, for ``export --to docker`` and the lessons."""
    return [f"{m.target} ({m.kind}, {m.mode})" for m in plan.mounts if covers("/", m.target)]
