"""The lessons' front-end: pure board rendering (escaping, data attributes, exfil picture), the policy editor, quiz and progress."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from grader import load_policy, predict
from grader.backends import StaticBackend
from grader.board import board_html, comparison_html, exfil_svg, paths_for, problems_html, question_html
from grader.errors import Problem
from grader.outcomes import ProbeOutcome, RunResult
from grader.probes import PROBES
from grader.progress import ProgressError, load_progress, mark_done, progress_path, reset_progress
from grader.quiz import UnknownQuestion, check_answer, load_questions, question

NAIVE = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}
PRACTICE = {"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}}
HOSTILE = '<script>alert("x")</script>&'


@pytest.fixture(autouse=True)
def _progress_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "progress.json"
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(path))
    return path


# --- board rendering ------------------------------------------------------------------------


def test_board_rows_carry_probe_and_outcome_attributes_attacks_first() -> None:
    result = predict(load_policy(NAIVE))
    out = board_html(result)
    rows = re.findall(r'<tr class="sl-row sl-(attack|job)[^"]*" data-probe="([^"]+)" data-outcome="([^"]+)"', out)
    assert [pid for _, pid, _ in rows] == [p.id for p in sorted(PROBES, key=lambda p: p.kind != "attack")]
    assert ("attack", "exfil-secret", "succeeded") in rows
    assert ("job", "job-write-out", "blocked") in rows
    kinds = [k for k, _, _ in rows]
    assert kinds == sorted(kinds)  # "attack" < "job": all attacks come first


def test_board_colours_succeeded_attacks_red_and_working_jobs_green() -> None:
    out = board_html(predict(load_policy(NAIVE)))
    assert re.search(r'data-probe="write-shell-rc" data-outcome="succeeded"[^>]*style="background:#fee4e2"', out)
    assert re.search(r'data-probe="job-read-src" data-outcome="succeeded"[^>]*style="background:#dcfae6"', out)


def test_board_escapes_hostile_evidence_explanations_and_notes() -> None:
    outcome = ProbeOutcome("read-ssh-key", "attack", "succeeded", f"read {HOSTILE}", (f"canary at {HOSTILE}",))
    result = RunResult("docker", "policy", None, (outcome,), notes=(HOSTILE,), run_id=HOSTILE)
    out = board_html(result)
    assert "<script>" not in out
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;" in out


def test_hostile_policy_paths_are_escaped_in_the_board_and_the_picture() -> None:
    policy = load_policy({"filesystem": {"allowWrite": ["/project/out/<img src=x onerror=alert(1)>"]},
                          "network": {"allowedDomains": ["gist.github.com"]}})
    out = board_html(predict(policy)) + comparison_html({HOSTILE: predict(policy)})
    assert "<img" not in out and "<script>" not in out


def test_problems_are_listed_with_their_pointer_and_escaped() -> None:
    out = problems_html([Problem("/network/allowedDomains/0", f"bad {HOSTILE}")], [Problem("/filesystem/allowWrite/0", "warn")])
    assert 'data-pointer="/network/allowedDomains/0"' in out
    assert "<code>/filesystem/allowWrite/0</code>" in out
    assert "<script>" not in out


def test_svg_draws_the_naive_policys_exfil_paths() -> None:
    result = predict(load_policy(NAIVE))
    paths = paths_for(result)
    svg = exfil_svg(paths)
    drawn = set(re.findall(r'<path class="sl-path" data-secret="([^"]+)" data-host="([^"]+)" data-channel="([^"]+)"', svg))
    assert ("/home/user/.ssh/id_rsa", "gist.github.com", "upload") in drawn
    assert ("/etc/secrets/db_password", "api.github.com", "upload") in drawn
    assert len(drawn) == len(paths) == 8
    assert svg.startswith("<svg") and svg.endswith("</svg>")


def test_svg_draws_no_path_for_the_practice_solution() -> None:
    result = predict(load_policy(PRACTICE))
    assert paths_for(result) == ()
    out = board_html(result)
    assert 'class="sl-path"' not in out
    assert "No exfiltration path" in out


def test_baseline_picture_includes_direct_and_dns_channels() -> None:
    svg = exfil_svg(paths_for(predict(None)))
    assert 'data-channel="direct"' in svg and 'data-channel="dns"' in svg


def test_comparison_marks_each_cell_and_reports_failed_runs() -> None:
    out = comparison_html({"naive": predict(load_policy(NAIVE)), "broken": "BackendError: <boom>"})
    assert 'data-sandbox="naive" data-probe="exfil-secret" data-outcome="succeeded"' in out
    assert "&lt;boom&gt;" in out


def test_question_html_hides_the_model_answer_in_closed_details() -> None:
    out = question_html(question("check-standard-docker"))
    assert "<details><summary>" in out and "bridge networking" in out


# --- widgets --------------------------------------------------------------------------------

widgets = pytest.importorskip("grader.widgets", reason="ipywidgets is in the 'lab' extra")


def test_policy_editor_lists_errors_with_pointers_and_disables_the_button() -> None:
    editor = widgets.PolicyEditor(NAIVE, backend=StaticBackend())
    assert editor.policy is not None and not editor.button.disabled
    assert "/network/allowedDomains/0" in editor.status.value  # the *.github.com lint warning
    editor.policy_text = json.dumps({"filesystem": {"allowWrites": ["/x"]}, "network": {"allowedDomains": ["*"]}})
    assert editor.policy is None and editor.button.disabled
    pointers = [p.pointer for p in editor.errors]
    assert pointers == ["/filesystem/allowWrites", "/network/allowedDomains/0"]
    assert 'data-pointer="/filesystem/allowWrites"' in editor.status.value
    assert "allowWrite" in editor.status.value  # the did-you-mean
    assert editor.probe() is None


def test_policy_editor_never_reads_a_file_named_in_the_text(tmp_path: Path) -> None:
    f = tmp_path / "p.json"
    f.write_text(json.dumps(PRACTICE))
    editor = widgets.PolicyEditor(str(f), backend=StaticBackend())
    assert editor.policy is None and editor.errors


def test_policy_editor_probe_fills_the_board_and_says_which_backend_ran() -> None:
    editor = widgets.PolicyEditor(NAIVE, backend=StaticBackend(notice="predicted, not run: no Docker engine answers (test)"))
    result = editor.probe()
    assert result is not None and result.outcome("exfil-secret").outcome == "succeeded"
    assert 'data-probe="exfil-secret" data-outcome="succeeded"' in editor.board.value
    assert "predicted: no Docker engine" in editor.backend_note.value
    assert "sl-probe-button" in editor.button._dom_classes and "sl-policy-text" in editor.text._dom_classes
    assert "sl-probe-board" in editor.board._dom_classes
    assert "text/html" in editor._repr_mimebundle_()


def test_side_by_side_runs_each_policy_including_the_baseline() -> None:
    view = widgets.side_by_side({"naive": NAIVE, "practice": PRACTICE, "baseline": None}, backend=StaticBackend())
    assert set(view.results) == {"naive", "practice", "baseline"}
    assert view.results["baseline"].sandbox == "baseline"
    assert 'data-sandbox="practice" data-probe="exfil-secret" data-outcome="blocked"' in view.value


def test_side_by_side_shows_an_invalid_policy_as_a_message() -> None:
    view = widgets.side_by_side({"bad": {"network": {"allowedDomains": ["*"]}}}, backend=StaticBackend())
    assert isinstance(view.results["bad"], str) and "/network/allowedDomains/0" in view.results["bad"]


def test_quiz_widget_reveals_feedback_and_records_progress() -> None:
    quiz = widgets.Quiz("check-standard-docker")
    assert quiz.feedback.value == ""
    correct, _ = quiz.check("b")
    assert correct and "bridge networking" in quiz.feedback.value
    assert load_progress().is_done("quiz:check-standard-docker")


def test_progress_board_lists_lessons_questions_and_tasks() -> None:
    mark_done("l02-naive-vs-secure")
    out = widgets.ProgressBoard().html.value
    assert 'data-item="l02-naive-vs-secure" data-done="true"' in out
    assert 'data-item="quiz:recall-two-axes" data-done="false"' in out


# --- quiz -----------------------------------------------------------------------------------


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


# --- progress -------------------------------------------------------------------------------


def test_progress_round_trip(_progress_file: Path) -> None:
    assert progress_path() == _progress_file
    assert load_progress().done == {}
    mark_done("l01-why-sandbox", now=100.0)
    mark_done("task:scope-secure-sandbox", now=200.0)
    mark_done("l01-why-sandbox", now=300.0)  # the first completion is kept
    again = load_progress()
    assert again.done == {"l01-why-sandbox": 100.0, "task:scope-secure-sandbox": 200.0}
    assert json.loads(_progress_file.read_text())["version"] == 1
    reset_progress()
    assert load_progress().done == {}


def test_corrupt_progress_file_is_reported_not_overwritten(_progress_file: Path) -> None:
    _progress_file.write_text("{not json")
    with pytest.raises(ProgressError, match="not valid JSON"):
        mark_done("l01-why-sandbox")
    assert _progress_file.read_text() == "{not json"


def test_mark_done_rejects_empty_ids() -> None:
    with pytest.raises(ValueError):
        mark_done("  ")
