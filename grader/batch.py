"""Grading a class: many submissions of one task, in parallel, into one gradebook.

``grade_batch`` reads a directory (one policy file per student, student id =
file stem) or a CSV (``student,policy_path`` or ``student,policy_json``),
grades every distinct normalized policy once on a bounded thread pool, and
returns a ``Gradebook`` (one row per student, with feedback) that it can write
as ``gradebook.csv`` and ``gradebook.json``.

Built for an instructor with a class of 300:

* a broken submission (unreadable, invalid, duplicated student) becomes a row
  with its error; it never stops the batch;
* classes submit many identical policies, so equal ``canonical_json()`` forms
  are graded once (``dedupe``);
* each finished row is appended to a JSONL journal at once, so a killed batch
  resumes where it stopped: a row whose student id and file sha256 are in the
  journal is not graded again.

Imports: tasks, grading, policy, errors, backends.base. Nothing downstream.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Literal, Optional, Union

from .backends.base import Backend
from .errors import PolicyError, SandboxLabError
from .policy import Policy, load_policy
from .grading import Grade, grade
from .tasks import Task

__all__ = [
    "Gradebook",
    "ProgressBar",
    "Row",
    "Submission",
    "grade_batch",
    "output_files",
    "read_submissions",
]

Status = Literal["ok", "invalid", "error"]
Progress = Callable[[int, int], None]  # (rows done, rows in all)
JOURNAL_VERSION = 1
MAX_SUBMISSION_BYTES = 1_000_000  # load_policy's own limit; refuse bigger files before reading them whole


@dataclass(frozen=True)
class Submission:
    """One student's policy as submitted: the bytes, or why they could not be read."""

    student: str
    source: str  # file path or "<csv>:<line>" for inline JSON
    data: Optional[bytes]
    error: str = ""

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest() if self.data is not None else ""


@dataclass(frozen=True)
class Row:
    """One student's line in the gradebook."""

    student: str
    score: int
    max_score: int
    status: Status
    feedback: str
    source: str = ""
    sha256: str = ""
    checks: tuple[dict[str, Any], ...] = ()
    backend: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "student": self.student, "score": self.score, "max_score": self.max_score, "status": self.status,
            "feedback": self.feedback, "source": self.source, "sha256": self.sha256,
            "backend": self.backend, "checks": list(self.checks),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Row":
        return cls(
            student=str(d["student"]), score=int(d["score"]), max_score=int(d["max_score"]),
            status=d["status"], feedback=str(d["feedback"]), source=str(d.get("source", "")),
            sha256=str(d.get("sha256", "")), checks=tuple(d.get("checks", ())), backend=str(d.get("backend", "")),
        )


@dataclass(frozen=True)
class Gradebook:
    """Every student's row for one task, and how the batch went."""

    task: str
    max_score: int
    rows: tuple[Row, ...]
    backend: str
    seconds: float = 0.0
    runs: int = 0  # backend runs this batch made (deduplication makes this smaller than the rows)
    resumed: int = 0  # rows taken from the journal of an earlier, interrupted batch

    def counts(self) -> dict[str, int]:
        out = {"ok": 0, "invalid": 0, "error": 0, "full_marks": 0}
        for r in self.rows:
            out[r.status] += 1
            out["full_marks"] += r.status == "ok" and r.score == r.max_score
        return out

    def summary(self) -> str:
        c = self.counts()
        return (
            f"{self.task}: {len(self.rows)} students graded with the {self.backend} backend in {self.seconds:.1f} s "
            f"({self.runs} run(s), {self.resumed} row(s) resumed from the journal): "
            f"{c['full_marks']} full marks, {c['ok']} ok, {c['invalid']} invalid, {c['error']} error"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.task, "max_score": self.max_score, "backend": self.backend,
            "counts": self.counts(), "rows": [r.to_json() for r in self.rows],
        }

    def to_csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["student", "score", "max_score", "status", "feedback"])
        for r in self.rows:
            w.writerow([r.student, r.score, r.max_score, r.status, r.feedback])
        return buf.getvalue()

    def write(self, out_dir: Union[str, os.PathLike[str]]) -> tuple[Path, Path]:
        """Write ``gradebook.csv`` and ``gradebook.json`` into ``out_dir`` (created if needed)."""
        files = output_files(out_dir)
        csv_path, json_path = files["csv"], files["json"]
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(csv_path, self.to_csv())
        _atomic_write(json_path, json.dumps(self.to_json(), indent=2) + "\n")
        return csv_path, json_path


def output_files(out: Union[str, os.PathLike[str]]) -> dict[str, Path]:
    """Where ``grade_batch(out=...)`` writes: the gradebook as ``csv`` and ``json``, and the ``journal`` of finished rows."""
    d = Path(out)
    return {"csv": d / "gradebook.csv", "json": d / "gradebook.json", "journal": d / "journal.jsonl"}


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# --- reading submissions ------------------------------------------------------------------


def _read(student: str, path: Path) -> Submission:
    try:
        size = path.stat().st_size
        if size > MAX_SUBMISSION_BYTES:
            return Submission(student, str(path), None, f"{path.name} is {size:,} bytes; a policy is at most {MAX_SUBMISSION_BYTES:,}")
        return Submission(student, str(path), path.read_bytes())
    except OSError as exc:
        return Submission(student, str(path), None, f"cannot read {path}: {exc.strerror or exc}")


def _from_dir(folder: Path) -> list[Submission]:
    subs = []
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or path.is_dir():
            continue  # hidden files (.DS_Store, editor backups) and folders are not submissions
        subs.append(_read(path.stem, path))
    return subs


def _from_csv(path: Path) -> list[Submission]:
    text = path.read_text(encoding="utf-8-sig")
    reader = csv.reader(io.StringIO(text))
    header = [h.strip().lower() for h in next(reader, [])]
    if len(header) < 2 or header[0] != "student" or header[1] not in ("policy_path", "policy_json"):
        raise SandboxLabError(
            f"{path}: the first line must be a header, either student,policy_path or student,policy_json "
            f"(found {','.join(header) or 'nothing'})"
        )
    inline = header[1] == "policy_json"
    subs = []
    for n, rec in enumerate(reader, start=2):
        if not rec or all(not c.strip() for c in rec):
            continue
        student = rec[0].strip()
        value = rec[1] if len(rec) > 1 else ""
        if not student:
            subs.append(Submission(f"<line {n}>", f"{path}:{n}", None, f"{path}:{n}: no student id"))
        elif inline:
            subs.append(Submission(student, f"{path.name}:{n}", value.encode("utf-8")))
        elif not value.strip():
            subs.append(Submission(student, f"{path}:{n}", None, f"{path}:{n}: no policy path"))
        else:
            p = Path(value.strip())
            subs.append(_read(student, p if p.is_absolute() else path.parent / p))
    return subs


def read_submissions(inputs: Union[str, os.PathLike[str]]) -> list[Submission]:
    """One ``Submission`` per student from a directory or a CSV; a student listed twice gets an error row."""
    src = Path(inputs)
    if src.is_dir():
        subs = _from_dir(src)
    elif src.is_file():
        subs = _from_csv(src)
    else:
        raise SandboxLabError(f"{src}: no such directory or CSV file")
    by_student: dict[str, list[Submission]] = {}
    for s in subs:
        by_student.setdefault(s.student, []).append(s)
    out = []
    for student, group in by_student.items():
        if len(group) == 1:
            out.append(group[0])
        else:
            # never guess which one counts: the instructor decides
            srcs = ", ".join(s.source for s in group)
            out.append(Submission(student, srcs, None, f"{len(group)} submissions for student {student!r} ({srcs}); keep one"))
    return out


# --- the journal --------------------------------------------------------------------------


def _journal_key(student: str, sha: str) -> str:
    return f"{student}\x00{sha}"


def _load_journal(path: Path, task: Task) -> dict[str, Row]:
    """Rows already finished by an earlier run of this batch; lines cut short by a kill are skipped."""
    done: dict[str, Row] = {}
    if not path.exists():
        return done
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            d = json.loads(line)
            if d.get("v") != JOURNAL_VERSION or d.get("task") != task.id:
                continue
            row = Row.from_json(d["row"])
        except (ValueError, KeyError, TypeError):
            continue
        if row.status == "error":
            continue  # an error (e.g. Docker stopped) deserves another try on resume
        done[_journal_key(row.student, row.sha256)] = row
    return done


class _Journal:
    """Append-only JSONL: one line per finished row, flushed at once."""

    def __init__(self, path: Optional[Path], task: Task) -> None:
        self.task = task
        self._fh: Optional[IO[str]] = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            cut_short = path.exists() and path.stat().st_size > 0 and not path.read_bytes().endswith(b"\n")
            self._fh = path.open("a", encoding="utf-8")
            if cut_short:
                self._fh.write("\n")  # a kill cut the last line short: never glue a new row onto it
        self._lock = threading.Lock()

    def append(self, row: Row) -> None:
        if self._fh is None:
            return
        line = json.dumps({"v": JOURNAL_VERSION, "task": self.task.id, "row": row.to_json()}, separators=(",", ":"))
        with self._lock:
            self._fh.write(line + "\n")
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()


# --- progress -----------------------------------------------------------------------------


class ProgressBar:
    """A text progress bar on stderr (redrawn in place on a terminal, a line per 10% otherwise)."""

    def __init__(self, label: str = "grading", stream: Optional[IO[str]] = None, width: int = 30) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.started = time.monotonic()
        self._last_decile = -1
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def __call__(self, done: int, total: int) -> None:
        frac = done / total if total else 1.0
        filled = int(self.width * frac)
        elapsed = time.monotonic() - self.started
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else 0.0
        line = f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {done}/{total}  {rate:.1f}/s  eta {eta:.0f}s"
        if self._tty:
            self.stream.write("\r" + line + ("\n" if done >= total else ""))
            self.stream.flush()
        else:
            decile = int(frac * 10)
            if decile != self._last_decile or done >= total:
                self._last_decile = decile
                self.stream.write(line + "\n")
                self.stream.flush()


# --- grading ------------------------------------------------------------------------------


def _row(sub: Submission, g: Grade) -> Row:
    return Row(
        student=sub.student, score=g.score, max_score=g.max_score,
        status="invalid" if not g.valid else "error" if g.could_not_grade else "ok",  # an error row is regraded on resume
        feedback=g.feedback(), source=sub.source, sha256=sub.sha256,
        checks=tuple(c.to_json() for c in g.checks), backend=g.backend,
    )


def _error_row(sub: Submission, task: Task, message: str, backend: str) -> Row:
    return Row(sub.student, 0, task.max_score, "error", f"{task.id}: not graded: {message}", sub.source, sub.sha256, (), backend)


def grade_batch(
    task: Task,
    inputs: Union[str, os.PathLike[str], list[Submission]],
    backend: Backend,
    *,
    workers: int = 4,
    dedupe: bool = True,
    journal: Optional[Union[str, os.PathLike[str]]] = None,
    progress: Optional[Progress] = None,
    on_row: Optional[Callable[[Row], None]] = None,
    out: Optional[Union[str, os.PathLike[str]]] = None,
) -> Gradebook:
    """Grade every submission of ``inputs`` on ``task`` and return the gradebook (written to ``out`` if given).

    Args:
        inputs: a directory, a CSV file, or submissions already read.
        workers: backend runs at once (bounded thread pool).
        dedupe: grade each distinct normalized policy once and share its grade.
        journal: JSONL file of finished rows; rows found there are not graded again.
            Defaults to ``output_files(out)["journal"]`` when ``out`` is given.
        progress: called with (rows done, rows in all) as rows finish.
        on_row: called with each row as soon as it is final (autograde hands each notebook its own).
    """
    started = time.monotonic()
    subs = inputs if isinstance(inputs, list) else read_submissions(inputs)
    jpath = Path(journal) if journal is not None else (output_files(out)["journal"] if out is not None else None)
    done_before = _load_journal(jpath, task) if jpath else {}
    log = _Journal(jpath, task)
    rows: dict[str, Row] = {}
    total = len(subs)
    resumed = 0

    def finish(row: Row, *, from_journal: bool = False) -> None:
        rows[row.student] = row
        if not from_journal:
            log.append(row)
        if progress:
            progress(len(rows), total)
        if on_row:
            on_row(row)

    groups: dict[str, list[tuple[Submission, Policy]]] = {}
    runs = 0
    try:
        for sub in subs:
            prior = done_before.get(_journal_key(sub.student, sub.sha256)) if sub.data is not None else None
            if prior is not None:
                resumed += 1
                finish(prior, from_journal=True)
            elif sub.data is None:
                finish(_error_row(sub, task, sub.error, backend.name))
            else:
                try:
                    policy = load_policy(sub.data, name=Path(sub.source).name)
                except PolicyError as exc:
                    finish(_row(sub, grade(task, exc, backend)))
                    continue
                key = policy.canonical_json() if dedupe else f"{sub.student}\x00{sub.source}"
                groups.setdefault(key, []).append((sub, policy))

        with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="grade") as pool:
            pending: dict[Future[Grade], list[tuple[Submission, Policy]]] = {}
            queue = list(groups.values())
            try:
                # Submit lazily, at most 2 per worker ahead: a KeyboardInterrupt
                # then leaves little queued work to cancel.
                while queue or pending:
                    while queue and len(pending) < 2 * max(1, workers):
                        group = queue.pop(0)
                        pending[pool.submit(grade, task, group[0][1], backend)] = group
                    finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in finished:
                        group = pending.pop(fut)
                        runs += 1
                        try:
                            g = fut.result()
                        except Exception as exc:  # noqa: BLE001 - a failed run is a row, never the end of the batch
                            msg = f"the grader failed ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); rerun the batch to retry"
                            for sub, _ in group:
                                finish(_error_row(sub, task, msg, backend.name))
                            continue
                        for sub, _ in group:
                            finish(_row(sub, g))
            except BaseException:
                for fut in pending:
                    fut.cancel()
                raise
    finally:
        log.close()

    book = Gradebook(
        task=task.id, max_score=task.max_score, rows=tuple(rows[s] for s in sorted(rows)),
        backend=backend.name, seconds=time.monotonic() - started, runs=runs, resumed=resumed,
    )
    if out is not None:
        book.write(out)
    return book
