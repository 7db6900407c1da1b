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

A hint is *preferred* when its size is ``minAffinitySize``. The tests have one
definition, :meth:`HintRules.failure`, which says which test a mask fails and
why (``Explain`` words it, :mod:`numamem.memorymanager.search.explain`).

How :class:`HintRules` finds the same hints without visiting every mask: by
tests 2 and 3, a multi-node hint either consists of unused nodes only, or is
exactly an existing multi-NUMA group. So the hints are

* *singles*: single nodes passing tests 1, 2, 4;
* *specials*: existing groups, and the multi-node masks of the pod's
  init-container reuse table, passing all four tests (a handful);
* *up-sets*: sets of two or more unused nodes whose summed free memory (which
  is their allocatable: an unused node has nothing reserved) covers every
  type (:mod:`numamem.memorymanager.search.upsets` lists, counts and searches them).

On that structure, here: iteration in kubelet's order (:meth:`HintRules.iter_masks`,
lazy), the first hints and the count of the rest (:meth:`HintRules.listed`) and
membership tests. The searches that never list the hints (``findBestHint``,
``extendTopologyManagerHint``, the merge's picks) are in
:mod:`numamem.memorymanager.search.space`, whose
:class:`~numamem.memorymanager.search.space.HintSpace` adds them to these rules and is what
the merge takes as a rule-given list (:class:`~numamem.topologymanager.hintfamily.HintFamily`).
The hints of every requested type are the same list, so one space stands for all of them.
Every search is charged to the space's :class:`~numamem.work.Work`.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from numamem.memorymanager.search.memo import memoized
from numamem.memorymanager.search.subsets import exists_subset
from numamem.memorymanager.search.upsets import UpSets
from numamem.memtypes import NUMANodeState
from numamem.topologymanager import bitmask
from numamem.topologymanager.policy import TopologyHint
from numamem.work import Work

COUNT_STATE_BUDGET = 200_000
"""States the counting dynamic program may visit (over all its steps, about 0.1 s) before
:meth:`HintRules.listed` settles for a lower bound of the hints it left out
(``omitted_is_lower_bound``)."""


@dataclass(frozen=True)
class Listed:
    """The first hints in kubelet's order, and how many were left out."""

    hints: list[TopologyHint]
    omitted: int
    omitted_exact: bool = True


@dataclass(frozen=True)
class Failure:
    """The first of kubelet's four tests a mask fails, with what it found.

    Test 0 (before kubelet's): ``node`` is not one of the nodes hints are made of. Test 1: ``node`` lacks ``resource`` (``missing``), or the mask's allocatable ``have``
    is below ``need``. Tests 2 and 3: ``node`` and its group ``cells``. Test 4: the free
    memory ``have`` plus ``reusable`` is below ``need``.
    """

    test: int
    node: int | None = None
    resource: str = ""
    missing: bool = False
    have: int = 0
    need: int = 0
    reusable: int = 0
    cells: tuple[int, ...] = ()


@dataclass(eq=False)
class HintRules:
    """Hints of one request on one machine state, by rule; read-only (its caches aside, one
    thread). The searches over them are :class:`~numamem.memorymanager.search.space.HintSpace`'s.

    ``nodes`` are the NUMA ids hints are made of (every node of the machine, or
    only those with CPUs under ``restrict-to-cpu-numa-nodes``); ``reuse`` maps
    masks to the bytes per type the pod's init containers left for them.
    """

    machine_state: Mapping[int, NUMANodeState | None]
    requested: Mapping[str, int]
    reuse: Mapping[int, Mapping[str, int]]
    nodes: Sequence[int]
    work: Work = field(default_factory=Work)
    _types: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        self._types = tuple(self.requested)
        self.nodes = sorted(self.nodes)

    # --- the nodes ------------------------------------------------------------------

    @memoized
    def _tables(self) -> dict[int, tuple[tuple[int, ...], tuple[int, ...]] | None]:
        """node -> (allocatable per type, free per type), or None when it lacks a requested type."""
        self.work.spend(len(self.nodes))
        types = self._types
        out: dict[int, tuple[tuple[int, ...], tuple[int, ...]] | None] = {}
        for n in self.nodes:
            node = self.machine_state.get(n)
            if node is None:
                out[n] = None
                continue
            tables = node.memory_map or {}
            try:
                found = [tables[t] for t in types]
            except KeyError:
                out[n] = None
                continue
            out[n] = (
                tuple([table.allocatable for table in found]),
                tuple([table.free for table in found]),
            )
        return out

    def _assignments(self, n: int) -> int:
        node = self.machine_state.get(n)
        return 0 if node is None else node.number_of_assignments

    def _cells(self, n: int) -> tuple[int, ...]:
        node = self.machine_state.get(n)
        return tuple(sorted((node.cells or []) if node is not None else []))

    @memoized
    def _need(self) -> tuple[int, ...]:
        return tuple(self.requested[t] for t in self._types)

    @memoized
    def unused(self) -> tuple[int, ...]:
        """Unused nodes that have every requested type, ascending: what up-sets are made of."""
        return tuple(
            n for n in self.nodes if self._tables[n] is not None and self._assignments(n) == 0
        )

    @memoized
    def upsets(self) -> UpSets:
        """The up-sets: a set of unused nodes passes tests 1 and 4 when its allocatable and
        its free memory both cover the request. An unused node reserves nothing, so the
        two are equal and one sum per type is tested; should a state say otherwise, both."""
        tables = [self._tables[n] for n in self.unused]
        if all(t is not None and t[0] == t[1] for t in tables):
            values = [t[1] for t in tables if t is not None]
            return UpSets(self.unused, values, self._need, self.work)
        values = [t[0] + t[1] for t in tables if t is not None]
        return UpSets(self.unused, values, self._need + self._need, self.work)

    def span(self) -> int:
        return bitmask.new_mask(self.nodes)

    # --- the four tests: their one definition -------------------------------------------

    def failure(self, mask: int, bits: Sequence[int] | None = None) -> Failure | None:
        """The first of kubelet's four tests ``mask`` fails, in kubelet's order; None when
        it is a hint. ``bits`` are its node ids when the caller has them."""
        bits = bitmask.get_bits(mask) if bits is None else bits
        if not bits:
            return Failure(1)
        need = self._need
        sums = [0] * len(need)
        for n in bits:
            tables = self._tables.get(n)
            if tables is None:
                if n not in self._tables:
                    return Failure(0, n)  # not a node hints are made of (a reuse mask's)
                return self._allocatable_failure(bits)
            for i, v in enumerate(tables[0]):
                sums[i] += v
        if any(s < x for s, x in zip(sums, need, strict=True)):
            return self._allocatable_failure(bits)
        if len(bits) == 1:
            cells = self._cells(bits[0])
            if len(cells) > 1:
                return Failure(2, bits[0], cells=cells)
        else:
            for n in bits:
                if self._assignments(n) > 0:
                    cells = self._cells(n)
                    if len(cells) == 1 or list(cells) != list(bits):
                        return Failure(3, n, cells=cells)
        reusable = self.reuse.get(mask, {})
        for i, t in enumerate(self._types):
            free = 0
            for n in bits:
                tables = self._tables[n]
                assert tables is not None
                free += tables[1][i]
            extra = reusable.get(t, 0)
            if free + extra < need[i]:
                return Failure(4, resource=t, have=free, need=need[i], reusable=extra)
        return None

    def _allocatable_failure(self, bits: Sequence[int]) -> Failure:
        """Test 1 in detail: the first type (in request order) some node lacks or whose
        summed allocatable is too small."""
        for t, size in self.requested.items():
            tables = []
            for n in bits:
                node = self.machine_state.get(n)
                table = (node.memory_map or {}).get(t) if node is not None else None
                if table is None:
                    return Failure(1, n, t, missing=True)
                tables.append(table)
            allocatable = sum(table.allocatable for table in tables)
            if allocatable < size:
                return Failure(1, resource=t, have=allocatable, need=size)
        raise AssertionError("test 1 passes")  # pragma: no cover - callers saw it fail

    def qualifies(self, mask: int) -> bool:
        """Whether ``mask`` is a hint (passes the four tests)."""
        return self.failure(mask) is None

    # --- minAffinitySize -------------------------------------------------------------

    @memoized
    def min_affinity_size(self) -> int:
        """kubelet's ``minAffinitySize``: the fewest nodes whose allocatable covers the request
        (test 1 alone); the number of nodes when no mask passes it."""
        tables = self._tables
        allocs = [t[0] for t in [tables[n] for n in self.nodes] if t is not None]
        need = self._need
        for k in range(1, len(allocs) + 1):
            if exists_subset(allocs, k, need, self.work):
                return k
        return len(self.nodes)

    def preferred(self, mask: int) -> bool:
        return mask.bit_count() == self.min_affinity_size

    def contains_preferred(self, mask: int) -> bool:
        """Whether ``mask`` is a preferred hint."""
        return self.preferred(mask) and self.qualifies(mask)

    # --- singles and specials --------------------------------------------------------

    @memoized
    def singles(self) -> tuple[int, ...]:
        self.work.spend(len(self.nodes))
        return tuple(n for n in self.nodes if self.qualifies(1 << n))

    @memoized
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
        self.work.spend(len(self.nodes) + len(candidates))
        return tuple(
            sorted(
                (m for m in candidates if self.qualifies(m) and not self.upsets.contains(m)),
                key=_lex_key,
            )
        )

    # --- the hints in kubelet's order ---------------------------------------------------

    def iter_singles(self) -> Iterator[int]:
        """The single-node hints' ids in order, tested only as far as the caller reads."""
        if "singles" in self.__dict__:
            yield from self.singles
            return
        for n in self.nodes:
            self.work.spend(1)
            if self.qualifies(1 << n):
                yield n

    def iter_masks(self) -> Iterator[int]:
        """Every hint in kubelet's order (lazily)."""
        yield from (1 << n for n in self.iter_singles())
        specials_by_size: dict[int, list[int]] = {}
        for m in self.specials:
            specials_by_size.setdefault(m.bit_count(), []).append(m)
        for k in range(2, len(self.nodes) + 1):
            upsets = self.upsets.lex(k)
            yield from heapq.merge(upsets, specials_by_size.get(k, []), key=_lex_key)

    def __iter__(self) -> Iterator[TopologyHint]:
        """The hints as kubelet lists them (a provider's hint list for each requested type)."""
        minimum = self.min_affinity_size
        for mask in self.iter_masks():
            yield TopologyHint(mask, mask.bit_count() == minimum)

    @memoized
    def _first(self) -> int | None:
        """The first hint in kubelet's order (the narrowest), None when there is none."""
        return next(self.iter_masks(), None)

    def is_empty(self) -> bool:
        return self._first is None

    def listed(
        self,
        limit: int,
        preferred_ceiling: int,
        cost: Callable[[int, bool], int] | None = None,
        max_cost: int | None = None,
    ) -> Listed:
        """The first ``limit`` hints, extended to include every preferred hint (up to
        ``preferred_ceiling`` hints in all), and how many are left out. With ``cost`` (of a
        hint's mask and preference), listing also stops before the costs exceed ``max_cost``
        (the reply's bytes)."""
        minimum = self.min_affinity_size
        hints: list[TopologyHint] = []
        spent = 0
        for mask in self.iter_masks():
            preferred = mask.bit_count() == minimum
            if len(hints) >= limit and (not preferred or len(hints) >= preferred_ceiling):
                break
            if cost is not None and max_cost is not None:
                spent += cost(mask, preferred)
                if spent > max_cost:
                    break
            hints.append(TopologyHint(mask, preferred))
        total = self.count()
        if total is None:
            return Listed(hints, self._count_lower_bound(len(hints)), omitted_exact=False)
        return Listed(hints, total - len(hints))

    def count(self) -> int | None:
        """How many hints there are, or None when the counting program would be too large."""
        upsets = self.upsets.count(COUNT_STATE_BUDGET)
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
        """Every hint's mask in kubelet's order, or None when there are more than ``limit``
        (known at once when the supersets of the smallest up-set alone are more)."""
        upsets = self.upsets
        if upsets.exist:
            smallest = next(
                (k for k in range(2, len(upsets.unused) + 1) if next(upsets.lex(k), None)), None
            )
            if smallest is not None and len(upsets.unused) - smallest >= limit.bit_length():
                return None  # every superset of one up-set is one: 2^(unused - size) > limit
        masks = list(itertools.islice(self.iter_masks(), limit + 1))
        return None if len(masks) > limit else masks

    def narrowest_count(self) -> int | None:
        """The size of the narrowest hint (what the merge's ``bestNonPreferredAffinityCount`` takes):
        kubelet's order lists the smallest hints first."""
        first = self._first
        return None if first is None else first.bit_count()


def _lex_key(mask: int) -> tuple[int, ...]:
    return tuple(bitmask.get_bits(mask))
