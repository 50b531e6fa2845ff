"""The bodies of the ``sandbox-lab`` commands: each calls the package and writes its result, text or JSON.

One ``run_<name>(args, io) -> exit code`` per command; ``cli.COMMANDS`` pairs
each with its arguments. A body raises instead of printing errors:
``cli.main`` turns every exception into one exit code and one message (JSON
under ``--json``). The Docker SDK is imported only inside the commands that
need it, so ``check`` and ``probe --backend static`` work where it is missing;
likewise every module only some commands use (the run plan, the exporters, the
grader) is imported inside those commands, so ``check`` loads the analyzer and
nothing else (``tests/unit/cli/test_cli.py`` pins what each command imports).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any, Optional, TextIO

from grader.core.access import Target
from grader.core.analyzer import lint, predict
from grader.plumbing.terminal import EXIT_BACKEND, EXIT_INVALID, EXIT_NOT_FULL, EXIT_OK, PROG, Streams, UsageError, dump, error_json, given, one_line, pick_backend, progress_to
from grader.core.capped import NotRegular, TooLarge, read_regular
from grader.core.errors import PolicyError
from grader.core.execution import MAX_CODE_BYTES
from grader.core.policy import Policy, load_policy, policy_schema, srt_missing
from grader.grading.report import render_check, render_json, render_text, result_json, summary
from grader.realtools.srt_notes import srt_differences

__all__ = [
    "run_attack",
    "run_check",
    "run_class_keys",
    "run_class_report",
    "run_cleanup",
    "run_export",
    "run_grade",
    "run_grade_batch",
    "run_import",
    "run_probe",
    "run_schema",
    "run_setup",
    "run_tasks",
]


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


# --- the policy -------------------------------------------------------------------------------


def run_check(args: argparse.Namespace, io: Streams) -> int:
    try:
        policy = load_policy(args.policy)
    except PolicyError as exc:
        if not args.json:
            raise
        # "valid"/"errors" are the documented shape of check; "error"/"problems" the one every command shares
        io.out.write(dump({"valid": False, "source": exc.source, "errors": exc.as_json(), **error_json(one_line(exc), exc.as_json())}))
        return EXIT_INVALID
    warnings = lint(policy)
    findings = predict(policy)
    srt = srt_differences(policy)  # where the real sandbox-runtime would not do what these verdicts say
    if args.json:
        io.out.write(dump({
            "valid": True,
            "source": args.policy,
            "policy": policy.normalize(),
            "warnings": [{"pointer": w.pointer, "message": w.message} for w in warnings],
            "findings": result_json(findings)["probes"],
            "summary": summary(findings),
            "srt_differences": [{"pointer": w.pointer, "message": w.message, "cause": cause} for cause, w in srt],
            "srt_missing": list(srt_missing(policy)),  # keys srt's schema requires that the file leaves out
        }))
    else:
        warnings += tuple(w for _, w in srt)
        io.out.write(render_check(policy, args.policy, warnings, findings, color=_color(args.color, io.out), width=_width()))
    return EXIT_OK


def run_probe(args: argparse.Namespace, io: Streams) -> int:
    from grader.core.plan import build_plan

    policy: Optional[Policy] = None
    if args.plain_container:
        if args.policy:
            io.err.write(f"{PROG}: note: --plain-container runs the plain container; {args.policy} is not used.\n")
    elif args.policy is None:
        raise UsageError("probe needs a POLICY file (or --plain-container for the plain-container baseline)")
    else:
        policy = _policy_from(args, io)
    target = _target(args)
    with pick_backend(args, io, shared=True) as backend:
        result = backend.run(build_plan(policy, target=target))
    if args.json:
        for note in result.notes:
            io.err.write(f"{PROG}: note: {note}\n")
        io.out.write(render_json(result))
    else:
        warnings = lint(policy) if policy is not None else ()
        io.out.write(render_text(result, warnings=warnings, color=_color(args.color, io.out), width=_width()))
    unjudged = [p.id for p in result.probes if p.outcome == "error"]
    if unjudged:  # a probe whose evidence is incomplete has no verdict: the run is broken
        io.err.write(f"{PROG}: error: could not judge {', '.join(unjudged)}: the run's evidence is incomplete; rerun it.\n")
        return EXIT_BACKEND
    return EXIT_OK


def run_schema(args: argparse.Namespace, io: Streams) -> int:
    io.out.write(dump(policy_schema()))
    return EXIT_OK


def _machine(args: argparse.Namespace) -> Any:
    from grader.realtools.machine import Machine

    if args.project_root is None:
        if args.home is not None or getattr(args, "secret_env", None):
            raise UsageError("--home and --secret-env need --project-root DIR (where your project is)")
        return None
    try:
        return Machine(args.project_root, args.home, tuple(getattr(args, "secret_env", None) or ()))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _target(args: argparse.Namespace) -> Target:
    """--target, else $SANDBOX_LAB_TARGET, else srt: chosen once, by a setting, for every command that runs a policy."""
    from grader.core.access import parse_target

    if args.target is not None:
        return parse_target(args.target, "--target")
    try:
        return parse_target(os.environ.get("SANDBOX_LAB_TARGET"))
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _policy_from(args: argparse.Namespace, io: Streams) -> Policy:
    """POLICY itself, or with ``--from claude-code|srt`` a real settings file read back as a policy."""
    if getattr(args, "from_", None) is None:
        return load_policy(args.policy)
    from grader.realtools.importer import import_settings

    machine = _machine(args)
    if machine is None:
        raise UsageError("--from needs --project-root DIR: the directory your settings call the project")
    imported = import_settings(args.policy, args.from_, machine, world_project=args.world_project)
    for problem in imported.unmapped:
        io.err.write(f"{PROG}: note: {args.policy}{problem.pointer}: {problem.message}\n")
    return imported.policy


def run_import(args: argparse.Namespace, io: Streams) -> int:
    from grader.realtools.importer import import_settings

    machine = _machine(args)
    if machine is None:
        raise UsageError("import needs --project-root DIR: the directory your settings call the project")
    imported = import_settings(args.settings, args.from_, machine, world_project=args.world_project)
    unmapped = [{"pointer": p.pointer, "message": p.message} for p in imported.unmapped]
    if args.json:
        io.out.write(dump({"policy": imported.policy.normalize(), "unmapped": unmapped}))
        return EXIT_OK
    io.out.write(json.dumps(imported.policy.normalize(), indent=2) + "\n")
    for p in imported.unmapped:
        io.err.write(f"# not mapped: {p.pointer}: {p.message}\n")
    return EXIT_OK


def run_export(args: argparse.Namespace, io: Streams) -> int:
    from grader.realtools.export import export

    try:
        text, notes = export(load_policy(args.policy), args.to, machine=_machine(args), hardened=not args.as_written)
    except ValueError as exc:
        if isinstance(exc, PolicyError):
            raise
        raise UsageError(str(exc)) from None
    if args.json:
        io.out.write(dump({"target": args.to, "text": text, "warnings": [n.text for n in notes]}))
        return EXIT_OK
    io.out.write(text)
    for note in notes:
        io.err.write(f"# {note}\n")
    return EXIT_OK


# --- grading ----------------------------------------------------------------------------------


def run_tasks(args: argparse.Namespace, io: Streams) -> int:
    from grader.grading.tasks import all_tasks

    tasks = all_tasks()
    if args.json:
        io.out.write(dump([
            {"id": t.id, "title": t.title, "statement": t.statement, "max_score": t.max_score,
             "needs": t.needs.to_json(), "starter": t.starter, "checks": [{"id": c.id, "points": c.points, "description": c.description} for c in t.checks]}
            for t in tasks
        ]))
        return EXIT_OK
    for t in tasks:
        io.out.write(f"{t.id}  ({t.max_score} points)  {t.title}\n")
        io.out.write(f"    {t.statement}\n")
        io.out.write(f"    the job needs: it {t.needs.in_words()}\n")
        if t.starter is not None:
            io.out.write(f"    starting policy: {json.dumps(t.starter)}\n")
        io.out.write("\n")
    io.out.write(f"Grade a policy with: {PROG} grade --task ID POLICY.json\n")
    return EXIT_OK


def run_grade(args: argparse.Namespace, io: Streams) -> int:
    from grader.grading.grade import grade
    from grader.grading.tasks import load_task

    task = load_task(args.task)
    policy: Policy | PolicyError
    try:
        policy = _policy_from(args, io)
    except PolicyError as exc:
        policy = exc  # graded as 0 with its problems as feedback, never against a default policy
    target = _target(args)
    with pick_backend(args, io, shared=True) as backend:
        result = grade(task, policy, backend, target=target)
    if args.json:
        data = result.to_json()
        if isinstance(policy, PolicyError):
            data.update(error_json(one_line(policy), policy.as_json()))
        io.out.write(dump(data))
    else:
        io.out.write(result.feedback() + "\n")
    if not result.valid:
        return EXIT_INVALID
    if result.could_not_grade:  # incomplete evidence is a broken run, not a verdict on the policy
        io.err.write(f"{PROG}: error: could not grade {', '.join(c.id for c in result.could_not_grade)}: "
                     "the run's evidence is incomplete; rerun the grader.\n")
        return EXIT_BACKEND
    return EXIT_OK if result.full_marks else EXIT_NOT_FULL


def run_grade_batch(args: argparse.Namespace, io: Streams) -> int:
    from grader.grading.batch import ProgressBar, grade_batch, output_files
    from grader.grading.tasks import load_task

    task = load_task(args.task)
    out = Path(args.out) if args.out else Path(f"grades-{task.id}")
    files = output_files(out)
    with pick_backend(args, io) as backend:
        try:
            book = grade_batch(
                task, args.inputs, backend, workers=args.workers, dedupe=args.dedupe,
                out=out, progress=ProgressBar(f"{task.id}", io.err), regrade=args.regrade,
            )
        except KeyboardInterrupt:
            io.err.write("\n")  # the progress bar may be mid-line on a terminal
            raise KeyboardInterrupt(
                f"interrupted; finished rows are kept in {files['journal']}: rerun the same command to resume"
            ) from None
    io.err.write(book.summary() + "\n")
    if getattr(args, "gradescope", None):
        from grader.grading.lms import one_results

        try:
            results = one_results(book)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        target = Path(args.gradescope)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        io.err.write(f"Gradescope results: {target}\n")
    if args.json:
        io.out.write(dump({
            **book.to_json(), "summary": book.summary(), "seconds": round(book.seconds, 3),
            "runs": book.runs, "resumed": book.resumed, "files": {k: str(v) for k, v in files.items()},
        }))
    else:
        io.out.write(f"{files['csv']}\n{files['json']}\n")
    return EXIT_OK


def run_class_report(args: argparse.Namespace, io: Streams) -> int:
    from grader.grading.class_report import ClassReportError, build_report, load_gradebook, render_html

    if (args.gradebook is None) == (args.nbgrader is None) or (args.nbgrader is None) != (args.assignment is None):
        raise ClassReportError("class-report", ["give either GRADEBOOK (grade-batch's) or --nbgrader COURSE with "
                                                "--assignment NAME (an nbgrader course's)"])
    if args.nbgrader is not None:
        from grader.grading.nbgrader_book import load_nbgrader_book

        course = Path(args.nbgrader)
        read = load_nbgrader_book(course, args.assignment)
        report = build_report(read.book, policies=read.policies)
        out = Path(args.out) if args.out else course / "class-report" / args.assignment
    else:
        source = Path(args.gradebook)
        if source.is_dir():
            source = source / "gradebook.json"
        report = build_report(load_gradebook(source))
        out = Path(args.out) if args.out else source.parent
    out.mkdir(parents=True, exist_ok=True)
    html_path, json_path = out / "class-report.html", out / "class-report.json"
    json_path.write_text(json.dumps(report.to_json(), indent=2) + "\n", encoding="utf-8")
    html_path.write_text(render_html(report), encoding="utf-8")
    if args.json:
        io.out.write(dump({**report.to_json(), "files": {"html": str(html_path), "json": str(json_path)}}))
    else:
        weak = ", ".join(f"{s['check']} ({s['rate']:.0%}: lesson {s['lesson']})" for s in report.weak_spots) or "none"
        io.err.write(f"{report.task}: {report.students} students; weak spots: {weak}\n")
        io.out.write(f"{html_path}\n{json_path}\n")
    return EXIT_OK


# --- Docker housekeeping ------------------------------------------------------------------------


def run_setup(args: argparse.Namespace, io: Streams) -> int:
    from grader.backends import docker_module

    client = docker_module().client_from_env()  # a missing docker SDK names the docker extra's install
    from grader.backends.docker.images import ensure_images

    images = ensure_images(client, progress_to(io), **given(args, "rebuild"))
    if args.json:
        io.out.write(dump({"sandbox": images.sandbox, "services": images.services}))
    else:
        io.out.write(f"sandbox image:  {images.sandbox}\nservices image: {images.services}\n")
    return EXIT_OK


def run_cleanup(args: argparse.Namespace, io: Streams) -> int:
    from grader.backends import docker_module

    docker = docker_module()  # a missing docker SDK names the docker extra's install
    removed = []
    if getattr(args, "everything", False):  # the warm engines first: they hold runs and a lease on the hub
        from grader.cli.engine import stop_engines

        removed += stop_engines()
    removed += docker.cleanup(docker.client_from_env(), **given(args, "everything"))
    if args.json:
        io.out.write(dump({"removed": removed, "count": len(removed)}))
        return EXIT_OK
    for item in removed:
        io.out.write(f"removed {item}\n")
    io.out.write(f"{len(removed)} leftover(s) removed\n")
    return EXIT_OK


# --- capture the flag ---------------------------------------------------------------------------


def _read_text(path: str, limit: int, *, what: str, too_large: str, missing: str = "") -> str:
    """A small UTF-8 text file the user named; a missing, unreadable, binary or oversized one is a usage error (exit
    2) naming ``path`` and ``what`` it should be, never a traceback."""
    try:
        return read_regular(Path(path), limit, follow=True).decode("utf-8")
    except TooLarge:
        raise UsageError(f"{path}: is larger than {limit // 1024} KiB; {too_large}.") from None
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file.{' ' + missing if missing else ''}") from None
    except NotRegular as exc:
        raise UsageError(f"{path}: is {exc.what}, not {what}.") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror}).") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: is not UTF-8 text; it should be {what}.") from None


def _read_attack(path: str) -> str:
    """The attack's source text; a missing, unreadable or binary file is a usage error (exit 2), never a traceback."""
    return _read_text(path, MAX_CODE_BYTES, what="a Python file", too_large="an attack is a short script",
                      missing="Write your attack in a Python file, e.g. attack.py, and pass its path.")


def _levels_json() -> dict[str, Any]:
    from grader.course.ladder import load_levels

    return {"levels": [{"number": lv.number, "id": lv.id, "title": lv.title} for lv in load_levels()]}


def _attempts_before(item_id: str, io: Streams) -> int:
    from grader.course.progress import ProgressError, load_progress

    try:
        return load_progress().level(item_id).attempts
    except (OSError, ProgressError) as exc:
        io.err.write(f"{PROG}: note: progress not read ({one_line(exc)}); hints start from the first.\n")
        return 0


def _record(item_id: str, captured: bool, hint_shown: bool, io: Streams) -> None:
    from grader.course.progress import ProgressError, record_level

    try:
        record_level(item_id, captured=captured, hint_shown=hint_shown)
    except (OSError, ProgressError) as exc:
        io.err.write(f"{PROG}: note: progress not saved ({one_line(exc)}).\n")


def _show_solution(args: argparse.Namespace, io: Streams) -> int:
    """``attack --level N --solution``: the level's worked solution, asked for, and the asking recorded where the
    progress board reads it (``course.reveals``). Nothing runs and no attempt is counted, as with ``%%attack N
    --solution``; a record that cannot be written is said on stderr, and the solution is still shown."""
    from grader.core.errors import SandboxLabError
    from grader.course.ladder import level
    from grader.course.reveals import reveal

    if args.attack or args.policy:
        raise UsageError("--solution runs nothing: it takes a level (--level N) and no ATTACK.py or --policy")
    lvl = level(args.level)
    sol = reveal(lvl, record=False)  # the uncapturable level: a LevelError saying why it has none (exit 2)
    recorded = True
    try:
        reveal(lvl)
    except (OSError, SandboxLabError, ValueError) as exc:
        recorded = False
        io.err.write(f"{PROG}: note: that you asked was not recorded ({one_line(exc)}).\n")
    if args.json:
        io.out.write(dump({"level": lvl.number, "id": lvl.id, "title": lvl.title,
                           "solution": {"answer": sol.answer, "channel": sol.channel, "also": list(sol.also)},
                           "recorded": recorded}))
        return EXIT_OK
    from grader.notebook.ladder_views import render_solution

    head = f"Level {lvl.number} ({lvl.id}): {lvl.title}"
    io.out.write(f"{head}\n{'=' * min(len(head), 100)}\n{render_solution(sol, asked=True)}\n")
    if recorded:
        io.out.write("\nYour progress board notes that you asked for this solution.\n")
    return EXIT_OK


def run_attack(args: argparse.Namespace, io: Streams) -> int:
    from grader.course.ladder import attack, level, load_levels
    from grader.course.progress import ProgressError, load_progress

    if args.list:
        if args.level is not None or args.attack or args.solution:
            raise UsageError("--list takes no level, no ATTACK.py and no --solution")
        if args.json:
            io.out.write(dump(_levels_json()))
            return EXIT_OK
        try:
            progress: Any = load_progress()
        except (OSError, ProgressError):
            progress = None
        for lv in load_levels():
            rec = progress.level(lv.item_id) if progress is not None else None
            mark = "✓" if rec and rec.captured is not None else ("·" if rec and rec.attempts else " ")
            tried = f"  ({rec.attempts} attempt{'s' if rec.attempts != 1 else ''})" if rec and rec.attempts else ""
            io.out.write(f"{mark} {lv.number:>2}  {lv.id:<26} {lv.title}{tried}\n")
        io.out.write(f"\nAttack a level with: {PROG} attack --level N ATTACK.py\n")
        return EXIT_OK
    if args.solution:
        if args.level is None:
            raise UsageError("--solution needs the level: --level N")
        return _show_solution(args, io)
    if args.level is None or not args.attack:
        raise UsageError("attack needs --level N and an ATTACK.py file (or --list to see the levels, "
                         "or --solution to see a level's worked solution)")
    lvl = level(args.level)
    code = _read_attack(args.attack)
    policy = load_policy(args.policy) if args.policy else None
    lvl.plan(policy=policy)  # the capstone's policy is checked (and every other level refuses one) before any engine starts
    before = _attempts_before(lvl.item_id, io)
    with pick_backend(args, io, shared=True) as backend:
        result = attack(lvl, code, backend, attempts_before=before, policy=policy)
    if result.captured is not None:  # a run that could not be judged is no attempt and unlocks no hint
        _record(lvl.item_id, result.captured, bool(result.hint), io)
        if result.note:
            io.err.write(f"{PROG}: note: {result.note}\n")
    else:
        io.err.write(f"{PROG}: error: could not judge the attack: {result.error}. Rerun it; this run is not counted.\n")
    if args.json:
        io.out.write(dump(result.to_json()))
    else:
        from grader.notebook.ladder_views import render_attack

        io.out.write(render_attack(result, attempt=before + 1))
        if result.captured is False and lvl.solution is not None:
            io.out.write(f"\nStuck? The hints never give the answer. `{PROG} attack --level {lvl.number} --solution` shows "
                         "the worked solution (your progress board notes that you asked).\n")
    if result.captured is None:
        return EXIT_BACKEND
    return EXIT_OK if result.captured else EXIT_NOT_FULL


# --- class keys (graded checks that stay given) --------------------------------------------------

_SECRET_MAX = 4096  # a class secret is one line: a larger file is not one
_SECRET_MIN = 16  # a short secret can be guessed, and with it every learner's key: 64 hex digits is the advice
_STUDENTS_MAX = 1024 * 1024


def _read_secret(path: str) -> str:
    """The class secret in ``path``, read from one open file: a regular file readable by its owner alone.

    The secret signs every learner's first answers, so a copy readable by others (a group, a shared home) is
    refused before anything is read, and no message ever shows what the file holds."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file. Make the class secret with: "
                         f"(umask 077; python3 -c 'import secrets; print(secrets.token_hex(32))' > {path})") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror}).") from None
    try:
        st = os.fstat(fd)  # the file opened, not the name: it cannot be swapped between the check and the read
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{path}: is not a regular file; the class secret is one line in a file of its own.")
        if st.st_mode & 0o077:
            raise UsageError(f"{path}: is open to others (mode {stat.S_IMODE(st.st_mode):04o}); the class secret must be "
                             f"readable by you alone. Run: chmod 600 {path}")
        with os.fdopen(os.dup(fd), "rb") as fh:
            raw = fh.read(_SECRET_MAX + 1)
    finally:
        os.close(fd)
    if len(raw) > _SECRET_MAX:
        raise UsageError(f"{path}: is larger than {_SECRET_MAX // 1024} KiB; the class secret is one line.")
    try:
        secret = raw.decode("utf-8").strip()  # stripped as autograde strips SANDBOX_LAB_CLASS_SECRET
    except UnicodeDecodeError:
        raise UsageError(f"{path}: is not UTF-8 text; the class secret is one line of text.") from None
    if "\n" in secret or "\r" in secret:
        raise UsageError(f"{path}: holds more than one line; the class secret is one line.")
    if len(secret) < _SECRET_MIN:
        raise UsageError(f"{path}: the class secret is {'empty' if not secret else 'too short'} (at least {_SECRET_MIN} "
                         "characters; 64 hex digits from python3 -c 'import secrets; print(secrets.token_hex(32))').")
    return secret


def _students(args: argparse.Namespace) -> list[str]:
    """The student ids on the command line, then those of ``--students`` (one a line, blank lines skipped), each once."""
    named = list(args.students)
    if args.students_file:
        text = _read_text(args.students_file, _STUDENTS_MAX, what="a list of student ids",
                          too_large="a class list is one student id a line")
        named += [line.strip() for line in text.splitlines() if line.strip()]
    for sid in named:
        # the key is made from the id exactly as nbgrader names the student; a tab or a newline would also break
        # the student<TAB>key lines
        if not sid or sid != sid.strip() or any(not c.isprintable() for c in sid):
            raise UsageError(f"{sid!r} is not a student id: nbgrader's ids are one word, e.g. the hub's user name")
    if not named:
        raise UsageError("class-keys needs the student ids: STUDENT ... or --students FILE (one id a line)")
    return list(dict.fromkeys(named))


def run_class_keys(args: argparse.Namespace, io: Streams) -> int:
    """Each learner's key (``SANDBOX_LAB_CLASS_KEY``) from the class secret, as autograde derives it."""
    from grader.course.first_answer import CLASS_KEY_ENV, learner_key

    students = _students(args)
    secret = _read_secret(args.secret_file)
    keys = [(sid, learner_key(secret, sid)) for sid in students]
    if args.json:
        io.out.write(dump({"env": CLASS_KEY_ENV, "keys": [{"student": sid, "key": key} for sid, key in keys]}))
    else:
        io.out.write("".join(f"{sid}\t{key}\n" for sid, key in keys))
    return EXIT_OK
