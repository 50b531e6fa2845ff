"""One wording per backend and one tone per outcome, used by every renderer (text report, board, lessons, grades)."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader import load_policy, predict
from grader.backends.static import StaticBackend
from grader.notebook.board import board_html, describe_backend
from grader.core.outcomes import Outcome, ProbeOutcome
from grader.core.probes import ProbeKind
from grader.grading.report import render_text
from grader.grading.grade import grade
from grader.grading.tasks import load_task
from grader.core.wording import backend_phrase, printable, tone

NAIVE = load_policy(Path(__file__).parents[3] / "examples" / "naive.json")
FALLBACK = "predicted, not run: no Docker engine answers (test)"


def test_each_backend_has_its_own_phrase() -> None:
    phrases = {b: backend_phrase(b) for b in ("static", "docker", "srt")}
    assert len(set(phrases.values())) == 3
    assert phrases["static"].startswith("predicted: ") and "nothing was run" in phrases["static"]
    assert phrases["docker"].startswith("ran in Docker: ")
    assert "predicted" not in phrases["docker"] and "predicted" not in phrases["srt"]  # a real run never says it
    assert backend_phrase("other") == "ran with the other backend"


def test_a_static_stand_in_for_docker_says_why_and_a_real_run_names_itself() -> None:
    assert backend_phrase("static", ["no-engine"]).startswith("predicted: no Docker engine answers, so ")
    assert backend_phrase("static", ["run-service"]).startswith("predicted: the run service could not run this, so ")
    assert backend_phrase("static", ()) == backend_phrase("static")
    assert backend_phrase("docker", ["no-engine"]) == backend_phrase("docker"), "a real run never says predicted"
    assert backend_phrase("docker", run_id="sl-1", seconds=1.25).endswith(" (run sl-1 in 1.2 s)")


def test_every_renderer_says_it_the_same_way() -> None:
    result = predict(NAIVE, notes=(FALLBACK,), codes=("no-engine",))
    phrase = backend_phrase("static", result.codes)
    assert phrase.startswith("predicted: no Docker engine answers")
    assert phrase in render_text(result)
    assert phrase in board_html(result)
    assert phrase in describe_backend(StaticBackend(notice=FALLBACK, cause="no-engine"))
    task = load_task("fix-the-naive-setup")
    assert f"({backend_phrase('static')})" in grade(task, NAIVE, StaticBackend()).feedback().splitlines()[0]


def test_the_stand_in_wording_follows_the_notes_cause_code_never_its_words() -> None:
    reworded = predict(NAIVE, notes=("predicted, not run: the engine did not pick up (test)",), codes=("no-engine",))
    assert render_text(reworded).splitlines()[1].startswith("predicted: no Docker engine answers, so ")
    uncoded = predict(NAIVE, notes=(FALLBACK, "predicted, not run: the run service at https://svc could not run it"))
    assert render_text(uncoded).splitlines()[1] == backend_phrase("static"), "words that only say so decide nothing"
    assert f"note: {FALLBACK}" in render_text(uncoded)  # the prose is still shown, for people


def test_a_result_whose_note_code_is_not_one_is_refused_on_the_wire() -> None:
    from grader.core.transport import TransportError, result_from_json, result_to_json
    from grader.core.world import load_world

    result = predict(NAIVE, notes=(FALLBACK,), codes=("no-engine",))
    data = result_to_json(result)
    assert data["codes"] == ["no-engine"] and result_from_json(data, load_world()).codes == ("no-engine",)
    with pytest.raises(TransportError, match="codes"):
        result_from_json({**data, "codes": ["no docker engine"]}, load_world())
    with pytest.raises(TransportError, match="codes"):
        result_from_json({k: v for k, v in data.items() if k != "codes"}, load_world())


@pytest.mark.parametrize(
    ("kind", "outcome", "expected"),
    [
        ("attack", "succeeded", "bad"),
        ("attack", "blocked", "plain"),
        ("attack", "error", "warn"),
        ("job", "succeeded", "good"),
        ("job", "blocked", "warn"),
        ("job", "error", "warn"),
    ],
)
def test_tone(kind: ProbeKind, outcome: Outcome, expected: str) -> None:
    assert tone(ProbeOutcome("p", kind, outcome, "")) == expected


def test_printable_shows_control_characters_and_keeps_text() -> None:
    assert printable("a\x1b[2Jb\x07\r\n\tc é") == "a\\x1b[2Jb\\x07\\x0d\n\tc é"
