"""hatches.py: the real tools' escape hatches as facts, and the judge of "find the hole in this settings.json"."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from grader.realtools.hatches import EXERCISES, HATCHES, exercise, hatch, holes, judge, key_of

# What the reference says (../shared/reference/claude-code-settings.md): pinned, so a change to the facts is deliberate.
DEFAULTS = {"enabled": False, "allowUnsandboxedCommands": True, "failIfUnavailable": False, "excludedCommands": [],
            "enableWeakerNestedSandbox": False, "autoAllowBashIfSandboxed": True, "network.allowAllUnixSockets": False}
EXPECTED = {"defaults-left-open": ("allowUnsandboxedCommands", "failIfUnavailable"),
            "git-excluded": ("excludedCommands",),
            "nested-in-docker": ("enableWeakerNestedSandbox", "network.allowAllUnixSockets")}


def _fixed(exercise_id: str) -> dict[str, Any]:
    """The reference fix: every hole closed, nothing else changed."""
    s: dict[str, Any] = json.loads(exercise(exercise_id).text())
    block = s["sandbox"]
    safe = {"allowUnsandboxedCommands": False, "failIfUnavailable": True, "excludedCommands": [],
            "enableWeakerNestedSandbox": False}
    for key in holes(s):
        if key == "network.allowAllUnixSockets":
            block["network"]["allowAllUnixSockets"] = False
        else:
            block[key] = safe[key]
    return s


def test_the_facts_match_the_reference() -> None:
    assert {x.key: x.default for x in HATCHES} == DEFAULTS
    assert holes({"sandbox": {"enabled": True}}) == ("allowUnsandboxedCommands", "failIfUnavailable")
    assert "enabled" in holes({}) and "enabled" in holes({"sandbox": {"enabled": "true"}})  # a string is not true
    assert not hatch("autoAllowBashIfSandboxed").is_open({"autoAllowBashIfSandboxed": True})


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.id)
def test_each_exercise_has_the_holes_the_facts_give_it(ex: Any) -> None:
    assert holes(ex.settings) == EXPECTED[ex.id]
    assert ex.settings["sandbox"]["enabled"] is True  # the sandbox is on: the hole is subtler
    assert holes(_fixed(ex.id)) == ()


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.id)
def test_the_right_answer_passes(ex: Any) -> None:
    v = judge(ex.id, list(EXPECTED[ex.id]), _fixed(ex.id))
    assert v.passed and v.score == 1.0 and v.result == "right", v.text()
    assert judge(ex.id, [f"/sandbox/{k.replace('.', '/')}" for k in EXPECTED[ex.id]], json.dumps(_fixed(ex.id))).passed


@pytest.mark.parametrize("ex", EXERCISES, ids=lambda e: e.id)
def test_naming_every_key_does_not_pass(ex: Any) -> None:
    every = [x.key for x in HATCHES] + ["filesystem", "network", "filesystem.denyRead", "network.allowedDomains"]
    v = judge(ex.id, every, _fixed(ex.id))
    assert not v.passed and v.named_wrong and not v.missed
    assert "no hole here" in v.text()


def test_a_missed_hole_or_a_wrong_key_does_not_pass() -> None:
    v = judge("defaults-left-open", ["allowUnsandboxedCommands"], _fixed("defaults-left-open"))
    assert not v.passed and v.missed == ("failIfUnavailable",) and "its default applies" in v.text()
    v = judge("git-excluded", ["excludedCommands", "autoAllowBashIfSandboxed"], _fixed("git-excluded"))
    assert not v.passed and v.named_wrong == ("autoAllowBashIfSandboxed",)
    v = judge("git-excluded", ["excludedCommands", "sandbox.noSuchKey"], _fixed("git-excluded"))
    assert not v.passed and "not a key of Claude Code's sandbox settings" in v.text()


def test_gamed_fixes_do_not_pass() -> None:
    right = list(EXPECTED["defaults-left-open"])
    base = json.loads(exercise("defaults-left-open").text())
    off = copy.deepcopy(base)
    off["sandbox"]["enabled"] = False  # switching the sandbox off closes nothing
    deleted = _fixed("defaults-left-open")
    del deleted["sandbox"]["allowUnsandboxedCommands"]  # absent is the default: true
    as_string = _fixed("defaults-left-open")
    as_string["sandbox"]["failIfUnavailable"] = "true"
    wider = _fixed("defaults-left-open")
    wider["sandbox"]["network"]["allowedDomains"] = ["*"]  # the rules are not the hole
    no_rules = {"sandbox": {"enabled": True, "allowUnsandboxedCommands": False, "failIfUnavailable": True}}
    for fixed in (base, off, deleted, as_string, wider, no_rules, {}, "not json", None):
        v = judge("defaults-left-open", right, fixed)  # type: ignore[arg-type]
        assert not v.passed and v.fix_problems, fixed
    assert "absent, so its default true" in judge("defaults-left-open", right, deleted).text()
    assert "must stay as they were" in judge("defaults-left-open", right, wider).text()


def test_nothing_named_is_not_answered_whatever_the_copy() -> None:
    v = judge("git-excluded", [], json.loads(exercise("git-excluded").text()))
    assert not v.answered and not v.passed and v.score == 0.0 and "Not answered yet" in v.text()
    assert not judge("git-excluded", ["", "  "], None).answered


def test_key_names_are_read_in_every_usual_form() -> None:
    for name in ("excludedCommands", "sandbox.excludedCommands", "/sandbox/excludedCommands", " `excludedCommands` "):
        assert key_of(name) == "excludedCommands", name
    assert key_of("allowAllUnixSockets") == key_of("/sandbox/network/allowAllUnixSockets") == "network.allowAllUnixSockets"
    assert key_of("denyRead") == "filesystem.denyRead"
    assert key_of("rm -rf") is None
    with pytest.raises(KeyError, match="known"):
        exercise("no-such-exercise")
