"""The learner's own machine: how the simulated world's paths map onto it, and the hardened settings written for it.

``export`` (in ``export.py``) writes the simulated world's paths; a learner
needs a file for *their* machine. ``Machine`` says where their project and
home are; ``machine_export`` maps the policy onto them and writes a complete,
hardened settings object for Claude Code or sandbox-runtime (srt):

* the world's project (``/project``, or ``/app/workspace`` when the policy
  works there: ``primary_project``) becomes the project root; the world's home
  becomes ``~`` (or ``--home``). Claude Code gets ``//``-absolute paths, srt
  absolute ones;
* denies stay narrow: a ``denyRead`` of the whole home (or of ``/``) becomes a
  ``denyRead`` of the secret files and directories the world knows there,
  never of a whole home (that would hide every tool's configuration);
* every hardening key the target's schema has, with a one-line reason in
  ``hardening`` (JSON has no comments); credential masks for the world's
  secret and credential files and for ``secret_env`` variables; for Claude
  Code, ``permissions.deny`` Read and Edit rules on the same secret paths;
* what the mapping cannot carry over is a ``Change`` (the world path and
  why), never dropped silently: the import round trip is judged against them.

``hardened=False`` writes the policy's rules one for one instead (its *as
written* form): no narrowed denies, no credential masks, no added
hardening keys or permission rules
(``sandbox.enabled`` stays: without it nothing is sandboxed); a path of the
world with no counterpart on the machine is written as the world's own
absolute path, with a note. ``importer.import_settings`` reads such a file
back as exactly the same policy: the rules the learner wrote, which mean the
same to the tool as in Sandbox Lab (``access.py``).

Key names and defaults were checked against SchemaStore's Claude Code
settings schema (vendored in ``schemas/``) and srt 0.0.83's
``sandbox-config.d.ts``; nothing here is a key those do not have.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from grader.core.access import start_directory
from grader.core.paths import covers
from grader.core.policy import Policy
from grader.core.world import World, load_world

__all__ = ["Change", "ChangeCode", "Machine", "MachineExport", "RealTarget", "machine_export", "primary_project"]

RealTarget = Literal["srt", "claude-code"]

_FS_KEYS = ("denyRead", "allowRead", "allowWrite", "denyWrite")


@dataclass(frozen=True)
class Machine:
    """Where the learner's project and home are. ``home=None``: write home paths as ``~/...``."""

    project_root: str
    home: Optional[str] = None
    secret_env: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name, value in (("--project-root", self.project_root), ("--home", self.home)):
            if value is not None and (not value.startswith("/") or value.rstrip("/") == ""):
                raise ValueError(f"{name} must be an absolute directory other than /, e.g. /home/me/project; got {value!r}")
            if value is not None and any(c in value for c in "*?[()\n"):
                raise ValueError(f"{name} {value!r} holds a glob or rule character; name a plain directory")
        for name in self.secret_env:
            if not name or not all(c.isalnum() or c == "_" for c in name) or name[0].isdigit():
                raise ValueError(f"--secret-env {name!r} is not an environment variable name (letters, digits, _)")

    @property
    def root(self) -> str:
        return posixpath.normpath(self.project_root)

    @property
    def home_dir(self) -> Optional[str]:
        return posixpath.normpath(self.home) if self.home else None


# What became of an entry (what code matches on; ``reason`` is the sentence for people).
ChangeCode = Literal["other-project", "no-counterpart", "narrowed", "masked"]


@dataclass(frozen=True)
class Change:
    """An entry of the policy the export could not carry over as written: its world path and what became of it."""

    world_path: str
    reason: str
    code: ChangeCode


@dataclass(frozen=True)
class MachineExport:
    """A settings file for the learner's machine, its hardening reasons and what changed on the way."""

    settings: dict[str, Any]
    hardening: dict[str, str]
    notes: tuple[str, ...]
    changes: tuple[Change, ...] = field(default=())

    @property
    def text(self) -> str:
        return json.dumps(self.settings, indent=2) + "\n"


def _secret_spots(world: World, under: str) -> list[str]:
    """The secret files and directories the world knows below ``under``: a loot file's own directory, else the file."""
    spots: list[str] = []
    dirs = set(world.directories())
    for f in world.loot:
        if not covers(under, f.path):
            continue
        parent = posixpath.dirname(f.path)
        spot = parent if parent in dirs and parent not in world.roots else f.path
        if spot not in spots:
            spots.append(spot)
    return spots


class _Mapper:
    def __init__(self, policy: Policy, machine: Machine, world: World, to: RealTarget, hardened: bool = True) -> None:
        self.machine, self.world, self.to, self.hardened = machine, world, to, hardened
        self.project = primary_project(policy, world)
        self.changes: list[Change] = []
        self.unmapped: list[str] = []  # as written: world paths written as they are, for want of a counterpart

    def _render(self, base: str, rel: str) -> str:
        path = base + rel if rel else base
        return "/" + path if self.to == "claude-code" and path.startswith("/") else path

    def machine_path(self, path: str, key: str, record: bool = True) -> Optional[str]:
        """The entry on the learner's machine, or None (with a Change) when it has no counterpart there."""
        w, m = self.world, self.machine
        if covers(self.project, path):
            return self._render(m.root, path[len(self.project):])
        if covers(w.home, path):
            rel = path[len(w.home):]
            if m.home_dir is None:
                return "~" + rel
            return self._render(m.home_dir, rel)
        root = w.root_of(path)
        if root is None:
            return self._render(path, "")  # beyond the world: the same path on any machine
        if not self.hardened:  # as written: the world's own path, so that import reads back the same rule
            if record and path not in self.unmapped:
                self.unmapped.append(path)
            return self._render(path, "")
        if root in w.projects and key.startswith("deny"):
            # a deny in the world's other project protects the same kind of thing in yours (its .env, its hooks)
            if record:
                self.changes.append(Change(path, f"{key} {path} is in the world's other project {root}: written for your project root instead",
                                          "other-project"))
            return self._render(m.root, path[len(root):])
        if record:
            self.changes.append(Change(path, f"{key} {path}: the simulated world's {root} has no counterpart on your machine; left out",
                                      "no-counterpart"))
        return None

    def deny_read(self, entry: str) -> list[str]:
        w = self.world
        if covers(entry, w.home) and self.hardened:  # the whole home or more: narrowed to the secrets the world knows
            out: list[str] = []
            roots = [r for r in w.roots if covers(entry, r)]
            for r in roots:
                for spot in _secret_spots(w, r):
                    mapped = self.machine_path(spot, "denyRead")
                    if mapped is not None and mapped not in out:
                        out.append(mapped)
            self.changes.append(Change(entry, f"denyRead {entry} narrowed to the secret files and directories the world knows "
                                       "there: hiding a whole home hides every tool's configuration", "narrowed"))
            return out
        mapped = self.machine_path(entry, "denyRead")
        return [] if mapped is None else [mapped]


def _add(items: list[str], values: list[str]) -> None:
    for v in values:
        if v not in items:
            items.append(v)


_HARDENING_CC = {
    "/sandbox/enabled": "sandboxes every Bash command; without it, none of these rules apply",
    "/sandbox/failIfUnavailable": "refuse to start when the sandbox cannot (default false: run unsandboxed with a warning)",
    "/sandbox/allowUnsandboxedCommands": "ignore dangerouslyDisableSandbox (default true: a command may ask to run outside the sandbox)",
    "/sandbox/network/strictAllowlist": "deny hosts missing from allowedDomains without asking you (an injected prompt asks nicely)",
    "/sandbox/credentials/files": "hide the credential files from sandboxed commands even where a read rule would allow them",
    "/sandbox/credentials/envVars": "unset the named secret environment variables for sandboxed commands",
    "/permissions/deny": "Claude Code's own Read and Edit tools do not run in the sandbox: deny them the same secret paths",
}
_HARDENING_SRT = {
    "/network/strictAllowlist": "deny hosts missing from allowedDomains without asking (no ask callback answers yes)",
    "/credentials/files": "hide the credential files from the sandboxed command even where a read rule would allow them",
    "/credentials/envVars": "unset the named secret environment variables for the sandboxed command",
}


def _as_written(policy: Policy, to: RealTarget, mp: _Mapper, lists: dict[str, list[str]]) -> MachineExport:
    """The policy's rules one for one, without the hardening extras: ``import_settings`` reads back the same policy."""
    net = policy.network
    network: dict[str, Any] = {"allowedDomains": list(dict.fromkeys(net.allowedDomains)),
                               "deniedDomains": list(dict.fromkeys(net.deniedDomains))}
    notes = [
        f"as written: the policy's rules one for one, without the hardening extras (narrowed denies, credential masks, "
        f"strictAllowlist{', failIfUnavailable, allowUnsandboxedCommands, permission rules' if to == 'claude-code' else ''}); "
        f"the world's project {mp.project} is {mp.machine.root}, its home {mp.world.home} is {mp.machine.home_dir or '~'}.",
        *(f"{p} is the simulated world's own path, written as it is: it has no counterpart on your machine." for p in mp.unmapped),
    ]
    if to == "srt":
        filesystem = {k: v for k, v in lists.items() if v or k != "allowRead"}  # srt requires the other three
        return MachineExport({"filesystem": filesystem, "network": network}, {}, tuple(notes))
    block: dict[str, Any] = {"enabled": True}  # not hardening: without it nothing is sandboxed
    if any(lists.values()):
        block["filesystem"] = {k: v for k, v in lists.items() if v}
    if any(network.values()):
        block["network"] = {k: v for k, v in network.items() if v != []}  # no empty lists as noise
    return MachineExport({"sandbox": block}, {"/sandbox/enabled": _HARDENING_CC["/sandbox/enabled"]}, tuple(notes))


def machine_export(
    policy: Policy, to: RealTarget, machine: Machine, *, world: Optional[World] = None, hardened: bool = True,
) -> MachineExport:
    """The policy as a complete, hardened settings object for ``to`` on the learner's machine (``hardened=False``: as written)."""
    w = world or load_world()
    mp = _Mapper(policy, machine, w, to, hardened)
    fs = policy.filesystem
    lists: dict[str, list[str]] = {k: [] for k in _FS_KEYS}
    for entry in fs.denyRead:
        _add(lists["denyRead"], mp.deny_read(entry))
    for key in ("allowRead", "allowWrite", "denyWrite"):
        for entry in getattr(fs, key):
            mapped = mp.machine_path(entry, key)
            if mapped is not None:
                _add(lists[key], [mapped])
    if not hardened:
        return _as_written(policy, to, mp, lists)
    secrets = []
    for f in w.loot:
        mapped = mp.machine_path(f.path, "denyRead", record=False)
        if mapped is not None and mapped not in secrets:
            secrets.append(mapped)
    # masks are added on purpose: a change in outcomes wherever the policy let a secret be read
    mp.changes.extend(Change(f.path, "masked by sandbox.credentials.files", "masked") for f in w.loot
                      if mp.machine_path(f.path, "denyRead", record=False))
    net = policy.network
    network: dict[str, Any] = {
        "allowedDomains": list(dict.fromkeys(net.allowedDomains)),
        "deniedDomains": list(dict.fromkeys(net.deniedDomains)),
        "strictAllowlist": True,
    }
    credentials: dict[str, Any] = {"files": [{"path": p, "mode": "deny"} for p in secrets]}
    if machine.secret_env:
        credentials["envVars"] = [{"name": n, "mode": "deny"} for n in dict.fromkeys(machine.secret_env)]
    notes = [
        f"paths are your machine's: the world's project {mp.project} is {machine.root}, the world's home "
        f"{w.home} is {machine.home_dir or '~'}.",
        *(c.reason for c in dict.fromkeys(mp.changes) if c.code != "masked"),
    ]
    if to == "srt":
        filesystem = {k: v for k, v in lists.items() if v or k != "allowRead"}  # srt requires the other three
        settings: dict[str, Any] = {"filesystem": filesystem, "network": network, "credentials": credentials}
        hardening = {k: v for k, v in _HARDENING_SRT.items() if k != "/credentials/envVars" or machine.secret_env}
        return MachineExport(settings, hardening, tuple(notes), tuple(mp.changes))
    network = {k: v for k, v in network.items() if v != []}  # no empty lists as noise
    block: dict[str, Any] = {
        "enabled": True,
        "failIfUnavailable": True,
        "allowUnsandboxedCommands": False,
        "filesystem": {k: v for k, v in lists.items() if v},
        "network": network,
        "credentials": credentials,
    }
    if not block["filesystem"]:
        del block["filesystem"]
    deny_rules = []
    for p in [*lists["denyRead"], *secrets]:
        pattern = p + "/**" if _is_dir(p, mp, w) else p
        for tool in ("Read", "Edit"):
            rule = f"{tool}({pattern})"
            if rule not in deny_rules:
                deny_rules.append(rule)
    settings = {"sandbox": block}
    if deny_rules:
        settings["permissions"] = {"deny": deny_rules}
    hardening = {k: v for k, v in _HARDENING_CC.items()
                 if (k != "/sandbox/credentials/envVars" or machine.secret_env) and (k != "/permissions/deny" or deny_rules)}
    return MachineExport(settings, hardening, tuple(notes), tuple(mp.changes))


def _is_dir(rendered: str, mp: _Mapper, world: World) -> bool:
    """A directory rule becomes ``DIR/**`` in a permission rule, a file rule the file itself."""
    if rendered in ("~", mp.machine.root) or rendered.startswith("//") and rendered[1:] == mp.machine.root:
        return True
    return any(mp.machine_path(d, "denyRead", record=False) == rendered for d in world.directories())


def primary_project(policy: Policy, world: Optional[World] = None) -> str:
    """The world project the policy works in (where Claude Code starts): the first one its allowWrite (else allowRead) names."""
    return start_directory(policy, world or load_world(), "claude-code")
