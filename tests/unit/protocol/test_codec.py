"""The one strict codec: every type it reads, refused inputs with their JSON path, and encode as its inverse."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Optional, Union

import pytest

from grader.protocol import codec
from grader.protocol.codec import CodecError


@dataclass(frozen=True)
class _A:
    OP: ClassVar[str] = "a"
    n: int


@dataclass(frozen=True)
class _B:
    OP: ClassVar[str] = "b"
    s: str = ""


@dataclass(frozen=True)
class _Rec:
    flag: bool
    ratio: float
    kind: Literal["x", "y"]
    names: tuple[str, ...]
    ports: dict[str, tuple[int, ...]]
    step: Union[_A, _B]
    maybe: Optional[int] = None


REC = _Rec(flag=True, ratio=0.5, kind="x", names=("a",), ports={"h": (80, 443)}, step=_B("s"), maybe=3)


def test_encode_then_decode_is_the_identity_and_tags_go_first() -> None:
    value = codec.encode(REC)
    assert value["step"] == {"op": "b", "s": "s"}
    assert codec.decode(_Rec, value, "rec") == REC


@pytest.mark.parametrize("key, bad, says", [
    ("flag", "true", "rec.flag: expected bool, got str"),
    ("flag", 1, "rec.flag: expected bool, got int"),
    ("ratio", True, "rec.ratio: expected float, got bool"),
    ("kind", "z", "rec.kind: 'z' is not one of ['x', 'y']"),
    ("names", "a", "rec.names: expected a list, got str"),
    ("ports", {"h": [80, "443"]}, "rec.ports.h[1]: expected int, got str"),
    ("step", {"op": "c"}, "rec.step: unknown op 'c'"),
    ("step", {"op": "a"}, "rec.step: missing field 'n'"),
    ("maybe", "3", "rec.maybe: expected int, got str"),
])  # fmt: skip
def test_a_wrong_value_is_refused_with_its_path(key: str, bad: object, says: str) -> None:
    value = codec.encode(REC)
    value[key] = bad
    with pytest.raises(CodecError) as caught:
        codec.decode(_Rec, value, "rec")
    assert str(caught.value) == says
    assert codec.wire_path(caught.value.root, caught.value.segments) + ": " + caught.value.problem == says


def test_unknown_and_missing_fields_are_refused_but_defaults_may_be_left_out() -> None:
    value = codec.encode(REC)
    del value["maybe"]
    assert codec.decode(_Rec, value, "rec").maybe is None
    with pytest.raises(CodecError, match=r"rec: unknown field\(s\) \['extra'\]"):
        codec.decode(_Rec, {**value, "extra": 1}, "rec")
    del value["flag"]
    with pytest.raises(CodecError, match="rec: missing field 'flag'"):
        codec.decode(_Rec, value, "rec")


@dataclass(frozen=True)
class _Run:
    data: bytes
    seconds: float
    extra: dict[str, Any]
    note: str = ""


def test_the_run_services_rules_want_every_field_and_finite_numbers_and_carry_bytes_as_base64() -> None:
    run = _Run(b"\x00\xffsecret", 1.5, {"k": [1, None]}, "n")
    value = codec.encode(run)
    assert value["data"] == "AP9zZWNyZXQ="
    assert codec.decode(_Run, value, "$", rules=codec.EVERY_FIELD) == run
    del value["note"]
    assert codec.decode(_Run, value, "$").note == ""  # the wire's rules: a default may be left out
    with pytest.raises(CodecError) as caught:
        codec.decode(_Run, value, "$", rules=codec.EVERY_FIELD)
    assert (caught.value.code, caught.value.segments, caught.value.names) == ("missing", (), ("note",))
    for key, bad, code, at in (("seconds", float("nan"), "finite", ("seconds",)), ("data", "!!", "base64", ("data",)),
                               ("extra", {"k": [float("inf")]}, "finite", ("extra", "k", 0))):
        with pytest.raises(CodecError) as caught:
            codec.decode(_Run, {**codec.encode(run), key: bad}, "$", rules=codec.EVERY_FIELD)
        assert (caught.value.code, caught.value.segments) == (code, at)


def test_transport_and_the_wire_share_this_codec_and_keep_their_own_words() -> None:
    """One decoder: the run service's reader has none of its own, and says the codec's errors its way."""
    from grader.core import transport
    from grader.protocol import wire

    assert not any(hasattr(transport, n) for n in ("_scalar", "_json_value")) and not hasattr(wire, "_check")
    with pytest.raises(transport.TransportError, match=r"^\$\.flag: expected a boolean, got a string$"):
        transport._record(_Rec, {**codec.encode(REC), "flag": "true"}, "$")
    with pytest.raises(wire.WireError, match=r"^rec\.flag: expected bool, got str$"):
        wire._object(_Rec, {**codec.encode(REC), "flag": "true"}, "rec")


@dataclass(frozen=True)
class _Plain:
    a: int
    b: Optional[str] = None


@dataclass(frozen=True)
class _Tagged:
    OP: ClassVar[str] = "t"
    b: str
    inner: tuple[_Plain, ...] = ()


@dataclass(frozen=True)
class _Subclass(_Plain):
    c: bytes = b""


def test_each_record_type_is_encoded_with_its_own_fields_whatever_was_encoded_before() -> None:
    """``encode`` keeps each type's field names and OP: a cache keyed by anything but the type itself (a parent's
    fields for its subclass, the first record's OP for every record) is the gamed version this test catches."""
    for _ in range(2):  # the second round reads what the first kept
        assert codec.encode(_Plain(1)) == {"a": 1, "b": None}
        assert list(codec.encode(_Tagged("x", (_Plain(2, "y"),)))) == ["op", "b", "inner"]
        assert codec.encode(_Tagged("x", (_Plain(2, "y"),))) == {"op": "t", "b": "x", "inner": [{"a": 2, "b": "y"}]}
        assert codec.encode(_Subclass(3, None, b"\x00\xff")) == {"a": 3, "b": None, "c": "AP8="}
        assert codec.encode(_Plain(True)) == {"a": True, "b": None}  # values pass as they are: the type is the reader's
