"""Grades to the LMS: Canvas's gradebook import CSV and Gradescope's results.json, checked against sample files of
those formats (tests/fixtures/lms/README.md says where each format is documented)."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from grader.backends.static import StaticBackend
from grader.cli import main as cli
from grader.grading.batch import grade_batch
from grader.grading.lms import CANVAS_COLUMNS, CanvasRow, canvas_csv, gradescope_results, one_results
from grader.grading.tasks import load_task

REPO = Path(__file__).parents[3]
SAMPLES = REPO / "tests" / "fixtures" / "lms"
TASK = "scope-secure-sandbox"
SOLUTION = REPO / "solutions" / "scope-secure-sandbox.json"
NAIVE = REPO / "examples" / "naive.json"


def _table(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


def test_canvas_csv_has_the_sample_files_shape() -> None:
    sample = _table((SAMPLES / "canvas_gradebook_import.csv").read_text())
    ours = _table(canvas_csv([("Lab 1 (4242)", 10), ("Quiz 2", 5)], [
        CanvasRow("Doe, Jane", "jdoe01", (9.5, 5), canvas_id="101", sis_login_id="jdoe", section="Section A"),
        CanvasRow("Roe, Richard", "rroe02", (0, None), canvas_id="102", sis_login_id="rroe", section="Section A"),
    ]))
    assert ours == sample
    assert tuple(sample[0][:5]) == CANVAS_COLUMNS and sample[1][0] == "Points Possible"


def test_canvas_csv_quotes_names_with_commas_and_refuses_a_short_row() -> None:
    text = canvas_csv([("A", 1)], [CanvasRow('O"Brien, Pat', "p1", (1,))])
    assert _table(text)[2][0] == 'O"Brien, Pat'
    with pytest.raises(ValueError, match="1 assignment"):
        canvas_csv([("A", 1)], [CanvasRow("x", "x", (1, 2))])


def _keys_and_types(d: dict[str, object]) -> dict[str, type]:
    return {k: type(v) for k, v in d.items()}


def test_gradescope_results_use_only_the_spec_fields_with_their_types(tmp_path: Path) -> None:
    sample = json.loads((SAMPLES / "gradescope_results.json").read_text())
    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copy(NAIVE, subs / "ana.json")
    book = grade_batch(load_task(TASK), subs, StaticBackend())
    results = one_results(book)
    spec_top, spec_test = _keys_and_types(sample), _keys_and_types(sample["tests"][0])
    assert set(results) <= set(spec_top)
    for key, value in results.items():
        assert isinstance(value, (int, float) if spec_top[key] is float else spec_top[key]), key
    row = book.rows[0]
    assert len(results["tests"]) == len(row.checks) > 1, "a test per rubric check"
    for test in results["tests"]:
        assert set(test) <= set(spec_test) and test["status"] in ("passed", "failed")
        assert test["visibility"] in ("hidden", "after_due_date", "after_published", "visible")
        assert 0 <= test["score"] <= test["max_score"]
    assert results["score"] == row.score == sum(t["score"] for t in results["tests"])
    failed = [t for t in results["tests"] if t["status"] == "failed"]
    assert failed and all(t["output"] for t in failed), "the reason a check failed reaches the student"


def test_a_row_that_could_not_be_graded_scores_zero_and_says_so() -> None:
    from grader.grading.batch import Row

    row = Row("s", 7, 10, "error", "not graded: the run's evidence is incomplete", checks=(
        {"id": "c1", "points": 7, "max_points": 10, "passed": True, "message": "ok"},))
    results = gradescope_results(row)
    assert results["score"] == 0 and results["extra_data"]["status"] == "error"
    assert "not graded" in results["output"]


def test_grade_batch_gradescope_writes_results_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copy(SOLUTION, subs / "ana.json")
    target = tmp_path / "results" / "results.json"
    code = cli.main(["grade-batch", "--task", TASK, str(subs), "--out", str(tmp_path / "out"), "--backend", "static",
                     "--gradescope", str(target)])
    out, err = capsys.readouterr()
    assert code == cli.EXIT_OK and "Traceback" not in out + err
    results = json.loads(target.read_text())
    assert results["score"] == load_task(TASK).max_score and all(t["status"] == "passed" for t in results["tests"])


def test_grade_batch_gradescope_refuses_a_class(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    subs = tmp_path / "subs"
    subs.mkdir()
    shutil.copy(SOLUTION, subs / "ana.json")
    shutil.copy(NAIVE, subs / "bo.json")
    target = tmp_path / "results.json"
    code = cli.main(["grade-batch", "--task", TASK, str(subs), "--out", str(tmp_path / "out"), "--backend", "static",
                     "--gradescope", str(target)])
    out, err = capsys.readouterr()
    assert code == 2 and "one submission" in err and "Traceback" not in out + err
    assert not target.exists()
