"""One text boundary: a lone surrogate or a NUL in any key or string read from outside is refused with its JSON
path (``grader/core/text.py``), the same at every boundary that calls it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.backends.static import StaticBackend
from grader.cli.main import main
from grader.core.errors import LevelError, PolicyError
from grader.core.policy import load_policy
from grader.core.text import printable, text_problem, text_problems
from grader.hosted.kinds import check_body
from grader.hosted.problems import ServiceError
from grader.realtools.importer import import_settings
from grader.realtools.machine import Machine


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


# --- every boundary calls the one check ---------------------------------------------------------------


@pytest.mark.parametrize("command", [["check"], ["probe", "--backend", "static"], ["grade", "--task", "scope-secure-sandbox", "--backend", "static"]])
def test_cli_commands_exit_2_with_the_path_for_a_lone_surrogate(
    tmp_path: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "p.json"
    policy.write_text('{"filesystem": {"denyRead": ["/a\\ud800"]}}')
    assert main([*command, str(policy)]) == 2  # was 4, an internal error (UnicodeEncodeError)
    said = capsys.readouterr()
    assert "/filesystem/denyRead/0" in said.out + said.err and "holds a lone surrogate" in said.out + said.err  # grade: 0 with it


def test_the_settings_importer_refuses_a_lone_surrogate_even_in_a_key_it_skips() -> None:
    settings = json.loads('{"sandbox": {"network": {"allowedDomains": ["a.com"]}, "\\ud800x": 1}}')
    with pytest.raises(PolicyError) as err:
        import_settings(settings, "claude-code", Machine("/tmp/x", "/tmp/h"))
    assert [p.pointer for p in err.value.problems] == ["/sandbox/\\ud800x"]


@pytest.mark.parametrize("code", ["print('\ud800')", "print(1)\x00"])
def test_an_attack_source_that_is_not_text_is_refused_before_any_run(code: str) -> None:
    from grader.course.ladder import attack, load_levels
    from grader.notebook.magic import attack_cell

    with pytest.raises(LevelError, match="the attack's source holds a"):
        attack(load_levels()[0], code, StaticBackend())
    with pytest.raises(LevelError, match="%%attack: the cell holds a"):
        attack_cell("1", code, backend=StaticBackend())


def test_a_request_body_that_is_not_text_is_a_400_naming_its_path() -> None:
    body = json.loads('{"policy": {"filesystem": {"denyRead": ["/a\\ud800"]}}}')
    with pytest.raises(ServiceError) as err:
        check_body("probe", body)
    assert err.value.status == 400
    problems = err.value.body()["error"]["problems"]
    assert [p["path"] for p in problems] == ["$.policy.filesystem.denyRead[0]"], problems
    json.dumps(err.value.body()).encode("utf-8")
