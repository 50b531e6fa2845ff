"""Self-study: a lesson's graded check judged in the lesson, hints that say what they are, retrieval that varies.

* ``quiz_widgets.graded``: an unanswered check says "not answered yet" and
  never raises (Run All goes on); a letter is recorded as the first attempt and
  only then shows the verdict, the reasoning, the picked option's note and the
  course source's explanation.
* The recall hint is labelled "a hint from keywords, possibly wrong", and the
  learner's rating is shown beside what it found.
* Retrieval: lesson 05 asks new variants of the ideas of lessons 02-04, never
  their questions again (stems compared normalised); lessons 03, 04, 06 and 07
  open with one question on an earlier lesson's idea.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import pytest

from grader.course.progress import load_progress
from grader.course.quiz import HINT_LABEL, load_questions, question, questions_for, stem
from grader.notebook.quiz_widgets import Quiz, graded

jupytext = pytest.importorskip("jupytext", reason="jupytext is in the 'lab' extra")

ROOT = Path(__file__).resolve().parents[3]
LESSONS = ROOT / "lessons"


@pytest.fixture(autouse=True)
def _progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "progress.json"
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(path))
    return path


# --- a graded lesson check, judged in the lesson ---------------------------------------------


@pytest.mark.parametrize("answer", ["", "  ", "?", None])
def test_an_unanswered_check_says_so_records_nothing_and_gives_nothing_away(answer: object) -> None:
    out = graded("check-etc-secrets-github", answer).value
    q = question("check-etc-secrets-github")
    assert "not answered yet" in out and 'data-answered="false"' in out
    assert "Model answer" not in out and q.reasoning[:40] not in out and q.seed[:40] not in out
    assert load_progress().first == {}


@pytest.mark.parametrize(("answer", "says"), [("z", "is not one of the options"), (3, "not a letter (int)"), ("ab", "not one of")])
def test_an_answer_that_is_no_letter_says_what_to_write_and_records_nothing(answer: object, says: str) -> None:
    out = graded("check-standard-docker", answer).value
    assert says in out and "Model answer" not in out
    assert load_progress().first == {}


def test_a_wrong_letter_shows_the_verdict_why_the_note_and_the_course_source_once_recorded() -> None:
    q = question("check-etc-secrets-github")
    out = graded("check-etc-secrets-github", "a").value
    wrong = next(c for c in q.choices if c.key == "a")
    assert "Not quite" in out and "(a) is not the answer" in out
    assert wrong.note.replace("'", "&#x27;") in out  # why this distractor is wrong
    assert "Model answer:</strong> (c)" in out and "<em>Why:</em>" in out  # why the key is right
    assert "The course source on this idea" in out and "POST them to a public GitHub Gist" in out
    assert "First attempt recorded" in out
    assert load_progress().first["quiz:check-etc-secrets-github"].result == "wrong"
    again = graded("check-etc-secrets-github", " C ").value  # changed after seeing the answer: not recorded
    assert "Right" in again and "Only your first attempt counts" in again
    assert load_progress().first["quiz:check-etc-secrets-github"].result == "wrong"


def test_a_right_letter_is_recorded_right() -> None:
    out = graded("check-standard-docker", "b").value
    assert "Right" in out and "bridge" in out and "outside your kernel" in out
    assert load_progress().first["quiz:check-standard-docker"].score == 1.0


def test_without_a_progress_file_the_answer_is_not_revealed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(blocker / "progress.json"))  # a path below a file: cannot be written
    out = graded("check-etc-secrets-github", "a").value
    assert "progress not saved" in out and "Model answer" not in out


def test_graded_refuses_a_question_that_is_not_a_choice() -> None:
    with pytest.raises(Exception, match="not a choice question"):
        graded("recall-two-axes", "a")


# --- every check a learner answers shows the course source -----------------------------------


def test_every_question_quotes_the_course_source() -> None:
    assert all(q.seed for q in load_questions())


def test_a_choice_quiz_shows_the_course_source_with_the_verdict() -> None:
    quiz = Quiz("recall-prompting-boundary")
    quiz.check("a")
    assert "The course source on this idea" in quiz.feedback.value and "least-privilege prompting" in quiz.feedback.value


# --- the recall hint says what it is; the rating sits beside it ------------------------------


def test_the_recall_hint_says_it_is_a_hint_from_keywords_possibly_wrong() -> None:
    assert HINT_LABEL == "a hint from keywords, possibly wrong"
    quiz = Quiz("recall-two-axes")
    quiz.reveal("reading the host's logs")
    assert HINT_LABEL in quiz.feedback.value


@pytest.mark.parametrize(("answer", "rating", "found", "disagree"), [
    ("reading the host's logs", "got it", 1, True),  # the hint finds one idea of two; the learner says "got it"
    ("phoning home with what it reads", "got it", 2, False),
    ("phoning home with what it reads", "missed", 2, True),
    ("reading the host's logs", "partly", 1, False),
])
def test_the_self_rating_is_shown_beside_what_the_hint_found(answer: str, rating: str, found: int, disagree: bool) -> None:
    quiz = Quiz("recall-two-axes")
    quiz.reveal(answer)
    quiz.rate(rating)
    out = quiz.rated.value
    assert f"You rated your answer: <strong>{rating}</strong>" in out
    assert f'data-found="{found}" data-total="2" data-disagree="{str(disagree).lower()}"' in out
    assert f"found {found} of 2 key ideas" in out and HINT_LABEL in out
    assert ("They disagree" in out) is disagree
    assert load_progress().first["quiz:recall-two-axes"].result == rating  # the rating is recorded, not the hint


# --- retrieval: new variants, never the same words -------------------------------------------

EARLIER = ("l01-why-sandbox", "l02-naive-vs-secure", "l03-container-alone", "l04-trusted-domains")
SIMILAR = 0.8  # difflib ratio of two normalised stems above which one is a rewording of the other


def repeats(later: Any, earlier: Any) -> list[str]:
    """Each later question whose normalised stem equals (or nearly equals) an earlier one's."""
    out = []
    for q in later:
        for e in earlier:
            if stem(q.prompt) == stem(e.prompt) or difflib.SequenceMatcher(None, stem(q.prompt), stem(e.prompt)).ratio() > SIMILAR:
                out.append(f"{q.id} repeats {e.id}")
    return out


def test_lesson_05_asks_no_earlier_lesson_s_question_again() -> None:
    earlier = [q for q in load_questions() if q.lesson in EARLIER]
    assert repeats(questions_for(lesson="l05-check-yourself"), earlier) == []


def test_the_repeat_check_can_fail() -> None:
    two_axes = question("recall-two-axes")
    copy = two_axes.model_copy(update={"id": "recall-two-axes-again", "lesson": "l05-check-yourself",
                                       "prompt": "  what are the TWO required axes for effective sandboxing of an agent's code-execution? (name both)"})
    assert repeats([copy], [two_axes]) == ["recall-two-axes-again repeats recall-two-axes"]


def _code(path: Path) -> list[str]:
    return [c.source for c in jupytext.read(path).cells if c.cell_type == "code"]


def _asked(path: Path) -> list[str]:
    return [m for src in _code(path) for m in re.findall(r'(?:Quiz|Prediction|graded|ask)\("([a-z0-9-]+)"', src)]


def test_lesson_05_shows_only_its_own_questions() -> None:
    asked = _asked(LESSONS / "05-check-yourself" / "check-yourself.md")
    assert asked and all(question(qid).lesson == "l05-check-yourself" for qid in asked), asked
    variants = {"recall-axes-attacks", "recall-container-ci", "recall-trusted-bucket"}
    assert variants <= set(asked)


OPENERS = {"03-container-alone": "l02", "04-trusted-domains": "l03", "06-what-a-policy-misses": "l04", "07-break-it-yourself": "l06"}


@pytest.mark.parametrize(("folder", "earlier"), OPENERS.items())
def test_later_lessons_open_with_one_retrieval_question_from_an_earlier_lesson(folder: str, earlier: str) -> None:
    [path] = (LESSONS / folder).glob("*.md")
    cells = jupytext.read(path).cells
    assert cells[0].cell_type == "markdown" and cells[1].cell_type == "code"
    [qid] = re.findall(r'Quiz\("([a-z0-9-]+)"\)', cells[1].source)
    q = question(qid)
    assert q.lesson == f"l{folder[:2]}-{folder[3:]}" and qid.startswith("retrieve-")
    assert q.prompt.startswith(f"From lesson {earlier[1:]}, in a new setup:"), q.prompt
    others = [o for o in load_questions() if o.id != qid]
    assert repeats([q], others) == []


@pytest.mark.parametrize(("qid", "answer", "complete"), [
    ("recall-container-ci", "Default networking reaches any host, so the keys leave; run it with no network and don't mount the keys.", True),
    ("recall-container-ci", "The keys are mounted read-only so they are safe.", False),
    ("recall-trusted-bucket", "Anyone can create their own bucket there, and the proxy only sees the host name, not the content.", True),
    ("recall-trusted-bucket", "AWS is sometimes slow to answer.", False),
    ("recall-axes-attacks", "Files: it writes a backdoor into ~/.bashrc. Network: it sends the SSH key out.", True),
    ("recall-axes-attacks", "The prompt and the model.", False),
])
def test_the_lesson_05_variants_hint_on_their_own_words(qid: str, answer: str, complete: bool) -> None:
    from grader.course.quiz import recall_hint

    assert recall_hint(question(qid), answer).complete is complete
