"""The searches over a rule-given hint list that never list it, and :class:`HintSpace`.

kubelet lists every hint and then scans the list: ``findBestHint`` (a preferred
hint first, then the narrowest, ties by integer value), ``extendTopologyManagerHint``
(the same over the hints that contain the topology manager's mask), and the
merge's picks (:mod:`numamem.topologymanager.merge`). These functions find the
same answers from the structure of :class:`~numamem.memorymanager.search.rules.HintRules`
(singles, specials and up-sets, see :mod:`numamem.memorymanager.search.rules`):
``findBestHint`` by size, smallest first, each size's smallest member found directly; the
merge's picks by searches over the specials and the up-sets. They change nothing but the
space's :class:`~numamem.work.Work`, which they charge for every step, and read the
space's memoised singles, specials and up-sets (single nodes are tested lazily
until ``singles`` is built). :class:`HintSpace` is the rules with these searches as
methods of the same names: the :class:`~numamem.topologymanager.hintfamily.HintFamily` the merge
takes, and what the Static policy and a resize search.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator

from numamem.memorymanager.search.rules import HintRules
from numamem.topologymanager.hintfamily import HintFamily, Order, size_rank
from numamem.topologymanager.policy import TopologyHint


def min_value_member(space: HintRules, k: int, base: int = 0) -> int | None:
    """The hint of size ``k`` with the smallest integer value that contains ``base``.

    Of size 1 only singles exist (specials and up-sets have two nodes or more), and they
    ascend: the first single that contains ``base`` is the answer, found without testing
    the nodes after it nor building the specials or the up-sets."""
    if k == 1:
        return next((1 << n for n in space.iter_singles() if base & ~(1 << n) == 0), None)
    found = [m for m in space.specials if m.bit_count() == k and base & ~m == 0]
    upsets = space.upsets
    if base & ~upsets.mask == 0:
        first = next(upsets.colex(k, base), None)
        if first is not None:
            found.append(first)
    return min(found) if found else None


def best_superset(space: HintRules, mask: int) -> TopologyHint | None:
    """``findBestHint`` over the hints that contain ``mask`` (``extendTopologyManagerHint``;
    ``mask`` 0: over every hint)."""
    minimum = space.min_affinity_size
    first = max(minimum, mask.bit_count(), 1)
    for k in range(first, len(space.nodes) + 1):
        found = min_value_member(space, k, mask)
        if found is not None:
            return TopologyHint(found, k == minimum)
    return None


def preferred_by_value(space: HintRules) -> Iterator[int]:
    """The preferred hints (size ``minAffinitySize``), smallest integer value first."""
    k = space.min_affinity_size
    if k == 1:  # single ids ascend, and so do their masks
        yield from (1 << n for n in space.iter_singles())
        return
    fixed = sorted(m for m in space.specials if m.bit_count() == k)
    yield from heapq.merge(space.upsets.colex(k), fixed)


def best_preferred(
    space: HintRules, order: Order, accept: Callable[[int], bool] | None
) -> int | None:
    """The preferred hint smallest under ``order`` that ``accept`` accepts: by value the
    first of :func:`preferred_by_value`; by distance the closest of the singles, or of the
    specials of the preferred size and the best up-set of that size (a search,
    :meth:`~numamem.memorymanager.search.upsets.UpSets.best_of_size`)."""
    if order.by_value:
        return next((m for m in preferred_by_value(space) if accept is None or accept(m)), None)
    k = space.min_affinity_size
    if k == 1:
        found = [1 << n for n in space.iter_singles()]
    else:
        found = [m for m in space.specials if m.bit_count() == k]
    found = [m for m in found if accept is None or accept(m)]
    upset = space.upsets.best_of_size(k, order, accept) if k >= 2 else None
    if upset is not None:
        found.append(upset)
    return min(found, key=order.charged_key(space.work)) if found else None


def best_meet(
    space: HintRules,
    e: int,
    copies: int,
    best_count: int,
    order: Order,
    below: tuple[int, ...] | None = None,
) -> int | None:
    """The best nonzero ``e & h1 & ... & h_copies`` over the hints ``h``: sizes by
    :func:`~numamem.topologymanager.hintfamily.size_rank` with ``best_count``, then ``order``
    (see :mod:`numamem.topologymanager.merge`); only if it ranks below ``below``.

    An AND with a single ``{x}`` is ``{x}`` or empty, and ``{x}`` itself is one (take it
    ``copies`` times). Otherwise the AND takes some specials T (at most ``copies`` of
    them, each possibly repeated) and the rest up-sets: ``e & AND(T)`` when they are all
    specials, else ``e & AND(T)`` met with ``copies - |T|`` up-sets
    (:meth:`~numamem.memorymanager.search.upsets.UpSets.meet`).
    """
    work = space.work
    order_key = order.charged_key(work)
    best = below
    found: int | None = None

    def offer(mask: int) -> None:
        nonlocal best, found
        r = (*size_rank(mask.bit_count(), best_count), *order_key(mask))
        if best is None or r < best:
            best, found = r, mask

    for x in space.singles:
        if e >> x & 1:
            offer(1 << x)
    specials = space.specials
    for taken in range(min(copies, len(specials)) + 1):
        for group in itertools.combinations(specials, taken):
            work.spend(1)
            base = e
            for m in group:
                base &= m
            if not base:
                continue
            if taken:
                offer(base)
            if taken < copies:
                upset = space.upsets.meet(base, copies - taken, best_count, order, best)
                if upset is not None:
                    offer(upset)
    return found


class HintSpace(HintRules, HintFamily):
    """The hints of one request by rule (:class:`HintRules`: its fields, its ``__init__``),
    with the searches above as methods: the list the merge takes. Read-only, one thread."""

    def best(self) -> TopologyHint | None:
        """``findBestHint`` of the whole list: a preferred hint first, then the narrowest."""
        return best_superset(self, 0)

    def best_superset(self, mask: int) -> TopologyHint | None:
        """``findBestHint`` over the hints that contain ``mask`` (``extendTopologyManagerHint``)."""
        return best_superset(self, mask)

    def preferred_by_value(self) -> Iterator[int]:
        """See :func:`preferred_by_value`."""
        return preferred_by_value(self)

    def best_preferred(self, order: Order, accept: Callable[[int], bool] | None) -> int | None:
        """See :func:`best_preferred`."""
        return best_preferred(self, order, accept)

    def best_meet(
        self,
        e: int,
        copies: int,
        best_count: int,
        order: Order,
        below: tuple[int, ...] | None = None,
    ) -> int | None:
        """See :func:`best_meet`."""
        return best_meet(self, e, copies, best_count, order, below)
