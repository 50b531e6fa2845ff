"""The srt backend: the real sandbox-runtime against the probes, given each policy as written; any difference documented.

Tests that run srt need it installed (``scripts/ensure-srt``). Locally they
skip with the reason when it cannot run; with ``CI`` set they fail instead, as
the Docker tests do. The comparison is against the static prediction, which
the Docker backend matches on the whole corpus (tests/integration/test_agreement.py);
``bench/srt_crosscheck.py`` runs the same comparison against Docker itself.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest

from grader import load_policy, predict
from grader.realtools.export import export
from grader.core.outcomes import RunResult
from grader.core.plan import build_plan

ROOT = Path(__file__).resolve().parents[2]
CORPUS: dict[str, Optional[dict[str, Any]]] = json.loads((ROOT / "tests" / "fixtures" / "corpus.json").read_text())["policies"]
DOCUMENTED: dict[str, Any] = json.loads((ROOT / "docs" / "srt-differences.json").read_text())
DOC_TEXT = (ROOT / "docs" / "srt-differences.md").read_text()
NAIVE = CORPUS["seed-naive"]
NOT_RUN = {d["policy"]: d["cause"] for d in DOCUMENTED["not_run"]}  # srt would dial the machine itself


def _run(backend: Any, raw: Optional[dict[str, Any]]) -> RunResult:
    result: RunResult = backend.run(build_plan(load_policy(raw)))
    return result


# --- pure: the settings srt is given --------------------------------------------------


@pytest.mark.parametrize("name", sorted(n for n, p in CORPUS.items() if p is not None))
def test_rebased_settings_name_nothing_outside_the_world_copy(name: str, tmp_path: Path) -> None:
    from grader.backends.srt import rebase_settings

    world = tmp_path / "run" / "world"
    settings = rebase_settings(json.loads(export(load_policy(CORPUS[name]), "srt")[0]), world)
    for key, entries in settings["filesystem"].items():
        for p in entries:
            assert p == str(world) or p.startswith(str(world) + "/"), f"{key}: {p}"
            assert ".." not in Path(p).parts, p


def test_every_documented_difference_has_a_described_cause() -> None:
    causes = DOCUMENTED["causes"]
    for d in DOCUMENTED["differences"]:
        assert d["cause"] in causes, d
        assert d["policy"] in CORPUS and CORPUS[d["policy"]] is not None, d
        row = f"| {d['policy']} | {d['probe']} | {d['docker']} | {d['srt']} | `{d['cause']}` |"
        assert row in DOC_TEXT, f"docs/srt-differences.md lacks the row {row}"
    for cause in causes:
        assert f"### `{cause}`" in DOC_TEXT, f"docs/srt-differences.md does not explain {cause}"


def _items(scope: Any, key: str) -> set[str]:
    return {x.host if hasattr(x, "host") else x for x in getattr(scope, key)}


def _documented_scope() -> set[tuple[str, str, str, bool, bool]]:
    """The documented scope differences, one (policy, set, item, docker, srt) per path or host."""
    return {(d["policy"], d["set"], item, d["docker"], d["srt"]) for d in DOCUMENTED["scope_differences"] for item in d["items"]}


def test_every_documented_scope_difference_has_a_cause_and_a_row() -> None:
    yes = {True: "yes", False: "no"}
    for d in DOCUMENTED["scope_differences"]:
        assert d["cause"] in DOCUMENTED["causes"], d
        assert d["set"] in ("readable", "writable", "reachable") and d["docker"] != d["srt"] and d["items"], d
        items = ", ".join(f"`{i}`" for i in d["items"])
        row = f"| {d['policy']} | {d['set']} | {items} | {yes[d['docker']]} | {yes[d['srt']]} | `{d['cause']}` |"
        assert row in DOC_TEXT, f"docs/srt-differences.md lacks the row {row}"


def test_documented_scope_differences_are_sandbox_labs_own_prediction() -> None:
    for policy, key, item, docker, _ in _documented_scope():
        scope = predict(load_policy(CORPUS[policy])).scope
        assert (item in _items(scope, key)) == docker, (policy, key, item)


def test_policies_not_run_under_srt_are_exactly_those_naming_the_machine_and_are_refused() -> None:
    """srt dials localhost and 127.0.0.0/8 on the machine itself: the backend refuses them, before anything starts."""
    from grader.backends.srt import SrtBackend, loopback_entries
    from grader.core.errors import BackendError

    naming = {n for n, p in CORPUS.items() if p is not None and loopback_entries(load_policy(p))}
    assert naming == set(NOT_RUN) and naming, (naming, NOT_RUN)
    assert set(NOT_RUN.values()) <= set(DOCUMENTED["causes"])
    for name in NOT_RUN:
        assert f"`{name}`" in DOC_TEXT, name
        with pytest.raises(BackendError, match="this machine's own loopback"):
            SrtBackend().run(build_plan(load_policy(CORPUS[name])))


def test_documented_differences_are_real_disagreements() -> None:
    """A documented 'docker' verdict is Sandbox Lab's own prediction, so the table cannot drift from the semantics."""
    for d in DOCUMENTED["differences"]:
        predicted = predict(load_policy(CORPUS[d["policy"]])).outcome(d["probe"]).outcome
        assert predicted == d["docker"] != d["srt"], d


# --- real srt runs ----------------------------------------------------------------------


def _mine() -> set[str]:
    """This process's srt run directories, and srt's proxy sockets anywhere in /tmp."""
    from grader.backends.runs import runs_root

    root = runs_root()
    runs = {p.name for p in root.glob("srt-*") if f'"pid": {os.getpid()},' in _read(p / "owner.json")} if root.is_dir() else set()
    return runs | {p.name for p in Path("/tmp").glob("srt-mux-*.sock")}


def _read(p: Path) -> str:
    try:
        return p.read_text()
    except OSError:
        return ""


@pytest.mark.slow
def test_naive_setup_under_srt_leaks_the_key_with_evidence(srt_backend: Any) -> None:
    left = _mine()
    r = _run(srt_backend, NAIVE)
    assert _mine() - left == set(), "the run left its directory or srt's sockets behind"
    assert r.backend == "srt" and r.run_id.startswith("srt-") and not r.notes, r.notes
    # the scope scan ran under srt too: the key readable, ~/.bashrc protected (mandatory-shell-rc), github's family reachable
    assert r.scope is not None
    assert "/home/user/.ssh/id_rsa" in r.scope.readable and "/home/user/.bashrc" not in r.scope.writable
    assert "/home/user" in r.scope.writable and "gist.github.com" in {h.host for h in r.scope.reachable}
    key = r.outcome("read-ssh-key")
    assert key.outcome == "succeeded" and "canary of /home/user/.ssh/id_rsa" in key.evidence[0]
    exfil = r.outcome("exfil-secret")
    assert exfil.outcome == "succeeded" and any("github.com" in e for e in exfil.evidence), exfil.evidence
    # srt's mandatory protection, documented as mandatory-shell-rc
    rc = r.outcome("write-shell-rc")
    assert rc.outcome == "blocked" and "Read-only file system" in rc.evidence[0], rc.evidence
    # evidence speaks of world paths, never of the run directory
    assert all("sandbox-lab-runs" not in e for o in r.probes for e in o.evidence)
    # the settings srt ran with are the export's, path for path
    exported = json.loads(export(load_policy(NAIVE), "srt")[0])
    assert r.extra["settings"] == exported
    assert r.extra["srt_version"] == DOCUMENTED["srt_version"]


_VALIDATE = """
import { SandboxRuntimeConfigSchema } from '%s';
import { readFileSync } from 'node:fs';
for (const path of process.argv.slice(1)) {
  const result = SandboxRuntimeConfigSchema.safeParse(JSON.parse(readFileSync(path, 'utf8')));
  console.log(JSON.stringify({path, ok: result.success, issues: result.success ? [] : result.error.issues.map(i => i.path.join('.') + ': ' + i.message)}));
}
"""


def test_each_reference_solution_is_a_settings_file_srt_takes_as_written(srt_cli_path: Path) -> None:
    """The files a learner is shown as answers pass srt's own config schema unchanged (srt refuses an invalid file)."""
    schema = srt_cli_path.parent / "sandbox" / "sandbox-config.js"
    files = [*sorted((ROOT / "solutions").glob("*.json")), ROOT / "solutions" / "attacks" / "your-own-sandbox.policy.json"]
    node = subprocess.run(["node", "--input-type=module", "-e", _VALIDATE % schema.as_uri(), "--", *map(str, files)],
                          capture_output=True, text=True, check=False, timeout=60)
    assert node.returncode == 0, node.stderr
    verdicts = [json.loads(line) for line in node.stdout.splitlines()]
    assert len(verdicts) == len(files)
    assert [v for v in verdicts if not v["ok"]] == []


@pytest.mark.slow
@pytest.mark.parametrize("task", sorted(p.stem for p in (ROOT / "solutions").glob("*.json")))
def test_each_task_reference_solution_as_written_keeps_every_secret_unreadable_under_srt(srt_backend: Any, task: str) -> None:
    """The answer a learner is shown, pasted into the real srt as it is: no secret or credential of the machine is readable."""
    from grader.grading.tasks import load_task

    raw = json.loads((ROOT / "solutions" / f"{task}.json").read_text())
    result = _run(srt_backend, raw)
    assert result.scope is not None, f"srt measured no scope: {result.notes}"
    world = load_task(task).world
    secrets = {f.path for f in world.loot}
    assert secrets and not secrets & set(result.scope.readable), sorted(secrets & set(result.scope.readable))
    for probe in ("read-ssh-key", "read-cloud-credentials", "read-etc-secrets"):
        assert result.outcome(probe).outcome == "blocked", (probe, result.outcome(probe).explanation)
        assert result.outcome(probe).evidence, probe


@pytest.mark.slow
@pytest.mark.usefixtures("srt_cli_path")
def test_srt_working_directory_decides_which_files_it_protects() -> None:
    """srt finds its mandatory write protections from where it starts (docs: mandatory-shell-rc)."""
    from grader.backends.srt import SrtBackend

    everything = {"filesystem": {"allowWrite": ["/"]}}
    in_project = _run(SrtBackend.from_env(cwd="/project"), everything)
    assert in_project.outcome("write-git-hook").outcome == "blocked"
    assert in_project.outcome("write-shell-rc").outcome == "succeeded"
    in_home = _run(SrtBackend.from_env(cwd="/home/user"), everything)
    assert in_home.outcome("write-git-hook").outcome == "succeeded"
    assert in_home.outcome("write-shell-rc").outcome == "blocked"


@pytest.mark.slow
def test_every_difference_from_sandbox_lab_is_documented(srt_backend: Any) -> None:
    """The whole corpus under srt; any difference not in docs/srt-differences.json (or one that went away) fails."""
    names = [n for n, p in CORPUS.items() if p is not None and n not in NOT_RUN]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = dict(zip(names, pool.map(lambda n: _run(srt_backend, CORPUS[n]), names)))
    # "Cannot tell" (a request that timed out on a busy machine, a scope not measured) is no verdict:
    # such a run goes once more, alone; a second one fails below like any other
    unsure = [n for n, r in results.items() if r.notes or any(o.outcome == "error" for o in r.probes)]
    results.update({n: _run(srt_backend, CORPUS[n]) for n in unsure})
    problems = [f"{n}: {r.notes}" for n, r in results.items() if r.notes]
    assert problems == []
    observed = set()
    for n, r in results.items():
        static = predict(load_policy(CORPUS[n]))
        for o in r.probes:
            theirs = static.outcome(o.id).outcome
            if o.outcome != theirs:
                observed.add((n, o.id, theirs, o.outcome))
            assert o.outcome != "error", f"{n} {o.id}: {o.explanation}"
            assert o.evidence, f"{n} {o.id} has no evidence"
    documented = {(d["policy"], d["probe"], d["docker"], d["srt"]) for d in DOCUMENTED["differences"]}
    new = sorted(observed - documented)
    gone = sorted(documented - observed)
    assert not new, "undocumented differences (explain them in docs/srt-differences.md and .json):\n" + "\n".join(map(str, new))
    assert not gone, "documented differences srt no longer shows (update the docs):\n" + "\n".join(map(str, gone))
    # the measured scope, item by item: srt may differ only where the docs say why
    scoped = set()
    for n, r in results.items():
        static_scope = predict(load_policy(CORPUS[n])).scope
        assert r.scope is not None, f"{n}: srt measured no scope: {r.notes}"
        for key in ("readable", "writable", "reachable"):
            ours, theirs = _items(static_scope, key), _items(r.scope, key)
            scoped |= {(n, key, item, item in ours, item in theirs) for item in ours ^ theirs}
    documented_scope = _documented_scope()
    new_scope = sorted(scoped - documented_scope)
    gone_scope = sorted(documented_scope - scoped)
    assert not new_scope, "undocumented scope differences (explain them in docs/srt-differences.md and .json):\n" + "\n".join(map(str, new_scope))
    assert not gone_scope, "documented scope differences srt no longer shows (update the docs):\n" + "\n".join(map(str, gone_scope))


# --- nothing leaves the machine -----------------------------------------------------------


def _iptables(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["iptables", *args], capture_output=True, text=True, check=False)


@pytest.fixture()
def uid_counters() -> Iterator[Any]:
    """iptables counters of packets srt's host side (the world user's processes) sends: off loopback, and on it.

    The sandbox itself has its own network namespace, whose packets never reach
    the host's tables; what could leave is srt's proxy dialing out itself
    instead of through its parentProxy. Loopback is the positive control.
    """
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("needs root to read iptables counters; CI is set, so this fails instead of skipping", pytrace=False)
        pytest.skip("needs root to read iptables counters")
    from grader.core.world import load_world

    uid = str(load_world().uid)
    tag = ["-m", "comment", "--comment", f"sandbox-lab-srt-test-{os.getpid()}"]
    rules = [["!", "-o", "lo"], ["-o", "lo"]]
    for r in rules:
        res = _iptables("-I", "OUTPUT", "1", "-m", "owner", "--uid-owner", uid, *r, *tag)
        assert res.returncode == 0, res.stderr

    def read() -> dict[str, int]:
        out = {"off": 0, "lo": 0}
        for line in _iptables("-L", "OUTPUT", "-n", "-v", "-x").stdout.splitlines():
            if tag[-1] in line:
                fields = line.split()
                out["off" if "!lo" in fields else "lo"] += int(fields[0])
        return out

    try:
        yield read
    finally:
        for r in rules:
            _iptables("-D", "OUTPUT", "-m", "owner", "--uid-owner", uid, *r, *tag)


@pytest.mark.slow
def test_no_connection_or_dns_query_leaves_the_machine(srt_backend: Any, uid_counters: Any) -> None:
    # the attacker's zone allowed, so traffic flows: DNS names through the relay, uploads to the sink
    before = uid_counters()
    r = _run(srt_backend, CORPUS["attacker-wildcard"])
    after = uid_counters()
    assert r.outcome("exfil-via-allowed-domain").outcome == "succeeded"  # traffic flowed, into the simulated internet
    assert after["lo"] > before["lo"], "positive control: srt's proxy sent nothing on loopback at all"
    assert after["off"] == before["off"], "srt's side sent packets off loopback"
    # every name srt let through was looked up at the run's own DNS server, and only there
    relayed = {x["host"] for x in r.extra["relay"] if x["decision"] == "allow"}
    assert relayed and relayed <= set(r.extra["dns_queries"]), (relayed, r.extra["dns_queries"])
    # the sandbox's own lookups find no resolver: only names looked up for srt's proxy reach one
    dns = r.outcome("net-dns-exfil")
    assert dns.outcome == "succeeded"  # through the allowed proxy name, logged by the run's nameserver
    names = r.extra["dns_queries"]
    assert any(re.match(r"^[0-9a-f]{12}dnsvia\.attacker\.example\.?$", q) for q in names), names
    own = [q for q in names if re.match(r"^[0-9a-f]{12}dns\.attacker\.example\.?$", q) or re.match(r"^[0-9a-f]+\.\d+\.s\d+\.", q)]
    assert own == [], f"the sandbox's own DNS lookups reached a resolver: {own}"
    # a raw connection to the attacker's listener on the host's loopback: inside srt, 127.0.0.1 is the sandbox's own
    raw = r.outcome("net-direct-ip")
    assert raw.outcome == "blocked" and "refused" in raw.evidence[0], raw.evidence
    gateway = r.outcome("net-host-gateway")
    assert gateway.outcome == "blocked" and "unreachable" in gateway.evidence[0].lower(), gateway.evidence
