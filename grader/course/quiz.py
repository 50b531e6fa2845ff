"""The question bank (``questions.json``) and how an answer is judged: pure functions, usable from plain code.

Three kinds of question, each asked the way that measures what it should:

* ``choice``: pick one option. The options are shown in an order of the
  learner's own (``choice_order``, stable per install) and ``judge_choice``
  says whether the pick is right.
* ``text`` (recall): the learner writes an answer first; then the model answer
  and a short rubric appear and the learner rates themselves (``RATINGS``).
  ``recall_hint`` is only a hint: it looks for each key idea as whole words or
  phrases (``"files"`` is not found in ``"profiles"``), any of its synonyms
  counting, a trailing ``*`` standing for any ending (``"exfiltrat*"``). It
  cannot read meaning ("not the network" mentions the network), which is why
  it is shown as what it is (a hint from keywords, possibly wrong), beside the
  learner's own rating, and the learner, not the hint, has the last word.
* ``predict``: the learner predicts which probes will succeed against a
  scenario's sandbox, then runs it; ``prediction.score_prediction`` compares.

A question's ``seed`` quotes the course source on its idea, shown with the
verdict. ``answer_cues`` finds length cues to the key across a bank.

No widgets here (``widgets.Quiz`` and ``widgets.Prediction`` show questions);
no file writes (``progress`` keeps the first attempt).

What is and is not secret. A choice question's key is stored only as
``answer_sha256`` = sha256(``"<question id>:<key>"``), so the installed package
does not hand it out to a grep. That is a speed bump, not a lock: with four
options anyone can hash each one. Model answers, rubrics and key ideas are
stored as text, because they are shown after an answer; they are not secret
from someone reading the package. This bank is a self-check: points that
count come from nbgrader's autograde (lesson 05's letters, scored against
these hashes in the grader's own process), not from here.

The bank is validated when it is loaded, like a policy or a task: unknown keys
are refused (a misspelt ``"key_ideaz"`` would leave a question ungradable), and
a broken bank raises ``QuestionBankError`` naming every problem with its JSON
pointer and a fix, never a ``KeyError``.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from grader.core.errors import PolicyError, Problem, SandboxLabError, field_problem, json_pointer
from grader.core.jsonfile import json_problem
from grader.core.policy import parse_policy
from grader.core.probes import PROBES
from grader.course.route import LESSONS

__all__ = [
    "CUE_MARGIN",
    "CUE_SHARE",
    "HINT_LABEL",
    "RATINGS",
    "Choice",
    "ChoiceVerdict",
    "IdeaHit",
    "InvalidAnswer",
    "KeyIdea",
    "Question",
    "QuestionBankError",
    "RecallHint",
    "Scenario",
    "UnknownQuestion",
    "answer_cues",
    "answer_hash",
    "check_answer",
    "choice_order",
    "is_option",
    "judge_choice",
    "load_questions",
    "matches",
    "parse_questions",
    "question",
    "questions_for",
    "rating_score",
    "recall_hint",
    "right_key",
    "stem",
]

_SLUG = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_LESSON_IDS = tuple(lesson_id for lesson_id, _, _ in LESSONS)
_PROBE_IDS = tuple(p.id for p in PROBES)
_BANK = "grader/questions.json"

# The self-ratings of a recall answer and what each scores on the board.
RATINGS: dict[str, float] = {"got it": 1.0, "partly": 0.5, "missed": 0.0}
# What the recall hint is, said wherever it is shown: it matches words, it cannot read meaning.
HINT_LABEL = "a hint from keywords, possibly wrong"
_MIN_WORDS = 2  # a recall answer has at least this many words before the model answer shows


class UnknownQuestion(SandboxLabError, LookupError):
    """No question has this id."""


class InvalidAnswer(SandboxLabError, ValueError):
    """An answer that cannot be judged (empty, or not one of the options); the message says what to give."""


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

    key: str = Field(min_length=1, description='the option\'s letter in the bank, e.g. "b" (graded answers use it)')
    text: str = Field(min_length=1, description="the option as the learner reads it")
    note: str = Field("", description="why this option is wrong; empty for the right one")


class KeyIdea(_Strict):
    """One idea a recall answer should contain, and the words that show it."""

    idea: str = Field(min_length=1, description='the idea in a few words, e.g. "the filesystem axis"')
    words: tuple[str, ...] = Field(
        min_length=1, description='synonyms, any one of which shows the idea, e.g. ["filesystem", "files", "exfiltrat*"]'
    )


class Scenario(_Strict):
    """The sandbox a predict question runs: a policy, or null for the plain container, and the probes to predict."""

    policy: Optional[dict[str, Any]] = Field(description="the sandbox policy, or null for a plain container with default networking")
    probes: tuple[str, ...] = Field(min_length=1, description='the probe ids the learner predicts, e.g. ["read-ssh-key"]')


class Question(_Strict):
    """One recall question or understanding check."""

    id: str = Field(description='a slug, e.g. "recall-two-axes"; progress records it as "quiz:<id>"')
    kind: Literal["recall", "check"] = Field(description='"recall" (a fact) or "check" (apply it to a case)')
    lesson: str = Field(description='the lesson that asks it, e.g. "l05-check-yourself"')
    type: Literal["choice", "text", "predict"] = Field(
        description='"choice" (pick an option), "text" (write, then rate yourself) or "predict" (predict probes, then run)'
    )
    prompt: str = Field(min_length=1, description="the question")
    model_answer: str = Field(min_length=1, description="the answer shown once the learner has answered")
    reasoning: str = Field(min_length=1, description="why that is the answer")
    choices: tuple[Choice, ...] = Field((), description="the options of a choice question")
    answer_sha256: str = Field("", description='for choice questions: sha256 of "<id>:<key>" of the right option')
    key_ideas: tuple[KeyIdea, ...] = Field((), description="for text questions: the ideas the hint looks for")
    rubric: tuple[str, ...] = Field((), description="for text questions: what a full answer contains, shown with the model answer")
    scenario: Optional[Scenario] = Field(None, description="for predict questions: the sandbox and the probes to predict")
    seed: str = Field("", description="the course source's own explanation of this idea, quoted; shown with the verdict")


class _Bank(_Strict):
    about: str = Field("", description="what the file is, for people reading it")
    version: Literal[2] = Field(description="the format version: 2")
    questions: tuple[Question, ...] = Field(min_length=1, description="every question, in lesson order")


# --- problems, each with its JSON pointer and a fix ---------------------------------------


def answer_hash(question_id: str, key: str) -> str:
    """What ``answer_sha256`` holds for the option ``key`` of question ``question_id``."""
    return hashlib.sha256(f"{question_id}:{key}".encode("utf-8")).hexdigest()


def _model_at(loc: tuple[Union[str, int], ...]) -> Optional[type[BaseModel]]:
    """The model of the object at ``loc`` (the location of a key's parent), for key names in messages."""
    if len(loc) == 0:
        return _Bank
    if len(loc) == 2:
        return Question
    if len(loc) == 3 and loc[2] == "scenario":
        return Scenario
    if len(loc) == 4 and loc[2] == "choices":
        return Choice
    if len(loc) == 4 and loc[2] == "key_ideas":
        return KeyIdea
    return None


def _raw_id(data: Any, loc: tuple[Union[str, int], ...]) -> str:
    """The id of the question at ``loc`` in the raw data, for a message that shows the fix; "<id>" when unknown."""
    try:
        qid = data["questions"][loc[1]]["id"]
    except (KeyError, IndexError, TypeError):
        return "<id>"
    return qid if isinstance(qid, str) else "<id>"


def _problem_from(err: dict[str, Any], data: Any) -> Problem:
    loc = tuple(err["loc"])
    ptr = json_pointer(loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        if len(loc) == 3 and loc[2] == "answer":  # a bank of format 1, or a key written out
            qid = _raw_id(data, loc)
            value = err.get("input")
            example = f'"{answer_hash(qid, value)}"' if isinstance(value, str) and qid != "<id>" else f'sha256("{qid}:<key>")'
            return Problem(ptr, f'keys are not stored as text. Replace "answer" with "answer_sha256": {example}.')
        if len(loc) == 3 and loc[2] == "keywords":
            return Problem(ptr, 'replaced by "key_ideas": [{"idea": "the network axis", "words": ["network", "egress"]}].')
    if kind in ("extra_forbidden", "missing"):
        return field_problem(ptr, kind, str(loc[-1]), _model_at(loc[:-1]))
    if kind == "literal_error":
        return Problem(ptr, f"must be {err.get('ctx', {}).get('expected', 'one of the listed values')}.")
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        examples = {"choices": '{"key": "a", "text": "..."}', "key_ideas": '{"idea": "...", "words": ["..."]}'}
        example = examples.get(str(loc[2]), "") if len(loc) == 4 else ""
        return Problem(ptr, f"must be a JSON object, e.g. {example}." if example else "must be a JSON object.")
    if kind in ("tuple_type", "list_type"):
        return Problem(ptr, 'must be a list of words, e.g. ["network", "egress"].' if loc and loc[-1] == "words" else "must be a JSON list, e.g. [].")
    if kind == "string_type":
        return Problem(ptr, "must be a string.")
    if kind in ("too_short", "string_too_short"):
        return Problem(ptr, "must not be empty.")
    return Problem(ptr, str(err["msg"]))


def _words(text: str) -> str:
    """Text as the hint reads it: lowercase words of letters and digits, single spaces (punctuation is a space)."""
    return re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()


def _word_problem(word: str) -> str:
    stem = word[:-1] if word.endswith("*") else word
    if not stem.strip() or "*" in stem:
        return 'a word is letters and digits, with at most one "*" at its end, e.g. "exfiltrat*".'
    if _words(stem) != stem:
        return f'write it as "{_words(stem)}{"*" if word.endswith("*") else ""}": answers are matched in lowercase, punctuation read as spaces.'
    return ""


def _question_problems(i: int, q: Question) -> list[Problem]:
    """What pydantic cannot see in one question: ids, lessons, and whether it can be judged at all."""
    out: list[Problem] = []

    def at(*loc: Union[str, int]) -> str:
        return json_pointer(("questions", i, *loc))

    def only(*fields: str) -> None:
        """Refuse the fields of the other question types: a stray one means the question is not what its type says."""
        given = {"choices": bool(q.choices), "answer_sha256": bool(q.answer_sha256), "key_ideas": bool(q.key_ideas),
                 "rubric": bool(q.rubric), "scenario": q.scenario is not None}
        for name, present in given.items():
            if present and name not in fields:
                out.append(Problem(at(name), f'a {q.type} question has no "{name}": remove it, or change "type".'))

    if not _SLUG.match(q.id):
        out.append(Problem(at("id"), 'question ids are slugs (lowercase letters, digits, single hyphens), e.g. "recall-two-axes".'))
    if q.lesson not in _LESSON_IDS:
        close = difflib.get_close_matches(q.lesson, _LESSON_IDS, n=1, cutoff=0.6)
        hint = f'Did you mean "{close[0]}"?' if close else f"The lessons: {', '.join(_LESSON_IDS)}."
        out.append(Problem(at("lesson"), f"no lesson {q.lesson!r}. {hint}"))
    if q.type == "choice":
        only("choices", "answer_sha256")
        keys = [c.key for c in q.choices]
        if len(keys) < 2:
            out.append(Problem(at("choices"), "a choice question needs at least two options."))
        for j, key in enumerate(keys):
            if not re.fullmatch(r"[a-z]", key):
                out.append(Problem(at("choices", j, "key"), f'keys are single lowercase letters, e.g. "{"abcdefgh"[j % 8]}".'))
            elif key in keys[:j]:
                out.append(Problem(at("choices", j, "key"), f"key {key!r} is used twice; give every option its own letter."))
        right = [k for k in keys if answer_hash(q.id, k) == q.answer_sha256]
        if not _SHA256.match(q.answer_sha256):
            out.append(Problem(at("answer_sha256"), f'must be the sha256 of "<id>:<key>" (64 hex digits), e.g. for "a": "{answer_hash(q.id, "a")}".'))
        elif len(right) != 1:
            out.append(Problem(at("answer_sha256"), f'matches none of the options ({", ".join(keys) or "none"}): '
                               f'it must be sha256("{q.id}:<key>"); a changed id or key needs a new hash.'))
    elif q.type == "text":
        only("key_ideas", "rubric")
        if not q.key_ideas:
            out.append(Problem(at("key_ideas"), 'a text question needs its key ideas, e.g. [{"idea": "the network axis", "words": ["network", "egress"]}].'))
        if not q.rubric:
            out.append(Problem(at("rubric"), 'a text question needs a rubric (what a full answer contains), e.g. ["Names the filesystem axis."].'))
        for j, idea in enumerate(q.key_ideas):
            for k, word in enumerate(idea.words):
                problem = _word_problem(word)
                if problem:
                    out.append(Problem(at("key_ideas", j, "words", k), problem))
    else:
        only("scenario", "rubric")
        if q.scenario is None:
            out.append(Problem(at("scenario"), 'a predict question needs its sandbox, e.g. {"policy": null, "probes": ["read-ssh-key"]}.'))
        else:
            out.extend(_scenario_problems(q.scenario, at))
    return out


def _scenario_problems(s: Scenario, at: Any) -> list[Problem]:
    out: list[Problem] = []
    if s.policy is not None:
        try:
            parse_policy(s.policy, "scenario")
        except PolicyError as exc:  # each problem, re-rooted under the scenario's policy
            out.extend(Problem(at("scenario", "policy") + (p.pointer if p.pointer != "/" else ""), p.message) for p in exc.problems)
    for k, pid in enumerate(s.probes):
        if pid not in _PROBE_IDS:
            close = difflib.get_close_matches(pid, _PROBE_IDS, n=1, cutoff=0.6)
            hint = f'Did you mean "{close[0]}"?' if close else "See `sandbox-lab probe --list` for the probe ids."
            out.append(Problem(at("scenario", "probes", k), f"no probe {pid!r}. {hint}"))
        elif pid in s.probes[:k]:
            out.append(Problem(at("scenario", "probes", k), f"probe {pid!r} is listed twice."))
    return out


def parse_questions(data: Any, source: str = _BANK) -> tuple[Question, ...]:
    """Validate an already-parsed question bank; ``QuestionBankError`` lists every problem."""
    try:
        bank = _Bank.model_validate(data)
    except ValidationError as exc:
        raise QuestionBankError(source, [_problem_from(e, data) for e in exc.errors(include_url=False)]) from None  # type: ignore[arg-type]
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
        raise QuestionBankError(source, [Problem("/", f"{json_problem(exc)}.")]) from None
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


# --- choice questions -----------------------------------------------------------------------


@dataclass(frozen=True)
class ChoiceVerdict:
    """One pick judged: the option chosen and the right one (bank keys), and why the pick is wrong if it is."""

    question: str
    chosen: str
    right: str
    note: str = ""

    @property
    def correct(self) -> bool:
        return self.chosen == self.right


def right_key(q: Question) -> str:
    """The key of the right option (found by hashing each option: what ``answer_sha256`` stores)."""
    for c in q.choices:
        if answer_hash(q.id, c.key) == q.answer_sha256:
            return c.key
    raise InvalidAnswer(f"{q.id} is not a choice question")


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def _chosen(q: Question, answer: object) -> Choice:
    if q.type != "choice":
        raise InvalidAnswer(f"{q.id} is not a choice question")
    if not isinstance(answer, str) or not answer.strip():
        raise InvalidAnswer("No answer given yet: choose one option.")
    given = _norm(answer)
    for c in q.choices:
        if given in (c.key, _norm(c.text)):
            return c
    keys = ", ".join(c.key for c in q.choices)
    raise InvalidAnswer(f"{answer.strip()[:40]!r} is not one of the options ({keys}): write one letter.")


def is_option(question_id: str, answer: object) -> bool:
    """Whether ``answer`` names an option of the choice question (a letter or its text), right or not."""
    try:
        _chosen(question(question_id), answer)
    except InvalidAnswer:
        return False
    return True


def judge_choice(q: Question, answer: object) -> ChoiceVerdict:
    """Judge a pick (a bank key, any case, or an option's full text); ``InvalidAnswer`` when it names no option."""
    chosen = _chosen(q, answer)
    right = right_key(q)
    return ChoiceVerdict(q.id, chosen.key, right, "" if chosen.key == right else chosen.note)


# A cue is a wide margin when the key is more than CUE_MARGIN times the length of the nearest distractor on its side
# (the longest one, for a key longer than every distractor; the shortest, for a key shorter than every one).
CUE_MARGIN = 1.5
CUE_SHARE = 1 / 3  # the key may be the shortest (or the longest) option in at most this share of the choice items


def answer_cues(questions: Iterable[Question]) -> list[str]:
    """Length cues to the key in a bank's choice items ([] when none): the key the shortest option (ties count) or the
    longest in more than ``CUE_SHARE`` of the items, or, in one item, beyond every distractor by over ``CUE_MARGIN``x."""
    items = [q for q in questions if q.type == "choice"]
    out: list[str] = []
    shortest, longest = [], []
    for q in items:
        key = len(next(c.text for c in q.choices if c.key == right_key(q)))
        others = [len(c.text) for c in q.choices if c.key != right_key(q)]
        if key <= min(others):
            shortest.append(q.id)
        if key >= max(others):
            longest.append(q.id)
        if key > CUE_MARGIN * max(others):
            out.append(f"{q.id}: the key ({key} characters) is over {CUE_MARGIN}x the longest distractor ({max(others)})")
        if key * CUE_MARGIN < min(others):
            out.append(f"{q.id}: the key ({key} characters) is under 1/{CUE_MARGIN} of the shortest distractor ({min(others)})")
    for name, ids in (("shortest", shortest), ("longest", longest)):
        if items and len(ids) > CUE_SHARE * len(items):
            out.append(f"the key is the {name} option in {len(ids)} of {len(items)} choice items: {', '.join(ids)}")
    return out


def choice_order(q: Question, seed: str) -> tuple[Choice, ...]:
    """The options in this learner's order: shuffled by ``seed`` (``progress.learner_seed``), the same every time.

    An empty seed keeps the bank's order (graded questions are asked that way,
    so every learner's letters mean the same options).
    """
    if not seed:
        return q.choices
    return tuple(sorted(q.choices, key=lambda c: hashlib.sha256(f"{seed}:{q.id}:{c.key}".encode("utf-8")).digest()))


# --- recall (text) questions ----------------------------------------------------------------


@dataclass(frozen=True)
class IdeaHit:
    """One key idea and the words of the answer that show it ("" when the answer does not)."""

    idea: str
    found: str


@dataclass(frozen=True)
class RecallHint:
    """What the hint found in a written answer, idea by idea."""

    question: str
    hits: tuple[IdeaHit, ...]

    @property
    def complete(self) -> bool:
        return all(h.found for h in self.hits)

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(h.idea for h in self.hits if not h.found)


@lru_cache(maxsize=512)
def _pattern(word: str) -> re.Pattern[str]:
    stem, open_end = (word[:-1], True) if word.endswith("*") else (word, False)
    body = " ".join(re.escape(w) for w in _words(stem).split())
    # Whole words only: neither side may continue a word, so "files" is not in "profiles" and "read" not in "readme".
    return re.compile(rf"(?<![a-z0-9]){body}{'[a-z0-9]*' if open_end else ''}(?![a-z0-9])")


def matches(word: str, text: str) -> str:
    """The words of ``text`` that ``word`` (a word, a phrase, or a stem ending in ``*``) matches; "" when none."""
    m = _pattern(word).search(_words(text))
    return m.group(0) if m else ""


def stem(text: str) -> str:
    """A question's prompt as compared for repeats: lowercase words, punctuation and spacing ignored."""
    return _words(text)


def recall_hint(q: Question, text: object) -> RecallHint:
    """Which key ideas a written answer shows: a hint for the learner's self-rating, not a grade.

    ``InvalidAnswer`` when nothing much is written yet (fewer than two words):
    the model answer comes after the learner has committed to an answer.
    """
    if q.type != "text":
        raise InvalidAnswer(f"{q.id} is not a recall question")
    if not isinstance(text, str) or len(_words(text).split()) < _MIN_WORDS:
        raise InvalidAnswer("Write your answer first, in a sentence or two: the model answer appears once you have committed to one.")
    hits = []
    for idea in q.key_ideas:
        found = next((m for m in (matches(w, text) for w in idea.words) if m), "")
        hits.append(IdeaHit(idea.idea, found))
    return RecallHint(q.id, tuple(hits))


def rating_score(rating: str) -> float:
    """What a self-rating scores on the board (``RATINGS``); ``InvalidAnswer`` names the ratings there are."""
    if rating not in RATINGS:
        raise InvalidAnswer(f"not a rating: {rating!r}; rate your answer as one of: {', '.join(RATINGS)}")
    return RATINGS[rating]


# --- one call for plain code ----------------------------------------------------------------


def _reveal(q: Question) -> str:
    key = f"({right_key(q)}) " if q.type == "choice" else ""
    lines = [f"Model answer: {key}{q.model_answer}", f"Why: {q.reasoning}"]
    lines += [f"Rubric: {r}" for r in q.rubric]
    if q.seed:
        lines.append(f"The course source: {q.seed}")
    return "\n".join(lines)


def check_answer(question_id: str, answer: object) -> tuple[bool, str]:
    """Judge one answer: ``(correct, feedback)``; the feedback ends with the model answer (a self-check, not a grade).

    For a recall question "correct" means the hint found every key idea. A
    predict question is answered by running it (``widgets.Prediction``).
    """
    q = question(question_id)
    if q.type == "predict":
        return False, f"{q.id} is answered by predicting, then running: use grader.notebook.widgets.Prediction({q.id!r})."
    if not isinstance(answer, str) or not answer.strip():
        return False, "No answer given yet: " + ("choose one option." if q.type == "choice" else "write a sentence.")
    if q.type == "choice":
        try:
            verdict = judge_choice(q, answer)
        except InvalidAnswer as exc:
            return False, str(exc)
        if verdict.correct:
            return True, "Correct.\n" + _reveal(q)
        note = f" {verdict.note}" if verdict.note else ""
        return False, f"Not quite: ({verdict.chosen}) is not the answer.{note}\n" + _reveal(q)
    try:
        hint = recall_hint(q, answer)
    except InvalidAnswer as exc:
        return False, str(exc)
    if hint.complete:
        return True, f"The keyword hint ({HINT_LABEL}) finds every key idea in your answer.\n" + _reveal(q)
    return False, f"The keyword hint ({HINT_LABEL}) finds nothing about: {'; '.join(hint.missing)}.\n" + _reveal(q)
