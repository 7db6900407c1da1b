"""Up-sets: the multi-node hints made of unused nodes, enumerated and searched by rule.

An *up-set* is a set of two or more unused nodes whose summed values (per
memory type, what each node can give) cover the request (see
:mod:`numamem.memorymanager.search.rules` for why every other multi-node hint is an
existing group). Adding a node never makes an up-set fail, so they are

* listed depth-first over the unused nodes in id order (:meth:`UpSets.lex`,
  kubelet's order within one size), a branch pruned as soon as the best
  completion (the largest values left) cannot cover the request: every branch
  followed ends in hints, so the cost grows with the number listed, not 2^n;
* listed smallest integer value first (:meth:`UpSets.colex`, what the
  narrowest order and ``findBestHint`` want), optionally containing given nodes;
* searched for the merge without listing them (:meth:`UpSets.best_of_size`,
  :meth:`UpSets.meet`, by :mod:`numamem.memorymanager.search.best_subset`);
* counted by a dynamic program capped at the request (:meth:`UpSets.count`).

Every branch is charged to the :class:`~numamem.work.Work`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence

from numamem.memorymanager.search.best_subset import Ground
from numamem.memorymanager.search.memo import memoized
from numamem.memorymanager.search.subsets import SortedSums, count_covering_subsets, covers
from numamem.topologymanager.hintfamily import Order, size_rank
from numamem.work import Work

Values = tuple[int, ...]


class UpSets:
    """The up-sets of one request over ``unused`` (ascending ids) with their ``values``."""

    def __init__(
        self, unused: Sequence[int], values: Sequence[Values], need: Values, work: Work
    ) -> None:
        self.unused = tuple(unused)
        self.values = list(values)
        self.need = need
        self.work = work
        self.mask = 0
        for n in self.unused:
            self.mask |= 1 << n
        self._index = {n: i for i, n in enumerate(self.unused)}

    @memoized
    def cap(self) -> Values:
        """What the nodes an up-set leaves out of the unused ones may be worth, per type."""
        total = [sum(v[t] for v in self.values) for t in range(len(self.need))]
        return tuple(s - x for s, x in zip(total, self.need, strict=True))

    @memoized
    def exist(self) -> bool:
        """Whether there is any up-set (then every unused node together is one)."""
        return len(self.unused) >= 2 and all(c >= 0 for c in self.cap)

    def contains(self, mask: int) -> bool:
        """Whether ``mask`` is an up-set."""
        if mask.bit_count() < 2 or mask & ~self.mask:
            return False
        bits = [self._index[n] for n in range(mask.bit_length()) if mask >> n & 1]
        return covers([self.values[i] for i in bits], self.need)

    # --- in kubelet's order (lexicographic within one size) ----------------------------

    @memoized
    def _suffix_best(self) -> SortedSums:
        """[i][j] = per type, the largest sum of j values among unused nodes i, i+1, ..."""
        return SortedSums(self.values, len(self.need), work=self.work)

    @memoized
    def _suffix_worst(self) -> SortedSums:
        """[i][j] = per type, the smallest sum of j values among unused nodes i, i+1, ..."""
        return SortedSums(self.values, len(self.need), largest=False, work=self.work)

    def lex(self, k: int) -> Iterator[int]:
        """Up-sets of size ``k`` in lexicographic order (as masks)."""
        if k < 2 or k > len(self.unused):
            return
        yield from self._dfs_lex(k, 0, 0, tuple(0 for _ in self.need))

    def _dfs_lex(self, k: int, start: int, mask: int, sums: Values) -> Iterator[int]:
        self.work.spend(1)
        left = k - mask.bit_count()
        need = self.need
        if left == 0:
            if all(s >= x for s, x in zip(sums, need, strict=True)):
                yield mask
            return
        m = len(self.unused)
        worst = self._suffix_worst[start][left]
        if all(s + w >= x for s, w, x in zip(sums, worst, need, strict=True)):
            # Every completion covers the request: the combinations themselves, in order.
            weights = [1 << n for n in self.unused[start:]]
            combos = itertools.combinations(weights, left)
            while chunk := [mask + sum(c) for c in itertools.islice(combos, 64)]:
                self.work.spend(len(chunk))
                yield from chunk
            return
        for i in range(start, m - left + 1):
            value = self.values[i]
            reach = self._suffix_best[i + 1][left - 1]
            if any(s + v + r < x for s, v, r, x in zip(sums, value, reach, need, strict=True)):
                continue
            yield from self._dfs_lex(
                k,
                i + 1,
                mask | (1 << self.unused[i]),
                tuple(s + v for s, v in zip(sums, value, strict=True)),
            )

    # --- smallest integer value first (colexicographic) -----------------------------------

    @memoized
    def _prefix_best(self) -> SortedSums:
        """[j][c] = per type, the largest sum of c values among unused nodes 0 .. j-1."""
        return SortedSums(self.values, len(self.need), prefix=True, work=self.work)

    def colex(self, k: int, base: int = 0) -> Iterator[int]:
        """Up-sets of size ``k`` containing the unused nodes of ``base``, smallest value first
        (none when ``base`` holds a node that is not unused)."""
        forced = [i for i, n in enumerate(self.unused) if base >> n & 1]
        if len(forced) != base.bit_count() or k < 2 or k > len(self.unused):
            return
        need = list(self.need)
        for i in forced:
            need = [x - v for x, v in zip(need, self.values[i], strict=True)]
        free = [i for i in range(len(self.unused)) if i not in set(forced)]
        yield from (
            base | extra for extra in self._colex(free, k - len(forced), tuple(need), len(free))
        )

    def _colex(self, free: list[int], c: int, need: Values, limit: int) -> Iterator[int]:
        """c-subsets of ``free[:limit]`` (indices into unused) covering ``need``, by value."""
        self.work.spend(1)
        if c == 0:
            if all(x <= 0 for x in need):
                yield 0
            return
        for j in range(c - 1, limit):
            i = free[j]
            value = self.values[i]
            rest = tuple(x - v for x, v in zip(need, value, strict=True))
            if not self._reachable(free, j, c - 1, rest):
                continue
            top = 1 << self.unused[i]
            for lower in self._colex(free, c - 1, rest, j):
                yield lower | top

    def _reachable(self, free: list[int], limit: int, c: int, need: Values) -> bool:
        """Whether c of ``free[:limit]`` can still cover ``need`` (per type, the c largest)."""
        if c == 0:
            return all(x <= 0 for x in need)
        if c > limit:
            return False
        if len(free) == len(self.unused):  # nothing forced: the precomputed prefix table applies
            best = self._prefix_best[free[limit - 1] + 1][c] if limit else tuple(0 for _ in need)
            return all(b >= x for b, x in zip(best, need, strict=True))
        self.work.spend(limit)
        for t, x in enumerate(need):
            if x <= 0:
                continue
            top = sorted((self.values[i][t] for i in free[:limit]), reverse=True)[:c]
            if sum(top) < x:
                return False
        return True

    # --- searches for the merge -----------------------------------------------------------

    def best_of_size(
        self, k: int, order: Order, accept: Callable[[int], bool] | None = None
    ) -> int | None:
        """The up-set of ``k`` nodes smallest under ``order`` (that ``accept`` accepts)."""
        if k < 2 or not self.exist:
            return None
        ground = Ground(self.unused, self.values, self.cap, 1, len(self.unused) - 2, self.work)
        return ground.best(k, order.distances, accept)

    def meet(
        self,
        e: int,
        copies: int,
        best_count: int,
        order: Order,
        below: tuple[int, ...] | None = None,
    ) -> int | None:
        """The best nonzero ``e & S1 & ... & S_copies`` over up-sets ``S``: sizes by
        :func:`~numamem.topologymanager.hintfamily.size_rank` with ``best_count``, then ``order``;
        only if it ranks below ``below`` (size rank, then order key) when given.

        Such an AND is any nonempty R within W = e ∩ unused whose rest W \\ R splits into
        ``copies`` parts each worth at most :attr:`cap` (each up-set leaves out one part and
        keeps every other unused node; nodes outside ``e`` help cover and then drop out).
        Feasible R are upward closed within W: the best size is ``best_count`` when the
        smallest feasible size is at most that, else the smallest feasible size.
        """
        if not self.exist:
            return None
        inside = [i for i, n in enumerate(self.unused) if e >> n & 1]
        if not inside:
            return None
        if below is not None:
            widest = min(best_count, len(inside)) if best_count >= 1 else 1
            if size_rank(widest, best_count) > below[:2]:
                return None  # not even the best size within e ranks below
        ground = Ground(
            [self.unused[i] for i in inside],
            [self.values[i] for i in inside],
            self.cap,
            copies,
            len(self.unused) - 2,
            self.work,
        )
        fewest = ground.fewest()
        if fewest is None:
            return None
        size = min(best_count, len(inside)) if fewest <= best_count else fewest
        rank = size_rank(size, best_count)
        if below is not None and rank > below[:2]:
            return None
        key = (below[2], below[3]) if below is not None and rank == below[:2] else None
        return ground.best(size, order.distances, below=key)

    # --- counting ---------------------------------------------------------------------

    def count(self, budget: int) -> int | None:
        """How many up-sets there are; None past ``budget`` states of the counting program
        (each charged to the work)."""
        return count_covering_subsets(self.values, self.need, budget, self.work)
