"""Graded tasks: task files, the rubric logic and the notebook helpers, with the static backend (no Docker).

The least-privilege checks (``least-read``, ``least-write``, ``least-network``)
and the over-grants they report are tested in ``test_needs.py``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from grader.backends.static import StaticBackend
from grader.cli.main import main as grading_main
from grader.core.errors import PolicyError, TaskError
from grader.core.outcomes import RunResult
from grader.core.plan import RunPlan
from grader.core.policy import load_policy
from grader.core.probes import PROBES
from grader.core.world import load_world
from grader.grading.grade import grade, grade_file
from grader.grading.notebook import assert_check, assert_passed, save_policy, start_task
from grader.grading.tasks import POLICY_FACTS, _task_from, all_tasks, load_task
from reference import solution_path

STATIC = StaticBackend()
TASKS = all_tasks()
TASK_IDS = [t.id for t in TASKS]
NAIVE = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}
SEED_SECURE = {"filesystem": {"allowWrite": ["/app/workspace/build"]}, "network": {"allowedDomains": ["registry.npmjs.org"]}}
SLUG = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


def test_the_required_tasks_exist_in_teaching_order() -> None:
    assert TASK_IDS[:4] == ["scope-secure-sandbox", "fix-the-naive-setup", "pip-install-only", "stop-persistence"]
    assert len(TASK_IDS) >= 5


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_task_file_is_well_formed(task_id: str) -> None:
    task = load_task(task_id)
    assert SLUG.match(task.id)
    assert len(task.statement) > 100, "a learner must understand the task without the lessons open"
    probe_ids = {p.id for p in PROBES}
    for c in task.checks:
        assert SLUG.match(task.grade_id(c.id)), "grade ids must be valid nbgrader grade_ids"
        assert c.points > 0
        assert set(c.probes) <= probe_ids
        assert c.kind != "policy" or c.fact in POLICY_FACTS
        assert c.kind != "least" or c.id == f"least-{c.axis}"
    for word in task.needs.read + task.needs.write + task.needs.host_names:
        assert word in task.statement, f"the statement must state what the job needs, in words: {word}"


def test_scope_secure_sandbox_solution_is_written_as_srt_reads_it() -> None:
    """The seed's answer (allowRead alone) hides nothing in srt: the reference hides the machine's four places with
    denyRead and re-opens the source with allowRead (tests/unit/grading/test_task_gaming.py grades the seed's answer)."""
    expected = {"filesystem": {"denyRead": ["~", "/etc/secrets", "/project", "/app/workspace"], "allowRead": ["/project/src"],
                               "allowWrite": ["/project/out"], "denyWrite": []},
                "network": {"allowedDomains": [], "deniedDomains": []}}  # every list srt's schema requires
    assert json.loads(solution_path("scope-secure-sandbox").read_text()) == expected


@pytest.mark.parametrize("task_id", TASK_IDS)
def test_every_solution_scores_full_marks(task_id: str) -> None:
    g = grade_file(task_id, solution_path(task_id), STATIC)
    assert g.full_marks, g.feedback()
    assert g.score == g.max_score == load_task(task_id).max_score
    assert all(c.passed for c in g.checks)


@pytest.mark.parametrize("task_id", [t.id for t in TASKS if t.starter is not None])
def test_every_starter_fails_with_a_probe_evidence_and_fix(task_id: str) -> None:
    task = load_task(task_id)
    g = grade(task, load_policy(task.starter), STATIC)
    assert not g.full_marks
    failed = [c for c in g.checks if not c.passed]
    assert failed
    for c in failed:
        assert c.points == 0
        if task.check(c.id).kind == "policy":
            assert "Fix:" in c.message
            continue
        if task.check(c.id).kind == "least":
            assert "is more than the job needs:" in c.message, c.message
            assert re.search(r"(Remove it|Narrow it to|Replace it with|List only|add \"[^\"]+\"(, \"[^\"]+\")* to filesystem|hide \"[^\"]+\"(, \"[^\"]+\")* with filesystem\.denyRead)", c.message), c.message
            continue
        assert re.search(r"probe [a-z-]+ (succeeded|was blocked)", c.message), c.message
        assert "Evidence:" in c.message and "Fix:" in c.message, c.message


def test_tasks_without_a_starter_fail_an_empty_policy() -> None:
    for task in TASKS:
        if task.starter is None:
            assert not grade(task, load_policy({}), STATIC).full_marks


def test_fix_the_naive_setup_partial_marks_and_gist_path() -> None:
    task = load_task("fix-the-naive-setup")
    g = grade(task, load_policy(NAIVE), STATIC)
    assert 0 < g.score < g.max_score
    leak = g.check("no-secret-leaves")
    assert not leak.passed
    assert "exfil-secret" in leak.message and "gist.github.com" in leak.message
    assert "denyRead" in leak.message  # the fix: reads are open by default, so hide what the build does not read
    # the seed's "secure" setup alone is not enough: npm publish is a channel
    s = grade(task, load_policy(SEED_SECURE), STATIC)
    assert s.check("build-works").passed
    assert not s.check("no-secret-leaves").passed
    assert "registry.npmjs.org" in s.check("no-secret-leaves").message


def test_job_check_fix_names_the_missing_host_and_path() -> None:
    task = load_task("pip-install-only")
    g = grade(task, load_policy({"filesystem": {}, "network": {"allowedDomains": ["pypi.org"]}}), STATIC)
    msg = g.check("pip-works").message
    assert "job-fetch-pypi" in msg and '"files.pythonhosted.org" to network.allowedDomains' in msg
    assert 'add "/project/out" to filesystem.allowWrite' in msg


def test_policy_fact_allowed_domains_present_and_empty() -> None:
    task = load_task("scope-secure-sandbox")
    sol = json.loads(solution_path(task.id).read_text())
    missing = {"filesystem": sol["filesystem"]}
    g = grade(task, load_policy(missing), STATIC)
    fact = g.check("allowed-domains-empty")
    assert not fact.passed and "missing" in fact.message and '"allowedDomains": []' in fact.message
    # every probe still blocked: omitting the key is no network too; only the fact check loses points
    assert g.score == g.max_score - fact.max_points
    listed = {**sol, "network": {"allowedDomains": ["pypi.org"]}}
    assert "lists pypi.org" in grade(task, load_policy(listed), STATIC).check("allowed-domains-empty").message


def test_invalid_policy_scores_zero_with_the_validation_errors() -> None:
    task = load_task("scope-secure-sandbox")
    with pytest.raises(PolicyError) as info:
        load_policy(b'{"filesystem": {"allowWrites": ["/project/out"]}}', name="mine.json")
    g = grade(task, info.value, STATIC)
    assert g.score == 0 and g.max_score == task.max_score and not g.valid
    out = g.to_json()
    assert out["errors"][0]["pointer"] == "/filesystem/allowWrites"
    assert all(not c["passed"] and "allowWrites" in c["message"] for c in out["checks"])
    assert "allowWrite" in g.feedback()


def test_missing_file_scores_zero_and_says_so(tmp_path: Path) -> None:
    g = grade_file("scope-secure-sandbox", tmp_path / "nope.json", STATIC)
    assert g.score == 0 and "no such file" in g.feedback()


def test_grade_json_shape() -> None:
    g = grade_file("pip-install-only", solution_path("pip-install-only"), STATIC)
    out = g.to_json()
    assert set(out) == {"task", "score", "max_score", "backend", "checks"}
    assert out["backend"] == "static"
    assert set(out["checks"][0]) == {"id", "points", "max_points", "passed", "message"}


@dataclass(frozen=True)
class _ErrorBackend:
    """Reports every probe as ``error``, as the Docker backend does when evidence is lost."""

    name: str = "docker"

    def run(self, plan: RunPlan) -> RunResult:
        r = StaticBackend().run(plan)
        probes = tuple(replace(p, outcome="error", explanation="the sink died", evidence=("sink stopped",)) for p in r.probes)
        return replace(r, backend="docker", probes=probes, scope=None)


def test_error_outcome_is_never_counted_as_blocked() -> None:
    task = load_task("scope-secure-sandbox")
    g = grade_file(task, solution_path(task.id), _ErrorBackend())
    for c in g.checks:
        if task.check(c.id).kind == "policy":
            assert c.passed and not c.error
        elif task.check(c.id).kind == "least":
            assert not c.passed and c.points == 0 and c.error
            assert c.message.startswith("could not grade: ") and "could not be measured" in c.message and "Rerun" in c.message
        else:
            assert not c.passed and c.points == 0 and c.error
            assert c.message.startswith("could not grade: ") and "could not be collected" in c.message and "Rerun" in c.message
    assert not g.full_marks and {c.id for c in g.could_not_grade} == {c.id for c in task.checks if c.kind != "policy"}


@dataclass(frozen=True)
class _OneLost:
    """The static run of a policy with one probe's evidence lost, as a Docker run whose DNS log was cut reports it."""

    lost: str
    name: str = "docker"

    def run(self, plan: RunPlan) -> RunResult:
        r = StaticBackend().run(plan)
        probes = tuple(replace(p, outcome="error", explanation="Cannot tell: the run's evidence cannot be read whole (dns.jsonl: cut off).",
                               evidence=()) if p.id == self.lost else p for p in r.probes)
        return replace(r, backend="docker", probes=probes)


def test_a_full_marks_policy_with_one_probe_unjudged_is_not_graded_full_and_says_could_not_grade() -> None:
    task = load_task("scope-secure-sandbox")
    assert grade_file(task, solution_path(task.id), StaticBackend()).full_marks  # the reference, judged whole
    lost = next(pid for c in task.checks if c.kind == "blocked" for pid in c.probes)
    g = grade_file(task, solution_path(task.id), _OneLost(lost))
    hit = {c.id for c in task.checks if lost in c.probes}
    assert hit and {c.id for c in g.could_not_grade} == hit and not g.full_marks
    for c in g.checks:
        if c.id in hit:
            assert (c.points, c.passed) == (0, False) and c.message.startswith(f"could not grade: probe {lost}: ")
            assert "dns.jsonl: cut off" in c.error and c.to_json()["error"] == c.error
        else:
            assert c.passed and c.points == c.max_points and "error" not in c.to_json(), c.message
    assert g.score == task.max_score - sum(task.check(i).points for i in hit)
    assert g.to_json()["could_not_grade"] == [c.id for c in task.checks if c.id in hit]
    text = g.feedback()
    assert "ERROR: could not grade" in text and all(f"[ERROR] {i} (0/" in text for i in hit)


def test_docker_evidence_is_quoted() -> None:
    @dataclass(frozen=True)
    class Evidence:
        name: str = "docker"

        def run(self, plan: RunPlan) -> RunResult:
            r = StaticBackend().run(plan)
            probes = tuple(replace(p, evidence=(f"canary of x received by gist.github.com: POST /gists ({p.id})",)) for p in r.probes)
            return replace(r, backend="docker", probes=probes)

    g = grade(load_task("fix-the-naive-setup"), load_policy(NAIVE), Evidence())
    msg = g.check("no-secret-leaves").message
    assert "POST /gists (exfil-secret)" in msg and g.backend == "docker"


def test_unknown_task_and_check() -> None:
    with pytest.raises(TaskError, match="unknown task"):
        load_task("no-such-task")
    with pytest.raises(TaskError, match="no check"):
        load_task("scope-secure-sandbox").check("nope")


NEEDS = {"read": ["/project/src"], "write": ["/project/out"], "hosts": []}
LEAST = [{"id": f"least-{a}", "points": 1, "description": "d", "require": {"least": a}} for a in ("read", "write", "network")]


_DROP = object()  # a key given this value is removed


def _task(**change: object) -> dict[str, object]:
    """A valid task file, with ``change`` applied (a key set to ``_DROP`` is removed)."""
    base: dict[str, object] = {
        "id": "x", "title": "t", "statement": "s", "needs": NEEDS, "starter": None,
        "checks": [{"id": "a", "points": 1, "description": "d", "require": {"blocked": ["read-dotenv"]}}, *LEAST],
    }
    base.update(change)
    return {k: v for k, v in base.items() if v is not _DROP}


def _checks(*extra: dict[str, object]) -> list[dict[str, object]]:
    return [*extra, *LEAST]


def test_the_valid_task_file_of_these_tests_loads() -> None:
    task = _task_from(_task(), "x.json", load_world())
    assert [c.kind for c in task.checks] == ["blocked", "least", "least", "least"]
    assert task.needs.read == ("/project/src",) and task.needs.hosts == ()


def test_scope_selectors_resolve_to_the_world_paths_they_name() -> None:
    """A selector is resolved at load time into exact world paths: what the grader checks is what the file says."""
    task = _task_from(_task(checks=_checks(
        {"id": "a", "points": 1, "description": "d", "require": {"blocked": ["write-git-hook"], "unwritable": [{"under": ["/project/.git/hooks"]}]}},
        {"id": "b", "points": 1, "description": "d", "require": {"unreadable": [{"under": ["/home/user"], "roles": ["credential"]}], "unreachable": "attacker"}},
        {"id": "c", "points": 1, "description": "d", "require": {"unwritable": [{"outside": ["/home/user", "/project", "/app/workspace"]}]}},
    )), "x.json", load_world())
    a, b, c = task.check("a"), task.check("b"), task.check("c")
    assert a.kind == "blocked" and a.unwritable == ("/project/.git/hooks", "/project/.git/hooks/pre-commit") and a.scoped
    assert b.kind == "blocked" and b.probes == () and b.unreachable == "attacker"
    assert "/home/user/.npmrc" in b.unreadable and "/home/user/.ssh/id_rsa" not in b.unreadable
    assert c.unwritable == ("/etc/secrets", "/etc/secrets/db_password")
    assert not task.check("least-read").unwritable and task.check("least-read").scoped


@pytest.mark.parametrize(
    "broken, fragment",
    [
        (_task(checks=[]), "checks"),
        (_task(checks=_checks({"id": "a", "points": 1, "description": "d", "require": {"blocked": ["read-nothing"]}})), "unknown probe"),
        (_task(checks=_checks({"id": "a", "points": 1, "description": "d", "require": {"policy": "looks-nice"}})), "unknown policy fact"),
        (_task(checks=_checks({"id": "a", "points": 1, "description": "d", "require": {"blocked": ["read-dotenv"], "succeeded": ["job-read-src"]}})), "exactly one"),
        (_task(starter={"filesystem": {"allowWrites": []}}), "starter"),
        # the job's needs: stated, inside the world, exact hosts the world knows
        (_task(needs=_DROP), r"/needs: Field required"),
        (_task(needs={**NEEDS, "read": ["/srv/data"]}), r"/needs/read/0: .*outside the simulated machine"),
        (_task(needs={**NEEDS, "write": ["project/out"]}), r"/needs/write/0: .*relative path"),
        (_task(needs={**NEEDS, "hosts": [{"host": "*.pypi.org", "use": "download"}]}), r"/needs/hosts/0/host: .*wildcard"),
        (_task(needs={**NEEDS, "hosts": [{"host": "webhook.site", "use": "upload"}]}), r"/needs/hosts/0/host: .*not a host of the simulated internet"),
        (_task(needs={**NEEDS, "hosts": [{"host": "pypi.org", "use": "upload"}]}), r"/needs/hosts/0: .*accepts no uploads"),
        (_task(needs={**NEEDS, "hosts": [{"host": "pypi.org", "use": "both"}]}), r"/needs/hosts/0/use: "),
        (_task(needs={**NEEDS, "reads": []}), r"/needs/reads: Extra inputs"),
        (_task(needs={**NEEDS, "read": ["/project/out"]}), r"/needs/read/0: no world file lies in /project/out"),
        (_task(needs={**NEEDS, "write": ["/project/out", "/project/tmp"]}), r"/needs/write/1: the world has nothing at /project/tmp"),
        # full marks must be reachable, and must mean least privilege
        (_task(checks=_checks({"id": "a", "points": 1, "description": "d", "require": {"succeeded": ["job-fetch-pypi"]}})),
         r"/checks/0/require/succeeded/0: job-fetch-pypi fetches from pypi.org, which needs.hosts does not list"),
        (_task(checks=_checks({"id": "a", "points": 1, "description": "d", "require": {"succeeded": ["job-write-build"]}})),
         r"/checks/0/require/succeeded/0: job-write-build writes /app/workspace/build/bundle.js, which needs.write does not cover"),
        (_task(checks=[{"id": "a", "points": 1, "description": "d", "require": {"blocked": ["read-dotenv"]}}, *LEAST[:2]]),
         r'/checks: no check requires \{"least": "network"\}'),
        (_task(checks=_checks({"id": "a", "points": 1, "description": "d", "require": {"least": "everything"}})), r"/checks/0/require/least: "),
        # what the scope must not hold: beside "blocked" or alone, selecting world paths that exist
        (_task(checks=_checks({"id": "a", "points": 1, "description": "d", "require": {"succeeded": ["job-read-src"], "unwritable": [{"under": ["/home/user"]}]}})),
         r'"unwritable" goes alone or beside "blocked"'),
        (_task(checks=_checks({"id": "a", "points": 1, "description": "d", "require": {"least": "read", "unreachable": "any"}})),
         r'"unreachable" goes alone or beside "blocked"'),
        (_task(checks=_checks({"id": "a", "points": 1, "description": "d", "require": {"blocked": ["read-dotenv"], "unreadable": []}})), "at least one selector"),
        (_task(checks=_checks({"id": "a", "points": 1, "description": "d", "require": {"unwritable": [{}]}})), r'give "under", "outside" or "roles"'),
        (_task(checks=_checks({"id": "a", "points": 1, "description": "d", "require": {"unreadable": [{"under": ["/project/out"]}]}})),
         r"/checks/0/require/unreadable/0: selects no world path"),
        (_task(checks=_checks({"id": "a", "points": 1, "description": "d", "require": {"unwritable": [{"under": ["/srv"]}]}})), "outside the simulated machine"),
        (_task(checks=_checks({"id": "a", "points": 1, "description": "d", "require": {"unwritable": [{"roles": ["secrett"]}]}})), r"/roles/0"),
        (_task(checks=_checks({"id": "a", "points": 1, "description": "d", "require": {"unreachable": "everything"}})), r"/checks/0/require/unreachable"),
    ],
)
def test_broken_task_files_are_task_errors(broken: dict[str, object], fragment: str) -> None:
    with pytest.raises(TaskError, match=fragment) as info:
        _task_from(broken, "x.json", load_world())
    assert "x.json" in str(info.value) and "Traceback" not in str(info.value)


def test_a_task_is_validated_and_resolved_in_the_world_it_is_given_and_carries_it() -> None:
    """The world comes in once and goes along: a host the given world lacks is refused, a path it lacks selects nothing."""
    world = load_world()
    task = _task_from(_task(), "x.json", world)
    assert task.world is world and load_task("pip-install-only", world).world is world
    smaller = replace(world, hosts=tuple(h for h in world.hosts if h.name != "pypi.org"))
    with pytest.raises(TaskError, match=r"/needs/hosts/0/host: .*not a host of the simulated internet"):
        _task_from(_task(needs={**NEEDS, "hosts": [{"host": "pypi.org", "use": "download"}]}), "x.json", smaller)
    _task_from(_task(needs={**NEEDS, "hosts": [{"host": "pypi.org", "use": "download"}]}), "x.json", world)


def test_notebook_helpers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_policy.json").write_text("{}")
    task = start_task("stop-persistence")
    assert not (tmp_path / "my_policy.json").exists(), "a stale policy must not be graded"
    save_policy("my_policy.json", solution_path(task.id).read_text())
    assert "valid policy" in capsys.readouterr().out
    g = grade_file(task, "my_policy.json")
    for c in task.checks:
        assert_passed(g, c.id)
        assert_check(task.id, c.id, "my_policy.json")
    save_policy("my_policy.json", '{"filesystem": {"allowWrite": ["/project"]')
    assert "not valid yet" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="not a valid policy"):
        assert_check(task.id, "no-git-hook", "my_policy.json")
    save_policy("my_policy.json", json.dumps(task.starter))
    with pytest.raises(AssertionError, match=r"write-git-hook.*Fix:"):
        assert_check(task.id, "no-git-hook", "my_policy.json")


# --- the CLI commands (grader.cli.main) ---------------------------------------------------------


def test_cli_grade_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sol = str(solution_path("fix-the-naive-setup"))
    assert grading_main(["grade", "--task", "fix-the-naive-setup", sol, "--backend", "static"]) == 0
    naive = tmp_path / "naive.json"
    naive.write_text(json.dumps(NAIVE))
    capsys.readouterr()
    assert grading_main(["grade", "--task", "fix-the-naive-setup", str(naive), "--backend", "static", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["backend"] == "static" and 0 < out["score"] < out["max_score"]
    broken = tmp_path / "broken.json"
    broken.write_text("{nope")
    assert grading_main(["grade", "--task", "fix-the-naive-setup", str(broken), "--backend", "static", "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["score"] == 0
    assert grading_main(["grade", "--task", "no-such-task", sol, "--backend", "static"]) == 2
    err = capsys.readouterr().err
    assert "unknown task" in err and "Traceback" not in err


def test_cli_tasks_lists_statements(capsys: pytest.CaptureFixture[str]) -> None:
    assert grading_main(["tasks"]) == 0
    out = capsys.readouterr().out
    for t in TASKS:
        assert t.id in out and t.statement in out and f"the job needs: it {t.needs.in_words()}" in out
    assert grading_main(["tasks", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [t["id"] for t in listed] == TASK_IDS
    assert [t["needs"] for t in listed] == [t.needs.to_json() for t in TASKS]


def test_cli_grade_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "ada.json").write_text(solution_path("pip-install-only").read_text())
    (subs / "bob.json").write_text("{")
    out = tmp_path / "out"
    code = grading_main(["grade-batch", "--task", "pip-install-only", str(subs), "--out", str(out), "--backend", "static", "--workers", "2"])
    assert code == 0
    book = json.loads((out / "gradebook.json").read_text())
    assert [(r["student"], r["status"]) for r in book["rows"]] == [("ada", "ok"), ("bob", "invalid")]
    assert "2 students: 1 full marks, 1 invalid policy" in capsys.readouterr().err


# --- carry-over: every graded policy's feedback ends with the real tools' files and the differences that matter ---


def test_feedback_ends_with_the_export_for_srt_and_claude_code(tmp_path: Path) -> None:
    from grader.realtools.export import export

    path = solution_path("scope-secure-sandbox")
    g = grade_file("scope-secure-sandbox", path, STATIC)
    policy = load_policy(path)
    text = g.feedback()
    assert g.carry_over is not None
    at_srt = text.index(f"`sandbox-lab export {Path(path).name} --to srt`")
    assert at_srt > text.index("least-network")  # after every check: it ends the feedback
    srt_file = export(policy, "srt")[0]
    assert "\n".join("      " + ln for ln in srt_file.rstrip("\n").splitlines()) in text
    assert '"//project/src"' in text  # the Claude Code block, absolute paths as Claude Code writes them
    # task 10's reference hides the machine: Claude Code's own Read tool follows permission rules, not the sandbox's
    assert "permissions.deny" in text.split("What to know of the real tools' rules for this policy:")[1]
    assert "restricts nothing" not in text  # its allowRead re-opens /project/src inside denyRead "/project"
    # the seed's answer (allowRead alone) is told why it hides nothing, and what to write instead
    seed = tmp_path / "seed.json"
    seed.write_text(json.dumps({"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}}))
    notes = grade_file("scope-secure-sandbox", seed, STATIC).feedback().split("What to know of the real tools' rules for this policy:")[1]
    assert 'allowRead "/project/src" is inside no denyRead, so it restricts nothing' in notes and "denyRead" in notes


def test_the_differences_are_the_ones_this_policy_relies_on(tmp_path: Path) -> None:
    home = tmp_path / "home.json"
    home.write_text(json.dumps({"filesystem": {"allowWrite": ["/home/user"]}, "network": {"allowedDomains": []}}))
    diffs = grade_file("scope-secure-sandbox", home, STATIC).carry_over
    assert diffs is not None
    assert any(d.startswith("/filesystem/allowWrite/0: [srt 0.0.83]") and ".bashrc" in d for d in diffs.differences)
    assert any(".srt-settings.json" in d and "denyWrite" in d for d in diffs.differences)  # srt does not protect it
    assert not any("restricts nothing" in d for d in diffs.differences)  # it lists no allowRead
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({"filesystem": {"allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}}))
    g = grade_file("scope-secure-sandbox", plain, STATIC)
    assert g.carry_over is not None and g.carry_over.differences == ()
    assert "What to know of the real tools' rules" not in g.feedback()


def test_an_invalid_policy_has_no_carry_over(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"filesystem": {"allowWrites": []}}')
    g = grade_file("scope-secure-sandbox", bad, STATIC)
    assert g.carry_over is None and "sandbox-lab export" not in g.feedback()


def test_a_scoped_check_names_each_granted_path_or_host_its_rule_and_the_fix() -> None:
    """The scope half of a check speaks like its probes: what is granted, by which rule, and the change to make."""
    pip = grade(load_task("pip-install-only"), load_policy({"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/out"]},
                                                            "network": {"allowedDomains": ["pypi.org", "files.pythonhosted.org", "*.pypi.org"]}}), STATIC)
    msg = pip.check("no-uploads").message
    assert 'the agent can reach test.pypi.org, upload.pypi.org, any name under pypi.org (allowedDomains "*.pypi.org" lets it through' in msg
    assert 'Fix: remove "*.pypi.org" from network.allowedDomains.' in msg
    hooks = grade(load_task("stop-persistence"), load_policy({"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/src", "/project/out", "/project/.git"],
                                                                              "denyWrite": ["/project/.git/hooks/pre-commit"]}, "network": {"allowedDomains": []}}), STATIC)
    c = hooks.check("no-git-hook")
    assert not c.passed and "probe write-git-hook" not in c.message  # the probe is blocked: only the scope catches it
    assert 'the agent can change or create files in /project/.git/hooks (allowWrite "/project/.git" grants it). Fix: remove allowWrite "/project/.git"' in c.message
    home = grade(load_task("stop-persistence"), load_policy({"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/src", "/project/out", "/home/user"],
                                                                             "denyWrite": ["/home/user/.bashrc", "/home/user/.srt-settings.json"]}, "network": {"allowedDomains": []}}), STATIC)
    assert re.search(r'/home/user/\.aws/credentials.* and \d+ more \(allowWrite "/home/user" grants it\)', home.check("home-read-only").message)
