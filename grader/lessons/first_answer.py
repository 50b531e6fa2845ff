"""The record of a graded lesson answer's first attempt, written beside the lesson's feedback and read by autograde.

Lesson 05 judges its two graded letters in the lesson (``quiz_widgets.graded``):
a self-study learner sees, on the first attempt, the verdict, the reasoning and
so the key. In a class the same notebook is then scored by ``nbgrader
autograde``. Without more, a learner could answer, read the key, change the
letter and submit: full marks for an answer given after the feedback.

The choice: **the first answer is what is graded.** Immediate feedback stays
(it is what makes the lesson teach on its own, and a class gets it too); every
output that shows the key carries this record of the first attempt, under its
own MIME type, in the graded cell's output. ``grading.autograde`` reads it from
the notebook as submitted (before nbgrader clears outputs) and scores the
question 0 when the first attempt was wrong, whatever letter is there now; a
right first attempt, or no record (the check was never run, so no key was
seen), leaves the letter to be scored as before.

Why not defer the feedback in a class instead (no key until nbgrader's own
feedback)? Anything that hides the key runs in the learner's kernel, where the
learner can switch it off; and the key is only hashed (``quiz``), so four
hashes give it away to anyone who reads the package. Hiding it would cost every
self-study learner the feedback and stop no one who tries.

What this does not stop: the notebook is the learner's file. A learner who
clears the graded cell's output (or edits the JSON) before submitting removes
the record, and is scored on the letter. The record closes the path a learner
takes by accident or on impulse (see the key, fix the letter, submit), not a
deliberate edit of the file; an instructor who needs that uses a proctored
quiz, not a self-check.

Imports: nothing of the package.
"""

from __future__ import annotations

from typing import Any, Optional

__all__ = ["FIRST_ANSWER_MIME", "first_answer_record", "read_first_answer"]

# Its own MIME type: JupyterLab keeps it in the saved output (and shows nothing for it), and no other
# output can be mistaken for it.
FIRST_ANSWER_MIME = "application/vnd.sandbox-lab.first-answer+json"
_KEYS = {"question", "first_solved"}


def first_answer_record(question_id: str, first_solved: bool) -> dict[str, Any]:
    """What a graded check's output carries once its key has shown: the question and whether the first attempt was right."""
    return {"question": question_id, "first_solved": bool(first_solved)}


def read_first_answer(outputs: Any, question_id: str) -> tuple[bool, Optional[bool]]:
    """(found a record, whether every first attempt recorded for ``question_id`` was right) from a cell's outputs.

    Fails closed: a record of this MIME type that is not exactly the shape written above (unknown or missing
    keys, a non-bool, another question's id under this cell's call) counts as a wrong first attempt; several
    records count as right only if every one says so.
    """
    found, solved = False, True
    for out in outputs if isinstance(outputs, list) else []:
        data = out.get("data") if isinstance(out, dict) else None
        if not isinstance(data, dict) or FIRST_ANSWER_MIME not in data:
            continue
        found = True
        record = data[FIRST_ANSWER_MIME]
        ok = (isinstance(record, dict) and set(record) == _KEYS and record["question"] == question_id
              and type(record["first_solved"]) is bool)
        solved = solved and ok and bool(record["first_solved"])
    return found, (solved if found else None)
