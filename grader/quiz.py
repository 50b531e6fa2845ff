"""The question bank (``questions.json``) and ``check_answer``: quiz grading usable from plain code.

No widgets here: ``widgets.Quiz`` shows a question and calls ``check_answer``;
an nbgrader test cell can call ``check_answer`` directly. The model answer and
its reasoning are part of the feedback, so they are shown only once the
learner has answered.

Choice questions are graded by key (``"b"``, case and spaces ignored; the full
text of a choice is accepted too). Free-text questions are graded by keyword
groups: every group must be matched by at least one of its words.

The bank is validated when it is loaded, like a policy or a task: unknown keys
are refused (a misspelt ``"keywrods"`` would leave a question ungradable), and
a broken bank raises ``QuestionBankError`` naming every problem with its JSON
pointer and a fix, never a ``KeyError``.

Imports: errors, progress (the lesson ids). Nothing downstream.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import Problem, SandboxLabError, json_pointer
from .progress import LESSONS

__all__ = [
    "Choice",
    "Question",
    "QuestionBankError",
    "UnknownQuestion",
    "check_answer",
    "load_questions",
    "parse_questions",
    "question",
    "questions_for",
]

_SLUG = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_LESSON_IDS = tuple(lesson_id for lesson_id, _, _ in LESSONS)
_BANK = "grader/questions.json"


class UnknownQuestion(SandboxLabError, LookupError):
    """No question has this id."""


class QuestionBankError(SandboxLabError, ValueError):
    """A question bank that cannot be used, with every problem found (as ``PolicyError`` lists a policy's)."""

    def __init__(self, source: str, problems: Iterable[Problem]) -> None:
        self.source = source
        self.problems: tuple[Problem, ...] = tuple(problems)
        n = len(self.problems)
        head = f"{source} is not a valid question bank ({n} problem{'s' if n != 1 else ''})"
        super().__init__("\n".join([head, *(f"  {p}" for p in self.problems)]))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Choice(_Strict):
    """One option of a choice question."""

    key: str = Field(min_length=1, description='the letter the learner picks, e.g. "b"')
    text: str = Field(min_length=1, description="the option as the learner reads it")
    note: str = Field("", description="why this option is wrong; empty for the right one")


class Question(_Strict):
    """One recall question or understanding check."""

    id: str = Field(description='a slug, e.g. "recall-two-axes"; progress records it as "quiz:<id>"')
    kind: Literal["recall", "check"] = Field(description='"recall" (a fact) or "check" (apply it to a case)')
    lesson: str = Field(description='the lesson that asks it, e.g. "l05-check-yourself"')
    type: Literal["choice", "text"] = Field(description='"choice" (graded by key) or "text" (graded by keywords)')
    prompt: str = Field(min_length=1, description="the question")
    model_answer: str = Field(min_length=1, description="the answer shown once the learner has answered")
    reasoning: str = Field(min_length=1, description="why that is the answer")
    choices: tuple[Choice, ...] = Field((), description="the options of a choice question")
    answer: str = Field("", description="the key of the right option, for choice questions")
    keywords: tuple[tuple[str, ...], ...] = Field(
        (), description="for text questions: groups of words, each group matched by one of its words"
    )


class _Bank(_Strict):
    about: str = Field("", description="what the file is, for people reading it")
    version: Literal[1] = Field(description="the format version: 1")
    questions: tuple[Question, ...] = Field(min_length=1, description="every question, in lesson order")


# --- problems, each with its JSON pointer and a fix ---------------------------------------

_FIELDS: dict[int, type[BaseModel]] = {0: _Bank, 2: Question, 4: Choice}  # depth of the object's location → its model


def _model_at(loc: tuple[Union[str, int], ...]) -> Optional[type[BaseModel]]:
    return _FIELDS.get(len(loc))


def _problem_from(err: dict[str, Any]) -> Problem:
    loc = tuple(err["loc"])
    ptr = json_pointer(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        known = list(model.model_fields) if model else []
        close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
        hint = f' Did you mean "{close[0]}"?' if close else f" Known keys here: {', '.join(known)}."
        return Problem(ptr, "unknown key (usually a typo)." + hint)
    if kind == "missing":
        model = _model_at(loc[:-1])
        field = model.model_fields.get(str(loc[-1])) if model else None
        why = f": {field.description}" if field and field.description else ""
        return Problem(ptr, f'missing. Add "{loc[-1]}"{why}.')
    if kind == "literal_error":
        return Problem(ptr, f"must be {err.get('ctx', {}).get('expected', 'one of the listed values')}.")
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return Problem(ptr, 'must be a JSON object, e.g. {"key": "a", "text": "..."}.' if len(loc) == 4 else "must be a JSON object.")
    if kind in ("tuple_type", "list_type"):
        return Problem(ptr, "must be a JSON list, e.g. []." if loc and loc[-1] != "keywords" else 'must be a list of lists of words, e.g. [["network", "egress"]].')
    if kind == "string_type":
        return Problem(ptr, "must be a string.")
    if kind in ("too_short", "string_too_short"):
        return Problem(ptr, "must not be empty.")
    return Problem(ptr, str(err["msg"]))


def _question_problems(i: int, q: Question) -> list[Problem]:
    """What pydantic cannot see in one question: ids, lessons, and whether it can be graded at all."""
    out: list[Problem] = []

    def at(*loc: Union[str, int]) -> str:
        return json_pointer(("questions", i, *loc))

    if not _SLUG.match(q.id):
        out.append(Problem(at("id"), 'question ids are slugs (lowercase letters, digits, single hyphens), e.g. "recall-two-axes".'))
    if q.lesson not in _LESSON_IDS:
        close = difflib.get_close_matches(q.lesson, _LESSON_IDS, n=1, cutoff=0.6)
        hint = f'Did you mean "{close[0]}"?' if close else f"The lessons: {', '.join(_LESSON_IDS)}."
        out.append(Problem(at("lesson"), f"no lesson {q.lesson!r}. {hint}"))
    if q.type == "choice":
        keys = [c.key for c in q.choices]
        if len(keys) < 2:
            out.append(Problem(at("choices"), "a choice question needs at least two options."))
        for j, key in enumerate(keys):
            if key in keys[:j]:
                out.append(Problem(at("choices", j, "key"), f"key {key!r} is used twice; give every option its own letter."))
        if q.answer not in keys:
            known = ", ".join(keys) or "none"
            out.append(Problem(at("answer"), f"must be the key of one option ({known}), e.g. \"{keys[0] if keys else 'a'}\"."))
        if q.keywords:
            out.append(Problem(at("keywords"), 'a choice question is graded by "answer": remove "keywords", or make it "type": "text".'))
    else:
        if not q.keywords:
            out.append(Problem(at("keywords"), 'a text question needs keyword groups, e.g. [["network", "egress"]].'))
        for j, group in enumerate(q.keywords):
            if not group or not all(w.strip() for w in group):
                out.append(Problem(at("keywords", j), "a keyword group lists at least one non-empty word."))
            elif any(_norm(w) != w for w in group):
                out.append(Problem(at("keywords", j), "answers are matched in lowercase with single spaces: write the words that way."))
        if q.choices or q.answer:
            out.append(Problem(at("choices" if q.choices else "answer"), 'a text question is graded by "keywords": remove "choices" and "answer", or make it "type": "choice".'))
    return out


def parse_questions(data: Any, source: str = _BANK) -> tuple[Question, ...]:
    """Validate an already-parsed question bank; ``QuestionBankError`` lists every problem."""
    try:
        bank = _Bank.model_validate(data)
    except ValidationError as exc:
        raise QuestionBankError(source, [_problem_from(e) for e in exc.errors(include_url=False)]) from None  # type: ignore[arg-type]
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for i, q in enumerate(bank.questions):
        problems.extend(_question_problems(i, q))
        if q.id in seen:
            problems.append(Problem(json_pointer(("questions", i, "id")), f"{q.id!r} is already question {seen[q.id]}; ids must be unique."))
        seen.setdefault(q.id, i)
    if problems:
        raise QuestionBankError(source, problems)
    return bank.questions


def _read(text: str, source: str) -> tuple[Question, ...]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise QuestionBankError(source, [Problem("/", f"not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno}).")]) from None
    return parse_questions(data, source)


@lru_cache(maxsize=1)
def _shipped() -> tuple[Question, ...]:
    return _read(resources.files("grader").joinpath("questions.json").read_text(encoding="utf-8"), _BANK)


def load_questions(path: Union[str, "os.PathLike[str]", None] = None) -> tuple[Question, ...]:
    """Every question of the bank, in lesson order: the package's own, or the bank file at ``path``."""
    if path is None:
        return _shipped()
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise QuestionBankError(str(p), [Problem("/", f"cannot be read ({exc}).")]) from None
    return _read(text, str(p))


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
