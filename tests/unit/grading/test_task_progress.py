"""A task notebook's checks record the task as done on the progress board, and only a whole grade at full marks does.

What the learner's kernel runs (``grading.notebook``): ``assert_passed`` on every check of a grade at full
marks records ``task:<id>`` once; a failed check, an invalid policy, a grade that is missing a check, or a
progress file that cannot be written records nothing and never fails the check cell.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from grader.backends.static import StaticBackend
from grader.grading.grade import grade_file
from grader.grading.notebook import assert_passed
from grader.grading.tasks import load_task
from grader.course.progress import load_progress
from reference import solution_path

TASK = "scope-secure-sandbox"


@pytest.fixture(autouse=True)
def _progress_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "progress.json"
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(path))
    return path


def _grade(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "my_policy.json"
    path.write_text(text, encoding="utf-8")
    return grade_file(TASK, path, StaticBackend())


def test_full_marks_records_the_task_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    g = _grade(tmp_path, solution_path(TASK).read_text())
    assert g.full_marks
    for c in load_task(TASK).checks:
        assert_passed(g, c.id)
    out = capsys.readouterr().out
    assert out.count(f"Task {TASK} done") == 1  # said once, on the first check that finds the task complete
    assert load_progress().is_done(f"task:{TASK}")


def test_a_grade_short_of_full_marks_records_nothing(tmp_path: Path) -> None:
    g = _grade(tmp_path, json.dumps(load_task(TASK).starter or {"filesystem": {}, "network": {}}))
    assert not g.full_marks
    passed = [c for c in g.checks if c.passed]
    for c in passed:
        assert_passed(g, c.id)  # the checks that pass still pass
    failed = next(c for c in g.checks if not c.passed)
    with pytest.raises(AssertionError):
        assert_passed(g, failed.id)
    assert not load_progress().is_done(f"task:{TASK}")


def test_an_invalid_policy_records_nothing(tmp_path: Path) -> None:
    g = _grade(tmp_path, '{"filesystem": {"allowWrites": []}}')
    with pytest.raises(AssertionError):
        assert_passed(g, g.checks[0].id)
    assert load_progress().done == {}


def test_a_grade_missing_a_check_proves_nothing(tmp_path: Path) -> None:
    """Gaming it: a grade cut down to the checks that pass is 'full marks' of what is left; it records nothing."""
    g = _grade(tmp_path, solution_path(TASK).read_text())
    cut = dataclasses.replace(g, checks=g.checks[:1])
    assert cut.full_marks
    assert_passed(cut, cut.checks[0].id)
    assert not load_progress().is_done(f"task:{TASK}")


def test_an_unwritable_progress_file_is_said_and_the_check_still_passes(tmp_path: Path, _progress_file: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    _progress_file.write_text("{broken")
    g = _grade(tmp_path, solution_path(TASK).read_text())
    assert_passed(g, g.checks[0].id)  # no exception
    assert "progress not saved" in capsys.readouterr().out
    assert _progress_file.read_text() == "{broken"


# --- the capture-the-flag task: assert_captured counts a judged attack on its level -----------------


class _Engine:
    """Stands in for Docker: an attack containing SEND_FLAG "sends" its flag to the gist host; nothing else leaves."""

    name = "docker"

    def __init__(self, cut: bool = False) -> None:
        self.cut = cut

    def execute(self, plan, job):  # type: ignore[no-untyped-def]
        import fakewire
        from grader.core.evidence import Evidence
        from grader.core.execution import Execution

        flag = next(iter(job.plant.values())).strip()
        http = (fakewire.http(host="gist.github.com", method="POST", path="/", body=flag),) if "SEND_FLAG" in job.code else ()
        ev = Evidence(token="t", canaries={}, records=(), before={}, after={}, network=plan.network, http=http,
                      infra_problem="the run's evidence cannot be read whole (cut off)" if self.cut else "")
        return Execution(backend="docker", output="", exit_code=0, timed_out=False, evidence=ev)

    def close(self) -> None:
        pass


def test_assert_captured_counts_judged_attacks_on_the_level() -> None:
    from grader.course.ladder import level
    from grader.grading.notebook import assert_captured

    lv = level(2)
    with pytest.raises(AssertionError, match="not captured"):
        assert_captured(2, "print('hi')", _Engine())
    assert_captured(2, "# SEND_FLAG", _Engine())
    rec = load_progress().level(lv.item_id)
    assert (rec.attempts, rec.hints, rec.captured is not None) == (2, 1, True)


def test_assert_captured_on_a_run_that_could_not_be_judged_records_nothing() -> None:
    from grader.grading.notebook import assert_captured

    assert_captured(2, "print(1)", _Engine(cut=True))  # no sighting, and the log was cut: no verdict
    assert load_progress().levels == {}
