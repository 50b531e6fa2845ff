"""What a class got wrong: the class report over a ``grade-batch`` gradebook (``sandbox-lab class-report``).

Reads ``gradebook.json`` (``batch.Gradebook.to_json``) strictly: a malformed
file is a ``ClassReportError`` naming each JSON path, never a traceback. Each
graded row's policy is read back from its ``source`` file, but only when the
file's SHA-256 is the one graded (else the row counts as *not analysed*, with
the reason), and predicted once per distinct policy with the static analysis
(``analyzer.predict``) against the world. An nbgrader course is read into the
same shape by ``nbgrader_book`` (its rows' policies handed in, read from the
autograded notebooks; the roster's students without a submission listed as
*missing*). The report holds:

- **pass rate per rubric check**: the share of rows graded ``ok`` that passed
  it (invalid and error rows are counted apart, never as failures of a check);
- **probes that leaked**: attack probes the prediction says succeed, by how
  many students; a leak (and a rule) that every full-marks policy of the class
  has too is accepted by the task's rubric (an npm build must reach the
  registry, which also takes ``npm publish``): listed apart, not counted;
- **over-grants by rule**: a *rule* is one policy entry (``allowWrite
  "/home/user"``, ``allowedDomains "*.github.com"``) that the explanation of a
  succeeded attack names as what allowed it; counted once per student;
- **over-grants by harm**: the world's files a policy exposes, in the world's
  own words (``world.json``'s ``label`` and ``story``): secrets and
  credentials readable, start-up/persistence files writable;
- **groups of policies**: *identical* = the same canonical JSON
  (``Policy.canonical_json``: key order, spelling of paths and duplicates
  normalised); *near-identical* = different canonical JSON but exactly the
  same scope in the world (the same files readable, the same files writable,
  the same hosts reachable), so they behave the same under every probe;
- **the lesson for each weak spot**: ``LESSONS`` maps every rubric check to
  the lesson of ``lessons/`` that teaches it (a test keeps it complete for
  every task); a check passed by fewer than ``WEAK`` of the class is a weak
  spot.

Rendered as JSON (``to_json``) and as one HTML page whose charts are drawn by
matplotlib with the Agg backend (no display) and inlined as SVG, text kept as
``<text>`` so the labels can be checked.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Optional, Sequence

from pydantic import BaseModel, ConfigDict, ValidationError

from grader.core.analyzer import predict
from grader.core.capped import NotRegular, TooLarge, read_regular
from grader.core.errors import SandboxLabError, json_pointer
from grader.core.jsonfile import JsonFileError, read_json_file
from grader.core.policy import LIMITS, load_policy
from grader.realtools.srt_notes import srt_differences
from grader.core.world import World, load_world

__all__ = ["LESSONS", "WEAK", "ClassReport", "ClassReportError", "build_report", "load_gradebook", "parse_gradebook",
           "render_html"]

WEAK = 0.8  # a check passed by fewer than 80 % of the graded rows is a weak spot
TOP = 10  # rows shown per ranking

# rubric check → (lesson folder, what there teaches it). Every check of every task is here (test_class_report).
LESSONS: dict[str, tuple[str, str]] = {
    **{c: ("02-naive-vs-secure", "scope each axis while the job still runs")
       for c in ("job-works", "build-works", "pip-works", "project-works", "agent-edits-project")},
    **{c: ("03-container-alone", "a container alone is not a sandbox: scope what can be read")
       for c in ("secrets-unreadable", "dotenv-unreadable", "rest-unreadable", "nothing-else-readable", "least-read")},
    **{c: ("02-naive-vs-secure", "writable start-up files, hooks and sources run later, outside the sandbox")
       for c in ("no-persistence", "home-read-only", "no-git-hook", "source-untouched", "least-write")},
    **{c: ("04-trusted-domains", "a trusted domain is not a safe domain: uploads and exfiltration")
       for c in ("no-network", "network-scoped", "no-uploads", "no-secret-leaves", "allowed-domains-empty",
                 "least-network")},
}
_RULE = re.compile(r'\b(allowRead|denyRead|allowWrite|denyWrite|allowedDomains|deniedDomains) "([^"]+)"')


class ClassReportError(SandboxLabError, ValueError):
    """A gradebook the class report cannot read: every problem with its JSON path."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        # one line: the CLI prints an error's first line only
        super().__init__(f"{source} is not a gradebook written by grade-batch ({len(problems)} problem(s): "
                         + "; ".join(problems)
                         + "). Regenerate it with `sandbox-lab grade-batch --task ID DIR --out OUT` and pass OUT/gradebook.json.")


# --- the gradebook as read ------------------------------------------------------------------


class _Check(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    id: str
    points: int
    max_points: int
    passed: bool


class _Row(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    student: str
    score: int
    max_score: int
    status: Literal["ok", "invalid", "error"]
    source: str = ""
    sha256: str = ""
    checks: list[_Check] = []


class _Book(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    task: str
    max_score: int
    backend: str
    rows: list[_Row]
    missing: list[str] = []  # students of the roster without a submission (nbgrader; grade-batch has none)


def load_gradebook(path: Path) -> _Book:
    """``gradebook.json`` parsed strictly; ``ClassReportError`` names every JSON path that is wrong."""
    try:
        data = read_json_file(path)
    except JsonFileError as exc:
        raise ClassReportError(str(path), [str(exc)]) from None
    return parse_gradebook(data, str(path))


def parse_gradebook(data: Any, source: str) -> _Book:
    """A gradebook's JSON value parsed strictly; ``ClassReportError`` names ``source`` and every JSON path wrong."""
    try:
        return _Book.model_validate(data)
    except ValidationError as exc:
        problems = [f"{json_pointer(tuple(e['loc'])) or '/'}: {e['msg']}" for e in exc.errors()]
        raise ClassReportError(source, problems) from None


# --- the report -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ClassReport:
    """Everything the instructor sees, as plain data (``to_json``)."""

    task: str
    students: int
    counts: dict[str, int]
    checks: list[dict[str, Any]]  # id, passed, graded, rate, lesson, weak
    leaks: list[dict[str, Any]]  # probe, students
    rules: list[dict[str, Any]]  # rule, students
    harms: list[dict[str, Any]]  # path, label, story, how, students
    groups: list[dict[str, Any]]  # kind, students, policy (identical: its canonical JSON)
    weak_spots: list[dict[str, Any]]  # check, rate, lesson, why
    not_analysed: list[dict[str, str]] = field(default_factory=list)  # student, why
    missing: list[str] = field(default_factory=list)  # students of the roster without a submission
    accepted: dict[str, list[str]] = field(default_factory=dict)  # probes and rules every full-marks policy has too
    # students whose policy relies on the old allow-list reading: an allowRead no denyRead surrounds, secrets readable
    allow_read_alone: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.task, "students": self.students, "counts": self.counts, "checks": self.checks,
            "leaks": self.leaks, "over_grants": {"by_rule": self.rules, "by_harm": self.harms},
            "groups": self.groups, "weak_spots": self.weak_spots, "not_analysed": self.not_analysed,
            "missing": self.missing,
            "accepted_by_the_rubric": self.accepted,
            "allow_read_alone": self.allow_read_alone,
            "definitions": {
                "weak_spot": f"a rubric check passed by fewer than {WEAK:.0%} of the rows graded ok",
                "rule": "a policy entry that a succeeded attack's explanation names as what allowed it",
                "accepted": "leaks and rules every full-marks policy has too: the task accepts them, not counted above",
                "harm": "a world file a policy exposes: a secret or credential readable, a persistence file writable",
                "identical": "the same canonical JSON",
                "near_identical": "different canonical JSON, the same files readable and writable and hosts reachable",
                "missing": "a student of the roster with no graded submission: scores 0, counted in no check",
                "allow_read_alone": ("a student whose allowRead no denyRead surrounds, with secrets still readable: "
                                     "under srt an allowRead alone hides nothing (hide with denyRead, re-open with allowRead)"),
            },
        }


def _read_policy(row: _Row) -> tuple[Optional[bytes], str]:
    if not row.source or row.source.startswith("<"):
        return None, "no policy file recorded (inline CSV or no submission)"
    try:
        data = read_regular(row.source, LIMITS["file_bytes"])  # as grade-batch read it: a regular file, no link
    except OSError as exc:
        return None, f"{row.source}: cannot be read ({exc.strerror or exc})"
    except NotRegular as exc:
        return None, f"{row.source}: now {exc.what}, not the file that was graded"
    except TooLarge:
        return None, f"{row.source}: larger than any policy graded ({LIMITS['file_bytes']:,} bytes at most)"
    if hashlib.sha256(data).hexdigest() != row.sha256:
        return None, f"{row.source}: changed since it was graded (SHA-256 differs)"
    return data, ""


def build_report(book: _Book, world: Optional[World] = None, policies: Optional[Mapping[str, bytes]] = None) -> ClassReport:
    """The class report of a gradebook (policies read back from their files and predicted once each).

    ``policies`` (student → the policy graded) replaces the read-back from files, for a gradebook whose rows have
    none (nbgrader's: the policy is in the autograded notebook); a row it lacks is *not analysed*, with the reason.
    """
    w = world or load_world()
    ok = [r for r in book.rows if r.status == "ok"]
    counts = {"ok": len(ok), "invalid": sum(r.status == "invalid" for r in book.rows),
              "error": sum(r.status == "error" for r in book.rows), "missing": len(book.missing)}

    passed: Counter[str] = Counter()
    graded: Counter[str] = Counter()
    order: list[str] = []
    for r in ok:
        for c in r.checks:
            if c.id not in graded:
                order.append(c.id)
            graded[c.id] += 1
            passed[c.id] += c.passed
    checks: list[dict[str, Any]] = []
    weak: list[dict[str, Any]] = []
    for cid in order:
        rate = passed[cid] / graded[cid]
        lesson = LESSONS.get(cid)
        entry = {"id": cid, "passed": passed[cid], "graded": graded[cid], "rate": round(rate, 4),
                 "lesson": lesson[0] if lesson else None, "weak": rate < WEAK}
        checks.append(entry)
        if rate < WEAK:
            weak.append({"check": cid, "rate": round(rate, 4),
                         "lesson": lesson[0] if lesson else None,
                         "why": lesson[1] if lesson else "no lesson is mapped to this check: add it to LESSONS"})
    weak.sort(key=lambda x: x["rate"])

    # one prediction per distinct policy; students grouped by canonical JSON, then by scope
    by_canon: dict[str, list[str]] = defaultdict(list)
    analysis: dict[str, tuple[frozenset[str], frozenset[str], frozenset[tuple[str, str]], Any]] = {}
    alone: dict[str, bool] = {}  # canonical JSON -> relies on the old allow-list reading (srt_notes' "allow-read-alone")
    not_analysed = []
    for r in ok:
        if policies is None:
            data, why = _read_policy(r)
        else:
            data, why = policies.get(r.student), "no policy was read from the graded submission"
        if data is None:
            not_analysed.append({"student": r.student, "why": why})
            continue
        try:
            policy = load_policy(json.loads(data))
        except (SandboxLabError, ValueError):  # a row marked ok whose file is no valid policy: a forged gradebook
            not_analysed.append({"student": r.student, "why": f"{r.source}: not a valid policy, yet graded ok"})
            continue
        canon = policy.canonical_json()
        by_canon[canon].append(r.student)
        if canon not in analysis:
            result = predict(policy, w)
            leaked = frozenset(p.id for p in result.probes if p.kind == "attack" and p.outcome == "succeeded")
            rules = frozenset(f'{k} "{v}"' for p in result.probes if p.kind == "attack" and p.outcome == "succeeded"
                              for k, v in _RULE.findall(p.explanation))
            exposed = _harms(result, w)
            analysis[canon] = (leaked, rules, exposed, result.scope)
            alone[canon] = any(cause == "allow-read-alone" for cause, _ in srt_differences(policy, w))

    # What every full-marks policy also leaks is accepted by the task's rubric (the job needs that host: npm
    # publish through the registry an npm build must reach); it is reported apart, never as an over-grant.
    full = {canon for r in ok if r.score == r.max_score for canon in [_canon_of(r, by_canon)] if canon is not None}
    accepted_probes = frozenset.intersection(*(analysis[c][0] for c in full)) if full else frozenset()
    accepted_rules = frozenset.intersection(*(analysis[c][1] for c in full)) if full else frozenset()
    leaks: Counter[str] = Counter()
    rule_count: Counter[str] = Counter()
    harm_count: Counter[tuple[str, str]] = Counter()
    by_scope: dict[Any, list[str]] = defaultdict(list)
    for canon, students in by_canon.items():
        leaked, rules, exposed, scope = analysis[canon]
        n = len(students)
        for p in leaked - accepted_probes:
            leaks[p] += n
        for rule in rules - accepted_rules:
            rule_count[rule] += n
        for h in exposed:
            harm_count[h] += n
        by_scope[scope].append(canon)

    stories = {f.path: (f.label, f.story) for f in w.files}
    stories.update({d.path: (d.label, d.story) for d in w.dirs})
    harms = [{"path": path, "how": how, "label": stories.get(path, (path, ""))[0], "story": stories.get(path, ("", ""))[1],
              "students": n} for (path, how), n in harm_count.most_common(TOP)]

    groups = [{"kind": "identical", "students": sorted(s), "policy": canon}
              for canon, s in sorted(by_canon.items(), key=lambda kv: -len(kv[1])) if len(s) > 1]
    for canons in by_scope.values():
        if len(canons) > 1:
            groups.append({"kind": "near-identical", "students": sorted(s for c in canons for s in by_canon[c]),
                           "policies": sorted(canons)})
    return ClassReport(
        task=book.task, students=len(book.rows) + len(book.missing), counts=counts, checks=checks,
        leaks=[{"probe": p, "students": n} for p, n in leaks.most_common(TOP)],
        rules=[{"rule": r, "students": n} for r, n in rule_count.most_common(TOP)],
        harms=harms, groups=groups, weak_spots=weak, not_analysed=not_analysed,
        accepted={"probes": sorted(accepted_probes), "rules": sorted(accepted_rules)},
        missing=sorted(book.missing),
        allow_read_alone=sorted(s for canon, students in by_canon.items() if alone.get(canon) for s in students),
    )


def _canon_of(row: _Row, by_canon: dict[str, list[str]]) -> Optional[str]:
    return next((c for c, students in by_canon.items() if row.student in students), None)


def _harms(result: Any, w: World) -> frozenset[tuple[str, str]]:
    readable = set(result.scope.readable)
    writable = set(result.scope.writable)
    out = set()
    for f in w.files:
        if f.role in ("secret", "credential") and f.path in readable:
            out.add((f.path, "readable"))
        if f.role == "persistence" and f.path in writable:
            out.add((f.path, "writable"))
    for d in w.dirs:
        if d.role == "persistence" and d.path in writable:
            out.add((d.path, "writable"))
    return frozenset(out)


# --- HTML with charts -----------------------------------------------------------------------


def _chart(title: str, labels: Sequence[str], values: Sequence[float], *, xlabel: str, gid: str,
           limit: Optional[float] = None) -> str:
    """A horizontal bar chart as inline SVG (Agg, no display); each bar's id is ``<gid>-<label>``."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "sandbox-lab"}):  # text stays <text>
        fig = Figure(figsize=(7, 0.4 * max(len(labels), 1) + 1.2))
        ax = fig.add_subplot()
        bars = ax.barh(list(labels), list(values), color="#4c72b0")
        for bar, label in zip(bars, labels):
            bar.set_gid(f"{gid}-{label}")
        ax.invert_yaxis()
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        if limit is not None:
            ax.set_xlim(0, limit)
        fig.tight_layout()
        buf = io.StringIO()
        fig.savefig(buf, format="svg")
    svg = buf.getvalue()
    return svg[svg.index("<svg"):]


def render_html(report: ClassReport) -> str:
    """The report as one self-contained HTML page (charts inlined as SVG)."""
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>Class report: {e(report.task)}</title>"
             "<style>body{font-family:sans-serif;max-width:60em;margin:auto}td,th{padding:2px 8px;text-align:left}"
             "</style></head><body>",
             f"<h1>Class report: {e(report.task)}</h1>",
             f"<p>{report.students} students: {report.counts['ok']} graded, {report.counts['invalid']} invalid "
             f"policies, {report.counts['error']} not graded"
             + (f", {report.counts['missing']} not submitted ({e(', '.join(report.missing))})" if report.missing else "")
             + ".</p>"]
    if report.checks:
        parts.append(_chart("Pass rate per rubric check", [c["id"] for c in report.checks],
                            [100 * c["rate"] for c in report.checks], xlabel="% of graded students", gid="check",
                            limit=100))
    parts.append("<h2>Weak spots and the lesson that teaches each</h2><table><tr><th>check</th><th>pass rate</th>"
                 "<th>lesson</th><th>why</th></tr>")
    parts += [f"<tr><td>{e(s['check'])}</td><td>{s['rate']:.0%}</td><td>{e(str(s['lesson']))}</td><td>{e(s['why'])}</td></tr>"
              for s in report.weak_spots]
    parts.append("</table>")
    if report.leaks:
        parts.append(_chart("Attacks that got through", [x["probe"] for x in report.leaks],
                            [x["students"] for x in report.leaks], xlabel="students", gid="leak"))
    if report.accepted.get("probes"):
        parts.append("<p>Accepted by the rubric (every full-marks policy has them too, not counted): "
                     f"{e(', '.join(report.accepted['probes']))}.</p>")
    parts.append("<h2>Most common over-grants, by rule</h2><table><tr><th>rule</th><th>students</th></tr>")
    parts += [f"<tr><td><code>{e(x['rule'])}</code></td><td>{x['students']}</td></tr>" for x in report.rules]
    parts.append("</table><h2>Most common over-grants, by harm</h2><table><tr><th>what</th><th></th><th>students</th>"
                 "<th>what the attacker does with it</th></tr>")
    parts += [f"<tr><td>{e(x['label'])} (<code>{e(x['path'])}</code>)</td><td>{e(x['how'])}</td><td>{x['students']}</td>"
              f"<td>{e(x['story'])}</td></tr>" for x in report.harms]
    parts.append("</table><h2>Groups of identical and near-identical policies</h2><ul>")
    parts += [f"<li>{e(g['kind'])}: {len(g['students'])} students: {e(', '.join(g['students'][:20]))}"
              f"{' …' if len(g['students']) > 20 else ''}</li>" for g in report.groups]
    parts.append("</ul>")
    if report.allow_read_alone:
        parts.append(f"<h2>Relying on the old allow-list reading</h2><p>{len(report.allow_read_alone)} students list what "
                     "the job reads in allowRead with no denyRead around it, so srt hides nothing and secrets stay readable "
                     "(teach: hide with denyRead, re-open with allowRead): "
                     f"{e(', '.join(report.allow_read_alone[:20]))}{' …' if len(report.allow_read_alone) > 20 else ''}</p>")
    if report.not_analysed:
        parts.append(f"<p>{len(report.not_analysed)} graded policies could not be read back for analysis "
                     "(see the JSON's <code>not_analysed</code>).</p>")
    parts.append("</body></html>")
    return "\n".join(parts)
