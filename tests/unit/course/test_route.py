"""The course's route: one source of truth (grader/route.json) for the stops and their measured times.

The README's table and lesson 00's route are exactly what ``route_markdown`` renders from it; every stop's
minutes follow from its measurements by the stated rule (a typed-in figure is refused); the route covers
every lesson and task folder, in order, and names the item each one records on the progress board.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from grader.grading.tasks import all_tasks
from grader.course.progress import LESSONS
from grader.course.route import ROUTE_FILE, RouteError, load_route, minutes_for, route_markdown, total_minutes

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "bench"))

import lesson_times  # noqa: E402 - the measuring script, whose markers and renderer are checked here

README = REPO / "README.md"
LESSON_00 = REPO / "lessons" / "00-start-here" / "start-here.md"


def _block(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    assert text.count(lesson_times.BEGIN) == 1 and text.count(lesson_times.END) == 1, path
    return text.split(lesson_times.BEGIN)[1].split(lesson_times.END)[0].strip("\n")


@pytest.mark.parametrize(("path", "links"), [(README, "repo"), (LESSON_00, "lab")], ids=["README", "lesson-00"])
def test_the_readme_and_lesson_00_show_the_route_as_measured(path: Path, links: str) -> None:
    assert _block(path) == route_markdown(load_route(), links=links)  # type: ignore[arg-type]


def test_the_readme_and_lesson_00_agree_on_every_time() -> None:
    def times(path: Path) -> list[tuple[str, str]]:
        return re.findall(r"^\| (\d\d) \|.*\| (\d+ min) \|[^|]*\|$", _block(path), re.M)

    assert times(README) == times(LESSON_00) and len(times(README)) == len(load_route().stops)
    total = re.compile(r"In all about \*\*([^*]+)\*\*")
    assert total.findall(_block(README)) == total.findall(_block(LESSON_00))


def test_lesson_00_s_notebook_carries_the_same_route() -> None:
    nb = json.loads(LESSON_00.with_suffix(".ipynb").read_text(encoding="utf-8"))
    text = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert route_markdown(load_route(), links="lab") in text


def test_the_route_covers_every_lesson_and_task_folder_in_order() -> None:
    route = load_route()
    on_disk = sorted(p.name for p in (REPO / "lessons").iterdir() if p.is_dir() and re.match(r"\d\d-", p.name))
    assert [s.folder for s in route.stops] == on_disk
    for s in route.stops:
        assert (REPO / "lessons" / s.folder / s.notebook).is_file(), s.folder
    lessons = [s for s in route.stops if s.kind == "lesson"]
    assert [s.folder[:2] for s in lessons] == [f"{n:02d}" for n in range(len(lessons))]
    for s in lessons:  # the item is what the lesson's last cell records
        md = (REPO / "lessons" / s.folder / s.notebook).with_suffix(".md").read_text(encoding="utf-8")
        assert f'finish_lesson("{s.item}")' in md
    assert [(s.item, s.title, s.minutes) for s in lessons] == list(LESSONS)
    tasks = {f"{t.order:02d}-task-{t.id}": f"task:{t.id}" for t in all_tasks()}
    for s in route.stops:
        if s.kind == "task":
            assert s.item == tasks.get(s.folder), s.folder  # the capture-the-flag task records its levels: None
    assert total_minutes(route) == sum(s.minutes for s in route.stops)


def test_every_time_follows_from_its_measurements() -> None:
    for s in load_route().stops:
        assert s.minutes == minutes_for(s.run_seconds, s.words, s.questions, s.hands_on)
        assert s.run_seconds > 0 and s.words > 0, f"{s.folder} was never measured"
    assert "measured" in load_route().how and "bench/lesson_times.py" in load_route().how


def test_a_typed_in_time_is_refused(tmp_path: Path) -> None:
    data = json.loads(ROUTE_FILE.read_text(encoding="utf-8"))
    data["stops"][2]["minutes"] += 5  # "it feels like 15 minutes"
    path = tmp_path / "route.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(RouteError, match=r"/stops/2: .*measurements give"):
        load_route(path)


@pytest.mark.parametrize(("change", "pointer"), [
    (lambda d: d["stops"][0].update(minuts=3), "/stops/0/minuts"),
    (lambda d: d["stops"][1].update(words="965"), "/stops/1/words"),
    (lambda d: d["stops"][1].update(run_seconds=-1), "/stops/1/run_seconds"),
    (lambda d: d.pop("how"), "/how"),
    (lambda d: d["stops"][3].update(kind="chapter"), "/stops/3/kind"),
])
def test_a_broken_route_names_the_place(tmp_path: Path, change, pointer: str) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(ROUTE_FILE.read_text(encoding="utf-8"))
    change(data)
    path = tmp_path / "route.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(RouteError, match=re.escape(pointer) + ":"):
        load_route(path)


def test_a_route_file_that_is_not_utf8_or_not_a_file_is_a_route_error(tmp_path: Path) -> None:
    latin = tmp_path / "route.json"
    latin.write_bytes(b'{"how": "caf\xe9"}')
    with pytest.raises(RouteError, match=re.escape(f"{latin}: byte 12 is not UTF-8.")):
        load_route(latin)  # a UnicodeDecodeError escaped before
    with pytest.raises(RouteError, match="cannot be read"):
        load_route(tmp_path)


def test_the_script_counts_prose_without_solutions_and_each_exercise() -> None:
    import nbformat
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    nb = new_notebook(cells=[
        new_markdown_cell("one two three\n### BEGIN SOLUTION\nsecret model answer words\n### END SOLUTION"),
        new_code_cell('Quiz("a")\nPrediction("b", backend=backend)\nask("c")'),
        new_code_cell('editor = PolicyEditor(p, goal="g")\nAttackEditor(2)\nstage = AgentStage(p, editable=True)\nAgentStage(None)'),
        new_code_cell('# Quiz("in a comment") is no exercise\nprint("Quiz(")'),
    ])
    nb.cells[0].metadata["nbgrader"] = {"solution": True, "grade": True}
    assert lesson_times.count(nbformat.from_dict(nb)) == (3, 4, 3)
    # Lesson 07's attacks are ``%%attack N`` cells: each one an attack to write; the words in a comment are not.
    nb.cells += [new_code_cell("%%attack 9\n# your attack"), new_code_cell("%%attack 11 --policy p.json\npass"),
                 new_code_cell("# %%attack 3 in a comment\nprint('%%attack 4')")]
    assert lesson_times.count(nbformat.from_dict(nb)) == (3, 4, 5)


def test_re_measuring_some_stops_keeps_what_the_others_were_measured_with(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lesson_times, "run_all", lambda path, backend: 1.0)
    before = load_route().measured_with.split("; re-measured ")[0]
    data = lesson_times.measure("static", ("00-start-here",))
    assert data["measured_with"].startswith(before + "; re-measured 00-start-here with the static backend, ")
    again = lesson_times.measure("static", ("00-start-here",))  # a second re-measurement replaces the first note
    assert again["measured_with"].count("re-measured") == 1


def test_rendering_needs_exactly_one_block(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="exactly one route block"):
        lesson_times.render("no markers here", "table", tmp_path / "x.md")
    two = f"{lesson_times.BEGIN}\n{lesson_times.END}\n" * 2
    with pytest.raises(SystemExit):
        lesson_times.render(two, "table", tmp_path / "x.md")


def test_a_stop_measured_apart_says_how_under_the_table(tmp_path: Path) -> None:
    data = json.loads(ROUTE_FILE.read_text(encoding="utf-8"))
    stop = next(s for s in data["stops"] if s["folder"] == "02-naive-vs-secure")
    stop["measured_by"] = "`bench/probe_speed.py --write-route` (docker backend, load average 0.4)"
    f = tmp_path / "route.json"
    f.write_text(json.dumps(data))
    text = route_markdown(load_route(f), links="repo")
    assert f"Stop 02's Run All ({stop['run_seconds']:.0f} s) was measured apart: `bench/probe_speed.py --write-route`" in text
    # a stop measured with the rest says nothing more
    assert text.count("was measured apart") == 1
