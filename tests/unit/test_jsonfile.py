"""One wording for a JSON file that is missing, unreadable or broken (``grader/core/jsonfile.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest

from endless import OFFERED, endless_pipe
from grader.core.jsonfile import JsonFileError, JsonFileMissing, json_problem, read_json_file


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
         "not valid JSON (Expecting property name enclosed in double quotes, line 1 column 2)"),
        (lambda p: p.write_text('{"a": 1,\n  }'), JsonFileError,
         "not valid JSON (Expecting property name enclosed in double quotes, line 2 column 3)"),
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
