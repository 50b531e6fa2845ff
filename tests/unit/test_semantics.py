"""Grading under a real tool's semantics: the rewrite reproduces what srt was measured to do, and changes grades where it should."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import pytest

from grader import load_policy, predict
from grader.backends.static import StaticBackend
from grader.cli.main import main
from grader.core.errors import PolicyError
from grader.grading.grade import grade
from grader.grading.tasks import all_tasks, load_task
from grader.realtools.export import export
from grader.realtools.semantics import ADVICE, CAUSES, SEMANTICS, enforced
from grader.realtools.srt_notes import RULES

REPO = Path(__file__).parents[2]
CORPUS: dict[str, Optional[dict[str, Any]]] = json.loads((REPO / "tests" / "fixtures" / "corpus.json").read_text())["policies"]
DOCUMENTED: dict[str, Any] = json.loads((REPO / "docs" / "srt-differences.json").read_text())
NOT_RUN = {d["policy"] for d in DOCUMENTED["not_run"]}
TASKS = all_tasks()
STATIC = StaticBackend()


def _items(scope: Any, key: str) -> set[str]:
    return {x.host if hasattr(x, "host") else x for x in getattr(scope, key)}


def test_srt_semantics_reproduce_every_measured_difference_and_no_other() -> None:
    # The cross-check ran the real srt on `export --to srt` of each corpus policy, started in the home. The same file
    # under --semantics srt must give srt's verdicts and scope: every documented difference, and nothing more.
    probes, scope = set(), set()
    for name, raw in CORPUS.items():
        if raw is None or name in NOT_RUN:
            continue
        lab = predict(load_policy(raw))
        text, _ = export(load_policy(raw), "srt")
        srt = predict(enforced(load_policy(json.loads(text)), "srt").policy)
        probes |= {(name, o.id, o.outcome, srt.outcome(o.id).outcome) for o in lab.probes if o.outcome != srt.outcome(o.id).outcome}
        for key in ("readable", "writable", "reachable"):
            mine, theirs = _items(lab.scope, key), _items(srt.scope, key)
            scope |= {(name, key, item, item in mine) for item in mine ^ theirs}
    assert probes == {(d["policy"], d["probe"], d["docker"], d["srt"]) for d in DOCUMENTED["differences"]}
    assert scope == {(d["policy"], d["set"], i, d["docker"]) for d in DOCUMENTED["scope_differences"] for i in d["items"]}


def _grades(raw: dict[str, Any], semantics: str) -> dict[str, Any]:
    policy = load_policy(raw)
    return {t.id: grade(t, policy, STATIC, semantics=semantics) for t in TASKS}  # type: ignore[arg-type]


@pytest.mark.parametrize("diff", DOCUMENTED["differences"], ids=lambda d: f"{d['policy']}-{d['probe']}")
def test_srt_semantics_change_the_grade_of_every_documented_difference(diff: dict[str, str]) -> None:
    raw = CORPUS[diff["policy"]]
    assert raw is not None
    lab, srt = _grades(raw, "lab"), _grades(raw, "srt")
    # the grade changes: a check that tries the probe judges it otherwise (its points too, unless another
    # probe of the same check already fails it either way, as with seed-naive's other ways to persist)
    changed = [(t, c.id) for t in lab for c, d in zip(lab[t].checks, srt[t].checks) if c != d and diff["probe"] in c.message + d.message]
    assert changed, diff
    # the board names the probe, both outcomes and the documented cause
    found = [d for g in srt.values() for d in g.disagreements if d.kind == "probe" and d.id == diff["probe"]]
    assert found and found[0].lab == diff["docker"] and found[0].graded == diff["srt"], found
    assert diff["cause"] in found[0].causes, found[0]


def _untouched() -> list[str]:
    return [n for n, raw in CORPUS.items() if raw is not None and n not in NOT_RUN and not enforced(load_policy(raw), "srt").rewrites]


def test_enough_policies_have_no_difference() -> None:
    assert len(_untouched()) >= 20


@pytest.mark.parametrize("name", _untouched())
def test_a_policy_without_differences_grades_identically(name: str) -> None:
    raw = CORPUS[name]
    assert raw is not None
    lab, srt = _grades(raw, "lab"), _grades(raw, "srt")
    for t in lab:
        assert lab[t].checks == srt[t].checks, (name, t)
        assert srt[t].disagreements == () and srt[t].semantics == "srt"


def test_allow_read_alone_cannot_game_the_srt_grade() -> None:
    # The attack on this work: a policy that looks least-privileged because the lab reads allowRead as "only these".
    # srt reads everything by default, so it must lose every read check under --semantics srt.
    task = load_task("scope-secure-sandbox")
    gaming = load_policy(json.loads((REPO / "solutions" / "scope-secure-sandbox.json").read_text()))
    assert grade(task, gaming, STATIC).full_marks
    under = grade(task, gaming, STATIC, semantics="srt")
    assert not under.full_marks
    lost = {c.id for c in under.checks if not c.passed}
    assert {"secrets-unreadable", "nothing-else-readable", "least-read"} <= lost
    assert {d.id for d in under.disagreements if d.kind == "check"} == lost
    assert all(d.causes == ("allow-only-reads",) for d in under.disagreements)
    assert ADVICE["allow-only-reads"] in under.feedback()
    # the same with a decoy deny elsewhere: an allowRead outside every denyRead still restricts nothing in srt
    decoy = load_policy({"filesystem": {"denyRead": ["/etc/secrets"], "allowRead": ["/project/src"], "allowWrite": ["/project/out"]},
                         "network": {"allowedDomains": []}})
    assert grade(task, decoy, STATIC).full_marks
    assert {"secrets-unreadable", "nothing-else-readable", "least-read"} <= {
        c.id for c in grade(task, decoy, STATIC, semantics="srt").checks if not c.passed}
    # the same intent written so that srt enforces it: hide the roots, re-allow what the job reads
    honest = load_policy({"filesystem": {"denyRead": ["/home/user", "/project", "/app/workspace", "/etc/secrets"],
                                         "allowRead": ["/project/src"], "allowWrite": ["/project/out"]},
                          "network": {"allowedDomains": []}})
    assert grade(task, honest, STATIC, semantics="srt").full_marks


def test_a_re_allow_keeps_uncovered_roots_readable_without_a_grant_beyond_the_world() -> None:
    # {"/"} would keep everything readable too, but the lab counts a rule beyond its machine as an over-grant
    raw = {"filesystem": {"denyRead": ["/home/user"], "allowRead": ["/home/user/work"]}}
    e = enforced(load_policy(raw), "srt")
    assert e.policy.normalize()["filesystem"]["allowRead"] == ["/home/user/work", "/project", "/app/workspace", "/etc/secrets"]
    lab_view = predict(e.policy)
    assert "/project/.env" in lab_view.scope.readable and "/home/user/.ssh/id_rsa" not in lab_view.scope.readable


@pytest.mark.parametrize(("raw", "cause", "probe", "lab", "srt"), [
    ({"filesystem": {"allowWrite": ["/home/user"], "denyWrite": ["/home/user"]}}, None, None, None, None),
    ({"filesystem": {"denyWrite": ["/project"], "allowWrite": ["/project", "/project/src"]}},
     "deny-write-wins", "tamper-source", "succeeded", "blocked"),
    ({"filesystem": {"allowWrite": ["/project/out/result.txt"]}}, "missing-path-at-start", "job-write-out", "succeeded", "blocked"),
    ({"filesystem": {"allowWrite": ["/home/user/.ssh"], "denyRead": ["/home/user/.ssh"]}},
     "allow-write-reopens-read", "read-ssh-key", "blocked", "succeeded"),
])
def test_each_rewrite_changes_what_it_says(raw: dict[str, Any], cause: Optional[str], probe: Optional[str],
                                            lab: Optional[str], srt: Optional[str]) -> None:
    policy = load_policy(raw)
    e = enforced(policy, "srt")
    if cause is None:
        assert not e.rewrites and e.policy == policy
        return
    assert cause in {r.cause for r in e.rewrites}
    assert probe is not None
    assert predict(policy).outcome(probe).outcome == lab and predict(e.policy).outcome(probe).outcome == srt


def test_claude_code_differs_from_srt_where_it_runs_and_what_it_writes() -> None:
    # srt starts in the home: the project's hooks stay writable. Claude Code runs in the project: they are protected
    # there, and the project is writable by default.
    project = load_policy({"filesystem": {"allowWrite": ["/project"]}})
    assert predict(enforced(project, "srt").policy).outcome("write-git-hook").outcome == "succeeded"
    assert predict(enforced(project, "claude-code").policy).outcome("write-git-hook").outcome == "blocked"
    out_only = load_policy({"filesystem": {"allowWrite": ["/project/out"]}})
    assert predict(enforced(out_only, "srt").policy).outcome("tamper-source").outcome == "blocked"
    cc = enforced(out_only, "claude-code")
    assert predict(cc.policy).outcome("tamper-source").outcome == "succeeded"
    assert [r.cause for r in cc.rewrites][0] == "cwd-writable"
    assert "unlisted-host-prompt" in {c.cause for c in cc.caveats}
    # the working directory is the project the policy works in
    ws = enforced(load_policy({"filesystem": {"allowWrite": ["/app/workspace/build"]}}), "claude-code")
    assert 'add allowWrite "/app/workspace"' in [r.change for r in ws.rewrites]


def test_what_no_rule_can_express_fails_closed() -> None:
    loop = load_policy({"network": {"allowedDomains": ["pypi.org", "localhost"]}})
    for semantics in ("srt", "claude-code"):
        with pytest.raises(PolicyError) as info:
            enforced(loop, semantics)  # type: ignore[arg-type]
        assert [p.pointer for p in info.value.problems] == ["/network/allowedDomains/1"]
        g = grade(load_task("pip-install-only"), loop, STATIC, semantics=semantics)  # type: ignore[arg-type]
        assert not g.valid and g.score == 0 and "loopback-direct" in g.feedback()
    assert enforced(loop, "lab").policy == loop  # the lab grades it as always (the attacker's own server)
    ip = enforced(load_policy({"network": {"allowedDomains": ["10.0.0.1"]}}), "srt")
    assert [(c.cause, c.pointer) for c in ip.caveats] == [("ip-literal-reachable", "/network/allowedDomains/0")]
    with pytest.raises(ValueError, match="unknown semantics"):
        enforced(loop, "docker")  # type: ignore[arg-type]


def test_every_cause_is_documented_and_every_rewrite_names_one() -> None:
    doc = (REPO / "docs" / "srt-differences.md").read_text()
    assert set(DOCUMENTED["causes"]) <= set(CAUSES)
    assert {r.cause for r in RULES} - {"settings-not-protected"} <= set(CAUSES)  # that one is no difference
    for cause in CAUSES:
        assert f"`{cause}`" in doc, cause
    for name, raw in CORPUS.items():
        if raw is None or name in NOT_RUN:
            continue
        for semantics in ("srt", "claude-code"):
            for r in enforced(load_policy(raw), semantics).rewrites:  # type: ignore[arg-type]
                assert r.cause in CAUSES and r.change and r.why


def test_lab_semantics_is_the_identity_and_the_default() -> None:
    task = load_task("scope-secure-sandbox")
    policy = load_policy(CORPUS["seed-naive"] or {})
    assert grade(task, policy, STATIC) == grade(task, policy, STATIC, semantics="lab")
    assert "semantics" not in grade(task, policy, STATIC).to_json()  # the shape of every earlier grade
    assert SEMANTICS[0] == "lab"


def test_cli_grade_semantics(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.json"
    path.write_text((REPO / "solutions" / "scope-secure-sandbox.json").read_text())
    base = ["grade", "--task", "scope-secure-sandbox", str(path), "--backend", "static"]
    assert main(base) == 0
    assert "graded under" not in capsys.readouterr().out
    assert main([*base, "--semantics", "srt", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["semantics"] == "srt" and data["score"] < data["max_score"]
    assert data["rewrites"][0]["cause"] == "allow-only-reads" and data["rewrites"][0]["pointer"] == "/filesystem/allowRead/0"
    assert {"kind": "check", "id": "least-read", "lab": "PASS (1/1)", "graded": "FAIL (0/1)"}.items() <= data["disagreements"][-1].items()
    assert main([*base, "--semantics", "srt"]) == 1
    out = capsys.readouterr().out
    assert "graded under srt's semantics" in out.splitlines()[0]
    assert "check least-read: Sandbox Lab says PASS (1/1), srt would say FAIL (0/1), because srt reads everything" in out
    assert main([*base, "--semantics", "claude-code"]) == 1
    assert "Claude Code would say" in capsys.readouterr().out
    assert main([*base, "--semantics", "docker"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'docker'" in err and "lab" in err and "claude-code" in err
    path.write_text(json.dumps({"network": {"allowedDomains": ["localhost"]}}))
    assert main(["grade", "--task", "pip-install-only", str(path), "--backend", "static", "--semantics", "srt"]) == 2
    assert "/network/allowedDomains/0" in capsys.readouterr().out
