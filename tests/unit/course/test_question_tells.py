"""No tell in the question bank: the key of a choice question is not the odd option out (issue 41).

``question_tells.find_tells`` (tests/question_tells.py) runs every rule over the
shipped bank, which must have none. Then each rule is shown to fail: on the
three questions reviewers found tells in, copied as they stood before the
rewrite (``git show 652d1b4:grader/questions.json``), on a bank whose keys are
moved to one position, and on small made-up items for each rule's edge.
"""

from __future__ import annotations

import copy
import hashlib
import json
from importlib import resources
from typing import Any

import pytest

from grader.course.quiz import Question, answer_hash, load_questions, parse_questions
from question_tells import (
    COURSE_PHRASES,
    POSITION_SHARE,
    Tell,
    concrete_markers,
    course_terms,
    find_tells,
    opening,
    terms_in,
)

SHIPPED: dict[str, Any] = json.loads(resources.files("grader").joinpath("questions.json").read_text(encoding="utf-8"))
CHOICE = [q for q in load_questions() if q.type == "choice"]


def _question(qid: str, prompt: str, texts: list[str], key: str, lesson: str = "l05-check-yourself") -> Question:
    """A valid choice question with these options (keys a, b, c, ...) and this key."""
    choices = [{"key": "abcdefgh"[i], "text": t, "note": "" if "abcdefgh"[i] == key else "wrong"} for i, t in enumerate(texts)]
    return Question.model_validate({
        "id": qid, "kind": "check", "lesson": lesson, "type": "choice", "prompt": prompt, "choices": choices,
        "answer_sha256": answer_hash(qid, key), "model_answer": "m", "reasoning": "r",
    })


# --- the shipped bank ------------------------------------------------------------------------


@pytest.mark.parametrize("q", CHOICE, ids=lambda q: q.id)
def test_no_choice_question_has_a_tell(q: Question) -> None:
    assert [t for t in find_tells([q]) if t.question == q.id] == []


def test_the_bank_as_a_whole_has_no_tell() -> None:
    assert len(CHOICE) >= 12
    assert find_tells(load_questions()) == []


def test_every_course_phrase_occurs_in_the_lessons_and_the_settings_keys_are_read_from_them() -> None:
    """The vocabulary comes from the lessons: a phrase the lessons no longer use is dropped from it, so it must be
    dropped from ``COURSE_PHRASES`` too; the srt keys are found in the lessons' code spans, not listed by hand."""
    terms = course_terms()
    assert [p for p in COURSE_PHRASES if p not in terms] == []
    assert {"allowRead", "denyRead", "allowWrite", "allowedDomains", "deniedDomains", "allowUnixSockets"} <= set(terms)


# --- the three questions reviewers found tells in, as they were --------------------------------

PROMPTING_BOUNDARY = _question(
    "recall-prompting-boundary",
    'An agent\'s system prompt says: "Never read ~/.ssh and never upload files." Why is that not a security boundary '
    "once the agent can run shell commands?",
    ["Because a model may forget a rule it was told only once; repeating it before each tool call makes it hold.",
     "Because it names only ~/.ssh; a prompt that lists every secret path would close the gap for good.",
     "Because long sessions dilute the system prompt; in a short session the model keeps to the rule.",
     "Injected text or a bad package can steer the agent past it; only the OS can refuse the read or upload."],
    "d", lesson="l01-why-sandbox")

AXES_REPORT_AGENT = _question(
    "retrieve-axes-report-agent",
    "From lesson 02, in a new setup: a report generator's sandbox has no network at all, but the agent may write "
    "anywhere in the user's home directory. What can a compromised agent still do?",
    ["Nothing that matters: with no network, whatever it writes can never leave the machine at all.",
     "Nothing lasting: whatever it writes is thrown away together with the sandbox when the session ends.",
     "Plant code in ~/.local/bin or in the sandbox's own settings, which run later with network.",
     "Fill the disk at most: writing a file cannot change what any other program will do later."],
    "c", lesson="l03-container-alone")

STANDARD_DOCKER = _question(
    "check-standard-docker",
    "A developer places their agent's Python code-execution tool inside a standard Docker container and considers it "
    "securely sandboxed from data exfiltration. Are they correct?",
    ["Yes: a container isolates its processes from the host, so nothing it reads can ever leave the machine.",
     "No: Docker's default bridge network gives it outbound internet access, so what it reads can leave.",
     "Yes, as long as the process inside the container runs as an ordinary user instead of as root.",
     "No, but only because the image might ship malware; a clean, trusted base image would be safe."],
    "b")


def _rules(q: Question) -> dict[str, str]:
    return {t.rule: t.detail for t in find_tells([q]) if t.question == q.id}


def test_the_old_prompting_question_is_caught_for_its_opening_and_for_naming_the_os() -> None:
    found = _rules(PROMPTING_BOUNDARY)
    assert set(found) == {"form", "names"}
    assert "'injected'" in found["form"] and "'because'" in found["form"]
    assert found["names"] == "only the key names an enforcer (the operating system)"


def test_the_old_report_agent_question_is_caught_for_the_only_concrete_option() -> None:
    found = _rules(AXES_REPORT_AGENT)
    assert found["concrete"] == "only the key is concrete (path: ~/.local/bin)"
    # the same key is also the only one in the course's words, and the only one not opening "Nothing"
    assert set(found) == {"concrete", "course-term", "form"}
    assert "runs later" in found["course-term"] and "own settings" in found["course-term"]


def test_the_old_docker_question_is_caught_for_the_course_s_own_phrase() -> None:
    found = _rules(STANDARD_DOCKER)
    assert found == {"course-term": "only the key uses the course's terms (default bridge networking)"}


def test_the_rewritten_questions_keep_their_ids_and_keys() -> None:
    """The rewrite changed options, not which letter is right: graded letters (lesson 05) still hold."""
    shipped = {q.id: q for q in CHOICE}
    for old in (PROMPTING_BOUNDARY, AXES_REPORT_AGENT, STANDARD_DOCKER):
        assert shipped[old.id].answer_sha256 == old.answer_sha256


# --- each rule at its edge ---------------------------------------------------------------------


def test_form_compares_openings_and_needs_a_pattern_the_key_breaks() -> None:
    assert opening("Because it does") == opening("Since it does") == "because"
    assert opening("The proxy") == opening("A proxy") == "the"
    broken = _question("q-form", "Why?", ["Because x.", "Because y.", "Since z.", "Only the key does."], "d")
    assert "form" in _rules(broken)
    joined = _question("q-form", "Why?", ["Because x.", "Because y.", "Since z.", "Because the key does."], "d")
    assert "form" not in _rules(joined)
    no_pattern = _question("q-form", "Why?", ["Through x.", "Nothing y.", "Only z.", "Plant the key."], "d")
    assert "form" not in _rules(no_pattern)  # every option opens its own way: nothing for the key to break


@pytest.mark.parametrize(("text", "kind"), [
    ("edit ~/.bashrc", "path"), ("write /project/out", "path"), ("a .gitconfig entry", "file name"),
    ("settings.json", "file name"), ("run `cat x`", "code"), ("post to gist.github.com", "host name"),
    ("read GITHUB_TOKEN", "environment variable"), ("port 443", "number"), ("a git hook", "command"),
])
def test_concrete_markers_find_each_kind(text: str, kind: str) -> None:
    assert any(m.startswith(f"{kind}: ") for m in concrete_markers(text)), concrete_markers(text)


def test_an_abstract_option_has_no_concrete_marker() -> None:
    assert concrete_markers("The proxy decides by the name of the host, so every tenant passes.") == ()


def test_concrete_fires_only_when_no_distractor_is_concrete() -> None:
    alone = _question("q-concrete", "What?", ["Nothing at all.", "Something else.", "A third thing.", "Edit ~/.bashrc."], "d")
    assert "concrete" in _rules(alone)
    shared = _question("q-concrete", "What?", ["Read /etc/x.", "Something else.", "A third thing.", "Edit ~/.bashrc."], "d")
    assert "concrete" not in _rules(shared)


def test_course_terms_match_across_word_endings() -> None:
    terms = course_terms()
    assert terms_in("Docker's default bridge network lets it out", terms) == ("default bridge networking",)
    assert "git hook" in terms_in("it rewrites the git hooks", terms)
    assert terms_in("a bridge that is the default network", terms) == ()  # words in order, not a bag


def test_names_ignores_an_enforcer_the_prompt_already_names() -> None:
    said = _question("q-names", "Can the kernel refuse it?", ["Yes, always.", "Only at night.", "Only as root.",
                                                           "No: the kernel sees no prompt."], "d")
    assert "names" not in _rules(said)
    unsaid = _question("q-names", "Can anything refuse it?", ["Yes, always.", "Only at night.", "Only as root.",
                                                           "No: only the kernel can."], "d")
    assert _rules(unsaid)["names"] == "only the key names an enforcer (the operating system)"


def test_length_is_the_existing_margin_rule() -> None:
    padded = _question("q-length", "What?", ["short one", "short two", "short six", "the key, padded far past the others"], "d")
    assert "length" in _rules(padded)


# --- across the bank -------------------------------------------------------------------------


def _keys_at(letters: str) -> list[Question]:
    """The shipped bank with the i-th choice question's key moved to ``letters[i]`` (hash redone)."""
    bank = copy.deepcopy(SHIPPED)
    choice = [q for q in bank["questions"] if q["type"] == "choice"]
    assert len(letters) == len(choice)
    for q, letter in zip(choice, letters):
        q["answer_sha256"] = hashlib.sha256(f'{q["id"]}:{letter}'.encode()).hexdigest()
    return [q for q in parse_questions(bank) if q.type == "choice"]


def _position_tells(questions: list[Question]) -> list[Tell]:
    return [t for t in find_tells(questions) if t.rule == "position"]


def test_keys_all_at_one_position_are_caught() -> None:
    n = len(CHOICE)
    tells = _position_tells(_keys_at("a" * n))
    assert Tell("bank", "position", f"(a) holds {n} of {n} keys of 4-option questions, over 40%") in tells
    assert Tell("bank", "position", "no 4-option question has its key at (d)") in tells


def test_the_position_share_is_forty_percent_and_every_position_is_used() -> None:
    n = len(CHOICE)
    most = int(POSITION_SHARE * n)  # the most keys one position may hold
    rest = "bcd" * n
    assert _position_tells(_keys_at("a" * most + rest[: n - most])) == []
    assert [t.detail for t in _position_tells(_keys_at("a" * (most + 1) + rest[: n - most - 1]))] == [
        f"(a) holds {most + 1} of {n} keys of 4-option questions, over 40%"]
    unused = ("abc" * n)[:n]
    assert [t.detail for t in _position_tells(_keys_at(unused))] == ["no 4-option question has its key at (d)"]


def test_a_key_that_is_always_the_longest_option_is_caught() -> None:
    bank = copy.deepcopy(SHIPPED)
    for q in bank["questions"]:
        if q["type"] == "choice":
            longest = max(q["choices"], key=lambda c: len(c["text"]))
            q["answer_sha256"] = hashlib.sha256(f'{q["id"]}:{longest["key"]}'.encode()).hexdigest()
    assert any(t.rule == "extreme" and "longest option" in t.detail for t in find_tells(parse_questions(bank)))
