"""Every distinct nonzero AND of one mask per list: the candidates of the hint merge's
non-preferred search (:mod:`numamem.topologymanager.merge`).

The lists are first reduced without changing their ANDs: every mask is cut to the nodes
every list can still offer (a one-mask list cuts all others), lists that became the whole
remaining mask are dropped, and repeated lists count at most n times (an AND of more
members of one list is already an AND of n of them). Their distinct ANDs are then taken
list by list, smallest first, pairwise; once a pairwise step would cost more than a
counting step, on up to :data:`MOBIUS_MAX_NODES` remaining nodes the rest is counted
instead: for every node set, how many choices AND to exactly it (superset zeta transform
of each list, their product, Möbius inversion: O(n · 2^n) per list, whatever the list
sizes). Exact either way; every step is charged to the caller's
:class:`~numamem.work.Work`. Pure functions.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

from numamem.topologymanager import bitmask
from numamem.work import Work

MOBIUS_MAX_NODES = 16
"""Remaining nodes up to which the distinct ANDs may be counted (2^n entries per list)."""
PAIRWISE_COST_FACTOR = 1.0
"""Pairwise ANDs are taken while they cost at most this many counting steps (tests set 0
to count always)."""


def distinct_meets(lists: Sequence[set[int]], default: int, work: Work) -> set[int]:
    """Every nonzero AND of one mask per list, the masks cut to ``default`` ({default} when
    there are no lists); see the module docstring for the reductions and the two methods."""
    g = default
    pending = [s - {0} for s in lists]
    while True:
        if any(not s for s in pending):
            return set()  # every choice through that list ANDs to nothing
        work.spend(sum(len(s) for s in pending))
        cut = g
        for s in pending:
            union = 0
            for m in s:
                union |= m
            cut &= union
        if cut == g:
            break
        g = cut
        if not g:
            return set()
        pending = [{m & g for m in s} - {0} for s in pending]
    n = g.bit_count()
    counted = Counter(frozenset(s) for s in pending if s != {g})
    reduced = sorted((s for s, times in counted.items() for _ in range(min(times, n))), key=len)
    current = {g}
    count_cost = n << n if n <= MOBIUS_MAX_NODES else None
    for index, masks in enumerate(reduced):
        pairs = len(current) * len(masks)
        if count_cost is not None and pairs > PAIRWISE_COST_FACTOR * count_cost:
            return _meets_by_counting(current, reduced[index:], g, work)
        work.spend(pairs)
        current = {a & b for a in current for b in masks}
        current.discard(0)
        if not current:
            return set()
    return current


def _meets_by_counting(
    start: set[int], lists: Sequence[frozenset[int]], g: int, work: Work
) -> set[int]:
    """The nonzero ANDs of one mask of ``start`` and one of each list, by the zeta/Möbius
    transform over the nodes of ``g`` (every mask lies within ``g``)."""
    nodes = bitmask.get_bits(g)
    n = len(nodes)
    size = 1 << n
    position = {node: i for i, node in enumerate(nodes)}

    def compress(mask: int) -> int:
        out = 0
        for bit in bitmask.get_bits(mask):
            out |= 1 << position[bit]
        return out

    def zeta_of(masks: Iterator[int] | set[int] | frozenset[int]) -> list[int]:
        counts = [0] * size
        for m in masks:
            counts[compress(m)] += 1
        work.spend(n * size)
        return _superset_zeta(counts, n)

    work.spend(len(start) * n)
    product = zeta_of(start)
    for masks in lists:
        work.spend(len(masks) * n + size)
        product = list(map(operator.mul, product, zeta_of(masks)))
    work.spend(n * size)
    exact = _superset_mobius(product, n)
    out = set()
    for index in range(1, size):
        if exact[index] > 0:
            out.add(sum(1 << nodes[i] for i in range(n) if index >> i & 1))
    return out


def _superset_zeta(values: list[int], n: int) -> list[int]:
    """out[S] = sum of values[T] over T containing S."""
    return _superset_transform(values, n, operator.add)


def _superset_mobius(values: list[int], n: int) -> list[int]:
    """The inverse of :func:`_superset_zeta`."""
    return _superset_transform(values, n, operator.sub)


def _superset_transform(values: list[int], n: int, combine: Callable[[int, int], int]) -> list[int]:
    """Fold each set's value with those of its one-larger supersets, one node at a time."""
    out = list(values)
    size = len(out)
    for i in range(n):
        step = 1 << i
        for base in range(0, size, step << 1):
            lo, hi = base, base + step
            out[lo:hi] = map(combine, out[lo:hi], out[hi : hi + step])
    return out
