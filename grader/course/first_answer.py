"""The first answer to a graded lesson check: recorded when the check runs, and judged by autograde.

Lesson 05 judges its two graded letters in the lesson (``quiz_widgets.graded``).
Self-paced (Binder), the check shows the verdict, the reasoning and so the key
at once: that immediate, kind feedback is what makes the lesson teach alone,
and nothing here changes it. In a class the same notebook is scored by
``nbgrader autograde``, and a key seen before submitting must not be worth
points: answer, read the key, change the letter, submit.

The choice, in a class (the hub gives each learner's kernel ``CLASS_KEY_ENV``):

1. **The key is withheld.** The check says "answer recorded" and nothing of
   right or wrong (``quiz_views.graded_html``); the verdict comes with the
   feedback the instructor releases after grading. This closes the path at
   its source: there is no key on screen to act on.
2. **The first answer is kept where editing the notebook does not reach it,
   and signed.** The first run of a check appends one record to
   ``first-answers.jsonl`` beside the notebook (submitted with it by ``nbgrader
   submit``), and the check's output carries the same record. A record is
   signed with the learner's key, ``HMAC(class secret, student id)``
   (``learner_key``): the grader holds the class secret, learners never do.
   Autograde (``judge_class_answer``) counts the first answer from a record that
   verifies for *this* student, and scores 0 with the reason when there is no
   trustworthy one: none at all (outputs cleared and the file deleted), one
   altered by hand, one copied from a classmate (signed with another key), or an
   unsigned one (the check ran without the class key, so it showed the key).
   Clearing outputs alone changes nothing: the file still holds the record.

Why not only one of the two. Withholding alone: a learner who unsets the
variable in their kernel sees the key and changes the letter, and nothing would
say so. A record alone, shown beside the key: the record is the learner's file,
so an edit or a deletion would silently leave the letter to be scored (what this
replaces). Signing without withholding would still show the key before the
record is safe.

What a learner in full control of their own kernel and files can still do,
said plainly. Their kernel holds their own key (it must, to sign), so a learner
who reads this module can sign a record of their choosing, or delete the file
and the outputs and answer again. Neither helps without the key to the
question, and that they can get without any of this: the bank stores each key
as a sha256 of one of four letters (``quiz``), and a classmate can tell them.
What this guarantees is narrower and honest: the course never shows the key
before the first answer is safe, and an edited, copied, hand-forged or deleted
record is never read as a first answer (it scores 0, saying why). An instructor
who needs more than that runs a proctored quiz.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

__all__ = [
    "CLASS_KEY_ENV",
    "CLASS_SECRET_ENV",
    "FIRST_ANSWER_MIME",
    "LEDGER",
    "FirstAnswer",
    "class_key",
    "first_answer_record",
    "judge_class_answer",
    "learner_key",
    "parse_ledger",
    "read_first_answer",
]

# Its own MIME type: JupyterLab keeps it in the saved output (and shows nothing for it), and no other
# output can be mistaken for it.
FIRST_ANSWER_MIME = "application/vnd.sandbox-lab.first-answer+json"
# The learner's key, set by the hub in each learner's environment; its presence is what makes a kernel a class's.
CLASS_KEY_ENV = "SANDBOX_LAB_CLASS_KEY"
# The class secret, set only where nbgrader autograde runs (never in a learner's environment).
CLASS_SECRET_ENV = "SANDBOX_LAB_CLASS_SECRET"
LEDGER = "first-answers.jsonl"  # beside the notebook: nbgrader submit takes the assignment folder whole
_KEYS = {"question", "first_solved"}  # a self-paced record (unsigned)
_SIGNED = {"question", "first_solved", "at", "mac"}
_KEY_CONTEXT = "sandbox-lab first answer:"  # a learner's key is used for nothing else


@dataclass(frozen=True)
class FirstAnswer:
    """What autograde knows of a check's first answer: right, wrong, or no trustworthy one (``solved`` None, with why)."""

    solved: Optional[bool]
    reason: str = ""


def learner_key(secret: str, student: str) -> str:
    """The key the hub gives ``student``'s kernel (``CLASS_KEY_ENV``), from the class secret; autograde derives the same."""
    return hmac.new(secret.encode("utf-8"), (_KEY_CONTEXT + student).encode("utf-8"), hashlib.sha256).hexdigest()


def class_key(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """This kernel's learner key, or None outside a class (self-paced: immediate feedback)."""
    value = (os.environ if environ is None else environ).get(CLASS_KEY_ENV, "").strip()
    return value or None


def _mac(key: str, question_id: str, first_solved: bool, at: float) -> str:
    body = json.dumps([question_id, first_solved, at], separators=(",", ":"))
    return hmac.new(key.encode("utf-8"), body.encode("utf-8"), hashlib.sha256).hexdigest()


def _signed_ok(record: Any, key: str) -> bool:
    return (isinstance(record, dict) and set(record) == _SIGNED and isinstance(record["question"], str)
            and type(record["first_solved"]) is bool and type(record["at"]) in (int, float)
            and isinstance(record["mac"], str)
            and hmac.compare_digest(record["mac"], _mac(key, record["question"], record["first_solved"], float(record["at"]))))


def first_answer_record(question_id: str, first_solved: bool, *, key: Optional[str] = None, ledger: Optional[Path] = None,
                        now: Optional[float] = None) -> dict[str, Any]:
    """Record a graded check's first answer; what its output carries.

    Self-paced (no learner key): ``{"question", "first_solved"}``, as shown with
    the key. In a class (``key``, default ``class_key()``): the first record of
    this question in the ledger (``ledger``, default ``first-answers.jsonl`` in
    the working directory) that verifies, or a new one appended there; a later
    run never replaces it. A ledger that cannot be written leaves the record in
    the output alone (autograde reads both).
    """
    key = class_key() if key is None else key
    if not key:
        return {"question": question_id, "first_solved": bool(first_solved)}
    path = Path(LEDGER) if ledger is None else ledger
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        text = ""
    records, _ = parse_ledger(text)
    for rec in records:
        if isinstance(rec, dict) and rec.get("question") == question_id and _signed_ok(rec, key):
            return dict(rec)
    at = float(round(time.time() if now is None else now, 3))
    record = {"question": question_id, "first_solved": bool(first_solved), "at": at,
              "mac": _mac(key, question_id, bool(first_solved), at)}
    try:
        with path.open("a", encoding="utf-8") as fh:  # append only: an earlier record is never rewritten
            fh.write(json.dumps(record, sort_keys=True) + "\n")
    except OSError:
        pass  # the output still carries it
    return record


def parse_ledger(text: str) -> tuple[list[Any], str]:
    """The records of a ledger's text, one JSON value a line, and a problem ("" when every line parses)."""
    out: list[Any] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            return out, f"{LEDGER} line {n} is not a record"
    return out, ""


def _output_records(outputs: Any) -> list[Any]:
    found = []
    for out in outputs if isinstance(outputs, list) else []:
        data = out.get("data") if isinstance(out, dict) else None
        if isinstance(data, dict) and FIRST_ANSWER_MIME in data:
            found.append(data[FIRST_ANSWER_MIME])
    return found


def read_first_answer(outputs: Any, question_id: str) -> tuple[bool, Optional[bool]]:
    """(found a record, whether every first attempt recorded for ``question_id`` was right) from a cell's outputs.

    The reading where no class secret is configured (records unverified). Fails closed: a record of this MIME
    type that is not exactly one of the shapes written above (unknown or missing keys, a non-bool, another
    question's id under this cell's call) counts as a wrong first attempt; several records count as right only
    if every one says so.
    """
    found, solved = False, True
    for record in _output_records(outputs):
        found = True
        ok = (isinstance(record, dict) and set(record) in (_KEYS, _SIGNED) and record["question"] == question_id
              and type(record["first_solved"]) is bool)
        solved = solved and ok and bool(record["first_solved"])
    return found, (solved if found else None)


NO_RECORD = ("no trustworthy first answer: no record of it was submitted (the check cell never ran in class, or its "
             f"output and {LEDGER} were removed). Run the check cell before submitting, and submit {LEDGER} with the notebook")
ALTERED = ("no trustworthy first answer: a first-answer record of this check was altered, or was made for another "
           "learner; only the records your own class kernel writes count")
UNSIGNED = ("no trustworthy first answer: this check ran without the class key, where it shows the answer, so a letter "
            "written after it cannot be told from the first")


def judge_class_answer(question_id: str, outputs: Any, ledger: Iterable[Any], ledger_problem: str, key: str) -> FirstAnswer:
    """A class check's first answer from its submitted output and the ledger, trusting only records signed with ``key``.

    Fails closed: any record of this question that does not verify (or a ledger that does not parse) makes it
    untrustworthy, whatever other records say; several good records count as right only if every one says so.
    """
    if ledger_problem:
        return FirstAnswer(None, f"no trustworthy first answer: {ledger_problem}")
    candidates = _output_records(outputs) + [r for r in ledger if not (isinstance(r, dict) and r.get("question") != question_id)]
    if not candidates:
        return FirstAnswer(None, NO_RECORD)
    if any(isinstance(r, dict) and set(r) == _KEYS for r in candidates):
        return FirstAnswer(None, UNSIGNED)
    if not all(_signed_ok(r, key) and r["question"] == question_id for r in candidates):
        return FirstAnswer(None, ALTERED)
    return FirstAnswer(all(r["first_solved"] for r in candidates))
