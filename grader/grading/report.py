"""Rendering findings for the terminal and for programs: text (optionally coloured) and JSON.

Pure functions from values to strings: no printing, no terminal detection, no
I/O. The CLI decides where the string goes and whether colour is wanted. The
one HTML rendering of a run is the probe board (``lessons/board.py``), which a
notebook shows; both say how a run was obtained with ``wording.backend_phrase``
and colour outcomes by ``wording.tone``.

Everything that came from a policy or a container (paths, host names,
explanations that quote them, evidence) is untrusted text. Text output
replaces control characters, so evidence cannot smuggle terminal escape
sequences or break the table.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any, Sequence

from grader.core.access import TARGET_NAMES
from grader.core.errors import PolicyError, Problem
from grader.core.outcomes import ProbeOutcome, RunResult
from grader.core.policy import Policy, srt_missing
from grader.core.scope import summary as scope_summary
from grader.core.wording import Tone, backend_phrase, printable, tone

__all__ = [
    "render_check",
    "render_json",
    "render_policy",
    "render_policy_error",
    "render_text",
    "render_warnings",
    "result_json",
    "scope_line",
    "srt_missing_text",
    "summary",
    "target_line",
]

_ANSI: dict[Tone, str] = {"bad": "\x1b[31m", "good": "\x1b[32m", "warn": "\x1b[33m"}  # red, green, yellow
_BOLD = "\x1b[1m"
_DIM = "\x1b[2m"
_RESET = "\x1b[0m"


def _one_line(text: str) -> str:
    return printable(text.replace("\r\n", "\n").replace("\n", " / "))


def _attacks(result: RunResult) -> list[ProbeOutcome]:
    return [p for p in result.probes if p.kind == "attack"]


def _jobs(result: RunResult) -> list[ProbeOutcome]:
    return [p for p in result.probes if p.kind == "job"]


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


def _heading(result: RunResult) -> list[str]:
    """What was probed, how the outcomes were obtained, then the scope in one line (as the board opens)."""
    what = "the plain container (no policy)" if result.sandbox == "baseline" else "your policy"
    how = backend_phrase(result.backend, result.codes, ran_at=result.ran_at, run_id=result.run_id, seconds=result.seconds)
    rules = target_line(result)
    return [f"Probes against {what}", _one_line(how), *([rules] if rules else []), _one_line(scope_line(result))]


def target_line(result: RunResult) -> str:
    """Whose rules the policy ran under (the target, where it starts the sandbox); "" for the plain container."""
    if result.sandbox == "baseline" or result.findings is None or result.findings.access.policy is None:
        return ""
    access = result.findings.access
    return f"Rules: {TARGET_NAMES[access.target]}, the sandbox started in {access.start}."


def scope_line(result: RunResult) -> str:
    """The scope of a run in one sentence, or why there is none (shared by the board and the terminal)."""
    if result.scope is None:
        return "The scope was not measured in this run (see the notes)."
    return scope_summary(result.scope, result.findings.world if result.findings is not None else None)


# --- text ---------------------------------------------------------------------------------


def _paint(text: str, how: Tone, color: bool) -> str:
    code = _ANSI.get(how)
    return f"{code}{text}{_RESET}" if color and code else text


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
        outcome = _paint(f"{p.outcome:<{out_w}}", tone(p), color)
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
        color: ANSI colours by ``wording.tone`` (red where an attack
            succeeded, green where a job works, yellow where a job is broken
            or nothing was judged); the caller decides, e.g. only when
            writing to a terminal.
        width: the line width the explanation column wraps to.
    """
    lines = _heading(result)
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
    missing = srt_missing(policy)
    parts = [
        f"{_one_line(source)} is a valid policy. As Sandbox Lab reads it:",
        render_policy(policy),
        "",
        *([srt_missing_text(missing), ""] if missing else []),
        render_warnings(warnings) if warnings else "No warnings.",
        "",
        render_text(findings, color=color, width=width).rstrip("\n"),
    ]
    return "\n".join(parts) + "\n"


def srt_missing_text(missing: Sequence[str]) -> str:
    """Keys srt's schema requires that the file leaves out: srt refuses such a file, the lab reads them as []."""
    return (f"As a sandbox-runtime settings file it lacks {', '.join(missing)}: srt's schema requires "
            f"{'them' if len(missing) > 1 else 'it'} and srt refuses to start with such a file (Claude Code's sandbox "
            "block does not require them). Sandbox Lab reads a missing list as []. Write [] for each, or use "
            "`sandbox-lab export POLICY --to srt`, which writes every list.")


def render_policy_error(err: PolicyError) -> str:
    """An invalid policy, as text: the file, then each problem with its JSON pointer and a fix."""
    return printable(str(err)) + "\n"


# --- JSON ---------------------------------------------------------------------------------


def result_json(result: RunResult) -> dict[str, Any]:
    """The stable JSON shape of a run: ``{"backend", "policy", "probes": [{"id", "kind", "outcome", "explanation"}]}``.

    A view of the one JSON form, ``RunResult.to_json()``, for people: real
    runs add ``evidence`` per probe and ``run_id``/``seconds`` (rounded to
    the millisecond); ``scope`` appears when the run measured or predicted
    one; ``notes`` when the result carries one (e.g. "predicted, not run");
    ``sandbox`` only for the plain container (``"baseline"``), where
    ``policy`` is null. ``extra`` is left out.
    """
    full = result.to_json()
    real = full["backend"] != "static"
    out: dict[str, Any] = {"backend": full["backend"]}
    if full["sandbox"] != "policy":
        out["sandbox"] = full["sandbox"]
    out["policy"] = full["policy"]
    out["probes"] = [p if real else {k: v for k, v in p.items() if k != "evidence"} for p in full["probes"]]
    if full["scope"] is not None:
        out["scope"] = full["scope"]
    if full["notes"]:
        out["notes"] = full["notes"]
    if real:
        out["run_id"] = full["run_id"]
        out["seconds"] = round(full["seconds"], 3)
    return out


def render_json(result: RunResult) -> str:
    """``result_json`` as indented JSON text."""
    return json.dumps(result_json(result), indent=2, ensure_ascii=False) + "\n"
