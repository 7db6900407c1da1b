"""The best subset of NUMA nodes under the merge's orders, found without listing subsets.

The merge's searches over the memory manager's up-sets (see
:mod:`numamem.memorymanager.search.rules`) all come down to one question. Given a
ground set W of nodes, a value per node and memory type, and ``bins`` bins
that each hold at most ``cap`` per type and at most ``max_per_bin`` nodes:
among the subsets R of W of a given size whose rest W \\ R can be split into
the bins, which is the smallest under the order? The order is the merge's:
the integer value of the mask (kubelet's narrowest), or the sum of the
distances over all ordered pairs of R's nodes, then the value
(``prefer-closest-numa-nodes``; for masks of one size, comparing sums is
comparing kubelet's averages).

* A preferred hint of k >= 2 nodes made of unused nodes U is a k-subset of U
  that covers the request: its rest U \\ R is worth at most
  ``cap = value(U) - request``, one bin.
* The AND of a mask ``e`` with j up-sets is any R within ``W = e ∩ U`` such that
  W \\ R splits into j bins of that cap (each up-set leaves out one bin's nodes
  and keeps every other unused node).

Feasibility is upward closed (a larger R leaves less to pack), so the
feasible sizes are an interval, from :meth:`Ground.fewest` to |W|.

:meth:`Ground.best` is exact. By value it is a depth-first search that decides
the nodes from the highest id down, leaving a node out before taking it:
complete subsets come in increasing integer value, so the first feasible one
is the answer, and a branch is cut as soon as the nodes left cannot make it
feasible. By distance it is a branch and bound: nodes are taken in the order
of a lower bound of their share of the sum, the first feasible subset found is
the incumbent, and a branch is cut when its lower bound (the sum so far plus,
for the nodes still to take, the least each can add: its self distance, its
distances to and from the nodes taken (tables need not be symmetric), and its
smallest distances to the others)
and the smallest value it can still reach are not below the incumbent's. Every
node visited and every candidate scored is charged to the :class:`~numamem.work.Work`,
so a search either finishes or is refused by name.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence

from numamem.memorymanager.search.subsets import exists_subset
from numamem.work import Work

Values = tuple[int, ...]

NODE_STEPS = 16
"""Steps charged per node of a search (its pruning tests and bookkeeping)."""
BOUND_STEPS = 8
"""Steps charged per candidate a distance bound scores."""


def packs(items: Sequence[Values], cap: Values, bins: int, max_per_bin: int, work: Work) -> bool:
    """Whether ``items`` split into ``bins`` bins of at most ``cap`` per type and
    ``max_per_bin`` items each (exact: first-fit decreasing, then a search)."""
    if len(items) > bins * max_per_bin:
        return False
    types = range(len(cap))
    totals = [sum(v[t] for v in items) for t in types]
    if any(totals[t] > bins * cap[t] for t in types):
        return False
    if any(v[t] > cap[t] for v in items for t in types):
        return False
    if bins == 1:
        return True  # the totals fit one bin
    scale = [max(c, 1) for c in cap]
    ordered = sorted(items, key=lambda v: -sum(v[t] / scale[t] for t in types))
    work.spend(len(ordered))
    if _first_fit(ordered, cap, bins, max_per_bin):
        return True
    loads = [[0] * len(cap) for _ in range(bins)]
    counts = [0] * bins
    suffix = [totals]
    for v in ordered:
        suffix.append([s - x for s, x in zip(suffix[-1], v, strict=True)])

    def place(k: int) -> bool:
        work.spend(NODE_STEPS)
        if k == len(ordered):
            return True
        for t in types:
            if sum(cap[t] - load[t] for load in loads) < suffix[k][t]:
                return False
        v = ordered[k]
        tried: set[tuple[tuple[int, ...], int]] = set()
        for b in range(bins):
            shape = (tuple(loads[b]), counts[b])
            if shape in tried or counts[b] >= max_per_bin:
                continue
            tried.add(shape)
            load = loads[b]
            if any(load[t] + v[t] > cap[t] for t in types):
                continue
            for t in types:
                load[t] += v[t]
            counts[b] += 1
            if place(k + 1):
                return True
            for t in types:
                load[t] -= v[t]
            counts[b] -= 1
        return False

    return place(0)


def _first_fit(ordered: Sequence[Values], cap: Values, bins: int, max_per_bin: int) -> bool:
    loads = [[0] * len(cap) for _ in range(bins)]
    counts = [0] * bins
    for v in ordered:
        for b in range(bins):
            load = loads[b]
            if counts[b] < max_per_bin and all(
                x + y <= c for x, y, c in zip(load, v, cap, strict=True)
            ):
                for t, y in enumerate(v):
                    load[t] += y
                counts[b] += 1
                break
        else:
            return False
    return True


class Ground:
    """One search: the ground nodes (ids with their values) and the bins their rest must fit."""

    def __init__(
        self,
        nodes: Sequence[int],
        values: Sequence[Values],
        cap: Values,
        bins: int,
        max_per_bin: int,
        work: Work,
    ) -> None:
        self.nodes = tuple(nodes)
        self.values = tuple(values)
        self.cap = cap
        self.bins = bins
        self.max_per_bin = max_per_bin
        self.work = work
        self.bin_cap = cap if bins == 1 else tuple(bins * c for c in cap)
        """What all the bins hold together, per type (the one-bin relaxation)."""
        self.bin_count = bins * max_per_bin

    # --- sizes -----------------------------------------------------------------------

    def fewest(self) -> int | None:
        """The smallest size of a feasible subset (None: not even W itself is feasible)."""
        m = len(self.nodes)
        if m == 0 or any(c < 0 for c in self.cap) or self.max_per_bin < 0:
            return None
        types = range(len(self.cap))
        total = tuple(sum(v[t] for v in self.values) for t in types)
        rest = tuple(total[t] - self.bin_cap[t] for t in types)
        lowest = max(1, m - self.bin_count)
        covering = next(
            (c for c in range(lowest, m + 1) if exists_subset(self.values, c, rest, self.work)),
            None,
        )
        if covering is None:
            return None
        if self.bins == 1:
            return covering  # the one-bin relaxation is the problem itself
        for size in range(covering, m + 1):
            if self._by_value(size, None) is not None:
                return size
        return None

    # --- the best subset of one size ---------------------------------------------------

    def best(
        self,
        size: int,
        distances: Mapping[int, Mapping[int, int]] | None = None,
        accept: Callable[[int], bool] | None = None,
        below: tuple[int, int] | None = None,
    ) -> int | None:
        """The feasible ``size``-subset smallest by value, or (with ``distances``) by the sum
        of distances over ordered pairs, then value; None when there is none. ``accept``
        filters complete subsets (masks); with ``below`` (a key: distance sum, mask), only a
        subset whose key is smaller counts (the caller's incumbent: searches start from it)."""
        if size < 1 or size > len(self.nodes):
            return None
        if distances is None:
            return self._by_value(size, accept, None if below is None else below[1])
        return self._by_distance(size, distances, accept, below)

    def _by_value(
        self, size: int, accept: Callable[[int], bool] | None, below: int | None = None
    ) -> int | None:
        m = len(self.nodes)
        pos = _Positions(self, sorted(range(m), key=lambda i: -self.nodes[i]))
        excluded: list[int] = []
        work = self.work
        # tail[r]: the r smallest ids (the last r positions), the least any r nodes can add.
        tail = [0]
        for node in reversed(pos.ids):
            tail.append(tail[-1] | 1 << node)
        limit = math.inf if below is None else below

        def dfs(i: int, r: int, load: Values, count: int, mask: int) -> int | None:
            work.spend(NODE_STEPS)
            if mask + tail[r] >= limit or not pos.may_complete(i, r, load, count):
                return None
            if r == m - i:  # every node left is taken
                full = mask | pos.rest_mask[i]
                return full if pos.fits(excluded, m) and _ok(accept, full) else None
            if r == 0:  # every node left is left out
                return mask if pos.fits(excluded, i) and _ok(accept, mask) else None
            if pos.excludable[i]:
                left_out = tuple(x + y for x, y in zip(load, pos.values[i], strict=True))
                excluded.append(i)
                found = dfs(i + 1, r, left_out, count + 1, mask)
                excluded.pop()
                if found is not None:
                    return found
            return dfs(i + 1, r - 1, load, count, mask | 1 << pos.ids[i])

        return dfs(0, size, tuple(0 for _ in self.cap), 0, 0)

    def _by_distance(
        self,
        size: int,
        distances: Mapping[int, Mapping[int, int]],
        accept: Callable[[int], bool] | None,
        below: tuple[int, int] | None = None,
    ) -> int | None:
        m = len(self.nodes)
        work = self.work
        work.spend(m * m)
        # least[x][k]: the sum of the k smallest distances from x to the other ground nodes.
        least: dict[int, list[int]] = {}
        for x in self.nodes:
            row = sorted(distances[x][y] for y in self.nodes if y != x)
            sums = [0]
            for d in row[: size - 1]:
                sums.append(sums[-1] + d)
            least[x] = sums

        def promise(i: int) -> tuple[int, int]:
            x = self.nodes[i]
            return (distances[x][x] + least[x][-1], x)

        pos = _Positions(self, sorted(range(m), key=promise))
        ids = pos.ids
        selfd = [distances[x][x] for x in ids]
        least_of = [least[x] for x in ids]
        # Both directions of each pair: a distance table need not be symmetric (an ACPI SLIT
        # may not be; the kubelet sums d[a][b] over ordered pairs as the kernel reports them).
        row_of = [[distances[x][y] + distances[y][x] for y in ids] for x in ids]
        toward = [0] * m  # toward[j]: the distances between node j and the nodes taken so far
        excluded: list[int] = []
        best: list[int] = [1 << 62, 1 << 62] if below is None else list(below)  # the incumbent
        found: list[int | None] = [None]

        def bound(i: int, r: int, total: int, mask: int) -> tuple[int, int]:
            work.spend(BOUND_STEPS * (m - i))
            shares = heapq.nsmallest(
                r,
                (
                    selfd[j] + toward[j] + least_of[j][min(r - 1, len(least_of[j]) - 1)]
                    for j in range(i, m)
                ),
            )
            return total + sum(shares), mask + sum(heapq.nsmallest(r, (1 << x for x in ids[i:])))

        def dfs(i: int, r: int, load: Values, count: int, mask: int, total: int) -> None:
            work.spend(NODE_STEPS + m - i)
            if not pos.may_complete(i, r, load, count):
                return
            if r == 0:
                if (
                    (total, mask) < (best[0], best[1])
                    and pos.fits(excluded, i)
                    and _ok(accept, mask)
                ):
                    best[0], best[1] = total, mask
                    found[0] = mask
                return
            if bound(i, r, total, mask) >= (best[0], best[1]):
                return
            # take node i
            added = selfd[i] + toward[i]
            row = row_of[i]
            for j in range(i + 1, m):
                toward[j] += row[j]
            dfs(i + 1, r - 1, load, count, mask | 1 << ids[i], total + added)
            for j in range(i + 1, m):
                toward[j] -= row[j]
            # leave it out
            if pos.excludable[i] and r < m - i:
                left_out = tuple(x + y for x, y in zip(load, pos.values[i], strict=True))
                excluded.append(i)
                dfs(i + 1, r, left_out, count + 1, mask, total)
                excluded.pop()

        dfs(0, size, tuple(0 for _ in self.cap), 0, 0, 0)
        return found[0]


def _ok(accept: Callable[[int], bool] | None, mask: int) -> bool:
    return accept is None or accept(mask)


class _Positions:
    """The ground nodes in one search order, with what the pruning reads."""

    def __init__(self, ground: Ground, order: Sequence[int]) -> None:
        ids = [ground.nodes[i] for i in order]
        values = [ground.values[i] for i in order]
        m = len(ids)
        ground.work.spend(m)
        self.ground = ground
        self.ids = ids
        self.values = values
        self.rest_mask = [0] * (m + 1)
        zero = tuple(0 for _ in ground.cap)
        self.suffix_sum: list[Values] = [zero] * (m + 1)
        self.forced = [0] * (m + 1)
        """Nodes from position i on that cannot be left out (worth more than a bin)."""
        self.excludable = [
            ground.max_per_bin >= 1 and all(x <= c for x, c in zip(v, ground.cap, strict=True))
            for v in values
        ]
        for i in range(m - 1, -1, -1):
            self.rest_mask[i] = self.rest_mask[i + 1] | 1 << ids[i]
            self.suffix_sum[i] = tuple(
                a + b for a, b in zip(self.suffix_sum[i + 1], values[i], strict=True)
            )
            self.forced[i] = self.forced[i + 1] + (not self.excludable[i])
        self._top: dict[tuple[int, int], Values] = {}

    def top(self, i: int, r: int) -> Values:
        """Per type, the largest sum of r values from position i on."""
        key = (i, r)
        found = self._top.get(key)
        if found is None:
            rest = self.values[i:]
            self.ground.work.spend(len(rest) * len(self.ground.cap))
            found = tuple(
                sum(heapq.nlargest(r, (v[t] for v in rest))) for t in range(len(self.ground.cap))
            )
            self._top[key] = found
        return found

    def may_complete(self, i: int, r: int, load: Values, count: int) -> bool:
        """Whether r more nodes taken from position i on can still leave a rest that fits:
        the rest is at least the nodes left out so far plus what is left after the r largest
        values (per type), and every node that cannot be left out must be among the r."""
        left = len(self.ids) - i
        ground = self.ground
        if r > left or self.forced[i] > r or count + left - r > ground.bin_count:
            return False
        rest = self.suffix_sum[i]
        cap = ground.bin_cap
        if all(x + y <= c for x, y, c in zip(load, rest, cap, strict=True)):
            return True  # even leaving every node left out fits
        top = self.top(i, r)
        return all(x + y - z <= c for x, y, z, c in zip(load, rest, top, cap, strict=True))

    def fits(self, excluded: list[int], rest_from: int) -> bool:
        """Whether the nodes left out (``excluded`` and every position from ``rest_from`` on)
        split into the bins. One bin: :meth:`may_complete` already checked it exactly."""
        ground = self.ground
        if ground.bins == 1:
            return True
        items = [self.values[j] for j in excluded]
        items += self.values[rest_from:]
        return packs(items, ground.cap, ground.bins, ground.max_per_bin, ground.work)
