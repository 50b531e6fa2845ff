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
  resumes where it stopped;
* a stored grade is reused only for exactly what decided it (``Grading``: the
  Sandbox Lab version, the task's rubric, the world, the backend) and the same
  student's same policy bytes. Anything else (``--backend docker`` after a
  static batch, an edited rubric, an upgrade) grades again, and the summary
  names every student whose score changed and by how much. ``regrade=True``
  reuses nothing.

Reading the submissions (a directory or a CSV) is ``intake``'s; this module grades what it read.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
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

from grader.core import version
from grader.backends.base import Backend
from grader.core.errors import PolicyError
from grader.core.policy import Policy, load_policy
from grader.core.text import printable
from grader.grading.grade import Grade, grade
# re-exported: a class's submissions are read in intake; callers import them from here as before
from grader.grading.intake import MAX_SUBMISSION_BYTES, Submission, read_submissions
from grader.grading.tasks import Task

__all__ = [
    "Gradebook",
    "Grading",
    "MAX_SUBMISSION_BYTES",
    "ProgressBar",
    "Row",
    "ScoreChange",
    "Submission",
    "grade_batch",
    "grading_of",
    "output_files",
    "read_submissions",
]

Status = Literal["ok", "invalid", "error"]
Progress = Callable[[int, int], None]  # (rows done, rows in all)
JOURNAL_VERSION = 2  # 1 keyed a row by student and policy only: its rows are never reused, only compared with


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

    def __post_init__(self) -> None:
        # a file name (a student id) or an old journal line may hold what UTF-8 cannot (a lone surrogate): written
        # escaped, so one row can never stop the gradebook from being written
        for name in ("student", "feedback", "source"):
            object.__setattr__(self, name, printable(getattr(self, name)))

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
    resumed: int = 0  # rows taken from the journal: same student, policy bytes and ``Grading``
    changes: tuple["ScoreChange", ...] = ()  # students whose score differs from the last one the journal held for them

    def counts(self) -> dict[str, int]:
        out = {"ok": 0, "invalid": 0, "error": 0, "full_marks": 0}
        for r in self.rows:
            out[r.status] += 1
            out["full_marks"] += r.status == "ok" and r.score == r.max_score
        return out

    def tally(self) -> str:
        """Each student counted once, in the instructor's words: "3 students: 1 full marks, 1 below full marks,
        1 invalid policy" (a kind nobody is in is left out; the counts add up to the number of students)."""
        c = self.counts()
        kinds = ((c["full_marks"], "full marks"), (c["ok"] - c["full_marks"], "below full marks"),
                 (c["invalid"], "invalid policy"), (c["error"], "could not be graded"))
        students = f"{len(self.rows)} student{'' if len(self.rows) == 1 else 's'}"
        parts = [f"{n} {what}" for n, what in kinds if n]
        return f"{students}: {', '.join(parts)}" if parts else students

    def summary(self) -> str:
        line = (
            f"{self.task}, {self.tally()} (graded with the {self.backend} backend in {self.seconds:.1f} s: "
            f"{self.runs} run(s), {self.resumed} row(s) resumed from the journal)"
        )
        if not self.changes:
            return line
        return line + f"\nscore changed for {len(self.changes)} student(s) since the journal's last grade:\n" + "\n".join(
            f"  {ch}" for ch in self.changes
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.task, "max_score": self.max_score, "backend": self.backend,
            "counts": self.counts(), "rows": [r.to_json() for r in self.rows],
            "changes": [ch.to_json() for ch in self.changes],
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


@dataclass(frozen=True)
class ScoreChange:
    """A student whose score differs from their last grade in the journal (made under another ``Grading`` or policy)."""

    student: str
    before: int
    after: int
    max_score: int  # of the new grade
    why: str  # what differs from the stored grade: "backend static → docker", "rubric", "policy", ...

    def __str__(self) -> str:
        return f"{self.student}: {self.before} → {self.after} of {self.max_score} ({self.after - self.before:+d}; {self.why})"

    def to_json(self) -> dict[str, Any]:
        return {"student": self.student, "before": self.before, "after": self.after, "delta": self.after - self.before,
                "max_score": self.max_score, "why": self.why}


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Grading:
    """Everything besides the policy that decides a grade: a stored grade is reused only under an equal one."""

    version: str  # Sandbox Lab's: the probes, the judges and the analyzer are code
    task: str
    rubric: str  # sha256 of the task's checks and needs
    world: str  # sha256 of the simulated world the runs are judged against
    backend: str

    def to_json(self) -> dict[str, str]:
        return dataclasses.asdict(self)

    def differences(self, other: "Grading") -> list[str]:
        """What differs from ``other``, in words (``backend static → docker``)."""
        out = []
        for f in dataclasses.fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            if mine != theirs:
                short = f.name in ("rubric", "world")  # hashes: saying that it changed is enough
                out.append(f.name if short else f"{f.name} {theirs} → {mine}")
        return out


def grading_of(task: Task, backend: Backend) -> Grading:
    """The ``Grading`` of grading ``task`` with ``backend`` by this installation of Sandbox Lab."""
    rubric = {"checks": [dataclasses.asdict(c) for c in task.checks], "needs": dataclasses.asdict(task.needs)}
    return Grading(version.__version__, task.id, _digest(rubric), _digest(dataclasses.asdict(task.world)), backend.name)


def output_files(out: Union[str, os.PathLike[str]]) -> dict[str, Path]:
    """Where ``grade_batch(out=...)`` writes: the gradebook as ``csv`` and ``json``, and the ``journal`` of finished rows."""
    d = Path(out)
    return {"csv": d / "gradebook.csv", "json": d / "gradebook.json", "journal": d / "journal.jsonl"}


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        # backslashreplace: rows are printable already; this is the last guard, never a half-written gradebook
        tmp.write_text(text, encoding="utf-8", errors="backslashreplace")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# --- the journal --------------------------------------------------------------------------


def _journal_key(student: str, sha: str) -> str:
    return f"{student}\x00{sha}"


@dataclass(frozen=True)
class _Stored:
    """A graded row the journal holds, and the ``Grading`` it was made under (None: a version-1 line)."""

    row: Row
    grading: Optional[Grading]


def _grading_from(d: Any) -> Optional[Grading]:
    if not isinstance(d, dict) or set(d) != {f.name for f in dataclasses.fields(Grading)}:
        return None
    if not all(isinstance(v, str) for v in d.values()):
        return None
    return Grading(**d)


def _load_journal(path: Path, task: Task) -> tuple[dict[str, _Stored], dict[str, list[_Stored]]]:
    """What earlier batches of ``task`` stored: (by student and policy sha256, the last of each; by student, all in order).

    Lines cut short by a kill are skipped; error rows (e.g. Docker stopped) are never reused or compared with.
    """
    by_key: dict[str, _Stored] = {}
    by_student: dict[str, list[_Stored]] = {}
    if not path.exists():
        return by_key, by_student
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            d = json.loads(line)
            if d.get("v") not in (1, JOURNAL_VERSION) or d.get("task") != task.id:
                continue
            row = Row.from_json(d["row"])
            grading = _grading_from(d.get("grading")) if d["v"] == JOURNAL_VERSION else None
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        if row.status == "error":
            continue  # an error (e.g. Docker stopped) deserves another try on resume
        stored = _Stored(row, grading)
        by_key[_journal_key(row.student, row.sha256)] = stored
        by_student.setdefault(row.student, []).append(stored)
    return by_key, by_student


def _change(row: Row, grading: Grading, history: list[_Stored], *, resumed: bool) -> Optional[ScoreChange]:
    """The score change of ``row`` against the student's last stored grade, if any.

    A row graded now is compared with the last grade stored; a row resumed from the journal
    (a batch killed and rerun) with the last one stored under another grading or policy.
    """
    if resumed:
        history = [h for h in history if h.grading != grading or h.row.sha256 != row.sha256]
    before = history[-1] if history else None
    if before is None or row.status == "error" or before.row.score == row.score:
        return None
    if before.grading is None:
        why = ["a grade stored by an earlier version of Sandbox Lab"]
    else:
        why = grading.differences(before.grading)
    if before.row.sha256 != row.sha256:
        why.append("policy")
    return ScoreChange(row.student, before.row.score, row.score, row.max_score, ", ".join(why) or "graded again")


class _Journal:
    """Append-only JSONL: one line per finished row with the ``Grading`` it was made under, flushed at once."""

    def __init__(self, path: Optional[Path], task: Task, grading: Grading) -> None:
        self.task = task
        self.grading = grading
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
        line = json.dumps(
            {"v": JOURNAL_VERSION, "task": self.task.id, "grading": self.grading.to_json(), "row": row.to_json()},
            separators=(",", ":"),
        )
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


def _fault(exc: BaseException, *, retry: bool = False) -> str:
    """A fault of the grader's own, in the words of an error row (``the grader failed (KeyError: 'x')``). Only a
    run that failed (``retry``: the engine stopped, a container died) is worth rerunning; a fault grading this
    submission's text would come back the same, so that row names the fault and says whom to tell."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    what = f"the grader failed ({type(exc).__name__}: {printable(first)})"
    if retry:
        return f"{what}; rerun the batch to retry"
    return (f"{what} on this submission; rerunning will fail the same way. This is a bug in Sandbox Lab: report it "
            "with this submission, and grade it by hand meanwhile")


def _graded_or_error(sub: Submission, task: Task, backend: Backend, graded: Callable[[], Grade]) -> Row:
    """The row of ``graded()``'s grade; an error row naming the fault when grading or writing the row fails."""
    try:
        return _row(sub, graded())
    except Exception as exc:  # noqa: BLE001 - one submission's fault is its row: every other student is still graded
        return _error_row(sub, task, _fault(exc), backend.name)


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
    regrade: bool = False,
) -> Gradebook:
    """Grade every submission of ``inputs`` on ``task`` and return the gradebook (written to ``out`` if given).

    Args:
        inputs: a directory, a CSV file, or submissions already read.
        workers: backend runs at once (bounded thread pool).
        dedupe: grade each distinct normalized policy once and share its grade.
        journal: JSONL file of finished rows; a row found there is not graded again when its
            student, policy bytes and ``grading_of(task, backend)`` are all equal.
            Defaults to ``output_files(out)["journal"]`` when ``out`` is given.
        progress: called with (rows done, rows in all) as rows finish.
        on_row: called with each row as soon as it is final (autograde hands each notebook its own).
        regrade: grade every submission afresh, whatever the journal holds (it is still read,
            to name the students whose score changed).
    """
    started = time.monotonic()
    subs = inputs if isinstance(inputs, list) else read_submissions(inputs)
    jpath = Path(journal) if journal is not None else (output_files(out)["journal"] if out is not None else None)
    grading = grading_of(task, backend)
    done_before, history = _load_journal(jpath, task) if jpath else ({}, {})
    log = _Journal(jpath, task, grading)
    rows: dict[str, Row] = {}
    changes: dict[str, ScoreChange] = {}
    total = len(subs)
    resumed = 0

    def finish(row: Row, *, from_journal: bool = False) -> None:
        rows[row.student] = row
        if not from_journal:
            log.append(row)
        change = _change(row, grading, history.get(row.student, []), resumed=from_journal)
        if change is not None:
            changes[row.student] = change
        if progress:
            progress(len(rows), total)
        if on_row:
            on_row(row)

    groups: dict[str, list[tuple[Submission, Policy]]] = {}
    runs = 0
    try:
        for sub in subs:
            stored = done_before.get(_journal_key(sub.student, sub.sha256)) if sub.data is not None else None
            if stored is not None and stored.grading == grading and not regrade:
                resumed += 1
                finish(stored.row, from_journal=True)
            elif sub.data is None:
                finish(_error_row(sub, task, sub.error, backend.name))
            else:
                try:
                    policy = load_policy(sub.data, name=Path(sub.source).name)
                    key = policy.canonical_json() if dedupe else f"{sub.student}\x00{sub.source}"
                except PolicyError as exc:
                    finish(_graded_or_error(sub, task, backend, functools.partial(grade, task, exc, backend)))
                    continue
                except Exception as exc:  # noqa: BLE001 - a fault reading one submission is its row, never the class's end
                    finish(_error_row(sub, task, _fault(exc), backend.name))
                    continue
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
                            for sub, _ in group:
                                finish(_error_row(sub, task, _fault(exc, retry=True), backend.name))
                            continue
                        for sub, _ in group:
                            finish(_graded_or_error(sub, task, backend, lambda: g))
            except BaseException:
                for fut in pending:
                    fut.cancel()
                raise
    finally:
        log.close()

    book = Gradebook(
        task=task.id, max_score=task.max_score, rows=tuple(rows[s] for s in sorted(rows)),
        backend=backend.name, seconds=time.monotonic() - started, runs=runs, resumed=resumed,
        changes=tuple(changes[s] for s in sorted(changes)),
    )
    if out is not None:
        book.write(out)
    return book
