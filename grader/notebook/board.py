"""The probe board: a run's outcomes as HTML (the table and the exfiltration picture), several runs side by side,
and the policy editor's own pieces (problems, how the proxy decides host by host, the carry-over to the real tools).

The one HTML renderer of a run (the CLI renders text and JSON in ``report``).
Everything here is a function from values to a string, testable without a
kernel; ``widgets`` only puts the strings into ipywidgets. Every other
feature owns its views (``quiz_views``, ``progress_views``, ``agent_views``,
``goal_views``, ``notebook.ladder_views``); the palette and the escaping they share are
``palette``'s. How a run was obtained is said by ``wording.backend_phrase`` and
how an outcome looks by ``wording.tone``, as in the text report.

The exfiltration picture is the run's own findings (``RunResult.findings``:
which secrets can reach which hosts over which channel, found once where the
run was made), so it explains the table next to it; nothing here parses the
policy back or loads the world.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Optional, Sequence, Union

from grader.core.channels import ExfilPath
from grader.core.errors import Problem
from grader.core.outcomes import ProbeOutcome, RunNoteCode, RunResult
from grader.core.plan import build_plan
from grader.core.policy import Policy
from grader.core.probes import PROBES, probe
from grader.core.wording import backend_phrase, tone
from grader.core.world import World
from grader.grading.grade import CarryOver
from grader.grading.report import scope_line, summary, target_line
from grader.notebook.palette import AMBER, BG, GREEN, GREY, INK, RED, error_html, failed_html, h, run_phrase

__all__ = [
    "backend_note_html",
    "board_html",
    "carry_over_html",
    "catalogue_html",
    "comparison_html",
    "describe_backend",
    "editor_html",
    "error_html",
    "exfil_list_html",
    "exfil_paths_text",
    "exfil_svg",
    "failed_html",
    "paths_for",
    "problems_html",
    "reach_html",
]

_CHANNEL_COLOURS = {"upload": RED, "dns": "#6941c6", "direct": AMBER, "url": RED}
# The symbol beside each coloured outcome, so colour never carries the meaning alone.
_MARKS = {"bad": "✗ ", "good": "✓ ", "warn": "! ", "plain": ""}
_CHANNEL_WORDS = {"upload": "upload", "dns": "DNS queries", "direct": "direct connection", "url": "the URL of a download"}


# --- which backend ------------------------------------------------------------------------


def describe_backend(backend: object) -> str:
    """One paragraph for a lesson's output: which backend is active and what its results will say."""
    name = str(getattr(backend, "name", type(backend).__name__))
    notice = str(getattr(backend, "notice", ""))
    cause = getattr(backend, "cause", None)  # a static backend's: why it stands in (``StaticBackend.cause``)
    codes: tuple[RunNoteCode, ...] = (cause,) if cause else ()
    text = f"Backend: {name}. Results below: {backend_phrase(name, codes)}."
    if notice:
        text += f" (note: {notice})"
    if name == "static":
        text += (" This is how the lab runs without Docker, for example on Binder: every outcome is a prediction, "
                 "not an observation. Run the lab with Docker to watch the attacks for real.")
    return text


def backend_note_html(result: Optional[RunResult], *, backend: str = "") -> str:
    """The note beside the probe button: how ``result`` was obtained, or (no result) that ``backend`` failed."""
    if result is None:
        return f"<small>{h(backend or '?')} backend failed</small>"
    return f"<small>{h(run_phrase(result))}</small>"


# --- the probe table ----------------------------------------------------------------------


def _story(probe_id: str) -> str:
    try:
        return probe(probe_id).story
    except KeyError:
        return ""


def _mark(p: ProbeOutcome) -> str:
    """✗ an attack that succeeded, ✓ one blocked or a job that works, ! a broken job or a probe not judged."""
    how = tone(p)
    return _MARKS[how] if how != "plain" else ("✓ " if p.kind == "attack" else "")


def _row(p: ProbeOutcome) -> str:
    how = tone(p)
    mark = _mark(p)
    evidence = "".join(f'<div class="sl-evidence"><small>evidence: <code>{h(e)}</code></small></div>' for e in p.evidence)
    return (
        f'<tr class="sl-row sl-{h(p.kind)} sl-{h(p.outcome)} sl-tone-{how}" data-probe="{h(p.id)}" '
        f'data-outcome="{h(p.outcome)}" data-kind="{h(p.kind)}" style="background:{BG[how]}">'
        f'<td style="padding:3px 6px;vertical-align:top"><code>{h(p.id)}</code><br><small>{h(_story(p.id))}</small></td>'
        f'<td style="padding:3px 6px;vertical-align:top;color:{INK[how]};font-weight:bold;white-space:nowrap">{mark}{h(p.outcome)}</td>'
        f'<td style="padding:3px 6px;vertical-align:top"><small>{h(p.explanation)}</small>{evidence}</td></tr>'
    )


def _section(title: str, probes: Sequence[ProbeOutcome]) -> list[str]:
    if not probes:
        return []
    return [f'<tr><th colspan="3" scope="colgroup" style="text-align:left;padding:6px 6px 2px">{h(title)}</th></tr>',
            *(_row(p) for p in probes)]


def _succeeded_attacks(probes: Sequence[ProbeOutcome]) -> str:
    """The attacks that succeeded, by id, for the line a closed board shows ("" when none did)."""
    won = [p.id for p in probes if p.kind == "attack" and p.outcome == "succeeded"]
    return f" ✗ Attacks that succeeded: {', '.join(won)}." if won else ""


def paths_for(result: RunResult) -> tuple[ExfilPath, ...]:
    """The exfiltration paths of the sandbox a result describes (the picture's data): its findings', none when unknown."""
    return result.findings.paths if result.findings is not None else ()


# A board opens with a few lines and keeps the rest in a <details>: a full board is 2,000 words. A lesson's
# focused board (a few probes, ``only``) is short enough to stay open.
_OPEN_UP_TO = 8
# Long ids, hosts and evidence wrap instead of widening the page (a 414 px screen).
WRAP = "overflow-wrap:anywhere;max-width:100%"
_PRE = "white-space:pre-wrap;" + WRAP


def board_html(result: Optional[RunResult], *, only: Optional[Iterable[str]] = None, picture: bool = True) -> str:
    """The probe board: the scope, a one-line summary saying how the run was obtained, then on demand the table
    (attacks first) and the exfiltration picture.

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
    opened = " open" if keep is not None and len(probes) <= _OPEN_UP_TO else ""
    shown = f"{len(probes)} of {len(result.probes)} probes" if keep is not None else f"all {len(probes)} probes"
    said = target_line(result)  # whose rules: every board says which target it ran under
    rules = f' <span class="sl-target">{h(said)}</span>' if said else ""
    parts = [
        f'<div class="sl-board" data-backend="{h(result.backend)}" data-sandbox="{h(result.sandbox)}" style="{WRAP}">',
        f'<p class="sl-scope" style="margin:2px 0"><strong>{h(scope_line(result))}</strong></p>',
        f'<p class="sl-summary" style="margin:2px 0">Against {h(what)}: {h(summary(result))}.{h(_succeeded_attacks(probes))} '
        f'<span class="sl-backend"><strong>{h(run_phrase(result))}</strong></span>{rules}</p>',
        *(f'<p class="sl-note" style="margin:2px 0"><small><em>note: {h(n)}</em></small></p>' for n in result.notes),
        f'<details class="sl-board-details"{opened}><summary style="cursor:pointer">Each probe: what it tries, its outcome and why '
        f'({h(shown)}){"; the exfiltration paths" if picture else ""}</summary>',
        '<table class="sl-probe-table" style="border-collapse:collapse;width:100%">',
        '<thead><tr><th scope="col" style="text-align:left">probe: what it tries</th><th scope="col" style="text-align:left">outcome</th>'
        '<th scope="col" style="text-align:left">why (and evidence)</th></tr></thead><tbody>',
        *_section("Attacks (blocked is good)", attacks),
        *_section("Jobs (succeeded is good)", jobs),
        "</tbody></table>",
    ]
    if picture:
        paths = paths_for(result)
        parts += ['<div class="sl-exfil"><h4 style="margin:8px 0 2px">Exfiltration paths</h4>', exfil_svg(paths, why_none=_why_none(result)),
                  exfil_list_html(paths), "</div>"]
    parts.append("</details></div>")
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


def exfil_paths_text(paths: Sequence[ExfilPath]) -> list[str]:
    """The paths in words, one line per channel out: which secrets can leave by it (the picture's text alternative)."""
    by_channel: dict[tuple[str, str], list[str]] = {}
    for p in paths:
        named = f"{p.label} ({p.secret})"
        secrets = by_channel.setdefault((p.channel.host, p.channel.kind), [])
        if named not in secrets:
            secrets.append(named)
    return [f"{host} ({_CHANNEL_WORDS.get(kind, kind)}): {', '.join(secrets)}" for (host, kind), secrets in by_channel.items()]


def exfil_svg(paths: Sequence[ExfilPath], *, why_none: str = "") -> str:
    """Secrets on the left, channels out (host + how) on the right, one line per path that leaks.

    Its text alternative (``aria-label``) names every path, channel by channel, as ``exfil_list_html`` lists them.
    """
    if not paths:
        msg = "No exfiltration path." + (f" {why_none}" if why_none else "")
        return (
            '<svg class="sl-exfil-svg" xmlns="http://www.w3.org/2000/svg" width="100%" viewBox="0 0 700 40" '
            f'style="max-width:700px" role="img" aria-label="{h(msg)}" data-paths="0">'
            f'<text x="10" y="25" font-family="sans-serif" font-size="14" fill="{GREEN}">✓ {h(msg)}</text></svg>'
        )
    lines = exfil_paths_text(paths)
    label = (f"{len(paths)} exfiltration path{'s' if len(paths) != 1 else ''}: secrets that can leave, "
             f"by channel out. " + "; ".join(lines) + ".")
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
        f'style="max-width:700px" role="img" aria-label="{h(label)}" data-paths="{len(paths)}" '
        'font-family="sans-serif" font-size="12">',
        '<text x="10" y="20" font-weight="bold">readable secrets</text>',
        '<text x="460" y="20" font-weight="bold">channels out (host: how)</text>',
    ]
    for p in paths:
        y1 = ys[(p.secret, p.label)] + 14
        y2 = yc[(p.channel.kind, p.channel.host)] + 14
        colour = _CHANNEL_COLOURS.get(p.channel.kind, RED)
        title = f"{p.label} ({p.secret}) can leave via {p.channel.host} ({_CHANNEL_WORDS.get(p.channel.kind, p.channel.kind)}): {p.channel.why}"
        out.append(
            f'<path class="sl-path" data-secret="{h(p.secret)}" data-host="{h(p.channel.host)}" data-channel="{h(p.channel.kind)}" '
            f'd="M {10 + box_w} {y1} C 350 {y1}, 350 {y2}, 460 {y2}" stroke="{colour}" stroke-width="2" fill="none" opacity="0.75">'
            f"<title>{h(title)}</title></path>"
        )
    for (path, label), y in ys.items():
        out.append(
            f'<g class="sl-secret" data-secret="{h(path)}"><rect x="10" y="{y}" width="{box_w}" height="28" rx="4" fill="{BG["bad"]}" stroke="{RED}"/>'
            f'<text x="16" y="{y + 12}">{h(label)}</text><text x="16" y="{y + 24}" fill="{GREY}" font-size="10">{h(path)}</text></g>'
        )
    for (kind, host), y in yc.items():
        colour = _CHANNEL_COLOURS.get(kind, RED)
        out.append(
            f'<g class="sl-channel" data-host="{h(host)}" data-channel="{h(kind)}"><rect x="460" y="{y}" width="{box_w}" height="28" rx="4" fill="white" stroke="{colour}"/>'
            f'<text x="466" y="{y + 12}">{h(host)}</text><text x="466" y="{y + 24}" fill="{colour}" font-size="10">{h(_CHANNEL_WORDS.get(kind, kind))}</text></g>'
        )
    out.append("</svg>")
    return "".join(out)


def exfil_list_html(paths: Sequence[ExfilPath]) -> str:
    """The picture's paths as a list, channel by channel, under a ``<details>`` (at 414 px the picture's text is small)."""
    if not paths:
        return ""
    return ('<details class="sl-exfil-list"><summary style="cursor:pointer">The same paths as a list</summary><ul>'
            + "".join(f"<li>{h(line)}</li>" for line in exfil_paths_text(paths)) + "</ul></details>")


# --- several sandboxes at once ------------------------------------------------------------


def _outcome_of(result: Optional[RunResult], probe_id: str) -> Optional[ProbeOutcome]:
    try:
        return result.outcome(probe_id) if result else None
    except KeyError:
        return None


def _cell(name: str, result: Optional[RunResult], probe_id: str) -> str:
    """One sandbox's outcome for one probe, coloured like the board and marked as it (colour never says it alone);
    empty when it did not run."""
    p = _outcome_of(result, probe_id)
    if p is None:
        return "<td></td>"
    how = tone(p)
    return (
        f'<td data-sandbox="{h(name)}" data-probe="{h(p.id)}" data-outcome="{h(p.outcome)}" '
        f'style="padding:3px 6px;background:{BG[how]};color:{INK[how]};font-weight:bold">{_mark(p)}{h(p.outcome)}</td>'
    )


def _why_row(names: Sequence[str], ok: Mapping[str, RunResult], probe_id: str) -> str:
    """Each sandbox's explanation of one probe's outcome, in a <details> a keyboard and a screen reader reach."""
    items = []
    for n in names:
        p = _outcome_of(ok.get(n), probe_id)
        if p is not None:
            items.append(f"<li><strong>{h(n)}</strong>: {h(p.outcome)}. {h(p.explanation)}</li>")
    if not items:
        return ""
    return (f'<details class="sl-why" data-probe="{h(probe_id)}"><summary style="cursor:pointer"><small>why</small></summary>'
            f'<ul style="margin:2px 0;padding-left:16px;font-size:smaller">{"".join(items)}</ul></details>')


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
    head = "".join(f'<th scope="col" style="text-align:left;padding:3px 6px">{h(n)}</th>' for n in names)
    parts = [f'<div class="sl-compare" style="{WRAP}">', '<table class="sl-compare-table" style="border-collapse:collapse">',
             f'<thead><tr><th scope="col" style="text-align:left">probe</th>{head}</tr></thead><tbody>']
    for n, failed in results.items():
        if isinstance(failed, str):
            parts.append(f'<tr><td colspan="{len(names) + 1}" style="color:{AMBER}"><strong>{h(n)}</strong> could not run: {h(failed)}</td></tr>')
    for pid in ids:
        cells = []
        for n in names:
            cells.append(_cell(n, ok.get(n), pid))
        kind = ok[next(iter(ok))].outcome(pid).kind if ok else "attack"
        parts.append(f'<tr><td style="padding:3px 6px"><code>{h(pid)}</code> <small>({h(kind)})</small>'
                     f'{_why_row(names, ok, pid)}</td>{"".join(cells)}</tr>')
    parts.append("</tbody></table>")
    parts.append("<p><small>✗ an attack that succeeded; ✓ an attack blocked or a job that works; ! a job that failed or a probe "
                 "that could not be judged. Open <em>why</em> "
                 "under a probe for each sandbox's explanation, or a sandbox below for its full board.</small></p>")
    for n, r in ok.items():
        parts.append(f'<details class="sl-compare-board" data-sandbox="{h(n)}"><summary><strong>{h(n)}</strong>: {h(summary(r))}</summary>')
        parts.append(board_html(r))
        parts.append("</details>")
    parts.append('<div class="sl-compare-pictures" style="display:flex;flex-wrap:wrap;gap:12px">')
    for n, r in ok.items():
        parts.append(f'<div style="flex:1 1 300px;min-width:0"><h4 style="margin:6px 0 2px">{h(n)}: exfiltration paths</h4>{exfil_svg(paths_for(r), why_none=_why_none(r))}'
                     f'{exfil_list_html(paths_for(r))}</div>')
    parts.append("</div></div>")
    return "\n".join(parts) + "\n"


# --- the policy editor, policy problems, host decisions -----------------------------------


def editor_html(policy_text: str, status_html: str, note_html: str, board: str) -> str:
    """The policy editor's state as static HTML (for exports): the policy, its problems, the backend note and the board.

    ``status_html``, ``note_html`` and ``board`` are HTML this module made; ``policy_text`` is the learner's text.
    """
    text = policy_text.replace("\r\n", "\n")
    return (f'<div class="sl-policy-editor"><pre class="sl-policy-text" style="{_PRE}">{h(text)}</pre>'
            f"{status_html}<p>{note_html}</p>{board}</div>")


def problems_html(errors: Sequence[Problem], warnings: Sequence[Problem] = ()) -> str:
    """Validation errors and lint warnings, each with its JSON pointer, as the CLI lists them."""
    if not errors and not warnings:
        return f'<div class="sl-problems sl-valid" style="color:{GREEN}">✓ valid policy, no warnings</div>'
    parts = ['<div class="sl-problems">']
    if errors:
        n = len(errors)
        parts.append(f'<div style="color:{RED}"><strong>not a valid policy ({n} problem{"s" if n != 1 else ""})</strong></div><ul class="sl-errors">')
        parts += [f'<li data-pointer="{h(e.pointer)}"><code>{h(e.pointer)}</code>: {h(e.message)}</li>' for e in errors]
        parts.append("</ul>")
    else:
        parts.append(f'<div style="color:{GREEN}">✓ valid policy</div>')
    if warnings:
        parts.append(f'<div style="color:{AMBER}"><strong>warnings</strong></div><ul class="sl-warnings">')
        parts += [f'<li data-pointer="{h(w.pointer)}"><code>{h(w.pointer)}</code>: {h(w.message)}</li>' for w in warnings]
        parts.append("</ul>")
    parts.append("</div>")
    return "\n".join(parts)


def carry_over_html(carry: CarryOver, source: str = "my_policy.json") -> str:
    """The policy in the real tools: the srt and Claude Code files, and the differences that matter for it."""
    diffs = ("".join(f"<li>{h(d)}</li>" for d in carry.differences) if carry.differences
             else "<li>Nothing more to know of srt's rules for this policy: it means the same there as here.</li>")
    return (
        '<details class="sl-carry-over"><summary><strong>In the real tools</strong>: what '
        f"<code>sandbox-lab export {h(source)} --to srt</code> and <code>--to claude-code</code> write, and what to know of them</summary>"
        f"<p>sandbox-runtime's settings file (<code>~/.srt-settings.json</code>):</p><pre style=\"{_PRE}\">{h(carry.srt)}</pre>"
        f"<p>Claude Code's <code>settings.json</code>, its sandbox block:</p><pre style=\"{_PRE}\">{h(carry.claude_code)}</pre>"
        f"<p>What to know of the real tools' rules for this policy:</p><ul class=\"sl-differences\">{diffs}</ul></details>"
    )


def reach_html(policy: Policy, hosts: Sequence[str], world: Optional[World] = None) -> str:
    """How the proxy decides, host by host: the host name is all it sees.

    A lesson passes a policy alone: its plan brings the world (``world``, or the simulated one).
    """
    acc = build_plan(policy, world).access
    w = acc.world
    rows = []
    for host in hosts:
        d = acc.reach(host)
        uploads = w.uploads_to(host)  # an upload host, or a name the attacker owns or may own (fail closed)
        colour = (RED if w.reads_url(host) else GREEN) if d.allowed else GREY
        way_out = " (the attacker's own server, or may be: a way out)" if uploads and host not in w.host_names else " (accepts uploads: a way out)"
        if not uploads and w.reads_url(host):
            uploads, way_out = True, " (download only, but the attacker reads its request URLs: a way out)"
        verdict = ("✗ " if uploads else "") + "reachable" + (way_out if uploads else " (download only)") if d.allowed else "refused"
        rows.append(
            f'<tr data-host="{h(host)}" data-allowed="{str(d.allowed).lower()}"><td style="padding:2px 6px"><code>{h(host)}</code></td>'
            f'<td style="padding:2px 6px;color:{colour};font-weight:bold">{h(verdict)}</td><td style="padding:2px 6px"><small>{h(d.why)}</small></td></tr>'
        )
    return (
        f'<table class="sl-reach" style="border-collapse:collapse;{WRAP}"><thead><tr><th scope="col" style="text-align:left">host the agent asks for</th>'
        '<th scope="col" style="text-align:left">proxy decision</th><th scope="col" style="text-align:left">why</th></tr></thead><tbody>'
        + "".join(rows) + "</tbody></table>"
    )


def catalogue_html() -> str:
    """The probe catalogue: every attack a compromised agent tries and every job that must keep working."""
    rows = "".join(
        f'<tr data-probe="{h(p.id)}"><td style="padding:2px 6px"><code>{h(p.id)}</code></td><td style="padding:2px 6px">{h(p.kind)}</td>'
        f'<td style="padding:2px 6px">{h(p.story)}</td></tr>'
        for p in sorted(PROBES, key=lambda p: p.kind != "attack")
    )
    return (f'<table class="sl-catalogue" style="border-collapse:collapse;{WRAP}"><thead><tr><th scope="col" style="text-align:left">probe</th>'
            '<th scope="col" style="text-align:left">kind</th><th scope="col" style="text-align:left">what it tries</th></tr></thead><tbody>' + rows + "</tbody></table>")
