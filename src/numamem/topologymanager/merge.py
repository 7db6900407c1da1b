"""The hint merge (kubelet ``HintMerger.Merge``) without the cartesian product, exact on every input.

kubelet merges by visiting every permutation: one hint from each resource list
of each provider, ANDed together, and keeps the best by ``compare``. With 4
providers of 255 hints on 8 nodes that is 4·10^9 permutations; with the memory
manager's 2^n - 1 masks it never ends on large machines. This module computes
the same result from a property of ``compare``: it is a minimum under a fixed
order, so the result depends only on *which* merged hints exist, not on the
order they are visited in.

Why. A merged hint is (AND of the affinities, preferred); masks with no node
are ignored. ``compare`` keeps a preferred hint over a non-preferred one;
between two preferred hints it takes the narrower (fewer nodes, then the
smaller integer mask; with ``prefer-closest-numa-nodes``, fewer nodes, then
the smaller average distance, then the smaller mask) and keeps the current
one on equal masks. Between two non-preferred hints it steers toward ``B``,
the largest of the lists' narrowest hint sizes: working through its cases, a
hint of exactly B nodes beats every other size, a smaller size beats every
larger one, and among sizes below B the larger wins, above B the smaller; one
size ties break as for preferred hints. Every case is a comparison under the
one order (preferred, then rank of the size, then :class:`Order`), so the
visiting order never matters and the result is the minimum of the existing
merged hints under that order.

Which merged hints exist, and how the minimum is found:

* preferred ones need every list to offer the same mask as a preferred hint
  (or a preferred "any NUMA" hint): candidates come from the smallest list of
  preferred masks, each checked against every list by membership; when only
  the memory manager's rule-given list constrains, its best preferred member
  is searched directly (:meth:`HintFamily.best_preferred`: by value, the first
  in integer order; by distance, a branch and bound over node sets by
  (size, distance sum), which is the kubelet's order);
* when none exists, the non-preferred minimum is searched among the nonzero
  ANDs of one hint per list. The explicit lists (other providers' hints, and
  the memory manager's list when it has at most :data:`MATERIALIZE_MEMBERS`
  members) are first reduced without changing their ANDs: every mask is cut
  to the nodes every list can still offer (a one-mask list cuts all others),
  lists that became the whole remaining mask are dropped, and repeated lists
  count at most n times (an AND of more members of one list is already an
  AND of n of them). Their distinct ANDs are then taken list by list, smallest
  first, pairwise; once a pairwise step would cost more than a counting step,
  on up to :data:`MOBIUS_MAX_NODES` remaining nodes the rest is counted
  instead: for every node set, how many choices AND to exactly it (superset
  zeta transform of each list, their product, Möbius inversion: O(n · 2^n)
  per list, whatever the list sizes). A rule-given list too large to list
  (the memory manager's on a large machine, once per memory type it serves)
  is met with each of those ANDs by its structure
  (:meth:`HintFamily.best_meet`, exact for any number of copies).

Every step is charged to the caller's :class:`~numamem.work.Work`: a merge
either gives kubelet's answer or is refused with
:class:`~numamem.errors.SearchBudgetError` (or DeadlineExceededError) naming
what it was merging. Nothing is approximated.
"""

from __future__ import annotations

import abc
import operator
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol

from numamem.errors import SearchBudgetError
from numamem.topologymanager import bitmask
from numamem.work import FIX, Work

MOBIUS_MAX_NODES = 16
"""Remaining nodes up to which the distinct ANDs may be counted (2^n entries per list)."""
MATERIALIZE_MEMBERS = 4096
"""A rule-given list with at most this many members is merged as an explicit list."""
PAIRWISE_COST_FACTOR = 1.0
"""Pairwise ANDs are taken while they cost at most this many counting steps (tests set 0
to count always)."""

Merged = tuple[int, bool]


class Hint(Protocol):
    @property
    def affinity(self) -> int | None: ...

    @property
    def preferred(self) -> bool: ...


class Order:
    """How masks of one size compare: kubelet's narrowest (the integer value), or with
    ``distances`` its closest (the sum of distances over ordered pairs of the mask's nodes,
    self-pairs included, then the value). For masks of one size, comparing sums compares
    the kubelet's averages."""

    __slots__ = ("distances",)

    def __init__(self, distances: Mapping[int, Mapping[int, int]] | None = None) -> None:
        self.distances = distances

    @property
    def by_value(self) -> bool:
        return self.distances is None

    def total(self, mask: int) -> int:
        """The sum of distances over ordered pairs of the mask's nodes (0 by value)."""
        d = self.distances
        if d is None:
            return 0
        bits = bitmask.get_bits(mask)
        return sum(d[a][b] for a in bits for b in bits)

    def key(self, mask: int) -> tuple[int, int]:
        return (self.total(mask), mask)

    def charged_key(self, work: Work) -> Callable[[int], tuple[int, int]]:
        """:meth:`key`, charging ``work`` one step per ordered pair a distance sum adds (a
        key of k nodes sums k^2 distances: 1,024 for 32 nodes, far more than one step)."""
        if self.distances is None:
            return self.key
        key = self.key

        def charged(mask: int) -> tuple[int, int]:
            work.spend(mask.bit_count() ** 2)
            return key(mask)

        return charged


NARROWEST = Order()


class HintFamily(abc.ABC):
    """A provider's hints for one resource given by rule instead of as a list.

    Iterating yields the hints in kubelet's order. Every method is read-only and
    charges its own :class:`~numamem.work.Work`. (An abstract class rather than a
    Protocol: the merge tells families from lists with ``isinstance``.)
    """

    @abc.abstractmethod
    def __iter__(self) -> Iterator[Hint]: ...

    @abc.abstractmethod
    def is_empty(self) -> bool: ...

    @abc.abstractmethod
    def span(self) -> int:
        """The mask of every node a hint may hold (hints are subsets of it)."""

    @abc.abstractmethod
    def contains_preferred(self, mask: int) -> bool:
        """Whether ``mask`` is one of the preferred hints."""

    @abc.abstractmethod
    def preferred_by_value(self) -> Iterator[int]:
        """The preferred hints' masks, smallest integer first."""

    @abc.abstractmethod
    def best_preferred(self, order: Order, accept: Callable[[int], bool] | None) -> int | None:
        """The preferred hint smallest under ``order`` that ``accept`` (if given) accepts."""

    @abc.abstractmethod
    def narrowest_count(self) -> int | None:
        """The node count of the narrowest hint (None when there are none)."""

    @abc.abstractmethod
    def materialize(self, limit: int) -> list[int] | None:
        """Every hint's mask, or None when there are more than ``limit``."""

    @abc.abstractmethod
    def best_meet(
        self,
        e: int,
        copies: int,
        best_count: int,
        order: Order,
        below: tuple[int, ...] | None = None,
    ) -> int | None:
        """The smallest nonzero ``e & h1 & ... & h_copies`` over hints ``h`` under
        :func:`size_rank` (with ``best_count``), then ``order``; None when all are empty, or
        when none ranks below ``below`` (a rank: size rank, then order key)."""


HintList = Sequence[Hint] | HintFamily


def merge(
    lists: Sequence[HintList], default: int, order: Order = NARROWEST, work: Work | None = None
) -> Merged:
    """kubelet's merged hint over ``lists`` (already filtered: nil and empty lists replaced).

    ``default`` is the mask of every NUMA node the topology manager uses; every family
    must span only nodes of it.
    """
    work = Work() if work is None else work
    for lst in lists:
        if isinstance(lst, HintFamily) and lst.span() & ~default:
            raise ValueError("a hint family spans nodes outside the default mask")
    preferred = _best_preferred(lists, default, order, work)
    if preferred is not None:
        return preferred, True
    best_count = _best_non_preferred_count(lists, work)
    found = _best_non_preferred(lists, default, best_count, order, work)
    return (default, False) if found is None else (found, False)


def size_rank(count: int, best_count: int) -> tuple[int, int]:
    """The order of non-preferred sizes: ``best_count`` first, then smaller ones from the
    largest down, then larger ones from the smallest up."""
    return (0, -count) if count <= best_count else (1, count)


# --- preferred ----------------------------------------------------------------------


def _best_preferred(
    lists: Sequence[HintList], default: int, order: Order, work: Work
) -> int | None:
    explicit: list[tuple[set[int], bool]] = []
    families: list[HintFamily] = []
    for lst in lists:
        if isinstance(lst, HintFamily):
            if not any(lst is f for f in families):
                families.append(lst)
            continue
        work.spend(len(lst))
        masks = {h.affinity for h in lst if h.preferred and h.affinity is not None}
        any_node = any(h.preferred and h.affinity is None for h in lst)
        explicit.append((masks, any_node))

    def accepted(mask: int) -> bool:
        return all(mask in masks or any_node for masks, any_node in explicit) and all(
            f.contains_preferred(mask) for f in families
        )

    order_key = order.charged_key(work)

    def full_key(mask: int) -> tuple[int, ...]:
        return (mask.bit_count(), *order_key(mask))

    constraining = [masks for masks, any_node in explicit if not any_node]
    if constraining:
        seed = min(constraining, key=len)
        work.spend(len(seed) * (len(explicit) + len(families) + 1))
        merged = {m & default for m in seed if m & default and accepted(m)}
        return min(merged, key=full_key) if merged else None
    if families:
        # Every explicit list offers a preferred "any NUMA" hint: the first family's best
        # preferred member that the other families also offer (members lie within default).
        others = families[1:]
        accept = (lambda m: all(f.contains_preferred(m) for f in others)) if others else None
        return families[0].best_preferred(order, accept)
    # Every list offers a preferred "any NUMA" hint: the default mask, and any one list's mask.
    union = {m & default for masks, _ in explicit for m in masks if m & default}
    union.add(default)
    return min(union, key=full_key)


# --- non-preferred ---------------------------------------------------------------------


def _best_non_preferred_count(lists: Sequence[HintList], work: Work) -> int:
    """``bestNonPreferredAffinityCount``: the largest of the lists' narrowest hint sizes."""
    best = 0
    for lst in lists:
        if isinstance(lst, HintFamily):
            count = lst.narrowest_count()
        else:
            work.spend(len(lst))
            narrowest: int | None = None
            for h in lst:
                if h.affinity is not None and (
                    narrowest is None or bitmask.is_narrower_than(h.affinity, narrowest)
                ):
                    narrowest = h.affinity
            count = None if narrowest is None else narrowest.bit_count()
        if count is not None:
            best = max(best, count)
    return best


def _best_non_preferred(
    lists: Sequence[HintList],
    default: int,
    best_count: int,
    order: Order,
    work: Work,
) -> int | None:
    order_key = order.charged_key(work)

    def rank(mask: int) -> tuple[int, ...]:
        return (*size_rank(mask.bit_count(), best_count), *order_key(mask))

    explicit: list[set[int]] = []
    families: list[HintFamily] = []
    copies_of: list[int] = []
    for lst in lists:
        if isinstance(lst, HintFamily):
            index = next((i for i, f in enumerate(families) if f is lst), None)
            if index is None:
                families.append(lst)
                copies_of.append(1)
            else:
                copies_of[index] += 1
            continue
        work.spend(len(lst))
        explicit.append({default if h.affinity is None else h.affinity & default for h in lst})
    by_rule: list[tuple[HintFamily, int]] = []
    for family, copies in zip(families, copies_of, strict=True):
        members = family.materialize(MATERIALIZE_MEMBERS)
        if members is None:
            by_rule.append((family, copies))
        else:
            explicit.extend(set(members) for _ in range(copies))
    if len(by_rule) > 1:
        # Several different rule-given lists too large to list (no provider gives them: the
        # memory manager answers with one). Listing all but one is what is left.
        for family, copies in by_rule[1:]:
            members = family.materialize(max(work.remaining(), 1))
            if members is None:
                raise SearchBudgetError(
                    f"{work.what}: {len(by_rule)} different rule-given hint lists too large to "
                    f"list within the {work.limit:,} steps of the search budget (SEARCH_BUDGET); "
                    "the merge meets only one of them by its structure. "
                    f"{FIX}"
                )
            explicit.extend(set(members) for _ in range(copies))
        by_rule = by_rule[:1]
    meets = distinct_meets(explicit, default, work)
    if not meets:
        return None
    if not by_rule:
        return min(meets, key=rank)
    family, copies = by_rule[0]

    def widest(e: int) -> tuple[int, int]:
        """The best size rank any AND within ``e`` can have."""
        return size_rank(min(best_count, e.bit_count()) if best_count >= 1 else 1, best_count)

    # The ANDs in order of the best size they can reach; each search starts from the best so
    # far (the answer is the minimum over all of them, whatever the order).
    found: int | None = None
    found_rank: tuple[int, ...] | None = None
    work.spend(len(meets))
    for e in sorted(meets, key=lambda e: (widest(e), e)):
        if found_rank is not None and widest(e) > found_rank[:2]:
            break
        work.spend(1)
        best = family.best_meet(e, copies, best_count, order, found_rank)
        if best is not None:
            found, found_rank = best, rank(best)
    return found


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
