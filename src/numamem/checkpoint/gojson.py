"""Go ``encoding/json`` behaviour that the kubelet checkpoint depends on.

Encoding: :func:`go_string` escapes like ``json.Marshal`` (HTML-safe ``<>&``,
U+2028/U+2029, ``\\b \\f \\n \\r \\t``, other controls as ``\\u00XX``, invalid
UTF-8 as U+FFFD, other non-ASCII raw).

Decoding: :func:`parse` reads JSON into a tree that keeps what Go's decoder
needs: objects as ordered key/value pairs (duplicates kept, later wins), number
literals with a fraction or exponent marked (:class:`Float`), ``NaN`` and
``Infinity`` refused, lone surrogate escapes turned into U+FFFD. The typed
helpers (:class:`Decoder`) then apply Go's rules: case-insensitive field names
(an exact match is preferred), unknown fields ignored, ``null`` leaves a
struct field alone but makes a map, slice or pointer nil, integers must be
integral and in range, and errors read like Go's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from numamem.errors import CheckpointError, quote

_UINT64_MAX = (1 << 64) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
T = TypeVar("T")

# --- encoding -----------------------------------------------------------------

_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\b": "\\b",
    "\f": "\\f",
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_NEEDS_ESCAPE = re.compile('["\\\\<>&\u2028\u2029\x00-\x1f\ud800-\udfff]')
_NEEDS_CALLBACK = re.compile("[<>&\u2028\u2029\x00-\x1f\ud800-\udfff]")
"""The characters of :data:`_NEEDS_ESCAPE` but the quote and the backslash."""


def _escape(match: re.Match[str]) -> str:
    ch = match.group(0)
    if ch in _ESCAPES:
        return _ESCAPES[ch]
    if "\ud800" <= ch <= "\udfff":
        return "\ufffd"
    return f"\\u{ord(ch):04x}"


def go_string(text: str) -> str:
    """``text`` as Go's ``json.Marshal`` writes a string, quotes included."""
    if _NEEDS_CALLBACK.search(text) is None:
        # Only quotes and backslashes to escape: two C passes instead of a Python call per
        # match (a V3 file's ``data`` is a whole JSON text, with a quote every few bytes).
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return '"' + _NEEDS_ESCAPE.sub(_escape, text) + '"'


# --- parsing ------------------------------------------------------------------


class Object(list[tuple[str, Any]]):
    """A JSON object as (key, value) pairs in document order."""


@dataclass(frozen=True)
class Float:
    """A number literal with a fraction or exponent (Go refuses it for integer fields)."""

    text: str


class GoJSONError(CheckpointError):
    """A decode error with Go's wording."""


_SURROGATE = re.compile("[\ud800-\udfff]")


def _fix(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value) if _SURROGATE.search(value) else value
    if isinstance(value, Object):
        return Object((_fix(k), _fix(v)) for k, v in value)
    if isinstance(value, list):
        return [_fix(v) for v in value]
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"invalid character '{name[0]}' looking for beginning of value")


def parse(data: bytes | str) -> Any:
    """Parse JSON text; syntax errors raise :class:`GoJSONError` with Go-like text."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    try:
        value = json.loads(
            text, object_pairs_hook=Object, parse_float=Float, parse_constant=_no_constant
        )
        return _fix(value)
    except json.JSONDecodeError as err:
        raise GoJSONError(_syntax_message(err)) from err
    except ValueError as err:
        raise GoJSONError(str(err)) from err
    except RecursionError as err:  # a damaged file nested deeper than Python recurses
        raise GoJSONError("the JSON is nested too deep") from err


def _syntax_message(err: json.JSONDecodeError) -> str:
    rest = err.doc[err.pos :]
    if not rest.strip() or err.msg.startswith("Unterminated string"):
        return "unexpected end of JSON input"
    ch = rest.lstrip()[0]
    return f"invalid character {quote(ch)} at offset {err.pos}: {err.msg}"


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, Float)):
        text = value.text if isinstance(value, Float) else str(value)
        return f"number {text}"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Object):
        return "object"
    return "array"


class Decoder:
    """Typed extraction with Go's rules; ``path`` names the field in error messages."""

    @staticmethod
    def type_error(value: Any, go_type: str, path: str) -> GoJSONError:
        where = f"Go struct field {path}" if path else "Go value"
        return GoJSONError(f"json: cannot unmarshal {_kind(value)} into {where} of type {go_type}")

    @classmethod
    def uint64(cls, value: Any, path: str, go_type: str = "uint64") -> int:
        if type(value) is not int or not 0 <= value <= _UINT64_MAX:
            raise cls.type_error(value, go_type, path)
        return value

    @classmethod
    def int64(cls, value: Any, path: str, go_type: str = "int") -> int:
        if type(value) is not int or not _INT64_MIN <= value <= _INT64_MAX:
            raise cls.type_error(value, go_type, path)
        return value

    @classmethod
    def string(cls, value: Any, path: str, go_type: str = "string") -> str:
        if not isinstance(value, str):
            raise cls.type_error(value, go_type, path)
        return value

    @classmethod
    def int_slice(cls, value: Any, path: str) -> list[int] | None:
        if value is None:
            return None
        if not isinstance(value, list) or isinstance(value, Object):
            raise cls.type_error(value, "[]int", path)
        return [0 if v is None else cls.int64(v, path) for v in value]

    @classmethod
    def obj(cls, value: Any, go_type: str, path: str) -> Object:
        if not isinstance(value, Object):
            raise cls.type_error(value, go_type, path)
        return value

    @classmethod
    def array(cls, value: Any, go_type: str, path: str) -> list[Any]:
        if not isinstance(value, list) or isinstance(value, Object):
            raise cls.type_error(value, go_type, path)
        return value

    @staticmethod
    def fields(obj: Object, names: list[str]) -> list[tuple[str, Any]]:
        """(Go field JSON name, value) for each pair that names a field, in document order."""
        result = []
        for key, value in obj:
            if key in names:
                result.append((key, value))
                continue
            folded = key.casefold()
            for name in names:
                if name.casefold() == folded:
                    result.append((name, value))
                    break
        return result

    @classmethod
    def int_map_key(cls, key: str, path: str) -> int:
        body = key[1:] if key[:1] in "+-" else key
        if not body.isascii() or not body.isdigit():
            raise GoJSONError(f"json: cannot unmarshal number {key} into Go value of type int")
        value = int(key)
        if not _INT64_MIN <= value <= _INT64_MAX:
            raise GoJSONError(f"json: cannot unmarshal number {key} into Go value of type int")
        return value

    @classmethod
    def merge_map(
        cls,
        existing: dict[Any, T] | None,
        value: Any,
        go_type: str,
        path: str,
        key: Callable[[str], Any],
        element: Callable[[Any, str], T],
    ) -> dict[Any, T] | None:
        """Decode an object into a map: null -> nil; keys merge into an existing map."""
        if value is None:
            return None
        obj = cls.obj(value, go_type, path)
        result = existing if existing is not None else {}
        for k, v in obj:
            result[key(k)] = element(v, path)
        return result
