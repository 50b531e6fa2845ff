"""The question bank (``questions.json``) and ``check_answer``: quiz grading usable from plain code.

No widgets here: ``widgets.Quiz`` shows a question and calls ``check_answer``;
an nbgrader test cell can call ``check_answer`` directly. The model answer and
its reasoning are part of the feedback, so they are shown only once the
learner has answered.

Choice questions are graded by key (``"b"``, case and spaces ignored; the full
text of a choice is accepted too). Free-text questions are graded by keyword
groups: every group must be matched by at least one of its words.

Imports: errors. Nothing downstream.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Literal, Optional

from .errors import SandboxLabError

__all__ = [
    "Choice",
    "Question",
    "UnknownQuestion",
    "check_answer",
    "load_questions",
    "question",
    "questions_for",
]


class UnknownQuestion(SandboxLabError, LookupError):
    """No question has this id."""


@dataclass(frozen=True)
class Choice:
    key: str
    text: str
    note: str = ""  # why this choice is wrong (empty for the right one)


@dataclass(frozen=True)
class Question:
    """One recall question or understanding check."""

    id: str
    kind: Literal["recall", "check"]
    lesson: str
    type: Literal["choice", "text"]
    prompt: str
    model_answer: str
    reasoning: str
    choices: tuple[Choice, ...] = ()
    answer: str = ""  # the right key, for choice questions
    keywords: tuple[tuple[str, ...], ...] = ()  # for free-text questions


@lru_cache(maxsize=1)
def load_questions() -> tuple[Question, ...]:
    """Every question of the bank, in lesson order."""
    raw = json.loads(resources.files("grader").joinpath("questions.json").read_text(encoding="utf-8"))
    out = []
    for q in raw["questions"]:
        out.append(
            Question(
                id=q["id"],
                kind=q["kind"],
                lesson=q["lesson"],
                type=q["type"],
                prompt=q["prompt"],
                model_answer=q["model_answer"],
                reasoning=q["reasoning"],
                choices=tuple(Choice(c["key"], c["text"], c.get("note", "")) for c in q.get("choices", ())),
                answer=q.get("answer", ""),
                keywords=tuple(tuple(g) for g in q.get("keywords", ())),
            )
        )
    return tuple(out)


def question(question_id: str) -> Question:
    """The question with this id; ``UnknownQuestion`` lists the ids there are."""
    for q in load_questions():
        if q.id == question_id:
            return q
    ids = ", ".join(q.id for q in load_questions())
    raise UnknownQuestion(f"no question {question_id!r}; the questions are: {ids}")


def questions_for(*, lesson: Optional[str] = None, kind: Optional[str] = None) -> tuple[Question, ...]:
    """The questions of one lesson and/or one kind (``recall`` or ``check``)."""
    return tuple(
        q for q in load_questions() if (lesson is None or q.lesson == lesson) and (kind is None or q.kind == kind)
    )


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def _reveal(q: Question) -> str:
    return f"Model answer: {q.model_answer}\nWhy: {q.reasoning}"


def check_answer(question_id: str, answer: object) -> tuple[bool, str]:
    """Grade one answer: ``(correct, feedback)``; the feedback ends with the model answer and its reasoning."""
    q = question(question_id)
    if not isinstance(answer, str) or not answer.strip():
        return False, "No answer given yet: " + ("choose one option." if q.type == "choice" else "write a sentence.")
    given = _norm(answer)
    if q.type == "choice":
        chosen = next((c for c in q.choices if given in (c.key.lower(), _norm(c.text))), None)
        if chosen is None:
            keys = ", ".join(c.key for c in q.choices)
            return False, f"{answer.strip()[:40]!r} is not one of the options ({keys})."
        if chosen.key == q.answer:
            return True, "Correct.\n" + _reveal(q)
        note = f" {chosen.note}" if chosen.note else ""
        return False, f"Not quite: ({chosen.key}) is not the answer.{note}\n" + _reveal(q)
    missing = [group for group in q.keywords if not any(word in given for word in group)]
    if not missing:
        return True, "Correct.\n" + _reveal(q)
    hint = "; ".join(f"nothing about {group[0]}" for group in missing)
    return False, f"Not quite: your answer says {hint}.\n" + _reveal(q)
