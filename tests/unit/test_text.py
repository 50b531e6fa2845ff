"""One text boundary: a lone surrogate or a NUL in any key or string read from outside is refused with its JSON
path (``grader/core/text.py``), the same at every boundary that calls it."""

from __future__ import annotations

import json

import pytest

from grader.core.errors import PolicyError
from grader.core.policy import load_policy
from grader.core.text import printable, text_problem, text_problems


def test_text_problems_point_at_each_key_and_string_that_is_not_text() -> None:
    data = json.loads('{"a": ["ok", "/x\\ud800"], "\\udfff": 1, "b": {"c": "nul\\u0000here"}, "d": "\\ud83d\\ude00"}')
    found = {p.pointer: p.message for p in text_problems(data)}
    assert set(found) == {"/a/1", "/\\udfff", "/b/c"}, found
    assert "lone surrogate (\\ud800)" in found["/a/1"] and found["/\\udfff"].startswith("this key holds a lone surrogate")
    assert "NUL" in found["/b/c"]
    assert text_problems(data["d"]) == []  # a surrogate pair is one character: an emoji is fine
    for p in text_problems(data):  # every message can be printed and written as UTF-8
        str(p).encode("utf-8")


def test_text_problems_walk_deep_values_without_recursion() -> None:
    deep: object = "\ud800"
    for _ in range(5000):
        deep = [deep]
    assert [p.pointer for p in text_problems(deep)] == ["/" + "/".join(["0"] * 5000)]


def test_printable_escapes_what_utf8_cannot_hold() -> None:
    assert printable("a\ud800b\x00") == "a\\ud800b\\x00"
    assert printable("naïve ✓") == "naïve ✓"
    assert text_problem("fine") == "" and text_problem("a\x00", nul=True) == ""


@pytest.mark.parametrize("text, pointer", [
    ('{"filesystem": {"denyRead": ["/a\\ud800"]}}', "/filesystem/denyRead/0"),
    ('{"filesystem": {"denyRead": ["/a"], "\\ud800": []}}', "/filesystem/\\ud800"),
    ('{"network": {"allowedDomains": ["a.com\\u0000.evil"]}}', "/network/allowedDomains/0"),
])
def test_a_policy_holding_what_utf8_cannot_is_refused_with_its_path(text: str, pointer: str) -> None:
    with pytest.raises(PolicyError) as err:
        load_policy(text.encode())
    assert [p.pointer for p in err.value.problems] == [pointer]
    str(err.value).encode("utf-8")  # the message names the place, escaped: it can always be printed
