"""What every renderer says the same way: one phrase per backend, one tone per outcome, untrusted text made printable.

A learner meets a result in several places: the CLI's text report, the probe
board in a lesson, a lesson's "which backend" paragraph, a grade's feedback
(in a notebook and in the gradebook). Each of them asks ``backend_phrase`` how
the result was obtained, so the same backend is always described in the same
words, and ``tone`` how an outcome should look, so red always means an attack
got through. Colours themselves belong to the medium (ANSI codes in
``report``, the HTML palette in ``board``).
"""

from __future__ import annotations

import re
from typing import Literal, Sequence

from grader.core.records import ProbeOutcome, RunNoteCode

__all__ = ["RAN_AT", "Tone", "backend_phrase", "printable", "ran_at_note", "tone"]

Tone = Literal["bad", "good", "warn", "plain"]

# One phrase per backend: what the learner may conclude from its outcomes.
# "predicted" and "ran" are the words the lessons teach; a real run never says
# "predicted", so a Docker run that silently fell back to the analyzer shows.
_PHRASES = {
    "docker": "ran in Docker: real containers, evidence collected outside the sandbox",
    "srt": "ran under sandbox-runtime (srt) on this machine, evidence collected outside the sandbox",
    "static": "predicted: the static analyzer worked these outcomes out from the policy; nothing was run",
    "remote": "runs in a real sandbox on the run service: Docker containers on another machine, evidence collected outside the sandbox",
}
# Said instead when the static backend stands in for an engine that did not
# answer (``backends.default`` notes it): the learner should know why.
_STATIC_FALLBACK = (
    "predicted: no Docker engine answers, so the static analyzer worked these outcomes out from the policy; "
    "nothing was run"
)

# Said instead when the run service could not run the plan (``backends.remote`` notes why): the learner should
# know the outcomes are predicted, and why, never read them as observed.
_REMOTE_FALLBACK = (
    "predicted: the run service could not run this, so the static analyzer worked these outcomes out from the policy; "
    "nothing was run"
)
# A real run the run service made: its backend stays the real one ("docker"), and this note says where it ran.
RAN_AT = "ran in a real sandbox at "

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def backend_phrase(backend: str, codes: Sequence[RunNoteCode] = (), *, ran_at: str = "", run_id: str = "",
                   seconds: float = 0.0) -> str:
    """How outcomes of ``backend`` were obtained, in the learner's words, e.g. "ran in Docker: ...".

    Args:
        codes: the cause codes of the run's notes (``RunResult.codes``), never their words: a static run
            that stood in for a missing Docker engine or an unavailable run service says why.
        ran_at: where the run service that made the run is (``RunResult.ran_at``), "" for a run made here;
            read from this field, never from the notes' words.
        run_id: a real run's id, appended with ``seconds`` as "(run ID in N s)".
    """
    where = ran_at
    if backend == "static" and "no-engine" in codes:
        phrase = _STATIC_FALLBACK
    elif backend == "static" and "run-service" in codes:
        phrase = _REMOTE_FALLBACK
    elif where and backend != "static":
        # "ran in a real sandbox at <service> (docker): real containers, evidence collected outside the sandbox"
        phrase = f"{RAN_AT}{where} ({backend}): {_PHRASES.get(backend, 'evidence collected outside the sandbox').split(': ', 1)[-1]}"
    else:
        phrase = _PHRASES.get(backend, f"ran with the {backend} backend")
    return phrase + (f" (run {run_id} in {seconds:.1f} s)" if run_id else "")


def ran_at_note(service: str) -> str:
    """The note a result the run service made carries: where it ran (``backend_phrase`` says it so)."""
    return f"{RAN_AT}{service}"


def tone(p: ProbeOutcome) -> Tone:
    """Red where an attack succeeded, green where a job works, amber where a job is broken or nothing was judged."""
    if p.outcome == "error":
        return "warn"
    if p.kind == "attack":
        return "bad" if p.outcome == "succeeded" else "plain"
    return "good" if p.outcome == "succeeded" else "warn"


def printable(text: str) -> str:
    """Untrusted text with its control characters (ESC, BEL, CR, ...) shown as escapes, never obeyed."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
