"""Fast paths of the Allocate path against the definitions they replace (hypothesis)."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from numamem.errors import AllocationError
from numamem.memorymanager.requests import _bytes
from numamem.quantity import Quantity


def _bytes_reference(q: Quantity) -> int:
    """The definition: the Fraction compared as a Fraction."""
    if q.value.denominator != 1 or not (-(1 << 63) <= q.value < (1 << 63)):
        raise AllocationError("[memorymanager] failed to represent quantity as int64")
    if q.value < 0:
        raise AllocationError(f"[memorymanager] a memory request may not be negative, got {q}")
    return int(q.value)


def _outcome(q: Quantity, f: Callable[[Quantity], int]) -> tuple[str, object]:
    try:
        return "value", f(q)
    except AllocationError as err:
        return "error", str(err)


@given(
    st.one_of(
        st.integers(-(1 << 65), 1 << 65),
        st.sampled_from([(1 << 63) - 1, 1 << 63, -(1 << 63), -(1 << 63) - 1, 0, -1]),
    ),
    st.sampled_from([1, 1, 2, 3, 10**9]),
)
def test_request_bytes_is_the_fraction_definition(numerator: int, denominator: int) -> None:
    q = Quantity(Fraction(numerator, denominator))
    assert _outcome(q, _bytes) == _outcome(q, _bytes_reference)


def test_request_bytes_texts() -> None:
    with pytest.raises(AllocationError, match="failed to represent quantity as int64"):
        _bytes(Quantity(Fraction(1, 2)))
    with pytest.raises(AllocationError, match="may not be negative"):
        _bytes(Quantity(Fraction(-5)))
