"""What every ``sandbox-lab`` command shares: the exit-code table, how a command is declared, the backend choice.

``cli.py`` holds the one registry (``COMMANDS``) and ``main``; the command
bodies live in ``cli_commands.py``. Both take their vocabulary from here, so an
exit code, a stream or a backend is chosen the same way by every command.
"""

from __future__ import annotations

import argparse
import inspect
import json
from dataclasses import dataclass
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Callable, Optional, TextIO, Union

from grader import backends

if TYPE_CHECKING:
    from grader.backends.base import Backend

__all__ = [
    "EXIT_BACKEND",
    "EXIT_CODES",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_INVALID",
    "EXIT_NOT_FULL",
    "EXIT_OK",
    "PROG",
    "Arg",
    "Command",
    "Streams",
    "UsageError",
    "api_default",
    "arg",
    "dump",
    "error_json",
    "given",
    "lend_backends",
    "make_backend",
    "one_line",
    "pick_backend",
    "progress_to",
]

PROG = "sandbox-lab"

EXIT_OK = 0
EXIT_NOT_FULL = 1
EXIT_INVALID = 2
EXIT_BACKEND = 3
EXIT_INTERNAL = 4
EXIT_INTERRUPTED = 130

# The one table: ``--help`` prints it, README.md repeats it, and a test keeps the two equal.
EXIT_CODES: tuple[tuple[int, str], ...] = (
    (EXIT_OK, "done; for grade, full marks; for attack, the flag was captured"),
    (EXIT_NOT_FULL, "graded below full marks (grade); the flag was not captured (attack)"),
    (EXIT_INVALID, "invalid policy or usage: a bad argument, an unknown task, an unreadable input, a bad $SANDBOX_LAB_BACKEND"),
    (EXIT_BACKEND, "backend unavailable or failed: no Docker engine, images that cannot be built, a broken run"),
    (EXIT_INTERNAL, "internal error: a bug in Sandbox Lab (SANDBOX_LAB_DEBUG=1 shows the traceback)"),
    (EXIT_INTERRUPTED, "interrupted: Ctrl-C, or the reader of the output went away (grade-batch resumes when rerun)"),
)


@dataclass(frozen=True)
class Streams:
    """Where a command writes: results to ``out``, messages and progress to ``err``."""

    out: TextIO
    err: TextIO


@dataclass(frozen=True)
class Arg:
    """One ``add_argument`` call, kept as data so a command is declared in one place."""

    flags: tuple[str, ...]
    options: tuple[tuple[str, Any], ...] = ()  # keyword arguments, as pairs: nothing here is mutable


def arg(*flags: str, **options: Any) -> Arg:
    return Arg(flags, tuple(options.items()))


@dataclass(frozen=True)
class Command:
    """A subcommand: its name, one line of help, its arguments and the function that runs it.

    ``run`` returns an exit code from ``EXIT_CODES`` or raises; ``cli.main``
    turns every exception into its exit code and message (JSON under ``--json``).
    ``declared`` is the arguments, or a function returning them: a command whose
    defaults are read from a heavy API module (``api_default``) declares them so,
    and the parser calls it only when that command is the one being parsed.
    """

    name: str
    help: str
    run: Callable[[argparse.Namespace, Streams], int]
    declared: Union[tuple[Arg, ...], Callable[[], tuple[Arg, ...]]] = ()
    description: str = ""

    @property
    def args(self) -> tuple[Arg, ...]:
        return self.declared() if callable(self.declared) else self.declared


class UsageError(Exception):
    """Arguments that parse but do not make sense together; exit code 2."""


def one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def api_default(func: Callable[..., Any], name: str) -> Any:
    """The default of ``func``'s parameter ``name``: the CLI shows and uses it instead of typing it again."""
    default = inspect.signature(func).parameters[name].default
    if default is inspect.Parameter.empty:
        raise TypeError(f"{func.__qualname__}() has no default for {name!r}")
    return default


def given(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    """The options among ``names`` the user gave (declared with ``default=argparse.SUPPRESS``).

    For API functions behind an import the parser must not make (the Docker
    SDK): a flag left out is not passed, so the function's own default applies.
    """
    return {n: getattr(args, n) for n in names if hasattr(args, n)}


def progress_to(io: Streams) -> Callable[[str], None]:
    """A progress callback writing ``sandbox-lab: <line>`` to stderr at once (image builds take a while)."""

    def progress(line: str) -> None:
        io.err.write(f"{PROG}: {line}\n")
        io.err.flush()

    return progress


# Where ``pick_backend`` takes its backends from when not made here: the warm engine (``cli.engine``) lends the
# backends it keeps, so a command run there does not make (or close) one per run. None: made per command.
BackendSource = Callable[[Optional[str], bool, Callable[[str], None]], AbstractContextManager["Backend"]]
_source: Optional[BackendSource] = None


def lend_backends(source: Optional[BackendSource]) -> None:
    """From now on, ``pick_backend`` asks ``source`` (name or None, shared, progress); None: make one per command."""
    global _source
    _source = source


def pick_backend(args: argparse.Namespace, io: Streams, *, shared: bool = False) -> AbstractContextManager[Backend]:
    """``--backend`` if given, else ``backends.default()``, which honours ``$SANDBOX_LAB_BACKEND``; use it in a ``with``.

    ``shared``: a one-shot command (probe, grade, attack) that reuses the machine's
    shared simulated internet rather than starting its own (``backends.get``).
    Where backends are lent (``lend_backends``), the ``with`` borrows one and leaves it open."""
    progress = progress_to(io)
    if _source is not None:
        return _source(args.backend, shared, progress)
    return make_backend(args.backend, shared=shared, progress=progress)


def make_backend(name: Optional[str], *, shared: bool, progress: Callable[[str], None]) -> Backend:
    """The backend ``name`` (``--backend``), or None: ``backends.default()``, which honours ``$SANDBOX_LAB_BACKEND``."""
    try:
        if name:
            return backends.get(name, progress=progress, shared=shared)
        return backends.default(progress=progress, shared=shared)
    except ValueError as exc:  # only from a bad SANDBOX_LAB_BACKEND: --backend has fixed choices
        raise UsageError(f"{backends.BACKEND_ENV}: {exc}") from None


def error_json(message: str, problems: Any = ()) -> dict[str, Any]:
    """The JSON every command prints on stdout for an error under ``--json``."""
    return {"error": message, "problems": list(problems)}
