"""NUMA node sets as plain ints (kubelet ``bitmask.BitMask``).

A mask is an ``int`` whose bit *n* stands for the NUMA node with id *n*. Node
ids are the kernel's (sparse: 0, 8, 250, ...); Python ints have no width, so a
mask represents any id, and comparing masks as integers compares them by node
ids exactly as the kubelet's 64-bit masks do for ids below 64 (``IsNarrowerThan``,
the tie-breaks of the merge). What the kubelet's masks really limit, the
number of nodes, is checked where the topology manager is built
(``max-allowable-numa-nodes``). ``None`` is used by callers for "no affinity"
(Go's nil BitMask); every function here takes real masks only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import combinations

from numamem.errors import InvalidArgumentError


def new_mask(bits: Iterable[int]) -> int:
    """``NewBitMask(bits...)``: the mask of the given node ids (negative ids are an error)."""
    mask = 0
    for bit in bits:
        if bit < 0:
            raise InvalidArgumentError(f"NUMA node id must not be negative, got {bit}")
        mask |= 1 << bit
    return mask


def get_bits(mask: int) -> list[int]:
    """``GetBits()``: ascending node ids."""
    bits = []
    while mask:
        low = mask & -mask
        bits.append(low.bit_length() - 1)
        mask ^= low
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

    ``bits`` must be ascending and distinct (node ids of a machine).
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
