"""Lesson 06's gaps, demonstrated in real containers: each leaves evidence in the sinks under its perfect policy.

What the scripts print decides nothing: every assertion reads the recorders'
logs (``execution.sightings``) or the proxy's.
"""

from __future__ import annotations

from typing import Any

import pytest

from grader.course.gaps import GAPS, demonstrate

pytestmark = pytest.mark.docker

WHERE = {  # where each gap's value must arrive, and how
    "env-token": ("api.github.com", "HTTP POST"),
    "ssh-agent-socket": ("github.com", "HTTP POST"),
    "git-credentials": ("github.com", "HTTP POST"),
    "url-to-stats-host": ("cdn.jsdelivr.net", "HTTP GET"),
}


def test_every_gap_has_a_docker_check() -> None:
    assert set(WHERE) == {g.id for g in GAPS}


@pytest.mark.parametrize("gap_id", sorted(WHERE))
def test_the_gap_is_shown_by_the_sinks(gap_id: str, docker_backend: Any, no_leftovers: Any) -> None:
    r = demonstrate(gap_id, docker_backend)
    assert r.ran and not r.problem, r.text()
    assert r.shown, r.text()
    assert [(h.host, h.how) for h in r.hits] == [WHERE[gap_id]], r.text()
    # the proxy let the one allowed host through and saw a host and a port, never a path or a body
    assert [p for p in r.proxy if p.endswith("-> allow")] == [f"CONNECT {WHERE[gap_id][0]}:443 -> allow"], r.proxy


def test_the_ssh_key_itself_never_leaves_and_its_file_stays_unreadable(docker_backend: Any, no_leftovers: Any) -> None:
    r = demonstrate("ssh-agent-socket", docker_backend)
    assert r.shown and r.leaked_unseen == ()
    assert "the filesystem policy holds" in r.output and "read ~/.ssh/id_rsa" not in r.output


def test_the_url_leaks_only_in_the_url(docker_backend: Any, no_leftovers: Any) -> None:
    r = demonstrate("url-to-stats-host", docker_backend)
    assert r.shown and "in its URL" in r.hits[0].evidence, r.text()
