"""Rendering: the summary line, the table order and colours, escaping of untrusted text, and golden reports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader import load_policy
from grader.analyzer import lint, predict
from grader.errors import PolicyError, Problem
from grader.outcomes import ProbeOutcome, RunResult
from grader.report import (
    render,
    render_check,
    render_html,
    render_json,
    render_markdown,
    render_policy_error,
    render_text,
    result_json,
    summary,
)

REPO = Path(__file__).parents[2]
GOLDENS = REPO / "tests" / "fixtures" / "goldens"
NAIVE = load_policy(REPO / "examples" / "naive.json")
HOSTILE = "<script>alert(1)</script>\x1b[2J\x1b]8;;http://x\x07 & | `x` *y*\r\nnext"


def docker_result(evidence: str = HOSTILE) -> RunResult:
    return RunResult(
        backend="docker",
        sandbox="policy",
        policy={"filesystem": {}, "network": {}},
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
    assert summary(predict(NAIVE)) == "10 of 16 attacks succeeded; 1 of 5 jobs work"
    assert summary(docker_result()) == "1 of 3 attacks succeeded; 1 of 2 jobs work; 1 probe could not be judged"


def test_text_puts_attacks_before_jobs_even_when_the_result_does_not() -> None:
    text = render_text(docker_result())
    assert text.index("read-ssh-key") < text.index("write-shell-rc") < text.index("job-read-src")
    assert "evidence: canary seen" in text
    assert "note: one note" in text
    assert "run sl-0123456789 in 1.2 s" in text or "run sl-0123456789 in 1.3 s" in text


def test_text_colours_only_when_asked() -> None:
    plain = render_text(docker_result())
    assert "\x1b" not in plain
    coloured = render_text(docker_result(), color=True)
    assert "\x1b[31msucceeded" in coloured  # attack succeeded: red
    assert "\x1b[32msucceeded" in coloured  # job works: green
    assert "\x1b[33merror" in coloured


def test_text_neutralizes_control_characters_from_a_container() -> None:
    for text in (render_text(docker_result()), render_text(docker_result(), color=True)):
        assert "\x1b[2J" not in text and "\x07" not in text and "\r" not in text
        assert "\\x1b[2J" in text


def test_html_escapes_everything_from_a_policy_or_a_container() -> None:
    out = render_html(docker_result())
    assert "<script>" not in out and "&lt;script&gt;" in out
    assert "\x1b" not in out and "\x07" not in out
    assert out.count("<table") == 2


def test_markdown_escapes_table_breakers_and_html() -> None:
    out = render_markdown(docker_result())
    rows = [line for line in out.splitlines() if line.startswith("| `read-ssh-key`")]
    assert len(rows) == 1
    row = rows[0]
    assert "<script>" not in row and "&lt;script&gt;" in row
    assert row.count(" | ") == 2 and "\\|" in row


def test_json_is_the_stable_run_shape() -> None:
    static = json.loads(render_json(predict(NAIVE)))
    assert set(static) == {"backend", "policy", "probes", "scope"}
    real = result_json(docker_result())
    assert set(real) == {"backend", "policy", "probes", "notes", "run_id", "seconds"}
    assert all("evidence" in p for p in real["probes"])
    baseline = result_json(predict(None))
    assert baseline["sandbox"] == "baseline" and baseline["policy"] is None


def test_render_dispatches_on_format() -> None:
    result = predict(NAIVE)
    assert render(result, "json") == render_json(result)
    assert render(result, "markdown") == render_markdown(result)
    assert render(result, "html") == render_html(result)
    with pytest.raises(ValueError):
        render(result, "pdf")  # type: ignore[arg-type]


def test_warnings_are_listed_with_their_pointers() -> None:
    w = [Problem("/network/allowedDomains/0", "a <b>warning</b>")]
    assert "/network/allowedDomains/0: a <b>warning</b>" in render_text(predict(NAIVE), warnings=w)
    assert "&lt;b&gt;" in render_html(predict(NAIVE), warnings=w)


def test_policy_error_text_is_the_errors_own_message() -> None:
    err = PolicyError("p.json", [Problem("/a", "first"), Problem("/b", "second")])
    assert render_policy_error(err) == "p.json is not a valid policy (2 problems)\n  /a: first\n  /b: second\n"


def _golden(name: str, text: str, update: bool) -> None:
    path = GOLDENS / name
    if update:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden {path}: run pytest --update-goldens"
    assert text == path.read_text(encoding="utf-8"), f"{name} differs from its golden file; refresh with --update-goldens if intended"


@pytest.mark.parametrize(
    ("name", "fmt"),
    [("naive-static.txt", "text"), ("naive-static.md", "markdown"), ("naive-static.html", "html"), ("naive-static.json", "json")],
)
def test_golden_reports(update_goldens: bool, name: str, fmt: str) -> None:
    text = render(predict(NAIVE), fmt, warnings=lint(NAIVE))  # type: ignore[arg-type]
    _golden(name, text, update_goldens)


def test_golden_check(update_goldens: bool) -> None:
    _golden("naive-check.txt", render_check(NAIVE, "examples/naive.json", lint(NAIVE), predict(NAIVE)), update_goldens)
