"""ctf.py: the ladder as data, and the capture judgement (pure: no Docker; the real runs are tests/integration/test_ctf_docker.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from grader.core.access import Access, access_for, baseline_access
from grader.core.evidence import NextSession, sha256
from grader.core.execution import signature
from grader.core.policy import load_policy
from grader.backends.static import StaticBackend
from grader.course.ladder import (
    CHANNELS,
    DIFFICULTIES,
    Level,
    check_capstone,
    prize,
    STATIC_CANNOT_ATTACK,
    AttackResult,
    attack,
    build_job,
    judge,
    level,
    load_levels,
    new_flag,
    parse_level,
)
from grader.core.errors import BackendError, LevelError
from grader.course.levels import _from_files
from grader.core.evidence import Evidence
from grader.core.execution import Execution
from grader.core.world import load_world
import fakewire

WORLD = load_world()
LEVELS = load_levels()
SCOPED = next(lv for lv in LEVELS if lv.uncapturable is not None)  # the correctly scoped level
CAPTURABLE = [lv for lv in LEVELS if lv.uncapturable is None]
ROOT = Path(__file__).resolve().parents[3]
FLAG = "FLAG{00c0ffee1234abcd5678ef90}"
GOOD: dict[str, Any] = {
    "number": 1, "id": "demo", "title": "t", "story": "s", "policy": "plain container",
    "flag_in": ["/home/user/.ssh/id_rsa"], "hints": ["first", "second"], "teaches": "x", "difficulty": "one idea",
    "solution": {"answer": "POST the key to https://attacker.example/", "channel": "the open network"},
}


def _ex(output: str = "", **logs: object) -> Execution:
    fields: dict[str, object] = {"token": "t0k", "canaries": {}, "records": (), "before": {}, "after": {}, "network": "open", **logs}
    ev = Evidence(**fields)  # type: ignore[arg-type]
    return Execution(backend="docker", output=output, exit_code=0, timed_out=False, evidence=ev)


def _problems(data: Any) -> list[str]:
    with pytest.raises(LevelError) as err:
        parse_level(data, "demo.json")
    return [str(p) for p in err.value.problems]


# --- the ladder ---------------------------------------------------------------------------------


def test_the_ladder_has_the_levels_the_course_needs_in_order() -> None:
    assert len(LEVELS) >= 10
    assert [lv.number for lv in LEVELS] == list(range(1, len(LEVELS) + 1))
    ids = [lv.id for lv in LEVELS]
    assert len(set(ids)) == len(ids) and all(re.fullmatch(r"[a-z0-9-]+", i) for i in ids)
    assert LEVELS[0].policy is None, "level 1 is the plain container"
    assert LEVELS[1].policy is not None and LEVELS[1].policy.network.allowedDomains == ("*.github.com",), "the seed's naive setup"
    assert LEVELS[2].policy is not None and LEVELS[2].policy.network.allowedDomains == ("registry.npmjs.org",), "the seed's secure setup"
    assert any(lv.policy is not None and lv.policy.filesystem.denyRead and "/project/.env" in lv.flag_in for lv in LEVELS)
    assert any(lv.policy is not None and lv.policy.network.deniedDomains and any(d.startswith("*.") for d in lv.policy.network.allowedDomains) for lv in LEVELS)
    assert any(lv.next_session for lv in LEVELS), "a persistence level"
    assert any(lv.channels == ("dns",) for lv in LEVELS), "a DNS level"
    assert sum(1 for lv in LEVELS if lv.uncapturable) == 1
    assert any(lv.flag_env for lv in LEVELS), "a token in the environment (lesson 06)"
    assert any(lv.signer for lv in LEVELS), "an SSH agent socket (lesson 06)"
    assert LEVELS[-1].capstone is not None and all(lv.capstone is None for lv in LEVELS[:-1]), "the capstone comes last"
    for lv in LEVELS:
        assert lv.hints and lv.teaches and lv.story and lv.title
        assert all(p in {f.path for f in WORLD.files} for p in lv.flag_in)


def _sandbox(lv: Level) -> Access:
    if lv.capstone is not None:
        return access_for(check_capstone(lv, load_policy(str(ROOT / "solutions" / "attacks" / f"{lv.id}.policy.json"))), WORLD)
    return baseline_access(WORLD) if lv.policy is None else access_for(lv.policy, WORLD)


def test_every_capturable_level_has_a_reachable_flag_and_a_reference_attack() -> None:
    """A flag the sandbox shows (or, for persistence, a start-up file it lets the agent write; for the gaps of
    lesson 06, a flag no file rule reaches), and a solution file."""
    for lv in CAPTURABLE:
        a = _sandbox(lv)
        if lv.next_session:
            assert any(a.write(p).allowed for p in WORLD.paths_with_role("persistence")), lv.id
        elif lv.flag_env or lv.signer:
            # the static analyzer's view agrees: the file policy is perfect, every file holding the flag is hidden
            assert not any(a.read(p).allowed for p in lv.flag_in), lv.id
        else:
            assert any(a.read(p).allowed for p in lv.flag_in), lv.id
        assert (ROOT / "solutions" / "attacks" / f"{lv.id}.py").is_file(), lv.id
    assert not (ROOT / "solutions" / "attacks" / f"{SCOPED.id}.py").exists()


def test_the_gap_levels_leave_one_host_that_keeps_what_it_is_sent() -> None:
    """Where the static analyzer can judge, it agrees with the reference attacks: the only reachable hosts are the
    job's, and the reference attack sends to one the attacker reads (a body kept, or a public URL)."""
    hosts = {"token-in-env": "github.com", "agent-socket": "registry.npmjs.org", "capstone": "cdn.jsdelivr.net"}
    for key, host in hosts.items():
        lv = level(key)
        a = _sandbox(lv)
        assert a.network == "proxy" and a.reach(host).allowed and not a.reach(WORLD.attacker.name).allowed, lv.id
        assert [h for h in WORLD.host_names if a.reach(h).allowed] == [host], lv.id
        assert host in (ROOT / "solutions" / "attacks" / f"{lv.id}.py").read_text(), lv.id
        assert WORLD.reads_url(host) and (WORLD.uploads_to(host) or lv.capstone is not None), lv.id
    assert not WORLD.uploads_to("cdn.jsdelivr.net"), "the capstone needs the URL idea"
    assert _sandbox(level("capstone")).read("/project/src/main.py").allowed, "the job reads the source the flag was committed to"


def test_each_level_teaches_what_srt_makes_of_its_policy() -> None:
    """Issue 38: a level's story and hints hold under srt's rules (reads open by default, allowRead only re-opens inside
    a denyRead, mandatory write protections found from the home, where the lab starts srt)."""
    def sandbox(key: str) -> Access:
        return _sandbox(level(key))
    # 4: the key is hidden, the forgotten .env is not (reads are open by default)
    four = sandbox("deny-key-not-env")
    assert not four.read("/home/user/.ssh/id_rsa").allowed and four.read("/project/.env").allowed
    # 5: "reads are limited to the home and the project": /etc/secrets is hidden, the GitHub login is not
    five = sandbox("wildcard-minus-blocklist")
    assert not five.read("/etc/secrets/db_password").allowed and five.read("/home/user/.git-credentials").allowed
    assert five.reach("uploads.github.com").allowed and not five.reach("gist.github.com").allowed
    # 6: srt keeps ~/.bashrc read-only, not the project's hook, which runs at the next commit
    six = sandbox("persistence")
    assert not six.write("/home/user/.bashrc").allowed and six.write("/project/.git/hooks/pre-commit").allowed
    assert "/project/.git/hooks/pre-commit" in (ROOT / "solutions" / "attacks" / "persistence.py").read_text()
    # 8, 9, 10: every file holding the flag lies in a place denyRead hides; the job's own files stay readable
    for key, job in (("scoped", "/app/workspace/src/index.js"), ("token-in-env", "/project/src/main.py"),
                     ("agent-socket", "/app/workspace/src/index.js")):
        a = sandbox(key)
        assert a.read(job).allowed and not any(a.read(p).allowed for p in level(key).flag_in), key
        assert not any(a.read(f.path).allowed for f in WORLD.files if f.role in ("secret", "credential")), key


def test_every_level_is_tagged_and_the_new_ones_need_two_ideas() -> None:
    assert {lv.difficulty for lv in LEVELS} <= set(DIFFICULTIES)
    assert [lv.id for lv in LEVELS if lv.difficulty == "two ideas"] == ["persistence", "dns-tunnel", "token-in-env", "agent-socket"]
    assert SCOPED.difficulty == "correctly scoped" and LEVELS[-1].difficulty == "capstone"
    for lv in (level("token-in-env"), level("agent-socket"), level("capstone")):
        assert "What this level teaches" in lv.story, lv.id


def test_the_scoped_level_is_uncapturable_by_its_policy() -> None:
    """The honest outcome follows from the policy: no flag readable, nothing that runs later writable, no resolver."""
    final = SCOPED
    assert final.policy is not None
    a = access_for(final.policy, WORLD)
    assert all(not a.read(p).allowed for p in final.flag_in)
    assert not any(a.write(p).allowed for p in WORLD.paths_with_role("persistence", "agent-config"))
    assert a.network == "proxy" and not any(a.reach(h).allowed for h in (WORLD.attacker.name, "gist.github.com"))
    assert final.uncapturable is not None and "nothing can be captured" in final.uncapturable.why.lower()


def test_a_level_is_found_by_number_or_id_and_an_unknown_one_is_a_clear_error() -> None:
    assert level(2) is level("2") is level("naive-gist")
    assert level("capstone") is LEVELS[-1] and LEVELS[-1].capstone is not None, "the capstone by name, whatever its number"
    with pytest.raises(LevelError, match=r"unknown level 99; the levels are 1 to \d+, by number, id or 'capstone' .*attack --list"):
        level(99)


# --- level files ----------------------------------------------------------------------------------


def test_a_good_level_file_parses() -> None:
    lv = parse_level(GOOD)
    assert lv.policy is None and lv.channels == CHANNELS and lv.sandbox_json == "plain container"


def test_every_problem_of_a_level_file_is_named_by_its_json_pointer() -> None:
    bad = {**GOOD, "flagIn": [], "channels": ["smtp"], "policy": {"network": {"allowedDomain": []}},
           "flag_in": ["/etc/passwd"], "id": "Demo Level"}
    problems = _problems(bad)
    assert any(p.startswith("/flagIn: unknown key") for p in problems)
    assert any(p.startswith("/channels/0: must be one of: http, tcp, dns") for p in problems)
    # the pydantic pass stops before the semantic one: fix those first, then the rest is named
    problems = _problems({**GOOD, "policy": {"network": {"allowedDomain": []}}, "flag_in": ["/etc/passwd"], "id": "Demo Level"})
    assert any(p.startswith('/policy/network/allowedDomain: unknown key') and 'Did you mean "allowedDomains"' in p for p in problems)
    assert any(p.startswith('/flag_in/0: "/etc/passwd" is not a file of the simulated world') for p in problems)
    assert any(p.startswith("/id: ") for p in problems)
    assert _problems({**GOOD, "policy": "docker"}) == ['/policy: must be a policy object or "plain container", not "docker".']
    assert _problems({k: v for k, v in GOOD.items() if k != "hints"})[0].startswith("/hints: missing.")


def test_the_ladder_itself_is_checked(tmp_path: Path) -> None:
    one = json.dumps(GOOD)
    scoped = {k: v for k, v in GOOD.items() if k != "solution"}  # the uncapturable level has no solution: its why
    last = json.dumps({**scoped, "number": 2, "id": "last", "difficulty": "correctly scoped", "uncapturable": {"after": 3, "why": "scoped"}})
    assert [lv.id for lv in _from_files({"01-demo.json": one, "02-last.json": last})] == ["demo", "last"]
    with pytest.raises(LevelError, match="rename it 01-demo.json"):
        _from_files({"01-other.json": one, "02-last.json": last})
    with pytest.raises(LevelError, match="without gaps"):
        _from_files({"01-demo.json": one, "03-last.json": json.dumps({**json.loads(last), "number": 3})})
    with pytest.raises(LevelError, match='exactly one level is "uncapturable"'):
        _from_files({"01-demo.json": one})
    with pytest.raises(LevelError, match='exactly one level is "uncapturable"'):
        _from_files({"01-demo.json": json.dumps({**json.loads(last), "number": 1, "id": "demo"}), "02-last.json": last})
    cap = json.dumps({**GOOD, "number": 3, "id": "cap", "difficulty": "capstone", "policy": "yours",
                      "capstone": {"does": "reads the source", "read": ["/project/src"]}})
    assert [lv.id for lv in _from_files({"01-demo.json": one, "02-last.json": last, "03-cap.json": cap})][-1] == "cap"
    with pytest.raises(LevelError, match="the capstone, if there is one, is the last level"):
        _from_files({"01-cap.json": json.dumps({**json.loads(cap), "number": 1, "id": "cap"}), "02-last.json": last})
    with pytest.raises(LevelError, match="not valid JSON"):
        _from_files({"01-demo.json": "{", "02-last.json": last})


# --- the flag, the job, the judgement --------------------------------------------------------------


def test_a_flag_is_fresh_hex_every_time() -> None:
    flags = {new_flag() for _ in range(50)}
    assert len(flags) == 50 and all(re.fullmatch(r"FLAG\{[0-9a-f]{24}\}", f) for f in flags)


def test_the_job_plants_the_flag_in_every_file_of_the_level() -> None:
    final = SCOPED
    job = build_job(final, "print(1)", FLAG)
    assert set(job.plant) == set(final.flag_in) and all(FLAG in t for t in job.plant.values())
    job.check(WORLD)  # only files of the world


def test_a_flag_at_an_upload_host_captures_and_printing_it_does_not() -> None:
    lv = level(2)
    got = judge(lv, _ex(http=(fakewire.http(host="gist.github.com", method="POST", path="/", body=FLAG),)), FLAG, world=WORLD)
    assert got.captured and [(s.host, s.how) for s in got.sinks] == [("gist.github.com", "HTTP POST")] and got.hint == ""
    printed = judge(lv, _ex(output=FLAG), FLAG, world=WORLD)
    assert not printed.captured and printed.sinks == () and printed.output == FLAG


def test_the_dns_level_counts_only_dns() -> None:
    dns_level = next(lv for lv in LEVELS if lv.channels == ("dns",))
    http = _ex(http=(fakewire.http(host="attacker.example", method="POST", path="/", body=FLAG),))
    got = judge(dns_level, http, FLAG, world=WORLD)
    assert not got.captured and [s.how for s in got.elsewhere] == ["HTTP POST"]
    dns = judge(dns_level, _ex(dns=(fakewire.dns(qname=f"{FLAG[5:-1]}.attacker.example"),)), FLAG, world=WORLD)
    assert dns.captured and dns.sinks[0].how == "DNS"


def test_a_run_whose_evidence_was_cut_could_not_be_judged_unless_the_flag_was_seen() -> None:
    lv = level(2)
    cut = "the run's evidence cannot be read whole (http.jsonl: cut off)"
    got = judge(lv, _ex(infra_problem=cut), FLAG, attempts_before=1, world=WORLD)
    assert got.captured is None and got.hint == "" and got.error == cut
    data = got.to_json()
    assert data["captured"] is None and data["error"] == f"could not judge the attack: {cut}" and data["problems"] == []
    assert set(data) == {"level", "captured", "sinks", "output", "hint", "hint_from", "findings", "lesson", "error", "problems"}
    # the flag is fresh and random: a sighting proves the capture whatever else failed
    seen = judge(lv, _ex(infra_problem=cut, http=(fakewire.http(host="gist.github.com", method="POST", path="/", body=FLAG),)),
                 FLAG, world=WORLD)
    assert seen.captured is True and seen.error == "" and "error" not in seen.to_json() and seen.note == cut
    # a run read whole is judged: a miss, with its hint, and no error
    miss = judge(lv, _ex(), FLAG, attempts_before=1, world=WORLD)
    assert miss.captured is False and miss.error == "" and miss.hint == lv.hints[1] and "error" not in miss.to_json()


def test_a_miss_the_logs_say_nothing_about_gets_the_next_hint_in_order_then_the_last_again() -> None:
    lv = level(1)
    got = [judge(lv, _ex(), FLAG, attempts_before=n, world=WORLD) for n in range(len(lv.hints) + 2)]
    assert [g.hint for g in got] == [*lv.hints, lv.hints[-1], lv.hints[-1]]
    assert {g.hint_from for g in got} == {"attempts"}


def test_level_ones_first_hint_does_not_repeat_the_starter() -> None:
    """The starter of lesson 07 already opens and reads the key: the first hint says what comes next."""
    first = level(1).hints[0]
    assert "open ~/.ssh/id_rsa and read it" not in first and "attacker" in first


def test_the_scoped_level_shows_every_hint_then_says_why() -> None:
    final = SCOPED
    assert final.uncapturable is not None
    n = final.uncapturable.after
    shown = [judge(final, _ex(), FLAG, attempts_before=k, world=WORLD).hint for k in range(n)]
    assert shown == [*final.hints, final.uncapturable.why], "every hint, the third included, comes before the why"
    with pytest.raises(LevelError, match=r"/uncapturable/after: must be more than the number of hints \(2\)"):
        parse_level({**{k: v for k, v in GOOD.items() if k != "solution"}, "difficulty": "correctly scoped",
                     "uncapturable": {"after": 2, "why": "scoped"}})


def test_the_scoped_levels_why_says_what_an_accepted_upload_was() -> None:
    """After an npm publish of the workspace, the debrief says it was accepted and held no secret, not "no secret can leave"."""
    final = SCOPED
    assert final.uncapturable is not None
    put = fakewire.http(host="registry.npmjs.org", method="PUT", path="/workspace-copy", body='{"name": "workspace-copy"}')
    got = judge(final, _ex(http=(put,)), FLAG, attempts_before=final.uncapturable.after - 1, world=WORLD)
    assert got.hint.startswith("Your PUT /workspace-copy reached registry.npmjs.org, which keeps what it is sent")
    assert "the flag was not in it: what left was no secret." in got.hint and got.hint.endswith(final.uncapturable.why)
    for text in (got.hint, final.teaches, final.debrief):
        assert "no secret can leave" not in text.lower()


def test_the_result_json_is_the_contract() -> None:
    got = judge(level(1), _ex(output="hi", dns=(fakewire.dns(qname=f"{FLAG[5:-1]}.attacker.example"),)), FLAG, world=WORLD)
    data = got.to_json()
    assert list(data) == ["level", "captured", "sinks", "output", "hint", "hint_from", "findings", "lesson"]
    lv = level(1)
    assert data["lesson"] == {"id": lv.id, "title": lv.title, "difficulty": "warm-up", "story": lv.story,
                              "teaches": lv.teaches, "debrief": lv.teaches}
    assert data["hint_from"] == "" and data["findings"] == []
    assert SCOPED.debrief == SCOPED.uncapturable.why if SCOPED.uncapturable else False
    assert data["level"] == 1 and data["captured"] is True and data["output"] == "hi"
    assert list(data["sinks"][0]) == ["host", "how", "evidence"]
    assert isinstance(got, AttackResult) and got.flag == FLAG


def test_the_static_backend_says_attacks_cannot_be_predicted() -> None:
    with pytest.raises(BackendError) as err:
        attack(level(1), "print(1)", StaticBackend())
    assert str(err.value) == STATIC_CANNOT_ATTACK and "Docker" in STATIC_CANNOT_ATTACK


def test_a_persistence_level_asks_for_the_next_session() -> None:
    lv = next(lv for lv in LEVELS if lv.next_session)
    assert build_job(lv, "pass", FLAG).replay
    assert not any(prize(other, "pass").job.replay for other in LEVELS if not other.next_session)


def test_the_docs_introduce_every_level() -> None:
    page = (ROOT / "docs" / "ctf.md").read_text(encoding="utf-8")  # the README's CTF section, moved (README links it)
    assert "sandbox-lab attack --list" in page and "sandbox-lab attack --level 1 attack.py" in page
    assert "](docs/ctf.md)" in (ROOT / "README.md").read_text(encoding="utf-8")
    for lv in LEVELS:
        assert f"| {lv.number} | `{lv.id}` | {lv.title} |" in page, lv.id


# --- hints from what the attack did (course.diagnosis, over the records that judged it) ----------------


def test_a_flagless_post_to_an_allowed_upload_host_gets_a_hint_naming_that_host() -> None:
    lv = level(2)
    post = fakewire.http(host="gist.github.com", method="POST", path="/", body='{"files": {"a.txt": {"content": "hello"}}}')
    got = judge(lv, _ex(http=(post,)), FLAG, attempts_before=0, world=WORLD)
    assert got.captured is False and got.hint_from == "evidence" and got.hint != lv.hints[0]
    assert got.hint.startswith("Your POST / reached gist.github.com, which keeps what it is sent") and "the flag was not in it" in got.hint
    assert got.to_json()["findings"] == [got.hint]
    # the flag in the same request: a capture, no hint (the one judge, sightings, decided)
    caught = judge(lv, _ex(http=(fakewire.http(host="gist.github.com", method="POST", path="/", body=FLAG.encode().hex()),)), FLAG, world=WORLD)
    assert caught.captured and caught.hint == "" and caught.findings == ()


def test_a_host_the_proxy_refused_is_named_with_the_proxys_reason() -> None:
    lv = level(9)
    refused = fakewire.proxy(host="api.github.com", port=443, decision="deny", reason="not in the allowed list")
    beat = fakewire.proxy(host="heartbeat.invalid", port=80, decision="deny", reason="not in the allowed list")
    got = judge(lv, _ex(proxy=(beat, refused, refused)), FLAG, world=WORLD)
    assert got.hint == "The proxy refused api.github.com: not in the allowed list.", "one finding per host; the heartbeat is not the attack"


def test_a_download_only_host_and_a_public_url_host_are_told_apart() -> None:
    raw = fakewire.http(host="raw.githubusercontent.com", method="POST", path="/x", body=FLAG)
    got = judge(level(1), _ex(http=(raw,)), FLAG, world=WORLD)
    assert not got.captured and "raw.githubusercontent.com is download-only: it keeps nothing you send" in got.hint
    cdn = fakewire.http(host="cdn.jsdelivr.net", method="POST", path="/npm/x.js", body=FLAG)
    got = judge(level(1), _ex(http=(cdn,)), FLAG, world=WORLD)
    assert not got.captured and "anyone reads the URLs it is asked for. The flag was not in the URL." in got.hint


def test_a_dns_query_or_a_tcp_connection_that_carried_nothing_is_said() -> None:
    dns_level = next(lv for lv in LEVELS if lv.channels == ("dns",))
    got = judge(dns_level, _ex(dns=(fakewire.dns(qname="hello.attacker.example"),)), FLAG, world=WORLD)
    assert got.hint == "1 DNS query reached the attacker's nameserver (hello.attacker.example), but none spelled the flag."
    tcp = judge(level(1), _ex(tcp=(fakewire.tcp(port=4444, data="hi"),)), FLAG, world=WORLD)
    assert tcp.hint == "A raw TCP connection reached the attacker's port 4444, but the flag was not in it."


def test_a_persistence_write_that_never_landed_is_said_from_the_world_copy() -> None:
    lv = next(lv for lv in LEVELS if lv.next_session)
    bashrc = "/home/user/.bashrc"
    same = _ex(before={bashrc: sha256(b"x")}, after={bashrc: b"x"})
    assert "No start-up file changed after the run" in judge(lv, same, FLAG, world=WORLD).hint
    changed = _ex(before={bashrc: sha256(b"x")}, after={bashrc: b"x\npython3 -c ..."},
                  next_session=NextSession(played=("login shell",)))
    assert judge(lv, changed, FLAG, world=WORLD).hint.startswith(f"You changed {bashrc}; the next session ran (login shell)")


def test_the_signer_level_judges_the_signature_not_the_flag() -> None:
    lv = level(10)
    assert lv.signer is not None and lv.prize_name == "a signature only the SSH key makes"
    with pytest.raises(ValueError, match="needs the agent's key"):
        build_job(lv, "pass", FLAG)
    got = prize(lv, "pass")
    assert got.job.signer is not None and got.value == signature(got.job.signer, lv.signer)
    assert all(FLAG not in v for v in got.job.plant.values()) and set(got.job.plant) == set(lv.flag_in)
    sig = judge(lv, _ex(http=(fakewire.http(host="registry.npmjs.org", method="PUT", path="/p", body=got.value),)), got.value, world=WORLD)
    assert sig.captured and sig.sinks[0].host == "registry.npmjs.org"
    missed = judge(lv, _ex(http=(fakewire.http(host="registry.npmjs.org", method="PUT", path="/p", body="{}"),)), got.value, world=WORLD)
    assert "a signature only the SSH key makes was not in it" in missed.hint


def test_the_env_level_puts_the_flag_in_the_environment() -> None:
    lv = level(9)
    job = build_job(lv, "pass", FLAG)
    assert dict(job.env) == {"GITHUB_TOKEN": FLAG} and job.signer is None
    job.check(WORLD)
    with pytest.raises(LevelError, match=r'/flag_env/0: "HOME" is not a variable a level may set'):
        parse_level({**GOOD, "flag_env": ["HOME"]})


# --- the capstone -------------------------------------------------------------------------------------


def test_the_capstone_runs_only_under_a_policy_that_does_the_job_and_nothing_more() -> None:
    cap = LEVELS[-1]
    good = load_policy(str(ROOT / "solutions" / "attacks" / f"{cap.id}.policy.json"))
    assert cap.plan(policy=good).network == "proxy"
    with pytest.raises(LevelError, match="it runs under your own policy"):
        cap.plan()
    with pytest.raises(LevelError, match="only the capstone takes your policy"):
        level(1).plan(policy=good)
    # attack your own work: the policies that would make the capstone a level-1 exercise are refused, each said
    open_reads = load_policy({"filesystem": {"allowWrite": ["/project/out"]}, "network": {"allowedDomains": ["cdn.jsdelivr.net"]}})
    with pytest.raises(LevelError) as err:
        check_capstone(cap, open_reads)
    # reads are open by default: the fix is a denyRead over what holds them, with the job's source re-opened
    assert [p.pointer for p in err.value.problems] == ["/filesystem/denyRead"] and "/home/user/.ssh/id_rsa" in str(err.value.problems[0])
    assert "denyRead" in err.value.problems[0].message and "re-open only /project/src with allowRead" in err.value.problems[0].message
    wildcard = load_policy({**good.normalize(), "network": {"allowedDomains": ["cdn.jsdelivr.net", "*.attacker.example"]}})
    with pytest.raises(LevelError, match="a name the attacker makes up can be reached"):
        check_capstone(cap, wildcard)
    no_job = load_policy({"filesystem": {"denyRead": ["~", "/etc/secrets", "/project", "/app/workspace"], "allowRead": ["/project/src"]},
                          "network": {"allowedDomains": []}})
    with pytest.raises(LevelError) as err:
        check_capstone(cap, no_job)
    assert {p.pointer for p in err.value.problems} == {"/filesystem/allowWrite", "/network/allowedDomains"}
    # srt keeps ~/.bashrc read-only (it starts in the home), not its own settings file
    writes_home = load_policy({**good.normalize(), "filesystem": {**good.normalize()["filesystem"], "allowWrite": ["/project/out", "/home/user"]}})
    with pytest.raises(LevelError, match="/home/user/.srt-settings.json"):
        check_capstone(cap, writes_home)


def test_the_capstone_checks_the_policy_before_it_says_the_static_backend_cannot_attack() -> None:
    cap = LEVELS[-1]
    with pytest.raises(LevelError):
        attack(cap, "pass", StaticBackend(), policy=load_policy({"network": {"allowedDomains": ["cdn.jsdelivr.net"]}}))
    good = load_policy(str(ROOT / "solutions" / "attacks" / f"{cap.id}.policy.json"))
    with pytest.raises(BackendError):
        attack(cap, "pass", StaticBackend(), policy=good)


def test_what_the_next_session_sent_without_the_flag_is_said_as_such() -> None:
    lv = next(lv for lv in LEVELS if lv.next_session)
    bashrc = "/home/user/.bashrc"
    sent = fakewire.http(host="attacker.example", method="POST", path="/bashrc", body="hello")
    ex = _ex(before={bashrc: sha256(b"x")}, after={bashrc: b"x\nbackdoor"},
             next_session=NextSession(played=("login shell",), http=(sent,)))
    got = judge(lv, ex, FLAG, world=WORLD)
    assert got.hint == ("In the next session, your POST /bashrc reached attacker.example, which keeps what it is sent "
                        "(5 bytes accepted), but the flag was not in it: what left was no secret.")


def test_a_get_with_no_body_to_an_upload_host_is_said_to_have_sent_nothing() -> None:
    got = judge(level(1), _ex(http=(fakewire.http(host="attacker.example", method="GET", path="/"),)), FLAG, world=WORLD)
    assert got.hint == "Your GET / reached attacker.example, which keeps what it is sent, but it sent no body: nothing left."


def test_the_channel_of_a_sighting_is_its_code_never_the_words_of_how_it_came() -> None:
    from grader.core.outcomes import SinkHit
    from grader.course.ladder import channel_of

    assert channel_of(SinkHit("attacker.example", "a socket on port 4444", "e", "tcp")) == "tcp"
    assert channel_of(SinkHit("attacker.example", "raw TCP (port 4444)", "e", "http")) == "http"
    assert channel_of(SinkHit("attacker.example", "lookups", "e", "dns")) == "dns"
