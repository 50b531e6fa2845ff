"""Reading a JSON file someone keeps by hand: one wording for a file that is missing, unreadable or broken.

The learner's progress record, the service's token file, an instructor's
gradebook and the package's own task, level and world files are JSON that a
person may have edited. Each caller says what the file is; this module says
what is wrong with it, the same way everywhere: the line and column of a
syntax error, the operating system's reason for a file that cannot be read.

A missing file is its own error (``JsonFileMissing``), never ``None``: a file
holding ``null`` is not a missing file, and a caller that treats "missing" as
"empty" (progress, tokens) says so by catching it.

Imports only ``capped``, the bounded read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from grader.core.capped import NotRegular, TooLarge, read_regular

__all__ = ["MAX_BYTES", "JsonFileError", "JsonFileMissing", "json_problem", "read_json_file"]


class JsonFileError(ValueError):
    """A JSON file that cannot be used; the text is the reason, without the path (the caller names the file)."""


class JsonFileMissing(JsonFileError):
    """There is no file at the path."""


def json_problem(exc: json.JSONDecodeError) -> str:
    """What is wrong with a text that is not JSON, and where: ``not valid JSON (Expecting value, line 1 column 2)``."""
    return f"not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno})"


# Far above any file read here (a class's gradebook is kilobytes a student): a bound on what a file that
# keeps growing can make the reader hold.
MAX_BYTES = 64 << 20


def read_json_file(path: Path, max_bytes: int = MAX_BYTES) -> Any:
    """The JSON value in ``path`` (UTF-8, at most ``max_bytes``); ``JsonFileMissing`` or ``JsonFileError`` with
    the reason otherwise."""
    try:
        raw = read_regular(path, max_bytes, follow=True)
    except FileNotFoundError:
        raise JsonFileMissing("there is no such file") from None
    except NotRegular as exc:
        raise JsonFileError(f"cannot be read ({exc.what}, not a file)") from None
    except OSError as exc:
        raise JsonFileError(f"cannot be read ({exc.strerror or exc})") from None
    except TooLarge as exc:
        raise JsonFileError(str(exc)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonFileError(f"not UTF-8 text (byte {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise JsonFileError(json_problem(exc)) from None
    except RecursionError:  # thousands of nested brackets: the parser's stack, not a syntax error
        raise JsonFileError("nested too deep to be read") from None
