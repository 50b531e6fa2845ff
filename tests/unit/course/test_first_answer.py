"""A graded lesson answer's first attempt: recorded when the check runs, and judged by autograde.

Self-paced (no class key): the record rides in the output that shows the key,
read unverified, and a malformed or foreign one counts against the learner
(fail closed); the gaming attempt is run end to end through ``nbgrader
autograde`` in tests/notebooks/test_check_yourself.py. In a class (a learner
key in the kernel, the class secret in the grader): the key is withheld, and
the tests below play the student who clears outputs and edits letters, copies
a classmate's record, forges one by hand, deletes it, or switches the class key
off to see the answer: each ends with the first answer counted, or 0 with the
reason, never the edited letter.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grader.course.first_answer import FIRST_ANSWER_MIME, first_answer_record, read_first_answer

nbformat = pytest.importorskip("nbformat", reason="the notebook stack is in the 'lab' extra")
pytest.importorskip("ipywidgets", reason="ipywidgets is in the 'lab' extra")

from grader.grading.autograde import first_answers, grade_answers  # noqa: E402 - needs nbformat
from grader.course.first_answer import CLASS_KEY_ENV, LEDGER, FirstAnswer, learner_key  # noqa: E402
from grader.notebook.quiz_widgets import graded  # noqa: E402 - needs ipywidgets

Q = "check-etc-secrets-github"


@pytest.fixture(autouse=True)
def _progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "progress.json"
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(path))
    monkeypatch.delenv(CLASS_KEY_ENV, raising=False)  # self-paced unless a test says otherwise
    return path


def _out(record: Any) -> list[dict[str, Any]]:
    return [{"output_type": "execute_result", "execution_count": 1, "metadata": {}, "data": {"text/plain": "x", FIRST_ANSWER_MIME: record}}]


def test_the_record_reads_back_as_written() -> None:
    assert read_first_answer(_out(first_answer_record(Q, True)), Q) == (True, True)
    assert read_first_answer(_out(first_answer_record(Q, False)), Q) == (True, False)
    assert read_first_answer([{"output_type": "stream", "text": "hi"}], Q) == (False, None)
    assert read_first_answer(None, Q) == (False, None)


@pytest.mark.parametrize("record", [
    {"question": Q, "first_solved": "true"},               # not a bool
    {"question": Q, "first_solved": 1},                    # not a bool either
    {"question": "check-standard-docker", "first_solved": True},  # another question's record under this call
    {"question": Q, "first_solved": True, "extra": 1},     # an unknown key
    {"question": Q},                                       # a missing key
    ["not", "a", "record"],
])
def test_a_malformed_or_foreign_record_counts_as_a_wrong_first_attempt(record: Any) -> None:
    assert read_first_answer(_out(record), Q) == (True, False)


def test_two_records_count_as_right_only_if_both_say_so() -> None:
    both = _out(first_answer_record(Q, True)) + _out(first_answer_record(Q, False))
    assert read_first_answer(both, Q) == (True, False)


def _bundle(widget: Any) -> dict[str, Any]:
    data = widget._repr_mimebundle_()
    assert isinstance(data, dict)
    return data


def test_the_check_records_the_first_attempt_once_the_key_shows_and_keeps_it_after_a_changed_letter() -> None:
    assert FIRST_ANSWER_MIME not in _bundle(graded(Q, ""))  # nothing answered: no key shown, no record
    first = _bundle(graded(Q, "a"))
    assert "Model answer" in first["text/html"] and first[FIRST_ANSWER_MIME] == {"question": Q, "first_solved": False}
    changed = _bundle(graded(Q, "c"))  # the key seen, the letter changed: the record still says the first was wrong
    assert "Right" in changed["text/html"] and changed[FIRST_ANSWER_MIME] == {"question": Q, "first_solved": False}
    assert "Your first answer is the one graded" in changed["text/html"]


def test_without_a_saved_attempt_no_key_shows_and_nothing_is_recorded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(blocker / "progress.json"))
    data = _bundle(graded(Q, "a"))
    assert "Model answer" not in data["text/html"] and FIRST_ANSWER_MIME not in data


def _notebook(letter: str, outputs: list[dict[str, Any]]) -> Any:
    answers = nbformat.v4.new_code_cell(f'answer_etc_secrets = "{letter}"')
    answers.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "l05-answers"}
    check = nbformat.v4.new_code_cell(f'is_option("{Q}", answer_etc_secrets)\ngraded("{Q}", answer_etc_secrets)')
    check.metadata["nbgrader"] = {"solution": False, "grade": True, "grade_id": "l05-check", "points": 1}
    check.outputs = [nbformat.from_dict(o) for o in outputs]
    return nbformat.v4.new_notebook(cells=[answers, check])


def test_autograde_scores_a_letter_changed_after_a_wrong_first_attempt_0_and_says_why() -> None:
    nb = _notebook("c", _out(first_answer_record(Q, False)))  # right now, wrong first
    first = first_answers(nb)
    assert first == {"l05-check": FirstAnswer(False)}
    assert grade_answers(nb, first) == {"l05-check": False}
    assert "first answer was not the right option" in nb.cells[1].outputs[0]["evalue"]


def test_autograde_scores_the_letter_after_a_right_first_attempt_or_without_a_record() -> None:
    for outputs in (_out(first_answer_record(Q, True)), []):
        nb = _notebook("c", outputs)
        assert grade_answers(nb, first_answers(nb)) == {"l05-check": True}
    nb = _notebook("a", _out(first_answer_record(Q, True)))  # right first, then changed to a wrong letter: the letter
    assert grade_answers(nb, first_answers(nb)) == {"l05-check": False}


# --- in a class: the key withheld, the first answer signed and kept beside the notebook ------------------------

SECRET = "class-secret-the-learners-never-see"


class _Learner:
    """One learner's kernel in a class: their key in the environment, their own assignment folder and progress."""

    def __init__(self, name: str, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.name, self.folder, self._mp = name, root / name, monkeypatch
        self.folder.mkdir()

    def check(self, letter: str, *, key: bool = True) -> dict[str, Any]:
        """Run the graded check cell with ``letter`` in the answers cell: the output's MIME bundle."""
        self._mp.chdir(self.folder)
        self._mp.setenv("SANDBOX_LAB_PROGRESS", str(self.folder / "progress.json"))
        if key:
            self._mp.setenv(CLASS_KEY_ENV, learner_key(SECRET, self.name))
        else:  # the learner switches the class off in their own kernel
            self._mp.delenv(CLASS_KEY_ENV, raising=False)
        return _bundle(graded(Q, letter))

    def submit(self, letter: str, bundle: Any = None) -> tuple[bool, str]:
        """Submit a notebook with ``letter`` (and the check's output, or none): autograde's score and what it said."""
        outputs = [] if bundle is None else [{"output_type": "execute_result", "execution_count": 1, "metadata": {}, "data": bundle}]
        nb = _notebook(letter, outputs)
        first = first_answers(nb, folder=self.folder, student=self.name, secret=SECRET)
        score = grade_answers(nb, first)["l05-check"]
        out = nb.cells[1].outputs[0]
        return score, str(out.get("evalue") or out.get("text"))

    @property
    def ledger(self) -> Path:
        return self.folder / LEDGER


@pytest.fixture()
def alice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> _Learner:
    return _Learner("alice", tmp_path, monkeypatch)


@pytest.fixture()
def bob(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> _Learner:
    return _Learner("bob", tmp_path, monkeypatch)


def test_in_a_class_the_check_withholds_the_key_and_says_the_answer_is_recorded(alice: _Learner) -> None:
    page = alice.check("a")["text/html"]
    assert "recorded" in page and "first answer is the one graded" in page
    for leak in ("Model answer", "Not quite", "Right", "course source", "POST them"):
        assert leak not in page, leak
    again = alice.check("c")["text/html"]  # the right letter now: still nothing of right or wrong
    assert "Right" not in again and "Model answer" not in again and "recorded earlier" in again


def test_self_paced_feedback_stays_immediate(tmp_path: Path) -> None:
    page = _bundle(graded(Q, "a"))["text/html"]
    assert "Not quite" in page and "Model answer" in page


def test_honest_answers_score_as_given(alice: _Learner, bob: _Learner) -> None:
    assert alice.submit("c", alice.check("c")) == (True, f"{Q}: right (checked by Sandbox Lab outside your kernel).\n")
    score, said = bob.submit("a", bob.check("a"))
    assert score is False and "first answer was not the right option" in said


def test_clearing_outputs_and_editing_the_letter_leaves_the_first_answer_counted(alice: _Learner) -> None:
    alice.check("a")  # wrong first
    alice.check("c")  # the right letter, learnt elsewhere
    score, said = alice.submit("c", bundle=None)  # outputs cleared: the ledger still holds the first answer
    assert score is False and "first answer was not the right option" in said
    assert len(alice.ledger.read_text().splitlines()) == 1  # the second run appended nothing


def test_deleting_the_progress_file_and_answering_again_does_not_replace_the_first(alice: _Learner) -> None:
    alice.check("a")
    (alice.folder / "progress.json").unlink()
    bundle = alice.check("c")  # a fresh "first" attempt on the board, but the ledger's first stays
    assert alice.submit("c", bundle)[0] is False


def test_a_classmates_record_is_not_trusted(alice: _Learner, bob: _Learner) -> None:
    alice.check("a")
    bundle = bob.check("c")  # bob was right the first time
    alice.ledger.write_text(bob.ledger.read_text())  # alice copies bob's record over hers
    score, said = alice.submit("c")
    assert score is False and "no trustworthy first answer" in said and "another learner" in said
    score, said = alice.submit("c", bundle)  # or his output, pasted into her notebook
    assert score is False and "no trustworthy first answer" in said


def test_a_record_forged_by_hand_is_not_trusted(alice: _Learner) -> None:
    bundle = alice.check("a")
    alice.ledger.write_text(alice.ledger.read_text().replace('"first_solved": false', '"first_solved": true'))
    assert '"first_solved": true' in alice.ledger.read_text()
    score, said = alice.submit("c")
    assert score is False and "altered" in said
    forged = json.loads(json.dumps(bundle))
    forged[FIRST_ANSWER_MIME]["first_solved"] = True
    alice.ledger.unlink()
    score, said = alice.submit("c", forged)  # the output edited in the .ipynb instead
    assert score is False and "altered" in said


def test_a_deleted_record_scores_0_and_says_why(alice: _Learner) -> None:
    alice.check("a")
    alice.ledger.unlink()
    score, said = alice.submit("c")  # outputs cleared too: nothing left
    assert score is False and "no trustworthy first answer" in said and LEDGER in said
    alice.ledger.write_text("")
    assert alice.submit("c")[0] is False
    alice.ledger.write_text("{not json\n")
    score, said = alice.submit("c")
    assert score is False and "line 1 is not a record" in said


def test_the_ledger_kept_but_the_output_deleted_still_counts_the_first(alice: _Learner) -> None:
    bundle = alice.check("c")
    alice.ledger.unlink()  # the output alone carries a signed record
    assert alice.submit("c", bundle)[0] is True


def test_a_linked_ledger_is_never_followed(alice: _Learner, bob: _Learner) -> None:
    bob.check("c")
    alice.check("c")
    alice.ledger.unlink()
    alice.ledger.symlink_to(bob.ledger)
    score, said = alice.submit("c")
    assert score is False and "link" in said


def test_switching_the_class_off_to_see_the_key_is_caught(alice: _Learner) -> None:
    shown = alice.check("a", key=False)  # no class key: the self-paced check shows the key
    assert "Model answer" in shown["text/html"]
    score, said = alice.submit("c", shown)  # submitted with that output: it was unsigned
    assert score is False and "without the class key" in said
    assert alice.submit("c")[0] is False  # outputs cleared: no signed record at all


def test_a_second_cell_checking_the_same_answer_cannot_outvote_an_untrusted_one(alice: _Learner) -> None:
    bundle = alice.check("c")
    nb = _notebook("c", [{"output_type": "execute_result", "execution_count": 1, "metadata": {}, "data": bundle}])
    dup = json.loads(json.dumps(nb.cells[1]))
    dup["outputs"][0]["data"][FIRST_ANSWER_MIME]["mac"] = "0" * 64
    nb.cells.append(nbformat.from_dict(dup))
    first = first_answers(nb, folder=alice.folder, student="alice", secret=SECRET)
    assert first["l05-check"].solved is None


def test_the_ledger_is_judged_by_its_cause_never_by_the_words_of_why(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A ledger that is there but refused is a problem even if its reason starts with "no "; an absent one is none."""
    from grader.grading import answers
    from grader.grading.submission import SubmittedFile

    seen: list[str] = []
    monkeypatch.setattr(answers, "judge_class_answer", lambda asked, outputs, records, problem, key: seen.append(problem) or FirstAnswer(True))
    nb = _notebook("c", [])
    monkeypatch.setattr(answers, "read_submitted", lambda folder, name: SubmittedFile(None, "refused", "no link is followed"))
    answers.first_answers(nb, folder=tmp_path, student="s", secret=SECRET)
    monkeypatch.setattr(answers, "read_submitted", lambda folder, name: SubmittedFile(None, "absent", "Nothing was handed in"))
    answers.first_answers(nb, folder=tmp_path, student="s", secret=SECRET)
    assert seen == ["no link is followed", ""]
