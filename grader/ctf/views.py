"""Capture the flag's views: a level as the learner meets it and an attack's result, as HTML and as terminal text.

An attack's result says where the flag arrived (with the log line that
proves it) or, on a miss, the level's sandbox and the next hint; what the
attack printed is shown last and decides nothing. Untrusted text is escaped
(HTML) or has its control characters shown (text), never obeyed.

Imports: ladder, palette, wording. Nothing downstream.
"""

from __future__ import annotations

import textwrap

from grader.core.wording import printable
from grader.ctf.ladder import AttackResult, Level
from grader.lessons.palette import AMBER, GREEN, RED, h

__all__ = ["attack_html", "level_html", "render_attack"]


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
                f"arrived where the attacker reads it.</p><ul>{rows}</ul><p><strong>What this level teaches:</strong> {h(lv.teaches)}</p>")
    else:
        elsewhere = "".join(f"<li>It reached {h(s.host)} by {h(s.how)}, but this level counts only: {h(', '.join(lv.channels))}.</li>"
                            for s in result.elsewhere)
        verdict = (f'<p style="color:{RED}"><strong>Not captured</strong> (attempt {attempt}): no log of the simulated internet '
                   f"shows {h(lv.prize_name)} where the attacker can read it.</p>")
        body = (f"{verdict}{'<ul>' + elsewhere + '</ul>' if elsewhere else ''}"
                f"<p><small>The sandbox:</small></p><pre style='margin:0'>{h(lv.sandbox_text())}</pre>"
                f'<p class="sl-attack-hint" data-hint-from="{result.hint_from}"><strong>{_hint_label(result)}:</strong> '
                f"{h(result.hint)}</p>")
    note = f'<p><small style="color:{AMBER}">{h(result.note)}</small></p>' if result.note else ""
    return (f'<div class="sl-attack-outcome" data-level="{lv.number}" data-captured="{str(result.captured).lower()}">'
            f"{body}{note}{printed}</div>")


def _hint_label(result: AttackResult) -> str:
    return "What the logs show your attack did" if result.hint_from == "evidence" else "Hint"


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
        lines += ["", textwrap.fill(f"{_hint_label(result)}: {result.hint}", 100)]
    out = result.output
    lines += ["", f"--- what the attack printed ({len(out)} characters; it decides nothing) ---"]
    lines.append(_printable_lines(out) if out.strip() else "(nothing)")
    return "\n".join(lines) + "\n"
