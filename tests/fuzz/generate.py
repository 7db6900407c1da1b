"""Hostile values, random messages and mutations, from the protobuf descriptors alone.

Everything takes a :class:`random.Random`, so a request is a function of its seed.
Values: empty, 64 KiB, unicode, NUL, control and path-like strings, short texts that
name a large amount of work (:data:`AMPLIFIERS`: ``0-1048576``, ``1e1000000``); 0, -1, 2^31,
2^63-1, 2^64-1 (as far as the field's type holds them); NaN and ±inf; repeated
fields and maps up to :data:`MAX_REPEATED` elements.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message

from tests.fuzz.amplify import AMPLIFIERS

MAX_REPEATED = 200
BIG = 65536

STRINGS: tuple[str, ...] = (
    "",
    "a",
    "a" * BIG,
    "\x00",
    "a\x00b",
    "\n\r\t\x1b[31m\x7f",
    "../../../../etc/passwd",
    "/dev/null",
    "/proc/self/mem",
    "a/b",
    "C:\\Windows\\system32",
    "%s%n%x%d",
    "{}",
    "'\"`",
    "1e400",
    "NaN",
    "-1",
    "9" * 5000,
    "0-1",
    "0x10",
    "١٢",
    "é" * 1024,
    "🙂" * 1025,
    "\u200b\u202e\ufeff",
    "\U0010ffff",
    "x" * 1024,
    "x" * 1025,
    "Always",
    "Guaranteed",
    "memory",
    "hugepages-2Mi",
    *AMPLIFIERS,
)

_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_ENUM: (-(2**31), 2**31 - 1),
    FieldDescriptor.TYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1),
    FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
_INTS = (0, -1, 1, 2, 7, 64, 255, 2**31 - 1, 2**31, -(2**31), 2**63 - 1, -(2**63), 2**64 - 1)
_FLOATS = (0.0, -0.0, -1.0, 1.0, 0.5, math.nan, math.inf, -math.inf, 1e308, 5e-324, -1e308)


def text(rng: random.Random) -> str:
    """A hostile string: one of :data:`STRINGS`, random unicode, or a mix of both."""
    roll = rng.random()
    if roll < 0.6:
        return rng.choice(STRINGS)
    if roll < 0.9:
        return "".join(_char(rng) for _ in range(rng.randrange(0, 40)))
    return rng.choice(STRINGS)[:40] + "".join(_char(rng) for _ in range(rng.randrange(1, 8)))


def _char(rng: random.Random) -> str:
    while True:
        code = rng.choice((rng.randrange(0, 128), rng.randrange(0, 0x110000)))
        if not 0xD800 <= code < 0xE000:  # surrogates cannot be UTF-8 encoded
            return chr(code)


def scalar(field: FieldDescriptor, rng: random.Random) -> Any:
    """A hostile value that the field's type holds."""
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        return text(rng)
    if kind == FieldDescriptor.TYPE_BYTES:
        return rng.randbytes(rng.choice((0, 1, 16, BIG)))
    if kind == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if kind in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        if rng.random() < 0.7:
            return rng.choice(_FLOATS)
        return rng.uniform(-1e6, 1e6)
    lo, hi = _INT_RANGES[kind]
    if rng.random() < 0.8:
        return rng.choice([v for v in _INTS if lo <= v <= hi])
    return rng.randint(lo, hi)


def count(rng: random.Random, depth: int) -> int:
    """How many elements a repeated field or map gets: mostly a few, sometimes up to 200."""
    if depth <= 1 and rng.random() < 0.1:
        return rng.randint(0, MAX_REPEATED)
    return rng.randint(0, 4)


def is_map(field: FieldDescriptor) -> bool:
    return field.message_type is not None and field.message_type.GetOptions().map_entry


def random_message(cls: type[Message], rng: random.Random, depth: int = 0) -> Message:
    """A message of ``cls`` with every field set (or not) to hostile values, nested a few deep."""
    msg = cls()
    fill(msg, rng, depth)
    return msg


def fill(msg: Message, rng: random.Random, depth: int = 0) -> None:
    for field in msg.DESCRIPTOR.fields:
        if rng.random() < (0.5 if depth < 3 else 0.15):
            set_random(msg, field, rng, depth)


def set_random(msg: Message, field: FieldDescriptor, rng: random.Random, depth: int) -> None:
    """Replace ``field`` of ``msg`` with random content (a map or list of :func:`count` items)."""
    msg.ClearField(field.name)
    target = getattr(msg, field.name)
    if is_map(field):
        key_field = field.message_type.fields_by_name["key"]
        value_field = field.message_type.fields_by_name["value"]
        for _ in range(count(rng, depth)):
            key = scalar(key_field, rng)
            if value_field.message_type is not None:
                if depth < 5:
                    fill(target[key], rng, depth + 1)
                else:
                    target[key].SetInParent()
            else:
                target[key] = scalar(value_field, rng)
    elif field.message_type is not None:
        if depth >= 5:
            return
        if field.is_repeated:
            for _ in range(count(rng, depth)):
                fill(target.add(), rng, depth + 1)
        else:
            target.SetInParent()
            fill(target, rng, depth + 1)
    elif field.is_repeated:
        target.extend(scalar(field, rng) for _ in range(count(rng, depth)))
    else:
        setattr(msg, field.name, scalar(field, rng))


def positions(msg: Message, depth: int = 0) -> Iterator[tuple[Message, FieldDescriptor, int]]:
    """Every field of ``msg`` and of the messages inside it (set or not), with its depth."""
    for field in msg.DESCRIPTOR.fields:
        yield msg, field, depth
        value = getattr(msg, field.name)
        if is_map(field):
            if field.message_type.fields_by_name["value"].message_type is not None:
                for key in list(value):
                    yield from positions(value[key], depth + 1)
        elif field.message_type is not None:
            if field.is_repeated:
                for item in value:
                    yield from positions(item, depth + 1)
            elif msg.HasField(field.name):
                yield from positions(value, depth + 1)


def mutate(msg: Message, rng: random.Random, times: int) -> list[str]:
    """Mutate ``times`` fields of ``msg`` in place; returns what was done, for reports."""
    done = []
    for _ in range(times):
        where = list(positions(msg))
        if not where:
            break
        parent, field, depth = rng.choice(where)
        done.append(
            f"{parent.DESCRIPTOR.name}.{field.name}: {_mutate_field(parent, field, rng, depth)}"
        )
    return done


def _mutate_field(msg: Message, field: FieldDescriptor, rng: random.Random, depth: int) -> str:
    roll = rng.random()
    if roll < 0.1:
        msg.ClearField(field.name)
        return "cleared"
    target = getattr(msg, field.name)
    if field.is_repeated and not is_map(field) and len(target) and roll < 0.3:
        # Grow the list by copies of one of its elements (a pod of 200 containers).
        first = target[rng.randrange(len(target))]
        grow = rng.randint(1, MAX_REPEATED)
        if field.message_type is not None:
            for _ in range(grow):
                target.add().CopyFrom(first)
        else:
            target.extend([first] * grow)
        return f"{grow} more copies"
    if field.is_repeated and not is_map(field) and field.message_type is None and roll < 0.5:
        target.append(scalar(field, rng))
        return "one more hostile element"
    if not field.is_repeated and field.message_type is None:
        setattr(msg, field.name, scalar(field, rng))
        return "hostile value"
    set_random(msg, field, rng, depth)
    return "random content"


def describe(msg: Message, limit: int = 600) -> str:
    """A short, printable description of a request for failure reports."""
    body = str(msg).replace("\n", " ")
    if len(body) > limit:
        body = f"{body[:limit]}... ({msg.ByteSize()} bytes)"
    return f"{msg.DESCRIPTOR.name} {{ {body} }}"


# --- bytes that are no message ---------------------------------------------------------


def _bad_utf8(cls: type[Message]) -> bytes | None:
    """A top-level string field of ``cls`` holding invalid UTF-8 (a Go or C++ client can send
    it; protobuf-python refuses to), or None when ``cls`` has no string field."""
    for field in cls.DESCRIPTOR.fields:
        if field.type == FieldDescriptor.TYPE_STRING:
            value = b"a\xff\xfe\xc0"
            return bytes([(field.number << 3) | 2]) + bytes([len(value)]) + value
    return None


MALFORMED: tuple[tuple[str, bytes], ...] = (
    ("a truncated varint tag", b"\xff\xff\xff"),
    ("field number 0", b"\x00"),
    ("wire type 7", b"\x0f"),
    ("a length beyond the end", b"\x0a\x05ab"),
    ("an unterminated group", b"\x0b"),
)
"""Bytes that decode as no message of any type, with what is wrong with them."""


def malformed(cls: type[Message]) -> list[tuple[str, bytes]]:
    """:data:`MALFORMED`, and invalid UTF-8 in a string field where ``cls`` has one: every
    way the fuzzer breaks the wire format of a request of type ``cls``."""
    out = list(MALFORMED)
    utf8 = _bad_utf8(cls)
    if utf8 is not None:
        out.append(("invalid UTF-8 in a string field", utf8))
    return out


def undecodable(cls: type[Message], valid: Message, rng: random.Random) -> tuple[str, bytes]:
    """Bytes that do not decode as ``cls``, and what they are: one of :func:`malformed`,
    ``valid``'s encoding with a dangling byte, or random bytes that happen not to decode."""
    roll = rng.random()
    if roll < 0.4:
        return rng.choice(malformed(cls))
    if roll < 0.7:
        return "a valid request and a dangling varint byte", valid.SerializeToString() + b"\x80"
    for _ in range(100):
        data = rng.randbytes(rng.randint(1, 64))
        try:
            cls.FromString(data)
        except DecodeError:
            return "random bytes", data
    return MALFORMED[0]
