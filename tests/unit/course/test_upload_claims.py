"""A question's explanation names only channels its own scenario's policy leaves open.

The seed says a compromised agent could "POST them to a public GitHub Gist";
under an exact ``github.com`` rule the course's own apex rule refuses the gist
hosts (gist.github.com, api.github.com), and the leak there is a ``git push``
to github.com. An explanation that names a gist under such a policy teaches
the apex rule wrong right after lesson 04 taught it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from grader.core.plan import build_plan
from grader.core.policy import load_policy

ROOT = Path(__file__).resolve().parents[3]
QUESTIONS = json.loads((ROOT / "grader" / "questions.json").read_text(encoding="utf-8"))["questions"]
GIST_HOSTS = ("gist.github.com", "api.github.com")  # where a gist is created: the web form and the API

# Questions whose explanation is known to be wrong and reported, not yet fixed: none.
REPORTED: set[str] = set()


def names_a_refused_gist(q: dict[str, Any]) -> bool:
    """Does the explanation of a scenario question send data to a gist its scenario's policy cannot reach?"""
    policy = (q.get("scenario") or {}).get("policy")
    if policy is None:
        return False
    said = f"{q.get('reasoning', '')} {q.get('model_answer', '')}".lower()
    # a sentence may name the gist to say it is refused; one that names it otherwise claims it works
    claims = [s for s in re.split(r"(?<=[.;:])\s+", said) if "gist" in s and "refuse" not in s]
    access = build_plan(load_policy(policy)).access
    return bool(claims) and not any(access.reach(h).allowed for h in GIST_HOSTS)


def test_the_check_catches_the_seeds_sentence_under_an_exact_rule() -> None:
    q = {"scenario": {"policy": {"network": {"allowedDomains": ["github.com"]}}},
         "reasoning": "a compromised agent could read the secrets and POST them to a public GitHub Gist."}
    assert names_a_refused_gist(q)
    q["scenario"]["policy"] = {"network": {"allowedDomains": ["*.github.com"]}}  # the wildcard does reach the gist host
    assert not names_a_refused_gist(q)
    q["scenario"]["policy"] = {"network": {"allowedDomains": ["github.com"]}}
    q["reasoning"] = "It pushes them to github.com. A public gist needs gist.github.com, which this rule refuses."
    assert not names_a_refused_gist(q)  # saying the gist is refused is no claim that it works
    q["reasoning"] += " Or it posts them to a public gist."
    assert names_a_refused_gist(q)


@pytest.mark.parametrize("q", [q for q in QUESTIONS if q["id"] not in REPORTED], ids=lambda q: q["id"])
def test_no_explanation_names_a_gist_its_policy_refuses(q: dict[str, Any]) -> None:
    assert not names_a_refused_gist(q), q["id"]
