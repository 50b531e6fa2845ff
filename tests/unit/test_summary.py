"""Progress that means done, and the course summary a learner keeps.

The walk: every item the course has, read from its own sources (the lessons' ``finish_lesson`` calls, the
question bank, the task files, the level files; no count typed here), recorded one at a time through
progress's API as a learner would; the board says 100% after the last one, and never before.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from grader.ctf.ladder import load_levels
from grader.grading.tasks import all_tasks
from grader.lessons.progress import Progress, load_progress, mark_done, record_attempt, record_level
from grader.lessons.progress_views import progress_html
from grader.lessons.quiz import load_questions
from grader.lessons.summary import best_policies, course_items, summary_html, summary_path, write_summary
from reference import solution_path

REPO = Path(__file__).resolve().parents[2]
HOSTILE = '<script>alert(1)</script>"\x1b[31m'


@pytest.fixture(autouse=True)
def _progress_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "progress.json"
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(path))
    return path


def _source_items() -> dict[str, list[str]]:
    """Every item id of the course, from the files that define them."""
    lessons = []
    for md in sorted(REPO.glob("lessons/0*/*.md")):
        lessons += re.findall(r'finish_lesson\("([^"]+)"\)', md.read_text(encoding="utf-8"))
    bank = json.loads((REPO / "grader" / "questions.json").read_text(encoding="utf-8"))
    tasks = [json.loads(p.read_text(encoding="utf-8"))["id"] for p in sorted((REPO / "grader" / "tasks").glob("*.json"))]
    levels = []
    for p in sorted((REPO / "grader" / "levels").glob("*.json")):
        d = json.loads(p.read_text(encoding="utf-8"))
        levels.append(f"ctf:l{d['number']:02d}-{d['id']}")
    hatches = sorted({f"hatch:{e}" for md in REPO.glob("lessons/0*/*.md")
                      for e in re.findall(r'check_hole\("([^"]+)"', md.read_text(encoding="utf-8"))})
    return {"lesson": lessons, "question": [f"quiz:{q['id']}" for q in bank["questions"]],
            "task": [f"task:{t}" for t in tasks], "level": levels, "hatch": hatches}


def _board() -> str:
    return progress_html(load_progress(), questions=load_questions(), tasks=course_items().task_rows(), levels=load_levels(),
                         hatches=course_items().hatches)


def _figures(html: str) -> tuple[int, int, int]:
    m = re.search(r'data-solved="(\d+)" data-done="(\d+)" data-total="(\d+)" data-percent="(\d+)"', html)
    assert m, html[:300]
    return int(m.group(2)), int(m.group(3)), int(m.group(4))


def test_the_board_counts_every_item_of_the_course_and_nothing_else() -> None:
    items = _source_items()
    assert all(items.values()), items  # each kind found in its sources
    every = [i for ids in items.values() for i in ids]
    assert len(every) == len(set(every))
    assert sorted(course_items().item_ids()) == sorted(every)
    _, total, _ = _figures(_board())
    assert total == len(every)
    assert set(re.findall(r'data-item="([^"]+)"', _board())) == set(every)


def test_walking_every_item_reaches_100_percent_only_at_the_end() -> None:
    items = _source_items()
    uncapturable = {lv.item_id: lv.uncapturable.after for lv in load_levels() if lv.uncapturable is not None}
    steps = [(kind, i) for kind, ids in items.items() for i in ids]
    for n, (kind, item) in enumerate(steps, start=1):
        if kind in ("lesson", "task"):
            mark_done(item)
        elif kind in ("question", "hatch"):
            record_attempt(item, "right", 1.0)
        elif item in uncapturable:  # nothing to capture: done once tried enough to be told why
            for _ in range(uncapturable[item]):
                record_level(item, captured=False, hint_shown=True)
        else:
            record_level(item, captured=True, hint_shown=False)
        board = _board()
        done, total, percent = _figures(board)
        assert done == n, (item, done, n)
        if n < len(steps):
            assert percent < 100 and "Course complete" not in board, (item, percent)
    assert percent == 100 and done == total == len(steps) and "Course complete" in board
    assert 'data-solved="%d"' % total in board


def test_a_wrong_first_answer_is_done_but_not_solved() -> None:
    q = load_questions()[0]
    record_attempt(f"quiz:{q.id}", "wrong", 0.0)
    board = progress_html(load_progress(), questions=[q])
    assert 'data-solved="0" data-done="1" data-total="9"' in board  # 8 lessons + this question
    assert f'data-item="quiz:{q.id}" data-done="false" data-finished="true"' in board


def test_a_level_tried_but_not_captured_and_a_task_not_recorded_are_not_done() -> None:
    lv = load_levels()[0]
    record_level(lv.item_id, captured=False, hint_shown=True)
    record_level(lv.item_id, captured=False, hint_shown=True)
    mark_done("task:not-a-task")  # a record the catalogue does not know counts nothing
    board = progress_html(load_progress(), tasks=[("task:scope-secure-sandbox", "Scope")], levels=[lv])
    done, total, _ = _figures(board)
    assert (done, total) == (0, 10) and "Other: 1" in board


def test_goals_and_other_records_never_make_up_for_an_item() -> None:
    for lesson_id in _source_items()["lesson"][:-1]:
        mark_done(lesson_id)
    for g in ("goal:l02-npm-build", "goal:l03-safe-container", "extra-1", "extra-2"):
        mark_done(g)
    done, total, percent = _figures(progress_html(load_progress()))
    assert done == total - 1 and percent < 100


# --- the summary ----------------------------------------------------------------------------------


def _lab_with(tmp_path: Path, task_id: str, text: str, name: str = "lab") -> Path:
    task = next(t for t in all_tasks() if t.id == task_id)
    folder = tmp_path / name / f"{task.order:02d}-task-{task.id}"
    folder.mkdir(parents=True)
    (folder / "my_policy.json").write_text(text, encoding="utf-8")
    return tmp_path / name


def test_the_summary_shows_captures_best_policies_and_scores(tmp_path: Path) -> None:
    mark_done("l01-why-sandbox", now=1_700_000_000.0)
    record_attempt("quiz:recall-two-axes", "partly", 0.5, now=1_700_000_100.0)
    record_level("ctf:l01-plain-container", captured=True, hint_shown=False, now=1_700_000_200.0)
    lab = _lab_with(tmp_path, "scope-secure-sandbox", "{}")  # today's lab: an empty policy
    earlier = _lab_with(tmp_path, "scope-secure-sandbox", solution_path("scope-secure-sandbox").read_text(), "lab.20260101-120000")
    items = course_items()
    policies = best_policies(items.tasks, [lab])
    best = policies["scope-secure-sandbox"]
    assert best.path.parent.parent == earlier and best.grade.full_marks  # the best of both, not the newest
    out = summary_html(load_progress(), items, policies, now=1_700_000_300.0)
    assert "Flags captured: 1 of" in out and "Level 1: " in out
    assert f'data-task="scope-secure-sandbox" data-score="{best.grade.max_score}" data-max="{best.grade.max_score}"' in out
    assert "first attempt: partly" in out and 'data-item="l01-why-sandbox" data-done="true"' in out
    done, total, percent = _figures_summary(out)
    assert (done, percent) == (3, 100 * 3 // total)


def _figures_summary(html: str) -> tuple[int, int, int]:
    m = re.search(r'data-done="(\d+)" data-solved="\d+" data-total="(\d+)" data-percent="(\d+)"', html)
    assert m
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def test_the_summary_is_self_contained_and_escapes_what_the_learner_wrote(tmp_path: Path) -> None:
    lab = _lab_with(tmp_path, "pip-install-only", HOSTILE)
    record_attempt("quiz:recall-two-axes", HOSTILE, 0.0)
    items = course_items()
    policies = best_policies(items.tasks, [lab])
    assert policies["pip-install-only"].grade.score == 0 and not policies["pip-install-only"].grade.valid
    out = summary_html(load_progress(), items, policies)
    assert "<script" not in out.lower() and "\x1b" not in out and "&lt;script&gt;" in out
    # nothing loaded from elsewhere: no script, link, image, frame or remote URL
    assert not re.search(r"<(script|link|img|iframe|object|embed)\b|\bsrc=|https?://|@import|url\(", out, re.I)


def test_write_summary_writes_beside_the_progress_record(tmp_path: Path, _progress_file: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    lab = _lab_with(tmp_path, "stop-persistence", solution_path("stop-persistence").read_text())
    monkeypatch.chdir(lab / "13-task-stop-persistence")  # as a notebook runs: the lab's folders are beside its own
    mark_done("l00-start-here")
    out = write_summary()
    assert out == summary_path() == _progress_file.parent / "sandbox-lab-summary.html"
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and 'data-task="stop-persistence"' in text
    other = write_summary(tmp_path / "mine.html", labs=[tmp_path / "nowhere"])
    assert "No <code>my_policy.json</code> found" in other.read_text(encoding="utf-8")


def test_an_unreadable_progress_record_is_no_summary(_progress_file: Path) -> None:
    from grader.lessons.progress import ProgressError

    _progress_file.write_text("{broken")
    with pytest.raises(ProgressError):
        write_summary()
    assert not summary_path().exists()


def test_an_empty_progress_is_0_percent() -> None:
    done, total, percent = _figures(progress_html(Progress(Path("/x"), {})))
    assert (done, percent) == (0, 0) and total == len(_source_items()["lesson"])
