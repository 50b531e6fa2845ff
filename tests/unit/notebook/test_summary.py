"""Progress that means mastery, and the course summary a learner keeps.

The walk: every item the course counts, read from its own sources (the lessons' goals in their editor and agent
cells, the task files, the level files; no count typed here), recorded one at a time through progress's API as a
learner would; the board says 100% after the last one, and never before. Finishing every lesson and answering
every question right counts nothing towards it; a level whose solution was asked for counts, shown as such.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from grader.course.ladder import load_levels
from grader.grading.tasks import all_tasks
from grader.course.progress import Progress, load_progress, mark_done, record_attempt, record_level
from grader.course.goals import AGENT_GOAL, LESSON_GOALS
from grader.notebook.progress_views import level_row, progress_html
from grader.course.quiz import load_questions
from grader.notebook.summary import best_policies, course_items, summary_html, summary_path, write_summary
from reference import solution_path

REPO = Path(__file__).resolve().parents[3]
HOSTILE = '<script>alert(1)</script>"\x1b[31m'


@pytest.fixture(autouse=True)
def _progress_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "progress.json"
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(path))
    return path


def _source_items() -> dict[str, list[str]]:
    """Every item id of the course, from the files that define them."""
    lessons, goals = [], []
    for md in sorted(REPO.glob("lessons/0*/*.md")):
        text = md.read_text(encoding="utf-8")
        lessons += re.findall(r'finish_lesson\("([^"]+)"\)', text)
        goals += [f"goal:{g}" for g in re.findall(r'PolicyEditor\([^)]*goal="([^"]+)"', text)]
        if re.search(r"AgentStage\([^)]*goal=True", text):
            goals.append(f"goal:{AGENT_GOAL}")  # the agent stage's goal: the key stays and the job is done
    bank = json.loads((REPO / "grader" / "questions.json").read_text(encoding="utf-8"))
    tasks = [json.loads(p.read_text(encoding="utf-8"))["id"] for p in sorted((REPO / "grader" / "tasks").glob("*.json"))]
    levels = []
    for p in sorted((REPO / "grader" / "levels").glob("*.json")):
        d = json.loads(p.read_text(encoding="utf-8"))
        levels.append(f"ctf:l{d['number']:02d}-{d['id']}")
    hatches = sorted({f"hatch:{e}" for md in REPO.glob("lessons/0*/*.md")
                      for e in re.findall(r'check_hole\("([^"]+)"', md.read_text(encoding="utf-8"))})
    return {"goal": goals, "task": [f"task:{t}" for t in tasks], "level": levels,
            "lesson": lessons, "question": [f"quiz:{q['id']}" for q in bank["questions"]], "hatch": hatches}


COUNTED_KINDS = ("goal", "task", "level")


def _board(shown: frozenset[str] = frozenset()) -> str:
    return progress_html(load_progress(), questions=load_questions(), tasks=course_items().task_rows(), levels=load_levels(),
                         hatches=course_items().hatches, solutions_shown=shown)


def _figures(html: str) -> tuple[int, int, int]:
    m = re.search(r'data-solved="(\d+)" data-done="(\d+)" data-total="(\d+)" data-percent="(\d+)"', html)
    assert m, html[:300]
    return int(m.group(2)), int(m.group(3)), int(m.group(4))


def _solved(html: str) -> int:
    m = re.search(r'data-solved="(\d+)"', html)
    assert m
    return int(m.group(1))


def _do(kind: str, item: str, uncapturable: dict[str, int]) -> None:
    """Record ``item`` as a learner completes it."""
    if kind in ("lesson", "task", "goal"):
        mark_done(item)
    elif kind in ("question", "hatch"):
        record_attempt(item, "right", 1.0)
    elif item in uncapturable:  # nothing to capture: done once tried enough to be told why
        for _ in range(uncapturable[item]):
            record_level(item, captured=False, hint_shown=True)
    else:
        record_level(item, captured=True, hint_shown=False)


def _uncapturable() -> dict[str, int]:
    return {lv.item_id: lv.uncapturable.after for lv in load_levels() if lv.uncapturable is not None}


def test_the_board_counts_every_goal_task_and_level_and_shows_the_rest() -> None:
    items = _source_items()
    assert all(items.values()), items  # each kind found in its sources
    assert sorted(items["goal"]) == sorted(g.item_id for g in LESSON_GOALS)  # every lesson's goal, and no other
    every = [i for ids in items.values() for i in ids]
    assert len(every) == len(set(every))
    _, total, _ = _figures(_board())
    assert total == sum(len(items[k]) for k in COUNTED_KINDS)
    assert set(re.findall(r'data-item="([^"]+)"', _board())) == set(every)  # the rest shown, not counted


def test_walking_every_item_reaches_100_percent_only_at_the_end() -> None:
    items = _source_items()
    uncapturable = _uncapturable()
    for kind in ("lesson", "question", "hatch"):  # every lesson finished, every question right: no mastery yet
        for item in items[kind]:
            _do(kind, item, uncapturable)
    done, total, percent = _figures(_board())
    assert (done, percent) == (0, 0), (done, percent)
    steps = [(kind, i) for kind in COUNTED_KINDS for i in items[kind]]
    for n, (kind, item) in enumerate(steps, start=1):
        _do(kind, item, uncapturable)
        board = _board()
        done, total, percent = _figures(board)
        assert done == n, (item, done, n)
        if n < len(steps):
            assert percent < 100 and "Course complete" not in board, (item, percent)
    assert percent == 100 and done == total == len(steps) and "Course complete" in board
    assert _solved(board) == total and 'data-solutions-shown="0"' in board


def test_levels_by_their_solution_reach_100_percent_shown_as_such_and_never_as_solved() -> None:
    items = _source_items()
    uncapturable = _uncapturable()
    for kind in ("goal", "task"):
        for item in items[kind]:
            _do(kind, item, uncapturable)
    by_solution = frozenset(i for i in items["level"] if i not in uncapturable)
    for item in items["level"]:
        if item in uncapturable:
            _do("level", item, uncapturable)
    before = _figures(_board())
    assert before[0] == before[1] - len(by_solution) and before[2] < 100
    board = _board(by_solution)
    done, total, percent = _figures(board)
    assert percent == 100 and done == total and "Course complete" in board
    assert _solved(board) == total - len(by_solution)  # counted, but not as captured
    assert f'data-solutions-shown="{len(by_solution)}"' in board and f"{len(by_solution)} levels counted by their solution" in board
    assert board.count('data-solution-shown="true"') == len(by_solution) and board.count("solution shown, not captured") == len(by_solution)


def test_the_solution_hook_takes_a_set_of_level_ids() -> None:
    lv = next(lv for lv in load_levels() if lv.uncapturable is None)
    progress = load_progress()
    assert not level_row(progress, lv).done
    shown = level_row(progress, lv, {lv.item_id})
    assert shown.done and not shown.solved and shown.solution_shown and "solution shown" in shown.title
    assert not level_row(progress, lv, {"ctf:l99-another"}).done  # another level's solution counts nothing here
    record_level(lv.item_id, captured=True, hint_shown=False)
    captured = level_row(load_progress(), lv, {lv.item_id})  # captured after all: captured wins
    assert captured.solved and not captured.solution_shown and "captured" in captured.title


def test_goals_met_counts_each_lessons_goal() -> None:
    mark_done(f"goal:{AGENT_GOAL}")  # lesson 01's agent stage
    mark_done("goal:l02-npm-build")  # lesson 02's editor
    board = _board()
    assert f"Lesson goals (met in the lesson): 2 of {len(LESSON_GOALS)} met" in board
    assert _figures(board)[0] == 2
    assert f'data-item="goal:{AGENT_GOAL}" data-done="true"' in board and 'data-item="goal:l03-safe-container" data-done="false"' in board


def test_a_wrong_first_answer_counts_nothing_and_shows_as_wrong() -> None:
    q = load_questions()[0]
    record_attempt(f"quiz:{q.id}", "wrong", 0.0)
    board = progress_html(load_progress(), questions=[q])
    assert f'data-solved="0" data-done="0" data-total="{len(LESSON_GOALS)}"' in board
    assert f'data-item="quiz:{q.id}" data-done="false" data-finished="true"' in board
    assert "0 of 1 right, 1 answered" in board and "0 of 1 right at the first attempt" in board


def test_a_level_tried_but_not_captured_and_a_task_not_recorded_are_not_done() -> None:
    lv = load_levels()[0]
    record_level(lv.item_id, captured=False, hint_shown=True)
    record_level(lv.item_id, captured=False, hint_shown=True)
    mark_done("task:not-a-task")  # a record the catalogue does not know counts nothing
    board = progress_html(load_progress(), tasks=[("task:scope-secure-sandbox", "Scope")], levels=[lv])
    done, total, _ = _figures(board)
    assert (done, total) == (0, len(LESSON_GOALS) + 2) and "Other: 1" in board


def test_lessons_finished_and_other_records_never_make_up_for_a_goal() -> None:
    for lesson_id in _source_items()["lesson"]:
        mark_done(lesson_id)
    for g in LESSON_GOALS[:-1]:
        mark_done(g.item_id)
    for other in ("goal:not-a-goal", "extra-1", "extra-2"):
        mark_done(other)
    board = progress_html(load_progress())
    done, total, percent = _figures(board)
    assert done == total - 1 and percent < 100 and "Other: 3" in board
    assert f"Lessons finished (not in the percent: their goals are): {len(_source_items()['lesson'])} of" in board


def test_lesson_01s_agent_stage_records_its_goal_once_met() -> None:
    pytest.importorskip("ipywidgets", reason="ipywidgets is in the 'lab' extra")
    from grader.backends.static import StaticBackend
    from grader.notebook.agent_stage import AgentStage

    contained = {"filesystem": {"denyRead": ["/home/user", "/etc/secrets", "/app/workspace", "/project/.env"],
                                "allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}}
    naive = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}
    AgentStage(naive, backend=StaticBackend(), goal=True)  # the key leaves: not met, nothing recorded
    assert not load_progress().is_done(f"goal:{AGENT_GOAL}")
    AgentStage(contained, backend=StaticBackend())  # met, but this stage sets no goal
    assert not load_progress().is_done(f"goal:{AGENT_GOAL}")
    AgentStage(contained, backend=StaticBackend(), goal=True)
    assert load_progress().is_done(f"goal:{AGENT_GOAL}")


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
    assert (done, percent) == (1, 100 * 1 // total)  # the level; a lesson finished and a question answered count nothing


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
    from grader.course.progress import ProgressError

    _progress_file.write_text("{broken")
    with pytest.raises(ProgressError):
        write_summary()
    assert not summary_path().exists()


def test_an_empty_progress_is_0_percent() -> None:
    done, total, percent = _figures(progress_html(Progress(Path("/x"), {})))
    assert (done, percent) == (0, 0) and total == len(LESSON_GOALS)


def test_the_board_and_the_summary_read_the_solutions_the_ladder_recorded(tmp_path: Path) -> None:
    pytest.importorskip("ipywidgets", reason="ipywidgets is in the 'lab' extra")
    from grader.course.reveals import record_solution_shown
    from grader.notebook.widgets import ProgressBoard

    lv = next(lv for lv in load_levels() if lv.uncapturable is None)
    before = _figures(str(ProgressBoard().html.value))[0]
    record_solution_shown(lv.item_id)  # as the editor's "Show the solution" button records it
    board = str(ProgressBoard().html.value)
    assert _figures(board)[0] == before + 1 and 'data-solutions-shown="1"' in board
    assert f'data-item="{lv.item_id}" data-done="false" data-finished="true" data-solution-shown="true"' in board
    page = write_summary(tmp_path / "summary.html", labs=[tmp_path]).read_text(encoding="utf-8")
    assert "solution shown, not captured" in page and f"Flags captured: 0 of {len(load_levels())}" in page
