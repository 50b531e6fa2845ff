"""The committed notebooks are what their sources say: no Docker, no kernel.

A lesson (``lessons/0N-*/``) is a pair: ``<name>.md``, MyST Markdown that a
person edits and reviews, and ``<name>.ipynb``, what learners open and nbgrader
releases, kept in step by jupytext (``lessons/jupytext.toml``; ``make lessons``
runs ``jupytext --sync``). A pair is in sync when jupytext reads the same cells
from both: type, source and nbgrader metadata (grade_id, points, solution...).

A graded task (``lessons/1N-task-*/task.ipynb``) has no text source: it is
generated from ``grader/tasks/<id>.json`` by ``scripts/make_task_notebooks.py``,
and regenerating it must give the committed file byte for byte. It must never be
paired: a ``task.md`` would sit beside it with the reference solution in it.

Each check is also run on a damaged temporary copy, to show that it fails.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

jupytext = pytest.importorskip("jupytext", reason="jupytext is in the 'lab' extra")
nbformat = pytest.importorskip("nbformat", reason="nbformat is in the 'lab' extra")
from jupytext.cli import jupytext as jupytext_cli  # noqa: E402 - after the skip
from jupytext.config import load_jupytext_config, notebook_formats  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
LESSONS = ROOT / "lessons"
PAIRED = "ipynb,md:myst"
LESSON_FOLDERS = ["00-start-here", "01-why-sandbox", "02-naive-vs-secure", "03-container-alone",
                  "04-trusted-domains", "05-check-yourself", "06-what-a-policy-misses",
                  "07-break-it-yourself"]


def _cells(nb: Any) -> list[tuple[str, str, Any]]:
    """What a pair must agree on, cell by cell: type, source, and the nbgrader metadata."""
    return [(c.cell_type, c.source, c.metadata.get("nbgrader")) for c in nb.cells]


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _first_line_apart(a: str, b: str) -> str:
    lines_a, lines_b = a.splitlines(), b.splitlines()
    for n, (x, y) in enumerate(zip(lines_a, lines_b), 1):
        if x != y:
            return f"line {n}: .md has {_short(x)}, .ipynb has {_short(y)}"
    return f".md has {len(lines_a)} lines, .ipynb has {len(lines_b)}"


def _differences(md_nb: Any, ipynb: Any) -> list[str]:
    text_cells, nb_cells = _cells(md_nb), _cells(ipynb)
    out = []
    for i, (a, b) in enumerate(zip(text_cells, nb_cells)):
        for field, x, y in zip(("type", "source", "nbgrader metadata"), a, b):
            if x != y:
                apart = _first_line_apart(x, y) if field == "source" else f".md has {_short(x)}, .ipynb has {_short(y)}"
                out.append(f"cell {i} {field}, {apart}")
    if len(text_cells) != len(nb_cells):
        out.append(f".md has {len(text_cells)} cells, .ipynb has {len(nb_cells)}")
    if md_nb.metadata.get("kernelspec") != ipynb.metadata.get("kernelspec"):
        out.append("the kernelspec differs")
    return out


def pair_problems(lessons: Path) -> list[str]:
    """Every way the lessons under ``lessons`` differ from their sources; [] when all is in step."""
    fix = "edit the .md, then run `make lessons`"
    problems = []
    for folder in sorted(p for p in lessons.glob("0*-*") if p.is_dir()):
        md = {p.stem for p in folder.glob("*.md")}
        nb = {p.stem for p in folder.glob("*.ipynb")}
        if not md | nb:
            problems.append(f"{folder.name}: no lesson notebook")
        problems += [f"{folder.name}/{s}.ipynb has no {s}.md source (make one: jupytext --sync lessons/{folder.name}/{s}.ipynb)"
                     for s in sorted(nb - md)]
        problems += [f"{folder.name}/{s}.md has no {s}.ipynb ({fix})" for s in sorted(md - nb)]
        for stem in sorted(md & nb):
            md_nb = jupytext.read(folder / f"{stem}.md")
            fmt = md_nb.metadata.get("jupytext", {}).get("text_representation", {}).get("format_name")
            if fmt != "myst":
                problems.append(f"{folder.name}/{stem}.md is jupytext format {fmt!r}, not MyST (md:myst)")
            ipynb = nbformat.read(folder / f"{stem}.ipynb", as_version=4)
            problems += [f"{folder.name}/{stem}: {d} ({fix})" for d in _differences(md_nb, ipynb)]
    for folder in sorted(p for p in lessons.glob("1*-task-*") if p.is_dir()):
        problems += [f"{folder.name}/{p.name}: a task notebook is generated and never paired; delete it"
                     for p in sorted(folder.glob("*.md"))]
    return problems


# --- the lessons ---------------------------------------------------------------------------


def test_every_lesson_is_a_pair_in_sync() -> None:
    assert [p.name for p in sorted(LESSONS.glob("0*-*"))] == LESSON_FOLDERS
    assert pair_problems(LESSONS) == []


@pytest.mark.parametrize("folder", LESSON_FOLDERS)
def test_jupytext_pairs_each_lesson_as_myst(folder: str) -> None:
    """lessons/jupytext.toml applies, so JupyterLab saves both files of the pair whichever is open. The pair's files
    only: what a learner's lesson writes beside it (lesson 07's capstone_policy.json) is theirs, not a lesson file."""
    for path in sorted(p for p in (LESSONS / folder).glob("*.*") if p.suffix in (".md", ".ipynb")):
        config = load_jupytext_config(str(path))
        assert config is not None, f"no jupytext config applies to {path}"
        assert config.default_formats(str(path)) == PAIRED


def test_the_graded_cells_survive_in_the_md() -> None:
    md_nb = jupytext.read(LESSONS / "05-check-yourself" / "check-yourself.md")
    graded = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"] for c in md_nb.cells if "nbgrader" in c.metadata}
    assert graded == {
        "l05-answers": {"grade": False, "grade_id": "l05-answers", "locked": False, "schema_version": 3, "solution": True},
        "l05-check-etc-secrets-github": {"grade": True, "grade_id": "l05-check-etc-secrets-github", "locked": True,
                                         "points": 1, "schema_version": 3, "solution": False},
        "l05-check-standard-docker": {"grade": True, "grade_id": "l05-check-standard-docker", "locked": True,
                                      "points": 1, "schema_version": 3, "solution": False},
    }


@pytest.fixture
def lessons_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "lessons"
    shutil.copytree(LESSONS, copy, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "my_policy.json"))
    assert pair_problems(copy) == []
    return copy


def _replace(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{old!r} is not once in {path}"
    path.write_text(text.replace(old, new), encoding="utf-8")


def test_an_edited_md_is_out_of_sync(lessons_copy: Path) -> None:
    _replace(lessons_copy / "00-start-here" / "start-here.md", "**Start here.** This page is the map", "**Start here!** This page is the map")
    [problem] = pair_problems(lessons_copy)
    line = " This page is the map: the route through the course, how long each part takes, and"
    assert problem == (f"00-start-here/start-here: cell 0 source, line 3: .md has '**Start here!**{line}', "
                       f".ipynb has '**Start here.**{line}' (edit the .md, then run `make lessons`)")


def test_changed_points_are_out_of_sync(lessons_copy: Path) -> None:
    _replace(lessons_copy / "05-check-yourself" / "check-yourself.md",
             "grade_id: l05-check-standard-docker\n  locked: true\n  points: 1",
             "grade_id: l05-check-standard-docker\n  locked: true\n  points: 2")
    [problem] = pair_problems(lessons_copy)
    assert "nbgrader metadata" in problem and "'points': 2" in problem


def test_a_cell_added_to_the_ipynb_is_out_of_sync(lessons_copy: Path) -> None:
    path = lessons_copy / "03-container-alone" / "container-alone.ipynb"
    nb = nbformat.read(path, as_version=4)
    n = len(nb.cells)
    nb.cells.append(nbformat.v4.new_code_cell("print('only in the notebook')"))
    nbformat.write(nb, path)
    assert pair_problems(lessons_copy) == [f"03-container-alone/container-alone: .md has {n} cells, .ipynb has {n + 1} "
                                           "(edit the .md, then run `make lessons`)"]


def test_a_lesson_without_its_md_or_its_ipynb_fails(lessons_copy: Path) -> None:
    (lessons_copy / "01-why-sandbox" / "why-sandbox.md").unlink()
    (lessons_copy / "04-trusted-domains" / "trusted-domains.ipynb").unlink()
    (lessons_copy / "11-task-fix-the-naive-setup" / "task.md").write_text("# stray\n", encoding="utf-8")
    problems = pair_problems(lessons_copy)
    assert [p.split(" ")[0] for p in problems] == ["01-why-sandbox/why-sandbox.ipynb",
                                                   "04-trusted-domains/trusted-domains.md",
                                                   "11-task-fix-the-naive-setup/task.md:"]


def test_make_lessons_syncs_an_edited_md(lessons_copy: Path) -> None:
    """The command `make lessons` runs writes the edit into the notebook and keeps its cell ids."""
    md = lessons_copy / "02-naive-vs-secure" / "naive-vs-secure.md"
    ipynb = md.with_suffix(".ipynb")
    ids = [c.id for c in nbformat.read(ipynb, as_version=4).cells]
    _replace(md, "**About 25 minutes.**", "**About 30 minutes.**")
    later = time.time() + 2  # jupytext --sync takes the inputs from the newer file of a pair
    os.utime(md, (later, later))
    jupytext_cli(["--sync", *map(str, sorted(lessons_copy.glob("0*/*.md")))])  # in-process: no second interpreter
    assert pair_problems(lessons_copy) == []
    nb = nbformat.read(ipynb, as_version=4)
    assert "**About 30 minutes.**" in nb.cells[0].source
    assert [c.id for c in nb.cells] == ids
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")


# --- the graded tasks ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def task_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_task_notebooks", ROOT / "scripts" / "make_task_notebooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TASK_NOTEBOOKS = sorted(LESSONS.glob("1*-task-*/task.ipynb"))


def test_task_notebooks_are_what_the_generator_makes(task_script: ModuleType, tmp_path: Path) -> None:
    assert task_script.main(["--lessons", str(tmp_path)]) == 0
    made = sorted(tmp_path.glob("*/task.ipynb"))
    assert [p.parent.name for p in made] == [p.parent.name for p in TASK_NOTEBOOKS]
    for path in TASK_NOTEBOOKS:
        assert (tmp_path / path.parent.name / "task.ipynb").read_bytes() == path.read_bytes(), (
            f"{path.relative_to(ROOT)} is out of date: run `make lessons` (scripts/make_task_notebooks.py)")
    assert task_script.main(["--check"]) == 0


def test_a_stale_or_missing_task_notebook_fails_the_check(task_script: ModuleType, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    for path in TASK_NOTEBOOKS:
        shutil.copytree(path.parent, tmp_path / path.parent.name, ignore=shutil.ignore_patterns("my_policy.json"))
    assert task_script.main(["--check", "--lessons", str(tmp_path)]) == 0
    edited = tmp_path / "12-task-pip-install-only" / "task.ipynb"
    nb = nbformat.read(edited, as_version=4)
    nb.cells[0].source += "\nA sentence typed into the notebook instead of the task file."
    nbformat.write(nb, edited)
    (tmp_path / "13-task-stop-persistence" / "task.ipynb").unlink()
    capsys.readouterr()
    assert task_script.main(["--check", "--lessons", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "12-task-pip-install-only/task.ipynb" in err and "13-task-stop-persistence/task.ipynb" in err
    assert "10-task-scope-secure-sandbox" not in err


@pytest.mark.parametrize("path", TASK_NOTEBOOKS, ids=lambda p: p.parent.name)
def test_task_notebooks_are_never_paired(path: Path) -> None:
    """lessons/jupytext.toml would pair them; their own metadata keeps JupyterLab from writing a task.md."""
    nb = nbformat.read(path, as_version=4)
    formats = notebook_formats(nb, load_jupytext_config(str(path)), str(path))
    assert [f["extension"] for f in formats] == [".ipynb"]
    nb.metadata.pop("jupytext")  # without it the lessons' config applies: the guard is what holds
    formats = notebook_formats(nb, load_jupytext_config(str(path)), str(path))
    assert [f["extension"] for f in formats] == [".ipynb", ".md"]


def test_nbgrader_releases_no_md_source() -> None:
    """A lesson's .md holds its solution cells verbatim; nbgrader's ignore list keeps it out of release/."""
    import fnmatch

    from traitlets.config import Config

    config = Config()
    exec(compile((ROOT / "nbgrader_config.py").read_text(encoding="utf-8"), "nbgrader_config.py", "exec"),
         {"get_config": lambda: config, "__file__": str(ROOT / "nbgrader_config.py")})
    ignore = config.CourseDirectory.ignore
    for md in sorted(LESSONS.glob("0*/*.md")):
        assert any(fnmatch.fnmatch(md.name, pattern) for pattern in ignore), f"{md.name} would be released"
