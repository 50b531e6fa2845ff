"""The ``sandbox-lab`` command line: the one command registry, the parser, and every outcome mapped to an exit code.

Thin on purpose (httpx's ``_main.py`` is the model): a command is one entry of
``COMMANDS`` (its name, help, arguments and a ``run_<name>`` body from
``cli_commands.py``), and all the work happens in the package. Nothing else
registers a command. Defaults are read from the API function the command
calls (``api_default``), never typed a second time. Every command shares one
exit-code table (``cli_core.EXIT_CODES``, printed by ``--help``):

    0    done; for grade, full marks
    1    graded below full marks
    2    invalid policy or usage
    3    backend unavailable or failed
    4    internal error (a bug: please report it)
    130  interrupted

No traceback reaches a learner: every exception becomes one clean message on
stderr, or ``{"error": ..., "problems": [...]}`` on stdout under ``--json``
(``SANDBOX_LAB_DEBUG=1`` shows the traceback of an internal error).
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import sys
from typing import Callable, NoReturn, Optional, Sequence

from grader import backends
from grader.cli import client
from grader.core.version import __version__
from grader.plumbing.terminal import (
    EXIT_BACKEND,
    EXIT_CODES,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_NOT_FULL,
    EXIT_OK,
    PROG,
    Arg,
    Command,
    Streams,
    UsageError,
    api_default,
    arg,
    dump,
    one_line,
)
from grader.core.errors import BackendError, PolicyError, SandboxLabError

# the exit codes and the command record are cli_core's (grader.plumbing.terminal.__all__); re-exported for callers of main
__all__ = ["COMMANDS", "EXIT_CODES", "Command", "Streams", "build_parser", "entry", "main", "run_here"]


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


# --- arguments several commands share ---------------------------------------------------------

_POLICY = arg("policy", metavar="POLICY", help="the policy file (JSON)")
_JSON = arg("--json", action="store_true", help="print machine-readable JSON on stdout, errors included")
_COLOR = arg(
    "--color", choices=("auto", "always", "never"), default="auto",
    help="colour the table: red where an attack succeeded, green where a job works (default: auto, i.e. on a terminal)",
)
_BACKEND = arg(
    "--backend", choices=backends.BACKEND_NAMES, default=None,  # None: backends.default() decides
    help="static: predict; docker: run real containers; srt: the real sandbox-runtime; "
    "remote: real containers on the run service ($SANDBOX_LAB_SERVICE_URL, $SANDBOX_LAB_TOKEN), else static with a notice; "
    f"auto: docker when an engine answers, else static with a notice. Default: ${backends.BACKEND_ENV}, "
    f"else {api_default(backends.default, 'prefer')}.",
)
_FROM = arg("--from", dest="from_", choices=("claude-code", "srt"), default=None,
             help="POLICY is a real settings file of this tool, read back as a policy (needs --project-root)")
_PROJECT_ROOT = arg("--project-root", metavar="DIR", default=None, help="your project's directory: the world's project maps onto it")
_HOME = arg("--home", metavar="DIR", default=None, help="your home directory (default: written as ~)")
_WORLD_PROJECT = arg("--world-project", metavar="PATH", default=None,
                     help="the simulated machine's project your project root stands for (default: /project)")
_TASK = arg("--task", required=True, metavar="ID", help=f"the task id (see `{PROG} tasks`)")


# The choices are access.TARGETS, spelt out so that --help imports none of the model (a unit test keeps them equal).
TARGET_CHOICES = ("srt", "claude-code")
_TARGET = arg(
    "--target", choices=TARGET_CHOICES, default=None,
    help="who starts the sandbox, whose rules decide: srt (sandbox-runtime started in the home) or claude-code (Claude "
    "Code, started in the project, which it also makes writable). Default: $SANDBOX_LAB_TARGET, else srt. The policy "
    "means what that tool makes of the same JSON (docs/srt-differences.md lists what the lab cannot model).",
)


def _body(name: str) -> Callable[[argparse.Namespace, Streams], int]:
    """``cli.commands.<name>``, imported when the command runs: the parser needs none of the work behind it."""

    def run(args: argparse.Namespace, io: Streams) -> int:
        from grader.cli import commands

        body: Callable[[argparse.Namespace, Streams], int] = getattr(commands, name)
        return body(args, io)

    run.__name__ = run.__qualname__ = name
    return run


@functools.cache  # read once per process, as a module constant would be
def _grade_args() -> tuple[Arg, ...]:
    return (_TASK, _POLICY, _BACKEND, _TARGET, _FROM, _PROJECT_ROOT, _HOME, _WORLD_PROJECT, _JSON)


@functools.cache  # read once per process, as a module constant would be
def _grade_batch_args() -> tuple[Arg, ...]:
    from grader.grading.batch import grade_batch

    return (
        _TASK,
        arg("inputs", metavar="DIR_OR_CSV", help="a directory of policy files or a CSV"),
        arg("--out", metavar="DIR", help="where to write the gradebook and journal (default: grades-<task>)"),
        arg(
            "--workers", type=_positive, metavar="N", default=api_default(grade_batch, "workers"),
            help="runs at once (default: %(default)s)",
        ),
        arg(
            "--dedupe", action=argparse.BooleanOptionalAction, default=api_default(grade_batch, "dedupe"),
            help="grade identical policies once (default: %(default)s); --no-dedupe grades every submission",
        ),
        arg(
            "--regrade", action="store_true", default=api_default(grade_batch, "regrade"),
            help="grade every submission again, reusing nothing from the journal",
        ),
        arg(
            "--gradescope", metavar="FILE", default=None,
            help="also write the one submission's grade as Gradescope's results.json, a test per rubric check",
        ),
        _BACKEND,
        _JSON,
    )


@functools.cache  # read once per process, as a module constant would be
def _export_args() -> tuple[Arg, ...]:
    from grader.realtools.export import TARGETS

    return (
        _POLICY, arg("--to", required=True, choices=TARGETS, help="the target format"),
        _PROJECT_ROOT, _HOME,
        arg("--secret-env", metavar="NAME", action="append", default=None,
            help="a secret environment variable to unset for sandboxed commands (repeatable; needs --project-root)"),
        arg("--as-written", action="store_true",
            help="with --project-root: the policy's rules one for one, without the hardening extras (narrowed denies, "
            "credential masks, strictAllowlist, failIfUnavailable, permission rules); `import` reads the file back as "
            "exactly this policy. Default: the hardened file"),
        _JSON,
    )


# what the service extra installs (and the workers' Docker SDK): missing, the command names its install
_SERVICE_LIBRARIES = frozenset({"fastapi", "starlette", "uvicorn", "rq", "redis", "prometheus_client", "docker"})


def _service_body(name: str) -> Callable[[argparse.Namespace, Streams], int]:
    """``hosted.commands.<name>``, imported when the command runs; without the service extra, how to install it."""

    def run(args: argparse.Namespace, io: Streams) -> int:
        try:
            from grader.hosted import commands

            body: Callable[[argparse.Namespace, Streams], int] = getattr(commands, name)
            return body(args, io)
        except ImportError as exc:
            if (exc.name or "").split(".")[0] not in _SERVICE_LIBRARIES:
                raise
            from grader.protocol.common import install_hint

            raise UsageError(f"the run service needs its extra ({exc.name} is missing): "
                             f"{install_hint('service')}") from None

    run.__name__ = run.__qualname__ = name
    return run


def _run_engine(args: argparse.Namespace, io: Streams) -> int:
    from grader.cli.engine import run_engine

    if args.action == "serve":  # the engine's own process: the command bodies, imported before any command
        from grader.cli import commands  # noqa: F401

    return run_engine(args, io, main)


# --- the registry: one entry per command ------------------------------------------------------

COMMANDS: tuple[Command, ...] = (
    Command(
        "check", "validate a policy and predict what it allows", _body("run_check"),
        (_POLICY, _JSON, _COLOR),
        "Validate POLICY, print it as Sandbox Lab reads it, its warnings and the static findings. "
        "Exit 0 when valid, 2 when not (the problems go to stderr, or into the JSON with --json).",
    ),
    Command(
        "probe", "run the exfiltration probes against a policy", _body("run_probe"),
        (
            arg("policy", metavar="POLICY", nargs="?", help="the policy file (JSON); optional with --plain-container"),
            _BACKEND,
            arg("--plain-container", action="store_true", help="probe the plain container (home and projects mounted read-write, ordinary networking) instead of a policy"),
            _TARGET,
            _FROM, _PROJECT_ROOT, _HOME, _WORLD_PROJECT,
            _JSON,
            _COLOR,
        ),
        "Run every probe of the catalogue against the sandbox POLICY describes and report what happened. "
        "Exit 0 when the run completed, 2 for an invalid policy, 3 when the backend is unavailable or failed.",
    ),
    Command(
        "tasks", "list the graded practice tasks", _body("run_tasks"), (_JSON,),
        "List the graded practice tasks with their statements.",
    ),
    Command(
        "grade", "grade a policy on a practice task", _body("run_grade"), _grade_args,
        "Grade POLICY on a practice task; every lost point names the probe, the evidence and a fix. "
        "Exit 0 full marks, 1 not full marks, 2 invalid policy or unknown task, 3 backend failed.",
    ),
    Command(
        "grade-batch", "grade a class's submissions into a gradebook", _body("run_grade_batch"), _grade_batch_args,
        "Grade every submission (a directory with one policy file per student, or a CSV with "
        "student,policy_path or student,policy_json) and write gradebook.csv and gradebook.json. Identical "
        "policies are graded once; a broken submission gets a row with its error (a link or a pipe too: only "
        "regular files are read, links never followed). Finished rows are kept in "
        "OUT/journal.jsonl with what decided them (Sandbox Lab version, rubric, world, backend, policy): rerunning "
        "an interrupted batch resumes it, and a row is reused only when all of these are equal (--regrade reuses "
        "none). The summary names every student whose score changed. Exit 0 when the batch finished, "
        "whatever the scores.",
    ),
    Command(
        "class-report", "what a class got wrong: pass rates, leaks, over-grants, lessons to revisit",
        _body("run_class_report"),
        (
            arg("gradebook", metavar="GRADEBOOK", nargs="?", default=None,
                help="gradebook.json written by grade-batch (or its directory)"),
            arg("--nbgrader", metavar="COURSE", default=None,
                help="an nbgrader course's root instead (its gradebook.db and autograded/); needs --assignment"),
            arg("--assignment", metavar="NAME", default=None, help="the nbgrader assignment to report on"),
            arg("--out", metavar="DIR", help="where to write class-report.html and class-report.json "
                "(default: beside the gradebook; for --nbgrader, COURSE/class-report/NAME)"),
            _JSON,
        ),
        "Read a gradebook written by grade-batch and write class-report.html (charts as inline SVG) and "
        "class-report.json: the pass rate of every rubric check, the attacks that got through most often, the most "
        "common over-grants by rule and by harm, groups of identical and near-identical policies, and for each weak "
        "spot the lesson that teaches it. Policies are read back from the files graded (only when unchanged). "
        "With --nbgrader COURSE --assignment NAME, reads an nbgrader course instead: the roster, the scores of every "
        "rubric cell from its gradebook.db, the policies from the autograded notebooks; students without a "
        "submission are listed as missing. "
        "Needs matplotlib, in the lab extra (`make lab` or `make venv` install it).",
    ),
    Command("schema", "print the policy's JSON Schema (for editors)", _body("run_schema")),
    Command(
        "engine", "start, stop or list the warm engine that runs this shell's one-shot commands", _run_engine,
        (
            arg("action", choices=("start", "stop", "status", "serve"),
                help="start it (if none runs), stop it, or list them (serve: be the engine; start runs it)"),
            arg("socket", nargs="?", default=None, help=argparse.SUPPRESS),
            arg("--all", action="store_true", help="stop: every engine of yours, not only this shell's"),
            _JSON,
        ),
        "The warm engine is a process that keeps what a one-shot command (probe, grade, check, attack) would "
        "otherwise pay for at every run: the grader's imports, a Docker backend, the shared internet and its warm "
        "proxies. A command from a shell with the same checkout and environment is handed to it and prints "
        "exactly what it would print run here; where none answers, or it cannot finish, the command runs here. "
        "The first one-shot command that runs Docker here starts one; it exits after the shared internet's idle "
        "period (SANDBOX_LAB_SHARED_IDLE) or when the checkout's code changes. SANDBOX_LAB_ENGINE=off: never use "
        "or start one.",
    ),
    Command(
        "setup", "build the Docker images the probes run in (once; reused until a Dockerfile changes)", _body("run_setup"),
        (
            # SUPPRESS: left out, ensure_images' own default applies (its module needs the Docker SDK)
            arg("--rebuild", action="store_true", default=argparse.SUPPRESS, help="rebuild the sandbox and services images even if current"),
            _JSON,
        ),
    ),
    Command(
        "cleanup", "remove containers, networks and directories left by killed runs", _body("run_cleanup"),
        (
            arg("--all", dest="everything", action="store_true", default=argparse.SUPPRESS, help="also remove what runs still in progress are using"),
            _JSON,
        ),
    ),
    Command(
        "attack", "capture the flag: run your attack in a level's sandbox", _body("run_attack"),
        (
            arg("attack", metavar="ATTACK.py", nargs="?", help="your attack: a Python script, run as the agent's tool would run it"),
            arg("--level", metavar="N", default=None, help="the level to attack: its number (or id); see --list"),
            arg("--list", action="store_true", help="list the levels in ladder order (with your progress)"),
            arg("--solution", action="store_true",
                help="show level N's worked solution instead of running an attack (no attempt counted; your progress "
                     "board notes that you asked)"),
            arg("--policy", metavar="POLICY.json", default=None, help="the capstone only: your policy for its job, which the attack then runs under"),
            arg(
                "--backend", choices=backends.BACKEND_NAMES, default=None,
                help="docker runs the attack for real, remote on the run service ($SANDBOX_LAB_SERVICE_URL); static cannot predict an attack "
                f"and says so (exit 3). Default: ${backends.BACKEND_ENV}, else {api_default(backends.default, 'prefer')}.",
            ),
            _JSON,
        ),
        "Run ATTACK.py inside the sandbox of level N, with a fresh flag planted in the level's files. The level is "
        "captured when the simulated internet's logs show the flag arriving where the attacker can read it (their "
        "server, a gist, a published package, their nameserver); what the attack prints decides nothing. A miss says "
        "what the attack did, read from the run's own logs; repeated misses add a nudge. The solution is shown only "
        "when you ask for it: --level N --solution (nothing runs, exit 0; your progress board notes it). Exit 0 "
        "captured, 1 not captured, 2 invalid input (a missing or unreadable file, an unknown level), 3 no engine (and "
        "for --backend static: attacks cannot be predicted).",
    ),
    Command(
        "class-keys", "print each learner's class key, for graded checks in a class", _body("run_class_keys"),
        (
            arg("students", metavar="STUDENT", nargs="*", help="a student id as nbgrader knows it (the hub's user name)"),
            arg("--secret-file", required=True, metavar="FILE",
                help="the class secret: one line, readable by you alone (chmod 600); never printed"),
            arg("--students", dest="students_file", metavar="FILE", default=None, help="more student ids, one a line"),
            _JSON,
        ),
        "Print STUDENT<TAB>KEY for each student: the key to set as SANDBOX_LAB_CLASS_KEY in that learner's kernel "
        "(e.g. in JupyterHub's spawner environment), derived from the class secret nbgrader's autograde is given as "
        "SANDBOX_LAB_CLASS_SECRET. A learner's kernel then signs its first answers to lesson 05's graded checks and "
        "withholds the verdict until feedback (docs/instructors.md). A secret file open to others is refused. "
        "Exit 0, or 2 for a missing, unsafe or empty secret file or no student.",
    ),
    Command(
        "export", "translate a policy for sandbox-runtime, Claude Code or docker run", _body("run_export"), _export_args,
        "Print the translated file on stdout and, as # comments on stderr, what to know of the target's rules for "
        "this policy (with --json, both go into one object: text and warnings). "
        "Without --project-root the paths are the simulated world's; with it, srt and claude-code get a hardened "
        "file for your machine (the world's project is DIR, its home ~ or --home), with a reason for each hardening key.",
    ),
    Command(
        "import", "read your own Claude Code or srt settings file as a policy", _body("run_import"),
        (
            arg("settings", metavar="FILE", help="your settings file (JSON)"),
            arg("--from", dest="from_", required=True, choices=("claude-code", "srt"), help="the tool FILE is for"),
            _PROJECT_ROOT, _HOME, _WORLD_PROJECT, _JSON,
        ),
        "Print FILE as a Sandbox Lab policy (your project root becomes the world's project, your home its home) and, "
        "on stderr, every entry that could not be mapped and why. An unknown key or a deny entry that cannot be "
        "mapped is an error (exit 2): leaving it out would widen the sandbox.",
    ),
    Command(
        "serve", "run the run service's HTTP API (docs/service-api.md)", _service_body("run_serve"),
        (
            arg("--host", default="127.0.0.1", help="the address to listen on (default: 127.0.0.1, this machine only)"),
            arg("--port", type=_positive, default=8000, help="the port (default: 8000)"),
        ),
        "Serve the run service's API: learners without a Docker engine send their policies here, and workers "
        "(`sandbox-lab worker`) run them. State (tokens, Redis) lives in $SANDBOX_LAB_SERVICE_DIR; Redis is "
        "$SANDBOX_LAB_REDIS_URL. `make serve` starts Redis, the API and two workers. Needs the service extra "
        "(`make venv` installs it; without it, the command says how to install it).",
    ),
    Command(
        "worker", "serve the run service's jobs on this machine's Docker engine", _service_body("run_worker"),
        (
            arg("--name", default=None, help="the worker's name in the queue (default: RQ's, unique)"),
            arg("--burst", action="store_true", help="stop once the queue is empty"),
            arg("--alive", action="store_true",
                help="serve nothing: exit 0 if the worker touching $SANDBOX_LAB_WORKER_ALIVE turned its loop in the "
                     "last 60 s, else 3 (a liveness probe)"),
        ),
        "Take jobs from the run service's queue ($SANDBOX_LAB_REDIS_URL) and run them on the Docker engine "
        "DOCKER_HOST names (or the local one), one at a time. Start more workers, here or on other machines, for "
        "more capacity.",
    ),
    Command(
        "tokens", "issue, list or revoke the run service's bearer tokens", _service_body("run_tokens"),
        (
            arg("action", choices=("issue", "list", "revoke"),
                help="issue: add a token and print it once; list: one line a token; revoke NAME: refuse it from now on"),
            arg("target", nargs="?", default=None, metavar="NAME", help="revoke: the token's name or its id (from list)"),
            arg("--name", default=None, help="issue: who the token is for (unique), e.g. alice"),
            arg("--expires", type=float, default=None, metavar="DAYS", help="days until it expires (default: never)"),
            arg("--rate", default=None, metavar="N/min", help="runs a minute it may start (default: 30/min)"),
            arg("--jobs", type=_positive, default=None, metavar="N", help="jobs it may have queued or running (default: 4)"),
            _JSON,
        ),
        "Issue a token for the run service: it is printed once and stored hashed in "
        "$SANDBOX_LAB_SERVICE_DIR/tokens.json. `tokens list` prints each token's name, id, expiry, limits and "
        "whether it is revoked (never the token or its hash); `tokens revoke NAME` (or its id) refuses it from the "
        "service's next request on (an unknown name: exit 2, nothing changed).",
    ),
)


# --- the parser -------------------------------------------------------------------------------


class _ArgumentError(Exception):
    """argparse's own usage error, caught so that ``--json`` can report it as JSON."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _ArgumentError(self, message)


def _epilog() -> str:
    rows = "\n".join(f"  {code:<4} {meaning}" for code, meaning in EXIT_CODES)
    return f"exit codes (the same for every command):\n{rows}"


def build_parser(only: Optional[str] = None) -> argparse.ArgumentParser:
    """The whole parser: one subparser per entry of ``COMMANDS``.

    ``only``: declare the arguments of that command alone (the others keep their name and help, enough for
    ``--help`` and for argparse to name the choices): the one being run, so the imports behind the other
    commands' defaults are not paid.
    """
    parser = _Parser(
        prog=PROG,
        description="Write a JSON sandbox policy for an AI agent's tool execution, then watch attacks against it.",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command_name", metavar="COMMAND")
    sub.required = True
    for cmd in COMMANDS:
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.description or cmd.help)
        if only is not None and cmd.name != only:
            continue
        for a in cmd.args:
            p.add_argument(*a.flags, **dict(a.options))
        p.set_defaults(command=cmd)
    return parser


# --- exceptions to exit codes -----------------------------------------------------------------

# the first matching class decides: a backend failure is not the learner's fault; every other error
# Sandbox Lab raises on purpose is about something the user gave (a policy, a task id, an input file)
_ERROR_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (BackendError, EXIT_BACKEND),
    (SandboxLabError, EXIT_INVALID),
    (UsageError, EXIT_INVALID),
    (KeyboardInterrupt, EXIT_INTERRUPTED),
)


def _internal(exc: BaseException) -> str:
    return (
        f"internal error: {type(exc).__name__}: {one_line(exc)}. This is a bug in Sandbox Lab; "
        "please report it (set SANDBOX_LAB_DEBUG=1 to see the traceback)."
    )


def _report(exc: BaseException, command: Command, io: Streams, as_json: bool) -> int:
    """Write ``exc`` as one message (or one JSON object) and return its exit code."""
    code = next((c for cls, c in _ERROR_CODES if isinstance(exc, cls)), EXIT_INTERNAL)
    if isinstance(exc, KeyboardInterrupt):
        message = str(exc) or "interrupted"
    elif code == EXIT_INTERNAL:
        message = _internal(exc)
    else:
        message = one_line(exc)
    problems = exc.as_json() if isinstance(exc, PolicyError) else []
    if as_json:
        from grader.plumbing.terminal import error_json

        io.out.write(dump(error_json(message, problems)))
    elif isinstance(exc, PolicyError):
        from grader.grading.report import render_policy_error

        io.err.write(render_policy_error(exc))
    elif isinstance(exc, UsageError):
        io.err.write(f"{PROG} {command.name}: error: {message}\n")
    else:
        io.err.write(f"{PROG}: {message}\n")
    return code


def _silence_stdout() -> None:
    # the reader went away (e.g. `| head`): keep Python from complaining again when it flushes stdout at exit
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv: Optional[Sequence[str]] = None, io: Optional[Streams] = None) -> int:
    """Run the CLI; return the exit code (the console script exits with it).

    ``io``: where the command writes (default: this process's stdout and stderr); the warm engine
    (``cli.engine``) passes the caller's, so a command run there writes exactly what it would write here.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    # the top level takes no option with a value: its first positional argument is the command
    # (none, or not a command's name: no command's arguments are needed to print the help or the error)
    parser = build_parser(next((a for a in argv if not a.startswith("-")), ""))
    io = io if io is not None else Streams(sys.stdout, sys.stderr)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help or --version
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    except _ArgumentError as exc:
        if "--json" in argv:
            from grader.plumbing.terminal import error_json

            io.out.write(dump(error_json(f"{exc.parser.prog}: {exc}")))
        else:
            exc.parser.print_usage(io.err)
            io.err.write(f"{exc.parser.prog}: error: {exc}\n")
        return EXIT_INVALID
    command: Command = args.command
    as_json = bool(getattr(args, "json", False))
    try:
        return command.run(args, io)
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - a bug is still reported without a traceback for a learner
        if os.environ.get("SANDBOX_LAB_DEBUG") and not isinstance(exc, (SandboxLabError, UsageError)):
            raise
        return _report(exc, command, io, as_json)
    except KeyboardInterrupt as exc:
        return _report(exc, command, io, as_json)


def entry() -> NoReturn:
    """``main`` as the console script runs it: the command offered to the warm engine first (``client.handed``),
    then run here (``run_here``). The console script and ``python -m grader`` enter at ``launch.entry``, which
    offers it before importing this module; this entry stays for callers of ``grader.cli.main:entry``."""
    argv = sys.argv[1:]
    client.exit_if_handed(argv)
    run_here(argv)


def run_here(argv: list[str]) -> NoReturn:
    """Run ``argv`` in this process and exit with its code; one that ran Docker here starts the engine for the next.

    Before exiting, every object the command made is frozen out of the garbage collector
    (``gc.freeze``): the process ends now, and the collections the interpreter runs while it
    shuts down would otherwise walk them all, about 0.1 s of a one-shot command. Exit handlers,
    finalizers and flushes still run as usual; nothing the command cleans up is skipped.
    """
    code = main(argv)
    if client.served(argv) and "grader.backends.docker.backend" in sys.modules:
        from grader.cli.engine import start_soon

        start_soon()  # this command ran Docker here: the next one finds the engine warm
    gc.freeze()
    sys.exit(code)
