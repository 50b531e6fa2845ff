"""Reading a JSON file someone keeps by hand: one wording for a file that is missing, unreadable or broken.

The learner's progress record, the service's token file, an instructor's
gradebook and the package's own task, level and world files are JSON that a
person may have edited. Each caller says what the file is; this module says
what is wrong with it, the same way everywhere: the line and column of a
syntax error, the operating system's reason for a file that cannot be read.

A syntax error also names its likely cause where the text shows one (``json_cause``):
Python's parser says "Expecting value" for a trailing comma, a comment and a
Python ``True`` alike, and a person fixes what is named, in their words, at a
JSON path they can find.

A missing file is its own error (``JsonFileMissing``), never ``None``: a file
holding ``null`` is not a missing file, and a caller that treats "missing" as
"empty" (progress, tokens) says so by catching it.

Imports only ``capped``, the bounded read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from grader.core.capped import NotRegular, TooLarge, read_regular

__all__ = ["MAX_BYTES", "JsonFileError", "JsonFileMissing", "json_cause", "json_problem", "read_json_file"]


class JsonFileError(ValueError):
    """A JSON file that cannot be used; the text is the reason, without the path (the caller names the file)."""


class JsonFileMissing(JsonFileError):
    """There is no file at the path."""


def json_problem(exc: json.JSONDecodeError) -> str:
    """What is wrong with a text that is not JSON, and where: ``not valid JSON (Expecting value, line 1 column 2)``,
    followed by the likely cause when the text shows one (``json_cause``)."""
    cause = json_cause(exc)
    return f"not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno})" + (f": {cause}" if cause else "")


@dataclass
class _Frame:
    """An object or array open at the error: the key being read (objects) or the item's index (arrays)."""

    opener: str
    at: int  # the opener's offset, to say where a bracket that does not match was opened
    key: Optional[str] = None
    index: int = 0
    in_value: bool = False  # an object after a key's colon, until the next comma
    last: str = field(default="")  # the last of ``{[,:`` or a value seen in this container ("v")


def _scan(text: str, pos: int) -> list[_Frame]:
    """The containers open at ``pos``, outermost first: a small scanner over the valid text before the error."""
    stack: list[_Frame] = []
    i = 0
    while i < pos:
        ch = text[i]
        if ch == '"':
            end = i + 1
            while end < pos and text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            if stack and stack[-1].opener == "{" and not stack[-1].in_value:
                try:
                    stack[-1].key = str(json.loads(text[i:end + 1]))
                except ValueError:
                    stack[-1].key = text[i + 1:end]
            if stack:
                stack[-1].last = "v"
            i = end + 1
            continue
        if ch in "{[":
            if stack:
                stack[-1].last = "v"
            stack.append(_Frame(ch, i, last=ch))
        elif ch in "}]" and stack:
            stack.pop()
        elif ch == ":" and stack:
            stack[-1].in_value, stack[-1].last = True, ":"
        elif ch == "," and stack:
            top = stack[-1]
            top.in_value, top.key, top.last = False, None, ","
            top.index += 1
        elif not ch.isspace() and stack:
            stack[-1].last = "v"
        i += 1
    return stack


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _pointer(stack: list[_Frame], *, inner: bool) -> str:
    """The JSON pointer of the innermost open container, and of the item being read in it when ``inner``."""
    parts: list[str] = []
    for n, frame in enumerate(stack):
        innermost = n == len(stack) - 1
        if frame.opener == "{" and frame.key is not None and frame.in_value and (not innermost or inner):
            parts.append(_escape(frame.key))
        elif frame.opener == "[" and (not innermost or (inner and frame.last in "[,")):
            parts.append(str(frame.index))
    return "/" + "/".join(parts) if parts else ""


def _where(pointer: str) -> str:
    return f"at {pointer}" if pointer else "at the top level"


_PYTHON = {"True": "true", "False": "false", "None": "null"}
_WORD = re.compile(r"[A-Za-z_$][\w$-]*")


def json_cause(exc: json.JSONDecodeError) -> str:
    """The likely cause of a JSON syntax error, in the writer's words and with its JSON path, or "" when the text
    shows none: a trailing comma, a single-quoted string, a key without quotes, a missing comma, a comment, Python's
    ``True``/``False``/``None``, a bracket that does not match."""
    text, pos = exc.doc, exc.pos
    rest = text[pos:]
    stack = _scan(text, pos)
    here = _where(_pointer(stack, inner=True))
    if rest.startswith(("//", "/*", "#")):
        return f"likely a comment {here}: JSON has no comments. Delete it"
    if rest.startswith("'"):
        what = "key" if "property name" in exc.msg else "string"
        return f"likely a single-quoted {what} {here}: JSON takes double quotes (\"x\", not 'x')"
    word = _WORD.match(rest)
    if word and word.group(0) in _PYTHON:
        py = word.group(0)
        return f"likely Python's {py} {here}: JSON writes {_PYTHON[py]} (true, false and null, in lower case)"
    before = text[:pos].rstrip()
    if rest[:1] in ("}", "]") and before.endswith(","):
        closer = rest[0]
        return (f"likely a trailing comma {_where(_pointer(stack, inner=False))}: JSON allows no comma before "
                f"\"{closer}\". Delete the last comma")
    if word and "property name" in exc.msg:
        return f"likely a key without quotes {here}: write it in double quotes, \"{word.group(0)}\""
    if "',' delimiter" in exc.msg and rest[:1] in ("}", "]") and stack:
        opened = stack[-1]
        line = text.count("\n", 0, opened.at) + 1
        col = opened.at - text.rfind("\n", 0, opened.at)
        want = "]" if opened.opener == "[" else "}"
        return (f"likely a bracket that does not match {_where(_pointer(stack, inner=False))}: \"{rest[0]}\" closes "
                f"the \"{opened.opener}\" opened at line {line} column {col}. Close it with \"{want}\"")
    if "',' delimiter" in exc.msg and rest[:1] and (rest[0] in '"{[-' or rest[0].isalnum()) and stack:
        top = stack[-1]
        item = _escape(top.key) if top.opener == "{" and top.key is not None else str(top.index)
        return (f"likely a missing comma after {_pointer(stack, inner=False)}/{item}: put a comma between two items, "
                f"before line {exc.lineno} column {exc.colno}")
    return ""


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
