"""How a policy could game each task's checks, and the grade each such policy must get under srt's rules (issue 38).

A full score is a proof: every policy here looks right to someone, and each one
either leaks in sandbox-runtime (srt) or would be graded as doing what srt does
not do. The grades are what srt makes of the same JSON (reads open by default,
``denyRead`` hides, ``allowRead`` only re-opens inside a ``denyRead``, an
``allowWrite`` inside a ``denyRead`` is bound back readable and writable).
Static backend, no Docker.
"""

from __future__ import annotations

from typing import Any

import pytest

from grader.backends.static import StaticBackend
from grader.core.errors import PolicyError
from grader.core.policy import load_policy
from grader.grading.grade import Grade, grade
from grader.grading.tasks import load_task

STATIC = StaticBackend()
NO_NET: dict[str, Any] = {"allowedDomains": []}
# the machine's four places, hidden; the reference of scope-secure-sandbox re-opens /project/src inside them
FOUR = ["~", "/etc/secrets", "/project", "/app/workspace"]


def _grade(task_id: str, policy: dict[str, Any]) -> Grade:
    return grade(load_task(task_id), load_policy(policy), STATIC)


def _failed(g: Grade) -> set[str]:
    return {c.id for c in g.checks if not c.passed}


# --- 1. the old dialect: allowRead alone, read as "only these are readable" -----------------------------------------

# Each task's reference solution before issue 38. In srt an allowRead no denyRead surrounds hides nothing.
OLD_DIALECT = [
    ("scope-secure-sandbox", {"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/out"]}, "network": NO_NET},
     {"secrets-unreadable", "nothing-else-readable", "least-read"}),
    ("fix-the-naive-setup", {"filesystem": {"allowRead": ["/app/workspace"], "allowWrite": ["/app/workspace/build"]},
                             "network": {"allowedDomains": ["registry.npmjs.org"]}},
     {"no-secret-leaves", "secrets-unreadable", "least-read"}),
    ("pip-install-only", {"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/out"]},
                          "network": {"allowedDomains": ["pypi.org", "files.pythonhosted.org"]}},
     {"least-read"}),
    ("stop-persistence", {"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/src", "/project/out"]}, "network": NO_NET},
     {"least-read"}),
    ("deny-inside-allow", {"filesystem": {"allowRead": ["/project"], "denyRead": ["/project/.env"],
                                          "allowWrite": ["/project/src", "/project/out"]}, "network": NO_NET},
     {"rest-unreadable", "least-read"}),
]


@pytest.mark.parametrize("task_id, policy, failing", OLD_DIALECT, ids=[t for t, _, _ in OLD_DIALECT])
def test_the_old_allow_read_only_solutions_no_longer_score_full_marks(task_id: str, policy: dict[str, Any], failing: set[str]) -> None:
    """The seed's practice answer scored 12/12 here and leaks ~/.ssh, ~/.aws/credentials and /etc/secrets in srt."""
    g = _grade(task_id, policy)
    assert not g.full_marks
    assert _failed(g) == failing, g.feedback()


def test_the_seeds_answer_leaks_every_secret_and_is_told_to_hide_with_deny_read() -> None:
    g = _grade("scope-secure-sandbox", OLD_DIALECT[0][1])
    secrets = g.check("secrets-unreadable")
    for probe in ("read-ssh-key", "read-cloud-credentials", "read-etc-secrets", "read-dotenv"):
        assert f"probe {probe} succeeded" in secrets.message, secrets.message
    assert "denyRead" in secrets.message
    assert g.check("job-works").passed, "the job itself works: only what it leaks costs points"


# --- 2. deny everything with "/", then carve out ---------------------------------------------------------------------

ROOT_DENY: dict[str, Any] = {"filesystem": {"denyRead": ["/"], "allowRead": ["/project/src"], "allowWrite": ["/project/out"]},
                             "network": NO_NET}


def test_deny_read_of_the_root_is_refused_not_graded_as_a_working_job() -> None:
    """srt accepts denyRead "/" and hides the whole root with it, the programs in /usr, /bin and /lib included: no
    command starts, so the job cannot work. The lab's machine has only its four data places and cannot show that, so
    the lab refuses the entry with the reason (fail closed) instead of grading it 12/12 as if the job ran."""
    with pytest.raises(PolicyError) as info:
        load_policy(ROOT_DENY)
    assert [p.pointer for p in info.value.problems] == ["/filesystem/denyRead/0"]
    g = grade(load_task("scope-secure-sandbox"), info.value, STATIC)
    assert g.score == 0 and not g.valid


# --- 3. re-allowing a secret inside a denyRead --------------------------------------------------------------------------


def test_an_allow_read_inside_the_deny_re_opens_the_secret() -> None:
    """allowRead wins over denyRead where it names a path inside it: listing ~/.ssh re-opens the key."""
    policy = {"filesystem": {"denyRead": FOUR, "allowRead": ["/project/src", "~/.ssh"], "allowWrite": ["/project/out"]}, "network": NO_NET}
    g = _grade("scope-secure-sandbox", policy)
    assert _failed(g) == {"secrets-unreadable", "nothing-else-readable", "least-read"}, g.feedback()
    assert "probe read-ssh-key succeeded" in g.check("secrets-unreadable").message


def test_an_allow_read_of_the_same_path_as_a_deny_wins() -> None:
    """On the same path allowRead wins: denying and re-allowing /etc/secrets hides nothing."""
    policy = {"filesystem": {"denyRead": FOUR, "allowRead": ["/project/src", "/etc/secrets"], "allowWrite": ["/project/out"]}, "network": NO_NET}
    g = _grade("scope-secure-sandbox", policy)
    assert "secrets-unreadable" in _failed(g) and "probe read-etc-secrets succeeded" in g.check("secrets-unreadable").message


def test_a_denied_file_is_lifted_only_by_an_allow_read_of_that_very_file() -> None:
    """deny-inside-allow: a directory allowRead over /project leaves the denied .env hidden; naming the file re-opens it."""
    base = {"denyRead": ["~", "/etc/secrets", "/app/workspace", "/project/.env"], "allowWrite": ["/project/src", "/project/out"]}
    directory = _grade("deny-inside-allow", {"filesystem": {**base, "allowRead": ["/project"]}, "network": NO_NET})
    assert directory.full_marks, directory.feedback()
    the_file = _grade("deny-inside-allow", {"filesystem": {**base, "allowRead": ["/project/.env"]}, "network": NO_NET})
    assert "dotenv-unreadable" in _failed(the_file) and "least-read" in _failed(the_file)


# --- 4. the same path in allowWrite and denyRead -------------------------------------------------------------------------


def test_an_allow_write_of_a_denied_secret_makes_it_readable_and_writable() -> None:
    """srt binds an allowWrite path back over a denyRead of it, readable and writable: the deny hides nothing."""
    policy = {"filesystem": {"denyRead": FOUR, "allowRead": ["/project/src"], "allowWrite": ["/project/out", "/etc/secrets"]}, "network": NO_NET}
    g = _grade("scope-secure-sandbox", policy)
    assert _failed(g) == {"secrets-unreadable", "nothing-else-readable", "least-read", "least-write"}, g.feedback()
    assert "probe read-etc-secrets succeeded" in g.check("secrets-unreadable").message


def test_a_deny_read_of_the_output_directory_does_not_hide_it() -> None:
    """Naming /project/out in denyRead and allowWrite: the write grant wins, and the job keeps its output."""
    policy = {"filesystem": {"denyRead": [*FOUR, "/project/out"], "allowRead": ["/project/src"], "allowWrite": ["/project/out"]}, "network": NO_NET}
    g = _grade("scope-secure-sandbox", policy)
    assert g.check("job-works").passed, g.check("job-works").message


def test_work_written_for_the_old_allow_list_reading_is_told_why_first_with_the_fix() -> None:
    """Not silently regraded: the feedback opens with what the allowRead leaves readable and the two-part fix."""
    old = {"filesystem": {"allowRead": ["/project/src"], "allowWrite": ["/project/out"]}, "network": NO_NET}
    g = _grade("scope-secure-sandbox", old)
    (note,) = g.old_reading()
    assert "/filesystem/allowRead/0" in note and "restricts nothing" in note and "/home/user/.ssh/id_rsa" in note
    assert '"/home/user", "/project", "/app/workspace", "/etc/secrets"' in note
    lines = g.feedback().splitlines()
    assert lines[1].startswith("  NOTE: /filesystem/allowRead/0"), lines[:3]
    assert g.to_json()["old_reading"] == [note]
    fixed = _grade("scope-secure-sandbox", {**old, "filesystem": {**old["filesystem"], "denyRead": FOUR}})
    assert fixed.old_reading() == () and fixed.full_marks and "old_reading" not in fixed.to_json()
