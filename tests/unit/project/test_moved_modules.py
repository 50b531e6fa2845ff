"""A notebook saved before the packages became the layers still runs: every old module name is the new module.

A learner's copy of a lesson, an nbgrader assignment released last term and a submission being autograded all say
``from grader.lessons.widgets import ...`` or ``%load_ext grader.ctf.magic``; each old name must import the module
that now lives elsewhere, the same object (one set of widgets, one progress record), and say where it went.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

import grader

MOVED = sorted(grader._MOVED.items())


@pytest.mark.parametrize(("old", "new"), MOVED, ids=[o for o, _ in MOVED])
def test_an_old_name_is_the_new_module(old: str, new: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert importlib.import_module(old) is importlib.import_module(new)
    assert importlib.import_module(new).__spec__.name == new  # the module keeps its own spec


def test_an_old_import_says_where_the_module_went_and_runs_a_saved_lesson_cell() -> None:
    """In a fresh interpreter, as a kernel would run an old lesson's first cell: it works, and warns once."""
    cell = ("import warnings; warnings.simplefilter('always')\n"
            "from grader.lessons.widgets import PolicyEditor, Quiz, finish_lesson\n"
            "from grader.lessons import progress\n"
            "import grader.ctf.magic, grader.notebook.widgets as now\n"
            "assert PolicyEditor is now.PolicyEditor and progress.__name__ == 'grader.course.progress'\n")
    done = subprocess.run([sys.executable, "-c", cell], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "grader.lessons.widgets moved to grader.notebook.widgets" in done.stderr


def test_a_name_that_never_existed_is_still_an_import_error() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("grader.lessons.nothing_here")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("grader.cli.nothing_here")
