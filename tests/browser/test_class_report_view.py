"""The class report as an instructor sees it: its HTML opened in Chromium, the charts drawn, a screenshot kept.

A 200-submission class (bench/batch.py's generator) is graded with the static backend, ``class-report``'s HTML
is opened from disk in Debian's Chromium, and the bars of the pass-rate chart are measured on screen: one bar per
rubric check, a check every student passed drawn longer than the weakest. The screenshot goes to
``artifacts/screenshots/class-report.png`` (gitignored) for a person to look at.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from grader.backends.static import StaticBackend
from grader.grading.batch import grade_batch
from grader.grading.class_report import build_report, load_gradebook, render_html
from grader.grading.tasks import load_task
from labdriver import ROOT, chromium, require_browser

sys.path.insert(0, str(ROOT / "bench"))
import batch as bench  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow]
SHOTS = ROOT / "artifacts" / "screenshots"
TASK = "fix-the-naive-setup"


def test_class_report_charts_render_in_chromium(tmp_path: Path) -> None:
    require_browser()
    bench.make_class(tmp_path / "subs", 200, TASK)
    grade_batch(load_task(TASK), tmp_path / "subs", StaticBackend(), out=tmp_path / "out")
    report = build_report(load_gradebook(tmp_path / "out" / "gradebook.json"))
    page_file = tmp_path / "class-report.html"
    page_file.write_text(render_html(report), encoding="utf-8")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with chromium(tmp_path / "profile") as context:
        page = context.new_page()
        page.goto(page_file.as_uri())
        widths = {}
        for check in report.checks:
            box = page.locator(f'[id="check-{check["id"]}"]').bounding_box()
            assert box is not None and box["height"] > 0, check["id"]
            widths[check["id"]] = box["width"]
        for text in ("Pass rate per rubric check", "Attacks that got through"):
            assert page.get_by_text(text).count() >= 1, text
        page.screenshot(path=str(SHOTS / "class-report.png"), full_page=True)
    best = max(report.checks, key=lambda c: c["rate"])
    worst = min(report.checks, key=lambda c: c["rate"])
    assert widths[best["id"]] > widths[worst["id"]] > 0
    assert (SHOTS / "class-report.png").stat().st_size > 10_000
