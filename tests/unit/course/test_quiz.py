"""The question bank: every question judgeable, recall hints by whole words, fair choice questions, hashed keys, broken banks refused."""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from grader.core.errors import SandboxLabError
from grader.core.paths import covers
from grader.course.quiz import (
    RATINGS,
    InvalidAnswer,
    QuestionBankError,
    UnknownQuestion,
    answer_hash,
    check_answer,
    choice_order,
    is_option,
    judge_choice,
    load_questions,
    matches,
    parse_questions,
    question,
    rating_score,
    recall_hint,
    right_key,
)

SHIPPED_TEXT = resources.files("grader").joinpath("questions.json").read_text(encoding="utf-8")
SHIPPED: dict[str, Any] = json.loads(SHIPPED_TEXT)
CHOICE = [q for q in load_questions() if q.type == "choice"]
INDEX = {q["id"]: i for i, q in enumerate(SHIPPED["questions"])}  # for pointers in the broken-bank tests


def test_the_seed_questions_are_asked_the_way_that_measures_them() -> None:
    for qid in ("recall-default-network", "recall-github-allowlist", "recall-two-axes"):
        q = question(qid)
        assert (q.kind, q.type) == ("recall", "text") and q.key_ideas and q.rubric
    a, b = question("predict-etc-secrets-github"), question("predict-standard-docker")
    assert a.type == b.type == "predict" and a.kind == b.kind == "check"
    assert a.scenario and a.scenario.policy is not None
    # the seed's "allows read access to /etc/secrets": reads are open in srt, and no denyRead covers /etc/secrets
    denied = a.scenario.policy["filesystem"].get("denyRead", [])
    assert denied and not any(covers(d, "/etc/secrets/db_password") for d in denied)
    assert a.scenario.policy["network"]["allowedDomains"] == ["github.com"]
    assert b.scenario and b.scenario.policy is None  # a plain container with default networking
    for q in load_questions():
        assert q.model_answer and q.reasoning


# --- recall: the hint looks for key ideas as whole words, with synonyms -----------------------

RECALL_ANSWERS = [
    # the two answers from the issue
    ("recall-two-axes", "read and write permissions plus egress", True),
    ("recall-two-axes", "user profiles and networking", False),  # "profiles" is not "files"
    ("recall-two-axes", "Filesystem isolation and network isolation", True),
    ("recall-two-axes", "the file system and egress", True),
    ("recall-two-axes", "file-system + outbound traffic", True),
    ("recall-two-axes", "what it may read, and which hosts it may reach", True),
    ("recall-two-axes", "disk access and the internet", True),
    ("recall-two-axes", "network only, nothing else", False),
    ("recall-two-axes", "the filesystem, that is all", False),
    ("recall-two-axes", "the readme and the networks", False),  # "readme" is not "read"
    ("recall-two-axes", "unreadable logs and a hostel", False),  # nor "unreadable" / "hostel"
    ("recall-two-axes", "the prompt and the model", False),
    ("recall-default-network", "The bridge network lets it connect to any host, so it can exfiltrate the SSH keys.", True),
    ("recall-default-network", "It has outbound internet access, so secrets it can read can be sent to the attacker.", True),
    ("recall-default-network", "It can reach anywhere and leak data", True),
    ("recall-default-network", "Because containers share the kernel with the host machine.", False),
    ("recall-default-network", "It can reach the internet.", False),  # a way out, but nothing about what leaves
    ("recall-default-network", "It runs as root and may escape.", False),
    ("recall-github-allowlist", "The agent can create a public gist and leak secrets through it.", True),
    ("recall-github-allowlist", "Anyone can push to a repository there, so the attacker gets your data.", True),
    ("recall-github-allowlist", "An agent could exfiltrate credentials by uploading them", True),
    ("recall-github-allowlist", "GitHub is often down, so builds break.", False),
    ("recall-github-allowlist", "It is a trusted domain, so it is safe.", False),
    ("recall-github-allowlist", "the repost of secretive reposts", False),  # "repost" is not "post", "secretive" counts: one idea only
    # the two misfires of issue 24: "host's" (the machine) is no network word; "phoning home" is one
    ("recall-two-axes", "reading the host's logs", False),
    ("recall-two-axes", "phoning home with what it reads", True),
]


def test_the_host_s_logs_tick_the_filesystem_only_and_phoning_home_ticks_the_network() -> None:
    logs = recall_hint(question("recall-two-axes"), "reading the host's logs")
    assert [h.found for h in logs.hits] == ["reading", ""]
    home = recall_hint(question("recall-two-axes"), "phoning home with what it reads")
    assert [h.found for h in home.hits] == ["reads", "phoning home"]


@pytest.mark.parametrize(("qid", "answer", "complete"), RECALL_ANSWERS)
def test_the_recall_hint_finds_every_key_idea_only_in_answers_that_have_them(qid: str, answer: str, complete: bool) -> None:
    hint = recall_hint(question(qid), answer)
    assert hint.complete is complete, [(h.idea, h.found) for h in hint.hits]
    assert check_answer(qid, answer)[0] is complete


@pytest.mark.parametrize(
    ("word", "text", "found"),
    [
        ("files", "user profiles", ""),
        ("files", "the Files it reads", "files"),
        ("file system", "a FILE-SYSTEM boundary", "file system"),
        ("file system", "filesystem", ""),
        ("exfiltrat*", "exfiltration over DNS", "exfiltration"),
        ("exfiltrat*", "pre-exfiltration", "exfiltration"),  # a hyphen separates words
        ("read", "already", ""),
        ("read", "read/write", "read"),
        ("any host*", "to any   hosts at all", "any hosts"),
        ("github com", "push to github.com", "github com"),
    ],
)
def test_matches_whole_words_and_phrases(word: str, text: str, found: str) -> None:
    assert matches(word, text) == found


def test_the_hint_says_which_idea_is_missing_and_what_it_found() -> None:
    hint = recall_hint(question("recall-two-axes"), "user profiles and networking")
    assert [(h.found != "") for h in hint.hits] == [False, True]
    assert hint.hits[1].found == "networking" and hint.missing == (hint.hits[0].idea,)
    ok, feedback = check_answer("recall-two-axes", "user profiles and networking")
    assert not ok and "filesystem axis" in feedback and "Model answer:" in feedback and "Rubric:" in feedback


@pytest.mark.parametrize("answer", ["", "   ", "egress", None, 7])
def test_a_recall_answer_is_written_before_the_model_answer_shows(answer: object) -> None:
    with pytest.raises(InvalidAnswer, match="Write your answer first"):
        recall_hint(question("recall-two-axes"), answer)
    ok, feedback = check_answer("recall-two-axes", answer)
    assert not ok and "Model answer" not in feedback


def test_ratings_score_the_board() -> None:
    assert list(RATINGS) == ["got it", "partly", "missed"]
    assert [rating_score(r) for r in RATINGS] == [1.0, 0.5, 0.0]
    with pytest.raises(InvalidAnswer, match="got it, partly, missed"):
        rating_score("perfect")


# --- choice questions: fair options, spread keys, hashed, shuffled per learner ------------------


def test_the_key_is_rarely_the_longest_option() -> None:
    longest = [q.id for q in CHOICE if len(next(c.text for c in q.choices if c.key == right_key(q))) >= max(len(c.text) for c in q.choices)]
    assert len(longest) * 3 <= len(CHOICE), f"the key is the longest option in {longest}"


def test_no_letter_holds_more_than_half_of_the_keys() -> None:
    keys = Counter(right_key(q) for q in CHOICE)
    assert max(keys.values()) * 2 <= len(CHOICE), keys


def test_options_are_of_similar_length_and_each_wrong_one_says_why() -> None:
    for q in CHOICE:
        lengths = [len(c.text) for c in q.choices]
        assert len(lengths) >= 3 and max(lengths) <= 1.3 * min(lengths), (q.id, lengths)
        assert all(c.note for c in q.choices if c.key != right_key(q)), q.id


def test_keys_are_stored_hashed_not_as_text() -> None:
    assert '"answer":' not in SHIPPED_TEXT
    for raw in SHIPPED["questions"]:
        assert "answer" not in raw
    for q in CHOICE:
        assert q.answer_sha256 == answer_hash(q.id, right_key(q))
        # the hash is of the id and the key: the same letter hashes differently in another question
        assert answer_hash("another-question", right_key(q)) != q.answer_sha256


def test_choice_order_is_stable_per_learner_and_differs_between_learners() -> None:
    q = question("check-standard-docker")
    assert choice_order(q, "") == q.choices  # graded questions: the bank's letters
    assert choice_order(q, "learner-1") == choice_order(q, "learner-1")
    assert {c.key for c in choice_order(q, "learner-1")} == {c.key for c in q.choices}
    firsts = Counter(choice_order(q, f"learner-{n}")[0].key for n in range(400))
    assert set(firsts) == {c.key for c in q.choices} and min(firsts.values()) > 60, firsts  # about 100 each


@pytest.mark.parametrize(
    ("qid", "answer", "correct"),
    [
        ("check-etc-secrets-github", "c", True),
        ("check-etc-secrets-github", " C ", True),
        ("check-etc-secrets-github", "a", False),
        ("check-standard-docker", "No: Docker's default bridge network gives it outbound internet access, so what it reads can leave.", True),
        ("recall-wildcard-apex", "a", True),
        ("recall-prompting-boundary", "d", True),
        ("recall-prompting-boundary", "a", False),
    ],
)
def test_judge_choice(qid: str, answer: str, correct: bool) -> None:
    verdict = judge_choice(question(qid), answer)
    assert verdict.correct is correct and verdict.right == right_key(question(qid))
    assert bool(verdict.note) is not correct  # a wrong pick says why it is wrong
    assert check_answer(qid, answer)[0] is correct


@pytest.mark.parametrize("answer", ["", "z", "ab", None, 3])
def test_an_answer_that_names_no_option_is_refused_not_judged(answer: object) -> None:
    with pytest.raises(InvalidAnswer):
        judge_choice(question("check-standard-docker"), answer)
    assert not is_option("check-standard-docker", answer)
    ok, feedback = check_answer("check-standard-docker", answer)
    assert not ok and "Model answer" not in feedback


def test_is_option_says_nothing_about_right_or_wrong() -> None:
    assert all(is_option("check-standard-docker", k) for k in "abcd")


def test_check_answer_reveals_the_model_answer_and_reasoning_after_an_answer() -> None:
    _, feedback = check_answer("check-etc-secrets-github", "a")
    assert "gist" in feedback and "Why:" in feedback and "(c)" in feedback


def test_check_answer_rejects_unknown_ids_and_sends_predictions_to_their_widget() -> None:
    with pytest.raises(UnknownQuestion, match="recall-two-axes"):
        check_answer("no-such-question", "a")
    ok, feedback = check_answer("predict-standard-docker", "a")
    assert not ok and "Prediction('predict-standard-docker')" in feedback


# --- lesson 05: the graded letters are the bank's --------------------------------------------

LESSON_05 = Path(__file__).resolve().parents[3] / "lessons" / "05-check-yourself" / "check-yourself.md"


def test_lesson_05_grades_the_letters_the_bank_hashes() -> None:
    """Lesson 05's instructor key (the solution block of its answers cell) holds the bank's hashed keys, under the bank's
    letters; each graded cell names its question to autograde (``is_option``) and judges the same variable in the lesson."""
    text = LESSON_05.read_text(encoding="utf-8")
    solution = re.search(r"### BEGIN SOLUTION[^\n]*\n(.*?)### END SOLUTION", text, re.S)
    assert solution, "the answers cell keeps the instructor's key"
    key = dict(re.findall(r'(\w+) = "([a-z])"', solution.group(1)))
    graded: dict[str, str] = {}
    for cell in text.split("```{code-cell}"):
        visible = re.search(r'is_option\("([a-z0-9-]+)", (\w+)\)', cell)
        if visible:
            assert f'graded("{visible.group(1)}", {visible.group(2)})' in cell, cell
            assert "BEGIN HIDDEN TESTS" not in cell, "the lesson judges in the open; scores come from autograde"
            graded[visible.group(1)] = key[visible.group(2)]
    assert set(graded) == {"check-etc-secrets-github", "check-standard-docker"}
    for qid, letter in graded.items():
        assert answer_hash(qid, letter) == question(qid).answer_sha256, qid


def test_lesson_05_answers_start_empty_so_nothing_stops_run_all() -> None:
    """The answers cell's variables start as "" at the top level (what autograde reads); the key sits in a branch that
    never runs, inside a region marked as the key (``release.KEY_MARK``), which the release cuts whole from the learner's
    copy with no stub (nbgrader's own ``raise NotImplementedError()`` once showed under "nothing to write here")."""
    from grader.grading.release import KEY_MARK

    text = LESSON_05.read_text(encoding="utf-8")
    assert 'answer_etc_secrets = ""' in text and 'answer_standard_docker = ""' in text
    assert re.search(rf"^### BEGIN SOLUTION {re.escape(KEY_MARK)}\nif False:", text, re.M)


# --- broken banks ---------------------------------------------------------------------------


def _broken(change: Any) -> dict[str, Any]:
    """The shipped bank with one change applied (``change`` edits a deep copy in place)."""
    bank = copy.deepcopy(SHIPPED)
    change(bank)
    return bank


def _q(bank: dict[str, Any], qid: str) -> dict[str, Any]:
    q: dict[str, Any] = bank["questions"][INDEX[qid]]
    return q


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
    problems = _problems(_broken(lambda b: _q(b, "recall-default-network").pop("model_answer")))
    i = INDEX["recall-default-network"]
    assert problems == {f"/questions/{i}/model_answer": 'missing. Add "model_answer": the answer shown once the learner has answered.'}


def test_a_misspelt_key_is_refused_with_a_did_you_mean() -> None:
    def misspell(b: dict[str, Any]) -> None:
        q = _q(b, "recall-two-axes")
        q["key_ideaz"] = q.pop("key_ideas")
        _q(b, "recall-prompting-boundary")["choices"][1]["txt"] = "x"
        _q(b, "recall-two-axes")["key_ideaz"][0]["wrods"] = ["x"]

    problems = _problems(_broken(misspell))
    t, c = INDEX["recall-two-axes"], INDEX["recall-prompting-boundary"]
    assert 'Did you mean "key_ideas"?' in problems[f"/questions/{t}/key_ideaz"]
    assert 'Did you mean "text"?' in problems[f"/questions/{c}/choices/1/txt"]


def test_a_key_written_as_text_is_refused_with_its_hash() -> None:
    def plain(b: dict[str, Any]) -> None:
        q = _q(b, "check-standard-docker")
        del q["answer_sha256"]
        q["answer"] = "b"
        _q(b, "recall-two-axes")["keywords"] = [["files"]]

    problems = _problems(_broken(plain))
    i, t = INDEX["check-standard-docker"], INDEX["recall-two-axes"]
    assert problems[f"/questions/{i}/answer"] == (
        f'keys are not stored as text. Replace "answer" with "answer_sha256": "{answer_hash("check-standard-docker", "b")}".')
    assert problems[f"/questions/{t}/keywords"].startswith('replaced by "key_ideas"')


def test_wrong_types_and_values_say_what_is_expected() -> None:
    def spoil(b: dict[str, Any]) -> None:
        b["version"] = 1
        _q(b, "recall-prompting-boundary")["kind"] = "quiz"
        _q(b, "recall-wildcard-apex")["choices"] = "a, b"
        _q(b, "recall-two-axes")["key_ideas"][1]["words"] = ["network", 7]

    problems = _problems(_broken(spoil))
    assert problems["/version"] == "must be 2."
    assert problems[f"/questions/{INDEX['recall-prompting-boundary']}/kind"] == "must be 'recall' or 'check'."
    assert problems[f"/questions/{INDEX['recall-wildcard-apex']}/choices"].startswith("must be a JSON list")
    assert problems[f"/questions/{INDEX['recall-two-axes']}/key_ideas/1/words/1"] == "must be a string."


def _set(qid: str, **fields: Any) -> Any:
    return lambda b: _q(b, qid).update(**fields)


@pytest.mark.parametrize(
    ("change", "qid", "at", "words"),
    [
        (_set("recall-prompting-boundary", answer_sha256="0" * 64), "recall-prompting-boundary", "answer_sha256", "matches none of the options (a, b, c, d)"),
        (_set("recall-prompting-boundary", answer_sha256="b"), "recall-prompting-boundary", "answer_sha256", "64 hex digits"),
        (_set("recall-prompting-boundary", id="recall-prompting"), "recall-prompting-boundary", "answer_sha256", "a changed id or key needs a new hash"),
        (lambda b: _q(b, "recall-prompting-boundary")["choices"][2].update(key="a"), "recall-prompting-boundary", "choices/2/key", "used twice"),
        (lambda b: _q(b, "recall-prompting-boundary")["choices"][2].update(key="C"), "recall-prompting-boundary", "choices/2/key", "single lowercase letters"),
        (lambda b: _q(b, "recall-prompting-boundary").update(choices=_q(b, "recall-prompting-boundary")["choices"][:1]), "recall-prompting-boundary", "choices", "at least two"),
        (_set("recall-prompting-boundary", lesson="l01-why-sandbx"), "recall-prompting-boundary", "lesson", 'Did you mean "l01-why-sandbox"?'),
        (_set("recall-wildcard-apex", id="recall-prompting-boundary"), "recall-wildcard-apex", "id", "already question"),
        (_set("recall-wildcard-apex", id="Recall 2"), "recall-wildcard-apex", "id", "slugs"),
        (_set("recall-two-axes", key_ideas=[]), "recall-two-axes", "key_ideas", "needs its key ideas"),
        (_set("recall-two-axes", rubric=[]), "recall-two-axes", "rubric", "needs a rubric"),
        (lambda b: _q(b, "recall-two-axes")["key_ideas"][0].update(words=["Network"]), "recall-two-axes", "key_ideas/0/words/0", 'write it as "network"'),
        (lambda b: _q(b, "recall-two-axes")["key_ideas"][0].update(words=["file-system"]), "recall-two-axes", "key_ideas/0/words/0", 'write it as "file system"'),
        (lambda b: _q(b, "recall-two-axes")["key_ideas"][0].update(words=["ex*fil"]), "recall-two-axes", "key_ideas/0/words/0", 'at most one "*" at its end'),
        (lambda b: _q(b, "recall-two-axes")["key_ideas"][0].update(words=[]), "recall-two-axes", "key_ideas/0/words", "must not be empty"),
        (_set("recall-two-axes", answer_sha256="0" * 64), "recall-two-axes", "answer_sha256", 'a text question has no "answer_sha256"'),
        (_set("recall-prompting-boundary", rubric=["x"]), "recall-prompting-boundary", "rubric", 'a choice question has no "rubric"'),
        (_set("predict-standard-docker", scenario=None), "predict-standard-docker", "scenario", "needs its sandbox"),
        (lambda b: _q(b, "predict-standard-docker")["scenario"].pop("policy"), "predict-standard-docker", "scenario/policy", 'missing. Add "policy"'),
        (lambda b: _q(b, "predict-etc-secrets-github")["scenario"]["policy"]["network"].update(allowedDomains=["*"]),
         "predict-etc-secrets-github", "scenario/policy/network/allowedDomains/0", "would allow every host"),
        (lambda b: _q(b, "predict-standard-docker")["scenario"].update(probes=["read-ssh-keys"]), "predict-standard-docker", "scenario/probes/0", 'Did you mean "read-ssh-key"?'),
        (lambda b: _q(b, "predict-standard-docker")["scenario"].update(probes=["read-ssh-key", "read-ssh-key"]), "predict-standard-docker", "scenario/probes/1", "listed twice"),
        (_set("predict-standard-docker", choices=[{"key": "a", "text": "x"}]), "predict-standard-docker", "choices", 'a predict question has no "choices"'),
    ],
)
def test_a_question_that_could_not_be_judged_is_refused(change: Any, qid: str, at: str, words: str) -> None:
    pointer = f"/questions/{INDEX[qid]}/{at}"  # qid: the question changed, by its shipped id
    problems = _problems(_broken(change))
    assert pointer in problems and words in problems[pointer], problems


def test_an_empty_bank_is_refused() -> None:
    assert "must not be empty" in _problems(_broken(lambda b: b.update(questions=[])))["/questions"]


def test_every_problem_is_listed_at_once() -> None:
    def spoil(b: dict[str, Any]) -> None:
        _q(b, "recall-prompting-boundary")["answer_sha256"] = "0" * 64
        _q(b, "recall-wildcard-apex")["lesson"] = "nowhere"

    assert set(_problems(_broken(spoil))) == {f"/questions/{INDEX['recall-prompting-boundary']}/answer_sha256",
                                               f"/questions/{INDEX['recall-wildcard-apex']}/lesson"}


@pytest.mark.parametrize("data", [[], "questions", None, {"version": 2, "questions": [1]}])
def test_a_bank_that_is_not_an_object_of_questions_is_refused(data: Any) -> None:
    assert _problems(data)


def test_a_broken_bank_file_gives_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "questions.json"
    path.write_text('{"version": 2, "questions": [', encoding="utf-8")
    with pytest.raises(QuestionBankError, match=r"questions.json is not a valid question bank \(1 problem\)\n  /: not valid JSON"):
        load_questions(path)
    path.write_text(json.dumps({"version": 2, "questions": [{"id": "q"}]}), encoding="utf-8")
    with pytest.raises(QuestionBankError) as info:
        load_questions(path)
    assert {p.pointer for p in info.value.problems} >= {"/questions/0/kind", "/questions/0/prompt", "/questions/0/model_answer"}
    with pytest.raises(QuestionBankError, match="cannot be read"):
        load_questions(tmp_path / "missing.json")
