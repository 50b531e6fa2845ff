"""Batch grading: dedupe, broken submissions, CSV input, the journal and resuming (static backend)."""

from __future__ import annotations

import csv
import io
import json
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from grader.backends.static import StaticBackend
from grader.batch import ProgressBar, grade_batch, read_submissions
from grader.errors import BackendError, SandboxLabError
from grader.outcomes import RunResult
from grader.plan import RunPlan
from grader.tasks import load_task
from reference import solution_path

TASK = load_task("fix-the-naive-setup")
SOLUTION = solution_path(TASK.id).read_text()
NAIVE = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}


class Counting:
    """The static backend, counting runs; optionally interrupted or failing after some runs."""

    name = "static"

    def __init__(self, *, interrupt_after: int = -1, fail_on: str = "", lose: str = "") -> None:
        self.runs = 0
        self.interrupt_after = interrupt_after
        self.fail_on = fail_on
        self.lose = lose  # a probe whose evidence this backend loses in every run (outcome "error")
        self._lock = threading.Lock()

    def run(self, plan: RunPlan) -> RunResult:
        with self._lock:
            if self.runs == self.interrupt_after:
                raise KeyboardInterrupt  # what Ctrl-C (or a kill) does to a batch in the middle
            self.runs += 1
        if self.fail_on and plan.policy is not None and self.fail_on in plan.policy.network.allowedDomains:
            raise BackendError("Docker failed during run sl-test: the engine went away")
        r = StaticBackend().run(plan)
        if self.lose:
            r = replace(r, probes=tuple(replace(p, outcome="error", explanation="Cannot tell: http.jsonl: cut off.")
                                        if p.id == self.lose else p for p in r.probes))
        return r


def _class(folder: Path) -> Path:
    """A small class: duplicates in different spellings, distinct policies, broken files."""
    folder.mkdir()
    sol = json.loads(SOLUTION)
    (folder / "ada.json").write_text(SOLUTION)
    # same meaning, other spelling: key order, trailing slash, duplicate entry
    (folder / "ben.json").write_text(json.dumps({
        "network": {"allowedDomains": ["registry.npmjs.org", "REGISTRY.npmjs.org"]},
        "filesystem": {"allowWrite": ["/app/workspace/build/"], "allowRead": sol["filesystem"]["allowRead"]},
    }, indent=4))
    (folder / "cy.json").write_text(json.dumps(sol))
    (folder / "dee.json").write_text(json.dumps(NAIVE))
    (folder / "eve.json").write_text(json.dumps(NAIVE))
    (folder / "fay.json").write_text(json.dumps({"filesystem": {"allowWrite": ["/app/workspace/build"]}, "network": {"allowedDomains": ["registry.npmjs.org"]}}))
    (folder / "gus.json").write_text('{"filesystem": {"allowWrite": [')  # broken JSON
    (folder / "hal.json").write_text('{"network": {"allowedDomains": ["*"]}}')  # valid JSON, invalid policy
    (folder / "ivy.json").symlink_to(folder / "missing-target.json")  # unreadable
    (folder / ".DS_Store").write_text("junk")  # not a submission
    (folder / "notes").mkdir()  # not a submission
    return folder


def _rows(book: object) -> dict[str, dict[str, object]]:
    return {r["student"]: r for r in book.to_json()["rows"]}  # type: ignore[attr-defined]


def test_dedupe_grades_each_distinct_policy_once(tmp_path: Path) -> None:
    subs = _class(tmp_path / "subs")
    backend = Counting()
    book = grade_batch(TASK, subs, backend, workers=3)
    assert backend.runs == 3 == book.runs  # solution (x3 spellings), naive (x2), seed secure
    rows = _rows(book)
    assert sorted(rows) == ["ada", "ben", "cy", "dee", "eve", "fay", "gus", "hal", "ivy"]
    assert {s for s, r in rows.items() if r["score"] == TASK.max_score} == {"ada", "ben", "cy"}
    assert rows["dee"]["score"] == rows["eve"]["score"] < TASK.max_score
    assert "gist.github.com" in str(rows["dee"]["feedback"])

    plain = Counting()
    book2 = grade_batch(TASK, subs, plain, workers=3, dedupe=False)
    assert plain.runs == 6
    assert [(r.student, r.score) for r in book2.rows] == [(r.student, r.score) for r in book.rows]


def test_broken_submissions_become_rows(tmp_path: Path) -> None:
    book = grade_batch(TASK, _class(tmp_path / "subs"), Counting(), workers=2)
    rows = _rows(book)
    assert rows["gus"]["status"] == "invalid" and rows["gus"]["score"] == 0
    assert "invalid JSON" in str(rows["gus"]["feedback"])
    assert rows["hal"]["status"] == "invalid" and "/network/allowedDomains/0" in str(rows["hal"]["feedback"])
    assert rows["ivy"]["status"] == "error" and "cannot read" in str(rows["ivy"]["feedback"])
    assert rows["ada"]["status"] == "ok"
    assert book.counts() == {"ok": 6, "invalid": 2, "error": 1, "full_marks": 3}


def test_backend_failure_is_a_row_not_the_end(tmp_path: Path) -> None:
    subs = _class(tmp_path / "subs")
    book = grade_batch(TASK, subs, Counting(fail_on="*.github.com"), workers=2)
    rows = _rows(book)
    assert rows["dee"]["status"] == rows["eve"]["status"] == "error"
    assert "engine went away" in str(rows["dee"]["feedback"]) and "rerun" in str(rows["dee"]["feedback"])
    assert rows["ada"]["status"] == "ok"


def test_a_grade_that_could_not_be_judged_is_an_error_row_and_is_regraded_on_resume(tmp_path: Path) -> None:
    subs = _class(tmp_path / "subs")
    out = tmp_path / "out"
    lost = next(pid for c in TASK.checks if c.kind == "blocked" for pid in c.probes)
    book = grade_batch(TASK, subs, Counting(lose=lost), out=out)
    rows = _rows(book)
    for student in ("ada", "dee"):  # the reference and the naive policy: neither gets a normal score
        assert rows[student]["status"] == "error", rows[student]
        assert "could not grade" in str(rows[student]["feedback"]) and "http.jsonl: cut off" in str(rows[student]["feedback"])
        assert any(c.get("error") for c in rows[student]["checks"])  # type: ignore[attr-defined]
    assert rows["ada"]["score"] < TASK.max_score and book.counts()["full_marks"] == 0
    with (out / "gradebook.csv").open(newline="") as fh:
        assert {r["student"]: r["status"] for r in csv.DictReader(fh)}["ada"] == "error"
    again = Counting()
    rows = _rows(grade_batch(TASK, subs, again, out=out))
    assert again.runs == 3 and rows["ada"]["status"] == "ok" and rows["ada"]["score"] == TASK.max_score


def test_gradebook_files(tmp_path: Path) -> None:
    out = tmp_path / "out"
    seen: list[tuple[int, int]] = []
    book = grade_batch(TASK, _class(tmp_path / "subs"), Counting(), out=out, progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (9, 9) and len(seen) == 9
    with (out / "gradebook.csv").open(newline="") as fh:
        table = list(csv.DictReader(fh))
    assert list(table[0]) == ["student", "score", "max_score", "status", "feedback"]
    assert [r["student"] for r in table] == [r.student for r in book.rows]
    data = json.loads((out / "gradebook.json").read_text())
    assert data["task"] == TASK.id and len(data["rows"]) == 9
    assert (out / "journal.jsonl").exists()


def test_csv_inputs(tmp_path: Path) -> None:
    (tmp_path / "pol").mkdir()
    (tmp_path / "pol" / "a.json").write_text(SOLUTION)
    paths = tmp_path / "paths.csv"
    paths.write_text("student,policy_path\nann,pol/a.json\nbo,pol/missing.json\n,pol/a.json\n")
    inline = tmp_path / "inline.csv"
    with inline.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["student", "policy_json"])
        w.writerow(["ann", SOLUTION])
        w.writerow(["bo", json.dumps(NAIVE)])
        w.writerow(["cat", "{oops"])
        w.writerow(["ann", "{}"])  # listed twice: an error row, not a guess
    r1 = _rows(grade_batch(TASK, paths, Counting()))
    assert r1["ann"]["score"] == TASK.max_score
    assert r1["bo"]["status"] == "error"
    assert r1["<line 4>"]["status"] == "error"
    r2 = _rows(grade_batch(TASK, inline, Counting()))
    assert r2["bo"]["status"] == "ok" and r2["cat"]["status"] == "invalid"
    assert r2["ann"]["status"] == "error" and "2 submissions" in str(r2["ann"]["feedback"])
    bad = tmp_path / "bad.csv"
    bad.write_text("name,file\nx,y\n")
    with pytest.raises(SandboxLabError, match="student,policy_path"):
        read_submissions(bad)
    with pytest.raises(SandboxLabError, match="no such"):
        read_submissions(tmp_path / "nothing-here")


def _many(folder: Path, n: int) -> Path:
    """n students, each with a distinct valid policy (so each needs its own run)."""
    folder.mkdir()
    for i in range(n):
        pol = {"filesystem": {"allowRead": ["/app/workspace"], "allowWrite": ["/app/workspace/build", f"/app/workspace/tmp{i}"]},
               "network": {"allowedDomains": ["registry.npmjs.org"]}}
        (folder / f"s{i:02d}.json").write_text(json.dumps(pol))
    (folder / "zz-broken.json").write_text("{")
    return folder


def test_killed_batch_resumes_without_regrading(tmp_path: Path) -> None:
    subs = _many(tmp_path / "subs", 12)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        grade_batch(TASK, subs, Counting(interrupt_after=5), workers=2, out=out)
    journal = out / "journal.jsonl"
    first = [json.loads(line)["row"]["student"] for line in journal.read_text().splitlines()]
    assert 5 <= len(first) < 13, first
    assert len(set(first)) == len(first)
    # a kill can cut the last line short: it must be ignored, not crash the resume
    with journal.open("a") as fh:
        fh.write('{"v": 1, "task": "fix-the-naive-')

    again = Counting()
    book = grade_batch(TASK, subs, again, workers=2, out=out)
    graded_first = sum(1 for s in first if s != "zz-broken")
    assert again.runs == 12 - graded_first, "finished rows must not be graded again"
    assert book.resumed == len(first)
    assert [r.student for r in book.rows] == sorted([f"s{i:02d}" for i in range(12)] + ["zz-broken"])
    assert len({r.student for r in book.rows}) == 13
    assert all(r.status == "ok" for r in book.rows if r.student != "zz-broken")
    # a changed file is a new submission: graded again
    (subs / "s00.json").write_text(SOLUTION)
    third = Counting()
    book3 = grade_batch(TASK, subs, third, out=out)
    assert third.runs == 1
    assert _rows(book3)["s00"]["score"] == TASK.max_score


def test_error_rows_are_retried_on_resume(tmp_path: Path) -> None:
    subs = _class(tmp_path / "subs")
    out = tmp_path / "out"
    grade_batch(TASK, subs, Counting(fail_on="*.github.com"), out=out)
    again = Counting()
    rows = _rows(grade_batch(TASK, subs, again, out=out))
    assert again.runs == 1 and rows["dee"]["status"] == "ok"


def test_progress_bar_without_a_terminal() -> None:
    buf = io.StringIO()
    bar = ProgressBar("t", buf, width=10)
    for i in range(1, 101):
        bar(i, 100)
    lines = buf.getvalue().splitlines()
    assert 10 <= len(lines) <= 12
    assert lines[-1].startswith("t [##########] 100/100")
