"""The learner's progress file: round trip, first completion and first attempt kept, corrupt files reported and left alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.course.progress import (
    Attempt,
    ProgressError,
    learner_seed,
    load_progress,
    mark_done,
    progress_path,
    record_attempt,
    reset_progress,
)


@pytest.fixture(autouse=True)
def _progress_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "progress.json"
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(path))
    return path


def test_progress_round_trip(_progress_file: Path) -> None:
    assert progress_path() == _progress_file
    assert load_progress().done == {}
    mark_done("l01-why-sandbox", now=100.0)
    mark_done("task:scope-secure-sandbox", now=200.0)
    mark_done("l01-why-sandbox", now=300.0)  # the first completion is kept
    again = load_progress()
    assert again.done == {"l01-why-sandbox": 100.0, "task:scope-secure-sandbox": 200.0}
    assert json.loads(_progress_file.read_text())["version"] == 2
    reset_progress()
    assert load_progress().done == {}


def test_only_the_first_attempt_is_recorded(_progress_file: Path) -> None:
    first, this_one = record_attempt("quiz:recall-two-axes", "wrong", 0.0, now=10.0)
    assert this_one and first == Attempt(10.0, "wrong", 0.0) and not first.solved
    again, this_one = record_attempt("quiz:recall-two-axes", "right", 1.0, now=20.0)
    assert not this_one and again == first  # answering again after the feedback earns nothing
    mark_done("l02-naive-vs-secure", now=30.0)  # other writes keep it
    loaded = load_progress()
    assert loaded.first_attempt("quiz:recall-two-axes") == first and loaded.is_done("l02-naive-vs-secure")
    assert json.loads(_progress_file.read_text())["first"] == {"quiz:recall-two-axes": {"at": 10.0, "result": "wrong", "score": 0.0}}


@pytest.mark.parametrize(("result", "score"), [("", 1.0), ("right", 1.5), ("right", -0.1), ("right", float("nan"))])
def test_an_attempt_needs_a_result_and_a_score_from_0_to_1(result: str, score: float) -> None:
    with pytest.raises(ValueError):
        record_attempt("quiz:x", result, score)


def test_a_version_1_file_reads_and_keeps_its_completions(_progress_file: Path) -> None:
    _progress_file.write_text(json.dumps({"version": 1, "done": {"l01-why-sandbox": 5.0}}))
    assert load_progress().first == {}
    record_attempt("quiz:recall-two-axes", "got it", 1.0, now=6.0)
    data = json.loads(_progress_file.read_text())
    assert data["done"] == {"l01-why-sandbox": 5.0} and data["version"] == 2


def test_the_learner_seed_is_made_once_and_kept(_progress_file: Path) -> None:
    seed = learner_seed()
    assert len(seed) == 16 and learner_seed() == seed
    mark_done("l01-why-sandbox")
    assert learner_seed() == seed and load_progress().learner == seed
    reset_progress()
    assert learner_seed() != seed  # a reset starts a new order (2**-64 chance of the same)


def test_a_progress_file_that_is_not_utf8_is_reported_not_a_traceback_nor_overwritten(_progress_file: Path) -> None:
    _progress_file.write_bytes(b'{"done": {"\xff": 1}}')
    with pytest.raises(ProgressError, match=r"not UTF-8 text \(byte 11\)\. Fix or delete the file\."):
        load_progress()  # a UnicodeDecodeError escaped before
    with pytest.raises(ProgressError, match="not UTF-8"):
        mark_done("l01-why-sandbox")
    assert _progress_file.read_bytes() == b'{"done": {"\xff": 1}}'


def test_corrupt_progress_file_is_reported_not_overwritten(_progress_file: Path) -> None:
    _progress_file.write_text("{not json")
    with pytest.raises(ProgressError, match="not valid JSON"):
        mark_done("l01-why-sandbox")
    with pytest.raises(ProgressError, match="not valid JSON"):
        record_attempt("quiz:recall-two-axes", "right", 1.0)
    with pytest.raises(ProgressError, match="not valid JSON"):
        learner_seed()
    assert _progress_file.read_text() == "{not json"


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"done": {}, "first": {"quiz:a": {"at": 1, "result": "right", "score": 2}}}, "first attempt at 'quiz:a'"),
        ({"done": {}, "first": {"quiz:a": {"at": 1, "score": 1}}}, "first attempt at 'quiz:a'"),
        ({"done": {}, "first": []}, "not a progress record"),
        ({"done": {}, "learner": 7}, "not a progress record"),
        ({"done": {"x": True}}, "not a progress record"),
    ],
)
def test_a_malformed_first_attempt_is_reported(_progress_file: Path, data: object, words: str) -> None:
    _progress_file.write_text(json.dumps(data))
    with pytest.raises(ProgressError, match=words):
        load_progress()


def test_mark_done_rejects_empty_ids() -> None:
    with pytest.raises(ValueError):
        mark_done("  ")
    with pytest.raises(ValueError):
        record_attempt(" ", "right", 1.0)


# --- capture-the-flag levels --------------------------------------------------------------------


def test_levels_count_attempts_and_hints_and_keep_the_first_capture(_progress_file: Path) -> None:
    from grader.course.progress import LevelRecord, record_level

    assert load_progress().level("ctf:l01-plain-container") == LevelRecord()
    record_level("ctf:l01-plain-container", captured=False, hint_shown=True, now=10.0)
    record_level("ctf:l01-plain-container", captured=True, hint_shown=False, now=20.0)
    rec = record_level("ctf:l01-plain-container", captured=True, hint_shown=False, now=30.0)
    assert rec == LevelRecord(attempts=3, hints=1, captured=20.0)
    mark_done("l00-start-here", now=5.0)  # other writes keep the levels
    record_attempt("quiz:x", "right", 1.0, now=6.0)
    learner_seed()
    again = load_progress()
    assert again.level("ctf:l01-plain-container") == rec and again.is_done("l00-start-here")
    assert json.loads(_progress_file.read_text())["levels"] == {"ctf:l01-plain-container": {"attempts": 3, "hints": 1, "captured": 20.0}}


def test_an_attack_that_could_not_be_judged_is_no_attempt(_progress_file: Path) -> None:
    from grader.course.progress import LevelRecord, record_level

    record_level("ctf:l01-plain-container", captured=False, hint_shown=True, now=10.0)
    for unjudged in (None, "false", 0):
        with pytest.raises(ValueError, match="could not be judged is no attempt"):
            record_level("ctf:l01-plain-container", captured=unjudged, hint_shown=False)  # type: ignore[arg-type]
    assert load_progress().level("ctf:l01-plain-container") == LevelRecord(attempts=1, hints=1, captured=None)


def test_a_broken_level_record_is_reported_not_overwritten(_progress_file: Path) -> None:
    _progress_file.write_text(json.dumps({"version": 2, "done": {}, "levels": {"ctf:l01": {"attempts": -1, "hints": 0, "captured": None}}}))
    with pytest.raises(ProgressError, match="the record of level 'ctf:l01'"):
        load_progress()
    assert "-1" in _progress_file.read_text()


# --- the file's schema: strict, every problem with its JSON path and what belongs there -----------------


@pytest.mark.parametrize(
    ("data", "pointer", "words"),
    [
        ({"version": 2, "done": {}, "levelz": {}}, "/levelz", 'Did you mean "levels"?'),  # a typo is not ignored
        ({"version": 2, "done": {}, "first": {"quiz:a": {"at": 1, "result": "right", "score": 1, "why": "x"}}},
         "/first/quiz:a/why", "unknown key"),
        ({"version": 2, "done": {"l01": "yesterday"}}, "/done/l01", "a UNIX time"),
        ({"version": 2, "done": {"l01": True}}, "/done/l01", "a UNIX time"),  # a boolean is no time
        ({"version": 2, "done": {}, "first": {"quiz:a": {"at": 1, "result": "right", "score": "1"}}},
         "/first/quiz:a/score", "first attempt at 'quiz:a'"),  # no "1" for 1: strict
        ({"version": 2, "done": {}, "levels": {"ctf:l01": {"attempts": 1.5, "hints": 0}}}, "/levels/ctf:l01/attempts", "record of level"),
        ({"version": 2, "done": {}, "levels": {"ctf:l01": {"attempts": 1, "hints": 0, "captured": "sometime-later"}}},
         "/levels/ctf:l01/captured", "record of level"),
        ({"version": 3, "done": {}}, "/version", "Expected 2"),
        ({"done": {}}, "/version", 'missing. Add "version"'),
    ],
)
def test_a_file_that_is_not_a_record_names_each_json_path_and_the_fix(_progress_file: Path, data: object, pointer: str,
                                                                        words: str) -> None:
    _progress_file.write_text(json.dumps(data))
    with pytest.raises(ProgressError) as info:
        load_progress()
    message = str(info.value)
    assert message.startswith(f"{_progress_file} is not a progress record (")
    line = next(ln for ln in message.splitlines() if ln.strip().startswith(pointer + ":"))
    assert words in line, message
    assert "Fix the file at these places, or delete it" in message
    assert "yesterday" not in message and "sometime-later" not in message  # paths, not the file's values
    assert json.loads(_progress_file.read_text()) == data  # left as it was


def test_every_problem_is_listed_at_once(_progress_file: Path) -> None:
    _progress_file.write_text(json.dumps({"version": 2, "done": {"a": "x", "b": "y"}, "learner": 7, "extra": 1}))
    with pytest.raises(ProgressError, match=r"\(4 problems\)") as info:
        load_progress()
    assert all(p in str(info.value) for p in ("/done/a:", "/done/b:", "/learner:", "/extra:"))


def test_non_finite_numbers_are_refused(_progress_file: Path) -> None:
    _progress_file.write_text('{"version": 2, "done": {"l01": NaN}, "first": {"q": {"at": 1, "result": "r", "score": Infinity}}}')
    with pytest.raises(ProgressError) as info:
        load_progress()
    assert "/done/l01:" in str(info.value) and "/first/q/score:" in str(info.value)


def test_a_full_version_2_file_round_trips_unchanged(_progress_file: Path) -> None:
    data = {"version": 2, "done": {"l01-why-sandbox": 5.0, "task:scope-secure-sandbox": 6},
            "first": {"quiz:a": {"at": 7, "result": "4/6 right", "score": 0.5}}, "learner": "abcd",
            "levels": {"ctf:l01": {"attempts": 2, "hints": 1, "captured": None}, "ctf:l02": {"attempts": 1, "hints": 0}}}
    _progress_file.write_text(json.dumps(data))
    p = load_progress()
    assert p.done == {"l01-why-sandbox": 5.0, "task:scope-secure-sandbox": 6.0} and p.learner == "abcd"
    assert p.level("ctf:l02").captured is None and p.first_attempt("quiz:a") == Attempt(7.0, "4/6 right", 0.5)
    mark_done("l02-naive-vs-secure", now=8.0)
    again = json.loads(_progress_file.read_text())
    assert again["first"] == {"quiz:a": {"at": 7.0, "result": "4/6 right", "score": 0.5}} and again["learner"] == "abcd"
    assert again["levels"]["ctf:l02"] == {"attempts": 1, "hints": 0, "captured": None}
