"""The one strict JSON codec of the project's records: a frozen dataclass from a JSON value, and back.

What crosses a boundary (the runner's orders, the services' records and
configs, the run service's results and requests) is a frozen dataclass; this
module reads one from a JSON value against its type hints (``decode``,
``check``) and writes one as its JSON value (``encode``). Standard library
only: it is copied beside the services and the runner in the images and
imported there as the top-level module ``codec`` (on the host, as
``grader.protocol.codec``); it imports nothing of the project.

The reader is strict, because a verdict rests on what it reads: an unknown or
a missing field, a wrong type (a ``"true"`` where a boolean is due is refused,
never read as False), an unknown ``op`` raises ``CodecError``. The error
carries where (the root's name and the path below it, ``segments``), what
(``code``) and the facts of it; ``str()`` says it the way the wire says it
(``orders.probes[0]: missing field 'id'``), and each boundary wraps it in its
own error, in its own words (``wire.WireError``, ``configs.ConfigError``,
``transport.TransportError``).

Two sets of ``Rules``: the wire's (a field with a default may be left out)
and the run service's (``EVERY_FIELD``: every field always, and numbers
finite). Types it reads: ``bool``, ``int``, ``float``, ``str``, ``bytes``
(base64), ``Any`` (a JSON value), ``Literal`` of strings, ``Optional[X]``,
``tuple[X, ...]`` and fixed tuples, ``dict[str, X]`` / ``Mapping[str, X]``,
a dataclass, and a union of dataclasses told apart by their ``OP`` class
variable (the ``"op"`` key, written first by ``encode``).
"""

from __future__ import annotations

import base64
import binascii
import collections.abc
import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, Union

__all__ = ["EVERY_FIELD", "WIRE", "CodecError", "ErrorCode", "Rules", "Segment", "check", "decode", "encode", "wire_path"]

T = TypeVar("T")
Segment = Union[str, int]  # a key of an object, or an index of a list
ErrorCode = Literal["type", "choice", "unknown", "missing", "op", "finite", "json", "base64", "length"]


@dataclass(frozen=True)
class Rules:
    """How strict a boundary is beyond the types."""

    omit_defaults: bool  # a field with a default may be left out
    finite: bool  # a number must be finite (no NaN, no infinity)


WIRE = Rules(omit_defaults=True, finite=False)  # the runner's orders, the services' records and configs
EVERY_FIELD = Rules(omit_defaults=False, finite=True)  # the run service: a dropped field is told from an empty one


def wire_path(root: str, segments: tuple[Segment, ...]) -> str:
    """``root`` and the path below it as the wire says it: ``orders.probes[0].steps[2]``."""
    return root + "".join(f"[{s}]" if isinstance(s, int) else f".{s}" for s in segments)


class CodecError(ValueError):
    """A JSON value that is not the record it should be: where, what (``code``) and the facts of it.

    ``segments`` lead from ``root`` to the value concerned; for ``unknown``
    and ``missing`` that is the object, and ``names`` the fields. ``expected``
    and ``got`` are the type hint and the value found (``type``, ``choice``,
    ``length``).
    """

    def __init__(self, root: str, segments: tuple[Segment, ...], code: ErrorCode, *, expected: Any = None,
                 got: Any = None, names: tuple[str, ...] = ()) -> None:
        self.root, self.segments, self.code = root, segments, code
        self.expected, self.got, self.names = expected, got, names
        super().__init__(f"{wire_path(root, segments)}: {self.problem}")

    @property
    def problem(self) -> str:
        """What is wrong, in the wire's words."""
        if self.code == "unknown":
            return f"unknown field(s) {list(self.names)}"
        if self.code == "missing":
            return f"missing field {self.names[0]!r}"
        if self.code == "op":
            return f"unknown op {self.got!r}"
        if self.code == "choice":
            return f"{self.got!r} is not one of {list(typing.get_args(self.expected))}"
        if self.code == "finite":
            return "not a finite number"
        if self.code == "json":
            return f"not a JSON value ({type(self.got).__name__})"
        if self.code == "base64":
            return "not base64"
        if self.code == "length":
            return f"expected a list of {len(typing.get_args(self.expected))}, got {len(self.got)}"
        want = self.expected
        if want in (list, dict):
            return f"expected {'a list' if want is list else 'an object'}, got {type(self.got).__name__}"
        return f"expected {getattr(want, '__name__', want)}, got {type(self.got).__name__}"


class _Reader:
    """One decoding: the root's name and the rules, so the recursion carries only the value, its hint and path."""

    def __init__(self, root: str, rules: Rules) -> None:
        self.root, self.rules = root, rules

    def fail(self, at: tuple[Segment, ...], code: ErrorCode, **facts: Any) -> CodecError:
        return CodecError(self.root, at, code, **facts)

    def check(self, value: Any, hint: Any, at: tuple[Segment, ...]) -> Any:
        return self.apply(value, hint, _plan(hint), at)

    def apply(self, value: Any, hint: Any, plan: tuple[Any, ...], at: tuple[Segment, ...]) -> Any:
        """``check`` with ``hint``'s plan (``_plan``) in hand: a record's fields carry theirs (``_shape``)."""
        kind = plan[0]
        if kind == "scalar":
            if type(value) is hint and hint is not float:  # str, bool, and int (never a bool: its type is bool)
                return value
            return self.scalar(value, hint, at)
        if kind == "record":
            return self.record(hint, value, at)
        if kind == "any":
            return self.json(value, at)
        if kind == "union":
            _, optional, tagged, single, single_plan = plan
            if value is None and optional:
                return None
            if tagged:
                return self.variant(tagged, value, at)
            if single is not None:
                return self.apply(value, single, single_plan, at)
            raise TypeError(f"{wire_path(self.root, at)}: unsupported type {hint}")  # a definition bug, not an input
        if kind == "literal":
            if isinstance(value, str) and value in plan[1]:
                return value
            raise self.fail(at, "choice", expected=hint, got=value)
        if kind == "tuple":
            _, args, plans = plan
            if not isinstance(value, list):
                raise self.fail(at, "type", expected=list, got=value)
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(self.apply(v, args[0], plans[0], (*at, i)) for i, v in enumerate(value))
            if len(value) != len(args):
                raise self.fail(at, "length", expected=hint, got=value)
            return tuple(self.apply(v, a, p, (*at, i)) for i, (a, p, v) in enumerate(zip(args, plans, value)))
        if kind == "dict":
            _, key, item, item_plan = plan
            if key is not str:  # pragma: no cover - a definition bug
                raise TypeError(f"{wire_path(self.root, at)}: unsupported type {hint}")
            if not isinstance(value, dict):
                raise self.fail(at, "type", expected=dict, got=value)
            return {k: self.apply(v, item, item_plan, (*at, k)) for k, v in value.items()}
        raise AssertionError(kind)  # pragma: no cover

    def scalar(self, value: Any, hint: Any, at: tuple[Segment, ...]) -> Any:
        if hint is bool:
            if isinstance(value, bool):
                return value
        elif hint is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        elif hint is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if self.rules.finite and not math.isfinite(value):
                    raise self.fail(at, "finite", got=value)
                return float(value)
        elif hint is str:
            if isinstance(value, str):
                return value
        elif hint is bytes:
            if isinstance(value, str):
                try:
                    return base64.b64decode(value.encode("ascii"), validate=True)
                except (binascii.Error, UnicodeEncodeError):
                    raise self.fail(at, "base64", got=value) from None
        else:  # pragma: no cover - a definition bug
            raise TypeError(f"{wire_path(self.root, at)}: unsupported type {hint}")
        raise self.fail(at, "type", expected=hint, got=value)

    def json(self, value: Any, at: tuple[Segment, ...]) -> Any:
        """Any JSON value (``Any``), checked to be one: string keys, and finite numbers where the rules say so."""
        if value is None or isinstance(value, (bool, str, int)):
            return value
        if isinstance(value, float):
            if self.rules.finite and not math.isfinite(value):
                raise self.fail(at, "finite", got=value)
            return value
        if isinstance(value, list):
            return [self.json(v, (*at, i)) for i, v in enumerate(value)]
        if isinstance(value, dict):
            return {k: self.json(v, (*at, k)) for k, v in value.items()}
        raise self.fail(at, "json", got=value)

    def record(self, cls: type[T], value: Any, at: tuple[Segment, ...], skip: tuple[str, ...] = ()) -> T:
        if not isinstance(value, dict):
            raise self.fail(at, "type", expected=dict, got=value)
        hints, fields, plans, names = _shape(cls)
        if not names.issuperset(value):
            extra = sorted(set(value) - names - set(skip))
            if extra:
                raise self.fail(at, "unknown", names=tuple(extra))
        if not self.rules.omit_defaults:  # every field: the first one missing is the problem, before any value's
            missing = next((name for name in fields if name not in value), None)
            if missing is not None:
                raise self.fail(at, "missing", names=(missing,))
        args: dict[str, Any] = {}
        for name, f in fields.items():
            if name not in value:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise self.fail(at, "missing", names=(name,))
                continue
            args[name] = self.apply(value[name], hints[name], plans[name], (*at, name))
        return cls(**args)

    def variant(self, tagged: dict[str, type[Any]], value: Any, at: tuple[Segment, ...]) -> Any:
        if not isinstance(value, dict):
            raise self.fail(at, "type", expected=dict, got=value)
        op = value.get("op")  # the discriminator itself: a missing one is caught right here
        cls = tagged.get(op) if isinstance(op, str) else None
        if cls is None:
            raise self.fail(at, "op", got=op)
        return self.record(cls, value, at, skip=("op",))


_PLANS: dict[Any, tuple[Any, ...]] = {}


def _plan(hint: Any) -> tuple[Any, ...]:
    """What ``check`` does with a value of type ``hint``, worked out once per type (asking ``typing`` for a hint's
    origin and arguments on every value was most of the cost of reading a run's thousands of records)."""
    try:
        return _PLANS[hint]
    except KeyError:
        pass
    except TypeError:  # pragma: no cover - an unhashable hint: worked out each time
        return _work_out(hint)
    plan = _PLANS[hint] = _work_out(hint)  # two threads may both work it out: the same value, either kept
    return plan


def _work_out(hint: Any) -> tuple[Any, ...]:
    if hint is Any:
        return ("any",)
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        args = typing.get_args(hint)
        others = tuple(a for a in args if a is not type(None))
        single = others[0] if len(others) == 1 else None
        return ("union", type(None) in args, _tagged(others), single, None if single is None else _plan(single))
    if origin is Literal:
        return ("literal", typing.get_args(hint))
    if origin is tuple:
        args = typing.get_args(hint)
        return ("tuple", args, tuple(None if a is Ellipsis else _plan(a) for a in args))
    if origin in (dict, collections.abc.Mapping):
        key, item = typing.get_args(hint)
        return ("dict", key, item, _plan(item))
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return ("record",)
    return ("scalar",)


def _tagged(args: tuple[Any, ...]) -> dict[str, type[Any]]:
    """The ``OP`` of each dataclass in a union, when every member has one; {} otherwise."""
    ops = {getattr(a, "OP", None): a for a in args if isinstance(a, type) and dataclasses.is_dataclass(a)}
    return {op: a for op, a in ops.items() if isinstance(op, str)} if len(ops) == len(args) and None not in ops else {}


_Shape = tuple[dict[str, Any], dict[str, "dataclasses.Field[Any]"], dict[str, tuple[Any, ...]], frozenset[str]]
_SHAPES: dict[type[Any], _Shape] = {}


def _shape(cls: type[Any]) -> _Shape:
    """A record type's resolved field types, its fields, their plans and names, worked out once per type: resolving
    the annotations compiles each one, and the runner parses hundreds of steps, the host thousands of records."""
    got = _SHAPES.get(cls)
    if got is None:  # two threads may both work it out: the same value, either kept
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}
        got = _SHAPES[cls] = (hints, fields, {n: _plan(hints[n]) for n in fields}, frozenset(fields))
    return got


def check(value: Any, hint: Any, where: str, rules: Rules = WIRE) -> Any:
    """``value`` as the type ``hint`` says, or CodecError whose root is ``where``."""
    return _Reader(where, rules).check(value, hint, ())


def decode(cls: type[T], value: Any, where: str, skip: tuple[str, ...] = (), rules: Rules = WIRE) -> T:
    """A dataclass from a JSON object with exactly its fields (``skip``: keys of the object that are not the
    record's, e.g. a log line's ``seq``); CodecError whose root is ``where``."""
    return _Reader(where, rules).record(cls, value, (), skip)


_ENCODED: dict[type[Any], tuple[tuple[str, ...], Any]] = {}
_SCALARS = (str, int, float, bool, type(None))


def encode(record: Any) -> dict[str, Any]:
    """A record as its JSON object: every field, in order, and ``"op"`` first for a tagged one."""
    cls = type(record)
    got = _ENCODED.get(cls)
    if got is None:  # a record type's field names and its OP, once (``dataclasses.fields`` on every record was most
        # of writing a run's orders and a service's log lines); two threads may both work it out: the same value
        got = _ENCODED[cls] = (tuple(f.name for f in dataclasses.fields(record)), getattr(cls, "OP", None))
    names, op = got
    out: dict[str, Any] = {"op": op} if op is not None else {}
    for name in names:
        out[name] = _plain(getattr(record, name))
    return out


def _plain(value: Any) -> Any:
    if type(value) in _SCALARS:  # most values: nothing to convert
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return encode(value)
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, collections.abc.Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")  # file contents after a run: any bytes
    return value
