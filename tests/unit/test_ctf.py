"""ctf.py: the ladder as data, and the capture judgement (pure: no Docker; the real runs are tests/integration/test_ctf_docker.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from grader.core.access import access_for, baseline_access
from grader.backends.static import StaticBackend
from grader.ctf.ladder import (
    CHANNELS,
    STATIC_CANNOT_ATTACK,
    AttackResult,
    _from_files,
    attack,
    build_job,
    judge,
    level,
    load_levels,
    new_flag,
    parse_level,
)
from grader.core.errors import BackendError, LevelError
from grader.core.evidence import Evidence
from grader.core.execution import Execution
from grader.core.world import load_world
import fakewire

WORLD = load_world()
LEVELS = load_levels()
ROOT = Path(__file__).resolve().parents[2]
FLAG = "FLAG{00c0ffee1234abcd5678ef90}"
GOOD: dict[str, Any] = {
    "number": 1, "id": "demo", "title": "t", "story": "s", "policy": "plain container",
    "flag_in": ["/home/user/.ssh/id_rsa"], "hints": ["first", "second"], "teaches": "x",
}


def _ex(output: str = "", **logs: object) -> Execution:
    ev = Evidence(token="t0k", canaries={}, records=(), before={}, after={}, network="open", **logs)  # type: ignore[arg-type]
    return Execution(backend="docker", output=output, exit_code=0, timed_out=False, evidence=ev)


def _problems(data: Any) -> list[str]:
    with pytest.raises(LevelError) as err:
        parse_level(data, "demo.json")
    return [str(p) for p in err.value.problems]


# --- the ladder ---------------------------------------------------------------------------------


def test_the_ladder_has_the_levels_the_course_needs_in_order() -> None:
    assert len(LEVELS) >= 7
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
    final = LEVELS[-1]
    assert final.uncapturable is not None and all(lv.uncapturable is None for lv in LEVELS[:-1])
    for lv in LEVELS:
        assert lv.hints and lv.teaches and lv.story and lv.title
        assert all(p in {f.path for f in WORLD.files} for p in lv.flag_in)


def test_every_level_but_the_last_has_a_reachable_flag_and_a_reference_attack() -> None:
    """A flag the sandbox shows (or, for persistence, a start-up file it lets the agent write), and a solution file."""
    for lv in LEVELS[:-1]:
        a = baseline_access(WORLD) if lv.policy is None else access_for(lv.policy, WORLD)
        if lv.next_session:
            assert any(a.write(p).allowed for p in WORLD.paths_with_role("persistence")), lv.id
        else:
            assert any(a.read(p).allowed for p in lv.flag_in), lv.id
        assert (ROOT / "solutions" / "attacks" / f"level-{lv.number:02d}.py").is_file(), lv.id
    assert not (ROOT / "solutions" / "attacks" / f"level-{LEVELS[-1].number:02d}.py").exists()


def test_the_final_level_is_uncapturable_by_its_policy() -> None:
    """The honest outcome follows from the policy: no flag readable, nothing that runs later writable, no resolver."""
    final = LEVELS[-1]
    assert final.policy is not None
    a = access_for(final.policy, WORLD)
    assert all(not a.read(p).allowed for p in final.flag_in)
    assert not any(a.write(p).allowed for p in WORLD.paths_with_role("persistence", "agent-config"))
    assert a.network == "proxy" and not any(a.reach(h).allowed for h in (WORLD.attacker.name, "gist.github.com"))
    assert final.uncapturable is not None and "nothing can be captured" in final.uncapturable.why.lower()


def test_a_level_is_found_by_number_or_id_and_an_unknown_one_is_a_clear_error() -> None:
    assert level(2) is level("2") is level("naive-gist")
    with pytest.raises(LevelError, match=r"unknown level 99; the levels are 1 to \d+ .*attack --list"):
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
    last = json.dumps({**GOOD, "number": 2, "id": "last", "uncapturable": {"after": 2, "why": "scoped"}})
    assert [lv.id for lv in _from_files({"01-demo.json": one, "02-last.json": last})] == ["demo", "last"]
    with pytest.raises(LevelError, match="rename it 01-demo.json"):
        _from_files({"01-other.json": one, "02-last.json": last})
    with pytest.raises(LevelError, match="without gaps"):
        _from_files({"01-demo.json": one, "03-last.json": json.dumps({**json.loads(last), "number": 3})})
    with pytest.raises(LevelError, match="the last level, and only the last"):
        _from_files({"01-demo.json": one})
    with pytest.raises(LevelError, match="not valid JSON"):
        _from_files({"01-demo.json": "{", "02-last.json": last})


# --- the flag, the job, the judgement --------------------------------------------------------------


def test_a_flag_is_fresh_hex_every_time() -> None:
    flags = {new_flag() for _ in range(50)}
    assert len(flags) == 50 and all(re.fullmatch(r"FLAG\{[0-9a-f]{24}\}", f) for f in flags)


def test_the_job_plants_the_flag_in_every_file_of_the_level() -> None:
    final = LEVELS[-1]
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
    assert set(data) == {"level", "captured", "sinks", "output", "hint", "error", "problems"}
    # the flag is fresh and random: a sighting proves the capture whatever else failed
    seen = judge(lv, _ex(infra_problem=cut, http=(fakewire.http(host="gist.github.com", method="POST", path="/", body=FLAG),)),
                 FLAG, world=WORLD)
    assert seen.captured is True and seen.error == "" and "error" not in seen.to_json() and seen.note == cut
    # a run read whole is judged: a miss, with its hint, and no error
    miss = judge(lv, _ex(), FLAG, attempts_before=1, world=WORLD)
    assert miss.captured is False and miss.error == "" and miss.hint == lv.hints[1] and "error" not in miss.to_json()


def test_a_miss_gets_the_next_hint_in_order_then_the_last_again() -> None:
    lv = level(1)
    hints = [judge(lv, _ex(), FLAG, attempts_before=n, world=WORLD).hint for n in range(len(lv.hints) + 2)]
    assert hints == [*lv.hints, lv.hints[-1], lv.hints[-1]]


def test_the_final_level_says_why_after_enough_attempts() -> None:
    final = LEVELS[-1]
    assert final.uncapturable is not None
    n = final.uncapturable.after
    assert judge(final, _ex(), FLAG, attempts_before=n - 2, world=WORLD).hint in final.hints
    assert judge(final, _ex(), FLAG, attempts_before=n - 1, world=WORLD).hint == final.uncapturable.why


def test_the_result_json_is_the_contract() -> None:
    got = judge(level(1), _ex(output="hi", dns=(fakewire.dns(qname=f"{FLAG[5:-1]}.attacker.example"),)), FLAG, world=WORLD)
    data = got.to_json()
    assert list(data) == ["level", "captured", "sinks", "output", "hint"]
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
    assert not any(build_job(other, "pass", FLAG).replay for other in LEVELS if not other.next_session)


def test_the_readme_introduces_every_level() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "sandbox-lab attack --list" in readme and "sandbox-lab attack --level 1 attack.py" in readme
    for lv in LEVELS:
        assert f"| {lv.number} | `{lv.id}` | {lv.title} |" in readme, lv.id
