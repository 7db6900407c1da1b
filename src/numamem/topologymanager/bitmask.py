"""NUMA node bitmasks as plain ints (kubelet ``bitmask.BitMask``, 64 bits).

A mask is an ``int`` whose bit *n* stands for NUMA node *n*. ``None`` is used by
callers for "no affinity" (Go's nil BitMask); every function here takes real
masks only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import combinations

from numamem.errors import InvalidArgumentError

MAX_BIT = 63


def new_mask(bits: Iterable[int]) -> int:
    """``NewBitMask(bits...)``; bits outside 0..63 are an error (kubelet's text)."""
    mask = 0
    for bit in bits:
        if bit < 0 or bit > MAX_BIT:
            raise InvalidArgumentError("bit number must be in range 0-63")
        mask |= 1 << bit
    return mask


def get_bits(mask: int) -> list[int]:
    """``GetBits()``: ascending node ids."""
    bits = []
    n = 0
    while mask:
        if mask & 1:
            bits.append(n)
        mask >>= 1
        n += 1
    return bits


def is_narrower_than(a: int, b: int) -> bool:
    """``IsNarrowerThan``: fewer bits, or as many and a smaller integer value."""
    ca, cb = a.bit_count(), b.bit_count()
    if ca == cb:
        return a < b
    return ca < cb


def iterate_masks_with_bits(bits: Iterable[int]) -> Iterator[tuple[int, tuple[int, ...]]]:
    """``IterateBitMasks``: every non-empty subset, by size, then in combination order,
    as (mask, its ascending bits).

    ``bits`` must be ascending, distinct and in 0..63 (node ids of a machine).
    """
    ordered = list(bits)
    weights = [1 << b for b in ordered]
    for size in range(1, len(ordered) + 1):
        for combo, values in zip(
            combinations(ordered, size), combinations(weights, size), strict=True
        ):
            yield sum(values), combo


def is_subset(small: int, big: int) -> bool:
    return small & ~big == 0
