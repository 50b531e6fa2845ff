"""The one strict JSON codec of the protocol's records: a frozen dataclass from a JSON value, and back.

What both sides of a container boundary exchange (the runner's orders, the
services' records and configs) is a frozen dataclass; this module reads one
from a JSON value against its type hints (``decode``) and writes one as its
JSON value (``encode``). Standard library only: it is copied beside the
services and the runner in the images and imported there as the top-level
module ``codec`` (on the host, as ``grader.protocol.codec``); it imports
nothing of the project.

The reader is strict, because a verdict rests on what it reads: an unknown or
a missing field (a field with a default may be left out), a wrong type (a
``"true"`` where a boolean is due is not ``False``: it is refused), an
unknown ``op`` raises ``CodecError``, which carries the JSON path of the
problem and the problem; each boundary wraps it in its own error
(``wire.WireError``, ``configs.ConfigError``).

Types it reads: ``bool``, ``int``, ``float``, ``str``, ``Literal`` of
strings, ``Optional[X]``, ``tuple[X, ...]``, ``dict[str, X]``, a dataclass,
and a union of dataclasses told apart by their ``OP`` class variable (the
``"op"`` key, written first by ``encode``).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, TypeVar, Union

__all__ = ["CodecError", "check", "decode", "encode"]

T = TypeVar("T")


class CodecError(ValueError):
    """A JSON value that is not the record it should be: ``where`` (its JSON path) and ``problem`` (why)."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem
        super().__init__(f"{where}: {problem}")


def _tagged(args: tuple[Any, ...]) -> dict[str, type[Any]]:
    """The ``OP`` of each dataclass in a union, when every member has one; {} otherwise."""
    ops = {getattr(a, "OP", None): a for a in args if isinstance(a, type) and dataclasses.is_dataclass(a)}
    return {op: a for op, a in ops.items() if isinstance(op, str)} if len(ops) == len(args) and None not in ops else {}


def check(value: Any, hint: Any, where: str) -> Any:
    """``value`` as the type ``hint`` says, or CodecError naming ``where``."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        others = tuple(a for a in args if a is not type(None))
        tagged = _tagged(others)
        if tagged:
            return _variant(tagged, value, where)
        if len(others) == 1:
            return check(value, others[0], where)
        raise CodecError(where, f"unsupported type {hint}")  # pragma: no cover - a definition bug
    if origin is typing.Literal:
        if value in typing.get_args(hint) and isinstance(value, str):
            return value
        raise CodecError(where, f"{value!r} is not one of {list(typing.get_args(hint))}")
    if origin is tuple:
        (item, _dots) = typing.get_args(hint)
        if not isinstance(value, list):
            raise CodecError(where, f"expected a list, got {type(value).__name__}")
        return tuple(check(v, item, f"{where}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        (key, item) = typing.get_args(hint)
        if key is not str:  # pragma: no cover - a definition bug
            raise CodecError(where, f"unsupported type {hint}")
        if not isinstance(value, dict):
            raise CodecError(where, f"expected an object, got {type(value).__name__}")
        return {k: check(v, item, f"{where}.{k}") for k, v in value.items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return decode(hint, value, where)
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    else:  # pragma: no cover - a definition bug
        raise CodecError(where, f"unsupported type {hint}")
    raise CodecError(where, f"expected {hint.__name__}, got {type(value).__name__}")


_SHAPES: dict[type[Any], tuple[dict[str, Any], dict[str, "dataclasses.Field[Any]"]]] = {}


def _shape(cls: type[Any]) -> tuple[dict[str, Any], dict[str, "dataclasses.Field[Any]"]]:
    """A record type's resolved field types and its fields, worked out once per type: resolving the
    annotations compiles each one, and the runner parses hundreds of steps, the host thousands of records."""
    got = _SHAPES.get(cls)
    if got is None:  # two threads may both work it out: the same value, either kept
        got = _SHAPES[cls] = (typing.get_type_hints(cls), {f.name: f for f in dataclasses.fields(cls)})
    return got


def decode(cls: type[T], value: Any, where: str, skip: tuple[str, ...] = ()) -> T:
    """A dataclass from a JSON object with exactly its fields (defaults may be left out; ``skip``: keys of the
    object that are not the record's, e.g. a log line's ``seq``)."""
    if not isinstance(value, dict):
        raise CodecError(where, f"expected an object, got {type(value).__name__}")
    hints, fields = _shape(cls)
    extra = sorted(set(value) - set(fields) - set(skip))
    if extra:
        raise CodecError(where, f"unknown field(s) {extra}")
    args: dict[str, Any] = {}
    for name, f in fields.items():
        if name not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise CodecError(where, f"missing field {name!r}")
            continue
        args[name] = check(value[name], hints[name], f"{where}.{name}")
    return cls(**args)


def _variant(tagged: dict[str, type[Any]], value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise CodecError(where, f"expected an object, got {type(value).__name__}")
    op = value.get("op")  # the discriminator itself: a missing one is caught right here
    cls = tagged.get(op) if isinstance(op, str) else None
    if cls is None:
        raise CodecError(where, f"unknown op {op!r}")
    return decode(cls, value, where, skip=("op",))


def encode(record: Any) -> dict[str, Any]:
    """A record as its JSON object: every field, in order, and ``"op"`` first for a tagged one."""
    out: dict[str, Any] = {f.name: _plain(getattr(record, f.name)) for f in dataclasses.fields(record)}
    op = getattr(record, "OP", None)
    return {"op": op, **out} if op is not None else out


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return encode(value)
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value
