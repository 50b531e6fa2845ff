"""The class report on a 200-submission class (bench/batch.py's generator), graded with the static backend."""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from endless import OFFERED, endless_pipe
from grader.backends.static import StaticBackend
from grader.cli import main as cli
from grader.grading.batch import grade_batch
from grader.grading.class_report import LESSONS, WEAK, ClassReportError, build_report, load_gradebook, render_html
from grader.grading.tasks import all_tasks, load_task

REPO = Path(__file__).parents[3]
sys.path.insert(0, str(REPO / "bench"))
import batch as bench  # noqa: E402

TASK = "fix-the-naive-setup"
SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    root = tmp_path_factory.mktemp("class")
    kinds = bench.make_class(root / "subs", 200, TASK)
    grade_batch(load_task(TASK), root / "subs", StaticBackend(), out=root / "out")
    return root / "out" / "gradebook.json", kinds


def test_figures_of_a_200_submission_class(graded: tuple[Path, dict[str, int]]) -> None:
    path, kinds = graded
    book = load_gradebook(path)
    report = build_report(book)
    assert report.students == 200 and sum(report.counts.values()) == 200
    assert report.counts["invalid"] == kinds["broken-json"] + kinds["invalid"]
    ok = [r for r in book.rows if r.status == "ok"]
    for c in report.checks:  # the pass rate is the rows', recomputed here
        passed = sum(ch.passed for r in ok for ch in r.checks if ch.id == c["id"])
        assert c["passed"] == passed and c["graded"] == len(ok) and c["weak"] == (passed / len(ok) < WEAK)
    # identical policies: the reference in its many spellings, the naive setup, the seed's "secure" setup
    sizes = sorted((len(g["students"]) for g in report.groups if g["kind"] == "identical"), reverse=True)
    # (an individual attempt may coincide with the seed's setup: that group is at least as big)
    assert sizes[:2] == [kinds["reference"], kinds["naive"]] and sizes[2] >= kinds["seed-secure"]
    # the naive setup's write to the home is the over-grant, named by its rule and by what it exposes
    rules = {x["rule"]: x["students"] for x in report.rules}
    assert rules['allowWrite "/home/user"'] == kinds["naive"]
    harms = {(x["path"], x["how"]): x for x in report.harms}
    assert harms[("/home/user/.ssh/id_rsa", "readable")]["story"].startswith("The key to every server")
    leaks = {x["probe"]: x["students"] for x in report.leaks}
    # srt keeps ~/.bashrc read-only (started in the home); its own settings file is not protected
    assert leaks["write-sandbox-settings"] >= kinds["naive"] and "write-shell-rc" not in leaks and "read-ssh-key" in leaks
    # what the reference solution leaks too is accepted by the rubric, not an over-grant
    assert "exfil-via-allowed-domain" in report.accepted["probes"] and "exfil-via-allowed-domain" not in leaks
    assert 'allowedDomains "registry.npmjs.org"' not in rules
    for spot in report.weak_spots:
        assert spot["lesson"] and (REPO / "lessons" / spot["lesson"]).is_dir()
    data = json.loads(json.dumps(report.to_json()))
    assert set(data["over_grants"]) == {"by_rule", "by_harm"} and data["definitions"]["near_identical"]


def test_chart_svg_has_a_bar_and_a_label_per_check(graded: tuple[Path, dict[str, int]], tmp_path: Path) -> None:
    report = build_report(load_gradebook(graded[0]))
    page = render_html(report)
    svgs = re.findall(r"<svg.*?</svg>", page, flags=re.S)
    assert len(svgs) == 2, "pass rates and leaks"
    checks = ET.fromstring(svgs[0])
    bars = {g.get("id"): g for g in checks.iter(f"{SVG}g") if (g.get("id") or "").startswith("check-")}
    assert set(bars) == {f"check-{c['id']}" for c in report.checks}
    texts = {"".join(t.itertext()).strip() for t in checks.iter(f"{SVG}text")}
    assert {c["id"] for c in report.checks} <= texts and "Pass rate per rubric check" in texts
    # a full bar is longer than a weak one: the bar's path spans its width
    def width(gid: str) -> float:
        d = bars[gid].find(f"{SVG}path").get("d")  # type: ignore[union-attr]
        xs = [float(x) for x in re.findall(r"([-\d.]+) [-\d.]+", d or "")]
        return max(xs) - min(xs)
    best = max(report.checks, key=lambda c: c["rate"])
    worst = min(report.checks, key=lambda c: c["rate"])
    assert width(f"check-{best['id']}") > width(f"check-{worst['id']}") > 0
    leaks = ET.fromstring(svgs[1])
    assert {"".join(t.itertext()).strip() for t in leaks.iter(f"{SVG}text")} >= {x["probe"] for x in report.leaks}


def test_cli_writes_html_and_json(graded: tuple[Path, dict[str, int]], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["class-report", str(graded[0].parent), "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == cli.EXIT_OK and "Traceback" not in out + err and "weak spots:" in err
    assert (tmp_path / "class-report.html").read_text().startswith("<!doctype html>")
    assert json.loads((tmp_path / "class-report.json").read_text())["students"] == 200


@pytest.mark.parametrize("mangle, pointer", [
    (lambda d: d["rows"][3].update(score="12"), "/rows/3/score"),
    (lambda d: d["rows"][0]["checks"][1].pop("passed"), "/rows/0/checks/1/passed"),
    (lambda d: d.pop("task"), "/task"),
    (lambda d: d["rows"][5].update(status="great"), "/rows/5/status"),
])
def test_a_malformed_gradebook_names_the_json_path(graded: tuple[Path, dict[str, int]], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str], mangle: object, pointer: str) -> None:
    data = json.loads(graded[0].read_text())
    ok = next(i for i, r in enumerate(data["rows"]) if r["status"] == "ok")
    data["rows"][0], data["rows"][ok] = data["rows"][ok], data["rows"][0]
    mangle(data)  # type: ignore[operator]
    bad = tmp_path / "gradebook.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ClassReportError) as info:
        load_gradebook(bad)
    assert pointer in str(info.value)
    code = cli.main(["class-report", str(bad)])
    out, err = capsys.readouterr()
    assert code == 2 and pointer in err and "Traceback" not in out + err


def test_not_json_and_missing_are_errors_not_tracebacks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "gradebook.json").write_text("{not json")
    assert cli.main(["class-report", str(tmp_path)]) == 2
    assert "not valid JSON (Expecting property name enclosed in double quotes, line 1 column 2)" in capsys.readouterr().err
    assert cli.main(["class-report", str(tmp_path / "nope.json")]) == 2
    assert "there is no such file" in capsys.readouterr().err


def test_a_policy_changed_since_grading_is_not_analysed(tmp_path: Path) -> None:
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "ana.json").write_text(json.dumps(bench.NAIVE))
    grade_batch(load_task(TASK), subs, StaticBackend(), out=tmp_path / "out")
    (subs / "ana.json").write_text(json.dumps(bench.SEED_SECURE))  # a learner's later edit must not be reported
    report = build_report(load_gradebook(tmp_path / "out" / "gradebook.json"))
    assert report.leaks == [] and report.not_analysed[0]["student"] == "ana"
    assert "changed since it was graded" in report.not_analysed[0]["why"]


def test_a_policy_file_that_became_a_pipe_or_a_link_is_not_analysed_and_not_read(tmp_path: Path) -> None:
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "ana.json").write_text(json.dumps(bench.NAIVE))
    grade_batch(load_task(TASK), subs, StaticBackend(), out=tmp_path / "out")
    (subs / "ana.json").unlink()
    with endless_pipe(subs / "ana.json") as pipe:
        report = build_report(load_gradebook(tmp_path / "out" / "gradebook.json"))
        taken = pipe.taken()
    assert report.not_analysed[0]["student"] == "ana" and taken < OFFERED, (report.not_analysed, taken)
    assert "now a pipe or a device, not the file that was graded" in report.not_analysed[0]["why"]
    (subs / "ana.json").symlink_to(tmp_path / "out" / "gradebook.json")
    report = build_report(load_gradebook(tmp_path / "out" / "gradebook.json"))
    assert "now a symbolic link, not the file that was graded" in report.not_analysed[0]["why"]


def test_every_check_of_every_task_has_a_lesson() -> None:
    ids = {c.id for t in all_tasks() for c in t.checks}
    assert ids <= set(LESSONS), ids - set(LESSONS)
    for folder, _ in LESSONS.values():
        assert (REPO / "lessons" / folder).is_dir(), folder


def test_a_row_marked_ok_whose_file_is_no_policy_is_not_analysed(tmp_path: Path) -> None:
    import hashlib

    bad = tmp_path / "x.json"
    bad.write_text("{not a policy")
    book = {"task": TASK, "max_score": 10, "backend": "static", "rows": [
        {"student": "zed", "score": 10, "max_score": 10, "status": "ok", "source": str(bad),
         "sha256": hashlib.sha256(bad.read_bytes()).hexdigest(), "checks": []}]}
    (tmp_path / "gradebook.json").write_text(json.dumps(book))
    report = build_report(load_gradebook(tmp_path / "gradebook.json"))
    assert report.not_analysed == [{"student": "zed", "why": f"{bad}: not a valid policy, yet graded ok"}]


def test_the_report_lists_who_relies_on_the_old_allow_list_reading(tmp_path: Path) -> None:
    """An allowRead no denyRead surrounds hides nothing under srt: the class report names who wrote one."""
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "ada.json").write_text(json.dumps({"filesystem": {"denyRead": ["~", "/etc/secrets", "/project"], "allowWrite": ["/app/workspace/build"]},
                                               "network": {"allowedDomains": ["registry.npmjs.org"]}}))
    (subs / "ben.json").write_text(json.dumps({"filesystem": {"allowRead": ["/app/workspace"], "allowWrite": ["/app/workspace/build"]},
                                               "network": {"allowedDomains": ["registry.npmjs.org"]}}))
    (subs / "cy.json").write_text(json.dumps({"filesystem": {"denyRead": ["~", "/etc/secrets", "/project", "/app/workspace"],
                                                             "allowRead": ["/app/workspace"], "allowWrite": ["/app/workspace/build"]},
                                              "network": {"allowedDomains": ["registry.npmjs.org"]}}))
    grade_batch(load_task(TASK), subs, StaticBackend(), out=tmp_path / "out")
    report = build_report(load_gradebook(tmp_path / "out" / "gradebook.json"))
    assert report.allow_read_alone == ["ben"]  # ada hides without allowRead; cy re-opens inside a denyRead
    assert report.to_json()["allow_read_alone"] == ["ben"]
    assert "old allow-list reading" in render_html(report) and "ben" in render_html(report)
