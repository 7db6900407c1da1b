"""Kubernetes resource.Quantity parsing and canonical formatting."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from numamem.errors import QuantityError
from numamem.quantity import Format, Quantity, parse_quantity

# (input, exact value, canonical String())
CANONICAL = [
    ("0", 0, "0"),
    ("1", 1, "1"),
    ("1Gi", 2**30, "1Gi"),
    ("1024Mi", 2**30, "1Gi"),
    ("1.5Gi", 3 * 2**29, "1536Mi"),
    ("1.5", Fraction(3, 2), "1500m"),
    ("100m", Fraction(1, 10), "100m"),
    ("0.1", Fraction(1, 10), "100m"),
    ("1000", 1000, "1k"),
    ("1024", 1024, "1024"),
    ("1048576", 1048576, "1048576"),
    ("1e3", 1000, "1e3"),
    ("1e9", 10**9, "1e9"),
    ("12e6", 12 * 10**6, "12e6"),
    ("1.1e3", 1100, "1100"),
    ("1E", 10**18, "1E"),
    ("1G", 10**9, "1G"),
    ("1.5G", 15 * 10**8, "1500M"),
    ("1Ki", 1024, "1Ki"),
    ("1023Ki", 1023 * 1024, "1023Ki"),
    ("0.5Ki", 512, "512"),
    ("1n", Fraction(1, 10**9), "1n"),
    ("0.1n", Fraction(1, 10**9), "1n"),
    ("1.0000000001", Fraction(1000000001, 10**9), "1000000001n"),
    ("-1", -1, "-1"),
    ("-100m", Fraction(-1, 10), "-100m"),
    ("+5Mi", 5 * 2**20, "5Mi"),
    ("007", 7, "7"),
    ("1.", 1, "1"),
    (".5", Fraction(1, 2), "500m"),
    ("1e-7", Fraction(1, 10**7), "100e-9"),
    ("9Ei", (1 << 63) - 1, "9223372036854775807"),
    ("1e400", 10**400, "10e399"),
    ("2000E", 2 * 10**21, "2000E"),
]

INVALID = [
    "",
    "1.1.1",
    "1i",
    "1Ki1",
    "NaN",
    "nan",
    "inf",
    " 1",
    "1 ",
    "1K",
    "1KB",
    "1ki",
    "1e",
    "1e+",
    "1E+3x",
    "0x10",
    "1,5",
    "1e99999",
    "١٢",
    "1Gi ",
    "--1",
    "1..5",
]


@pytest.mark.parametrize(
    ("text", "value", "canonical"), CANONICAL, ids=[c[0] or "empty" for c in CANONICAL]
)
def test_parse_and_canonical_form(text: str, value: Fraction | int, canonical: str) -> None:
    """Values are exact and String() is Kubernetes' canonical form."""
    q = parse_quantity(text)
    assert q.value == value
    assert str(q) == canonical


@pytest.mark.parametrize("text", INVALID)
def test_malformed_quantities_are_errors_not_zero(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)


@pytest.mark.parametrize("text", ["1" * 5000, "0." + "1" * 5000, "1e" + "1" * 5000])
def test_thousands_of_digits_are_a_quantity_error(text: str) -> None:
    """int() refuses more than 4300 digits with a ValueError: a traceback at start-up before."""
    with pytest.raises(QuantityError) as info:
        parse_quantity(text)
    assert len(str(info.value)) < 300


def test_formats() -> None:
    assert parse_quantity("1Gi").format is Format.BINARY_SI
    assert parse_quantity("1G").format is Format.DECIMAL_SI
    assert parse_quantity("1e9").format is Format.DECIMAL_EXPONENT
    # A binary value below 1 falls back to DecimalSI, as Kubernetes does.
    assert parse_quantity("0.0001Ki").format is Format.DECIMAL_SI


def test_add_to_zero_adopts_operand_format() -> None:
    """NewQuantity(0, DecimalSI) + 1Gi + 2Gi prints 3Gi (the kubelet reservation texts rely on it)."""
    total = Quantity.from_int(0)
    for text in ("1Gi", "2Gi"):
        total = total.add(parse_quantity(text))
    assert str(total) == "3Gi"
    assert str(Quantity.from_int(0).add(parse_quantity("12"))) == "12"
    assert str(Quantity.from_int(0)) == "0"
    # A non-zero receiver keeps its own format.
    assert str(parse_quantity("1000").add(parse_quantity("24"))) == "1024"


def test_int64_conversion() -> None:
    assert parse_quantity("1Gi").as_int64() == 2**30
    with pytest.raises(QuantityError):
        parse_quantity("1e400").as_int64()
    with pytest.raises(QuantityError):
        parse_quantity("1.5").as_int64()
    assert parse_quantity("1.5").value_ceil() == 2
    assert parse_quantity("-1.5").value_ceil() == -2
    assert parse_quantity("100m").milli_value() == 100


@given(st.integers(min_value=-(2**62), max_value=2**62), st.sampled_from(list(Format)))
def test_canonical_form_round_trips(value: int, fmt: Format) -> None:
    """Parsing String() gives back the same value (canonical output is valid input)."""
    q = Quantity.from_int(value, fmt)
    assert parse_quantity(str(q)).value == value


@given(st.integers(min_value=0, max_value=10**12), st.integers(min_value=0, max_value=9))
def test_decimal_fractions_round_trip(units: int, decimals: int) -> None:
    text = f"{units / 10**decimals:.{decimals}f}" if decimals else str(units)
    q = parse_quantity(text)
    assert q.value == Fraction(text)
    assert parse_quantity(str(q)).value == q.value
