"""The real tools' escape hatches: the settings that let commands skip the sandbox, and a judge of "find the hole".

A policy's filesystem and network rules hold only for commands that run in
the sandbox. Claude Code's ``sandbox`` settings carry other keys that decide
*whether* a command runs in it at all, and several default to open
(``allowUnsandboxedCommands`` true, ``failIfUnavailable`` false). Each
``Hatch`` is one record (the shape of ``srt_notes.RULES``): the key, its
default, what it does, when its value leaves a way around the sandbox, and the
fix. Facts from Claude Code's settings schema (SchemaStore's
``claude-code-settings.json``, property ``sandbox``), its sandboxing
documentation and sandbox-runtime 0.0.83's README (``allowAllUnixSockets``
with ``enableWeakerNestedSandbox``), as ``/work/shared/reference`` records them.

``EXERCISES`` are settings files with a hole in them; ``judge`` takes a
learner's answer (the keys that make the file unsafe, and the file fixed) and
judges it against the facts alone: the holes of a file are computed from
``HATCHES`` (``holes``), never stored beside it, so the exercise and the facts
cannot disagree. An answer passes only if it names every hole and nothing
else (naming every key does not pass), and its fixed file closes every hole
(an absent key is its default: deleting ``allowUnsandboxedCommands`` leaves it
true), keeps the sandbox on, and leaves the filesystem and network rules as
they were (switching the sandbox off or widening the rules is no fix).

Pure. Imports nothing of the package.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional, Union

__all__ = ["EXERCISES", "HATCHES", "Exercise", "Hatch", "HoleVerdict", "exercise", "hatch", "holes", "judge", "key_of"]


@dataclass(frozen=True)
class Hatch:
    """One key of Claude Code's ``sandbox`` settings that decides whether commands are sandboxed, as facts."""

    key: str  # the path under "sandbox", dotted: "excludedCommands", "network.allowAllUnixSockets"
    default: Any  # the value when the key is absent
    does: str  # what it does, one sentence
    open_when: Callable[[Any], bool]  # the effective value (or the default) leaves a way around the sandbox
    why: str  # what a compromised agent does with it
    fix: str  # the safe setting

    def is_open(self, sandbox: Mapping[str, Any]) -> bool:
        """Does this key, as ``sandbox`` sets it (or by default), leave a way around the sandbox?"""
        present, value = _get(sandbox, self.key)
        return self.open_when(value if present else self.default)


def _get(block: Mapping[str, Any], dotted: str) -> tuple[bool, Any]:
    node: Any = block
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


# Fail closed: a value of the wrong type (the string "false", a list where a boolean belongs) is open,
# since the tool would not read it as the safe value.
HATCHES: tuple[Hatch, ...] = (
    Hatch("enabled", False, "turns the sandbox on for Bash commands; off, no rule of the file applies",
          lambda v: v is not True,
          "with the sandbox off every command runs with the user's own rights: every file, every host",
          'set "enabled": true'),
    Hatch("allowUnsandboxedCommands", True,
          "lets a command that failed in the sandbox be retried outside it (the dangerouslyDisableSandbox "
          "parameter); true by default",
          lambda v: v is not False,
          "a command the sandbox refused (cat ~/.ssh/id_rsa, a POST to a host not allowed) is retried unsandboxed "
          "after one permission prompt (none in a mode that skips prompts): the boundary becomes a question a busy "
          "person answers",
          'set "allowUnsandboxedCommands": false, so every command runs sandboxed (deleting the key leaves it true)'),
    Hatch("excludedCommands", [], "names commands that never run in the sandbox",
          lambda v: not (isinstance(v, list) and not v),
          "an excluded command runs with every file and host: an excluded git can push the project anywhere and "
          "run any program through its hooks and -c options; an excluded docker can mount the whole home",
          "exclude nothing: run such a tool yourself, outside the agent, or give it what it needs inside the sandbox"),
    Hatch("failIfUnavailable", False,
          "decides what happens when the sandbox cannot start (bubblewrap or socat missing, an unsupported "
          "platform): false by default, which shows a warning and runs every command unsandboxed",
          lambda v: v is not True,
          "on a machine where the sandbox cannot start, every command runs unsandboxed after a warning nobody "
          "reads, and the file's rules protect nothing",
          'set "failIfUnavailable": true, so a sandbox that cannot start is an error, not a warning'),
    Hatch("enableWeakerNestedSandbox", False,
          "a weaker mode for running inside an unprivileged Docker container, where the full sandbox cannot start",
          lambda v: v is not False,
          "the weaker mode holds less than the sandbox the rules were written for; with allowAllUnixSockets as well, "
          "srt 0.0.83 also lets a command make user namespaces of its own, and denyWrite and the mandatory denies "
          "then no longer hold against it",
          "leave it off (false or absent), unless the container around the agent isolates it by itself"),
    Hatch("network.allowAllUnixSockets", False,
          "opens every Unix socket to sandboxed commands (by default each one must be listed in allowUnixSockets)",
          lambda v: v is not False,
          "the Docker socket is root on the machine: docker run -v /:/host reads every file and reaches every host; "
          "the SSH agent's socket signs logins with the user's key",
          "leave it off, and list only the sockets the job needs in network.allowUnixSockets"),
    Hatch("autoAllowBashIfSandboxed", True,
          "runs commands without a permission prompt when they run in the sandbox; true by default",
          lambda v: False,
          "nothing by itself: it skips the prompt only for commands the sandbox confines, so the sandbox's rules "
          "are the check; it is the other keys that let commands out of the sandbox",
          "keep it as it is; make sure nothing else lets a command out of the sandbox"),
)

_BY_KEY = {x.key: x for x in HATCHES}

# Every other key of Claude Code's sandbox settings (its schema): real keys, but none of them lets a command
# skip the sandbox. A learner who names one is told so, not told that the key does not exist.
_RULE_KEYS = frozenset({
    "filesystem", "filesystem.allowWrite", "filesystem.denyWrite", "filesystem.denyRead", "filesystem.allowRead",
    "filesystem.allowManagedReadPathsOnly", "filesystem.disabled",
    "network", "network.allowedDomains", "network.deniedDomains", "network.allowUnixSockets",
    "network.allowLocalBinding", "network.httpProxyPort", "network.socksProxyPort",
    "network.allowManagedDomainsOnly", "network.strictAllowlist", "network.tlsTerminate",
    "credentials", "ignoreViolations", "enableWeakerNetworkIsolation", "ripgrep",
})


def hatch(key: str) -> Hatch:
    """The hatch at ``key`` (dotted, under "sandbox"); KeyError if it is not one."""
    return _BY_KEY[key]


def key_of(name: str) -> Optional[str]:
    """A learner's name for a key as its dotted path under "sandbox", or None when no such key exists.

    Accepts "excludedCommands", "sandbox.excludedCommands", "/sandbox/excludedCommands",
    "allowAllUnixSockets" and "network.allowAllUnixSockets" alike.
    """
    n = name.strip().strip("`\"'").strip()
    n = n.strip("/").replace("/", ".") if n.startswith("/") else n
    if n.startswith("sandbox."):
        n = n[len("sandbox."):]
    known = set(_BY_KEY) | _RULE_KEYS
    if n in known:
        return n
    tails = [k for k in known if k.rpartition(".")[2] == n]
    return tails[0] if len(tails) == 1 else None


def holes(settings: Mapping[str, Any]) -> tuple[str, ...]:
    """The keys of a settings file that let commands around its sandbox, in ``HATCHES`` order (facts, not stored)."""
    block = settings.get("sandbox")
    sandbox: Mapping[str, Any] = block if isinstance(block, Mapping) else {}
    return tuple(x.key for x in HATCHES if x.is_open(sandbox))


# --- the exercises ---------------------------------------------------------------------------------

# Claude Code's own path forms: "~/" the home, "//" an absolute path, "." the working directory. Reads are allowed
# by default, so the home is hidden with denyRead and the project (inside it) re-allowed with allowRead.
_RULES_FS = {"denyRead": ["~/", "//etc/secrets"], "allowRead": ["."]}


@dataclass(frozen=True)
class Exercise:
    """A settings.json with a hole in it, and the story of how it came to be."""

    id: str
    story: str
    settings: Mapping[str, Any]

    def text(self) -> str:
        return json.dumps(self.settings, indent=2)


EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        "defaults-left-open",
        "The team turned the sandbox on, wrote tight rules (nothing of the home directory readable but the project, "
        "no /etc/secrets, no network) and left every other key at its default.",
        {"sandbox": {"enabled": True, "filesystem": _RULES_FS, "network": {"allowedDomains": []}}},
    ),
    Exercise(
        "git-excluded",
        "git kept failing in the sandbox, so someone excluded it; the rest was hardened by a colleague who had "
        "read the documentation.",
        {"sandbox": {"enabled": True, "autoAllowBashIfSandboxed": True, "allowUnsandboxedCommands": False,
                     "failIfUnavailable": True, "excludedCommands": ["git"], "filesystem": _RULES_FS,
                     "network": {"allowedDomains": ["github.com"]}}},
    ),
    Exercise(
        "nested-in-docker",
        "The agent runs inside an unprivileged Docker container (a dev container), where the full sandbox cannot "
        "start, and its tests start containers of their own.",
        {"sandbox": {"enabled": True, "allowUnsandboxedCommands": False, "failIfUnavailable": True,
                     "enableWeakerNestedSandbox": True, "filesystem": _RULES_FS,
                     "network": {"allowedDomains": [], "allowAllUnixSockets": True}}},
    ),
)

_EXERCISES = {e.id: e for e in EXERCISES}


def exercise(exercise_id: str) -> Exercise:
    """The exercise called ``exercise_id``; KeyError naming the known ones otherwise."""
    try:
        return _EXERCISES[exercise_id]
    except KeyError:
        raise KeyError(f"unknown exercise {exercise_id!r}; known: {', '.join(_EXERCISES)}") from None


# --- judging an answer -----------------------------------------------------------------------------


def _without_hatches(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings with every hatch key removed: the rules, and everything else the file says."""
    out = json.loads(json.dumps(settings))  # a deep copy of plain JSON values
    block = out.get("sandbox")
    if isinstance(block, dict):
        for key in _BY_KEY:
            parent, _, last = key.rpartition(".")
            node = block.get(parent) if parent else block
            if isinstance(node, dict):
                node.pop(last, None)
    return dict(out)


def _fix_problems(ex: Exercise, fixed: Union[Mapping[str, Any], str]) -> list[str]:
    if isinstance(fixed, str):
        try:
            parsed = json.loads(fixed)
        except json.JSONDecodeError as exc:
            return [f"the fixed settings are not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"]
    else:
        parsed = fixed
    if not isinstance(parsed, Mapping) or not isinstance(parsed.get("sandbox"), Mapping):
        return ['the fixed settings need their "sandbox" block']
    problems = []
    for key in holes(parsed):
        x = hatch(key)
        present, value = _get(parsed["sandbox"], key)
        now = json.dumps(value) if present else f"absent, so its default {json.dumps(x.default)}"
        problems.append(f"still open: sandbox.{key} is {now}. Fix: {x.fix}.")
    if _without_hatches(parsed) != _without_hatches(ex.settings):
        problems.append("the filesystem and network rules (and the rest of the file) must stay as they were: the hole "
                        "is not in them, and a fix that changes them changes what the job may do")
    return problems


@dataclass(frozen=True)
class HoleVerdict:
    """The judgement of one answer: what was named right and wrong, what was missed, and what the fix leaves open."""

    exercise: Exercise
    answered: bool
    named_right: tuple[str, ...] = ()
    named_wrong: tuple[str, ...] = ()  # dotted keys that are no hole here, or names of no key at all
    missed: tuple[str, ...] = ()
    fix_problems: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.answered and not self.named_wrong and not self.missed and not self.fix_problems

    @property
    def score(self) -> float:
        """From 0 to 1: half for the keys (right over right, wrong and missed together), half for the fix."""
        if not self.answered:
            return 0.0
        seen = len(self.named_right) + len(self.named_wrong) + len(self.missed)
        keys = len(self.named_right) / seen if seen else 0.0
        return round(0.5 * keys + (0.0 if self.fix_problems else 0.5), 3)

    @property
    def result(self) -> str:
        """In the learner's words, for the progress board."""
        return "right" if self.passed else "partly" if self.score > 0 else "wrong"

    def text(self) -> str:
        ex = self.exercise
        if not self.answered:
            return (f"Not answered yet ({ex.id}): name the key(s) that let a command around the sandbox, and write "
                    "the settings fixed.")
        lines = [f"{'Right' if self.passed else 'Not yet'} ({ex.id}):"]
        lines += [f"  + sandbox.{k}: a hole: {hatch(k).why}." for k in self.named_right]
        for k in self.named_wrong:
            if k in _BY_KEY:
                lines.append(f"  - sandbox.{k}: no hole here. It {hatch(k).does}; as set here it lets nothing out.")
            elif k in _RULE_KEYS:
                lines.append(f"  - sandbox.{k}: no hole here: the rules are tight, the hole is in what lets commands skip them.")
            else:
                lines.append(f"  - {k}: not a key of Claude Code's sandbox settings.")
        lines += [f"  ? missed: sandbox.{k}" + (" (absent from the file: its default applies)" if not _get(ex.settings["sandbox"], k)[0] else "")
                  for k in self.missed]
        lines += [f"  fix: {p}" for p in self.fix_problems]
        if not self.fix_problems:
            lines.append("  fix: every hole closed, the sandbox on, the rules unchanged.")
        lines.append("Why, from the reference facts:")
        lines += [f"  sandbox.{k} ({'absent, default ' + json.dumps(hatch(k).default) if not _get(ex.settings['sandbox'], k)[0] else 'set'}): "
                  f"{hatch(k).does}. Fix: {hatch(k).fix}." for k in holes(ex.settings)]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()


def judge(exercise_id: str, keys: Iterable[str], fixed: Union[Mapping[str, Any], str, None]) -> HoleVerdict:
    """Judge an answer to exercise ``exercise_id``: the keys named as holes, and the settings fixed.

    No key named is "not answered yet", whatever ``fixed`` holds (a lesson's cell starts from an unchanged copy
    of the file): never a failure that stops a notebook, and nothing to record.
    """
    ex = exercise(exercise_id)
    names = [k for k in keys if str(k).strip()]
    if not names:
        return HoleVerdict(ex, answered=False)
    expected = holes(ex.settings)
    named: list[str] = []
    for n in names:
        k = key_of(str(n))
        named.append(k if k is not None else str(n).strip())
    named = list(dict.fromkeys(named))
    right = tuple(k for k in named if k in expected)
    wrong = tuple(k for k in named if k not in expected)
    missed = tuple(k for k in expected if k not in named)
    fix = tuple(_fix_problems(ex, fixed)) if fixed is not None else ("no fixed settings given",)
    return HoleVerdict(ex, True, right, wrong, missed, fix)
