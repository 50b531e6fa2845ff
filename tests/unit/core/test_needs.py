"""Least privilege: the ``least-read``/``least-write``/``least-network`` checks and the over-grants behind them.

Full marks mean the job's probes work, no attack gets through, and the scope
(every path and host the sandbox grants) stays within what the task says its
job needs. These tests use the static backend's predicted scope; the Docker
versions of the regression cases are in ``tests/integration/test_tasks_docker.py``.

What a policy that games each check looks like (each is a test below):

* ``least-read``: hide only the secrets the probes read (``denyRead`` of
  ``~/.ssh``, ``~/.aws``, ``/etc/secrets``, ``.env``) and leave ``allowRead``
  empty, so every other file stays readable; or allow reading a parent of
  what the job needs (``/project`` for ``/project/src``), which takes the
  ``.env`` along; or allow reading a path the world does not model, which no
  probe and no scope scan can see (fail closed: still an over-grant).
* ``least-write``: keep the job's directory and add one that looks harmless
  (``~/.local/bin``, ``~/.config``, ``~/.profile``, ``.git/config``,
  ``Makefile``), where nothing is probed; or write the whole project and home
  and deny only the three files the probes write (``.git/hooks``,
  ``~/.bashrc``, the settings file), so the cloud credentials, the SSH key and
  a new file next to ``~/.bashrc`` stay writable.
* ``least-network``: keep a wildcard and deny the upload hosts you know of
  (``*.github.com`` minus gist and api), which still reaches any name the
  agent makes up; or allow a host the simulated internet does not have
  (``webhook.site``, ``localhost``, ``169.254.169.254``, ``x.attacker.example``),
  which no probe targets: unknown names fail closed; or allow a wildcard for
  a zone the world does not know (``*.ngrok.io``).
* Any ``least-*`` check: grant nothing at all (an empty scope is within any
  needs), so each check also requires the needs themselves to be granted;
  and a run that could not measure its scope (``None``) must never pass: a
  backend that drops the scope is tested to fail with "could not be
  measured" and "rerun".
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

import pytest

from grader.core.access import access_for, baseline_access
from grader.core.analyzer import predict
from grader.core.errors import PolicyError
from grader.backends.static import StaticBackend
from grader.grading.grade import Grade, grade, grade_file
from grader.core.needs import HostNeed, Needs, Overgrant, explain_overgrants, overgrants
from grader.core.outcomes import RunResult
from grader.core.paths import covers
from grader.core.plan import RunPlan
from grader.core.policy import load_policy
from grader.core.probes import probe
from grader.core.scope import predict_scope
from grader.grading.tasks import Task, all_tasks, load_task
from reference import solution_path
from grader.core.world import World, WorldFile, load_world

STATIC = StaticBackend()
WORLD = load_world()
TASKS = all_tasks()
REPO = Path(__file__).parents[3]
CORPUS: dict[str, Optional[dict[str, Any]]] = json.loads((REPO / "tests" / "fixtures" / "corpus.json").read_text())["policies"]


def _solution(task_id: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(solution_path(task_id).read_text())
    return data


def _with(task_id: str, **network: Any) -> dict[str, Any]:
    sol = _solution(task_id)
    return {**sol, "network": {**sol["network"], **network}}


def _grade(task_id: str, raw: dict[str, Any]) -> Grade:
    return grade(load_task(task_id), load_policy(raw), STATIC)


# --- the over-grants of issue 13, each with its expected score (static backend) --------------------

# The cases are data, shared with the Docker test: tests/fixtures/overgrants.json
CASES = [
    pytest.param(c["task"], c["policy"], c["score"], set(c["fails"]), c["says"], id=c["id"])
    for c in json.loads((REPO / "tests" / "fixtures" / "overgrants.json").read_text())["cases"]
]


def test_the_cases_cover_every_over_grant_of_issue_13() -> None:
    def entries(task: str, section: str, key: str) -> set[str]:
        return {e for p in CASES if p.values[0] == task for e in p.values[1].get(section, {}).get(key, [])}

    assert {"/home/user/.local/bin", "/home/user/.ssh/authorized_keys", "/home/user/.profile", "/home/user/.config",
            "/project/.git/config", "/project/Makefile"} <= entries("scope-secure-sandbox", "filesystem", "allowWrite")
    assert {"webhook.site", "pastebin.com", "transfer.sh", "x.attacker.example"} <= entries("pip-install-only", "network", "allowedDomains")
    assert {"pypi.org", "localhost", "host.docker.internal", "169.254.169.254", "*.ngrok.io"} <= entries("stop-persistence", "network", "allowedDomains")
    assert "*.github.com" in entries("fix-the-naive-setup", "network", "allowedDomains")
    assert {"scope-secrets-denied-no-allowRead", "persistence-deny-only-the-probed-files"} <= {p.id for p in CASES}
    assert all(p.values[2] < load_task(p.values[0]).max_score for p in CASES)


@pytest.mark.parametrize(("task_id", "raw", "score", "failed", "fragments"), CASES)
def test_each_over_grant_costs_points_and_is_named(
    task_id: str, raw: dict[str, Any], score: int, failed: set[str], fragments: list[str]
) -> None:
    g = _grade(task_id, raw)
    assert {c.id for c in g.checks if not c.passed} == failed, g.feedback()
    assert g.score == score, g.feedback()
    text = " ".join(g.check(c).message for c in failed)
    for fragment in fragments:
        assert fragment in text, (fragment, text)
    assert g.overgrants and not g.full_marks


@pytest.mark.parametrize("task_id", [t.id for t in TASKS])
def test_reference_solutions_grant_nothing_beyond_the_needs(task_id: str) -> None:
    g = grade_file(task_id, solution_path(task_id), STATIC)
    assert g.full_marks, g.feedback()
    assert g.overgrants == ()
    assert {c.id for c in g.checks} >= {"least-read", "least-write", "least-network"}


# --- full marks are a proof --------------------------------------------------------------------------


def _allowed_attacks(task: Task, run: RunResult) -> set[str]:
    """Attacks that succeed under full marks only because the job itself needs them."""
    ok = set()
    for o in run.probes:
        if o.kind != "attack" or o.outcome != "succeeded":
            continue
        p = probe(o.id)
        paths = task.needs.write if p.action == "write" else task.needs.readable
        if p.target and any(covers(n, p.target) for n in paths):
            ok.add(o.id)  # e.g. tamper-source where the job edits the source
        elif o.id == "exfil-via-allowed-domain" and all(r.host in task.needs.host_names for r in run.scope.reachable if r.uploads):  # type: ignore[union-attr]
            ok.add(o.id)  # the job's own host accepts uploads (npm publish): the secrets are unreadable instead
    return ok


@pytest.mark.parametrize("task_id", [t.id for t in TASKS])
def test_full_marks_mean_the_job_works_nothing_else_is_granted(task_id: str) -> None:
    """Over the whole corpus, the starters and the solutions: a full score never hides an over-grant."""
    task = load_task(task_id)
    policies = {name: raw for name, raw in CORPUS.items() if raw is not None}
    policies.update({"solution": _solution(task_id), **({"starter": task.starter} if task.starter else {})})
    full = []
    for name, raw in policies.items():
        try:
            policy = load_policy(raw)
        except PolicyError:
            continue  # refused before any run (e.g. denyRead "/" hides the runtime): never graded, never full marks
        g = grade(task, policy, STATIC)
        if not g.full_marks:
            continue
        full.append(name)
        run = predict(policy)
        assert g.overgrants == (), name
        jobs = {pid for c in task.checks if c.kind == "succeeded" for pid in c.probes}
        assert all(run.outcome(pid).outcome == "succeeded" for pid in jobs), name
        attacks = {o.id for o in run.probes if o.kind == "attack" and o.outcome == "succeeded"}
        assert attacks <= _allowed_attacks(task, run), (name, attacks)
    assert "solution" in full and "starter" not in full


@pytest.mark.parametrize("task_id", [t.id for t in TASKS])
def test_granting_nothing_is_not_least_privilege(task_id: str) -> None:
    """The policy that games every least-* check: grant nothing. An empty scope is within any needs."""
    task = load_task(task_id)
    g = grade(task, load_policy({"filesystem": {"denyRead": ROOTS}, "network": {"allowedDomains": []}}), STATIC)
    for axis, verb, wanted in (("read", "read", task.needs.read), ("write", "write", task.needs.write),
                               ("network", "reach", task.needs.host_names)):
        c = g.check(f"least-{axis}")
        if wanted:
            assert not c.passed, c.message
            assert f"the agent cannot {verb} {', '.join(wanted)}, which the job needs" in c.message
        else:
            assert c.passed, c.message  # no host needed, none reachable: exactly the needs


# --- a scope that could not be measured never passes ------------------------------------------------


@dataclass(frozen=True)
class _NoScope:
    """A real backend whose scope scan was lost: every probe judged, the scope unknown."""

    name: str = "docker"

    def run(self, plan: RunPlan) -> RunResult:
        return replace(STATIC.run(plan), backend="docker", scope=None)


@pytest.mark.parametrize("task_id", [t.id for t in TASKS])
def test_an_unmeasured_scope_fails_every_least_check(task_id: str) -> None:
    """And every check that claims more than its probes try (it reads the scope too): never assumed."""
    task = load_task(task_id)
    g = grade_file(task_id, solution_path(task_id), _NoScope())
    for c in g.checks:
        if task.check(c.id).scoped:
            assert not c.passed and c.points == 0 and "could not be measured" in c.error
            assert c.message.startswith("could not grade: ") and "could not be measured" in c.message and "Rerun" in c.message
        else:
            assert c.passed and not c.error, c.message
    assert g.overgrants == () and not g.full_marks and g.could_not_grade


# --- overgrants(): the record the board and the lessons call -----------------------------------------


def _overgrants(raw: Optional[dict[str, Any]], needs: Needs) -> tuple[Overgrant, ...]:
    access = baseline_access(WORLD) if raw is None else access_for(load_policy(raw), WORLD)
    return overgrants(predict_scope(access), needs, access)


SRC_OUT = Needs(read=("/project/src",), write=("/project/out",))
# srt: reads are open by default; "only these readable" hides the world's roots and re-opens with allowRead
ROOTS = ["/home/user", "/project", "/app/workspace", "/etc/secrets"]


def test_an_over_grant_names_target_rule_harm_and_the_narrowest_change() -> None:
    found = _overgrants({"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project"]}, "network": {"allowedDomains": []}}, SRC_OUT)
    by_target = {o.target: o for o in found if o.axis == "write"}
    hook = by_target["/project/.git/hooks/pre-commit"]
    assert hook.rule == ("allowWrite", "/project") and hook.grant == 'allowWrite "/project"'
    assert hook.harm == "whatever is added here runs at the next `git commit`, outside the sandbox"  # the world's story
    assert hook.advice == 'Narrow it to "/project/out".' and hook.fix == "narrow"
    assert "/project" in by_target and "/project/src/main.py" in by_target  # a new file in /project; the source
    assert by_target["/project/.env"].harm.startswith("your project .env")
    assert hook.to_json() == {
        "axis": "write", "target": "/project/.git/hooks/pre-commit", "rule": ["allowWrite", "/project"],
        "grant": 'allowWrite "/project"', "harm": hook.harm, "advice": hook.advice, "fix": "narrow", "role": "persistence",
    }
    assert hook.message.startswith('allowWrite "/project" is more than the job needs: /project/.git/hooks/pre-commit: ')


def test_a_secret_or_what_runs_later_inside_a_needed_directory_is_never_covered() -> None:
    needs = Needs(read=("/project",), write=("/project",))
    found = _overgrants({"filesystem": {"denyRead": ROOTS, "allowRead": ["/project"], "allowWrite": ["/project"]}, "network": {"allowedDomains": []}}, needs)
    assert {o.target for o in found if o.axis == "read"} == {"/project/.env"}
    written = {o.target for o in found if o.axis == "write"}
    later = set(WORLD.paths_with_role("persistence", "agent-config"))
    assert {p for p in later if p.startswith("/project/")} <= written
    assert "/project/.env" in written and "/project/.git" in written  # .git holds its config: a new file there runs later too
    assert not written & {"/project", "/project/src", "/project/src/main.py", "/project/out"}
    assert all(o.fix == "deny" for o in found)
    text = " ".join(explain_overgrants(found))
    assert 'add "/project/.env" to filesystem.denyRead' in text
    assert '"/project/.git"' in text and '"/project/.gitconfig"' in text and '"/project/.git/hooks"' not in text  # the outermost only
    # named exactly, a need covers even a secret: the task author meant it
    assert not [o for o in _overgrants({"filesystem": {"denyRead": ROOTS, "allowRead": ["/project/.env"]}, "network": {"allowedDomains": []}},
                                        Needs(read=("/project/.env",))) if o.axis == "read"]


def test_a_directory_next_to_a_start_up_file_is_not_harmless() -> None:
    found = _overgrants({"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/home/user"]}, "network": {"allowedDomains": []}}, SRC_OUT)
    home = next(o for o in found if o.axis == "write" and o.target == "/home/user")
    assert "beside the start-up files" in home.harm and home.fix == "remove"  # the world's story of /home/user


def test_wildcards_are_replaced_by_the_exact_hosts_the_job_needs() -> None:
    needs = Needs(read=("/project/src",), write=("/project/out",),
                  hosts=(HostNeed("pypi.org", "download"), HostNeed("files.pythonhosted.org", "download")))
    found = _overgrants({"filesystem": {"denyRead": ROOTS, "allowRead": ["/project/src"], "allowWrite": ["/project/out"]},
                         "network": {"allowedDomains": ["pypi.org", "*.pypi.org", "*.pythonhosted.org"]}}, needs)
    by_host = {o.target: o for o in found}
    assert set(by_host) == {"upload.pypi.org", "test.pypi.org", "x0fresh0x.pypi.org", "x0fresh0x.pythonhosted.org"}
    assert by_host["upload.pypi.org"].advice == "Remove it." and "accepts uploads (twine upload" in by_host["upload.pypi.org"].harm
    assert by_host["x0fresh0x.pythonhosted.org"].advice == 'Replace it with the exact host the job needs: "files.pythonhosted.org".'


def test_the_attacker_and_download_only_hosts_are_named_as_what_they_are() -> None:
    found = _overgrants({"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/out"]},
                         "network": {"allowedDomains": ["attacker.example", "raw.githubusercontent.com"]}}, SRC_OUT)
    harms = {o.target: o.harm for o in found}
    assert harms["attacker.example"] == "the attacker's own server"
    assert harms["raw.githubusercontent.com"] == "it serves downloads only, but the job never fetches from it"


def test_a_denied_unknown_host_is_not_an_over_grant() -> None:
    found = _overgrants({"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/out"]},
                         "network": {"allowedDomains": ["webhook.site"], "deniedDomains": ["webhook.site"]}}, SRC_OUT)
    assert [o for o in found if o.axis == "network"] == []


def test_the_plain_container_over_grants_on_every_axis() -> None:
    found = _overgrants(None, SRC_OUT)
    assert {o.axis for o in found} == {"read", "write", "network"}
    assert all(o.rule is None and o.grant == "The plain container" for o in found)


def test_a_grant_the_world_does_not_model_fails_closed_once() -> None:
    found = _overgrants({"filesystem": {"denyRead": ROOTS, "allowRead": ["/project/src", "/home/user/.cache"], "allowWrite": ["/project/out", "/home/user/.local/bin"]},
                         "network": {"allowedDomains": []}}, SRC_OUT)
    # srt drops an allowRead of a path that does not exist when the sandbox starts: /home/user/.cache grants nothing
    assert [(o.axis, o.target, o.fix) for o in found] == [("write", "/home/user/.local/bin", "remove")]
    # inside a need it is not one
    assert _overgrants({"filesystem": {"denyRead": ROOTS, "allowRead": ["/project/src/lib"], "allowWrite": ["/project/out/reports"]},
                        "network": {"allowedDomains": []}}, SRC_OUT) == ()


def test_a_grant_outside_the_simulated_machine_is_an_over_grant_named_by_its_pointer() -> None:
    """Issue 22: /var/run/docker.sock, /root, /etc/cron.d (and the runtime) scored full marks; nothing measured them.

    The policy that games it: put a grant where no run looks. It must cost the
    least-* check of its axis, whatever the backend (the grant comes from the
    policy, not from the run), with the entry's JSON pointer in the fix.
    """
    # srt: an allowRead grants only inside a denyRead, so the reads re-open what a deny outside the machine hides
    raw = {"filesystem": {"denyRead": [*ROOTS, "/root", "/opt", "/var/run"], "allowRead": ["/project/src", "/root", "/opt/tools", "/var/run/docker.sock"],
                          "allowWrite": ["/project/out", "/var/run/docker.sock", "/etc/cron.d", "/tmp"]},
           "network": {"allowedDomains": []}}
    found = _overgrants(raw, SRC_OUT)
    assert [(o.axis, o.target, o.fix) for o in found] == [
        ("read", "/root", "remove"), ("read", "/opt/tools", "remove"), ("read", "/var/run/docker.sock", "remove"),
        ("write", "/var/run/docker.sock", "remove"), ("write", "/etc/cron.d", "remove"), ("write", "/tmp", "remove"),
    ]
    assert [o.advice for o in found][:2] == ["Remove it: delete /filesystem/allowRead/1.", "Remove it: delete /filesystem/allowRead/2."]
    assert all("outside the simulated machine" in o.harm for o in found)
    # a grant above the machine covers what the job needs: narrow it, by its pointer
    wide = _overgrants({"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/"], "denyWrite": ["/home/user", "/project", "/app/workspace", "/etc/secrets"]},
                        "network": {"allowedDomains": []}}, Needs(read=("/project/src",), write=()))
    assert [(o.target, o.fix, o.advice) for o in wide if o.axis == "write"] == [("/", "remove", "Remove it: delete /filesystem/allowWrite/0.")]
    # an allowRead no denyRead surrounds grants nothing (reads are open by default): not an over-grant
    assert _overgrants({"filesystem": {"denyRead": ROOTS, "allowRead": ["/project/src", "/root"], "allowWrite": ["/project/out"]},
                        "network": {"allowedDomains": []}}, SRC_OUT) == ()


def test_the_runtime_is_never_judged() -> None:
    world = replace(WORLD, files=(*WORLD.files, WorldFile("/home/user/.cache/runtime.so", "runtime", "a shared library", "")))  # type: ignore[arg-type]
    access = access_for(load_policy({"filesystem": {}, "network": {"allowedDomains": []}}), world)
    scope = predict_scope(access)
    assert "/home/user/.cache/runtime.so" not in {o.target for o in overgrants(replace(scope, readable=(*scope.readable, "/home/user/.cache/runtime.so")), SRC_OUT, access)}


def test_needs_in_words_and_json() -> None:
    needs = load_task("pip-install-only").needs
    assert needs.in_words() == "reads /project/src; writes /project/out; talks to pypi.org (download only), files.pythonhosted.org (download only)"
    assert needs.to_json()["hosts"] == [{"host": "pypi.org", "use": "download"}, {"host": "files.pythonhosted.org", "use": "download"}]
    assert load_task("scope-secure-sandbox").needs.in_words() == "reads /project/src; writes /project/out; no network"


def test_grade_json_lists_the_over_grants_for_the_board() -> None:
    g = _grade("pip-install-only", _with("pip-install-only", allowedDomains=["pypi.org", "files.pythonhosted.org", "webhook.site"]))
    out = g.to_json()
    assert [o["target"] for o in out["overgrants"]] == ["webhook.site"]
    assert out["overgrants"][0]["rule"] == ["allowedDomains", "webhook.site"]


def test_world_roles_used_here_exist() -> None:
    """The roles this module relies on are the world's: a renamed role would silently cover a secret."""
    roles = {f.role for f in WORLD.files} | {d.role for d in WORLD.dirs}
    assert {"secret", "persistence"} <= roles
    assert isinstance(WORLD, World)
