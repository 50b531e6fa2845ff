"""A class's submissions as handed in: one policy's bytes per student, read from a directory or a CSV.

``read_submissions`` takes a directory (one policy file per student, student
id = file stem) or a CSV (``student,policy_path`` or ``student,policy_json``).
What cannot be read (a link, a pipe, a file over ``MAX_SUBMISSION_BYTES``, a
student listed twice) becomes a ``Submission`` with its error, never a crash:
``batch`` turns it into that student's error row and grades the rest. Only a
CSV that is not a CSV at all (not UTF-8, no header, a broken line) stops the
batch, with the file and line named.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional, Union

from grader.core.capped import NotRegular, TooLarge, read_regular
from grader.core.errors import SandboxLabError
from grader.core.text import printable

__all__ = ["MAX_SUBMISSION_BYTES", "Submission", "read_submissions"]

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


def _read(student: str, path: Path) -> Submission:
    try:
        return Submission(student, str(path), read_regular(path, MAX_SUBMISSION_BYTES))
    except NotRegular as exc:  # a link points into somebody else's files; a pipe would block the batch
        return Submission(student, str(path), None, f"{path.name} is {exc.what}, not a policy file; grade-batch reads "
                                                    "regular files only and never follows a link")
    except TooLarge:
        return Submission(student, str(path), None, f"{path.name} is over {MAX_SUBMISSION_BYTES:,} bytes; a policy is at most {MAX_SUBMISSION_BYTES:,}")
    except OSError as exc:
        return Submission(student, str(path), None, f"cannot read {path}: {exc.strerror or exc}")


def _from_dir(folder: Path) -> list[Submission]:
    subs = []
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or path.is_dir():
            continue  # hidden files (.DS_Store, editor backups) and folders are not submissions
        subs.append(_read(printable(path.stem), path))  # a name that is not UTF-8 is still one student
    return subs


def _from_csv(path: Path) -> list[Submission]:
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SandboxLabError(f"{path}: byte {exc.start} is not UTF-8; save the file as UTF-8 (a spreadsheet's "
                              "\"CSV UTF-8\") and run again") from None
    except OSError as exc:
        raise SandboxLabError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    reader = csv.reader(io.StringIO(text))
    try:
        return _csv_rows(path, reader)
    except csv.Error as exc:  # a NUL byte, a field over the csv module's limit (128 KiB), a stray quote in strict mode
        raise SandboxLabError(f"{path}: line {reader.line_num} is not a CSV line ({exc}); no submission was graded") from None


def _csv_rows(path: Path, reader: Iterator[list[str]]) -> list[Submission]:
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
