"""Tells in the bank's choice questions: what lets a learner pick the key without knowing the answer.

A tell is something the key alone has, so that "pick the odd one out" finds it.
Balanced lengths (``quiz.answer_cues``) are not enough: reviewers of issue 41
found a key that alone did not start "Because...", a key that alone named a
path, and a key that alone used the course's own phrase. Each rule below is
one such oddity, as a table of (id, detector, what it means) in the shape of
``srt_notes.RULES``; ``find_tells`` runs them over a bank.

Per question (the key against its distractors):

* ``form``: the key opens differently from every distractor, while at least
  two distractors share an opening ("Because...", "Because...", "Because...",
  "Injected..."). The opening is the first word, with a few equivalent words
  read as one (``because``/``since``; ``the``/``a``/``an``).
* ``concrete``: the key alone holds something concrete: a path, a file name,
  code-formatted text, a command, a number, a host name, an environment
  variable.
* ``course-term``: the key alone uses the course's own vocabulary
  (``course_terms``: the srt settings keys the lessons format as code, and the
  phrases in ``COURSE_PHRASES``, each of which must occur in the lessons).
* ``names``: the key alone names an enforcing mechanism (``MECHANISMS``: the
  OS, the kernel, the proxy, ...) that the question's prompt does not name.
  This is the robust part of "names a thing none of the others name": a free
  "content word only the key has" fires on every question, since options say
  different things; a named enforcer beside distractors that name none is the
  tell reviewers saw ("only the OS can refuse...").
* ``length``: ``quiz.answer_cues``'s margin rule (one key far longer or
  shorter than every distractor).

Across the bank: ``position`` (among questions with the same number of
options, no position holds more than ``POSITION_SHARE`` of the keys, and none
is never used) and ``extreme`` (``quiz.answer_cues``'s share rule: the key is
not the longest, or the shortest, option in more than a third of the items).

This is an authoring check of the repository (it reads ``lessons/*.md``), so it
lives with the tests, not in the package. Matching reads words in lowercase
with a light stemmer (``networking`` and ``network`` are one word), so a
rewording of a course phrase does not slip past.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

from grader.course.quiz import Question, answer_cues, right_key

__all__ = [
    "BANK_RULES",
    "COURSE_PHRASES",
    "LESSONS",
    "MECHANISMS",
    "POSITION_SHARE",
    "RULES",
    "Item",
    "Rule",
    "Tell",
    "concrete_markers",
    "course_terms",
    "find_tells",
    "item_of",
    "opening",
    "terms_in",
]

LESSONS = Path(__file__).resolve().parents[1] / "lessons"
POSITION_SHARE = 0.4  # no option position may hold more than this share of the keys (same option count)
_MIN_FOR_POSITION = 8  # fewer questions of one option count than this say nothing about a position bias

# Phrases the lessons use as the course's own vocabulary. Each must occur in the lessons' text (a test checks),
# so the list cannot drift into words the course never taught.
COURSE_PHRASES: tuple[str, ...] = (
    "default bridge networking",
    "egress proxy",
    "channel out",
    "plain container",
    "outside the sandbox",
    "runs later",
    "scope scan",
    "exfiltration path",
    "security boundary",
    "least-privilege prompting",
    "OS-level enforcement",
    "OS-enforced boundary",
    "strict subdomains",
    "encrypted bytes",
    "the host name",
    "everyone behind it",
    "next session",
    "own settings",
    "start-up files",
    "git hook",
    "upload host",
    "apex rule",
    "both axes",
    "clean environment",
    "short-lived token",
)

# Mechanisms that enforce (or are said to enforce) a boundary, grouped by what they are. The ``names`` rule fires
# when the key alone names one of them and the prompt does not.
MECHANISMS: dict[str, tuple[str, ...]] = {
    "the operating system": ("os", "operating system", "kernel", "os-level", "os-enforced"),
    "the proxy": ("proxy", "firewall"),
    "the sandbox": ("sandbox", "bubblewrap", "seccomp", "namespace"),
    "a policy": ("policy", "denyread", "allowread", "allowwrite", "denywrite", "alloweddomains", "denieddomains"),
    "the container": ("container", "docker"),
    "the network layer": ("dns", "tls", "nameserver", "certificate"),
    "a reviewing model": ("second model", "guard model", "classifier"),  # proposed as a guard; talked past like the first
}

# Opening words read as one form: a reason clause, a verdict, a quantifier of nothing, a means, a determiner.
_OPENING_CLASSES: dict[str, str] = {
    "because": "because", "since": "because", "as": "because",
    "through": "through", "via": "through", "by": "through",
    "nothing": "nothing", "none": "nothing",
    "the": "the", "a": "the", "an": "the",
}

_COMMANDS = ("curl", "wget", "git", "npm", "pip", "ssh-add", "scp", "nc", "cat", "docker run", "sandbox-lab")
_CONCRETE: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("code", re.compile(r"`[^`]+`")),
    ("path", re.compile(r"(?<![\w.])~?/[\w.*-]+(?:/[\w.*-]*)*")),
    ("file name", re.compile(r"(?<![\w/])(?:\.[a-z][\w-]+|[\w-]+\.(?:json|sh|py|js|ts|md|txt|ya?ml|toml|env|cfg|ini|lock))\b")),
    ("host name", re.compile(r"\b(?:[a-z0-9*-]+\.)+(?:com|org|net|io|dev|example|local|cloud)\b", re.I)),
    ("environment variable", re.compile(r"\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b")),
    ("number", re.compile(r"(?<![\w.])\d+(?:\.\d+)*\b")),
    ("command", re.compile(r"(?<![\w.-])(?:" + "|".join(re.escape(c) for c in _COMMANDS) + r")(?![\w-])")),
)


# --- reading text -----------------------------------------------------------------------------


def _stem(word: str) -> str:
    """A light stemmer: enough that "networking"/"network" and "hooks"/"hook" are one word, nothing cleverer."""
    if word.endswith("'s"):
        word = word[:-2]
    for suffix, keep in (("ing", 4), ("ies", 3), ("es", 4), ("ed", 4)):
        if word.endswith(suffix) and len(word) - len(suffix) >= keep:
            if suffix == "ies":
                return word[:-3] + "y"
            if suffix == "es" and not re.search(r"(?:s|x|ch|sh)es$", word):
                break
            return word[: -len(suffix)]
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word


def _tokens(text: str) -> tuple[str, ...]:
    """Lowercase stemmed words; a hyphen or apostrophe inside a word stays ("os-level", "sandbox's" stems to "sandbox")."""
    return tuple(_stem(w) for w in re.findall(r"[a-z0-9]+(?:['-][a-z0-9]+)*", text.lower()))


def _has(phrase: Sequence[str], words: Sequence[str]) -> bool:
    n = len(phrase)
    return any(tuple(words[i:i + n]) == tuple(phrase) for i in range(len(words) - n + 1))


def _prose(path: Path) -> str:
    """A lesson's Markdown without its code cells and front matter: what a learner reads as the course's words."""
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)
    return re.sub(r"```\{code-cell\}.*?```", "", text, flags=re.S)


@lru_cache(maxsize=4)
def course_terms(lessons: Path = LESSONS) -> tuple[str, ...]:
    """The course's own vocabulary: ``COURSE_PHRASES`` that occur in the lessons, plus every srt settings key the
    lessons format as code (``allowRead``, ``network.allowedDomains`` as ``allowedDomains``)."""
    prose = "\n".join(_prose(p) for p in sorted(lessons.glob("0*/*.md")))
    words = _tokens(prose)
    phrases = [p for p in COURSE_PHRASES if _has(_tokens(p), words)]
    keys = {m.split(".")[-1] for m in re.findall(r"`([a-zA-Z.]+)`", prose)}
    camel = sorted(k for k in keys if re.fullmatch(r"[a-z]+(?:[A-Z][a-z]+)+", k))
    return tuple(phrases + camel)


def terms_in(text: str, terms: Iterable[str]) -> tuple[str, ...]:
    """The terms ``text`` uses (stemmed, whole words)."""
    words = _tokens(text)
    return tuple(t for t in terms if _has(_tokens(t), words))


def concrete_markers(text: str) -> tuple[str, ...]:
    """What makes ``text`` concrete, as "kind: match" (a path, a host name, ...); () for an abstract option."""
    return tuple(f"{kind}: {m.group(0)}" for kind, pattern in _CONCRETE for m in pattern.finditer(text))


def opening(text: str) -> str:
    """An option's opening, as the ``form`` rule compares it: its first word, lowercase, equivalent words as one."""
    first = re.findall(r"[a-z0-9']+", text.lower())
    word = first[0] if first else ""
    return _OPENING_CLASSES.get(word, word)


def _mechanisms(text: str) -> set[str]:
    words = _tokens(text)
    return {name for name, spellings in MECHANISMS.items() if any(_has(_tokens(s), words) for s in spellings)}


# --- the rules --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """A choice question as the rules read it: the key's text, the distractors', and the key's place."""

    id: str
    prompt: str
    key: str
    distractors: tuple[str, ...]
    position: int  # 0-based index of the key among the options, in the bank's order
    options: int


@dataclass(frozen=True)
class Tell:
    """One tell: the question (or "bank"), the rule that found it, and what it found."""

    question: str
    rule: str
    detail: str


@dataclass(frozen=True)
class Rule:
    """One kind of tell in one question: its detector (a detail when it fires, else None) and what it means."""

    id: str
    detect: Callable[[Item, tuple[str, ...]], Optional[str]]
    meaning: str


def item_of(q: Question) -> Item:
    key = right_key(q)
    texts = [c.text for c in q.choices]
    position = [c.key for c in q.choices].index(key)
    return Item(q.id, q.prompt, texts[position], tuple(t for c, t in zip(q.choices, texts) if c.key != key), position, len(texts))


def _form(item: Item, _: tuple[str, ...]) -> Optional[str]:
    shared = [w for w, n in Counter(opening(d) for d in item.distractors).items() if n >= 2]
    key = opening(item.key)
    if shared and key not in {opening(d) for d in item.distractors}:
        return f"the key opens with {key!r}; distractors share {', '.join(repr(w) for w in shared)} and none opens like it"
    return None


def _concrete(item: Item, _: tuple[str, ...]) -> Optional[str]:
    mine = concrete_markers(item.key)
    if mine and not any(concrete_markers(d) for d in item.distractors):
        return f"only the key is concrete ({'; '.join(mine)})"
    return None


def _course_term(item: Item, terms: tuple[str, ...]) -> Optional[str]:
    mine = terms_in(item.key, terms)
    if mine and not any(terms_in(d, terms) for d in item.distractors):
        return f"only the key uses the course's terms ({', '.join(mine)})"
    return None


def _names(item: Item, _: tuple[str, ...]) -> Optional[str]:
    mine = _mechanisms(item.key) - _mechanisms(item.prompt)
    if mine and not any(_mechanisms(d) for d in item.distractors):
        return f"only the key names an enforcer ({', '.join(sorted(mine))})"
    return None


RULES: tuple[Rule, ...] = (
    Rule("form", _form, "the key alone breaks the opening the distractors share"),
    Rule("concrete", _concrete, "the key alone holds a path, file, command, code, number, host or variable"),
    Rule("course-term", _course_term, "the key alone uses the course's own vocabulary"),
    Rule("names", _names, "the key alone names an enforcing mechanism the prompt does not"),
)


def _positions(items: Sequence[Item]) -> list[Tell]:
    out: list[Tell] = []
    for options in sorted({i.options for i in items}):
        group = [i for i in items if i.options == options]
        if len(group) < _MIN_FOR_POSITION:
            continue
        counts = Counter(i.position for i in group)
        letters = "abcdefghijklmnopqrstuvwxyz"
        for p in range(options):
            if counts[p] == 0:
                out.append(Tell("bank", "position", f"no {options}-option question has its key at ({letters[p]})"))
            elif counts[p] > POSITION_SHARE * len(group):
                out.append(Tell("bank", "position", f"({letters[p]}) holds {counts[p]} of {len(group)} keys of {options}-option questions, "
                                f"over {POSITION_SHARE:.0%}"))
    return out


BANK_RULES: tuple[str, ...] = ("position", "extreme", "length")


def find_tells(questions: Iterable[Question], terms: Optional[tuple[str, ...]] = None) -> list[Tell]:
    """Every tell in a bank's choice questions, question by question in ``RULES`` order, then the bank-wide ones."""
    qs = [q for q in questions if q.type == "choice"]
    vocabulary = course_terms() if terms is None else terms
    items = [item_of(q) for q in qs]
    out = [Tell(i.id, r.id, d) for i in items for r in RULES for d in [r.detect(i, vocabulary)] if d]
    for cue in answer_cues(qs):
        qid, _, detail = cue.partition(": ")
        if cue.startswith("the key is the"):
            out.append(Tell("bank", "extreme", cue))
        else:
            out.append(Tell(qid, "length", detail))
    return out + _positions(items)
