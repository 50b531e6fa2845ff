"""Graded multiple-choice letters scored outside the learner's kernel, and what autograde reads from a cell's source.

Split from ``autograde`` (which re-exports ``first_answers``, ``grade_answers`` and ``literal_strings``): the
letters a lesson's answers cell assigns, read with ``ast`` and never executed; the first answer each graded check
recorded (``course.first_answer``), read from the submission as submitted, before nbgrader clears its outputs;
and each check's score from both.

In a class (``CLASS_SECRET_ENV`` set where nbgrader runs) the first answer must come from a record signed for
this student (``first_answer.judge_class_answer``): without one the check scores 0 and says why. Without the
secret (a course run without class keys) the records in the outputs are read as they are, unverified, and
autograde logs that it is so.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, TypeVar

from nbformat import NotebookNode

from grader.core.errors import SandboxLabError
from grader.core.text import printable
from grader.grading.submission import read_submitted
from grader.course.first_answer import (
    CLASS_SECRET_ENV,
    LEDGER,
    FirstAnswer,
    judge_class_answer,
    learner_key,
    parse_ledger,
    read_first_answer,
)
from grader.course.quiz import answer_hash, question

__all__ = ["asked_call", "call_on", "class_secret", "error_output", "first_answers", "grade_answers", "grade_id",
           "graded_calls", "literal_strings", "stream_output"]

_A = TypeVar("_A", str, int)  # the type of a judged call's literal first argument
_C = TypeVar("_C")  # what a grade cell's parser reads from its source
_node: Any = NotebookNode


def stream_output(text: str) -> Any:
    """A cell output saying ``text`` (what nbgrader shows for a passed check)."""
    text = printable(text)  # a notebook is written as UTF-8: what cannot be written would fail the whole notebook
    return _node({"output_type": "stream", "name": "stdout", "text": text + "\n"})


def error_output(text: str) -> Any:
    """A cell output failing with ``text`` (nbgrader scores the cell 0)."""
    text = printable(text)
    return _node({"output_type": "error", "ename": "AssertionError", "evalue": text, "traceback": [f"AssertionError: {text}"]})


def class_secret(environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The class secret autograde verifies first answers with (``CLASS_SECRET_ENV``), or None when none is set."""
    value = (os.environ if environ is None else environ).get(CLASS_SECRET_ENV, "").strip()
    return value or None


def grade_id(cell: NotebookNode) -> str:
    return str(cell.get("metadata", {}).get("nbgrader", {}).get("grade_id", ""))




def literal_strings(source: str) -> dict[str, str]:
    """Every top-level ``name = "<string literal>"`` of a cell (the last one wins), never executing anything."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    out: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            for t in node.targets:
                if isinstance(t, ast.Name) and isinstance(value, str):
                    out[t.id] = value
    return out


def call_on(source: str, func: str, first: type[_A], *, max_args: Optional[int] = None) -> Optional[tuple[_A, str]]:
    """(first argument, variable) of the first ``func(<literal of type first>, <variable>, ...)`` in a cell, never executing it.

    ``max_args``: how many arguments the call may have at most (None: any number from two).
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == func
                and 2 <= len(node.args) <= (max_args or len(node.args)) and isinstance(node.args[0], ast.Constant)
                and type(node.args[0].value) is first and isinstance(node.args[1], ast.Name)):
            return node.args[0].value, node.args[1].id
    return None


def asked_call(source: str) -> Optional[tuple[str, str]]:
    """(question id, variable) of a grade cell that checks ``is_option("<question>", <variable>)``."""
    return call_on(source, "is_option", str, max_args=2)


def graded_calls(nb: NotebookNode, parse: Callable[[str], Optional[_C]]) -> Iterator[tuple[NotebookNode, _C]]:
    """Every graded code cell whose source ``parse`` recognises (a check's call), with what it read."""
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            asked = parse(cell.source)
            if asked is not None:
                yield cell, asked


def first_answers(nb: NotebookNode, *, folder: Optional[Path] = None, student: str = "",
                  secret: Optional[str] = None) -> dict[str, FirstAnswer]:
    """grade_id → the first answer of every graded choice cell, read from the notebook as submitted.

    With ``secret`` (a class): every graded check gets a verdict, from the records signed with ``student``'s key
    in its output and in ``folder``'s ``first-answers.jsonl``; no trustworthy record is a verdict too (0, with
    why). Without: only the cells whose output records a first attempt (unverified), as before class keys.
    A cell that appears twice counts as right only if both say so.
    """
    found: dict[str, FirstAnswer] = {}
    records: list[Any] = []
    problem = ""
    if secret is not None:
        got = read_submitted(folder, LEDGER) if folder is not None else None  # no folder: no ledger, no answer
        if got is not None and got.text is not None:
            records, problem = parse_ledger(got.text)
        elif got is not None and got.cause != "absent":
            problem = got.why  # a link, a directory, too large: never followed, never trusted
    for cell, asked in graded_calls(nb, asked_call):
        gid = grade_id(cell)
        if secret is not None:
            verdict = judge_class_answer(asked[0], cell.get("outputs"), records, problem, learner_key(secret, student))
        else:
            recorded, solved = read_first_answer(cell.get("outputs"), asked[0])
            if not recorded:
                continue
            verdict = FirstAnswer(bool(solved))
        earlier = found.get(gid)
        if earlier is not None:  # untrusted wins; else right only if both are
            verdict = (earlier if earlier.solved is None else verdict if verdict.solved is None
                       else FirstAnswer(earlier.solved and verdict.solved))
        found[gid] = verdict
    return found


_WRONG_FIRST = ("{qid}: 0 points: your first answer was not the right option; the first answer is the one graded "
                "(checked by Sandbox Lab outside your kernel).")


def grade_answers(nb: NotebookNode, first: Optional[Mapping[str, FirstAnswer]] = None) -> dict[str, bool]:
    """Score every graded multiple-choice cell from the answers' literals; rewrite its outputs. grade_id → right?

    ``first``: what ``first_answers`` read from the submission. A cell whose first answer was wrong scores 0,
    whatever letter is there now; one with no trustworthy first answer scores 0 with the reason.
    """
    first = first or {}
    answers: dict[str, str] = {}
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            answers.update(literal_strings(cell.source))
    scored: dict[str, bool] = {}
    for cell, (qid, var) in graded_calls(nb, asked_call):
        try:
            key = question(qid).answer_sha256
        except (KeyError, SandboxLabError):
            continue
        given = answers.get(var)
        verdict = first.get(grade_id(cell))
        if verdict is not None and verdict.solved is not True:
            scored[grade_id(cell)] = False
            why = _WRONG_FIRST.format(qid=qid) if verdict.solved is False else f"{qid}: 0 points: {verdict.reason}."
            cell.outputs = [error_output(why)]
            continue
        right = given is not None and answer_hash(qid, given.strip().lower()) == key
        scored[grade_id(cell)] = right
        if right:
            cell.outputs = [stream_output(f"{qid}: right (checked by Sandbox Lab outside your kernel).")]
        elif given is None:
            cell.outputs = [error_output(f'{qid}: no answer. Write {var} = "<letter>" in the answers cell.')]
        else:
            cell.outputs = [error_output(f"{qid}: {given!r} is not the right option (checked by Sandbox Lab outside your kernel).")]
    return scored
