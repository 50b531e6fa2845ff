"""The grading subcommands of ``sandbox-lab``: ``tasks``, ``grade`` and ``grade-batch``.

``cli.py`` owns the program; it calls ``add_grading_commands(subparsers)``
once. Each subcommand set here carries its own ``command`` default (an object
with ``name`` and ``run(args, streams)``, as ``cli.Command`` has), and every
``run`` maps its own outcomes to exit codes, so no traceback reaches a learner:

    grade        0 full marks, 1 not full marks, 2 invalid policy or unknown task, 3 backend failed
    grade-batch  0 the batch finished (whatever the scores), 2 unknown task or unreadable inputs,
                 3 backend unavailable, 130 interrupted (the journal keeps finished rows: rerun to resume)
    tasks        0
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Protocol, Sequence, TextIO

from .errors import BackendError, PolicyError, SandboxLabError, TaskError

__all__ = ["EXIT_FULL", "EXIT_INVALID", "EXIT_NOT_FULL", "add_grading_commands", "main"]

EXIT_FULL = 0
EXIT_NOT_FULL = 1
EXIT_INVALID = 2
EXIT_BACKEND = 3
EXIT_INTERRUPTED = 130
BACKENDS = ("auto", "docker", "static", "srt")


class _Streams(Protocol):
    out: TextIO
    err: TextIO


@dataclass(frozen=True)
class _Std:
    out: TextIO
    err: TextIO


@dataclass(frozen=True)
class GradingCommand:
    """What ``cli.main`` dispatches on: a name and ``run(args, streams) -> exit code``."""

    name: str
    run: Callable[[argparse.Namespace, Any], int]


def _backend(name: str, err: TextIO) -> Any:
    from . import backends

    return backends.get(name, progress=lambda line: err.write(f"{line}\n"))


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _run_tasks(args: argparse.Namespace, io: _Streams) -> int:
    from .tasks import all_tasks

    try:
        tasks = all_tasks()
    except TaskError as exc:
        io.err.write(f"sandbox-lab tasks: {exc}\n")
        return EXIT_INVALID
    if args.json:
        io.out.write(json.dumps([
            {"id": t.id, "title": t.title, "statement": t.statement, "max_score": t.max_score,
             "starter": t.starter, "checks": [{"id": c.id, "points": c.points, "description": c.description} for c in t.checks]}
            for t in tasks
        ], indent=2) + "\n")
        return EXIT_FULL
    for t in tasks:
        io.out.write(f"{t.id}  ({t.max_score} points)  {t.title}\n")
        io.out.write(f"    {t.statement}\n")
        if t.starter is not None:
            io.out.write(f"    starting policy: {json.dumps(t.starter)}\n")
        io.out.write("\n")
    io.out.write("Grade a policy with: sandbox-lab grade --task ID POLICY.json\n")
    return EXIT_FULL


def _run_grade(args: argparse.Namespace, io: _Streams) -> int:
    from .policy import Policy, load_policy
    from .tasks import grade, load_task

    try:
        task = load_task(args.task)
    except TaskError as exc:
        io.err.write(f"sandbox-lab grade: {_one_line(exc)}\n")
        return EXIT_INVALID
    policy: Policy | PolicyError
    try:
        policy = load_policy(args.policy)
    except PolicyError as exc:
        policy = exc
    try:
        backend = _backend(args.backend, io.err)
        result = grade(task, policy, backend)
    except BackendError as exc:
        io.err.write(f"sandbox-lab grade: {_one_line(exc)}\n")
        return EXIT_BACKEND
    except ValueError as exc:  # a bad SANDBOX_LAB_BACKEND or backend name
        io.err.write(f"sandbox-lab grade: {_one_line(exc)}\n")
        return EXIT_INVALID
    if args.json:
        io.out.write(json.dumps(result.to_json(), indent=2) + "\n")
    else:
        io.out.write(result.feedback() + "\n")
    if not result.valid:
        return EXIT_INVALID
    return EXIT_FULL if result.full_marks else EXIT_NOT_FULL


def _run_grade_batch(args: argparse.Namespace, io: _Streams) -> int:
    from .batch import ProgressBar, grade_batch
    from .tasks import load_task

    try:
        task = load_task(args.task)
    except TaskError as exc:
        io.err.write(f"sandbox-lab grade-batch: {_one_line(exc)}\n")
        return EXIT_INVALID
    if args.workers < 1:
        io.err.write("sandbox-lab grade-batch: --workers must be at least 1\n")
        return EXIT_INVALID
    out = Path(args.out) if args.out else Path(f"grades-{task.id}")
    try:
        backend = _backend(args.backend, io.err)
    except BackendError as exc:
        io.err.write(f"sandbox-lab grade-batch: {_one_line(exc)}\n")
        return EXIT_BACKEND
    try:
        book = grade_batch(
            task, args.inputs, backend, workers=args.workers, dedupe=not args.no_dedupe,
            out=out, progress=ProgressBar(f"{task.id}", io.err),
        )
    except KeyboardInterrupt:
        io.err.write(f"\nsandbox-lab grade-batch: interrupted; finished rows are kept in {out / 'journal.jsonl'}: rerun the same command to resume\n")
        return EXIT_INTERRUPTED
    except SandboxLabError as exc:
        io.err.write(f"sandbox-lab grade-batch: {_one_line(exc)}\n")
        return EXIT_INVALID
    io.err.write(book.summary() + "\n")
    io.out.write(f"{out / 'gradebook.csv'}\n{out / 'gradebook.json'}\n")
    return EXIT_FULL


def add_grading_commands(subparsers: Any) -> None:
    """Register ``tasks``, ``grade`` and ``grade-batch`` on an ``argparse`` subparsers object."""
    p = subparsers.add_parser("tasks", help="list the graded practice tasks", description="List the graded practice tasks with their statements.")
    p.add_argument("--json", action="store_true", help="print the tasks as JSON")
    p.set_defaults(command=GradingCommand("tasks", _run_tasks))

    p = subparsers.add_parser(
        "grade", help="grade a policy on a practice task",
        description="Grade POLICY on a practice task; every lost point names the probe, the evidence and a fix. "
        "Exit 0 full marks, 1 not full marks, 2 invalid policy or unknown task, 3 backend failed.",
    )
    p.add_argument("--task", required=True, metavar="ID", help="the task id (see `sandbox-lab tasks`)")
    p.add_argument("policy", metavar="POLICY", help="the policy file (JSON)")
    p.add_argument("--json", action="store_true", help="print the grade as JSON")
    p.add_argument("--backend", choices=BACKENDS, default="auto", help="docker runs the probes for real; static predicts; auto: docker when an engine answers (default)")
    p.set_defaults(command=GradingCommand("grade", _run_grade))

    p = subparsers.add_parser(
        "grade-batch", help="grade a class's submissions into a gradebook",
        description="Grade every submission (a directory with one policy file per student, or a CSV with "
        "student,policy_path or student,policy_json) and write gradebook.csv and gradebook.json. Identical "
        "policies are graded once; a broken submission gets a row with its error. Finished rows are kept in "
        "OUT/journal.jsonl, so rerunning an interrupted batch resumes it.",
    )
    p.add_argument("--task", required=True, metavar="ID", help="the task id (see `sandbox-lab tasks`)")
    p.add_argument("inputs", metavar="DIR_OR_CSV", help="a directory of policy files or a CSV")
    p.add_argument("--out", metavar="DIR", help="where to write the gradebook and journal (default: grades-<task>)")
    p.add_argument("--workers", type=int, default=4, metavar="N", help="runs at once (default: 4)")
    p.add_argument("--no-dedupe", action="store_true", help="grade every submission, even identical ones")
    p.add_argument("--backend", choices=BACKENDS, default="auto", help="as for grade (default: auto)")
    p.set_defaults(command=GradingCommand("grade-batch", _run_grade_batch))


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run only the grading commands (for tests and for use before ``cli.py`` registers them)."""
    parser = argparse.ArgumentParser(prog="sandbox-lab")
    sub = parser.add_subparsers(dest="command_name", metavar="COMMAND")
    sub.required = True
    add_grading_commands(sub)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_INVALID
    command: GradingCommand = args.command
    try:
        return command.run(args, _Std(sys.stdout, sys.stderr))
    except KeyboardInterrupt:
        sys.stderr.write("sandbox-lab: interrupted\n")
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover - `python -m grader.cli_grading`
    sys.exit(main())
