"""The question bank: every question gradable, answers graded by key or keywords, and broken banks refused with pointers."""

from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from grader.errors import SandboxLabError
from grader.quiz import QuestionBankError, UnknownQuestion, check_answer, load_questions, parse_questions

SHIPPED: dict[str, Any] = json.loads(resources.files("grader").joinpath("questions.json").read_text(encoding="utf-8"))


def test_every_seed_question_is_in_the_bank_with_a_model_answer() -> None:
    ids = {q.id for q in load_questions()}
    assert {"recall-default-network", "recall-github-allowlist", "recall-two-axes",
            "check-etc-secrets-github", "check-standard-docker"} <= ids
    for q in load_questions():
        assert q.model_answer and q.reasoning
        if q.type == "choice":
            assert q.answer in {c.key for c in q.choices}
        else:
            assert q.keywords


@pytest.mark.parametrize(
    ("qid", "answer", "correct"),
    [
        ("check-etc-secrets-github", "c", True),
        ("check-etc-secrets-github", " C ", True),
        ("check-etc-secrets-github", "a", False),
        ("check-standard-docker", "No: a standard container has default bridge networking, which allows outbound internet access.", True),
        ("recall-two-axes", "Filesystem isolation and network isolation", True),
        ("recall-two-axes", "the file system and egress", True),
        ("recall-two-axes", "network only", False),
        ("recall-default-network", "", False),
        ("recall-default-network", "z", False),
    ],
)
def test_check_answer(qid: str, answer: str, correct: bool) -> None:
    ok, feedback = check_answer(qid, answer)
    assert ok is correct
    assert feedback


def test_check_answer_reveals_the_model_answer_and_reasoning_after_an_answer() -> None:
    _, feedback = check_answer("check-etc-secrets-github", "a")
    assert "Gist" in feedback and "Why:" in feedback
    _, empty = check_answer("check-etc-secrets-github", "")
    assert "Gist" not in empty


def test_check_answer_rejects_non_text_and_unknown_ids() -> None:
    assert check_answer("recall-two-axes", None)[0] is False
    with pytest.raises(UnknownQuestion, match="recall-two-axes"):
        check_answer("no-such-question", "a")


# --- broken banks ---------------------------------------------------------------------------


def _broken(change: Any) -> dict[str, Any]:
    """The shipped bank with one change applied (``change`` edits a deep copy in place)."""
    bank = copy.deepcopy(SHIPPED)
    change(bank)
    return bank


def _problems(data: Any) -> dict[str, str]:
    with pytest.raises(QuestionBankError) as info:
        parse_questions(data, "questions.json")
    err = info.value
    assert isinstance(err, SandboxLabError) and isinstance(err, ValueError)
    assert str(err).startswith(f"questions.json is not a valid question bank ({len(err.problems)} problem")
    return {p.pointer: p.message for p in err.problems}


def test_the_shipped_bank_parses_and_is_the_loaded_one() -> None:
    assert parse_questions(SHIPPED) == load_questions()


def test_a_missing_key_names_its_path_and_what_to_add() -> None:
    problems = _problems(_broken(lambda b: b["questions"][2].pop("model_answer")))
    assert problems == {"/questions/2/model_answer": 'missing. Add "model_answer": the answer shown once the learner has answered.'}


def test_a_misspelt_key_is_refused_with_a_did_you_mean() -> None:
    def misspell(b: dict[str, Any]) -> None:
        b["questions"][3]["keywrods"] = b["questions"][3].pop("keywords")
        b["questions"][0]["choices"][1]["txt"] = "x"

    problems = _problems(_broken(misspell))
    assert 'Did you mean "keywords"?' in problems["/questions/3/keywrods"]
    assert 'Did you mean "text"?' in problems["/questions/0/choices/1/txt"]


def test_wrong_types_and_values_say_what_is_expected() -> None:
    def spoil(b: dict[str, Any]) -> None:
        b["version"] = 2
        b["questions"][0]["kind"] = "quiz"
        b["questions"][1]["choices"] = "a, b"
        b["questions"][3]["keywords"] = [["network"], [7]]

    problems = _problems(_broken(spoil))
    assert problems["/version"] == "must be 1."
    assert problems["/questions/0/kind"] == "must be 'recall' or 'check'."
    assert problems["/questions/1/choices"].startswith("must be a JSON list")
    assert problems["/questions/3/keywords/1/0"] == "must be a string."


@pytest.mark.parametrize(
    ("change", "pointer", "words"),
    [
        (lambda b: b["questions"][0].update(answer="z"), "/questions/0/answer", "must be the key of one option (a, b, c)"),
        (lambda b: b["questions"][0]["choices"][2].update(key="a"), "/questions/0/choices/2/key", "used twice"),
        (lambda b: b["questions"][0].update(choices=b["questions"][0]["choices"][:1]), "/questions/0/choices", "at least two"),
        (lambda b: b["questions"][0].update(lesson="l01-why-sandbx"), "/questions/0/lesson", 'Did you mean "l01-why-sandbox"?'),
        (lambda b: b["questions"][1].update(id=b["questions"][0]["id"]), "/questions/1/id", "already question 0"),
        (lambda b: b["questions"][1].update(id="Recall 2"), "/questions/1/id", "slugs"),
        (lambda b: b["questions"][3].update(keywords=[]), "/questions/3/keywords", "needs keyword groups"),
        (lambda b: b["questions"][3].update(keywords=[["Network"]]), "/questions/3/keywords/0", "lowercase"),
        (lambda b: b["questions"][3].update(answer="a"), "/questions/3/answer", 'graded by "keywords"'),
        (lambda b: b["questions"][0].update(keywords=[["x"]]), "/questions/0/keywords", 'graded by "answer"'),
        (lambda b: b.update(questions=[]), "/questions", "must not be empty"),
    ],
)
def test_a_question_that_could_not_be_graded_is_refused(change: Any, pointer: str, words: str) -> None:
    problems = _problems(_broken(change))
    assert pointer in problems and words in problems[pointer], problems


def test_every_problem_is_listed_at_once() -> None:
    def spoil(b: dict[str, Any]) -> None:
        b["questions"][0]["answer"] = "z"
        b["questions"][4]["lesson"] = "nowhere"

    assert set(_problems(_broken(spoil))) == {"/questions/0/answer", "/questions/4/lesson"}


@pytest.mark.parametrize("data", [[], "questions", None, {"version": 1, "questions": [1]}])
def test_a_bank_that_is_not_an_object_of_questions_is_refused(data: Any) -> None:
    assert _problems(data)


def test_a_broken_bank_file_gives_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "questions.json"
    path.write_text('{"version": 1, "questions": [', encoding="utf-8")
    with pytest.raises(QuestionBankError, match=r"questions.json is not a valid question bank \(1 problem\)\n  /: not valid JSON"):
        load_questions(path)
    path.write_text(json.dumps({"version": 1, "questions": [{"id": "q"}]}), encoding="utf-8")
    with pytest.raises(QuestionBankError) as info:
        load_questions(path)
    assert {p.pointer for p in info.value.problems} >= {"/questions/0/kind", "/questions/0/prompt", "/questions/0/model_answer"}
    with pytest.raises(QuestionBankError, match="cannot be read"):
        load_questions(tmp_path / "missing.json")
