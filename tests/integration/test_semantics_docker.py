"""Under a real tool's semantics, the Docker backend enforces what the static analyzer predicts (the rewrite is a policy).

``grade --semantics srt`` runs ``semantics.enforced``'s rewrite of the policy.
Its shapes are new to the corpus (world roots listed in ``allowRead`` to stay
readable, write denies of srt's protected paths that do not exist yet, a
project made writable for Claude Code), so a few of them are run for real and
compared with the prediction, probe by probe and on the whole scope.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from grader import load_policy, predict
from grader.core.plan import build_plan
from grader.realtools.semantics import enforced

REPO = Path(__file__).parents[2]
CORPUS: dict[str, Any] = json.loads((REPO / "tests" / "fixtures" / "corpus.json").read_text())["policies"]

pytestmark = [pytest.mark.docker]

CASES = [
    # allow-only reads dropped; re-allow inside a denyRead, with the roots no denyRead covers listed to stay readable
    ("practice-solution", "srt", CORPUS["practice-solution"]),
    ("re-allow", "srt", {"filesystem": {"denyRead": ["/home/user"], "allowRead": ["/home/user/work"], "allowWrite": ["/project/out"]}}),
    # srt's protected list in the home, some of it missing (.git/hooks): write denies of paths that do not exist
    ("seed-naive", "srt", CORPUS["seed-naive"]),
    # the project writable by default, protected list in the project
    ("practice-solution", "claude-code", CORPUS["practice-solution"]),
    ("write-rule-names-missing-file", "srt", CORPUS["write-rule-names-missing-file"]),
]


@pytest.mark.parametrize(("name", "semantics", "raw"), CASES, ids=[f"{n}-{s}" for n, s, _ in CASES])
def test_docker_enforces_the_rewrite_as_predicted(name: str, semantics: str, raw: dict[str, Any], docker_backend: Any) -> None:
    policy = enforced(load_policy(raw), semantics).policy  # type: ignore[arg-type]
    static = predict(policy)
    real = docker_backend.run(build_plan(policy))
    assert not real.notes, real.notes
    mismatches = [f"{o.id}: static={static.outcome(o.id).outcome} docker={o.outcome} ({o.evidence})"
                  for o in real.probes if o.outcome != static.outcome(o.id).outcome]
    assert mismatches == [], "\n".join(mismatches)
    assert static.scope is not None and real.scope is not None, real.notes
    for key in ("readable", "writable", "reachable"):
        mine, theirs = set(getattr(static.scope, key)), set(getattr(real.scope, key))
        assert mine == theirs, (key, sorted(map(str, mine - theirs)), sorted(map(str, theirs - mine)))
