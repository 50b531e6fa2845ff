"""The question views (``quiz_views``, and the score board's ``progress_views``): nothing of an answer before it is due, first attempts on the board, everything escaped."""

from __future__ import annotations

from pathlib import Path

from grader.core.analyzer import predict
from grader.notebook.progress_views import progress_html
from grader.notebook.quiz_views import (
    ask_html,
    choice_result_html,
    prediction_html,
    prompt_html,
    question_html,
    rating_html,
    recall_reveal_html,
    scenario_html,
)
from grader.course.prediction import scenario_policy, score_prediction
from grader.course.progress import Attempt, Progress
from grader.course.quiz import ChoiceVerdict, IdeaHit, RecallHint, judge_choice, question, right_key

HOSTILE = "<script>alert(1)</script>\x1b[2J"


def test_a_graded_question_shows_options_under_the_bank_s_letters_and_nothing_else() -> None:
    q = question("check-etc-secrets-github")
    out = ask_html(q)
    assert [f'data-key="{c.key}"' in out for c in q.choices] == [True] * 4
    assert "Model answer" not in out and q.reasoning[:30] not in out and q.choices[0].note[:30] not in out


def test_a_pick_shows_the_model_answer_only_when_revealed() -> None:
    q = question("check-standard-docker")
    wrong = judge_choice(q, "a")
    letters = {"a": "c", "b": "a", "c": "b", "d": "d"}
    hidden = choice_result_html(q, wrong, letters, reveal=False, unsaved="disk full")
    assert "(c) is not the answer" in hidden  # the learner's letter, not the bank's
    assert "Model answer" not in hidden and wrong.note not in hidden and "progress not saved: disk full" in hidden
    shown = choice_result_html(q, wrong, letters, reveal=True, attempt=Attempt(1.0, "wrong", 0.0), this_one=True)
    assert "Model answer:</strong> (a) " in shown and wrong.note in shown and 'data-first="true"' in shown


def test_prompts_say_how_each_question_is_asked() -> None:
    assert "Predict, then run" in prompt_html(question("predict-standard-docker"))
    assert "write your answer first" in prompt_html(question("recall-two-axes"))
    assert "plain Docker container" in scenario_html(question("predict-standard-docker"))
    assert "github.com" in scenario_html(question("predict-etc-secrets-github"))
    assert scenario_html(question("recall-two-axes")) == ""


def test_the_board_counts_a_question_by_its_first_attempt(tmp_path: Path) -> None:
    questions = [question("recall-two-axes"), question("check-standard-docker"), question("predict-standard-docker")]
    progress = Progress(tmp_path / "p.json", {}, {
        "quiz:recall-two-axes": Attempt(1.0, "partly", 0.5),
        "quiz:check-standard-docker": Attempt(2.0, "wrong", 0.0),
        "quiz:predict-standard-docker": Attempt(3.0, "6/6 right", 1.0),
    })
    out = progress_html(progress, questions=questions)
    assert 'data-item="quiz:recall-two-axes" data-done="false"' in out and "◐" in out and "first attempt: partly" in out
    assert 'data-item="quiz:check-standard-docker" data-done="false"' in out and "✗" in out
    assert 'data-item="quiz:predict-standard-docker" data-done="true"' in out
    assert "1 of 3 right, 3 answered" in out and "1 of 3 right at the first attempt" in out
    assert 'data-solved="0" data-done="0"' in out  # shown beside the percent, not counted in it (mastery is goals, tasks, levels)


def test_every_question_view_escapes_what_it_shows() -> None:
    q = question("check-standard-docker").model_copy(update={"prompt": HOSTILE, "model_answer": HOSTILE, "reasoning": HOSTILE})
    r = question("recall-two-axes").model_copy(update={"rubric": (HOSTILE,)})
    p = question("predict-etc-secrets-github")
    score = score_prediction(p, [], predict(scenario_policy(p), notes=(HOSTILE,)))
    verdict = ChoiceVerdict(q.id, "a", right_key(q), HOSTILE)
    outs = [
        prompt_html(q), ask_html(q), question_html(q), question_html(r),
        choice_result_html(q, verdict, {}, reveal=True, attempt=Attempt(1.0, HOSTILE, 0.0), this_one=True),
        recall_reveal_html(r, RecallHint(r.id, (IdeaHit(HOSTILE, HOSTILE),))),
        rating_html(HOSTILE, unsaved=HOSTILE),
        prediction_html(p.model_copy(update={"model_answer": HOSTILE}), score, unsaved=HOSTILE),
        progress_html(Progress(Path("/x"), {}, {f"quiz:{q.id}": Attempt(1.0, HOSTILE, 0.0)}), questions=[q]),
    ]
    for out in outs:
        assert "<script>" not in out and "\x1b" not in out, out
    assert all("&lt;script&gt;" in out for out in outs[:1] + outs[4:])
