"""The hint merge (kubelet ``HintMerger.Merge``) without the cartesian product.

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
one order (preferred, then rank of the size, then the narrowest/closest key),
so the visiting order never matters and the result is the minimum of the
existing merged hints under that order.

Which merged hints exist:

* preferred ones need every list to offer the same mask as a preferred hint
  (or a preferred "any NUMA" hint): candidates come from the smallest list of
  preferred masks (or, when only the memory manager constrains, from its
  preferred masks in integer order, where the first that every list accepts
  wins); each is checked against every list by membership;
* when none exists, the non-preferred minimum is searched among the nonzero
  ANDs of one hint per list: on up to :data:`MOBIUS_MAX_NODES` nodes exactly,
  by counting for every node set how many permutations AND to exactly it
  (superset zeta transform of each list, their product, Möbius inversion:
  O(lists · n · 2^n), whatever the list sizes); on larger machines by the set
  of distinct ANDs (at most the product kubelet itself would visit), with the
  memory manager's rule-given list listed when it is small, or its structure
  used directly (:meth:`HintFamily.best_meet`) when it is the only such list.
  The one case left: the same rule-given list for several resources (memory
  and hugepages) that is too large to list, on more than 16 nodes, with no
  preferred merged hint; kubelet's product is then at least 4096^2 = 1.7·10^7
  permutations per admission. The ANDs of distinct members of that list can
  form masks that no member is (kubelet's non-preferred merge picks among
  them), so numamem takes the best of the exact single-member answer and of
  the ANDs of the first members in kubelet's order as far as
  :data:`AND_BUDGET` goes: a documented approximation that can only change
  which non-preferred mask a best-effort admission starts from (Allocate then
  extends it to a mask that fits, as it does kubelet's).

Explicit lists (other providers' hints) whose distinct ANDs exceed
:data:`AND_BUDGET` on more than 16 nodes are refused with a
LimitExceededError naming the budget, rather than merged for hours.
"""

from __future__ import annotations

import abc
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from numamem.errors import LimitExceededError
from numamem.topologymanager import bitmask

MOBIUS_MAX_NODES = 16
MATERIALIZE_MEMBERS = 4096
APPROXIMATE_MEMBERS = 4096
AND_BUDGET = 5_000_000
"""Pairwise ANDs the distinct-AND search may take on machines above MOBIUS_MAX_NODES."""

Merged = tuple[int, bool]


class Hint(Protocol):
    @property
    def affinity(self) -> int | None: ...

    @property
    def preferred(self) -> bool: ...


class HintFamily(abc.ABC):
    """A provider's hints for one resource given by rule instead of as a list.

    Iterating yields the hints in kubelet's order. Every method is read-only.
    (An abstract class rather than a Protocol: the merge tells families from
    lists with ``isinstance`` on every list of every admission.)
    """

    @abc.abstractmethod
    def __iter__(self) -> Iterator[Hint]: ...

    @abc.abstractmethod
    def is_empty(self) -> bool: ...

    @abc.abstractmethod
    def contains_preferred(self, mask: int) -> bool:
        """Whether ``mask`` is one of the preferred hints."""

    @abc.abstractmethod
    def preferred_by_value(self) -> Iterator[int]:
        """The preferred hints' masks, smallest integer first."""

    @abc.abstractmethod
    def narrowest_count(self) -> int | None:
        """The node count of the narrowest hint (None when there are none)."""

    @abc.abstractmethod
    def materialize(self, limit: int) -> list[int] | None:
        """Every hint's mask, or None when there are more than ``limit``."""

    @abc.abstractmethod
    def best_meet(
        self, e: int, best_count: int, narrow_key: Callable[[int], tuple[int, ...]]
    ) -> int | None:
        """The smallest nonzero ``e & h`` over the hints ``h`` under :func:`size_rank`
        (with ``best_count``), then ``narrow_key``; None when every such AND is empty."""


HintList = Sequence[Hint] | HintFamily


def merge(
    lists: Sequence[HintList],
    default: int,
    narrow_key: Callable[[int], tuple[int, ...]],
) -> Merged:
    """kubelet's merged hint over ``lists`` (already filtered: nil and empty lists replaced).

    ``default`` is the mask of every NUMA node; ``narrow_key`` orders masks of
    the same size (narrowest: the mask value; closest: distance, then value).
    """
    preferred = _best_preferred(lists, default, narrow_key)
    if preferred is not None:
        return preferred, True
    best_count = _best_non_preferred_count(lists)
    found = _best_non_preferred(lists, default, best_count, narrow_key)
    return (default, False) if found is None else (found, False)


def size_rank(count: int, best_count: int) -> tuple[int, int]:
    """The order of non-preferred sizes: ``best_count`` first, then smaller ones from the
    largest down, then larger ones from the smallest up."""
    return (0, -count) if count <= best_count else (1, count)


# --- preferred ----------------------------------------------------------------------


def _best_preferred(
    lists: Sequence[HintList], default: int, key: Callable[[int], tuple[int, ...]]
) -> int | None:
    explicit: list[tuple[set[int], bool]] = []
    families: list[HintFamily] = []
    for lst in lists:
        if isinstance(lst, HintFamily):
            if not any(lst is f for f in families):
                families.append(lst)
            continue
        masks = {h.affinity for h in lst if h.preferred and h.affinity is not None}
        any_node = any(h.preferred and h.affinity is None for h in lst)
        explicit.append((masks, any_node))

    def accepted(mask: int) -> bool:
        return all(mask in masks or any_node for masks, any_node in explicit) and all(
            f.contains_preferred(mask) for f in families
        )

    def full_key(mask: int) -> tuple[int, ...]:
        return (mask.bit_count(), *key(mask))

    constraining = [masks for masks, any_node in explicit if not any_node]
    if constraining:
        seed = min(constraining, key=len)
        candidates = [m for m in seed if m & default and accepted(m)]
        merged = {m & default for m in candidates}
        return min(merged, key=full_key) if merged else None
    if families:
        first = families[0]
        if orders_by_value(key):
            for mask in first.preferred_by_value():
                if mask & default and accepted(mask):
                    return mask & default
            return None
        found = [m & default for m in first.preferred_by_value() if m & default and accepted(m)]
        return min(found, key=full_key) if found else None
    # Every list offers a preferred "any NUMA" hint: the default mask, and any one list's mask.
    union = {m & default for masks, _ in explicit for m in masks if m & default}
    union.add(default)
    return min(union, key=full_key)


def orders_by_value(key: Callable[[int], tuple[int, ...]]) -> bool:
    """Whether ``key`` orders masks of one size by integer value (the narrowest order)."""
    return getattr(key, "by_value", False) is True


def by_value(mask: int) -> tuple[int, ...]:
    """The narrowest order of masks of one size: the integer value (``IsNarrowerThan``)."""
    return (mask,)


by_value.by_value = True  # type: ignore[attr-defined]


# --- non-preferred ---------------------------------------------------------------------


def _best_non_preferred_count(lists: Sequence[HintList]) -> int:
    """``bestNonPreferredAffinityCount``: the largest of the lists' narrowest hint sizes."""
    best = 0
    for lst in lists:
        if isinstance(lst, HintFamily):
            count = lst.narrowest_count()
        else:
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
    narrow_key: Callable[[int], tuple[int, ...]],
) -> int | None:
    def rank(mask: int) -> tuple[int, ...]:
        return (*size_rank(mask.bit_count(), best_count), *narrow_key(mask))

    nodes = bitmask.get_bits(default)
    if len(nodes) <= MOBIUS_MAX_NODES:
        counted = _meets_by_counting(lists, nodes)
        return min(counted, key=rank) if counted else None
    explicit = [lst for lst in lists if not isinstance(lst, HintFamily)]
    families: list[HintFamily] = [lst for lst in lists if isinstance(lst, HintFamily)]
    meets: set[int] = _distinct_meets([_masks(lst, default) for lst in explicit], default)
    unlisted: list[HintFamily] = []
    for family in families:
        members = family.materialize(MATERIALIZE_MEMBERS)
        if members is not None and len(meets) * len(set(members)) <= AND_BUDGET:
            meets = _distinct_meets([members], default, start=meets)
        else:
            unlisted.append(family)
    if not meets:
        return None
    if not unlisted:
        return min(meets, key=rank)
    # One list given by rule: exact, from its structure. Several (the memory manager's
    # one family for memory and each hugepage size, on a machine too large to list it):
    # the single-family answer of each meet, plus the meets with the first members of
    # each family as far as the budget goes (the approximation of the module docstring).
    found: set[int] = set()
    if all(f is unlisted[0] for f in unlisted):
        found = {
            m for e in meets if (m := unlisted[0].best_meet(e, best_count, narrow_key)) is not None
        }
    if len(unlisted) > 1:
        approximate = set(meets)
        for family in unlisted:
            limit = min(APPROXIMATE_MEMBERS, AND_BUDGET // max(len(approximate), 1))
            approximate = _distinct_meets(
                [_first_members(family, max(limit, 1))], default, start=approximate
            )
        found |= approximate
    return min(found, key=rank) if found else None


def _masks(lst: Sequence[Hint], default: int) -> list[int]:
    return [default if h.affinity is None else h.affinity & default for h in lst]


def _first_members(family: HintFamily, limit: int) -> list[int]:
    out: list[int] = []
    for hint in family:
        if len(out) >= limit:
            break
        if hint.affinity is not None:
            out.append(hint.affinity)
    return out


def _distinct_meets(
    lists: Sequence[Sequence[int]], default: int, start: set[int] | None = None
) -> set[int]:
    """Every nonzero AND of one mask per list (starting from ``start``, or the default mask)."""
    current = {default} if start is None else start
    spent = 0
    for masks in lists:
        unique = set(masks)
        spent += len(current) * len(unique)
        if spent > AND_BUDGET:
            raise LimitExceededError(
                f"other_providers: the providers' hints have more than {AND_BUDGET} combinations "
                f"on a machine of {default.bit_count()} NUMA nodes; send fewer hints per resource "
                "(the kubelet would take hours to merge them)"
            )
        current = {a & b for a in current for b in unique} - {0}
        if not current:
            break
    return current


def _meets_by_counting(lists: Sequence[HintList], nodes: Sequence[int]) -> list[int]:
    """The nonzero masks that some permutation ANDs to exactly, by the zeta/Möbius transform."""
    n = len(nodes)
    size = 1 << n
    position = {node: i for i, node in enumerate(nodes)}

    def compress(mask: int) -> int:
        out = 0
        for bit in bitmask.get_bits(mask):
            if bit in position:
                out |= 1 << position[bit]
        return out

    full = size - 1
    product = [1] * size
    seen: list[tuple[object, list[int]]] = []
    for lst in lists:
        cached = next((z for ident, z in seen if ident is lst), None)
        if cached is None:
            counts = [0] * size
            if isinstance(lst, HintFamily):
                members = lst.materialize(size)
                assert members is not None  # at most 2^n - 1 distinct masks exist
                for m in members:
                    counts[compress(m)] += 1
            else:
                for h in lst:
                    counts[full if h.affinity is None else compress(h.affinity)] += 1
            cached = _superset_zeta(counts, n)
            seen.append((lst, cached))
        product = list(map(operator.mul, product, cached))
    exact = _superset_mobius(product, n)
    meets = []
    for index in range(1, size):
        if exact[index] > 0:
            meets.append(sum(1 << nodes[i] for i in range(n) if index >> i & 1))
    return meets


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
