"""The lessons' widgets: the policy editor, the probe board, side-by-side runs, the questions and the progress board.

What they draw is tested in test_board.py; here, that they wire validation,
runs, grading and progress to that HTML.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader import load_policy
from grader.backends import StaticBackend
from grader.core.errors import BackendError
from grader.course.progress import load_progress, mark_done
from grader.course.quiz import InvalidAnswer, choice_order, right_key
from grader.core.wording import backend_phrase
import fakewire

NAIVE = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}
PRACTICE = {"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}}


@pytest.fixture(autouse=True)
def _progress_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "progress.json"
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(path))
    return path


widgets = pytest.importorskip("grader.notebook.widgets", reason="ipywidgets is in the 'lab' extra")


def test_policy_editor_lists_errors_with_pointers_and_its_button_runs_nothing_until_they_are_fixed() -> None:
    editor = widgets.PolicyEditor(NAIVE, backend=StaticBackend())
    assert editor.policy is not None and not editor.button.disabled
    assert "/network/allowedDomains/0" in editor.status.value  # the *.github.com lint warning
    editor.policy_text = json.dumps({"filesystem": {"allowWrites": ["/x"]}, "network": {"allowedDomains": ["*"]}})
    assert editor.policy is None
    pointers = [p.pointer for p in editor.errors]
    assert pointers == ["/filesystem/allowWrites", "/network/allowedDomains/0"]
    assert 'data-pointer="/filesystem/allowWrites"' in editor.status.value
    assert "allowWrite" in editor.status.value  # the did-you-mean
    # Enabled, so Tab reaches it (a disabled button leaves the Tab order); pressed, it runs nothing and says why.
    assert not editor.button.disabled
    editor.button.click()
    assert editor.last_result is None and "Fix the errors above first" in editor.backend_note.value
    assert editor.board.result is None
    editor.policy_text = json.dumps({"filesystem": {"allowWrite": ["/x"]}, "network": {"allowedDomains": ["*"]}})
    assert editor.policy is None and editor.last_result is None, "still invalid: nothing runs"
    editor.policy_text = json.dumps(PRACTICE)
    assert editor.policy is not None and "Fix the errors" not in editor.backend_note.value
    assert editor.last_result is None, "fixed by hand after the press: the learner presses again"


def test_a_press_that_reaches_the_kernel_before_its_text_runs_that_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """ipywidgets holds a text update back while the kernel is busy and sends a click at once: typed fast and
    pressed at once, the kernel sees the press on the text before. The first text after it, at once, is the one
    pressed on: valid, it runs; later than ``_LATE_TEXT_S``, it does not (the learner fixed it afterwards)."""
    editor = widgets.PolicyEditor('{"filesystem": {"allowRead": ["/proj', backend=StaticBackend())
    editor.button.click()  # the press, on the text the kernel had
    assert "Fix the errors above first" in editor.backend_note.value and editor.last_result is None
    editor.policy_text = json.dumps(PRACTICE)  # the text the learner pressed on, held back until now
    assert editor.last_result is not None and editor.board.result is editor.last_result
    assert "Fix the errors" not in editor.backend_note.value
    editor.policy_text = json.dumps(NAIVE)  # one press runs once
    assert editor.last_result.policy == load_policy(PRACTICE)

    late = widgets.PolicyEditor('{"filesystem": ', backend=StaticBackend())
    late.button.click()
    clock = widgets.time.monotonic() + widgets._LATE_TEXT_S + 1
    monkeypatch.setattr(widgets.time, "monotonic", lambda: clock)
    late.policy_text = json.dumps(PRACTICE)
    assert late.policy is not None and late.last_result is None


def test_policy_editor_never_reads_a_file_named_in_the_text(tmp_path: Path) -> None:
    f = tmp_path / "p.json"
    f.write_text(json.dumps(PRACTICE))
    editor = widgets.PolicyEditor(str(f), backend=StaticBackend())
    assert editor.policy is None and editor.errors


def test_an_editor_that_saves_writes_every_edit_valid_or_not_so_its_file_is_what_it_shows(tmp_path: Path) -> None:
    """The capstone's editor (lesson 07) writes the file ``%%attack capstone --policy`` reads: every edit, an invalid
    one too, so the attack names the editor's problems instead of running an older, valid policy."""
    path = tmp_path / "capstone_policy.json"
    editor = widgets.PolicyEditor({"filesystem": {}, "network": {}}, backend=StaticBackend(), save_as=path)
    assert load_policy(path) == load_policy({"filesystem": {}, "network": {}})  # the starter, saved at once
    assert "Saved to capstone_policy.json (a valid policy)" in editor.status.value
    editor.policy_text = '{"network": {"allowedDomains": ["cdn.jsdelivr.net"],}}'
    assert path.read_text(encoding="utf-8") == '{"network": {"allowedDomains": ["cdn.jsdelivr.net"],}}\n'
    assert "not valid yet" in editor.status.value
    editor.policy_text = json.dumps(PRACTICE)
    assert load_policy(path) == load_policy(PRACTICE)
    (tmp_path / "gone").mkdir()
    stuck = widgets.PolicyEditor("{}", backend=StaticBackend(), save_as=tmp_path / "gone")  # a directory: cannot be written
    assert "Not saved to gone" in stuck.status.value
    assert "Saved to" not in widgets.PolicyEditor("{}", backend=StaticBackend()).status.value  # no file unless asked


def test_policy_editor_probe_fills_the_board_and_says_which_backend_ran() -> None:
    editor = widgets.PolicyEditor(NAIVE, backend=StaticBackend(notice="predicted, not run: no Docker engine answers (test)",
                                                               cause="no-engine"))
    result = editor.probe()
    assert result is not None and result.outcome("exfil-secret").outcome == "succeeded"
    assert 'data-probe="exfil-secret" data-outcome="succeeded"' in editor.board.value
    assert "predicted: no Docker engine" in editor.backend_note.value
    assert backend_phrase("static", result.codes) in editor.backend_note.value
    assert "sl-probe-button" in editor.button._dom_classes and "sl-policy-text" in editor.text._dom_classes
    assert "sl-probe-board" in editor.board._dom_classes
    assert "text/html" in editor._repr_mimebundle_()


NPM_FIXED = {
    "filesystem": {"denyRead": ["/home/user", "/etc/secrets", "/project/.env"], "allowWrite": ["/app/workspace/build"]},
    "network": {"allowedDomains": ["registry.npmjs.org"]},
}


def test_an_editor_with_a_goal_states_it_and_says_not_yet_with_the_reasons() -> None:
    editor = widgets.PolicyEditor(NAIVE, backend=StaticBackend(), goal="l02-npm-build")
    assert 'class="sl-goal"' in editor.goal_box.value and "npm registry" in editor.goal_box.value
    assert editor.goal_status.value == "" and editor.goal_met is None  # nothing judged before a run
    editor.probe()
    assert editor.goal_met is False and editor.goal_reasons[0] == "read-ssh-key succeeded — ~/.ssh/id_rsa is readable"
    status = editor.goal_status.value
    assert 'class="sl-goal-status" data-goal="not-met"' in status and "Not yet:" in status
    assert "~/.ssh/id_rsa is readable" in status and "sl-carry-over" not in status
    assert load_progress().done == {}


def test_an_editor_whose_goal_is_met_says_so_records_it_and_shows_the_real_tools() -> None:
    editor = widgets.PolicyEditor(NAIVE, backend=StaticBackend(), goal="l02-npm-build")
    editor.probe()
    editor.policy_text = json.dumps(NPM_FIXED)
    editor.probe()
    status = editor.goal_status.value
    assert editor.goal_met is True and editor.goal_reasons == []
    assert 'data-goal="met"' in status and "Goal met" in status
    assert "Accepted risk" in status and "npm publish" in status  # the upload channel, named and explained
    assert "sl-carry-over" in status and "--to srt" in status and "//app/workspace/build" in status
    assert "goal:l02-npm-build" in load_progress().done
    assert 'data-goal="met"' in editor._repr_mimebundle_()["text/html"]  # exports show it too


def test_an_editor_goal_is_given_as_an_id_or_a_goal_and_an_unknown_id_is_refused() -> None:
    from grader.course.goals import UnknownGoal, goal

    editor = widgets.PolicyEditor(NPM_FIXED, backend=StaticBackend(), goal=goal("l02-npm-build"), record_progress=False)
    editor.probe()
    assert editor.goal_met is True and load_progress().done == {}  # met, but nothing recorded when asked not to
    with pytest.raises(UnknownGoal, match="known goals"):
        widgets.PolicyEditor(NAIVE, goal="no-such-goal")
    plain = widgets.PolicyEditor(NAIVE, backend=StaticBackend())
    plain.probe()
    assert plain.goal_status.value == "" and plain.goal_met is None  # no goal, no verdict


def test_a_failed_run_judges_no_goal() -> None:
    class Broken:
        name = "docker"

        def run(self, plan: object) -> object:
            raise BackendError("the engine went away")

    editor = widgets.PolicyEditor(NPM_FIXED, backend=Broken(), goal="l02-npm-build")
    assert editor.probe() is None
    assert editor.goal_met is None and editor.goal_status.value == "" and load_progress().done == {}


def test_side_by_side_runs_each_policy_including_the_baseline() -> None:
    view = widgets.side_by_side({"naive": NAIVE, "practice": PRACTICE, "baseline": None}, backend=StaticBackend())
    assert set(view.results) == {"naive", "practice", "baseline"}
    assert view.results["baseline"].sandbox == "baseline"
    assert 'data-sandbox="practice" data-probe="exfil-secret" data-outcome="blocked"' in view.value


def test_side_by_side_shows_an_invalid_policy_as_a_message() -> None:
    view = widgets.side_by_side({"bad": {"network": {"allowedDomains": ["*"]}}}, backend=StaticBackend())
    assert isinstance(view.results["bad"], str) and "/network/allowedDomains/0" in view.results["bad"]


# --- questions --------------------------------------------------------------------------------


def test_a_choice_quiz_shows_the_options_in_this_learner_s_order() -> None:
    quiz = widgets.Quiz("check-standard-docker")
    q = quiz.question
    seed = load_progress().learner
    assert seed  # made on first use, kept in the progress file
    assert quiz.order == choice_order(q, seed) and widgets.Quiz("check-standard-docker").order == quiz.order
    labels = [label for label, _ in quiz.input.options]
    assert [key for _, key in quiz.input.options] == [c.key for c in quiz.order]
    assert [label[:3] for label in labels] == ["(a)", "(b)", "(c)", "(d)"]  # letters by position, not the bank's
    assert quiz.feedback.value == ""


def test_only_the_first_pick_counts_and_the_answer_shows_once_it_is_recorded() -> None:
    quiz = widgets.Quiz("check-standard-docker")
    wrong = next(c.key for c in quiz.order if c.key != right_key(quiz.question))
    verdict = quiz.check(wrong)
    assert verdict is not None and not verdict.correct and quiz.input.value == wrong
    assert 'data-revealed="true"' in quiz.feedback.value and "bridge networking" in quiz.feedback.value
    assert f"({quiz.letters[right_key(quiz.question)]})" in quiz.feedback.value  # the right option under the learner's letter
    assert 'data-first="true"' in quiz.feedback.value
    again = quiz.check(right_key(quiz.question))
    assert again is not None and again.correct and 'data-first="false"' in quiz.feedback.value
    first = load_progress().first_attempt("quiz:check-standard-docker")
    assert first is not None and (first.result, first.score) == ("wrong", 0.0)
    board = widgets.ProgressBoard().html.value
    assert 'data-item="quiz:check-standard-docker" data-done="false"' in board and "first attempt: wrong" in board


def test_no_model_answer_before_the_first_attempt_is_on_record(_progress_file: Path) -> None:
    _progress_file.write_text("{broken")
    quiz = widgets.Quiz("check-standard-docker")
    assert "bank&#x27;s order" in quiz.note.value or "bank's order" in quiz.note.value
    assert quiz.order == quiz.question.choices
    quiz.check("a")
    assert 'data-revealed="false"' in quiz.feedback.value and "bridge networking" not in quiz.feedback.value
    assert "progress not saved" in quiz.feedback.value
    assert _progress_file.read_text() == "{broken"


def test_an_answer_that_is_no_option_is_refused_and_not_recorded() -> None:
    quiz = widgets.Quiz("check-standard-docker")
    assert quiz.check("z") is None and "not one of the options" in quiz.feedback.value
    assert quiz.check() is None and "choose one option" in quiz.feedback.value
    assert load_progress().first == {}


def test_a_recall_quiz_takes_the_answer_first_then_reveals_then_takes_a_rating() -> None:
    quiz = widgets.Quiz("recall-two-axes")
    assert quiz.ratings.layout.display == "none"
    assert quiz.rate("got it") is None and load_progress().first == {}  # nothing to rate yet
    assert quiz.reveal("egress") is None and "Model answer" not in quiz.feedback.value
    hint = quiz.reveal("read and write permissions plus egress")
    assert hint is not None and hint.complete
    assert quiz.input.disabled and quiz.button.disabled and quiz.ratings.layout.display == ""
    out = quiz.feedback.value
    assert "Model answer" in out and "sl-rubric" in out and 'data-found="true"' in out and "egress" in out
    first = quiz.rate("partly")
    assert first is not None and (first.result, first.score) == ("partly", 0.5)
    assert 'data-first="true"' in quiz.rated.value
    assert quiz.rate("got it") == first and 'data-first="false"' in quiz.rated.value
    board = widgets.ProgressBoard().html.value
    assert 'data-item="quiz:recall-two-axes" data-done="false"' in board and "first attempt: partly" in board
    assert ["got it", "partly", "missed"] == [b.description for b in quiz.ratings.children]


def test_a_recall_hint_that_finds_an_idea_missing_says_so() -> None:
    quiz = widgets.Quiz("recall-two-axes")
    quiz.reveal("user profiles and networking")
    assert quiz.feedback.value.count('data-found="false"') == 1


def test_an_unanswered_quiz_exports_without_its_answer() -> None:
    for qid in ("check-standard-docker", "recall-two-axes"):
        quiz = widgets.Quiz(qid)
        html = quiz._repr_mimebundle_()["text/html"]
        assert quiz.question.prompt[:20] in html
        assert "Model answer" not in html and quiz.question.reasoning[:30] not in html


def test_a_predict_question_is_not_a_quiz_and_a_quiz_is_not_a_prediction() -> None:
    with pytest.raises(InvalidAnswer, match="Prediction"):
        widgets.Quiz("predict-standard-docker")
    with pytest.raises(InvalidAnswer, match="Quiz"):
        widgets.Prediction("recall-two-axes")


def test_ask_shows_a_graded_question_with_the_bank_s_letters_and_no_answer() -> None:
    view = widgets.ask("check-etc-secrets-github")
    assert 'data-key="a"' in view.value and "Model answer" not in view.value and "repository on github.com" in view.value
    assert view._repr_mimebundle_()["text/html"] == view.value
    with pytest.raises(InvalidAnswer):
        widgets.ask("recall-two-axes")


def test_predict_then_run_scores_the_ticked_probes_against_the_run() -> None:
    view = widgets.Prediction("predict-etc-secrets-github", backend=StaticBackend())
    assert view.view.value == "" and "sl-board" not in view._repr_mimebundle_()["text/html"]
    view.boxes["read-etc-secrets"].value = True
    view.boxes["read-ssh-key"].value = True
    score = view.run()
    assert score is not None and view.predicted == ("read-etc-secrets", "read-ssh-key")
    assert score.result == "3/6 right" and not score.observed
    out = view.view.value
    assert backend_phrase("static") in out  # on Binder the outcome is labelled predicted
    assert 'data-probe="read-ssh-key" data-predicted="succeeded" data-outcome="blocked" data-right="false"' in out
    assert 'data-probe="read-etc-secrets" data-predicted="succeeded" data-outcome="succeeded" data-right="true"' in out
    assert "Model answer" in out and all(b.disabled for b in view.boxes.values()) and view.button.disabled
    first = load_progress().first_attempt("quiz:predict-etc-secrets-github")
    assert first is not None and first.result == "3/6 right" and first.score == 0.5
    assert "☑ read-etc-secrets" in view._repr_mimebundle_()["text/html"]


def test_predict_then_run_with_a_prediction_given_in_code() -> None:
    view = widgets.Prediction("predict-standard-docker", backend=StaticBackend())
    score = view.run(["read-ssh-key", "write-shell-rc", "net-direct-ip", "net-dns-exfil", "exfil-secret"])
    assert score is not None and score.result == "6/6 right"
    assert 'data-item="quiz:predict-standard-docker" data-done="true"' in widgets.ProgressBoard().html.value
    again = widgets.Prediction("predict-standard-docker", backend=StaticBackend())
    assert again.run(["no-such-probe"]) is None and "no-such-probe" in again.view.value


def test_a_run_that_fails_scores_nothing_and_can_be_retried() -> None:
    class Broken:
        name = "docker"

        def run(self, plan: object) -> object:
            raise BackendError("the engine went away")

    view = widgets.Prediction("predict-standard-docker", backend=Broken())
    assert view.run(["read-ssh-key"]) is None
    assert "sl-failed" in view.view.value and "the engine went away" in view.view.value
    assert not view.button.disabled and not any(b.disabled for b in view.boxes.values())
    assert load_progress().first == {}


def test_quizzes_builds_a_prediction_for_each_predict_question() -> None:
    box = widgets.quizzes(lesson="l05-check-yourself")
    kinds = [type(w).__name__ for w in box.children]
    assert kinds.count("Prediction") == 2 and kinds.count("Quiz") == 5  # two graded checks, three recall variants


def test_progress_board_lists_lessons_questions_and_tasks() -> None:
    mark_done("l02-naive-vs-secure")
    out = widgets.ProgressBoard().html.value
    assert 'data-item="l02-naive-vs-secure" data-done="true"' in out
    assert 'data-item="quiz:recall-two-axes" data-done="false"' in out


# --- capture the flag ---------------------------------------------------------------------------


class _Engine:
    """Stands in for Docker: an attack containing SEND_FLAG "sends" its flag to the gist host; nothing else leaves."""

    name = "docker"

    def execute(self, plan, job):  # type: ignore[no-untyped-def]
        from grader.core.evidence import Evidence
        from grader.core.execution import Execution

        flag = next(iter(job.plant.values())).strip()
        http = (fakewire.http(host="gist.github.com", method="POST", path="/", body=flag),) if "SEND_FLAG" in job.code else ()
        ev = Evidence(token="t", canaries={}, records=(), before={}, after={}, network=plan.network, http=http)
        return Execution(backend="docker", output="<b>printed</b>", exit_code=0, timed_out=False, evidence=ev)


def test_attack_editor_runs_the_code_and_shows_the_next_hint_then_the_capture() -> None:
    from grader.course.ladder import level

    lv = level(2)
    editor = widgets.AttackEditor(2, "print('hi')", backend=_Engine())
    assert {"sl-attack-editor"} <= set(editor._dom_classes)
    assert "sl-attack-code" in editor.text._dom_classes and "sl-attack-button" in editor.button._dom_classes
    assert "sl-attack-result" in editor.view._dom_classes
    assert __import__("html").escape(lv.story) in editor.intro.value and "*.github.com" in editor.intro.value
    first = editor.run()
    assert first is not None and not first.captured and first.hint == lv.hints[0]
    assert 'data-captured="false"' in editor.view.value and "&lt;b&gt;printed" in editor.view.value
    assert editor.run().hint == lv.hints[1]  # type: ignore[union-attr]
    got = editor.run("# SEND_FLAG")
    assert got is not None and got.captured and 'data-captured="true"' in editor.view.value and "gist.github.com" in editor.view.value
    rec = load_progress().level(lv.item_id)
    assert (rec.attempts, rec.hints, rec.captured is not None) == (3, 2, True)
    assert 'data-captured="true"' in editor._repr_mimebundle_()["text/html"]


class _CutEngine(_Engine):
    """The engine of a run whose log was cut: no sighting, and the evidence says it is incomplete."""

    def execute(self, plan, job):  # type: ignore[no-untyped-def]
        from dataclasses import replace

        ex = super().execute(plan, job)
        return replace(ex, evidence=replace(ex.evidence, infra_problem="the run's evidence cannot be read whole (http.jsonl: cut off)"))


def test_attack_editor_shows_a_run_that_could_not_be_judged_as_an_error_and_records_no_attempt() -> None:
    from grader.course.ladder import level

    lv = level(2)
    editor = widgets.AttackEditor(2, "print('hi')", backend=_CutEngine())
    got = editor.run()
    assert got is not None and got.captured is None and got.hint == ""
    view = editor.view.value
    assert 'data-captured="error"' in view and "sl-error" in view and "Could not judge this attack" in view and "cut off" in view
    assert "Not captured" not in view and "Hint:" not in view and "&lt;b&gt;printed" in view
    assert load_progress().levels == {} and editor.attempts == 0
    editor._backend = _Engine()
    assert editor.run().hint == lv.hints[0]  # type: ignore[union-attr]  # the broken run unlocked nothing


def test_attack_editor_on_the_static_backend_says_so_and_records_nothing() -> None:
    editor = widgets.AttackEditor("plain-container", "# SEND_FLAG", backend=StaticBackend())
    assert editor.run() is None
    assert "attacks cannot be predicted" in editor.view.value and "sl-failed" in editor.view.value
    assert load_progress().levels == {} and not editor.button.disabled


def test_the_progress_board_shows_the_levels() -> None:
    from grader.course.ladder import load_levels
    from grader.course.progress import record_level

    record_level(load_levels()[0].item_id, captured=True, hint_shown=False)
    board = widgets.ProgressBoard()
    text = board.html.value
    assert "Capture the flag" in text and f'data-item="{load_levels()[0].item_id}" data-done="true"' in text
    assert f'data-item="{load_levels()[1].item_id}" data-done="false"' in text

def test_the_agent_stage_runs_at_once_and_again_with_the_learner_s_policy() -> None:
    stage = widgets.AgentStage(NAIVE, backend=StaticBackend(), editable=True, goal=True)
    assert stage.last_run is not None and stage.last_run.leaked and not stage.last_run.job_done
    assert 'data-leaked="true"' in stage.view.value and 'data-met="false"' in stage.view.value
    assert stage.text is not None
    stage.text.value = json.dumps({"filesystem": {"denyRead": ["/home/user"], "allowWrite": ["/project/out"]},
                                   "network": {"allowedDomains": []}})
    run = stage.button.click() or stage.last_run
    assert run is not None and run.leaked is False and run.job_done
    assert 'data-met="true"' in stage.view.value and "sl-agent-stage" in stage._repr_mimebundle_()["text/html"]


def test_the_agent_stage_shows_policy_errors_and_machinery_failures_not_tracebacks() -> None:
    stage = widgets.AgentStage(NAIVE, backend=StaticBackend(), editable=True)
    assert stage.text is not None
    stage.text.value = '{"filesystem": {"allowWrites": []}}'
    assert stage.run() is None and "/filesystem/allowWrites" in stage.view.value

    class Broken:
        name = "docker"

        def execute(self, plan: object, job: object) -> object:
            raise BackendError("the engine went away")

    plain = widgets.AgentStage(None, prompt="be careful", backend=Broken())
    assert plain.last_run is None and "the engine went away" in plain.view.value
    assert "plain container" in plain._repr_mimebundle_()["text/html"]
    with pytest.raises(ValueError, match="editable"):
        widgets.AgentStage(None, editable=True, backend=StaticBackend())


def test_a_choice_question_is_shown_with_the_script_that_groups_its_radios(monkeypatch: pytest.MonkeyPatch) -> None:
    """ipywidgets' radios are unnamed (a Tab stop each, no arrow keys): a choice Quiz is displayed after
    ``RADIO_GROUP_JS``, which groups them in the page (checked in Chromium by tests/browser/test_learner_lab.py);
    a recall question has no radios and no script."""
    from grader.notebook import quiz_widgets

    shown: list[object] = []
    monkeypatch.setattr(quiz_widgets, "display", lambda obj, **kw: shown.append(obj))
    choice = widgets.Quiz("check-standard-docker", record_progress=False)
    choice._ipython_display_()
    assert len(shown) == 2 and shown[0].data == quiz_widgets.RADIO_GROUP_JS  # type: ignore[attr-defined]
    assert "application/vnd.jupyter.widget-view+json" in shown[1]  # type: ignore[operator]
    for must in ("role', 'radiogroup'", "aria-labelledby", "r.name = box.dataset.slGroup", "data-lm-suppress-shortcuts", ".sl-quiz"):
        assert must in quiz_widgets.RADIO_GROUP_JS, must
    shown.clear()
    widgets.Quiz("recall-two-axes", record_progress=False)._ipython_display_()
    assert len(shown) == 1 and "application/vnd.jupyter.widget-view+json" in shown[0]  # type: ignore[operator]
