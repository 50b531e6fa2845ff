"""Choice questions without cues: the key's length gives nothing away, and no distractor is a throwaway.

The cue test (``quiz.answer_cues``), over every choice item of the bank:

* **share**: the key is the shortest option (ties count) in more than a third
  of the items (``CUE_SHARE``), or the longest in more than a third, fails;
* **margin**: in any one item, a key longer than every distractor by more than
  ``CUE_MARGIN`` = 1.5 times the longest distractor (the nearest one on its
  side), or shorter than every distractor by the same factor against the
  shortest one, fails.

Each is attacked below with a gamed bank (keys always the longest, always the
shortest, one key padded past the margin) that the test must catch.
"""

from __future__ import annotations

import copy
import hashlib
import json
from importlib import resources
from typing import Any

import pytest

from grader.course.quiz import CUE_MARGIN, CUE_SHARE, answer_cues, load_questions, parse_questions, right_key

SHIPPED: dict[str, Any] = json.loads(resources.files("grader").joinpath("questions.json").read_text(encoding="utf-8"))
CHOICE = [q for q in load_questions() if q.type == "choice"]


def test_the_shipped_bank_has_no_length_cue() -> None:
    assert CUE_MARGIN == 1.5 and CUE_SHARE == pytest.approx(1 / 3)
    assert len(CHOICE) >= 12
    assert answer_cues(load_questions()) == []


def _gamed(pick: str) -> dict[str, Any]:
    """The shipped bank with every choice item's key moved to its longest (or shortest) option, hashes redone."""
    bank = copy.deepcopy(SHIPPED)
    for q in bank["questions"]:
        if q["type"] != "choice":
            continue
        lengths = [len(c["text"]) for c in q["choices"]]
        i = lengths.index(max(lengths) if pick == "longest" else min(lengths))
        q["answer_sha256"] = hashlib.sha256(f'{q["id"]}:{q["choices"][i]["key"]}'.encode()).hexdigest()
    return bank


@pytest.mark.parametrize("pick", ["longest", "shortest"])
def test_a_bank_whose_keys_are_always_the_longest_or_shortest_is_caught(pick: str) -> None:
    gamed = parse_questions(_gamed(pick))  # a valid bank: only the cue is wrong
    cues = answer_cues(gamed)
    n = len([q for q in gamed if q.type == "choice"])
    assert cues == [f"the key is the {pick} option in {n} of {n} choice items: " + ", ".join(q.id for q in gamed if q.type == "choice")]


def test_the_share_is_a_third_exactly() -> None:
    """Keys longest in a third of the items pass; one item more fails."""
    bank = copy.deepcopy(SHIPPED)
    choice = [q for q in bank["questions"] if q["type"] == "choice"]
    shipped_longest = {q.id for q in CHOICE if len(_key(q)) >= max(len(c.text) for c in q.choices)}
    allowed = int(len(choice) * CUE_SHARE)
    moved = 0
    for q in choice:  # make items the key is not already longest in longest, until the share is reached
        if len(shipped_longest) + moved >= allowed:
            break
        if q["id"] not in shipped_longest:
            _make_key_longest(q)
            moved += 1
    assert answer_cues(parse_questions(bank)) == []
    extra = next(q for q in choice if q["id"] not in shipped_longest and not _is_longest(q))
    _make_key_longest(extra)
    assert any("longest option in" in c for c in answer_cues(parse_questions(bank)))


def _key(q: Any) -> str:
    return next(c.text for c in q.choices if c.key == right_key(q))


def _is_longest(q: dict[str, Any]) -> bool:
    key = next(c for c in q["choices"] if hashlib.sha256(f'{q["id"]}:{c["key"]}'.encode()).hexdigest() == q["answer_sha256"])
    return len(key["text"]) >= max(len(c["text"]) for c in q["choices"])


def _make_key_longest(q: dict[str, Any]) -> None:
    key = next(c for c in q["choices"] if hashlib.sha256(f'{q["id"]}:{c["key"]}'.encode()).hexdigest() == q["answer_sha256"])
    key["text"] += " " + "x" * (max(len(c["text"]) for c in q["choices"]) - len(key["text"]) + 1)


@pytest.mark.parametrize(("factor", "caught"), [(1.45, False), (1.55, True)])
def test_one_key_padded_past_the_margin_is_caught(factor: float, caught: bool) -> None:
    bank = copy.deepcopy(SHIPPED)
    q = next(q for q in bank["questions"] if q["id"] == "recall-wildcard-apex")
    key = next(c for c in q["choices"] if hashlib.sha256(f'{q["id"]}:{c["key"]}'.encode()).hexdigest() == q["answer_sha256"])
    longest = max(len(c["text"]) for c in q["choices"] if c is not key)
    key["text"] = key["text"] + " " + "y" * (int(longest * factor) - len(key["text"]) - 1)
    cues = [c for c in answer_cues(parse_questions(bank)) if c.startswith("recall-wildcard-apex:")]
    assert bool(cues) is caught, cues


def test_a_key_far_shorter_than_every_distractor_is_caught() -> None:
    bank = copy.deepcopy(SHIPPED)
    q = next(q for q in bank["questions"] if q["id"] == "check-proxy-host-only")
    key = next(c for c in q["choices"] if hashlib.sha256(f'{q["id"]}:{c["key"]}'.encode()).hexdigest() == q["answer_sha256"])
    key["text"] = "The host name."
    assert [c for c in answer_cues(parse_questions(bank)) if "under 1/1.5" in c] == [
        "check-proxy-host-only: the key (14 characters) is under 1/1.5 of the shortest distractor (76)"]


# --- distractors are misconceptions, not throwaways or denials of their own stem -------------

THROWAWAYS = ("none worth", "it cannot", "it is one", "it becomes one", "it is not", "all of the above", "none of the above")


@pytest.mark.parametrize("q", CHOICE, ids=lambda q: q.id)
def test_no_distractor_is_a_throwaway_or_denies_its_own_stem(q: Any) -> None:
    """A stem that asks "why is X so" has no option saying X is not so; no option is a throwaway; each says why it is wrong."""
    for c in q.choices:
        if c.key == right_key(q):
            continue
        assert not c.text.lower().startswith(THROWAWAYS), (q.id, c.text)
        assert c.note, (q.id, c.key)


def test_the_throwaway_check_can_fail() -> None:
    bank = copy.deepcopy(SHIPPED)
    q = next(q for q in bank["questions"] if q["id"] == "check-etc-secrets-github")
    q["choices"][0]["text"] = "None worth worrying about: github.com is a trusted, well-run domain."
    gamed = next(x for x in parse_questions(bank) if x.id == "check-etc-secrets-github")
    with pytest.raises(AssertionError):
        test_no_distractor_is_a_throwaway_or_denies_its_own_stem(gamed)
