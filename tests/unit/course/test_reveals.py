"""ctf/reveals.py: a level's solution is shown only when the learner asks, and the asking is recorded for the board.

Also the views of a solution: asked for before a capture, or shown after one (how the level falls, the intended
channel and the others that would have worked), and the widget's button and ``%%attack N --solution``, which run
nothing and spend no attempt.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import fakewire
from grader.core.errors import LevelError
from grader.core.evidence import Evidence
from grader.core.execution import Execution
from grader.core.world import load_world
from grader.notebook import ladder_views as views
from grader.course.ladder import judge, level, load_levels
from grader.course.reveals import FILE_NAME, SolutionShown, record_solution_shown, reveal, reveals_path, solution_shown, solutions_shown
from grader.notebook.palette import h
from grader.course.progress import load_progress

FLAG = "FLAG{00c0ffee1234abcd5678ef90}"


@pytest.fixture(autouse=True)
def _progress_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(tmp_path / "progress.json"))


def _ex(*http: Any) -> Execution:
    ev = Evidence(token="t", canaries={}, records=(), before={}, after={}, network="proxy", http=http)
    return Execution(backend="docker", output="", exit_code=0, timed_out=False, evidence=ev)


def test_asking_records_the_first_time_beside_the_progress_file(tmp_path: Path) -> None:
    lv = level("secure-npm")
    assert reveals_path() == tmp_path / FILE_NAME and solutions_shown() == {} and not solution_shown(lv.item_id)
    assert reveal(lv) == lv.solution
    first = solutions_shown()[lv.item_id]
    assert record_solution_shown(lv.item_id, now=first + 100) == SolutionShown(lv.item_id, first)  # the first time is kept
    assert solution_shown(lv.item_id) and json.loads((tmp_path / FILE_NAME).read_text())["version"] == 1
    assert load_progress().levels == {}, "asking spends no attempt"
    reveal(level("naive-gist"), record=False)
    assert set(solutions_shown()) == {lv.item_id}


def test_a_broken_record_is_an_error_naming_the_file_never_nothing_shown(tmp_path: Path) -> None:
    bad = tmp_path / FILE_NAME
    for text in ("{", '{"version": 2, "shown": {}}', '{"shown": {"ctf:l03-secure-npm": "yesterday"}, "version": 1}', "[]"):
        bad.write_text(text)
        with pytest.raises(LevelError, match=FILE_NAME):
            solutions_shown()
    with pytest.raises(ValueError, match="not a level's progress id"):
        record_solution_shown("lesson:07", path=tmp_path / "other.json")


def test_the_uncapturable_level_has_no_solution_to_show() -> None:
    scoped = next(lv for lv in load_levels() if lv.uncapturable is not None)
    with pytest.raises(LevelError, match="no solution to show"):
        reveal(scoped)
    assert solutions_shown() == {}


def test_every_capturable_level_has_a_worked_solution_its_hints_never_give() -> None:
    for lv in load_levels():
        if lv.uncapturable is not None:
            assert lv.solution is None
            continue
        assert lv.solution is not None and lv.solution.answer and lv.solution.channel, lv.id
        for h in lv.hints:
            assert lv.solution.answer not in h and h not in lv.solution.answer, lv.id


def test_a_capture_closes_with_the_worked_solution_and_a_miss_says_how_to_ask() -> None:
    lv = level("naive-gist")
    assert lv.solution is not None and lv.solution.also
    world = load_world()
    got = judge(lv, _ex(fakewire.http(host="gist.github.com", method="POST", path="/", body=FLAG)), FLAG, world=world)
    page = views.attack_html(got)
    assert 'class="sl-solution" data-asked="false"' in page and "How this level falls" in page
    assert all(h(a) in page for a in lv.solution.also) and h(lv.solution.channel) in page
    text = views.render_attack(got)
    assert "How this level falls:" in text and "Other ways that would have worked here:" in text
    miss = judge(lv, _ex(fakewire.http(host="gist.github.com", method="POST", path="/", body="hi")), FLAG, world=world)
    page = views.attack_html(miss)
    assert "sl-solution" not in page and "%%attack 2 --solution" in page and h(lv.solution.answer) not in page
    assert '<li data-kind="upload-without-flag">' in page


def test_a_level_with_no_other_way_says_so() -> None:
    lv = level("secure-npm")
    assert lv.solution is not None and lv.solution.also == ()
    assert "No other channel captures this level" in views.solution_html(lv.solution)
    assert "none: the intended channel is the only way out." in views.render_solution(lv.solution)


def test_the_editors_button_and_the_magics_option_show_it_run_nothing_and_record_the_asking() -> None:
    pytest.importorskip("ipywidgets", reason="ipywidgets is in the 'lab' extra")
    from grader.notebook.magic import AttackCell, attack_cell, parse_line
    from grader.notebook.ladder_widgets import AttackEditor

    class _NoEngine:
        name = "docker"

        def execute(self, plan: Any, job: Any) -> Any:
            raise AssertionError("asking for the solution runs nothing")

    assert parse_line("3 --solution") == AttackCell("3", None, True)
    view = attack_cell("3 --solution", "print('my attack')\n", backend=_NoEngine())  # type: ignore[arg-type]
    lv = level(3)
    assert lv.solution is not None and view.result is None and 'data-asked="true"' in view.view.value
    assert h(lv.solution.answer) in view.view.value and solution_shown(lv.item_id)
    editor = AttackEditor(6, backend=_NoEngine())  # type: ignore[arg-type]
    assert "sl-solution-button" in editor.solution_button._dom_classes
    assert editor.solution_button.layout.width == "auto"  # its whole label shows (a fixed width cut it off)
    editor.solution_button.click()
    assert "The solution you asked for" in editor.view.value and solution_shown(level(6).item_id)
    assert load_progress().levels == {} and editor.attempts == 0
    scoped = next(lv for lv in load_levels() if lv.uncapturable is not None)
    assert AttackEditor(scoped.number, backend=_NoEngine()).solution_button.layout.display == "none"  # type: ignore[arg-type]
    quiet = AttackEditor(2, backend=_NoEngine(), record_progress=False)  # type: ignore[arg-type]
    quiet.show_solution()
    assert not solution_shown(level(2).item_id)
