"""Text that comes in from outside: what JSON and UTF-8 allow, checked once, the same way at every boundary.

JSON may spell a character UTF-8 cannot hold: a lone surrogate (``"\\ud800"``,
half of a pair with no other half). Python's parser hands it over as a
``str`` that every later encode refuses, so a policy path, a settings key, an
attack's source or a request field holding one would be taken at load and
crash the grader far away (writing a world copy, a gradebook, a notebook),
where it stops a whole class instead of naming one problem. A NUL character
(``"\\u0000"``) is valid JSON and UTF-8, but no path, host name, environment
value or command line can hold it: the kernel cuts the string there, so what
runs is not what was written.

``text_problems`` walks a parsed JSON value (keys and strings) and returns a
``Problem`` with the JSON pointer of each such place; every boundary calls it
before anything else reads the value: the policy loader, the settings
importer, the capture-the-flag ``attack`` (command, magic and autograde) and
the run service's request bodies. ``printable`` is the one way to show text
that may hold either character (a pointer, a file name) without crashing.

Imports only ``errors``.
"""

from __future__ import annotations

from typing import Any, Iterator, Union

from grader.core.errors import Problem, json_pointer

__all__ = ["printable", "text_problem", "text_problems"]

Loc = tuple[Union[str, int], ...]

_SURROGATES = range(0xD800, 0xE000)


def printable(text: str) -> str:
    """``text`` with each lone surrogate written as its escape (``\\ud800``) and a NUL as ``\\x00``: safe to print,
    write to a UTF-8 file or put in a message, whatever a file name or a JSON key held."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def text_problem(text: str, *, nul: bool = False) -> str:
    """Why ``text`` cannot be taken ("" when it can): a lone surrogate always, a NUL unless ``nul`` allows it."""
    for i, c in enumerate(text):
        if ord(c) in _SURROGATES:
            return (f"holds a lone surrogate ({printable(c)}) at character {i}: JSON can write it, UTF-8 cannot hold "
                    "it, so it names no file, host or command. Remove the \\u escape, or write the character itself.")
        if c == "\x00" and not nul:
            return (f"holds a NUL, a control character (\\u0000), at character {i}: no path, host name or command can contain one "
                    "(the system would cut the text there). Remove it.")
    return ""


def _strings(value: Any, loc: Loc) -> Iterator[tuple[Loc, str, bool]]:
    """(location, text, is a key) for every key and string in ``value``; iterative, so no depth can exhaust the stack."""
    stack: list[tuple[Loc, Any]] = [(loc, value)]
    while stack:
        here, v = stack.pop()
        if isinstance(v, str):
            yield here, v, False
        elif isinstance(v, dict):
            for k, item in reversed(list(v.items())):
                if isinstance(k, str):
                    yield here + (k,), k, True
                stack.append((here + (k,), item))
        elif isinstance(v, (list, tuple)):
            for i in reversed(range(len(v))):
                stack.append((here + (i,), v[i]))


def text_problems(value: Any, loc: Loc = (), *, nul: bool = False) -> list[Problem]:
    """Every key and string in the JSON value ``value`` (found at ``loc``) that is not text: a ``Problem`` each,
    with its JSON pointer (escaped by ``printable``, so the message itself can always be shown). ``nul`` allows
    NUL characters (nowhere does today)."""
    out = []
    for where, text, is_key in _strings(value, loc):
        why = text_problem(text, nul=nul)
        if why:
            out.append(Problem(printable(json_pointer(where)), f"this key {why}" if is_key else why))
    return out
