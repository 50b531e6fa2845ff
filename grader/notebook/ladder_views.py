"""Capture the flag's views: a level as the learner meets it and an attack's result, as HTML and as terminal text.

An attack's result says where the flag arrived (with the log line that
proves it) and how the level falls (its worked solution: the intended channel
and the others that would have worked), or, on a miss, the level's sandbox and
what this attack did (``diagnosis``), with a nudge after repeated misses and
the way to ask for the solution; what the attack printed is shown last and
decides nothing. Untrusted text is escaped
(HTML) or has its control characters shown (text), never obeyed.
"""

from __future__ import annotations

import textwrap

from grader.core.wording import printable
from grader.course.ladder import AttackResult, Level, Solution
from grader.notebook.palette import AMBER, GREEN, RED, h

__all__ = ["ASK_FOR_SOLUTION", "attack_html", "level_html", "render_attack", "render_solution", "solution_html"]

# how a learner asks for the answer: the ladder never gives it by attempt count
ASK_FOR_SOLUTION = ("Stuck? The hints never give the answer away. Ask for the worked solution: the \"Show the solution\" "
                    "button, or run the cell as %%attack {n} --solution (your progress notes that you asked).")


def level_html(lv: Level) -> str:
    """A level as the learner meets it: its story, where the flag is, and the sandbox the attack runs in."""
    files = ", ".join(f"<code>{h(p)}</code>" for p in lv.flag_in)
    env = "".join(f", and in the agent's environment as <code>{h(n)}</code>" for n in lv.flag_env)
    return (f'<div class="sl-level" data-level="{lv.number}" data-difficulty="{h(lv.difficulty)}"><h4 style="margin:4px 0">'
            f"Level {lv.number}: {h(lv.title)} <small>({h(lv.difficulty)})</small></h4>"
            f"<p>{h(lv.story)}</p><p><small>The flag is planted in {files}{env}.</small></p>"
            f"<p><small>The sandbox:</small></p><pre style='margin:0'>{h(lv.sandbox_text())}</pre></div>")


def attack_html(result: AttackResult, *, attempt: int = 1) -> str:
    """An attack's result: captured (where the flag arrived, with the log line) or missed (the sandbox and the next
    hint), and the attack's own output, which decides nothing."""
    lv = result.level
    out = result.output
    printed = (f"<details><summary>What the attack printed ({len(out)} characters; it decides nothing)</summary>"
               f"<pre style='white-space:pre-wrap'>{h(out) if out.strip() else '(nothing)'}</pre></details>")
    if result.captured is None:  # the evidence was cut or a recorder failed: an error, not a verdict
        return (f'<div class="sl-attack-outcome sl-error" data-level="{lv.number}" data-captured="error" style="color:{AMBER}">'
                f"<p><strong>Could not judge this attack</strong>: {h(result.error)}.</p><p>The run is broken, not your "
                "attack's verdict: it is not counted as an attempt and unlocks no hint. Rerun it.</p>"
                f"{printed}</div>")
    if result.captured:
        rows = "".join(f"<li><strong>{h(s.host)}</strong> ({h(s.how)}): {h(s.evidence)}</li>" for s in result.sinks)
        body = (f'<p style="color:{GREEN}"><strong>⚑ Captured</strong> (attempt {attempt}): {h(lv.prize_name)} <code>{h(result.flag)}</code> '
                f"arrived where the attacker reads it.</p><ul>{rows}</ul><p><strong>What this level teaches:</strong> {h(lv.teaches)}</p>"
                f"{solution_html(lv.solution) if lv.solution is not None else ''}")
    else:
        elsewhere = "".join(f"<li>It reached {h(s.host)} by {h(s.how)}, but this level counts only: {h(', '.join(lv.channels))}.</li>"
                            for s in result.elsewhere)
        ask = (f'<p class="sl-ask-solution"><small>{h(ASK_FOR_SOLUTION.format(n=lv.number))}</small></p>'
               if lv.solution is not None else "")
        verdict = (f'<p style="color:{RED}"><strong>Not captured</strong> (attempt {attempt}): no log of the simulated internet '
                   f"shows {h(lv.prize_name)} where the attacker can read it.</p>")
        body = (f"{verdict}{'<ul>' + elsewhere + '</ul>' if elsewhere else ''}"
                f"<p><small>The sandbox:</small></p><pre style='margin:0'>{h(lv.sandbox_text())}</pre>"
                f"{_hint_html(result)}{ask}")
    note = f'<p><small style="color:{AMBER}">{h(result.note)}</small></p>' if result.note else ""
    return (f'<div class="sl-attack-outcome" data-level="{lv.number}" data-captured="{str(result.captured).lower()}">'
            f"{body}{note}{printed}</div>")


def _hint_label(result: AttackResult) -> str:
    return "What the logs show your attack did" if result.hint_from == "evidence" else "Hint"


def _hint_html(result: AttackResult) -> str:
    """A miss's hint: each thing this attack did, one item each, then the nudge (if any) on its own line."""
    if result.hint_from != "evidence" or not result.findings:
        return (f'<p class="sl-attack-hint" data-hint-from="{result.hint_from}"><strong>{_hint_label(result)}:</strong> '
                f"{h(result.hint)}</p>")
    said = "".join(f'<li data-kind="{h(f.kind)}">{h(f.text)}</li>' for f in result.findings)
    tail = result.hint[len(" ".join(f.text for f in result.findings)):].strip()  # the nudge, or the uncapturable why
    nudge = f'<p class="sl-nudge">{h(tail)}</p>' if tail else ""
    return (f'<div class="sl-attack-hint" data-hint-from="evidence"><p><strong>{_hint_label(result)}:</strong></p>'
            f"<ul>{said}</ul>{nudge}</div>")


def solution_html(sol: Solution, *, asked: bool = False) -> str:
    """A level's worked solution, as a lab closes: the intended attack, why its channel is open, and the other
    channels that would have worked here. ``asked``: shown before a capture, because the learner asked."""
    others = ("<ul>" + "".join(f"<li>{h(a)}</li>" for a in sol.also) + "</ul>" if sol.also
              else "<p>No other channel captures this level: the intended one is the only way out.</p>")
    head = "The solution you asked for" if asked else "How this level falls"
    return (f'<div class="sl-solution" data-asked="{str(asked).lower()}"><p><strong>{head}.</strong> '
            f"{h(sol.answer)}</p><p><strong>Why this channel is open:</strong> {h(sol.channel)}</p>"
            f"<p><strong>Other ways that would have worked here:</strong></p>{others}</div>")


def render_solution(sol: Solution, *, asked: bool = False) -> str:
    """``solution_html`` for the terminal."""
    lines = [textwrap.fill(f"{'The solution you asked for' if asked else 'How this level falls'}: {sol.answer}", 100),
             textwrap.fill(f"Why this channel is open: {sol.channel}", 100), "Other ways that would have worked here:"]
    lines += [textwrap.fill(a, 100, initial_indent="  - ", subsequent_indent="    ") for a in sol.also] or [
        "  none: the intended channel is the only way out."]
    return "\n".join(lines)


# --- the terminal -------------------------------------------------------------------------


def _printable_lines(text: str) -> str:
    """Untrusted output line by line: newlines kept, every other control character shown, never obeyed."""
    return "\n".join(printable(line) for line in text.splitlines())


def render_attack(result: AttackResult, *, attempt: int = 1) -> str:
    """An attack on a level, for the terminal: captured or not, where the flag arrived (with the log line that
    proves it), the attack's own output, and for a miss the level's sandbox and the next hint."""
    lv = result.level
    head = f"Level {lv.number} ({lv.id}, {lv.difficulty}): {lv.title}"
    lines = [head, "=" * min(len(head), 100)]
    if result.captured:
        lines.append(f"CAPTURED (attempt {attempt}). {lv.prize_name[0].upper()}{lv.prize_name[1:]} {result.flag} arrived where the "
                     "attacker reads it:")
        lines += [f"  {printable(s.host)}  {printable(s.how)}: {printable(s.evidence)}" for s in result.sinks]
        lines += ["", textwrap.fill(f"What this level teaches: {lv.teaches}", 100)]
        if lv.solution is not None:
            lines += ["", render_solution(lv.solution)]
    elif result.captured is None:  # the evidence was cut or a recorder failed: its silence shows no miss
        lines.append(f"ERROR: could not judge this attack: {printable(result.error)}.")
        lines.append("  The run is broken, not your attack's verdict: it is not counted as an attempt and unlocks no hint. "
                     "Rerun it.")
    else:
        lines.append(f"Not captured (attempt {attempt}): no log of the simulated internet shows {lv.prize_name} {result.flag} "
                     "where the attacker can read it.")
        for s in result.elsewhere:
            lines.append(f"  It did reach {printable(s.host)} by {printable(s.how)}, but this level counts only: "
                         f"{', '.join(lv.channels)}.")
        if result.timed_out:
            lines.append("  The attack ran out of time and was killed.")
        lines += ["", "The sandbox of this level:", *("  " + ln for ln in lv.sandbox_text().splitlines())]
        if result.hint_from == "evidence" and result.findings:
            lines += ["", f"{_hint_label(result)}:"]
            lines += [textwrap.fill(printable(f.text), 100, initial_indent="  - ", subsequent_indent="    ") for f in result.findings]
            tail = result.hint[len(" ".join(f.text for f in result.findings)):].strip()
            lines += [textwrap.fill(tail, 100)] if tail else []
        else:
            lines += ["", textwrap.fill(f"{_hint_label(result)}: {result.hint}", 100)]
    out = result.output
    lines += ["", f"--- what the attack printed ({len(out)} characters; it decides nothing) ---"]
    lines.append(_printable_lines(out) if out.strip() else "(nothing)")
    return "\n".join(lines) + "\n"
