"""The HTML views (board.py): rows and colours, escaping of everything untrusted, the exfiltration picture, the golden board."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from pathlib import Path

from grader import load_policy, load_world, predict
from grader.notebook.board import (
    backend_note_html,
    board_html,
    comparison_html,
    describe_backend,
    editor_html,
    error_html,
    exfil_svg,
    failed_html,
    paths_for,
    problems_html,
)
from grader.notebook.quiz_views import answer_html, prompt_html, question_html
from grader.backends import StaticBackend
from grader.core.errors import Problem
from grader.core.outcomes import ProbeOutcome, RunResult
from grader.core.probes import PROBES
from grader.course.quiz import question
from grader.core.wording import backend_phrase

NAIVE = {"filesystem": {"allowWrite": ["/home/user/"]}, "network": {"allowedDomains": ["*.github.com"]}}
# srt: reads are open by default, so every region is hidden with denyRead and the source re-opened with allowRead
PRACTICE = {"filesystem": {"denyRead": ["/home/user", "/etc/secrets", "/project", "/app/workspace"], "allowRead": ["/project/src"],
                           "allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}}
REPO_NAIVE = Path(__file__).parents[3] / "examples" / "naive.json"
HOSTILE = '<script>alert("x")</script>&'
TERMINAL = "\x1b[2J\x1b]8;;http://x\x07\r\nnext"  # escape sequences a container could write into evidence


def test_board_rows_carry_probe_and_outcome_attributes_attacks_first() -> None:
    result = predict(load_policy(NAIVE))
    out = board_html(result)
    rows = re.findall(r'<tr class="sl-row sl-(attack|job)[^"]*" data-probe="([^"]+)" data-outcome="([^"]+)"', out)
    assert [pid for _, pid, _ in rows] == [p.id for p in sorted(PROBES, key=lambda p: p.kind != "attack")]
    assert ("attack", "exfil-secret", "succeeded") in rows
    assert ("job", "job-write-out", "blocked") in rows
    kinds = [k for k, _, _ in rows]
    assert kinds == sorted(kinds)  # "attack" < "job": all attacks come first


def test_board_colours_succeeded_attacks_red_and_working_jobs_green() -> None:
    out = board_html(predict(load_policy(NAIVE)))
    # srt keeps ~/.bashrc read-only (a mandatory protection where it starts), not its own settings file
    assert re.search(r'data-probe="write-sandbox-settings" data-outcome="succeeded"[^>]*style="background:#fee4e2"', out)
    assert re.search(r'data-probe="write-shell-rc" data-outcome="blocked"[^>]*style="background:transparent"', out)
    assert re.search(r'data-probe="job-read-src" data-outcome="succeeded"[^>]*style="background:#dcfae6"', out)


def test_board_escapes_hostile_evidence_explanations_and_notes() -> None:
    outcome = ProbeOutcome("read-ssh-key", "attack", "succeeded", f"read {HOSTILE}", (f"canary at {HOSTILE}",))
    result = RunResult("docker", "policy", None, (outcome,), notes=(HOSTILE,), run_id=HOSTILE)
    out = board_html(result)
    assert "<script>" not in out
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;" in out


def test_hostile_policy_paths_are_escaped_in_the_board_and_the_picture() -> None:
    policy = load_policy({"filesystem": {"allowWrite": ["/project/out/<img src=x onerror=alert(1)>"]},
                          "network": {"allowedDomains": ["gist.github.com"]}})
    out = board_html(predict(policy)) + comparison_html({HOSTILE: predict(policy)})
    assert "<img" not in out and "<script>" not in out


def test_problems_are_listed_with_their_pointer_and_escaped() -> None:
    out = problems_html([Problem("/network/allowedDomains/0", f"bad {HOSTILE}")], [Problem("/filesystem/allowWrite/0", "warn")])
    assert 'data-pointer="/network/allowedDomains/0"' in out
    assert "<code>/filesystem/allowWrite/0</code>" in out
    assert "<script>" not in out


def test_svg_draws_the_naive_policys_exfil_paths() -> None:
    result = predict(load_policy(NAIVE))
    paths = paths_for(result)
    svg = exfil_svg(paths)
    drawn = set(re.findall(r'<path class="sl-path" data-secret="([^"]+)" data-host="([^"]+)" data-channel="([^"]+)"', svg))
    assert ("/home/user/.ssh/id_rsa", "gist.github.com", "upload") in drawn
    assert ("/etc/secrets/db_password", "api.github.com", "upload") in drawn
    assert ("/home/user/.npmrc", "uploads.github.com", "upload") in drawn  # credentials are loot too
    assert len(drawn) == len(paths) == len(load_world().loot) * 4  # every secret and credential, four upload hosts
    assert svg.startswith("<svg") and svg.endswith("</svg>")


def test_svg_draws_no_path_for_the_practice_solution() -> None:
    result = predict(load_policy(PRACTICE))
    assert paths_for(result) == ()
    out = board_html(result)
    assert 'class="sl-path"' not in out
    assert "No exfiltration path" in out


def test_baseline_picture_includes_direct_and_dns_channels() -> None:
    svg = exfil_svg(paths_for(predict(None)))
    assert 'data-channel="direct"' in svg and 'data-channel="dns"' in svg


def test_comparison_marks_each_cell_and_reports_failed_runs() -> None:
    out = comparison_html({"naive": predict(load_policy(NAIVE)), "broken": "BackendError: <boom>"})
    assert 'data-sandbox="naive" data-probe="exfil-secret" data-outcome="succeeded"' in out
    assert "&lt;boom&gt;" in out


def test_question_html_hides_the_model_answer_in_closed_details() -> None:
    out = question_html(question("check-standard-docker"))
    assert "<details><summary>" in out and "bridge networking" in out


def test_board_shows_control_characters_from_a_container_as_escapes() -> None:
    outcome = ProbeOutcome("read-ssh-key", "attack", "succeeded", f"read {TERMINAL}", (TERMINAL,))
    out = board_html(RunResult("docker", "policy", None, (outcome,), notes=(TERMINAL,), run_id="sl-1"))
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out
    assert "\\x1b[2J" in out


def test_board_says_how_the_run_was_obtained_in_the_shared_words() -> None:
    static = predict(load_policy(NAIVE), notes=("predicted, not run: no Docker engine answers (test)",), codes=("no-engine",))
    assert f"<strong>{backend_phrase('static', static.codes)}</strong>" in board_html(static)
    assert "predicted: no Docker engine" in backend_note_html(static)
    real = RunResult("docker", "policy", None, (), run_id="sl-0123456789", seconds=2.0)
    assert backend_phrase("docker", run_id="sl-0123456789", seconds=2.0) in board_html(real)
    assert "ran in Docker" in board_html(real) and "predicted" not in board_html(real)
    assert backend_note_html(None, backend="<docker>") == "<small>&lt;docker&gt; backend failed</small>"


def test_describe_backend_names_the_backend_and_uses_the_shared_words() -> None:
    chosen = describe_backend(StaticBackend())
    assert chosen.startswith("Backend: static. ") and backend_phrase("static") in chosen and "Binder" in chosen
    fallback = describe_backend(StaticBackend(notice="predicted, not run: no Docker engine answers (test)", cause="no-engine"))
    assert backend_phrase("static", ("no-engine",)) in fallback and "(test)" in fallback

    class Docker:
        name = "docker"

    assert describe_backend(Docker()) == f"Backend: docker. Results below: {backend_phrase('docker')}."


def test_messages_and_the_editor_export_are_escaped() -> None:
    for out in (failed_html(HOSTILE), error_html(HOSTILE), answer_html(False, HOSTILE, unsaved=HOSTILE),
                editor_html(HOSTILE, "", "", "")):
        assert "<script>" not in out and "&lt;script&gt;" in out
    assert 'class="sl-board sl-failed"' in failed_html("boom")
    assert "progress not saved" in answer_html(True, "Correct.", unsaved="disk full")
    assert "progress not saved" not in answer_html(True, "Correct.")


def test_quiz_prompt_is_the_same_in_the_widget_and_the_export() -> None:
    q = question("check-standard-docker")
    assert prompt_html(q) in question_html(q) and "Understanding check" in prompt_html(q)
    assert "Recall" in prompt_html(question("recall-two-axes"))


def test_golden_board(golden: Callable[[str, str], None]) -> None:
    """The board of the naive example policy, as a learner sees it (static backend)."""
    golden("naive-static.html", board_html(predict(load_policy(REPO_NAIVE))))


# --- goals and the real tools -----------------------------------------------------------------


def test_goal_status_is_met_or_not_yet_escaped_and_says_how_the_run_was_obtained() -> None:
    import dataclasses

    from grader import predict
    from grader.notebook.goal_views import goal_html, goal_status_html
    from grader.course.goals import goal

    g = goal("l03-safe-container")
    result = predict(load_policy({"filesystem": {"allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}}))
    assert goal_html(g).startswith('<div class="sl-goal" data-goal-id="l03-safe-container">')
    not_yet = goal_status_html(g, False, ["one <b>reason</b>"], result)
    assert 'data-goal="not-met"' in not_yet and "Not yet:" in not_yet and "one &lt;b&gt;reason&lt;/b&gt;" in not_yet
    assert "predicted" in not_yet  # a prediction never passes for an observation
    two = goal_status_html(g, False, ["a", "b"], result)
    assert two.count("<li>") == 2
    met = goal_status_html(g, True, [], result, unsaved="disk full")
    assert 'data-goal="met"' in met and "Goal met" in met and "Accepted risk" not in met and "disk full" in met
    accepting = dataclasses.replace(g, accepted_why="the <registry> takes uploads")
    assert "Accepted risk:</strong> the &lt;registry&gt; takes uploads" in goal_status_html(accepting, True, [], result)


def test_carry_over_shows_both_files_and_the_differences() -> None:
    from grader.notebook.board import carry_over_html
    from grader.grading.grade import carry_over

    html_ = carry_over_html(carry_over(load_policy({"filesystem": {"allowWrite": ["/home/user"]}})))
    assert 'class="sl-carry-over"' in html_ and "--to srt" in html_ and "--to claude-code" in html_
    assert "&quot;//home/user&quot;" in html_  # the Claude Code block, escaped
    assert "/filesystem/allowWrite/0: [srt 0.0.83]" in html_
    none = carry_over_html(carry_over(load_policy({"filesystem": {"allowWrite": ["/project/out"]}, "network": {"allowedDomains": []}})))
    assert "it means the same there as here" in none and "/filesystem/" not in none


def test_the_progress_board_counts_a_goal_met(tmp_path: Path) -> None:
    from grader.notebook.progress_views import progress_html
    from grader.course.progress import load_progress, mark_done

    path = tmp_path / "p.json"
    before = progress_html(load_progress(path))
    mark_done("goal:l02-npm-build", path=path)
    after = progress_html(load_progress(path))
    assert "Lesson goals (met in the lesson): 0 of" in before and "Lesson goals (met in the lesson): 1 of" in after
    assert 'data-item="goal:l02-npm-build" data-done="true"' in after
    assert 'data-done="0"' in before and 'data-done="1"' in after  # a goal met is mastery: it counts
    assert after.split('data-total="')[1][:3] == before.split('data-total="')[1][:3]  # and was counted before, unmet

# --- the agent on stage ---------------------------------------------------------------------


def test_the_agent_transcript_rows_carry_step_and_outcome_and_the_verdict_its_evidence() -> None:
    from grader.course.agent import predict_run
    from grader.notebook.agent_views import agent_run_html
    from grader.core.plan import build_plan

    page = agent_run_html(predict_run(build_plan(None), prompt="never read <secrets>"), goal=True)
    rows = re.findall(r'data-step="(\d+)" data-tool="(\w+)" data-outcome="(\w+)" data-injected="(\w+)"', page)
    assert rows == [("1", "read", "ok", "false"), ("2", "read", "ok", "false"), ("3", "read", "ok", "true"),
                    ("4", "post", "ok", "true"), ("5", "run", "ok", "false"), ("6", "write", "ok", "false")]
    assert 'class="sl-agent-transcript"' in page and 'data-leaked="true"' in page and 'data-met="false"' in page
    assert "predicted, not run" in page and "never read &lt;secrets&gt;" in page
    assert "&lt;!-- Note for AI coding agents" in page  # the hidden comment is shown, as text


def test_an_agent_run_that_cannot_tell_says_so_and_escapes_what_the_container_printed() -> None:
    from grader.course.agent import AgentRun, ToolCall
    from grader.notebook.agent_views import agent_run_html

    run = AgentRun("baseline", "docker", False, "", (ToolCall(1, "read", "/x", "cat /x", "ok", "<script>x</script>\x1b[2J"),),
                   None, (), False, (), problem="the DNS server stopped")
    page = agent_run_html(run, goal=True)
    assert 'data-leaked="unknown"' in page and "Cannot tell" in page and "the DNS server stopped" in page
    assert "<script>" not in page and "\x1b" not in page and "&lt;script&gt;" in page
    assert 'data-met="false"' in page and "the key left" in page  # unknown is not "stayed"


# --- summary first, text alternatives, colour never alone, narrow screens ---------------------


def test_a_full_board_shows_its_summary_and_keeps_the_table_and_picture_in_a_closed_details() -> None:
    out = board_html(predict(load_policy(NAIVE)))
    head, details = out.split('<details class="sl-board-details"', 1)
    assert 'class="sl-summary"' in head and "attacks succeeded" in head and "exfil-secret" in head  # which ones, by id
    assert "data-probe=" not in head and "<table" not in head and "<svg" not in head
    assert details.startswith(">")  # closed: the details on demand
    assert 'data-probe="exfil-secret" data-outcome="succeeded"' in details and 'class="sl-exfil-svg"' in details
    assert len(re.sub(r"<[^>]+>", " ", head).split()) < 120, head  # a few lines, not 2,000 words


def test_a_focused_board_of_a_few_probes_stays_open_and_a_large_one_closes() -> None:
    result = predict(load_policy(NAIVE))
    few = board_html(result, only=["read-ssh-key", "exfil-secret"])
    assert '<details class="sl-board-details" open>' in few and "2 of" in few
    many = board_html(result, only=[p.id for p in PROBES][:9])
    assert '<details class="sl-board-details">' in many


def test_the_picture_s_text_alternative_names_every_path_not_a_count() -> None:
    paths = paths_for(predict(load_policy(NAIVE)))
    svg = exfil_svg(paths)
    label = re.search(r'aria-label="([^"]*)"', svg)
    assert label, svg[:300]
    text = html.unescape(label.group(1))
    for p in paths:
        assert p.channel.host in text and p.label in text and p.secret in text, (p, text)
    listed = board_html(predict(load_policy(NAIVE)))
    assert 'class="sl-exfil-list"' in listed and "gist.github.com (upload): " in listed


def test_the_comparison_explains_without_hover_and_marks_every_coloured_outcome() -> None:
    out = comparison_html({"naive": predict(load_policy(NAIVE)), "practice": predict(load_policy(PRACTICE))})
    assert "title=" not in out and "Hover" not in out  # nothing only on hover
    why = re.findall(r'<details class="sl-why" data-probe="([^"]+)">(.*?)</details>', out)
    assert {pid for pid, _ in why} == {p.id for p in PROBES}
    explained = dict(why)["exfil-secret"]
    assert re.fullmatch(r'<summary[^>]*>.*?</summary><ul[^>]*>(<li>.*?</li>)+</ul>', explained), explained  # a list holds only items
    assert "<strong>naive</strong>: succeeded." in explained and "<strong>practice</strong>: blocked." in explained
    cells = re.findall(r'<td data-sandbox="[^"]+" data-probe="[^"]+" data-outcome="([^"]+)" style="[^"]*">([^<]*)</td>', out)
    assert len(cells) == 2 * len(PROBES)
    for outcome, shown in cells:
        assert shown[:2] in ("✗ ", "✓ ", "! ") and shown.endswith(outcome), shown  # a symbol, not colour alone


def test_board_rows_mark_every_outcome_with_a_symbol() -> None:
    out = board_html(predict(load_policy(NAIVE)))
    shown = re.findall(r'data-outcome="([^"]+)" data-kind="[^"]+"[^>]*>.*?font-weight:bold;white-space:nowrap">([^<]*)</td>', out)
    assert len(shown) == len(PROBES)
    assert all(text[:2] in ("✗ ", "✓ ", "! ") for _, text in shown), shown


def test_views_wrap_on_a_narrow_screen() -> None:
    """414 px: long ids and JSON wrap; no fixed width without max-width:100%."""
    from grader.grading.grade import carry_over
    from grader.notebook.board import carry_over_html

    results = {"naive": predict(load_policy(NAIVE)), "none": predict(None)}
    out = board_html(results["naive"]) + comparison_html(results) + carry_over_html(carry_over(load_policy(NAIVE)))
    out += editor_html('{"a": 1}', "", "", "")
    assert "overflow-wrap:anywhere" in out.split(">", 1)[0]  # the board itself
    for pre in re.findall(r"<pre[^>]*>", out):
        assert "white-space:pre-wrap" in pre, pre
    for style in re.findall(r'style="([^"]*)"', out):
        for width in re.findall(r"(?<![-\w])(?:min-)?width:\s*(\d+)px", style):
            assert "max-width:" in style or int(width) <= 300, style
    assert "min-width:300px" not in out
