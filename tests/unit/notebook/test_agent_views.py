"""The agent's run as HTML: where it ran is read from the run's ``ran_at``, never from its notes' words."""

from __future__ import annotations

from grader.core.wording import RAN_AT, backend_phrase, ran_at_note
from grader.course.agent import AgentRun
from grader.notebook.agent_views import agent_run_html


def _run(notes: tuple[str, ...], ran_at: str) -> AgentRun:
    return AgentRun("policy", "docker", False, "", (), False, (), True, ("nothing left",), run_id="sl-1", seconds=2.0,
                    notes=notes, ran_at=ran_at)


def _how(page: str) -> str:
    return page.split('class="sl-agent-how"', 1)[1].split("<strong>", 1)[1].split("</strong>", 1)[0]


def test_a_run_a_service_made_says_where_it_ran_in_the_same_words_as_before() -> None:
    page = agent_run_html(_run((ran_at_note("https://svc.example"),), "https://svc.example"))
    assert _how(page) == backend_phrase("docker", ran_at="https://svc.example", run_id="sl-1", seconds=2.0)
    assert _how(page).startswith(f"{RAN_AT}https://svc.example (docker): real containers")


def test_the_notes_words_decide_nothing_the_field_does() -> None:
    reworded = agent_run_html(_run(("it ran on the course's service, we hear",), "https://svc.example"))
    assert _how(reworded).startswith(f"{RAN_AT}https://svc.example (docker)")
    only_said = agent_run_html(_run((ran_at_note("https://elsewhere.example"),), ""))
    assert _how(only_said).startswith("ran in Docker: real containers") and "elsewhere" not in _how(only_said)
