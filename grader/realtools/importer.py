"""Bringing your own settings: a real Claude Code or srt settings file read back as a Sandbox Lab policy.

The inverse of ``machine_export``: the learner's project root becomes the
world's project, their home (``~`` or ``--home``) the world's home; a file
exported as written (``hardened=False``) reads back as exactly the policy it
came from. Parsing is strict and fails closed:

* a key the target's schema does not have, inside the sandbox block, is an
  error (a typo there usually leaves a rule out);
* a deny entry that cannot be mapped (a glob, a path relative to the settings
  file) is an error: dropping it would widen the sandbox;
* everything else the lab does not model (an allow entry it cannot map, the
  hardening switches, credential masks of environment variables, Claude
  Code's permission rules, settings that are not about the sandbox) is
  listed in ``unmapped`` with its JSON pointer and why. Nothing is dropped
  silently.

``sandbox.credentials.files`` with ``mode: "deny"`` hides a file from
sandboxed commands: it becomes a ``denyRead``.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional, Union

from grader.core.capped import NotRegular, TooLarge, read_regular
from grader.core.errors import PolicyError, Problem, json_pointer
from grader.core.jsonfile import json_problem
from grader.core.paths import covers
from grader.core.policy import LIMITS, Policy, load_policy
from grader.core.text import text_problems
from grader.core.world import World, load_world
from grader.realtools.machine import Machine

__all__ = ["SOURCES", "Imported", "Source", "import_settings"]

Source = Literal["claude-code", "srt"]
SOURCES: tuple[Source, ...] = ("claude-code", "srt")

_FS = ("denyRead", "allowRead", "allowWrite", "denyWrite")
_NET = ("allowedDomains", "deniedDomains")
# keys the schemas have that the lab does not model, and why (each is listed when present, never an error)
_NOT_MODELLED_FS = {
    "allowManagedReadPathsOnly": "a managed-settings switch; the lab reads one file",
    "disabled": "turns filesystem isolation off; the lab always isolates the filesystem",
    "allowGitConfig": "the lab always write-protects .git/config where srt starts, srt's default, and models no exception",
}
_NOT_MODELLED_NET = {
    "strictAllowlist": "the lab never asks: a host missing from allowedDomains is always blocked",
    "allowUnixSockets": "the lab's sandbox has no host Unix sockets to reach",
    "allowAllUnixSockets": "the lab's sandbox has no host Unix sockets to reach",
    "allowLocalBinding": "the lab does not probe local listening ports",
    "httpProxyPort": "a proxy of your own; the lab runs its own",
    "socksProxyPort": "a proxy of your own; the lab runs its own",
    "allowManagedDomainsOnly": "a managed-settings switch; the lab reads one file",
    "allowMachLookup": "macOS only",
    "tlsTerminate": "the lab's proxy does not terminate TLS",
    "deniedDomainReasons": "wording shown to the model; changes no verdict",
    "deniedResolvedAddresses": "the lab's simulated internet has no private addresses to refuse",
    "mitmProxy": "a proxy of your own; the lab runs its own",
    "parentProxy": "a proxy of your own; the lab runs its own",
}
_NOT_MODELLED_SANDBOX = {
    "enabled": "",  # required to be true (checked above)
    "failIfUnavailable": "the lab's sandbox always starts, or the run is an error",
    "allowUnsandboxedCommands": "the lab's attacks cannot ask to leave the sandbox",
    "excludedCommands": "commands run outside the sandbox entirely: the lab's attacks never do",
    "autoAllowBashIfSandboxed": "a prompt setting; the lab has no prompts",
    "ignoreViolations": "hides violation reports; changes no verdict in the lab",
    "enableWeakerNestedSandbox": "the lab's sandbox is a container, not bubblewrap",
    "enableWeakerNetworkIsolation": "macOS only",
    "ripgrep": "a tool path",
    "bwrapPath": "a tool path",
    "socatPath": "a tool path",
    "enabledPlatforms": "the lab has one platform",
    "allowAppleEvents": "macOS only",
    "credentials": "",  # handled below
    "filesystem": "",
    "network": "",
}
# srt's top-level keys (SandboxRuntimeConfigSchema in its dist/sandbox/sandbox-config.js) the lab does not model, and why
_NOT_MODELLED_SRT = {
    "ignoreViolations": "hides violation reports; changes no verdict in the lab",
    "enableWeakerNestedSandbox": "the lab's sandbox is a container, not bubblewrap",
    "allowNestedUserNamespaces": "the lab's attacks do not create user namespaces",
    "enableWeakerNetworkIsolation": "macOS only",
    "allowAppleEvents": "macOS only",
    "ripgrep": "a tool path",
    "mandatoryDenySearchDepth": "the lab searches srt's default depth (3) for the files srt always write-protects",
    "allowPty": "the lab's probes need no terminal",
    "seccomp": "a tool path",
    "bwrapPath": "a tool path",
    "socatPath": "a tool path",
    "javaAgentJarPath": "a tool path",
    "windows": "the lab has one platform (Linux)",
    "git": "git settings injected into commands; changes no verdict in the lab",
}
_SRT_TOP = {"filesystem", "network", "credentials", "$schema", *_NOT_MODELLED_SRT}


@dataclass(frozen=True)
class Imported:
    """A policy read from a real settings file, and every entry that did not become part of it, with why."""

    policy: Policy
    unmapped: tuple[Problem, ...]


class _Reader:
    def __init__(self, source: Source, machine: Machine, world: World, world_project: str, label: str) -> None:
        self.source, self.machine, self.world, self.project, self.label = source, machine, world, world_project, label
        self.errors: list[Problem] = []
        self.unmapped: list[Problem] = []

    def note(self, loc: tuple[Union[str, int], ...], why: str) -> None:
        self.unmapped.append(Problem(json_pointer(loc), why))

    def error(self, loc: tuple[Union[str, int], ...], why: str) -> None:
        self.errors.append(Problem(json_pointer(loc), why))

    def world_path(self, raw: str) -> Union[str, None]:
        """The world path of a settings path, or None when it cannot be mapped (the caller says why)."""
        if any(c in raw for c in "*?["):
            return None
        m = self.machine
        if raw == "~" or raw.startswith("~/"):
            rel = raw[1:]
            return posixpath.normpath(self.world.home + rel)
        if self.source == "claude-code":
            if raw.startswith("//"):
                path = raw[1:]
            elif raw.startswith("/"):
                return None  # relative to the settings file's directory, which the lab does not know
            else:
                path = posixpath.join(m.root, raw)
        else:
            path = raw if raw.startswith("/") else posixpath.join(m.root, raw)
        path = posixpath.normpath(path)
        if path.startswith("//"):
            path = path[1:]
        if covers(m.root, path):
            return self.project + path[len(m.root):]
        home = m.home_dir
        if home is not None and covers(home, path):
            return self.world.home + path[len(home):]
        return path

    def paths(self, fs: Any, loc: tuple[Union[str, int], ...], key: str) -> list[str]:
        value = fs.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.error(loc + (key,), "must be a list of strings")
            return []
        out = []
        for i, raw in enumerate(value):
            mapped = self.world_path(raw)
            if mapped is None:
                why = ("a glob or a path relative to the settings file's directory: the lab cannot map it onto its "
                       "machine. Write an absolute (//) or ~/ path")
                if key.startswith("deny"):
                    self.error(loc + (key, i), why + "; a deny left out would widen the sandbox")
                else:
                    self.note(loc + (key, i), why + "; left out (an allow left out only narrows)")
                continue
            if self.source == "srt" and not raw.startswith(("/", "~")):
                self.note(loc + (key, i), f"a relative path: srt resolves it against the directory it runs in, not the "
                          f"settings file's; read here as relative to --project-root ({self.machine.root}), where an "
                          "agent starts it. Write it absolute if srt runs anywhere else")
            if self.world.root_of(mapped) is None and not any(covers(mapped, r) for r in self.world.roots):
                self.note(loc + (key, i), f"{mapped} is neither under --project-root nor under your home (~ or --home): "
                          "it names nothing on the simulated machine, so no attack reaches it here")
            out.append(mapped)
        return out

    def _section(self, obj: Any, loc: tuple[Union[str, int], ...], known: tuple[str, ...],
                 not_modelled: dict[str, str]) -> bool:
        """Check one settings object's keys: an unknown key is an error, a key the lab does not model a note.
        False when ``obj`` is no object at all (an error said)."""
        if not isinstance(obj, dict):
            self.error(loc, "must be a JSON object")
            return False
        for key in obj:
            if key not in known and key not in not_modelled:
                self.error(loc + (key,), f"unknown key. Known keys here: {', '.join((*known, *not_modelled))}")
            elif key == "disabled" and obj[key] is True and not_modelled is _NOT_MODELLED_FS:
                self.error(loc + (key,), "filesystem isolation is off: the lab cannot grade a sandbox without one")
            elif key in not_modelled:
                self.note(loc + (key,), f"not modelled, because {not_modelled[key]}")
        return True

    def filesystem(self, fs: Any, loc: tuple[Union[str, int], ...]) -> dict[str, list[str]]:
        if not self._section(fs, loc, _FS, _NOT_MODELLED_FS):
            return {}
        return {k: self.paths(fs, loc, k) for k in _FS if k in fs}

    def network(self, net: Any, loc: tuple[Union[str, int], ...]) -> dict[str, list[str]]:
        if not self._section(net, loc, _NET, _NOT_MODELLED_NET):
            return {}
        return {k: net[k] for k in _NET if k in net}

    def credentials(self, creds: Any, loc: tuple[Union[str, int], ...]) -> list[str]:
        if not isinstance(creds, dict):
            self.error(loc, "must be a JSON object")
            return []
        hidden: list[str] = []
        for key, value in creds.items():
            if key == "files" and isinstance(value, list):
                for i, entry in enumerate(value):
                    here = loc + ("files", i)
                    if not isinstance(entry, dict) or not isinstance(entry.get("path"), str) or entry.get("mode") not in ("deny", "mask"):
                        self.error(here, 'must be {"path": "...", "mode": "deny"}')
                        continue
                    if entry["mode"] == "mask":
                        self.note(here, 'mode "mask" hands the command a fake value; the lab reads it as a deny')
                    mapped = self.world_path(entry["path"])
                    if mapped is None:
                        self.error(here + ("path",), "a glob or a path relative to the settings file: cannot be mapped, "
                                   "and a mask left out would widen the sandbox")
                    else:
                        hidden.append(mapped)
            elif key == "envVars" and isinstance(value, list):
                for i, _ in enumerate(value):
                    self.note(loc + ("envVars", i), "not modelled, because the lab's sandbox inherits no secret environment variables")
            elif key in ("allowPlaintextInject", "awsPairs", "sigv4"):
                self.note(loc + (key,), "not modelled, because credential injection needs TLS termination, which the lab does not do")
            else:
                self.error(loc + (key,), "unknown key (or not a list). Known keys here: files, envVars, allowPlaintextInject")
        return hidden


def _read(source: Union[str, Path, dict[str, Any]], label: str) -> Any:
    if isinstance(source, dict):
        return source
    path = Path(source)
    try:
        raw = read_regular(path, LIMITS["file_bytes"], follow=True)
    except NotRegular as exc:
        raise PolicyError(label, [Problem("/", f"is {exc.what}, not a settings file.")]) from None
    except OSError as exc:
        raise PolicyError(label, [Problem("/", f"cannot be read: {exc.strerror or exc}.")]) from None
    except TooLarge:
        raise PolicyError(label, [Problem("/", f"the file is larger than {LIMITS['file_bytes']:,} bytes; a settings file is a few kilobytes.")]) from None
    try:
        return json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise PolicyError(label, [Problem("/", f"byte {exc.start} is not UTF-8. Save the file as UTF-8.")]) from None
    except json.JSONDecodeError as exc:
        raise PolicyError(label, [Problem("/", f"{json_problem(exc)}.")]) from None
    except RecursionError:  # thousands of nested brackets: the parser's stack, not a syntax error
        raise PolicyError(label, [Problem("/", "nested too deep to be a settings file.")]) from None


def import_settings(
    source: Union[str, Path, dict[str, Any]], kind: Source, machine: Machine, *,
    world: Optional[World] = None, world_project: Optional[str] = None, label: Optional[str] = None,
) -> Imported:
    """Read a Claude Code or srt settings file as a Sandbox Lab policy; raise ``PolicyError`` where it fails closed."""
    w = world or load_world()
    name = label or (str(source) if not isinstance(source, dict) else "settings")
    project = world_project or w.projects[0]
    if project not in w.projects:
        raise PolicyError(name, [Problem("/", f"--world-project must be one of {', '.join(w.projects)}")])
    data = _read(source, name)
    bad_text = text_problems(data)
    if bad_text:  # a lone surrogate or a NUL anywhere (a key the importer skips too): refused before it is read
        raise PolicyError(name, bad_text)
    r = _Reader(kind, machine, w, project, name)
    if not isinstance(data, dict):
        raise PolicyError(name, [Problem("/", "a settings file is a JSON object")])
    if kind == "claude-code":
        for key in data:
            if key == "sandbox":
                continue
            if key == "permissions":
                r.note(("permissions",), "not modelled, because permission rules govern Claude Code's own tools (Read, Edit, "
                       "WebFetch); the lab's attacks run as sandboxed commands")
            elif key != "$schema":
                r.note((key,), "not about the sandbox; not read")
        block = data.get("sandbox")
        loc: tuple[Union[str, int], ...] = ("sandbox",)
        if not isinstance(block, dict):
            raise PolicyError(name, [Problem("/sandbox", 'missing or not an object: a Claude Code settings file without '
                                             '"sandbox" runs every command unsandboxed')])
        if block.get("enabled") is not True:
            r.error(loc + ("enabled",), "the sandbox is not enabled (sandbox.enabled is not true): every command runs "
                    "unsandboxed, and the lab cannot grade that as a sandbox")
        for key in block:
            if key not in _NOT_MODELLED_SANDBOX:
                r.error(loc + (key,), "unknown key in Claude Code's sandbox block (its schema allows none)")
            elif _NOT_MODELLED_SANDBOX[key]:
                r.note(loc + (key,), f"not modelled, because {_NOT_MODELLED_SANDBOX[key]}")
    else:
        block, loc = data, ()
        for key in data:
            if key not in _SRT_TOP:
                r.error((key,), "unknown key in srt's settings (its schema is strict)")
            elif key in _NOT_MODELLED_SRT:
                r.note((key,), f"not modelled, because {_NOT_MODELLED_SRT[key]}")
    if kind == "claude-code" and "filesystem" not in block:
        r.note(loc + ("filesystem",), "absent: Claude Code still lets sandboxed commands write its working directory "
               "(your project), and reads stay open; the imported policy grants no write, so grade it with "
               "--target claude-code to count the working directory as writable")
    fs = r.filesystem(block.get("filesystem", {}), loc + ("filesystem",))
    net = r.network(block.get("network", {}), loc + ("network",))
    hidden = r.credentials(block["credentials"], loc + ("credentials",)) if "credentials" in block else []
    if hidden:
        fs["denyRead"] = [*fs.get("denyRead", []), *[h for h in hidden if h not in fs.get("denyRead", [])]]
    if r.errors:
        raise PolicyError(name, r.errors)
    policy = load_policy({"filesystem": fs, "network": net}, name=name)
    return Imported(policy, tuple(r.unmapped))
