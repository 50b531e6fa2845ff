"""The ``sandbox-lab`` command line: parse arguments, call the package, map every outcome to an exit code.

Thin on purpose (httpx's ``_main.py`` is the model): each subcommand is one
``_run_<name>`` function plus one ``Command`` entry in ``COMMANDS``, and all the
work happens in the package. This is the only module that reads argv, writes
to the terminal or chooses exit codes:

    0    the command did its job (a run that completed, whatever the attacks did)
    1    an unexpected internal error (a bug: please report it)
    2    an invalid policy or invalid usage
    3    the backend is unavailable or failed (no Docker engine, a broken run)
    130  interrupted (Ctrl-C)

No traceback reaches a learner: every ``SandboxLabError`` becomes a clean
message (``SANDBOX_LAB_DEBUG=1`` shows the traceback of an internal error).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence, TextIO

from . import __version__
from . import backends
from .analyzer import lint, predict
from .cli_grading import add_grading_commands
from .errors import BackendError, PolicyError, SandboxLabError, TaskError
from .export import TARGETS, export
from .plan import build_plan
from .policy import Policy, load_policy, policy_schema
from .report import render_check, render_json, render_policy_error, render_text, result_json, summary
from .srt_notes import srt_differences

__all__ = ["COMMANDS", "EXIT_BACKEND", "EXIT_BUG", "EXIT_INTERRUPTED", "EXIT_INVALID", "EXIT_OK", "Command", "main"]

EXIT_OK = 0
EXIT_BUG = 1
EXIT_INVALID = 2
EXIT_BACKEND = 3
EXIT_INTERRUPTED = 130

PROG = "sandbox-lab"


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
    """A subcommand: its name, one line of help, its arguments and the function that runs it."""

    name: str
    help: str
    run: Callable[[argparse.Namespace, Streams], int]
    args: tuple[Arg, ...] = ()
    description: str = ""


class UsageError(Exception):
    """Arguments that parse but do not make sense together; exit code 2."""


# --- helpers --------------------------------------------------------------------------------


def _color(choice: str, stream: TextIO) -> bool:
    if choice == "always":
        return True
    if choice == "never":
        return False
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _width() -> int:
    return max(60, min(160, shutil.get_terminal_size((100, 24)).columns))


def _dump(obj: Any) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def _load(path: str) -> Policy:
    return load_policy(path)


# --- commands -------------------------------------------------------------------------------


def _run_check(args: argparse.Namespace, io: Streams) -> int:
    try:
        policy = _load(args.policy)
    except PolicyError as exc:
        if not args.json:
            raise
        io.out.write(_dump({"valid": False, "source": exc.source, "errors": exc.as_json()}))
        return EXIT_INVALID
    warnings = lint(policy)
    findings = predict(policy)
    srt = srt_differences(policy)  # where the real sandbox-runtime would not do what these verdicts say
    if args.json:
        io.out.write(_dump({
            "valid": True,
            "source": args.policy,
            "policy": policy.normalize(),
            "warnings": [{"pointer": w.pointer, "message": w.message} for w in warnings],
            "findings": result_json(findings)["probes"],
            "summary": summary(findings),
            "srt_differences": [{"pointer": w.pointer, "message": w.message, "cause": cause} for cause, w in srt],
        }))
    else:
        warnings += tuple(w for _, w in srt)
        io.out.write(render_check(policy, args.policy, warnings, findings, color=_color(args.color, io.out), width=_width()))
    return EXIT_OK


def _run_probe(args: argparse.Namespace, io: Streams) -> int:
    policy: Optional[Policy] = None
    if args.plain_container:
        if args.policy:
            io.err.write(f"{PROG}: note: --plain-container runs the plain container; {args.policy} is not used.\n")
    elif args.policy is None:
        raise UsageError("probe needs a POLICY file (or --plain-container for the plain-container baseline)")
    else:
        policy = _load(args.policy)

    def progress(line: str) -> None:
        io.err.write(f"{PROG}: {line}\n")
        io.err.flush()

    try:
        backend = backends.get(args.backend, progress=progress) if args.backend else backends.default(progress=progress)
    except ValueError as exc:  # only from a bad SANDBOX_LAB_BACKEND: --backend has fixed choices
        raise UsageError(f"{backends.BACKEND_ENV}: {exc}") from None
    result = backend.run(build_plan(policy))
    if args.json:
        for note in result.notes:
            io.err.write(f"{PROG}: note: {note}\n")
        io.out.write(render_json(result))
    else:
        warnings = lint(policy) if policy is not None else ()
        io.out.write(render_text(result, warnings=warnings, color=_color(args.color, io.out), width=_width()))
    return EXIT_OK


def _run_schema(args: argparse.Namespace, io: Streams) -> int:
    io.out.write(_dump(policy_schema()))
    return EXIT_OK


def _run_export(args: argparse.Namespace, io: Streams) -> int:
    text, notes = export(_load(args.policy), args.to)
    io.out.write(text)
    for note in notes:
        io.err.write(f"# {note}\n")
    return EXIT_OK


_POLICY = arg("policy", metavar="POLICY", help="the policy file (JSON)")
_JSON = arg("--json", action="store_true", help="print machine-readable JSON instead of text")
_COLOR = arg(
    "--color", choices=("auto", "always", "never"), default="auto",
    help="colour the table: red where an attack succeeded, green where a job works (default: auto, i.e. on a terminal)",
)

def _run_setup(args: argparse.Namespace, io: Streams) -> int:
    from .backends.docker import client_from_env
    from .backends.images import ensure_images

    def progress(line: str) -> None:
        io.err.write(f"{PROG}: {line}\n")
        io.err.flush()

    images = ensure_images(client_from_env(), progress, rebuild=args.rebuild)
    io.out.write(f"sandbox image:  {images.sandbox}\nservices image: {images.services}\n")
    return EXIT_OK


def _run_cleanup(args: argparse.Namespace, io: Streams) -> int:
    from .backends.docker import cleanup, client_from_env

    removed = cleanup(client_from_env(), everything=args.all)
    for item in removed:
        io.out.write(f"removed {item}\n")
    io.out.write(f"{len(removed)} leftover(s) removed\n")
    return EXIT_OK


COMMANDS: tuple[Command, ...] = (
    Command(
        "check", "validate a policy and predict what it allows", _run_check,
        (_POLICY, _JSON, _COLOR),
        "Validate POLICY, print it as Sandbox Lab reads it, its warnings and the static findings. "
        "Exit 0 when valid, 2 when not (the problems go to stderr, or into the JSON with --json).",
    ),
    Command(
        "probe", "run the exfiltration probes against a policy", _run_probe,
        (
            arg("policy", metavar="POLICY", nargs="?", help="the policy file (JSON); optional with --plain-container"),
            arg(
                "--backend", choices=backends.BACKEND_NAMES, default=None,
                help="static: predict; docker: run real containers; auto (default): docker when an engine answers, "
                f"else static with a notice. ${backends.BACKEND_ENV} changes the default.",
            ),
            arg("--plain-container", action="store_true", help="probe the plain container (home and projects mounted read-write, ordinary networking) instead of a policy"),
            _JSON,
            _COLOR,
        ),
        "Run every probe of the catalogue against the sandbox POLICY describes and report what happened. "
        "Exit 0 when the run completed, 2 for an invalid policy, 3 when the backend is unavailable or failed.",
    ),
    Command("schema", "print the policy's JSON Schema (for editors)", _run_schema),
    Command(
        "setup", "build the Docker images the probes run in (once; reused until a Dockerfile changes)", _run_setup,
        (arg("--rebuild", action="store_true", help="rebuild the sandbox and services images even if current"),),
    ),
    Command(
        "cleanup", "remove containers, networks and directories left by killed runs", _run_cleanup,
        (arg("--all", action="store_true", help="also remove what runs still in progress are using"),),
    ),
    Command(
        "export", "translate a policy for sandbox-runtime, Claude Code or docker run", _run_export,
        (_POLICY, arg("--to", required=True, choices=TARGETS, help="the target format")),
        "Print the translated file on stdout and, as # comments on stderr, every place where the target's "
        "semantics differ from Sandbox Lab's.",
    ),
)


def build_parser() -> argparse.ArgumentParser:
    """The whole parser: one subparser per entry of ``COMMANDS``."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Write a JSON sandbox policy for an AI agent's tool execution, then watch attacks against it.",
        epilog="Exit codes: 0 done, 1 internal error, 2 invalid policy or usage, 3 backend unavailable or failed, 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command_name", metavar="COMMAND")
    sub.required = True
    for cmd in COMMANDS:
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.description or cmd.help)
        for a in cmd.args:
            p.add_argument(*a.flags, **dict(a.options))
        p.set_defaults(command=cmd)
    add_grading_commands(sub)
    return parser


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


# the first matching class decides: a backend failure is not the learner's fault, an unknown task is
_EXIT_CODES: tuple[tuple[type[SandboxLabError], int], ...] = (
    (BackendError, EXIT_BACKEND),
    (TaskError, EXIT_INVALID),
    (SandboxLabError, EXIT_BUG),
)


def _exit_code(exc: SandboxLabError) -> int:
    return next(code for cls, code in _EXIT_CODES if isinstance(exc, cls))


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the CLI; return the exit code (the console script exits with it)."""
    parser = build_parser()
    io = Streams(sys.stdout, sys.stderr)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error argparse already printed
        return exc.code if isinstance(exc.code, int) else EXIT_INVALID
    command: Command = args.command
    try:
        return command.run(args, io)
    except PolicyError as exc:
        io.err.write(render_policy_error(exc))
        return EXIT_INVALID
    except UsageError as exc:
        io.err.write(f"{PROG} {command.name}: error: {exc}\n")
        return EXIT_INVALID
    except SandboxLabError as exc:
        io.err.write(f"{PROG}: {_one_line(exc)}\n")
        return _exit_code(exc)
    except KeyboardInterrupt:
        io.err.write(f"{PROG}: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader went away (e.g. `| head`): stop quietly, and keep Python from
        # complaining again when it flushes stdout at exit
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return EXIT_BUG
    except Exception as exc:  # noqa: BLE001 - a bug, but still no traceback for a learner
        if os.environ.get("SANDBOX_LAB_DEBUG"):
            raise
        io.err.write(
            f"{PROG}: internal error: {type(exc).__name__}: {_one_line(exc)}. This is a bug in Sandbox Lab; "
            "please report it (set SANDBOX_LAB_DEBUG=1 to see the traceback).\n"
        )
        return EXIT_BUG
