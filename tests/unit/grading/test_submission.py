"""The structure check and the policy-file reader, without nbgrader's run: each tampering is found, and what it zeroes.

The released assignment here is a lesson's source notebook, with its own cell
text standing in for the gradebook's record (these cells have no hidden tests,
so the released text is the source text). The full runs through ``nbgrader
autograde`` are tests/notebooks/test_autograde_structure.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

import nbformat
import pytest
from nbgrader.utils import compute_checksum

from grader.grading.autograde import _reads
from grader.grading.batch import MAX_SUBMISSION_BYTES
from grader.grading import submission
from grader.grading.submission import Reference, SubmittedFile, check_structure, read_policy_file, read_submitted, reference_of, zeroed
from grader.grading.tasks import load_task

REPO = Path(__file__).resolve().parents[3]
TASK = load_task("scope-secure-sandbox")
POLICY = f"{TASK.id}-policy"
RUBRIC = {TASK.grade_id(c.id) for c in TASK.checks}
FIRST = TASK.grade_id(TASK.checks[0].id)

Nb = nbformat.NotebookNode


def _load(path: Path) -> Nb:
    return nbformat.read(path, as_version=4)


def _released(nb: Nb) -> dict[str, tuple[str, str]]:
    return {c.metadata.nbgrader["grade_id"]: (c.source, compute_checksum(c)) for c in nb.cells if "nbgrader" in c.metadata}


def _reference(path: Path) -> tuple[Nb, Reference]:
    source = _load(path)
    return source, reference_of(source, _released(source), _reads)


@pytest.fixture()
def task10() -> tuple[Nb, Reference]:
    return _reference(REPO / "lessons" / "10-task-scope-secure-sandbox" / "task.ipynb")


def _gid(c: Nb) -> str:
    return str(c.metadata.get("nbgrader", {}).get("grade_id", ""))


def _at(nb: Nb, gid: str) -> int:
    return next(i for i, c in enumerate(nb.cells) if _gid(c) == gid)


def _copy(nb: Nb) -> Nb:
    return nbformat.from_dict(json.loads(json.dumps(nb)))


def test_the_release_itself_has_no_deviation_and_is_left_as_it_is(task10: tuple[Nb, Reference]) -> None:
    source, ref = task10
    out = check_structure(source, ref)
    assert out.deviations == ()
    assert [c.source for c in out.notebook.cells] == [c.source for c in source.cells]


def test_the_policy_cell_feeds_every_rubric_cell_and_a_rubric_cell_only_itself(task10: tuple[Nb, Reference]) -> None:
    _, ref = task10
    assert ref.affects[POLICY] == RUBRIC
    assert ref.affects[FIRST] == {FIRST}
    assert ref.affects[f"{TASK.id}-setup"] == frozenset()


def _deleted(nb: Nb) -> None:
    nb.cells[_at(nb, POLICY)] = nbformat.v4.new_code_cell('policy_json = "{}"\nassert_passed = lambda *a: None')


def _duplicated(nb: Nb) -> None:
    nb.cells.insert(_at(nb, FIRST), _copy(nb.cells[_at(nb, FIRST)]))


def _points(nb: Nb) -> None:
    nb.cells[_at(nb, FIRST)].metadata.nbgrader["points"] = 99


def _markdown(nb: Nb) -> None:
    i = _at(nb, FIRST)
    md = nbformat.v4.new_markdown_cell(nb.cells[i].source)
    md.metadata = nb.cells[i].metadata
    nb.cells[i] = md


def _moved(nb: Nb) -> None:
    cell = nb.cells.pop(_at(nb, POLICY))
    nb.cells.append(cell)


def _renamed(nb: Nb) -> None:
    nb.cells[_at(nb, POLICY)].metadata.nbgrader["grade_id"] = "mine"


def _edited(nb: Nb) -> None:
    nb.cells[_at(nb, FIRST)].source = "pass"


def _unlocked(nb: Nb) -> None:
    nb.cells[_at(nb, FIRST)].metadata.nbgrader["locked"] = False


def _solution_flag(nb: Nb) -> None:
    nb.cells[_at(nb, POLICY)].metadata.nbgrader["solution"] = False


def _invented(nb: Nb) -> None:
    cell = nbformat.v4.new_code_cell("print('free points')")
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": "bonus", "points": 50, "locked": True, "solution": False, "schema_version": 3}
    nb.cells.append(cell)


@pytest.mark.parametrize(("tamper", "cell", "words", "zeroes"), [
    (_deleted, POLICY, "is missing", RUBRIC),
    (_duplicated, FIRST, "appears 2 times", {FIRST}),
    (_points, FIRST, '"points": 99', {FIRST}),
    (_markdown, FIRST, "is a markdown cell", {FIRST}),
    (_moved, POLICY, "was moved", RUBRIC),
    (_renamed, POLICY, "is missing", RUBRIC),
    (_edited, FIRST, "was edited", {FIRST}),
    (_unlocked, FIRST, '"locked": False', {FIRST}),
    (_solution_flag, POLICY, '"solution": False', RUBRIC),
    (_invented, "bonus", "is not in the released assignment", set()),
], ids=lambda v: getattr(v, "__name__", None))
def test_each_tampering_is_found_with_what_it_zeroes(task10: tuple[Nb, Reference], tamper: Callable[[Nb], None],
                                                      cell: str, words: str, zeroes: set[str]) -> None:
    source, ref = task10
    nb = _copy(source)
    tamper(nb)
    out = check_structure(nb, ref)
    assert any(d.grade_id == cell and words in d.problem for d in out.deviations), out.deviations
    assert set(zeroed(out.deviations)) == zeroes
    # brought back to the released structure: every graded cell once, with its released record, nothing else graded
    graded = [_gid(c) for c in out.notebook.cells if "nbgrader" in c.metadata]
    assert sorted(graded) == sorted(e.grade_id for e in ref.cells)
    for c in out.notebook.cells:
        if "nbgrader" in c.metadata:
            expected = ref.by_id()[_gid(c)]
            assert {k: c.metadata.nbgrader.get(k) for k in expected.metadata} == dict(expected.metadata)


def test_a_missing_rubric_cell_comes_back_as_released_after_its_neighbour(task10: tuple[Nb, Reference]) -> None:
    source, ref = task10
    nb = _copy(source)
    i = _at(nb, FIRST)
    del nb.cells[i]
    out = check_structure(nb, ref)
    assert [str(d) for d in out.deviations] == [f"cell '{FIRST}' is missing (put back as released)"]
    back = out.notebook.cells[i]
    assert _gid(back) == FIRST and back.source == source.cells[i].source and back.cell_type == "code"
    assert _gid(out.notebook.cells[i - 1]) == _gid(source.cells[i - 1])


def test_a_record_nbgrader_cannot_read_is_removed_not_passed_on(task10: tuple[Nb, Reference]) -> None:
    """A malformed nbgrader record (here: not even a dict) used to reach nbgrader, which aborts the run for the class."""
    source, ref = task10
    nb = _copy(source)
    nb.cells.append(nbformat.v4.new_code_cell("x = 1"))
    nb.cells[-1].metadata["nbgrader"] = "grade me"
    del nb.cells[_at(nb, FIRST)].metadata.nbgrader["schema_version"]
    out = check_structure(nb, ref)
    assert [d.grade_id for d in out.deviations] == ["?"]
    assert "nbgrader" not in out.notebook.cells[-1].metadata
    assert out.notebook.cells[_at(out.notebook, FIRST)].metadata.nbgrader["schema_version"] == 3


def test_in_a_quiz_each_answer_cell_zeroes_only_the_checks_that_read_it() -> None:
    _, ref = _reference(REPO / "lessons" / "05-check-yourself" / "check-yourself.ipynb")
    assert ref.affects["l05-answers"] == {"l05-check-etc-secrets-github", "l05-check-standard-docker"}
    _, ctf = _reference(REPO / "lessons" / "15-task-capture-the-flag" / "task.ipynb")
    assert ctf.affects["capture-the-flag-l01-attack"] == {"capture-the-flag-l01-captured"}


# --- my_policy.json ------------------------------------------------------------------------------


def test_a_regular_file_inside_the_submission_is_read(tmp_path: Path) -> None:
    (tmp_path / "my_policy.json").write_text('{"filesystem": {}}')
    assert read_policy_file(tmp_path) == ('{"filesystem": {}}', "")


def _link(tmp_path: Path) -> None:
    other = tmp_path.parent / f"{tmp_path.name}-classmate.json"
    other.write_text("{}")
    (tmp_path / "my_policy.json").symlink_to(other)


def _dangling(tmp_path: Path) -> None:
    (tmp_path / "my_policy.json").symlink_to(tmp_path / "nowhere.json")


def _directory(tmp_path: Path) -> None:
    (tmp_path / "my_policy.json").mkdir()


def _fifo(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "my_policy.json")  # a read would block the grader forever


def _huge(tmp_path: Path) -> None:
    (tmp_path / "my_policy.json").write_bytes(b" " * (MAX_SUBMISSION_BYTES + 1))


def _latin1(tmp_path: Path) -> None:
    (tmp_path / "my_policy.json").write_bytes('{"x": "caf\u00e9"}'.encode("latin-1"))


def _hard_link(tmp_path: Path) -> None:
    other = tmp_path.parent / f"{tmp_path.name}-classmate-hard.json"
    other.write_text("{}")
    os.link(other, tmp_path / "my_policy.json")  # a second name of a classmate's file: no symbolic link to see


@pytest.mark.parametrize(("make", "words"), [
    (_link, "symbolic link"),
    (_hard_link, "is a hard link (one of 2 names of the same file); submit the file itself"),
    (_dangling, "symbolic link"),
    (_directory, "not a regular file"),
    (_fifo, "not a regular file"),
    (_huge, "byte limit"),
    (_latin1, "not UTF-8"),
], ids=lambda v: getattr(v, "__name__", None))
def test_anything_but_a_regular_file_is_refused_with_the_reason(tmp_path: Path, make: Callable[[Path], None], words: str) -> None:
    make(tmp_path)
    text, why = read_policy_file(tmp_path)
    assert text is None and words in why


def test_a_submission_folder_that_is_a_link_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "classmate"
    real.mkdir()
    (real / "my_policy.json").write_text("{}")
    (tmp_path / "mine").symlink_to(real)
    text, why = read_policy_file(tmp_path / "mine")
    assert text is None and "plain directory" in why


def test_no_file_is_no_policy_not_an_error(tmp_path: Path) -> None:
    assert read_policy_file(tmp_path) == (None, "no my_policy.json was submitted")


@pytest.mark.parametrize(("tamper", "code"), [
    (_deleted, "missing"), (_duplicated, "duplicated"), (_points, "metadata"), (_markdown, "cell-type"), (_moved, "moved"),
    (_renamed, "missing"), (_edited, "edited"), (_unlocked, "metadata"), (_invented, "not-released"),
], ids=lambda v: getattr(v, "__name__", None))
def test_each_tampering_carries_its_code_and_the_decisions_ignore_its_words(
        task10: tuple[Nb, Reference], tamper: Callable[[Nb], None], code: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every deviation has a code; reworded problems ("is missing" no longer said) give the same deviations."""
    source, ref = task10
    nb = _copy(source)
    tamper(nb)
    plain = check_structure(nb, ref).deviations
    assert code in {d.code for d in plain}, plain
    real = submission.Deviation
    monkeypatch.setattr(submission, "Deviation", lambda gid, problem, affects, c: real(gid, "reworded: " + problem, affects, c))
    reworded = check_structure(nb, ref).deviations
    assert [(d.grade_id, d.code, d.affects) for d in reworded] == [(d.grade_id, d.code, d.affects) for d in plain]


def test_a_file_that_is_not_there_is_absent_and_anything_else_refused(tmp_path: Path) -> None:
    assert read_submitted(tmp_path).cause == "absent"
    (tmp_path / "my_policy.json").mkdir()
    got = read_submitted(tmp_path)
    assert (got.text, got.cause) == (None, "refused") and "not a regular file" in got.why
    (tmp_path / "p.json").write_text("{}")
    assert read_submitted(tmp_path, "p.json") == SubmittedFile("{}", "read", "")


def test_a_missing_cell_put_back_is_not_also_called_moved_whatever_its_problem_says(
        task10: tuple[Nb, Reference], monkeypatch: pytest.MonkeyPatch) -> None:
    """The put-back cell is known by its "missing" code: reworded, it still draws no second, "moved" deviation."""
    source, ref = task10
    graded = [c for c in source.cells if "nbgrader" in c.metadata]
    gone, moved = _gid(graded[1]), _gid(graded[0])
    nb = _copy(source)
    cell = nb.cells.pop(_at(nb, moved))
    del nb.cells[_at(nb, gone)]
    nb.cells.append(cell)
    real = submission.Deviation
    monkeypatch.setattr(submission, "Deviation", lambda gid, problem, affects, c: real(gid, "reworded: " + problem, affects, c))
    devs = check_structure(nb, ref).deviations
    assert [d.code for d in devs if d.grade_id == gone] == ["missing"], devs
    assert "moved" in {d.code for d in devs if d.grade_id != gone}
