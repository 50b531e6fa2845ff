"""Text and JSON rendering: the summary line, the table order and colours, control characters, and golden reports.

The HTML rendering of a run is the probe board: tests/unit/notebook/test_board.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from grader import load_policy
from grader.core.analyzer import lint, predict
from grader.core.errors import PolicyError, Problem
from grader.core.outcomes import ProbeOutcome, RunResult
from grader.grading.report import render_check, render_json, render_policy_error, render_text, result_json, summary
from grader.core.wording import backend_phrase

REPO = Path(__file__).parents[3]
NAIVE = load_policy(REPO / "examples" / "naive.json")
HOSTILE = "<script>alert(1)</script>\x1b[2J\x1b]8;;http://x\x07 & | `x` *y*\r\nnext"


def docker_result(evidence: str = HOSTILE) -> RunResult:
    return RunResult(
        backend="docker",
        sandbox="policy",
        policy=load_policy({"filesystem": {}, "network": {}}),
        probes=(
            ProbeOutcome("job-read-src", "job", "succeeded", "The job reads /project/src.", ("canary seen",)),
            ProbeOutcome("read-ssh-key", "attack", "succeeded", f"read {HOSTILE}", (evidence,)),
            ProbeOutcome("net-dns-exfil", "attack", "error", "the DNS log could not be read", ()),
            ProbeOutcome("write-shell-rc", "attack", "blocked", "read-only", ()),
            ProbeOutcome("job-write-out", "job", "blocked", "read-only", ()),
        ),
        notes=("one note",),
        seconds=1.25,
        run_id="sl-0123456789",
    )


def test_summary_counts_attacks_and_jobs() -> None:
    # srt starts in the home and keeps ~/.bashrc read-only whatever allowWrite says: write-shell-rc is blocked
    assert summary(predict(NAIVE)) == "9 of 17 attacks succeeded; 1 of 5 jobs work"
    assert summary(docker_result()) == "1 of 3 attacks succeeded; 1 of 2 jobs work; 1 probe could not be judged"


def test_text_puts_attacks_before_jobs_even_when_the_result_does_not() -> None:
    text = render_text(docker_result())
    assert text.index("read-ssh-key") < text.index("write-shell-rc") < text.index("job-read-src")
    assert "evidence: canary seen" in text
    assert "note: one note" in text
    assert "run sl-0123456789 in 1.2 s" in text or "run sl-0123456789 in 1.3 s" in text


def test_text_says_how_the_run_was_obtained_in_the_shared_words() -> None:
    assert render_text(docker_result()).splitlines()[1] == backend_phrase("docker", run_id="sl-0123456789", seconds=1.25)
    assert render_text(predict(NAIVE)).splitlines()[:2] == ["Probes against your policy", backend_phrase("static")]
    assert render_text(predict(None)).startswith("Probes against the plain container (no policy)\n")


def test_text_colours_only_when_asked() -> None:
    plain = render_text(docker_result())
    assert "\x1b" not in plain
    coloured = render_text(docker_result(), color=True)
    assert "\x1b[31msucceeded" in coloured  # attack succeeded: red
    assert "\x1b[32msucceeded" in coloured  # job works: green
    assert "\x1b[33merror" in coloured
    assert "\x1b[33mblocked" in coloured  # a broken job: amber, as on the board
    assert "\x1b[31mblocked" not in coloured and "\x1b[32mblocked" not in coloured


def test_text_neutralizes_control_characters_from_a_container() -> None:
    for text in (render_text(docker_result()), render_text(docker_result(), color=True)):
        assert "\x1b[2J" not in text and "\x07" not in text and "\r" not in text
        assert "\\x1b[2J" in text


def test_json_is_the_stable_run_shape() -> None:
    static = json.loads(render_json(predict(NAIVE)))
    assert set(static) == {"backend", "policy", "probes", "scope"}
    real = result_json(docker_result())
    assert set(real) == {"backend", "policy", "probes", "notes", "run_id", "seconds"}
    assert all("evidence" in p for p in real["probes"])
    baseline = result_json(predict(None))
    assert baseline["sandbox"] == "baseline" and baseline["policy"] is None


def test_warnings_are_listed_with_their_pointers() -> None:
    w = [Problem("/network/allowedDomains/0", "a <b>warning</b>")]
    assert "/network/allowedDomains/0: a <b>warning</b>" in render_text(predict(NAIVE), warnings=w)


def test_policy_error_text_is_the_errors_own_message() -> None:
    err = PolicyError("p.json", [Problem("/a", "first"), Problem("/b", "second")])
    assert render_policy_error(err) == "p.json is not a valid policy (2 problems)\n  /a: first\n  /b: second\n"


def test_golden_reports(golden: Callable[[str, str], None]) -> None:
    golden("naive-static.txt", render_text(predict(NAIVE), warnings=lint(NAIVE)))
    golden("naive-static.json", render_json(predict(NAIVE)))


def test_golden_check(golden: Callable[[str, str], None]) -> None:
    golden("naive-check.txt", render_check(NAIVE, "examples/naive.json", lint(NAIVE), predict(NAIVE)))
