"""The learner's copy (``grader/grading/release.py``): an instructor's key leaves no stub; every other solution keeps nbgrader's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="nbgrader is in the 'lab' extra")
pytest.importorskip("nbgrader", reason="nbgrader is in the 'lab' extra")

from grader.grading.release import KEY_MARK, ClearSolutions  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
STUB = "# YOUR CODE HERE\nraise NotImplementedError()"


def _cleared(source: str) -> str:
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "answers", "locked": False, "schema_version": 3}
    nb = nbformat.v4.new_notebook(cells=[cell], metadata={"kernelspec": {"language": "python", "name": "python3", "display_name": "Python 3"}})
    out, _ = ClearSolutions().preprocess(nb, {})
    return str(out.cells[0].source)


def test_a_key_leaves_only_the_lines_the_learner_writes_on() -> None:
    source = ('answer = ""  # your letter\n'
              f"### BEGIN SOLUTION {KEY_MARK}\nif False:  # the key\n    answer = \"c\"\n### END SOLUTION")
    assert _cleared(source) == 'answer = ""  # your letter'


def test_a_solution_to_write_keeps_nbgrader_s_stub_at_its_indent() -> None:
    assert _cleared("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION") == \
        "def f():\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    mixed = (f"a = 1\n### BEGIN SOLUTION {KEY_MARK}\nkey = 2\n### END SOLUTION\n"
             "### BEGIN SOLUTION\nb = 3\n### END SOLUTION")
    assert _cleared(mixed) == "a = 1\n" + STUB  # each region by its own first line


@pytest.mark.parametrize(("source", "error"), [
    (f"### BEGIN SOLUTION {KEY_MARK}\nx = 1", "no end solution statement found"),
    (f"### BEGIN SOLUTION {KEY_MARK}\n### BEGIN SOLUTION\n### END SOLUTION", "encountered nested begin solution statements"),
])
def test_a_broken_key_region_fails_as_nbgrader_s_own_would(source: str, error: str) -> None:
    with pytest.raises(RuntimeError, match=error):
        _cleared(source)


def test_the_course_config_releases_with_this_step() -> None:
    text = (ROOT / "nbgrader_config.py").read_text(encoding="utf-8")
    assert "from grader.grading.release import ClearSolutions" in text and "c.GenerateAssignment.preprocessors" in text


def test_lesson_05_s_key_is_a_marked_region() -> None:
    nb = json.loads((ROOT / "lessons" / "05-check-yourself" / "check-yourself.ipynb").read_text(encoding="utf-8"))
    cell = next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == "l05-answers")
    assert _cleared("".join(cell["source"])) == (
        'answer_etc_secrets = ""      # the letter you chose, between the quotes, e.g. "a"\n'
        'answer_standard_docker = ""  # the letter you chose, between the quotes')
