"""One wording for a JSON file that is missing, unreadable or broken (``grader/core/jsonfile.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest

from endless import OFFERED, endless_pipe
from grader.core.jsonfile import JsonFileError, JsonFileMissing, json_cause, json_problem, read_json_file


def test_a_file_is_read_as_its_json_value_even_when_that_value_is_null(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text('{"tokens": []}', encoding="utf-8")
    (tmp_path / "null.json").write_text("null", encoding="utf-8")
    assert read_json_file(tmp_path / "a.json") == {"tokens": []}
    assert read_json_file(tmp_path / "null.json") is None  # a file holding null is not a missing file


@pytest.mark.parametrize(
    ("make", "error", "reason"),
    [
        (lambda p: None, JsonFileMissing, "there is no such file"),
        (lambda p: p.mkdir(), JsonFileError, "cannot be read (a directory, not a file)"),
        (lambda p: p.write_bytes(b'{"a": "\xff"}'), JsonFileError, "not UTF-8 text (byte 7)"),
        (lambda p: p.write_text("{not json"), JsonFileError,
         "not valid JSON (Expecting property name enclosed in double quotes, line 1 column 2): likely a key without "
         'quotes at the top level: write it in double quotes, "not"'),
        (lambda p: p.write_text('{"a": 1,\n  }'), JsonFileError,
         "not valid JSON (Expecting property name enclosed in double quotes, line 2 column 3): likely a trailing comma "
         'at the top level: JSON allows no comma before "}". Delete the last comma'),
        (lambda p: p.write_text(""), JsonFileError, "not valid JSON (Expecting value, line 1 column 1)"),
        (lambda p: p.write_text("[" * 200_000 + "]" * 200_000), JsonFileError, "nested too deep to be read"),
    ],
    ids=["missing", "a-directory", "not-utf8", "syntax", "syntax-line-2", "empty", "nested-too-deep"],
)
def test_each_way_a_file_can_be_unusable_has_its_own_reason(
    tmp_path: Path, make: Callable[[Path], object], error: type[JsonFileError], reason: str
) -> None:
    path = tmp_path / "f.json"
    make(path)
    with pytest.raises(error) as info:
        read_json_file(path)
    assert str(info.value) == reason
    # a missing file is an error a caller must choose to treat as empty; an unusable one is never missing
    assert isinstance(info.value, JsonFileMissing) == (error is JsonFileMissing)


def test_a_file_over_the_limit_or_endless_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    (tmp_path / "big.json").write_text('"' + "x" * 100 + '"')
    with pytest.raises(JsonFileError, match="^larger than 64 bytes$"):
        read_json_file(tmp_path / "big.json", max_bytes=64)
    assert read_json_file(tmp_path / "big.json", max_bytes=102) == "x" * 100  # exactly the limit is read
    with endless_pipe(tmp_path / "pipe.json") as pipe:  # as /dev/zero: refused, never read
        with pytest.raises(JsonFileError, match=r"^cannot be read \(a pipe or a device, not a file\)$"):
            read_json_file(pipe.path)
        assert pipe.taken() < OFFERED


def test_the_wording_of_a_syntax_error_names_line_and_column() -> None:
    with pytest.raises(json.JSONDecodeError) as info:
        json.loads('[1,\n 2,,]')
    assert json_problem(info.value) == "not valid JSON (Expecting value, line 2 column 4)"


@pytest.mark.parametrize(
    ("text", "where", "cause"),
    [
        ('{"network": {"allowedDomains": ["a.example",]}}', "line 1 column 45",
         'likely a trailing comma at /network/allowedDomains: JSON allows no comma before "]". Delete the last comma'),
        ('{"filesystem": {"allowWrite": ["/x"]},\n}', "line 2 column 1",
         'likely a trailing comma at the top level: JSON allows no comma before "}". Delete the last comma'),
        ("{\"network\": {\"allowedDomains\": ['a.example']}}", "line 1 column 33",
         "likely a single-quoted string at /network/allowedDomains/0: JSON takes double quotes (\"x\", not 'x')"),
        ("{'network': {}}", "line 1 column 2",
         "likely a single-quoted key at the top level: JSON takes double quotes (\"x\", not 'x')"),
        ('{"network": {allowedDomains: []}}', "line 1 column 14",
         'likely a key without quotes at /network: write it in double quotes, "allowedDomains"'),
        ('{"filesystem": {"allowWrite": ["/a" "/b"]}}', "line 1 column 37",
         "likely a missing comma after /filesystem/allowWrite/0: put a comma between two items, before line 1 column 37"),
        ('{"filesystem": {}\n "network": {}}', "line 2 column 2",
         "likely a missing comma after /filesystem: put a comma between two items, before line 2 column 2"),
        ('{\n  // the build host\n  "network": {}}', "line 2 column 3",
         "likely a comment at the top level: JSON has no comments. Delete it"),
        ('{"network": {"allowedDomains": /* none */ []}}', "line 1 column 32",
         "likely a comment at /network/allowedDomains: JSON has no comments. Delete it"),
        ('{"network": {"allowLocalBinding": True}}', "line 1 column 35",
         "likely Python's True at /network/allowLocalBinding: JSON writes true (true, false and null, in lower case)"),
        ('{"filesystem": None}', "line 1 column 16",
         "likely Python's None at /filesystem: JSON writes null (true, false and null, in lower case)"),
        ('{"network": {"allowedDomains": ["a.example"}}', "line 1 column 44",
         'likely a bracket that does not match at /network/allowedDomains: "}" closes the "[" opened at line 1 '
         'column 32. Close it with "]"'),
        ('{"a~b/c": [1, 2,]}', "line 1 column 17",
         'likely a trailing comma at /a~0b~1c: JSON allows no comma before "]". Delete the last comma'),
    ],
    ids=["trailing-comma-array", "trailing-comma-object", "single-quoted-string", "single-quoted-key", "unquoted-key",
         "missing-comma-array", "missing-comma-object", "line-comment", "block-comment", "python-true", "python-none",
         "bracket-mismatch", "pointer-escaped"],
)
def test_a_syntax_error_names_its_likely_cause_where_it_is_and_the_fix(text: str, where: str, cause: str) -> None:
    with pytest.raises(json.JSONDecodeError) as info:
        json.loads(text)
    assert json_cause(info.value) == cause
    problem = json_problem(info.value)
    assert problem.startswith("not valid JSON (") and f", {where}): " in problem and problem.endswith(cause)


@pytest.mark.parametrize("text", ['{"network": ', "[1,\n 2,,]", '{"a" 1}', '{"a": 1}x'],
                         ids=["cut-short", "double-comma", "missing-colon", "extra-data"])
def test_a_syntax_error_with_no_cause_in_sight_says_only_what_the_parser_said(text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as info:
        json.loads(text)
    assert json_cause(info.value) == ""  # no guess is better than a wrong one
    assert json_problem(info.value) == f"not valid JSON ({info.value.msg}, line {info.value.lineno} column {info.value.colno})"


def test_a_file_with_a_trailing_comma_says_so(tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text('{"network": {"allowedDomains": ["a.example",\n]}}', encoding="utf-8")
    with pytest.raises(JsonFileError, match=r'line 2 column 1\): likely a trailing comma at /network/allowedDomains'):
        read_json_file(tmp_path / "p.json")
