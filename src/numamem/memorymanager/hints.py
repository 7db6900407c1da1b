"""The Static policy's topology hints for one request, by rule instead of by listing every mask.

kubelet's ``calculateHints`` visits every non-empty subset of the NUMA nodes,
2^n of them, and offers each mask that passes four tests, in the order of
``IterateBitMasks`` (fewer nodes first, then the combinations of the sorted
node ids in lexicographic order):

1. every requested type's summed *allocatable* over the mask covers the
   request (numamem also requires every node of the mask to have the type);
   the smallest such mask size is ``minAffinitySize``;
2. a single-node mask may not use a node that is part of a multi-NUMA group;
3. a multi-node mask may use a node that holds memory only if that node's
   group is exactly the mask;
4. every type's summed *free* memory, plus what the pod's init containers left
   for exactly this mask, covers the request.

A hint is *preferred* when its size is ``minAffinitySize``.

How :class:`HintSpace` finds the same hints without visiting every mask: by
tests 2 and 3, a multi-node hint either consists of unused nodes only, or is
exactly an existing multi-NUMA group. So the hints are

* *singles*: single nodes passing tests 1, 2, 4;
* *specials*: existing groups, and the multi-node masks of the pod's
  init-container reuse table, passing all four tests (a handful);
* *up-sets*: sets of two or more unused nodes whose summed free memory (which
  is their allocatable: an unused node has nothing reserved) covers every
  type. Adding a node never makes such a set fail, so they are searched
  depth-first over the unused nodes in id order, and a branch is pruned as
  soon as the best completion (the largest values left) cannot cover the
  request: every branch followed ends in hints, so the cost grows with the
  number of hints produced, not with 2^n.

On that structure: iteration in kubelet's order (:meth:`iter_masks`, lazy),
the first hints and the count of the rest (:meth:`listed`; the count is a
dynamic program over the unused nodes' values capped at the request), the
``findBestHint`` of the whole list (:meth:`best`) and of the hints that
contain a mask (:meth:`best_superset`, ``extendTopologyManagerHint``), the
preferred hints in integer order (what the merge's "narrowest" wants),
membership tests, and :meth:`materialize` for small machines. The hints of
every requested type are the same list, so one :class:`HintSpace` stands for
all of them.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from numamem.memorymanager.subsets import (
    count_covering_subsets,
    covers,
    exists_subset,
    prefix_sums,
)
from numamem.memtypes import NUMANodeState
from numamem.topologymanager import bitmask
from numamem.topologymanager.merge import HintFamily, orders_by_value, size_rank
from numamem.topologymanager.policy import TopologyHint

COUNT_STATE_BUDGET = 200_000
"""States the counting dynamic program may hold before it settles for a lower bound."""
MEET_ENUMERATION_LIMIT = 100_000
"""Masks of one size :meth:`HintSpace.best_meet` compares by distance (prefer-closest-numa-nodes)."""


@dataclass(frozen=True)
class Listed:
    """The first hints in kubelet's order, and how many were left out."""

    hints: list[TopologyHint]
    omitted: int
    omitted_exact: bool = True


@dataclass(eq=False)
class HintSpace(HintFamily):
    """Hints of one request on one machine state; read-only, safe to share between threads.

    ``nodes`` are the NUMA ids hints are made of (every node of the machine, or
    only those with CPUs under ``restrict-to-cpu-numa-nodes``); ``reuse`` maps
    masks to the bytes per type the pod's init containers left for them.
    """

    machine_state: Mapping[int, NUMANodeState | None]
    requested: Mapping[str, int]
    reuse: Mapping[int, Mapping[str, int]]
    nodes: Sequence[int]
    _types: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        self._types = tuple(self.requested)
        self.nodes = sorted(self.nodes)

    # --- the nodes ------------------------------------------------------------------

    @cached_property
    def _tables(self) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]] | None]:
        """node -> (allocatable per type, free per type), or None when it lacks a requested type."""
        out: dict[int, tuple[tuple[int, ...], tuple[int, ...]] | None] = {}
        for n in self.nodes:
            node = self.machine_state.get(n)
            tables = (node.memory_map or {}) if node is not None else {}
            if node is None or any(t not in tables for t in self._types):
                out[n] = None
                continue
            out[n] = (
                tuple(tables[t].allocatable for t in self._types),
                tuple(tables[t].free for t in self._types),
            )
        return out

    def _assignments(self, n: int) -> int:
        node = self.machine_state.get(n)
        return 0 if node is None else node.number_of_assignments

    def _cells(self, n: int) -> tuple[int, ...]:
        node = self.machine_state.get(n)
        return tuple(sorted((node.cells or []) if node is not None else []))

    @cached_property
    def _need(self) -> tuple[int, ...]:
        return tuple(self.requested[t] for t in self._types)

    @cached_property
    def unused(self) -> tuple[int, ...]:
        """Unused nodes that have every requested type, ascending: what up-sets are made of."""
        return tuple(
            n for n in self.nodes if self._tables[n] is not None and self._assignments(n) == 0
        )

    @cached_property
    def _values(self) -> list[tuple[int, ...]]:
        """Per unused node, the value an up-set gets from it per type: min(free, allocatable)."""
        out = []
        for n in self.unused:
            tables = self._tables[n]
            assert tables is not None
            out.append(tuple(min(a, f) for a, f in zip(*tables, strict=True)))
        return out

    # --- the four tests ------------------------------------------------------------

    def allocatable_fits(self, bits: Sequence[int]) -> bool:
        """Test 1 (every node has every type, and allocatable covers the request)."""
        sums = [0] * len(self._types)
        for n in bits:
            tables = self._tables.get(n)
            if tables is None:
                return False
            for i, v in enumerate(tables[0]):
                sums[i] += v
        return all(s >= need for s, need in zip(sums, self._need, strict=True))

    def qualifies(self, mask: int) -> bool:
        """Whether ``mask`` is a hint: kubelet's four tests, in kubelet's order."""
        bits = bitmask.get_bits(mask)
        if not bits or not self.allocatable_fits(bits):
            return False
        if len(bits) == 1:
            if len(self._cells(bits[0])) > 1:
                return False
        else:
            for n in bits:
                if self._assignments(n) > 0:
                    cells = self._cells(n)
                    if len(cells) == 1 or list(cells) != bits:
                        return False
        reusable = self.reuse.get(mask, {})
        for i, t in enumerate(self._types):
            free = 0
            for n in bits:
                tables = self._tables[n]
                assert tables is not None
                free += tables[1][i]
            if free + reusable.get(t, 0) < self._need[i]:
                return False
        return True

    # --- minAffinitySize -------------------------------------------------------------

    @cached_property
    def min_affinity_size(self) -> int:
        """kubelet's ``minAffinitySize``: the fewest nodes whose allocatable covers the request
        (test 1 alone); the number of nodes when no mask passes it."""
        candidates = [n for n in self.nodes if self._tables[n] is not None]
        allocs = [self._tables[n][0] for n in candidates]  # type: ignore[index]
        for k in range(1, len(candidates) + 1):
            if exists_subset(allocs, k, self._need):
                return k
        return len(self.nodes)

    def preferred(self, mask: int) -> bool:
        return mask.bit_count() == self.min_affinity_size

    def contains_preferred(self, mask: int) -> bool:
        """Whether ``mask`` is a preferred hint."""
        return self.preferred(mask) and self.qualifies(mask)

    # --- the three kinds of hints -----------------------------------------------------

    @cached_property
    def singles(self) -> tuple[int, ...]:
        return tuple(n for n in self.nodes if self.qualifies(1 << n))

    @cached_property
    def specials(self) -> tuple[int, ...]:
        """Multi-node hints that are not up-sets: existing groups and reuse-table masks."""
        candidates: set[int] = set()
        for n in self.nodes:
            cells = self._cells(n)
            if self._assignments(n) > 0 and len(cells) > 1:
                candidates.add(bitmask.new_mask(cells))
        for mask in self.reuse:
            if mask.bit_count() > 1:
                candidates.add(mask)
        return tuple(
            sorted(
                (m for m in candidates if self.qualifies(m) and not self._is_upset(m)),
                key=_lex_key,
            )
        )

    def _is_upset(self, mask: int) -> bool:
        bits = bitmask.get_bits(mask)
        unused = set(self.unused)
        if len(bits) < 2 or any(n not in unused for n in bits):
            return False
        index = {n: i for i, n in enumerate(self.unused)}
        return covers([self._values[index[n]] for n in bits], self._need)

    # --- up-sets: depth-first, in lexicographic order ---------------------------------

    @cached_property
    def _suffix_best(self) -> list[list[tuple[int, ...]]]:
        """[i][j] = per type, the largest sum of j values among unused nodes i, i+1, ..."""
        m = len(self.unused)
        table: list[list[tuple[int, ...]]] = []
        for i in range(m + 1):
            columns = [
                sorted((v[t] for v in self._values[i:]), reverse=True)
                for t in range(len(self._types))
            ]
            row = prefix_sums(columns, m - i)
            table.append(row)
        return table

    @cached_property
    def _suffix_worst(self) -> list[list[tuple[int, ...]]]:
        """[i][j] = per type, the smallest sum of j values among unused nodes i, i+1, ..."""
        m = len(self.unused)
        table: list[list[tuple[int, ...]]] = []
        for i in range(m + 1):
            columns = [sorted(v[t] for v in self._values[i:]) for t in range(len(self._types))]
            table.append(prefix_sums(columns, m - i))
        return table

    def _upsets_lex(self, k: int) -> Iterator[int]:
        """Up-sets of size ``k`` in lexicographic order (as masks)."""
        if k < 2 or k > len(self.unused):
            return
        yield from self._dfs_lex(k, 0, 0, tuple(0 for _ in self._types))

    def _dfs_lex(self, k: int, start: int, mask: int, sums: tuple[int, ...]) -> Iterator[int]:
        left = k - mask.bit_count()
        if left == 0:
            if all(s >= need for s, need in zip(sums, self._need, strict=True)):
                yield mask
            return
        m = len(self.unused)
        worst = self._suffix_worst[start][left]
        if all(s + w >= need for s, w, need in zip(sums, worst, self._need, strict=True)):
            # Every completion covers the request: the combinations themselves, in order.
            weights = [1 << n for n in self.unused[start:]]
            for combo in itertools.combinations(weights, left):
                yield mask + sum(combo)
            return
        for i in range(start, m - left + 1):
            value = self._values[i]
            reach = self._suffix_best[i + 1][left - 1]
            if any(
                s + v + r < need
                for s, v, r, need in zip(sums, value, reach, self._need, strict=True)
            ):
                continue
            yield from self._dfs_lex(
                k,
                i + 1,
                mask | (1 << self.unused[i]),
                tuple(s + v for s, v in zip(sums, value, strict=True)),
            )

    # --- up-sets: smallest integer value first (colexicographic) -----------------------

    @cached_property
    def _prefix_best(self) -> list[list[tuple[int, ...]]]:
        """[j][c] = per type, the largest sum of c values among unused nodes 0 .. j-1."""
        m = len(self.unused)
        table: list[list[tuple[int, ...]]] = []
        for j in range(m + 1):
            columns = [
                sorted((v[t] for v in self._values[:j]), reverse=True)
                for t in range(len(self._types))
            ]
            row = prefix_sums(columns, j)
            table.append(row)
        return table

    def _upsets_colex(self, k: int, base: int = 0) -> Iterator[int]:
        """Up-sets of size ``k`` containing the unused nodes of ``base``, smallest value first."""
        forced = [i for i, n in enumerate(self.unused) if base >> n & 1]
        if len(forced) != base.bit_count() or k < 2 or k > len(self.unused):
            return
        need = list(self._need)
        for i in forced:
            need = [x - v for x, v in zip(need, self._values[i], strict=True)]
        free = [i for i in range(len(self.unused)) if i not in set(forced)]
        yield from (
            base | extra for extra in self._colex(free, k - len(forced), tuple(need), len(free))
        )

    def _colex(self, free: list[int], c: int, need: tuple[int, ...], limit: int) -> Iterator[int]:
        """c-subsets of ``free[:limit]`` (indices into unused) covering ``need``, by value."""
        if c == 0:
            if all(x <= 0 for x in need):
                yield 0
            return
        for j in range(c - 1, limit):
            i = free[j]
            value = self._values[i]
            rest = tuple(x - v for x, v in zip(need, value, strict=True))
            if not _reachable(self, free, j, c - 1, rest):
                continue
            top = 1 << self.unused[i]
            for lower in self._colex(free, c - 1, rest, j):
                yield lower | top

    # --- the hints in kubelet's order ---------------------------------------------------

    def _iter_singles(self) -> Iterator[int]:
        """The single-node hints' ids in order, tested only as far as the caller reads."""
        if "singles" in self.__dict__:
            yield from self.singles
            return
        yield from (n for n in self.nodes if self.qualifies(1 << n))

    def iter_masks(self) -> Iterator[int]:
        """Every hint in kubelet's order (lazily)."""
        yield from (1 << n for n in self._iter_singles())
        specials_by_size: dict[int, list[int]] = {}
        for m in self.specials:
            specials_by_size.setdefault(m.bit_count(), []).append(m)
        for k in range(2, len(self.nodes) + 1):
            upsets = self._upsets_lex(k)
            yield from heapq.merge(upsets, specials_by_size.get(k, []), key=_lex_key)

    def __iter__(self) -> Iterator[TopologyHint]:
        """The hints as kubelet lists them (a provider's hint list for each requested type)."""
        minimum = self.min_affinity_size
        for mask in self.iter_masks():
            yield TopologyHint(mask, mask.bit_count() == minimum)

    def is_empty(self) -> bool:
        return next(self.iter_masks(), None) is None

    def listed(self, limit: int, preferred_ceiling: int) -> Listed:
        """The first ``limit`` hints, extended to include every preferred hint (up to
        ``preferred_ceiling`` hints in all), and how many are left out."""
        minimum = self.min_affinity_size
        hints: list[TopologyHint] = []
        for mask in self.iter_masks():
            preferred = mask.bit_count() == minimum
            if len(hints) >= limit and (not preferred or len(hints) >= preferred_ceiling):
                break
            hints.append(TopologyHint(mask, preferred))
        total = self.count()
        if total is None:
            return Listed(hints, self._count_lower_bound(len(hints)), omitted_exact=False)
        return Listed(hints, total - len(hints))

    def count(self) -> int | None:
        """How many hints there are, or None when the counting program would be too large."""
        upsets = count_covering_subsets(self._values, self._need, COUNT_STATE_BUDGET)
        if upsets is None:
            return None
        return len(self.singles) + len(self.specials) + upsets

    def _count_lower_bound(self, listed: int) -> int:
        """At least this many hints beyond the ``listed`` ones (when the exact count is too costly)."""
        seen = 0
        for _ in itertools.islice(self.iter_masks(), listed + 10_000):
            seen += 1
        return max(seen - listed, 0)

    def materialize(self, limit: int) -> list[int] | None:
        """Every hint's mask in kubelet's order, or None when there are more than ``limit``."""
        masks = list(itertools.islice(self.iter_masks(), limit + 1))
        return None if len(masks) > limit else masks

    # --- findBestHint without the list ------------------------------------------------

    def min_value_member(self, k: int, base: int = 0) -> int | None:
        """The hint of size ``k`` with the smallest integer value that contains ``base``."""
        found: list[int] = []
        if k == 1:
            found += [1 << n for n in self.singles if base & ~(1 << n) == 0]
        found += [m for m in self.specials if m.bit_count() == k and base & ~m == 0]
        if base & ~_mask_of(self.unused) == 0:
            first = next(self._upsets_colex(k, base), None)
            if first is not None:
                found.append(first)
        return min(found) if found else None

    def best(self) -> TopologyHint | None:
        """``findBestHint`` of the whole list: a preferred hint first, then the narrowest."""
        return self.best_superset(0)

    def best_superset(self, mask: int) -> TopologyHint | None:
        """``findBestHint`` over the hints that contain ``mask`` (``extendTopologyManagerHint``)."""
        minimum = self.min_affinity_size
        first = max(minimum, mask.bit_count(), 1)
        for k in range(first, len(self.nodes) + 1):
            found = self.min_value_member(k, mask)
            if found is not None:
                return TopologyHint(found, k == minimum)
        return None

    def preferred_by_value(self) -> Iterator[int]:
        """The preferred hints (size ``minAffinitySize``), smallest integer value first."""
        k = self.min_affinity_size
        if k == 1:  # single ids ascend, and so do their masks
            yield from (1 << n for n in self._iter_singles())
            return
        fixed = sorted(m for m in self.specials if m.bit_count() == k)
        yield from heapq.merge(self._upsets_colex(k), fixed)

    def narrowest_count(self) -> int | None:
        """The size of the narrowest hint (what the merge's ``bestNonPreferredAffinityCount`` takes):
        kubelet's order lists the smallest hints first."""
        first = next(self.iter_masks(), None)
        return None if first is None else first.bit_count()

    # --- the merge's AND with other lists (machines too large to list) --------------------

    def best_meet(
        self, e: int, best_count: int, narrow_key: Callable[[int], tuple[int, ...]]
    ) -> int | None:
        """The best nonzero ``e & h`` over the hints ``h``: sizes by :func:`size_rank` with
        ``best_count``, then ``narrow_key`` (see :mod:`numamem.topologymanager.merge`).

        ``e & {x}`` is ``{x}`` for a single; ``e & G`` for a special; for up-sets,
        ``e & S`` is any X within the unused nodes of ``e`` that covers the request
        together with every unused node outside ``e`` (those can always be added to
        S): an upward-closed family, so its best size is ``best_count`` when it has
        members that large and that small, else the nearest size it has.
        """

        def rank(mask: int) -> tuple[int, ...]:
            return (*size_rank(mask.bit_count(), best_count), *narrow_key(mask))

        found = [1 << x for x in self.singles if e >> x & 1]
        found += [m & e for m in self.specials if m & e]
        upset = self._best_upset_meet(e, best_count, narrow_key)
        if upset is not None:
            found.append(upset)
        return min(found, key=rank) if found else None

    def _best_upset_meet(
        self, e: int, best_count: int, narrow_key: Callable[[int], tuple[int, ...]]
    ) -> int | None:
        inside = [i for i, n in enumerate(self.unused) if e >> n & 1]
        outside = [i for i, n in enumerate(self.unused) if not e >> n & 1]
        need = list(self._need)
        for i in outside:
            need = [x - v for x, v in zip(need, self._values[i], strict=True)]
        rest = tuple(need)
        if not inside or not covers([self._values[i] for i in inside], rest):
            return None
        smallest = max(1, 2 - len(outside))
        if len(inside) < smallest:
            return None
        values = [self._values[i] for i in inside]
        fewest = next(
            c
            for c in range(smallest, len(inside) + 1)
            if all(x <= 0 for x in rest) or exists_subset(values, c, rest)
        )
        if fewest <= best_count <= len(inside):
            size = best_count
        elif best_count < fewest:
            size = fewest
        else:
            size = len(inside)
        members = self._colex(inside, size, rest, len(inside))
        if orders_by_value(narrow_key):
            return next(members, None)
        return min(itertools.islice(members, MEET_ENUMERATION_LIMIT), key=narrow_key, default=None)


def _lex_key(mask: int) -> tuple[int, ...]:
    return tuple(bitmask.get_bits(mask))


def _mask_of(nodes: Sequence[int]) -> int:
    return bitmask.new_mask(nodes)


def _reachable(
    space: HintSpace, free: list[int], limit: int, c: int, need: tuple[int, ...]
) -> bool:
    """Whether c of ``free[:limit]`` can still cover ``need`` (per type, the c largest values)."""
    if c == 0:
        return all(x <= 0 for x in need)
    if c > limit:
        return False
    if len(free) == len(space.unused):  # nothing forced: the precomputed prefix table applies
        best = space._prefix_best[free[limit - 1] + 1][c] if limit else tuple(0 for _ in need)
        return all(b >= x for b, x in zip(best, need, strict=True))
    for t, x in enumerate(need):
        if x <= 0:
            continue
        top = sorted((space._values[i][t] for i in free[:limit]), reverse=True)[:c]
        if sum(top) < x:
            return False
    return True
