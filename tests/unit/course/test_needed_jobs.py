"""needed_jobs.py: the job probes a job needs, from its task's needs, and boards that count only those.

Lesson 02's secure setup used to read "3 of 5 jobs work": it counted the practice task's jobs
(job-read-src, job-write-out) and pip's (job-fetch-pypi), which the npm build never runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grader.backends.static import StaticBackend
from grader.core.analyzer import predict
from grader.core.policy import load_policy
from grader.core.probes import PROBES
from grader.grading.report import summary
from grader.grading.tasks import all_tasks, load_task
from grader.course.goals import GOALS
from grader.course.needed_jobs import needed_jobs, only_jobs

ROOT = Path(__file__).resolve().parents[3]
NAIVE = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}
SECURE = {"filesystem": {"allowWrite": ["/app/workspace/build"]}, "network": {"allowedDomains": ["registry.npmjs.org"]}}
BUILD = load_task("fix-the-naive-setup")  # lesson 02's npm build, as a task


@pytest.fixture(autouse=True)
def _own_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(tmp_path / "progress.json"))


def test_the_jobs_come_from_the_tasks_needs_and_agree_with_the_lessons_goals() -> None:
    assert needed_jobs(BUILD.needs) == ("job-write-build", "job-fetch-npm") == GOALS["l02-npm-build"].jobs
    assert needed_jobs(load_task("scope-secure-sandbox").needs) == GOALS["l03-safe-container"].jobs
    assert "job-fetch-pypi" in needed_jobs(load_task("pip-install-only").needs)
    every_job = {p.id for p in PROBES if p.kind == "job"}
    for t in all_tasks():
        assert set(needed_jobs(t.needs)) <= every_job, t.id


def test_lesson_02s_secure_setup_counts_the_builds_two_jobs_not_five() -> None:
    secure = predict(load_policy(SECURE))
    assert summary(secure).endswith("3 of 5 jobs work")  # the count as it was: jobs the build never runs
    assert summary(only_jobs(secure, GOALS["l02-npm-build"].jobs)).endswith("2 of 2 jobs work")
    assert summary(only_jobs(predict(load_policy(NAIVE)), needed_jobs(BUILD.needs))).endswith("0 of 2 jobs work")


def test_only_jobs_keeps_every_attack_and_invents_no_job() -> None:
    r = predict(load_policy(SECURE))
    kept = only_jobs(r, ["job-fetch-npm", "no-such-job"])
    assert [p.id for p in kept.probes if p.kind == "attack"] == [p.id for p in r.probes if p.kind == "attack"]
    assert [p.id for p in kept.probes if p.kind == "job"] == ["job-fetch-npm"]
    assert kept.scope == r.scope and kept.findings is r.findings


def test_the_boards_count_the_jobs_they_are_given() -> None:
    pytest.importorskip("ipywidgets")
    from grader.notebook.widgets import PolicyEditor, probe_board, side_by_side

    jobs = GOALS["l02-npm-build"].jobs
    sbs = side_by_side({"naive": NAIVE, "secure": SECURE}, StaticBackend(), jobs=jobs)
    assert "2 of 2 jobs work" in sbs.value and "of 5 jobs" not in sbs.value
    assert "of 5 jobs" in side_by_side({"secure": SECURE}, StaticBackend()).value  # without jobs, as before
    assert "2 of 2 jobs work" in probe_board(SECURE, StaticBackend(), jobs=jobs).value
    editor = PolicyEditor(SECURE, backend=StaticBackend(), goal="l02-npm-build", jobs=jobs)
    editor.probe()
    assert "2 of 2 jobs work" in editor.board.value
    assert editor.last_result is not None and len([p for p in editor.last_result.probes if p.kind == "job"]) == 5  # the goal reads the whole run


def test_lesson_02_counts_only_the_builds_jobs_on_every_board() -> None:
    text = (ROOT / "lessons" / "02-naive-vs-secure" / "naive-vs-secure.md").read_text(encoding="utf-8")
    calls = re.findall(r"^(?:editor = )?(side_by_side|probe_board|PolicyEditor)\((.*)\)$", text, re.M)
    assert len(calls) >= 5
    for name, args in calls:
        assert "jobs=BUILD_JOBS" in args, f"{name}({args})"
    assert 'BUILD_JOBS = goal("l02-npm-build").jobs' in text
