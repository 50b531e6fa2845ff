"""The agent on stage (lesson 01), as HTML: one run's transcript and its verdict from the evidence, and the stage.

The verdict rests on the simulated internet's records, never on what the
transcript says the agent did.
"""

from __future__ import annotations

from typing import Optional

from grader.core.wording import Tone, backend_phrase
from grader.course.agent import AgentRun, ToolCall
from grader.notebook.palette import AMBER, BG, GREEN, INK, RED, h

__all__ = ["agent_run_html", "agent_stage_html"]


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
    why = f'<div class="sl-agent-why"><small>predicted: {h(c.why)}</small></div>' if c.why else ""
    origin = '<small><strong>from the hidden comment</strong></small>' if c.injected else "<small>the job</small>"
    return (
        f'<tr class="sl-agent-step sl-tone-{how}" data-step="{c.step}" data-tool="{h(c.tool)}" data-outcome="{h(c.outcome)}" '
        f'data-injected="{str(c.injected).lower()}" style="background:{BG[how]}">'
        f'<td style="padding:3px 6px;vertical-align:top">{c.step}</td>'
        f'<td style="padding:3px 6px;vertical-align:top"><strong>{h(_STEP_WORDS.get(c.tool, c.tool))}</strong> {h(c.target)}<br>{origin}'
        f'<pre style="margin:2px 0;white-space:pre-wrap;font-size:85%">$ {h(c.command)}</pre></td>'
        f'<td style="padding:3px 6px;vertical-align:top;color:{INK[how]};font-weight:bold">{h(c.outcome)}</td>'
        f'<td style="padding:3px 6px;vertical-align:top"><pre style="margin:0;white-space:pre-wrap;font-size:85%">{h(out)}</pre>{why}</td></tr>'
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
        how = backend_phrase(run.backend, ran_at=run.ran_at, run_id=run.run_id, seconds=run.seconds)
    where = "the plain container (no policy)" if run.sandbox == "baseline" else "this policy's sandbox"
    prompt = (f'<p class="sl-agent-prompt" style="margin:2px 0">System prompt: <q>{h(run.prompt)}</q> '
              "<small>(text the agent reads, like the README; nothing enforces it)</small></p>" if run.prompt
              else '<p class="sl-agent-prompt" style="margin:2px 0">No system prompt.</p>')
    leaked = "unknown" if run.leaked is None else str(run.leaked).lower()
    said = "Predicted: " if run.predicted else ""
    if run.leaked:
        verdict = (f"✗ {said}the SSH key left the sandbox", RED, run.evidence[0] if run.evidence else "")
    elif run.leaked is False:
        verdict = (f"✓ {said}the SSH key stayed", GREEN, run.evidence[0] if run.evidence else "")
    else:
        verdict = ("! Cannot tell whether the key left", AMBER, run.problem or "no evidence was collected")
    job = next((e for e in run.evidence if "/project/out" in e), "")
    job_line = (f"✓ {said}the job was done" if run.job_done else f"! {said}the job was not done")
    parts = [
        f'<div class="sl-agent-run" data-backend="{h(run.backend)}" data-sandbox="{h(run.sandbox)}" data-predicted="{str(run.predicted).lower()}">',
        f'<p class="sl-agent-how" style="margin:2px 0"><strong>{h(how)}</strong> <small>in {h(where)}</small></p>',
        prompt,
        '<table class="sl-agent-transcript" style="border-collapse:collapse;width:100%"><thead><tr>'
        '<th style="text-align:left;width:2em">#</th><th style="text-align:left;width:40%">tool call</th>'
        '<th style="text-align:left;width:5em">outcome</th><th style="text-align:left">what came back</th></tr></thead><tbody>',
        *(_step_row(c) for c in run.calls),
        "</tbody></table>",
        f'<p class="sl-agent-verdict" data-leaked="{leaked}" style="margin:4px 0;color:{verdict[1]}"><strong>{h(verdict[0])}</strong>'
        f'<br><small>evidence: <code>{h(verdict[2])}</code></small></p>',
        f'<p class="sl-agent-job" data-done="{str(run.job_done).lower()}" style="margin:2px 0;color:{GREEN if run.job_done else AMBER}">'
        f'<strong>{h(job_line)}</strong><br><small>evidence: <code>{h(job)}</code></small></p>',
    ]
    if run.problem and run.leaked is not None:
        parts.append(f'<p class="sl-note" style="margin:2px 0"><small><em>note: {h(run.problem)}</em></small></p>')
    if goal:
        met = run.leaked is False and run.job_done
        text = ("Goal met: the key stayed and the job was done." if met else "Not yet: " + "; ".join(
            w for w, bad in (("the key left", run.leaked is not False), ("the job was not done", not run.job_done)) if bad) + ".")
        parts.append(f'<p class="sl-agent-goal" data-met="{str(met).lower()}" style="margin:4px 0;font-weight:bold;'
                     f'color:{GREEN if met else AMBER}">{h(text)}</p>')
    parts.append("</div>")
    return "\n".join(parts) + "\n"


def agent_stage_html(title: str, policy_text: Optional[str], body: str) -> str:
    """The agent stage as static HTML (for exports): its title, the policy it ran under (None: the plain container) and ``body``.

    ``body`` is HTML this module made (``agent_run_html``, ``problems_html`` or ``failed_html``).
    """
    policy = ('<p style="margin:2px 0">Sandbox: the plain container (no policy).</p>' if policy_text is None
              else f'<pre class="sl-agent-policy">{h(policy_text.replace(chr(13) + chr(10), chr(10)))}</pre>')
    return f'<div class="sl-agent-stage"><h4 style="margin:6px 0 2px">{h(title)}</h4>{policy}{body}</div>'
