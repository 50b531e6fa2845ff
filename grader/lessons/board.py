"""Sandbox Lab's HTML: the probe board and every other view, as HTML and SVG strings, for the widgets, the lessons and their export.

The one HTML renderer of a run (the CLI renders text and JSON in ``report``),
with one palette. Everything here is a function from values to a string,
testable without a kernel; ``widgets.py`` only puts the strings into
ipywidgets. Every string that came from a policy, a container or the question
bank is escaped and its control characters shown as escapes: a hostile path
such as ``/x/<script>`` in a policy, or evidence a container wrote, must show
as text. How a run was obtained is said by ``wording.backend_phrase`` and how
an outcome looks by ``wording.tone``, as in the text report.

The exfiltration picture is drawn from ``analyzer.exfil_paths`` (which secrets
can reach which hosts over which channel), so it explains the table next to it.

Imports: agent, analyzer, access, ctf, errors, goals, grading (``CarryOver``), outcomes,
policy, prediction, probes, progress, quiz, report, wording, world. Nothing imports this but ``widgets``.
"""

from __future__ import annotations

import html
import json
from typing import Iterable, Mapping, Optional, Sequence, Union

from grader.core.access import Access, access_for, baseline_access
from grader.lessons.agent import AgentRun, ToolCall
from grader.core.analyzer import ExfilPath, channels, exfil_paths
from grader.ctf.ladder import AttackResult, Level
from grader.core.errors import Problem
from grader.lessons.goals import GOALS, Goal
from grader.grading.grade import CarryOver
from grader.core.outcomes import ProbeOutcome, RunResult
from grader.core.policy import Policy, parse_policy
from grader.core.probes import PROBES, probe
from grader.lessons.prediction import PredictionScore
from grader.lessons.progress import LESSONS, Attempt, Progress
from grader.lessons.quiz import ChoiceVerdict, Question, RecallHint, right_key
from grader.grading.report import scope_line, summary
from grader.core.wording import Tone, backend_phrase, printable, tone
from grader.core.world import World, load_world

__all__ = [
    "agent_run_html",
    "agent_stage_html",
    "answer_html",
    "attack_html",
    "level_html",
    "ask_html",
    "backend_note_html",
    "board_html",
    "carry_over_html",
    "catalogue_html",
    "choice_result_html",
    "comparison_html",
    "describe_backend",
    "editor_html",
    "error_html",
    "exfil_svg",
    "failed_html",
    "goal_html",
    "goal_status_html",
    "paths_for",
    "prediction_html",
    "problems_html",
    "progress_html",
    "prompt_html",
    "question_html",
    "rating_html",
    "reach_html",
    "recall_reveal_html",
    "scenario_html",
]

# The palette of every view: ink and background per ``wording.tone``.
_RED, _GREEN, _AMBER, _GREY, _MUTED = "#b42318", "#067647", "#b54708", "#475467", "#98a2b3"
_INK: dict[Tone, str] = {"bad": _RED, "good": _GREEN, "warn": _AMBER, "plain": _GREY}
_BG: dict[Tone, str] = {"bad": "#fee4e2", "good": "#dcfae6", "warn": "#fef0c7", "plain": "transparent"}
_CHANNEL_COLOURS = {"upload": _RED, "dns": "#6941c6", "direct": _AMBER, "url": _RED}
_CHANNEL_WORDS = {"upload": "upload", "dns": "DNS queries", "direct": "direct connection", "url": "the URL of a download"}


def _h(text: object) -> str:
    """Untrusted text as HTML: escaped, and its control characters shown, not passed on."""
    return html.escape(printable(str(text)), quote=True)


# --- which backend ------------------------------------------------------------------------


def _how(result: RunResult) -> str:
    return backend_phrase(result.backend, result.notes, run_id=result.run_id, seconds=result.seconds)


def describe_backend(backend: object) -> str:
    """One paragraph for a lesson's output: which backend is active and what its results will say."""
    name = str(getattr(backend, "name", type(backend).__name__))
    notice = str(getattr(backend, "notice", ""))
    text = f"Backend: {name}. Results below: {backend_phrase(name, (notice,) if notice else ())}."
    if notice:
        text += f" (note: {notice})"
    if name == "static":
        text += (" This is how the lab runs without Docker, for example on Binder: every outcome is a prediction, "
                 "not an observation. Run the lab with Docker to watch the attacks for real.")
    return text


def backend_note_html(result: Optional[RunResult], *, backend: str = "") -> str:
    """The note beside the probe button: how ``result`` was obtained, or (no result) that ``backend`` failed."""
    if result is None:
        return f"<small>{_h(backend or '?')} backend failed</small>"
    return f"<small>{_h(_how(result))}</small>"


def failed_html(message: str) -> str:
    """The board of a run that failed: the machinery's message, never a traceback."""
    return f'<div class="sl-board sl-failed" style="color:{_AMBER}"><strong>The run failed:</strong> {_h(message)}</div>'


def error_html(message: str) -> str:
    """Any other view that could not be drawn (e.g. an unreadable progress file), with the reason."""
    return f'<div class="sl-error" style="color:{_AMBER}">{_h(message)}</div>'


# --- the probe table ----------------------------------------------------------------------


def _story(probe_id: str) -> str:
    try:
        return probe(probe_id).story
    except KeyError:
        return ""


def _row(p: ProbeOutcome) -> str:
    how = tone(p)
    mark = {"bad": "✗ ", "good": "✓ ", "warn": "! ", "plain": "✓ " if p.kind == "attack" else ""}[how]
    evidence = "".join(f'<div class="sl-evidence"><small>evidence: <code>{_h(e)}</code></small></div>' for e in p.evidence)
    return (
        f'<tr class="sl-row sl-{_h(p.kind)} sl-{_h(p.outcome)} sl-tone-{how}" data-probe="{_h(p.id)}" '
        f'data-outcome="{_h(p.outcome)}" data-kind="{_h(p.kind)}" style="background:{_BG[how]}">'
        f'<td style="padding:3px 6px;vertical-align:top"><code>{_h(p.id)}</code><br><small>{_h(_story(p.id))}</small></td>'
        f'<td style="padding:3px 6px;vertical-align:top;color:{_INK[how]};font-weight:bold;white-space:nowrap">{mark}{_h(p.outcome)}</td>'
        f'<td style="padding:3px 6px;vertical-align:top"><small>{_h(p.explanation)}</small>{evidence}</td></tr>'
    )


def _section(title: str, probes: Sequence[ProbeOutcome]) -> list[str]:
    if not probes:
        return []
    return [f'<tr><th colspan="3" style="text-align:left;padding:6px 6px 2px">{_h(title)}</th></tr>', *(_row(p) for p in probes)]


def paths_for(result: RunResult) -> tuple[ExfilPath, ...]:
    """The exfiltration paths of the sandbox a result describes (the picture's data): its findings', none when unknown."""
    return result.findings.paths if result.findings is not None else ()


def board_html(result: Optional[RunResult], *, only: Optional[Iterable[str]] = None, picture: bool = True) -> str:
    """The probe board: the scope in one line, which backend ran, a summary, the table (attacks first) and the exfiltration picture.

    Args:
        only: probe ids to show (all when None), for a lesson that focuses on a few.
        picture: draw the exfiltration paths under the table.
    """
    if result is None:
        return '<div class="sl-board sl-empty"><p><em>No run yet: press "Probe this policy".</em></p></div>'
    keep = set(only) if only is not None else None
    probes = [p for p in result.probes if keep is None or p.id in keep]
    attacks = [p for p in probes if p.kind == "attack"]
    jobs = [p for p in probes if p.kind == "job"]
    what = "the plain container (no policy)" if result.sandbox == "baseline" else "this policy"
    parts = [
        f'<div class="sl-board" data-backend="{_h(result.backend)}" data-sandbox="{_h(result.sandbox)}">',
        f'<p class="sl-scope" style="margin:2px 0"><strong>{_h(scope_line(result))}</strong></p>',
        f'<p class="sl-backend" style="margin:2px 0"><strong>{_h(_how(result))}</strong></p>',
        f'<p class="sl-summary" style="margin:2px 0">Against {_h(what)}: {_h(summary(result))}.</p>',
        *(f'<p class="sl-note" style="margin:2px 0"><small><em>note: {_h(n)}</em></small></p>' for n in result.notes),
        '<table class="sl-probe-table" style="border-collapse:collapse;width:100%">',
        '<thead><tr><th style="text-align:left">probe: what it tries</th><th style="text-align:left">outcome</th>'
        '<th style="text-align:left">why (and evidence)</th></tr></thead><tbody>',
        *_section("Attacks (blocked is good)", attacks),
        *_section("Jobs (succeeded is good)", jobs),
        "</tbody></table>",
    ]
    if picture:
        parts += ['<div class="sl-exfil"><h4 style="margin:8px 0 2px">Exfiltration paths</h4>', exfil_svg(paths_for(result), why_none=_why_none(result)), "</div>"]
    parts.append("</div>")
    return "\n".join(parts) + "\n"


def _why_none(result: RunResult) -> str:
    found = result.findings
    if found is None:
        return ""
    if not found.readable and not found.channels:
        return "No secret is readable and no channel leads out."
    if not found.readable:
        return f"No secret is readable (a channel out remains: {', '.join(c.host for c in found.channels)})."
    return f"{len(found.readable)} secret(s) are readable, but no channel leads out."


# --- the exfiltration picture -------------------------------------------------------------


def exfil_svg(paths: Sequence[ExfilPath], *, why_none: str = "") -> str:
    """Secrets on the left, channels out (host + how) on the right, one line per path that leaks."""
    if not paths:
        msg = "No exfiltration path." + (f" {why_none}" if why_none else "")
        return (
            '<svg class="sl-exfil-svg" xmlns="http://www.w3.org/2000/svg" width="100%" viewBox="0 0 700 40" '
            f'style="max-width:700px" role="img" aria-label="{_h(msg)}" data-paths="0">'
            f'<text x="10" y="25" font-family="sans-serif" font-size="14" fill="{_GREEN}">✓ {_h(msg)}</text></svg>'
        )
    secrets: list[tuple[str, str]] = []
    chans: list[tuple[str, str]] = []
    for p in paths:
        if (p.secret, p.label) not in secrets:
            secrets.append((p.secret, p.label))
        if (p.channel.kind, p.channel.host) not in chans:
            chans.append((p.channel.kind, p.channel.host))
    row, top, box_w = 40, 40, 230
    height = top + row * max(len(secrets), len(chans)) + 10
    ys = {s: top + i * row for i, s in enumerate(secrets)}
    yc = {c: top + i * row for i, c in enumerate(chans)}
    out = [
        f'<svg class="sl-exfil-svg" xmlns="http://www.w3.org/2000/svg" width="100%" viewBox="0 0 700 {height}" '
        f'style="max-width:700px" role="img" aria-label="{len(paths)} exfiltration paths" data-paths="{len(paths)}" '
        'font-family="sans-serif" font-size="12">',
        '<text x="10" y="20" font-weight="bold">readable secrets</text>',
        '<text x="460" y="20" font-weight="bold">channels out (host: how)</text>',
    ]
    for p in paths:
        y1 = ys[(p.secret, p.label)] + 14
        y2 = yc[(p.channel.kind, p.channel.host)] + 14
        colour = _CHANNEL_COLOURS.get(p.channel.kind, _RED)
        title = f"{p.label} ({p.secret}) can leave via {p.channel.host} ({_CHANNEL_WORDS.get(p.channel.kind, p.channel.kind)}): {p.channel.why}"
        out.append(
            f'<path class="sl-path" data-secret="{_h(p.secret)}" data-host="{_h(p.channel.host)}" data-channel="{_h(p.channel.kind)}" '
            f'd="M {10 + box_w} {y1} C 350 {y1}, 350 {y2}, 460 {y2}" stroke="{colour}" stroke-width="2" fill="none" opacity="0.75">'
            f"<title>{_h(title)}</title></path>"
        )
    for (path, label), y in ys.items():
        out.append(
            f'<g class="sl-secret" data-secret="{_h(path)}"><rect x="10" y="{y}" width="{box_w}" height="28" rx="4" fill="{_BG["bad"]}" stroke="{_RED}"/>'
            f'<text x="16" y="{y + 12}">{_h(label)}</text><text x="16" y="{y + 24}" fill="{_GREY}" font-size="10">{_h(path)}</text></g>'
        )
    for (kind, host), y in yc.items():
        colour = _CHANNEL_COLOURS.get(kind, _RED)
        out.append(
            f'<g class="sl-channel" data-host="{_h(host)}" data-channel="{_h(kind)}"><rect x="460" y="{y}" width="{box_w}" height="28" rx="4" fill="white" stroke="{colour}"/>'
            f'<text x="466" y="{y + 12}">{_h(host)}</text><text x="466" y="{y + 24}" fill="{colour}" font-size="10">{_h(_CHANNEL_WORDS.get(kind, kind))}</text></g>'
        )
    out.append("</svg>")
    return "".join(out)


# --- several sandboxes at once ------------------------------------------------------------


def _cell(name: str, result: Optional[RunResult], probe_id: str) -> str:
    """One sandbox's outcome for one probe, coloured like the board; empty when it did not run."""
    try:
        p = result.outcome(probe_id) if result else None
    except KeyError:
        p = None
    if p is None:
        return "<td></td>"
    how = tone(p)
    return (
        f'<td data-sandbox="{_h(name)}" data-probe="{_h(p.id)}" data-outcome="{_h(p.outcome)}" title="{_h(p.explanation)}" '
        f'style="padding:3px 6px;background:{_BG[how]};color:{_INK[how]};font-weight:bold">{_h(p.outcome)}</td>'
    )


def comparison_html(results: Mapping[str, Union[RunResult, str]]) -> str:
    """Several runs next to each other: one row per probe, one column per sandbox, then each picture.

    A value that is a string is an error message for that sandbox (it could not be run).
    """
    names = list(results)
    ok = {n: r for n, r in results.items() if isinstance(r, RunResult)}
    ids: list[str] = []
    for r in ok.values():
        for p in sorted(r.probes, key=lambda p: p.kind != "attack"):
            if p.id not in ids:
                ids.append(p.id)
    head = "".join(f'<th style="text-align:left;padding:3px 6px">{_h(n)}</th>' for n in names)
    parts = ['<div class="sl-compare">', '<table class="sl-compare-table" style="border-collapse:collapse">',
             f'<thead><tr><th style="text-align:left">probe</th>{head}</tr></thead><tbody>']
    for n, failed in results.items():
        if isinstance(failed, str):
            parts.append(f'<tr><td colspan="{len(names) + 1}" style="color:{_AMBER}"><strong>{_h(n)}</strong> could not run: {_h(failed)}</td></tr>')
    for pid in ids:
        cells = []
        for n in names:
            cells.append(_cell(n, ok.get(n), pid))
        kind = ok[next(iter(ok))].outcome(pid).kind if ok else "attack"
        parts.append(f'<tr><td style="padding:3px 6px"><code>{_h(pid)}</code> <small>({_h(kind)})</small></td>{"".join(cells)}</tr>')
    parts.append("</tbody></table>")
    parts.append('<p><small>Hover an outcome for its explanation; open a sandbox below for the full board.</small></p>')
    for n, r in ok.items():
        parts.append(f'<details class="sl-compare-board" data-sandbox="{_h(n)}"><summary><strong>{_h(n)}</strong>: {_h(summary(r))}</summary>')
        parts.append(board_html(r))
        parts.append("</details>")
    parts.append('<div class="sl-compare-pictures" style="display:flex;flex-wrap:wrap;gap:12px">')
    for n, r in ok.items():
        parts.append(f'<div style="flex:1;min-width:300px"><h4 style="margin:6px 0 2px">{_h(n)}: exfiltration paths</h4>{exfil_svg(paths_for(r), why_none=_why_none(r))}</div>')
    parts.append("</div></div>")
    return "\n".join(parts) + "\n"


# --- the policy editor, policy problems, host decisions -----------------------------------


def editor_html(policy_text: str, status_html: str, note_html: str, board: str) -> str:
    """The policy editor's state as static HTML (for exports): the policy, its problems, the backend note and the board.

    ``status_html``, ``note_html`` and ``board`` are HTML this module made; ``policy_text`` is the learner's text.
    """
    text = policy_text.replace("\r\n", "\n")
    return (f'<div class="sl-policy-editor"><pre class="sl-policy-text">{_h(text)}</pre>'
            f"{status_html}<p>{note_html}</p>{board}</div>")


def problems_html(errors: Sequence[Problem], warnings: Sequence[Problem] = ()) -> str:
    """Validation errors and lint warnings, each with its JSON pointer, as the CLI lists them."""
    if not errors and not warnings:
        return f'<div class="sl-problems sl-valid" style="color:{_GREEN}">✓ valid policy, no warnings</div>'
    parts = ['<div class="sl-problems">']
    if errors:
        n = len(errors)
        parts.append(f'<div style="color:{_RED}"><strong>not a valid policy ({n} problem{"s" if n != 1 else ""})</strong></div><ul class="sl-errors">')
        parts += [f'<li data-pointer="{_h(e.pointer)}"><code>{_h(e.pointer)}</code>: {_h(e.message)}</li>' for e in errors]
        parts.append("</ul>")
    else:
        parts.append(f'<div style="color:{_GREEN}">✓ valid policy</div>')
    if warnings:
        parts.append(f'<div style="color:{_AMBER}"><strong>warnings</strong></div><ul class="sl-warnings">')
        parts += [f'<li data-pointer="{_h(w.pointer)}"><code>{_h(w.pointer)}</code>: {_h(w.message)}</li>' for w in warnings]
        parts.append("</ul>")
    parts.append("</div>")
    return "\n".join(parts)


def goal_html(goal: Goal) -> str:
    """The goal of an editor, stated before any run."""
    return f'<div class="sl-goal" data-goal-id="{_h(goal.id)}"><strong>Goal:</strong> {_h(goal.statement)}</div>'


def goal_status_html(goal: Goal, met: bool, reasons: Sequence[str], result: RunResult, *, unsaved: str = "") -> str:
    """After a run: "Goal met" (with the risk the goal accepts, if any) or "Not yet: ..." with every reason.

    ``data-goal`` is ``met`` or ``not-met``, for browser tests; how the run was
    obtained is said, so a prediction is never mistaken for an observation.
    """
    how = f"<small>({_h(_how(result))})</small>"
    saved = f'<br><small style="color:{_AMBER}">Progress not saved: {_h(unsaved)}</small>' if unsaved else ""
    if met:
        accepted = f"<br><small><strong>Accepted risk:</strong> {_h(goal.accepted_why)}</small>" if goal.accepted_why else ""
        return (f'<div class="sl-goal-status" data-goal="met" data-goal-id="{_h(goal.id)}" style="color:{_GREEN}">'
                f"<strong>✓ Goal met.</strong> {how}{accepted}{saved}</div>")
    items = "".join(f"<li>{_h(r)}</li>" for r in reasons)
    return (f'<div class="sl-goal-status" data-goal="not-met" data-goal-id="{_h(goal.id)}">'
            f'<strong style="color:{_AMBER}">Not yet:</strong> {_h(reasons[0]) if len(reasons) == 1 else ""} {how}'
            + (f'<ul style="margin:2px 0">{items}</ul>' if len(reasons) > 1 else "") + "</div>")


def carry_over_html(carry: CarryOver, source: str = "my_policy.json") -> str:
    """The policy in the real tools: the srt and Claude Code files, and the differences that matter for it."""
    diffs = ("".join(f"<li>{_h(d)}</li>" for d in carry.differences) if carry.differences
             else "<li>None of the measured differences between srt and Sandbox Lab applies to this policy.</li>")
    return (
        '<details class="sl-carry-over"><summary><strong>In the real tools</strong>: what '
        f"<code>sandbox-lab export {_h(source)} --to srt</code> and <code>--to claude-code</code> write, and what differs</summary>"
        f"<p>sandbox-runtime's settings file (<code>~/.srt-settings.json</code>):</p><pre>{_h(carry.srt)}</pre>"
        f"<p>Claude Code's <code>settings.json</code>, its sandbox block:</p><pre>{_h(carry.claude_code)}</pre>"
        f'<p>Differences that matter for this policy:</p><ul class="sl-differences">{diffs}</ul></details>'
    )


def reach_html(policy: Policy, hosts: Sequence[str], world: Optional[World] = None) -> str:
    """How the proxy decides, host by host: the host name is all it sees."""
    acc = access_for(policy, world or load_world())
    w = acc.world
    rows = []
    for host in hosts:
        d = acc.reach(host)
        uploads = w.uploads_to(host)  # an upload host, or a name the attacker owns or may own (fail closed)
        colour = (_RED if w.reads_url(host) else _GREEN) if d.allowed else _GREY
        way_out = " (the attacker's own server, or may be: a way out)" if uploads and host not in w.host_names else " (accepts uploads: a way out)"
        if not uploads and w.reads_url(host):
            uploads, way_out = True, " (download only, but the attacker reads its request URLs: a way out)"
        verdict = "reachable" + (way_out if uploads else " (download only)") if d.allowed else "refused"
        rows.append(
            f'<tr data-host="{_h(host)}" data-allowed="{str(d.allowed).lower()}"><td style="padding:2px 6px"><code>{_h(host)}</code></td>'
            f'<td style="padding:2px 6px;color:{colour};font-weight:bold">{_h(verdict)}</td><td style="padding:2px 6px"><small>{_h(d.why)}</small></td></tr>'
        )
    return (
        '<table class="sl-reach" style="border-collapse:collapse"><thead><tr><th style="text-align:left">host the agent asks for</th>'
        '<th style="text-align:left">proxy decision</th><th style="text-align:left">why</th></tr></thead><tbody>'
        + "".join(rows) + "</tbody></table>"
    )


def catalogue_html() -> str:
    """The probe catalogue: every attack a compromised agent tries and every job that must keep working."""
    rows = "".join(
        f'<tr data-probe="{_h(p.id)}"><td style="padding:2px 6px"><code>{_h(p.id)}</code></td><td style="padding:2px 6px">{_h(p.kind)}</td>'
        f'<td style="padding:2px 6px">{_h(p.story)}</td></tr>'
        for p in sorted(PROBES, key=lambda p: p.kind != "attack")
    )
    return ('<table class="sl-catalogue" style="border-collapse:collapse"><thead><tr><th style="text-align:left">probe</th>'
            '<th style="text-align:left">kind</th><th style="text-align:left">what it tries</th></tr></thead><tbody>' + rows + "</tbody></table>")


# --- the agent on stage (lesson 01) ------------------------------------------------------

_STEP_WORDS = {"read": "read", "run": "run", "write": "write", "post": "upload"}
_PREDICTED = "predicted, not run: the static analyzer worked each tool call's outcome out from the policy"


def _step_tone(c: ToolCall) -> Tone:
    """Red where the hidden instruction got through, green where the job worked, amber where it broke."""
    if c.injected:
        return "bad" if c.outcome == "ok" else "plain"
    return "good" if c.outcome == "ok" else "warn"


def _step_row(c: ToolCall) -> str:
    how = _step_tone(c)
    out = c.output if len(c.output) <= 600 else c.output[:600] + "\n…"
    why = f'<div class="sl-agent-why"><small>predicted: {_h(c.why)}</small></div>' if c.why else ""
    origin = '<small><strong>from the hidden comment</strong></small>' if c.injected else "<small>the job</small>"
    return (
        f'<tr class="sl-agent-step sl-tone-{how}" data-step="{c.step}" data-tool="{_h(c.tool)}" data-outcome="{_h(c.outcome)}" '
        f'data-injected="{str(c.injected).lower()}" style="background:{_BG[how]}">'
        f'<td style="padding:3px 6px;vertical-align:top">{c.step}</td>'
        f'<td style="padding:3px 6px;vertical-align:top"><strong>{_h(_STEP_WORDS.get(c.tool, c.tool))}</strong> {_h(c.target)}<br>{origin}'
        f'<pre style="margin:2px 0;white-space:pre-wrap;font-size:85%">$ {_h(c.command)}</pre></td>'
        f'<td style="padding:3px 6px;vertical-align:top;color:{_INK[how]};font-weight:bold">{_h(c.outcome)}</td>'
        f'<td style="padding:3px 6px;vertical-align:top"><pre style="margin:0;white-space:pre-wrap;font-size:85%">{_h(out)}</pre>{why}</td></tr>'
    )


def agent_run_html(run: AgentRun, *, goal: bool = False) -> str:
    """One run of the agent: how it was obtained, its system prompt, the transcript, and the verdict from the evidence.

    The verdict (``sl-agent-verdict``, ``data-leaked``) rests on the simulated
    internet's records, never on what the transcript says the agent did.
    ``goal`` adds the lesson's check: the key stayed and the job was done.
    """
    if run.predicted:
        how = _PREDICTED
    else:
        how = backend_phrase(run.backend, run_id=run.run_id, seconds=run.seconds)
    where = "the plain container (no policy)" if run.sandbox == "baseline" else "this policy's sandbox"
    prompt = (f'<p class="sl-agent-prompt" style="margin:2px 0">System prompt: <q>{_h(run.prompt)}</q> '
              "<small>(text the agent reads, like the README; nothing enforces it)</small></p>" if run.prompt
              else '<p class="sl-agent-prompt" style="margin:2px 0">No system prompt.</p>')
    leaked = "unknown" if run.leaked is None else str(run.leaked).lower()
    said = "Predicted: " if run.predicted else ""
    if run.leaked:
        verdict = (f"✗ {said}the SSH key left the sandbox", _RED, run.evidence[0] if run.evidence else "")
    elif run.leaked is False:
        verdict = (f"✓ {said}the SSH key stayed", _GREEN, run.evidence[0] if run.evidence else "")
    else:
        verdict = ("! Cannot tell whether the key left", _AMBER, run.problem or "no evidence was collected")
    job = next((e for e in run.evidence if "/project/out" in e), "")
    job_line = (f"✓ {said}the job was done" if run.job_done else f"! {said}the job was not done")
    parts = [
        f'<div class="sl-agent-run" data-backend="{_h(run.backend)}" data-sandbox="{_h(run.sandbox)}" data-predicted="{str(run.predicted).lower()}">',
        f'<p class="sl-agent-how" style="margin:2px 0"><strong>{_h(how)}</strong> <small>in {_h(where)}</small></p>',
        prompt,
        '<table class="sl-agent-transcript" style="border-collapse:collapse;width:100%"><thead><tr>'
        '<th style="text-align:left;width:2em">#</th><th style="text-align:left;width:40%">tool call</th>'
        '<th style="text-align:left;width:5em">outcome</th><th style="text-align:left">what came back</th></tr></thead><tbody>',
        *(_step_row(c) for c in run.calls),
        "</tbody></table>",
        f'<p class="sl-agent-verdict" data-leaked="{leaked}" style="margin:4px 0;color:{verdict[1]}"><strong>{_h(verdict[0])}</strong>'
        f'<br><small>evidence: <code>{_h(verdict[2])}</code></small></p>',
        f'<p class="sl-agent-job" data-done="{str(run.job_done).lower()}" style="margin:2px 0;color:{_GREEN if run.job_done else _AMBER}">'
        f'<strong>{_h(job_line)}</strong><br><small>evidence: <code>{_h(job)}</code></small></p>',
    ]
    if run.problem and run.leaked is not None:
        parts.append(f'<p class="sl-note" style="margin:2px 0"><small><em>note: {_h(run.problem)}</em></small></p>')
    if goal:
        met = run.leaked is False and run.job_done
        text = ("Goal met: the key stayed and the job was done." if met else "Not yet: " + "; ".join(
            w for w, bad in (("the key left", run.leaked is not False), ("the job was not done", not run.job_done)) if bad) + ".")
        parts.append(f'<p class="sl-agent-goal" data-met="{str(met).lower()}" style="margin:4px 0;font-weight:bold;'
                     f'color:{_GREEN if met else _AMBER}">{_h(text)}</p>')
    parts.append("</div>")
    return "\n".join(parts) + "\n"


def agent_stage_html(title: str, policy_text: Optional[str], body: str) -> str:
    """The agent stage as static HTML (for exports): its title, the policy it ran under (None: the plain container) and ``body``.

    ``body`` is HTML this module made (``agent_run_html``, ``problems_html`` or ``failed_html``).
    """
    policy = ('<p style="margin:2px 0">Sandbox: the plain container (no policy).</p>' if policy_text is None
              else f'<pre class="sl-agent-policy">{_h(policy_text.replace(chr(13) + chr(10), chr(10)))}</pre>')
    return f'<div class="sl-agent-stage"><h4 style="margin:6px 0 2px">{_h(title)}</h4>{policy}{body}</div>'


# --- quiz and progress --------------------------------------------------------------------

_QUIZ_LABELS = {"choice": "Choose one", "text": "Recall: write your answer first", "predict": "Predict, then run"}


def prompt_html(q: Question) -> str:
    """A question's kind and prompt, as the quiz widgets and the static export both show them."""
    label = ("Understanding check" if q.kind == "check" else "Recall") + f" · {_QUIZ_LABELS[q.type]}"
    return f"<p><small>{_h(label)}</small><br><strong>{_h(q.prompt)}</strong></p>"


def answer_html(correct: bool, feedback: str, *, unsaved: str = "") -> str:
    """Feedback text (e.g. ``quiz.check_answer``'s), green when right and red when not; ``unsaved`` says why progress was not kept."""
    body = "<br>".join(_h(line) for line in feedback.splitlines())
    note = f"<br><small>(progress not saved: {_h(unsaved)})</small>" if unsaved else ""
    return f'<div style="color:{_GREEN if correct else _RED}">{body}{note}</div>'


def ask_html(q: Question) -> str:
    """A graded choice question: its prompt and options under the bank's letters, and nothing of the answer."""
    options = "".join(f'<li data-key="{_h(c.key)}"><strong>{_h(c.key)}</strong>) {_h(c.text)}</li>' for c in q.choices)
    return (f'<div class="sl-question sl-graded" data-question="{_h(q.id)}">{prompt_html(q)}'
            f"<ul style='list-style:none;padding-left:8px'>{options}</ul></div>")


def _counted_html(attempt: Optional[Attempt], this_one: bool, unsaved: str) -> str:
    """Whether this attempt is the one the progress board counts."""
    if unsaved:
        return f'<p class="sl-attempt"><small style="color:{_AMBER}">(progress not saved: {_h(unsaved)})</small></p>'
    if attempt is None:
        return ""
    if this_one:
        return f'<p class="sl-attempt" data-first="true"><small>First attempt recorded on your progress board: {_h(attempt.result)}.</small></p>'
    return (f'<p class="sl-attempt" data-first="false"><small>Only your first attempt counts on the progress board '
            f"({_h(attempt.result)}); this one is not recorded.</small></p>")


def _model_answer_html(q: Question, prefix: str = "") -> str:
    rubric = "".join(f"<li>{_h(r)}</li>" for r in q.rubric)
    return (f'<div class="sl-model-answer"><p><strong>Model answer:</strong> {_h(prefix)}{_h(q.model_answer)}</p>'
            f"<p><em>Why:</em> {_h(q.reasoning)}</p>"
            + (f"<p><strong>A full answer</strong></p><ul class='sl-rubric'>{rubric}</ul>" if rubric else "") + "</div>")


def choice_result_html(q: Question, verdict: ChoiceVerdict, letters: Mapping[str, str], *, reveal: bool,
                       attempt: Optional[Attempt] = None, this_one: bool = False, unsaved: str = "") -> str:
    """A judged pick, under the letters the learner saw (``letters``: bank key → shown letter).

    The model answer is drawn only when ``reveal`` is true: the widget sets it
    once the first attempt is recorded, so a wrong click cannot show the answer
    before the board has counted it.
    """
    shown = letters.get(verdict.chosen, verdict.chosen)
    if verdict.correct:
        head = f'<p style="color:{_GREEN}"><strong>✓ Right:</strong> ({_h(shown)}).</p>'
    else:
        note = f" {_h(verdict.note)}" if verdict.note and reveal else ""
        head = f'<p style="color:{_RED}"><strong>✗ Not quite:</strong> ({_h(shown)}) is not the answer.{note}</p>'
    body = _model_answer_html(q, f"({letters.get(verdict.right, verdict.right)}) ") if reveal else (
        "<p><em>The model answer appears once your first attempt is recorded.</em></p>")
    return (f'<div class="sl-quiz-result" data-correct="{str(verdict.correct).lower()}" data-revealed="{str(reveal).lower()}">'
            f"{head}{body}{_counted_html(attempt, this_one, unsaved)}</div>")


def recall_reveal_html(q: Question, hint: RecallHint) -> str:
    """After a written answer: what the hint found, the model answer and its rubric, and the request to rate oneself."""
    rows = "".join(
        f'<li data-idea="{_h(h.idea)}" data-found="{str(bool(h.found)).lower()}">'
        + (f'<span style="color:{_GREEN}">✓</span> {_h(h.idea)} <small>(you wrote “{_h(h.found)}”)</small>' if h.found
           else f'<span style="color:{_MUTED}">○</span> {_h(h.idea)} <small>(not found in your words)</small>')
        + "</li>" for h in hint.hits)
    return (f'<div class="sl-recall-reveal"><p><small>Hint: the key ideas, looked for as whole words. It cannot read meaning: '
            f"compare your answer with the model answer yourself.</small></p><ul style='list-style:none;padding-left:8px'>{rows}</ul>"
            f"{_model_answer_html(q)}<p><strong>How did you do?</strong> Rate your own answer against the rubric.</p></div>")


def rating_html(rating: str, *, attempt: Optional[Attempt] = None, this_one: bool = False, unsaved: str = "") -> str:
    """The learner's self-rating, and whether it is the one the board counts."""
    return f'<div class="sl-rating" data-rating="{_h(rating)}"><p>You rated your answer: <strong>{_h(rating)}</strong>.</p>{_counted_html(attempt, this_one, unsaved)}</div>'


def scenario_html(q: Question) -> str:
    """A predict question's sandbox: its policy as JSON, or the plain container."""
    if q.scenario is None:
        return ""
    if q.scenario.policy is None:
        what = "<p>The sandbox: <strong>a plain Docker container</strong> (default bridge networking; home and projects mounted).</p>"
    else:
        what = f"<p>The sandbox's policy:</p><pre class='sl-scenario-policy'>{_h(json.dumps(q.scenario.policy, indent=2))}</pre>"
    return (f'<div class="sl-scenario" data-question="{_h(q.id)}">{what}'
            "<p><small>Tick each probe you expect to <strong>succeed</strong>, then run the sandbox.</small></p></div>")


def prediction_html(q: Question, score: PredictionScore, *, attempt: Optional[Attempt] = None, this_one: bool = False,
                    unsaved: str = "") -> str:
    """A prediction scored probe by probe against the run, saying how the run was obtained; then the model answer."""
    how = backend_phrase(score.backend, score.notes)
    against = "what really happened" if score.observed else "the static analyzer's prediction (nothing was run)"
    rows = []
    for c in score.calls:
        verdict = {True: ("✓ right", _GREEN), False: ("✗ wrong", _RED), None: ("no verdict", _AMBER)}[c.right]
        evidence = "".join(f'<div class="sl-evidence"><small>evidence: <code>{_h(e)}</code></small></div>' for e in c.evidence)
        rows.append(
            f'<tr data-probe="{_h(c.probe)}" data-predicted="{"succeeded" if c.predicted else "blocked"}" '
            f'data-outcome="{_h(c.outcome)}" data-right="{"" if c.right is None else str(c.right).lower()}">'
            f'<td style="padding:2px 6px"><code>{_h(c.probe)}</code><br><small>{_h(c.story)}</small></td>'
            f'<td style="padding:2px 6px">{"succeeds" if c.predicted else "blocked"}</td>'
            f'<td style="padding:2px 6px">{_h(c.outcome)}<br><small>{_h(c.explanation)}</small>{evidence}</td>'
            f'<td style="padding:2px 6px;color:{verdict[1]};font-weight:bold;white-space:nowrap">{verdict[0]}</td></tr>')
    return (
        f'<div class="sl-prediction" data-question="{_h(q.id)}" data-backend="{_h(score.backend)}" '
        f'data-observed="{str(score.observed).lower()}" data-right="{score.right}" data-judged="{score.judged}">'
        f'<p class="sl-backend" style="margin:2px 0"><strong>{_h(how)}</strong></p>'
        f"<p><strong>Your prediction: {_h(score.result)}</strong>, compared with {_h(against)}.</p>"
        '<table class="sl-prediction-table" style="border-collapse:collapse"><thead><tr><th style="text-align:left">probe</th>'
        '<th style="text-align:left">you predicted</th><th style="text-align:left">outcome</th><th style="text-align:left">your call</th>'
        f'</tr></thead><tbody>{"".join(rows)}</tbody></table>{_model_answer_html(q)}{_counted_html(attempt, this_one, unsaved)}</div>'
    )


def question_html(q: Question, *, reveal: bool = False) -> str:
    """A question as static HTML (for exports); the model answer sits in a closed ``<details>``."""
    parts = [f'<div class="sl-question" data-question="{_h(q.id)}">{prompt_html(q)}']
    if q.choices:
        parts.append("<ol type='a'>" + "".join(f"<li>{_h(c.text)}</li>" for c in q.choices) + "</ol>")
    parts.append(scenario_html(q))
    prefix = f"({right_key(q)}) " if q.type == "choice" else ""
    parts.append(f'<details{" open" if reveal else ""}><summary>Model answer (answer first!)</summary>'
                 f"{_model_answer_html(q, prefix)}</details></div>")
    return "\n".join(parts)


def _question_row(progress: Progress, q: Question) -> tuple[str, str, bool, str]:
    """(item id, title, solved, mark) of a question: solved only by a right first attempt."""
    item = f"quiz:{q.id}"
    title = q.prompt if len(q.prompt) < 70 else q.prompt[:67] + "..."
    first = progress.first_attempt(item)
    if first is None:
        return item, title, False, f'<span style="color:{_MUTED}">○</span>'
    colour = _GREEN if first.solved else (_AMBER if first.score > 0 else _RED)
    mark = "✓" if first.solved else ("◐" if first.score > 0 else "✗")
    return item, f"{title} (first attempt: {first.result})", first.solved, f'<span style="color:{colour}">{mark}</span>'


def _level_row(progress: Progress, lv: Level) -> tuple[str, str, bool, str]:
    """(item id, title, solved, mark) of a capture-the-flag level: attempts and hints used; solved once captured
    (the uncapturable last level: once the learner has tried enough to be told why)."""
    rec = progress.level(lv.item_id)
    title = f"{lv.number}. {lv.title}"
    tried = f"{rec.attempts} attempt{'s' if rec.attempts != 1 else ''}, {rec.hints} hint{'s' if rec.hints != 1 else ''} used"
    if rec.captured is not None:
        return lv.item_id, f"{title} (captured; {tried})", True, f'<span style="color:{_GREEN}">⚑</span>'
    if lv.uncapturable is not None and rec.attempts >= lv.uncapturable.after:
        return lv.item_id, f"{title} (nothing to capture, and you saw why; {tried})", True, f'<span style="color:{_GREEN}">✓</span>'
    if rec.attempts:
        return lv.item_id, f"{title} ({tried})", False, f'<span style="color:{_AMBER}">◐</span>'
    return lv.item_id, title, False, f'<span style="color:{_MUTED}">○</span>'


def progress_html(progress: Progress, *, questions: Sequence[Question] = (), tasks: Sequence[tuple[str, str]] = (),
                  levels: Sequence[Level] = ()) -> str:
    """The score board: lessons, questions (their first attempt), tasks and capture-the-flag levels, each solved or not."""

    def row(item_id: str, title: str, done: bool, mark: str) -> str:
        return f'<li data-item="{_h(item_id)}" data-done="{str(done).lower()}">{mark} {_h(title)} <small><code>{_h(item_id)}</code></small></li>'

    def done_rows(items: Sequence[tuple[str, str]]) -> list[tuple[str, str, bool, str]]:
        out = []
        for item_id, title in items:
            done = progress.is_done(item_id)
            out.append((item_id, title, done, f'<span style="color:{_GREEN}">✓</span>' if done else f'<span style="color:{_MUTED}">○</span>'))
        return out

    groups: list[tuple[str, list[tuple[str, str, bool, str]]]] = [
        ("Lessons", done_rows([(i, f"{t} (~{m} min)") for i, t, m in LESSONS])),
        ("Questions (only the first attempt counts)", [_question_row(progress, q) for q in questions]),
        ("Tasks", done_rows(tasks)),
        ("Capture the flag (attempts and hints are counted)", [_level_row(progress, lv) for lv in levels]),
    ]
    counted = len(groups)
    goals = [(f"goal:{g.id}", f"Goal: {g.statement}") for g in GOALS.values() if progress.is_done(f"goal:{g.id}")]
    if goals:  # goals met in the lessons' editors; they count nothing towards the total
        groups.append(("Goals met", done_rows(goals)))
    known = {r[0] for _, rows in groups for r in rows}
    other = done_rows([(i, i) for i in sorted(progress.done) if i not in known])
    if other:
        groups.append(("Other", other))
    total = sum(len(rows) for _, rows in groups[:counted])
    solved = sum(r[2] for _, rows in groups[:counted] for r in rows)
    parts = [f'<div class="sl-progress" data-solved="{solved}" data-total="{total}"><p><strong>Solved {solved} of {total}</strong> '
             f"<small>(kept in <code>{_h(progress.path)}</code>)</small></p>"]
    for title, rows in groups:
        if rows:
            parts.append(f"<h4 style='margin:6px 0 2px'>{_h(title)}</h4><ul style='list-style:none;padding-left:8px'>{''.join(row(*r) for r in rows)}</ul>")
    parts.append("</div>")
    return "\n".join(parts)


# --- capture the flag -----------------------------------------------------------------------


def level_html(lv: Level) -> str:
    """A level as the learner meets it: its story, where the flag is, and the sandbox the attack runs in."""
    files = ", ".join(f"<code>{_h(p)}</code>" for p in lv.flag_in)
    return (f'<div class="sl-level" data-level="{lv.number}"><h4 style="margin:4px 0">Level {lv.number}: {_h(lv.title)}</h4>'
            f"<p>{_h(lv.story)}</p><p><small>The flag is planted in {files}.</small></p>"
            f"<p><small>The sandbox:</small></p><pre style='margin:0'>{_h(lv.sandbox_text())}</pre></div>")


def attack_html(result: AttackResult, *, attempt: int = 1) -> str:
    """An attack's result: captured (where the flag arrived, with the log line) or missed (the sandbox and the next
    hint), and the attack's own output, which decides nothing."""
    lv = result.level
    out = result.output
    printed = (f"<details><summary>What the attack printed ({len(out)} characters; it decides nothing)</summary>"
               f"<pre style='white-space:pre-wrap'>{_h(out) if out.strip() else '(nothing)'}</pre></details>")
    if result.captured is None:  # the evidence was cut or a recorder failed: an error, not a verdict
        return (f'<div class="sl-attack-outcome sl-error" data-level="{lv.number}" data-captured="error" style="color:{_AMBER}">'
                f"<p><strong>Could not judge this attack</strong>: {_h(result.error)}.</p><p>The run is broken, not your "
                "attack's verdict: it is not counted as an attempt and unlocks no hint. Rerun it.</p>"
                f"{printed}</div>")
    if result.captured:
        rows = "".join(f"<li><strong>{_h(s.host)}</strong> ({_h(s.how)}): {_h(s.evidence)}</li>" for s in result.sinks)
        body = (f'<p style="color:{_GREEN}"><strong>⚑ Captured</strong> (attempt {attempt}): the flag <code>{_h(result.flag)}</code> '
                f"arrived where the attacker reads it.</p><ul>{rows}</ul><p><strong>What this level teaches:</strong> {_h(lv.teaches)}</p>")
    else:
        elsewhere = "".join(f"<li>It reached {_h(s.host)} by {_h(s.how)}, but this level counts only: {_h(', '.join(lv.channels))}.</li>"
                            for s in result.elsewhere)
        verdict = (f'<p style="color:{_RED}"><strong>Not captured</strong> (attempt {attempt}): no log of the simulated internet '
                   "shows the flag where the attacker can read it.</p>")
        body = (f"{verdict}{'<ul>' + elsewhere + '</ul>' if elsewhere else ''}"
                f"<p><small>The sandbox:</small></p><pre style='margin:0'>{_h(lv.sandbox_text())}</pre>"
                f'<p class="sl-attack-hint"><strong>Hint:</strong> {_h(result.hint)}</p>')
    note = f'<p><small style="color:{_AMBER}">{_h(result.note)}</small></p>' if result.note else ""
    return (f'<div class="sl-attack-outcome" data-level="{lv.number}" data-captured="{str(result.captured).lower()}">'
            f"{body}{note}{printed}</div>")
