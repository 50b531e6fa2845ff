"""Batch grading: dedupe, broken submissions, CSV input, the journal and resuming (static backend)."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from grader.cli import main as cli
from grader.backends.static import StaticBackend
from grader.grading.batch import ProgressBar, grade_batch, read_submissions
from grader.core.errors import BackendError, SandboxLabError
from grader.core.outcomes import RunResult
from grader.core.plan import RunPlan
from grader.grading.tasks import load_task
from endless import OFFERED, endless_pipe
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
        "filesystem": {"allowWrite": ["/app/workspace/build/"], "denyRead": sol["filesystem"]["denyRead"]},
    }, indent=4))
    (folder / "cy.json").write_text(json.dumps(sol))
    (folder / "dee.json").write_text(json.dumps(NAIVE))
    (folder / "eve.json").write_text(json.dumps(NAIVE))
    (folder / "fay.json").write_text(json.dumps({"filesystem": {"allowWrite": ["/app/workspace/build"]}, "network": {"allowedDomains": ["registry.npmjs.org"]}}))
    (folder / "gus.json").write_text('{"filesystem": {"allowWrite": [')  # broken JSON
    (folder / "hal.json").write_text('{"network": {"allowedDomains": ["*"]}}')  # valid JSON, invalid policy
    (folder / "ivy.json").symlink_to(folder / "missing-target.json")  # a link (dangling): never followed
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
    assert rows["ivy"]["status"] == "error" and "ivy.json is a symbolic link" in str(rows["ivy"]["feedback"])
    assert rows["ada"]["status"] == "ok"
    assert book.counts() == {"ok": 6, "invalid": 2, "error": 1, "full_marks": 3}


def test_the_summary_counts_each_student_once_in_plain_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Three students, three kinds: the summary says so, and its counts add up to the class (it once read
    "1 full marks, 2 ok, 1 invalid, 0 error" for three students: a full-marks row was counted as ok too)."""
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "alice.json").write_text(SOLUTION)
    (subs / "bob.json").write_text(json.dumps(NAIVE))
    (subs / "carol.json").write_text('{"filesystem": {"allowRead": ["/project/src"]')  # broken JSON
    book = grade_batch(TASK, subs, Counting())
    assert book.tally() == "3 students: 1 full marks, 1 below full marks, 1 invalid policy"
    assert book.summary().startswith(f"{TASK.id}, 3 students: 1 full marks, 1 below full marks, 1 invalid policy (")
    (subs / "dan.json").symlink_to(subs / "alice.json")  # never followed: a row that could not be graded
    (subs / "alice.json").unlink()
    assert grade_batch(TASK, subs, Counting()).tally() == (
        "3 students: 1 below full marks, 1 invalid policy, 1 could not be graded")
    one = tmp_path / "one"
    one.mkdir()
    (one / "bob.json").write_text(json.dumps(NAIVE))
    assert grade_batch(TASK, one, Counting()).tally() == "1 student: 1 below full marks"
    # the command prints it as it is, on stderr
    from grader.cli.main import main

    assert main(["grade-batch", "--task", TASK.id, str(subs), "--out", str(tmp_path / "out"), "--backend", "static"]) == 0
    assert "3 students: 1 below full marks, 1 invalid policy, 1 could not be graded" in capsys.readouterr().err


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


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b'student,policy_json\nJos\xe9,"{}"\n', "byte 23 is not UTF-8; save the file as UTF-8"),  # a spreadsheet's Latin-1 export
        (b'student,policy_json\nann,"' + b"x" * 200_000 + b'"\n', "line 2 is not a CSV line (field larger than field limit"),
    ],
    ids=["latin-1", "field-over-the-csv-limit"],
)
def test_a_csv_that_cannot_be_read_is_an_error_naming_the_file_never_an_internal_error(
    tmp_path: Path, raw: bytes, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    subs = tmp_path / "subs.csv"
    subs.write_bytes(raw)
    with pytest.raises(SandboxLabError) as info:
        read_submissions(subs)
    assert str(info.value).startswith(f"{subs}: {says}"), info.value
    # through the command: exit 2 with the reason, never "internal error" (exit 4, before)
    code = cli.main(["grade-batch", "--task", TASK.id, str(subs), "--out", str(tmp_path / "out"), "--backend", "static"])
    err = capsys.readouterr().err
    assert code == 2 and says in err and "internal error" not in err, err
    assert not (tmp_path / "out" / "gradebook.csv").exists()  # nothing graded from half a file


def test_a_submission_that_is_a_pipe_a_device_or_a_link_is_an_error_row_and_never_read(tmp_path: Path) -> None:
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "ann.json").write_text("{}")
    # a JSON file of the grader's own that a link in a submission (an unpacked archive keeps links) points at
    private = tmp_path / "instructor-only.json"
    private.write_text('{"filesystem": {"allowRead": ["/the-instructors-secret"]}}')
    (subs / "zed.json").symlink_to(private)
    (subs / "dev.json").symlink_to("/dev/zero")
    with endless_pipe(subs / "eve.json") as pipe:  # a FIFO's size says 0: a stat check lets it through
        book = grade_batch(TASK, subs, Counting())
        taken = pipe.taken()
    rows = _rows(book)
    assert rows["ann"]["status"] == "ok" and taken < OFFERED, (rows["ann"], taken)
    assert "eve.json is a pipe or a device, not a policy file" in str(rows["eve"]["feedback"]), rows["eve"]
    for student in ("zed", "dev"):
        assert rows[student]["status"] == "error" and "is a symbolic link, not a policy file" in str(rows[student]["feedback"])
    assert "the-instructors-secret" not in json.dumps(book.to_json())  # a link was followed before: its policy was graded


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
    # the 5th run raises; how many of the 4 before it (and of the broken file's row) the main thread journaled
    # before the interrupt ended the batch depends on the two workers' timing (3 rows were seen under load 10):
    # some, never all, and what follows checks that exactly those are not graded again
    assert 1 <= len(first) < 13, first
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


# --- what decides a stored grade: reuse only an exact match ---------------------------------


class Named(Counting):
    """The static backend under another name (the journal must tell backends apart by name alone)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name


class Harsher(Counting):
    """A backend that disagrees with the static one: every run judged as if the policy were the naive one."""

    name = "docker"

    def run(self, plan: RunPlan) -> RunResult:
        from grader.core.plan import build_plan
        from grader.core.policy import load_policy

        import dataclasses

        return dataclasses.replace(super().run(build_plan(load_policy(NAIVE))), backend="docker")


def _five(folder: Path) -> Path:
    """Five students, five files that all score full marks (graded with dedupe=False: a run each)."""
    folder.mkdir()
    sol = json.loads(SOLUTION)
    for i, student in enumerate(["ada", "ben", "cy", "dee", "eve"]):
        pol = json.loads(json.dumps(sol))
        pol["filesystem"]["allowRead"] = list(pol["filesystem"].get("allowRead", [])) + ["/app/workspace"] * (i > 0)
        (folder / f"{student}.json").write_text(json.dumps(pol, indent=i))  # other bytes, same meaning
    return folder


def test_an_exact_match_is_reused_and_nothing_else_is_run(tmp_path: Path) -> None:
    subs, out = _five(tmp_path / "subs"), tmp_path / "out"
    first = grade_batch(TASK, subs, Counting(), out=out, dedupe=False)
    assert first.runs == 5 and first.resumed == 0 and first.changes == ()
    again = Counting()
    book = grade_batch(TASK, subs, again, out=out, dedupe=False)
    assert again.runs == 0 and book.resumed == 5 and book.changes == ()
    assert [(r.student, r.score) for r in book.rows] == [(r.student, r.score) for r in first.rows]
    line = json.loads((out / "journal.jsonl").read_text().splitlines()[0])
    assert line["v"] == 2 and set(line["grading"]) == {"version", "task", "rubric", "world", "backend"}


def test_another_backend_regrades_every_row_and_names_each_changed_score(tmp_path: Path) -> None:
    subs, out = _five(tmp_path / "subs"), tmp_path / "out"
    static = grade_batch(TASK, subs, Counting(), out=out, dedupe=False)
    assert all(r.score == TASK.max_score for r in static.rows)
    harsher = Harsher()
    book = grade_batch(TASK, subs, harsher, out=out, dedupe=False)
    assert book.resumed == 0 and harsher.runs == 5
    assert all(r.backend == "docker" for r in book.rows)
    assert all(r.score < TASK.max_score for r in book.rows)
    assert [c.student for c in book.changes] == ["ada", "ben", "cy", "dee", "eve"]
    for change, row in zip(book.changes, book.rows):
        assert (change.before, change.after) == (TASK.max_score, row.score)
        assert "backend static → docker" in change.why
        assert f"{change.student}: {TASK.max_score} → {row.score} of {TASK.max_score} ({row.score - TASK.max_score:+d}" in book.summary()
    assert "score changed for 5 student(s)" in book.summary()
    assert json.loads((out / "gradebook.json").read_text())["changes"][0]["delta"] == book.rows[0].score - TASK.max_score
    # same name, same scores: a backend change with nothing to report still regrades
    same = Named("srt")
    book2 = grade_batch(TASK, subs, same, out=out, dedupe=False)
    assert same.runs == 5 and book2.resumed == 0


def test_a_rubric_change_regrades(tmp_path: Path) -> None:
    import dataclasses

    subs, out = _five(tmp_path / "subs"), tmp_path / "out"
    grade_batch(TASK, subs, Counting(), out=out, dedupe=False)
    doubled = dataclasses.replace(TASK, checks=tuple(dataclasses.replace(c, points=2 * c.points) for c in TASK.checks))
    again = Counting()
    book = grade_batch(doubled, subs, again, out=out, dedupe=False)
    assert again.runs == 5 and book.resumed == 0
    assert {(c.before, c.after, c.why) for c in book.changes} == {(TASK.max_score, 2 * TASK.max_score, "rubric")}
    # a reworded fix decides feedback too: regraded, though no score changes
    reworded = dataclasses.replace(doubled, checks=(dataclasses.replace(doubled.checks[0], fix="another fix"), *doubled.checks[1:]))
    third = Counting()
    assert grade_batch(reworded, subs, third, out=out, dedupe=False).changes == () and third.runs == 5


def test_a_version_or_world_change_regrades(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    import grader.core.version

    subs, out = _five(tmp_path / "subs"), tmp_path / "out"
    grade_batch(TASK, subs, Counting(), out=out, dedupe=False)
    monkeypatch.setattr(grader.core.version, "__version__", "99.0.0")
    upgraded = Counting()
    assert grade_batch(TASK, subs, upgraded, out=out, dedupe=False).resumed == 0 and upgraded.runs == 5
    # the world comes with the task (the one its checks were resolved in): another world, another grading
    elsewhere = dataclasses.replace(TASK, world=dataclasses.replace(TASK.world, hosts=TASK.world.hosts[:-1]))
    moved = Counting()
    assert grade_batch(elsewhere, subs, moved, out=out, dedupe=False).resumed == 0 and moved.runs == 5
    settled = Counting()
    assert grade_batch(elsewhere, subs, settled, out=out, dedupe=False).resumed == 5 and settled.runs == 0


def test_regrade_reuses_nothing(tmp_path: Path) -> None:
    subs, out = _five(tmp_path / "subs"), tmp_path / "out"
    grade_batch(TASK, subs, Counting(), out=out, dedupe=False)
    forced = Counting()
    book = grade_batch(TASK, subs, forced, out=out, dedupe=False, regrade=True)
    assert forced.runs == 5 and book.resumed == 0 and book.changes == ()


def test_a_version_1_journal_is_compared_with_never_reused(tmp_path: Path) -> None:
    subs, out = _five(tmp_path / "subs"), tmp_path / "out"
    out.mkdir()
    sha = hashlib.sha256((subs / "ada.json").read_bytes()).hexdigest()
    old = {"student": "ada", "score": 1, "max_score": TASK.max_score, "status": "ok", "feedback": "", "sha256": sha, "backend": "static"}
    (out / "journal.jsonl").write_text(json.dumps({"v": 1, "task": TASK.id, "row": old}) + "\n")
    runs = Counting()
    book = grade_batch(TASK, subs, runs, out=out, dedupe=False)
    assert runs.runs == 5 and book.resumed == 0
    assert [(c.student, c.before, c.after) for c in book.changes] == [("ada", 1, TASK.max_score)]
    assert "earlier version" in book.changes[0].why


def test_a_killed_regrade_still_names_the_changes_of_resumed_rows(tmp_path: Path) -> None:
    subs, out = _five(tmp_path / "subs"), tmp_path / "out"
    grade_batch(TASK, subs, Counting(), out=out, dedupe=False)
    killed = Harsher()
    killed.interrupt_after = 2
    with pytest.raises(KeyboardInterrupt):
        grade_batch(TASK, subs, killed, out=out, dedupe=False, workers=1)
    rerun = Harsher()
    book = grade_batch(TASK, subs, rerun, out=out, dedupe=False, workers=1)
    assert 0 < book.resumed < 5 and rerun.runs == 5 - book.resumed
    assert [c.student for c in book.changes] == ["ada", "ben", "cy", "dee", "eve"]


def test_grade_batch_cli_regrade_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from grader.cli.main import main

    subs, out = _five(tmp_path / "subs"), tmp_path / "out"
    argv = ["grade-batch", "--task", TASK.id, str(subs), "--out", str(out), "--backend", "static", "--json"]
    assert main(argv) == 0
    capsys.readouterr()
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["resumed"] == 5
    assert main([*argv, "--regrade"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["resumed"] == 0 and again["runs"] >= 1 and again["changes"] == []


# --- no submission can stop a class (issue 39) ---------------------------------------------------------


def _poisoned_class(folder: Path) -> Path:
    """Two honest students and one poisoned submission of each kind."""
    folder.mkdir()
    (folder / "ada.json").write_text(SOLUTION)
    (folder / "bob.json").write_text(json.dumps(NAIVE))
    (folder / "p-surrogate-path.json").write_text('{"filesystem": {"denyRead": ["/a\\ud800"]}}')
    (folder / "p-surrogate-key.json").write_text('{"filesystem": {"denyRead": ["/a"], "\\ud800": []}}')
    (folder / "p-nul.json").write_text('{"network": {"allowedDomains": ["registry.npmjs.org\\u0000.evil"]}}')
    (folder / "p-wildcards.json").write_text(json.dumps({"network": {"allowedDomains": [f"*.d{i}.example.com" for i in range(1000)]}}))
    theirs = folder.parent / "classmate.json"
    theirs.write_text(SOLUTION)
    os.link(theirs, folder / "p-hardlink.json")
    (folder / "p-symlink.json").symlink_to(theirs)
    os.mkfifo(folder / "p-fifo.json")
    (folder / os.fsdecode(b"p-latin1-\xe9.json")).write_text("{}")  # a file name that is not UTF-8
    return folder


def test_a_class_with_one_poisoned_submission_of_each_kind_is_graded_whole(tmp_path: Path) -> None:
    subs = _poisoned_class(tmp_path / "subs")
    out = tmp_path / "out"
    book = grade_batch(TASK, subs, Counting(), out=out)
    rows = _rows(book)
    assert rows["ada"]["status"] == "ok" and rows["ada"]["score"] == TASK.max_score
    assert rows["bob"]["status"] == "ok"
    expect = {
        "p-surrogate-path": ("invalid", "/filesystem/denyRead/0: holds a lone surrogate (\\ud800)"),
        "p-surrogate-key": ("invalid", "/filesystem/\\ud800: this key holds a lone surrogate"),
        "p-nul": ("invalid", "/network/allowedDomains/0: holds a NUL"),
        "p-wildcards": ("invalid", "/network/allowedDomains: 1000 entries; Sandbox Lab runs at most 100 "),
        "p-hardlink": ("error", "p-hardlink.json is a hard link (one of 2 names of the same file)"),
        "p-symlink": ("error", "p-symlink.json is a symbolic link"),
        "p-fifo": ("error", "p-fifo.json is a pipe or a device"),
    }
    for student, (status, words) in expect.items():
        assert rows[student]["status"] == status and words in str(rows[student]["feedback"]), rows[student]
        assert rows[student]["score"] == 0
    assert rows["p-latin1-\\udce9"]["status"] == "ok"  # the name is shown escaped; the student is graded
    # the gradebook is written, every student in it, as UTF-8 (a lone surrogate in it could not be)
    text = (out / "gradebook.csv").read_text(encoding="utf-8")
    assert len(list(csv.DictReader(io.StringIO(text)))) == len(rows) == 10
    assert json.loads((out / "gradebook.json").read_text(encoding="utf-8"))["counts"]["ok"] == 3
    assert not list(out.glob("*.tmp"))
    # a rerun on the journal works and reuses every graded row
    again = Counting()
    book2 = grade_batch(TASK, subs, again, out=out)
    assert again.runs == 0 and _rows(book2) == rows


def test_a_fault_grading_one_submission_is_its_error_row_and_says_a_rerun_will_not_help(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import grader.grading.batch as batch

    real = batch.grade

    def grade_or_fault(task, policy, backend, *args, **kwargs):  # type: ignore[no-untyped-def]
        result = real(task, policy, backend, *args, **kwargs)
        if getattr(policy, "network", None) is not None and "*.github.com" in policy.network.allowedDomains:
            return replace(result, checks=None)  # a grade the row cannot be made from: a bug, on this policy only
        return result

    monkeypatch.setattr(batch, "grade", grade_or_fault)
    subs = _class(tmp_path / "subs")
    book = grade_batch(TASK, subs, Counting(), out=tmp_path / "out")
    rows = _rows(book)
    assert rows["ada"]["status"] == "ok"
    for student in ("dee", "eve"):
        assert rows[student]["status"] == "error" and rows[student]["score"] == 0
        assert "the grader failed (TypeError" in str(rows[student]["feedback"])
        assert "rerunning will fail the same way" in str(rows[student]["feedback"])
    assert (tmp_path / "out" / "gradebook.csv").is_file()


def test_a_journal_row_that_holds_what_utf8_cannot_is_written_escaped(tmp_path: Path) -> None:
    """A journal written before the text boundary may hold a lone surrogate: the rerun writes the gradebook."""
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "ann.json").write_text(SOLUTION)
    out = tmp_path / "out"
    grade_batch(TASK, subs, Counting(), out=out)
    journal = out / "journal.jsonl"
    line = json.loads(journal.read_text().splitlines()[0])
    line["row"]["feedback"] = "denyRead /a\ud800 ..."
    journal.write_text(json.dumps(line) + "\n")
    book = grade_batch(TASK, subs, Counting(), out=out)
    assert book.resumed == 1 and "/a\\ud800" in book.rows[0].feedback
    assert "/a\\\\ud800" in (out / "gradebook.csv").read_text(encoding="utf-8").replace("\\", "\\\\")


def test_grade_batch_cli_finishes_a_poisoned_class(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    subs = _poisoned_class(tmp_path / "subs")
    code = cli.main(["grade-batch", str(subs), "--task", TASK.id, "--backend", "static", "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 0, captured
    assert "10 students" in captured.err and (tmp_path / "out" / "gradebook.csv").is_file()
