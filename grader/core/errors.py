"""The exception hierarchy of Sandbox Lab, and how problems are pointed at in JSON.

Every error a learner can cause is a ``SandboxLabError``; nothing else should
escape the CLI or the widgets. The tree::

    SandboxLabError
    ├── PolicyError (ValueError)        a policy file that cannot be used
    ├── TaskError (LookupError)         an unknown task, a broken task file
    ├── WorldError (ValueError)         a world file (world.json) that does not describe a world
    ├── LevelError (LookupError)        an unknown capture-the-flag level, a broken level file
    └── BackendError (RuntimeError)     the machinery failed, not the policy
        ├── DockerUnavailable           no engine answers
        ├── ImageBuildError             images could not be built
        ├── InfrastructureError         the sink, DNS server or proxy died mid-run
        └── ProbeTimeout                the sandbox outlived its wall clock

This module imports nothing from the rest of the package.
"""

from __future__ import annotations

import difflib

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence, Union

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = [
    "BackendError",
    "DockerUnavailable",
    "ImageBuildError",
    "InfrastructureError",
    "LevelError",
    "PolicyError",
    "Problem",
    "ProbeTimeout",
    "SandboxLabError",
    "TaskError",
    "WorldError",
    "field_problem",
    "json_pointer",
    "plain_problem",
    "problems_text",
]

Loc = Sequence[Union[str, int]]


def json_pointer(loc: Loc) -> str:
    """Turn a location such as ``("network", "allowedDomains", 0)`` into ``/network/allowedDomains/0``.

    Escapes ``~`` and ``/`` as RFC 6901 says, so a key containing a slash still
    points at one place.
    """
    if not loc:
        return "/"
    parts = [str(p).replace("~", "~0").replace("/", "~1") for p in loc]
    # a key may hold a lone surrogate (JSON can write one, UTF-8 cannot): escaped, so every message can be printed
    return ("/" + "/".join(parts)).encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass(frozen=True)
class Problem:
    """One thing wrong (or worth a warning) at one place in a policy."""

    pointer: str
    message: str

    def __str__(self) -> str:
        return f"{self.pointer}: {self.message}"


def problems_text(source: str, what: str, problems: Sequence[Problem]) -> str:
    """How every data file's problems read: ``<source> is not a valid <what> (N problems)``, then one per line."""
    n = len(problems)
    head = f"{source} is not a valid {what} ({n} problem{'s' if n != 1 else ''})"
    return "\n".join([head, *(f"  {p}" for p in problems)])


class SandboxLabError(Exception):
    """Base class of every error Sandbox Lab raises on purpose."""


class PolicyError(SandboxLabError, ValueError):
    """A policy that cannot be used, with every problem found, not only the first."""

    def __init__(self, source: str, problems: Iterable[Problem]) -> None:
        self.source = source
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__(self._render())

    def _render(self) -> str:
        return problems_text(self.source, "policy", self.problems)

    def as_json(self) -> list[dict[str, str]]:
        return [{"pointer": p.pointer, "message": p.message} for p in self.problems]


class TaskError(SandboxLabError, LookupError):
    """An unknown task id or a task file that does not describe a task."""


class WorldError(SandboxLabError, ValueError):
    """A world file that cannot be used, with every problem found (as ``PolicyError`` lists a policy's)."""

    def __init__(self, source: str, problems: Iterable[Problem]) -> None:
        self.source = source
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__(problems_text(source, "world", self.problems))


class LevelError(SandboxLabError, LookupError):
    """An unknown capture-the-flag level, or a level file that does not describe one (every problem listed)."""

    def __init__(self, message: str, problems: Iterable[Problem] = ()) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("\n".join([message, *(f"  {p}" for p in self.problems)]))


class BackendError(SandboxLabError, RuntimeError):
    """The grading machinery failed; the policy was not judged."""


def field_problem(ptr: str, kind: str, key: str, model: "Optional[type[BaseModel]]") -> Problem:
    """The message for the two pydantic errors every data file shares: an unknown key (with "did you mean")
    or a missing one (with the field's description). ``model`` is the pydantic model at that place, if known."""
    known = list(model.model_fields) if model else []
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hint = f' Did you mean "{close[0]}"?' if close else f" Known keys here: {', '.join(known)}."
        return Problem(ptr, "unknown key (usually a typo)." + hint)
    field = model.model_fields.get(key) if model else None
    why = f": {field.description}" if field and field.description else ""
    return Problem(ptr, f'missing. Add "{key}"{why}.')


# What a value of the wrong JSON kind is told where a data file has nothing more specific to say.
_PLAIN = {
    **dict.fromkeys(("model_type", "model_attributes_type", "dict_type"), "must be a JSON object."),
    **dict.fromkeys(("tuple_type", "list_type"), "must be a JSON list, e.g. []."),
    "string_type": "must be a string.",
    "bool_type": "must be true or false.",
    **dict.fromkeys(("too_short", "string_too_short"), "must not be empty."),
}


def plain_problem(ptr: str, err: Mapping[str, Any]) -> Problem:
    """The message for a pydantic error that any data file words the same way (a wrong kind of value, an empty
    list, a value not among the allowed ones); otherwise pydantic's own message. Call it after the file's own cases."""
    kind = err["type"]
    if kind == "literal_error":
        return Problem(ptr, f"must be {err.get('ctx', {}).get('expected', 'one of the listed values')}.")
    return Problem(ptr, _PLAIN.get(kind, str(err["msg"])))


def in_checkout(script: str) -> bool:
    """Is this package running from a Sandbox Lab checkout that has ``scripts/<script>``? (A wheel has no scripts.)"""
    from pathlib import Path

    return (Path(__file__).resolve().parents[2] / "scripts" / script).is_file()


class DockerUnavailable(BackendError):
    """No Docker engine answers."""

    def __init__(self, detail: str = "") -> None:
        self.detail = detail
        how = (
            "Start it with `scripts/ensure-docker` (as root on Debian/Ubuntu)"
            if in_checkout("ensure-docker")
            else "Install and start Docker (Debian/Ubuntu: `sudo apt-get install docker.io && sudo systemctl start docker`; "
            "elsewhere Docker Desktop), or point DOCKER_HOST at an engine"
        )
        msg = (
            "No Docker engine answers"
            + (f" ({detail})" if detail else "")
            + f". {how}, or use `--backend static` for a prediction without Docker."
        )
        super().__init__(msg)


class ImageBuildError(BackendError):
    """The project's images could not be built."""


class InfrastructureError(BackendError):
    """A service of the simulated internet failed during a run; its evidence cannot be trusted."""


class ProbeTimeout(BackendError):
    """The sandbox did not finish within its wall-clock limit and was killed."""
