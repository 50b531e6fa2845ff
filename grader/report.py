"""Rendering findings for people and programs: text (optionally coloured), Markdown, escaped HTML and JSON.

Pure functions from values to strings: no printing, no terminal detection, no
I/O. The CLI decides where the string goes and whether colour is wanted; the
widgets put the HTML in a notebook.

Everything that came from a policy or a container (paths, host names,
explanations that quote them, evidence) is untrusted text. HTML output escapes
all of it; text and Markdown output replace control characters, so evidence
cannot smuggle terminal escape sequences or break the table.

Imports: outcomes, probes, errors, policy (types only). Nothing downstream.
"""

from __future__ import annotations

import html
import json
import re
import textwrap
from typing import Any, Iterable, Literal, Optional, Sequence

from .errors import PolicyError, Problem
from .outcomes import ProbeOutcome, RunResult
from .policy import Policy

__all__ = [
    "Format",
    "render",
    "render_check",
    "render_html",
    "render_json",
    "render_markdown",
    "render_policy",
    "render_policy_error",
    "render_text",
    "render_warnings",
    "result_json",
    "summary",
]

Format = Literal["text", "markdown", "html", "json"]

_RED = "\x1b[31m"
_GREEN = "\x1b[32m"
_YELLOW = "\x1b[33m"
_BOLD = "\x1b[1m"
_DIM = "\x1b[2m"
_RESET = "\x1b[0m"

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_HTML_COLOURS = {"bad": "#b42318", "good": "#067647", "error": "#b54708"}


def _clean(text: str) -> str:
    """Untrusted text made safe for a terminal: control characters (ESC, CR, ...) shown as escapes."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _one_line(text: str) -> str:
    return _clean(text.replace("\r\n", "\n").replace("\n", " / "))


def _attacks(result: RunResult) -> list[ProbeOutcome]:
    return [p for p in result.probes if p.kind == "attack"]


def _jobs(result: RunResult) -> list[ProbeOutcome]:
    return [p for p in result.probes if p.kind == "job"]


def _tone(p: ProbeOutcome) -> Optional[Literal["bad", "good", "error"]]:
    """Red where an attack succeeded, green where a job works, amber where nothing could be judged."""
    if p.outcome == "error":
        return "error"
    if p.outcome == "succeeded":
        return "bad" if p.kind == "attack" else "good"
    return None


def summary(result: RunResult) -> str:
    """One line, e.g. "3 of 16 attacks succeeded; 5 of 5 jobs work"."""
    attacks, jobs = _attacks(result), _jobs(result)
    won = sum(p.outcome == "succeeded" for p in attacks)
    work = sum(p.outcome == "succeeded" for p in jobs)
    line = f"{won} of {len(attacks)} attacks succeeded; {work} of {len(jobs)} jobs work"
    errors = sum(p.outcome == "error" for p in result.probes)
    if errors:
        line += f"; {errors} probe{'s' if errors != 1 else ''} could not be judged"
    return line


def _heading(result: RunResult) -> str:
    what = "the plain container (no policy)" if result.sandbox == "baseline" else "your policy"
    how = "predicted by the static analyzer" if result.backend == "static" else f"run with the {result.backend} backend"
    extra = f", run {result.run_id} in {result.seconds:.1f} s" if result.run_id else ""
    return f"Probes against {what}, {how}{extra}"


# --- text ---------------------------------------------------------------------------------


def _paint(text: str, tone: Optional[str], color: bool) -> str:
    if not color or tone is None:
        return text
    code = {"bad": _RED, "good": _GREEN, "error": _YELLOW}[tone]
    return f"{code}{text}{_RESET}"


def _text_section(title: str, probes: Sequence[ProbeOutcome], *, color: bool, width: int) -> list[str]:
    if not probes:
        return []
    id_w = max(len("id"), *(len(p.id) for p in probes))
    out_w = max(len("outcome"), *(len(p.outcome) for p in probes))
    expl_w = max(30, width - id_w - out_w - 4)
    head = f"{'id':<{id_w}}  {'outcome':<{out_w}}  explanation"
    lines = [f"{_BOLD}{title}{_RESET}" if color else title, head, "-" * min(width, id_w + out_w + 4 + expl_w)]
    pad = " " * (id_w + out_w + 4)
    for p in probes:
        wrapped = textwrap.wrap(_one_line(p.explanation), expl_w) or [""]
        outcome = _paint(f"{p.outcome:<{out_w}}", _tone(p), color)
        lines.append(f"{p.id:<{id_w}}  {outcome}  {wrapped[0]}")
        lines.extend(pad + w for w in wrapped[1:])
        for ev in p.evidence:
            for i, w in enumerate(textwrap.wrap(_one_line(ev), max(20, expl_w - 10)) or [""]):
                label = "evidence: " if i == 0 else "          "
                lines.append(pad + (f"{_DIM}{label}{w}{_RESET}" if color else f"{label}{w}"))
    return lines


def render_text(
    result: RunResult, *, warnings: Sequence[Problem] = (), color: bool = False, width: int = 100
) -> str:
    """A readable table: attack probes first, then job probes, each with its outcome and why.

    Args:
        color: ANSI colours (red where an attack succeeded, green where a job
            works); the caller decides, e.g. only when writing to a terminal.
        width: the line width the explanation column wraps to.
    """
    lines = [_heading(result)]
    lines.extend(f"note: {_one_line(n)}" for n in result.notes)
    lines.append("")
    lines.extend(_text_section("Attacks (blocked is good)", _attacks(result), color=color, width=width))
    lines.append("")
    lines.extend(_text_section("Jobs (succeeded is good)", _jobs(result), color=color, width=width))
    if warnings:
        lines.append("")
        lines.append(render_warnings(warnings))
    lines.append("")
    lines.append(summary(result))
    return "\n".join(lines) + "\n"


def render_warnings(warnings: Sequence[Problem]) -> str:
    """Lint warnings as text, one per line with its JSON pointer; empty string when there are none."""
    if not warnings:
        return ""
    n = len(warnings)
    head = f"{n} warning{'s' if n != 1 else ''}:"
    return "\n".join([head, *(f"  {_one_line(w.pointer)}: {_one_line(w.message)}" for w in warnings)])


def render_policy(policy: Policy) -> str:
    """The normalized policy as indented JSON: every list present, entries as Sandbox Lab reads them."""
    return json.dumps(policy.normalize(), indent=2, ensure_ascii=False)


def render_check(
    policy: Policy, source: str, warnings: Sequence[Problem], findings: RunResult, *, color: bool = False, width: int = 100
) -> str:
    """What ``sandbox-lab check`` prints for a valid policy: its normal form, warnings, and the static findings."""
    parts = [
        f"{_one_line(source)} is a valid policy. As Sandbox Lab reads it:",
        render_policy(policy),
        "",
        render_warnings(warnings) if warnings else "No warnings.",
        "",
        render_text(findings, color=color, width=width).rstrip("\n"),
    ]
    return "\n".join(parts) + "\n"


def render_policy_error(err: PolicyError) -> str:
    """An invalid policy, as text: the file, then each problem with its JSON pointer and a fix."""
    return _clean(str(err)) + "\n"


# --- Markdown -----------------------------------------------------------------------------

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def _md(text: str) -> str:
    """Untrusted text as one Markdown table cell: HTML escaped, Markdown punctuation backslashed."""
    return _MD_SPECIAL.sub(r"\\\1", html.escape(_one_line(text), quote=False))


def _md_section(title: str, probes: Sequence[ProbeOutcome]) -> list[str]:
    if not probes:
        return []
    lines = [f"### {title}", "", "| id | outcome | explanation |", "|---|---|---|"]
    for p in probes:
        tone = _tone(p)
        mark = {"bad": " ⚠", "good": " ✓", "error": " ?"}.get(tone or "", "")
        cell = _md(p.explanation)
        if p.evidence:
            cell += "<br>" + "<br>".join(f"evidence: {_md(e)}" for e in p.evidence)
        outcome = f"**{p.outcome}**{mark}" if tone else p.outcome
        lines.append(f"| `{p.id}` | {outcome} | {cell} |")
    return lines + [""]


def render_markdown(result: RunResult, *, warnings: Sequence[Problem] = ()) -> str:
    """The findings as Markdown: a heading, the summary, then one table for attacks and one for jobs."""
    lines = [f"## {_md(_heading(result))}", "", f"**{_md(summary(result))}**", ""]
    lines.extend(f"> note: {_md(n)}" for n in result.notes)
    if result.notes:
        lines.append("")
    lines.extend(_md_section("Attacks (blocked is good)", _attacks(result)))
    lines.extend(_md_section("Jobs (succeeded is good)", _jobs(result)))
    if warnings:
        lines.append("### Warnings")
        lines.append("")
        lines.extend(f"- `{_md(w.pointer)}`: {_md(w.message)}" for w in warnings)
        lines.append("")
    return "\n".join(lines)


# --- HTML ---------------------------------------------------------------------------------


def _h(text: str) -> str:
    return html.escape(_clean(text), quote=True)


def _html_rows(probes: Iterable[ProbeOutcome]) -> list[str]:
    rows = []
    for p in probes:
        tone = _tone(p)
        style = f' style="color:{_HTML_COLOURS[tone]};font-weight:bold"' if tone else ""
        evidence = "".join(f'<div class="sl-evidence"><small>evidence: {_h(e)}</small></div>' for e in p.evidence)
        rows.append(
            f'<tr class="sl-{p.kind} sl-{p.outcome}"><td><code>{_h(p.id)}</code></td>'
            f"<td{style}>{_h(p.outcome)}</td><td>{_h(p.explanation)}{evidence}</td></tr>"
        )
    return rows


def _html_table(title: str, probes: Sequence[ProbeOutcome]) -> list[str]:
    if not probes:
        return []
    return [
        f"<h4>{_h(title)}</h4>",
        '<table class="sl-probes"><thead><tr><th>id</th><th>outcome</th><th>explanation</th></tr></thead><tbody>',
        *_html_rows(probes),
        "</tbody></table>",
    ]


def render_html(result: RunResult, *, warnings: Sequence[Problem] = ()) -> str:
    """The findings as an HTML fragment for a notebook; every string from a policy or container is escaped."""
    parts = ['<div class="sandbox-lab-report">', f"<h3>{_h(_heading(result))}</h3>", f"<p><strong>{_h(summary(result))}</strong></p>"]
    parts.extend(f'<p class="sl-note"><em>note: {_h(n)}</em></p>' for n in result.notes)
    parts.extend(_html_table("Attacks (blocked is good)", _attacks(result)))
    parts.extend(_html_table("Jobs (succeeded is good)", _jobs(result)))
    if warnings:
        parts.append("<h4>Warnings</h4><ul>")
        parts.extend(f"<li><code>{_h(w.pointer)}</code>: {_h(w.message)}</li>" for w in warnings)
        parts.append("</ul>")
    parts.append("</div>")
    return "\n".join(parts) + "\n"


# --- JSON ---------------------------------------------------------------------------------


def result_json(result: RunResult) -> dict[str, Any]:
    """The stable JSON shape of a run: ``{"backend", "policy", "probes": [{"id", "kind", "outcome", "explanation"}]}``.

    Built from ``RunResult.to_json()``. Real runs add ``evidence`` per probe
    and ``run_id``/``seconds``; ``notes`` appears when the result carries one
    (e.g. "predicted, not run"); ``sandbox`` appears only for the plain
    container (``"baseline"``), where ``policy`` is null.
    """
    out = result.to_json()
    if out.get("sandbox") == "policy":
        del out["sandbox"]
    return out


def render_json(result: RunResult) -> str:
    """``result_json`` as indented JSON text."""
    return json.dumps(result_json(result), indent=2, ensure_ascii=False) + "\n"


def render(
    result: RunResult, fmt: Format = "text", *, warnings: Sequence[Problem] = (), color: bool = False, width: int = 100
) -> str:
    """Render in one of the four formats (``color`` and ``width`` apply to text only)."""
    if fmt == "text":
        return render_text(result, warnings=warnings, color=color, width=width)
    if fmt == "markdown":
        return render_markdown(result, warnings=warnings)
    if fmt == "html":
        return render_html(result, warnings=warnings)
    if fmt == "json":
        return render_json(result)
    raise ValueError(f"unknown format {fmt!r}; choose text, markdown, html or json")
