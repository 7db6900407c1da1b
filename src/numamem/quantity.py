"""Kubernetes ``resource.Quantity``: parsing, arithmetic and canonical formatting.

Semantics follow ``k8s.io/apimachinery/pkg/api/resource``:

* grammar ``[+-]digits[.digits](suffix)`` with the decimal SI suffixes
  ``n u m "" k M G T P E``, the binary suffixes ``Ki Mi Gi Ti Pi Ei`` and
  decimal exponents ``e<int>``/``E<int>``; anything else is an error, never 0;
* values are exact; a value with more precision than 1n is rounded up (away
  from zero) to the next nano, and a BinarySI value is capped at 2^63-1;
* ``str()`` is Kubernetes' canonical ``String()``: ``1.5`` → ``1500m``,
  ``1.5Gi`` → ``1536Mi``, ``1024`` (BinarySI) → ``1Ki``, zero → ``0``;
* adding to a zero quantity adopts the operand's format (``NewQuantity(0,
  DecimalSI) + 1Gi`` prints ``1Gi``), which the kubelet's reservation error
  texts depend on.

Deliberate deviations (documented, tested):

* exponents beyond ±:data:`MAX_EXPONENT` (1000) and numbers of more than
  :data:`MAX_DIGITS` (1000) digits are rejected (Kubernetes keeps huge exponents
  symbolically; no byte or core count can use a value beyond 2^63, and expanding
  ``1e1000000`` would let a 9-byte request burn the daemon's CPU): every value is
  then an exact number of at most ~2000 digits, which every operation here handles
  in microseconds and ``str()`` prints below Python's 4300-digit conversion limit
  (``1e10000 + 1`` had 10009 and raised ValueError; printing ``1e10000`` took
  0.2 s: issue 38);
* a DecimalSI value above 999E, or a BinarySI value with a factor beyond
  1024^6, is printed with the largest suffix and a longer mantissa instead of
  Go's suffix-less (and therefore wrong) output.
"""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from fractions import Fraction

from numamem.errors import QuantityError, quote

__all__ = ["MAX_DIGITS", "MAX_EXPONENT", "Format", "Quantity", "parse_quantity"]

_MAX_INT64 = (1 << 63) - 1
MAX_EXPONENT = 1000
"""The largest decimal exponent (``e<n>``) a quantity may have, either sign: ``1e1000`` is
far beyond any byte or core count (int64 ends below 1e19), and with :data:`MAX_DIGITS` it
keeps every value (and every sum of values) below ~2000 digits."""
MAX_DIGITS = 1000
"""Digits a quantity's number or exponent may have: far beyond any real quantity, and below
the 4300 digits ``int()`` refuses with a ValueError."""
_NANO = 10**9

_DECIMAL_SUFFIXES: dict[str, int] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_DECIMAL_BY_EXPONENT = {e: s for s, e in _DECIMAL_SUFFIXES.items()}
_BINARY_SUFFIXES: dict[str, int] = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_BINARY_BY_POWER = {p // 10: s for s, p in _BINARY_SUFFIXES.items()}
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")

_FORMAT_ERROR = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


class Format(enum.Enum):
    """How a quantity prefers to be written (``resource.Format``)."""

    DECIMAL_SI = "DecimalSI"
    BINARY_SI = "BinarySI"
    DECIMAL_EXPONENT = "DecimalExponent"


@dataclass(frozen=True, slots=True)
class Quantity:
    """An exact quantity. ``value`` is a multiple of 1e-9 (Kubernetes' nano floor).

    Instances are immutable; arithmetic returns new instances.
    """

    value: Fraction
    format: Format = Format.DECIMAL_SI

    @classmethod
    def from_int(cls, value: int, fmt: Format = Format.DECIMAL_SI) -> Quantity:
        """``resource.NewQuantity(value, fmt)``."""
        return cls(Fraction(value), fmt)

    def is_zero(self) -> bool:
        return self.value == 0

    def add(self, other: Quantity) -> Quantity:
        """``q.Add(other)``: a zero receiver adopts the operand's format."""
        fmt = other.format if self.is_zero() else self.format
        return Quantity(self.value + other.value, fmt)

    def as_int64(self) -> int:
        """The value as an int64, like ``AsInt64``; raises when it is fractional or too big."""
        if self.value.denominator != 1 or not (-_MAX_INT64 - 1 <= self.value <= _MAX_INT64):
            raise QuantityError(f"quantity {self} cannot be represented as int64")
        return int(self.value)

    def value_ceil(self) -> int:
        """``Value()``: the value rounded up to an integer (away from zero)."""
        v = self.value
        if v.denominator == 1:
            return int(v)
        whole = v.numerator // v.denominator
        return whole + 1 if v > 0 else whole

    def milli_value(self) -> int:
        """``MilliValue()``: the value in thousandths, rounded up."""
        return Quantity(self.value * 1000, self.format).value_ceil()

    def __str__(self) -> str:
        return _canonical(self)

    def __repr__(self) -> str:
        return f"Quantity({_canonical(self)!r})"


def parse_quantity(text: str) -> Quantity:
    """Parse a Kubernetes quantity string; raise :class:`QuantityError` if malformed.

    Short strings are memoised (quantities are immutable, and pods repeat the
    same few: "1", "100Mi", ...); long ones, which could be large numbers, are not.
    """
    if isinstance(text, str) and len(text) <= _CACHED_LENGTH:
        return _parse_cached(text)
    return _parse(text)


_CACHED_LENGTH = 24


@functools.lru_cache(maxsize=1024)
def _parse_cached(text: str) -> Quantity:
    return _parse(text)


def _parse(text: str) -> Quantity:
    if not isinstance(text, str) or not text:
        raise QuantityError(_FORMAT_ERROR)
    if text == "0":
        return Quantity(Fraction(0), Format.DECIMAL_SI)
    positive, num, denom, suffix = _split(text)
    if len(num) + len(denom) > MAX_DIGITS or len(suffix) > MAX_DIGITS:
        raise QuantityError(f"quantity has more than {MAX_DIGITS} digits: got {quote(text)}")
    base, exponent, fmt = _interpret_suffix(suffix)
    magnitude = Fraction(int(num + denom), 10 ** len(denom)) if (num + denom) else Fraction(0)
    if base == 10:
        magnitude *= Fraction(10) ** exponent
    else:
        magnitude *= 1 << exponent
    # Round non-zero values up to the next nano ("if you want some, you get some").
    scaled = magnitude * _NANO
    if scaled.denominator != 1:
        magnitude = Fraction(-(-scaled.numerator // scaled.denominator), _NANO)
    if fmt is Format.BINARY_SI and magnitude > _MAX_INT64:
        magnitude = Fraction(_MAX_INT64)
    if fmt is Format.BINARY_SI and 0 < magnitude < 1:
        fmt = Format.DECIMAL_SI
    return Quantity(magnitude if positive else -magnitude, fmt)


def _split(text: str) -> tuple[bool, str, str, str]:
    """``parseQuantityString``: sign, numerator digits, denominator digits, suffix."""
    pos, end = 0, len(text)
    positive = True
    if text[0] in "+-":
        positive = text[0] == "+"
        pos = 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "", ""
    start = pos
    while pos < end and text[pos].isdigit() and text[pos].isascii():
        pos += 1
    num = text[start:pos] or "0"
    denom = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos].isdigit() and text[pos].isascii():
            pos += 1
        denom = text[start:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos].isdigit() and text[pos].isascii():
        pos += 1
    if pos < end:
        raise QuantityError(f"{_FORMAT_ERROR}: got {quote(text)}")
    return positive, num, denom, text[suffix_start:]


def _interpret_suffix(suffix: str) -> tuple[int, int, Format]:
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], Format.DECIMAL_SI
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], Format.BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:]
        body = digits[1:] if digits[0] in "+-" else digits
        if body.isdigit() and body.isascii():
            exponent = int(digits)
            if abs(exponent) > MAX_EXPONENT:
                raise QuantityError(
                    f"quantity exponent {exponent} is out of range (at most ±{MAX_EXPONENT})"
                )
            return 10, exponent, Format.DECIMAL_EXPONENT
    raise QuantityError(f"unable to parse quantity's suffix: {quote(suffix)}")


def _remove_factors(value: int, base: int) -> tuple[int, int]:
    """``(rest, times)`` with ``value == rest * base**times`` and ``base`` not dividing
    ``rest`` (zero: ``(0, 0)``), in O(log times) divisions by ``base**(2**k)`` (one division
    per factor took 0.2 s for the 10^10000 of ``1e10000``)."""
    if value == 0:
        return 0, 0
    times = 0
    powers = [(base, 1)]  # base**(2**k), 2**k
    while value % powers[-1][0] == 0:
        power, count = powers[-1]
        value //= power
        times += count
        powers.append((power * power, count * 2))
    for power, count in reversed(powers[:-1]):
        if value % power == 0:
            value //= power
            times += count
    return value, times


def _canonical(q: Quantity) -> str:
    """``Quantity.String()`` (``CanonicalizeBytes`` plus the sign)."""
    if q.value == 0:
        return "0"
    fmt = q.format
    if fmt is Format.BINARY_SI and (-1024 < q.value < 1024 or q.value.denominator != 1):
        fmt = Format.DECIMAL_SI
    sign = "-" if q.value < 0 else ""
    magnitude = abs(q.value)
    if fmt is Format.BINARY_SI:
        mantissa, power = _remove_factors(int(magnitude), 1024)
        if power > 6:
            mantissa, power = mantissa * 1024 ** (power - 6), 6
        return f"{sign}{mantissa}{_BINARY_BY_POWER.get(power, '')}"
    # Decimal: value = unscaled * 10^-9 exactly (parse rounded it to nano).
    unscaled = magnitude * _NANO
    mantissa, times = _remove_factors(unscaled.numerator // unscaled.denominator, 10)
    exponent = times - 9
    while exponent % 3 != 0:
        mantissa *= 10
        exponent -= 1
    if fmt is Format.DECIMAL_EXPONENT:
        return f"{sign}{mantissa}" + (f"e{exponent}" if exponent else "")
    if exponent > 18:
        mantissa, exponent = mantissa * 10 ** (exponent - 18), 18
    return f"{sign}{mantissa}{_DECIMAL_BY_EXPONENT[exponent]}"


def format_bytes(n: int) -> str:
    """Bytes for people, one style everywhere (explain reasons, tables, refusals).

    Exact when the largest binary unit divides (``1073741824`` -> ``1Gi``),
    else two decimals of it (``4926017536`` -> ``4.59Gi``); below 1Ki, the number.
    """
    for unit, size in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if abs(n) >= size:
            if n % size == 0:
                return f"{n // size}{unit}"
            if abs(n) >= 1 << 1000:  # beyond a float: two decimals, truncated
                whole, cents = divmod(abs(n) * 100 // size, 100)
                return f"{'-' if n < 0 else ''}{whole}.{cents:02d}{unit}"
            return f"{n / size:.2f}{unit}"
    return str(n)


def format_bytes_exact(n: int) -> str:
    """:func:`format_bytes` with the exact count beside it, the one form of every message that
    names a size an operator may compare or copy: ``40Gi (42949672960)``; ``0``; a size
    below 1Ki is its number alone."""
    text = format_bytes(n)
    return text if text == str(n) else f"{text} ({n})"
