"""Sums over subsets of per-node values, the arithmetic under the hint search.

Each value is a tuple with one entry per requested memory type (bytes a node
can give); a subset *covers* a request when its per-type sums all reach it.
Pure functions of their arguments.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from numamem.work import Work


def prefix_sums(columns: Sequence[Sequence[int]], count: int) -> list[tuple[int, ...]]:
    """[j] = per column, the sum of its first j values (all of them, when it has fewer),
    for j = 0 .. count."""
    sums = [list(itertools.accumulate(col[:count], initial=0)) for col in columns]
    return [tuple(col[min(j, len(col) - 1)] for col in sums) for j in range(count + 1)]


def covers(values: Sequence[tuple[int, ...]], need: tuple[int, ...]) -> bool:
    """Whether ``values`` together cover ``need`` in every coordinate."""
    return all(sum(v[i] for v in values) >= x for i, x in enumerate(need))


def exists_subset(
    values: Sequence[tuple[int, ...]], k: int, need: tuple[int, ...], work: Work | None = None
) -> bool:
    """Whether some k of ``values`` sum, per coordinate, to at least ``need``.

    One coordinate: the k largest. Several: a depth-first search over the values
    (largest first) that stops a branch once the k largest values left per
    coordinate cannot reach ``need``; each branch is charged to ``work``.
    """
    if k > len(values):
        return False
    if all(x <= 0 for x in need):
        return True
    if work is not None:
        work.spend(len(values))
    if len(need) == 1:
        return sum(sorted((v[0] for v in values), reverse=True)[:k]) >= need[0]
    if k == 1:
        return any(all(x >= n for x, n in zip(v, need, strict=True)) for v in values)
    vals = sorted(values, reverse=True)
    m = len(vals)
    # best[i][c][t]: the largest sum of c values of coordinate t among vals[i:].
    best = []
    for i in range(m + 1):
        columns = [sorted((v[t] for v in vals[i:]), reverse=True) for t in range(len(need))]
        best.append(prefix_sums(columns, k))

    def search(start: int, left: int, sums: tuple[int, ...]) -> bool:
        if work is not None:
            work.spend(1)
        if left == 0:
            return all(s >= x for s, x in zip(sums, need, strict=True))
        for i in range(start, m - left + 1):
            reach = best[i][left]
            if any(s + r < x for s, r, x in zip(sums, reach, need, strict=True)):
                return False  # fewer values left further on: they reach even less
            picked = tuple(s + v for s, v in zip(sums, vals[i], strict=True))
            if search(i + 1, left - 1, picked):
                return True
        return False

    return search(0, k, tuple(0 for _ in need))


def count_covering_subsets(
    values: Sequence[tuple[int, ...]], need: tuple[int, ...], budget: int
) -> int | None:
    """How many subsets of two or more ``values`` cover ``need``; None past ``budget`` states."""
    capped: dict[tuple[int, tuple[int, ...]], int] = {(0, tuple(0 for _ in need)): 1}
    if len(capped) > budget:
        return None
    for v in values:
        nxt = dict(capped)
        for (size, sums), ways in capped.items():
            key = (
                min(size + 1, 2),
                tuple(min(s + x, n) for s, x, n in zip(sums, v, need, strict=True)),
            )
            nxt[key] = nxt.get(key, 0) + ways
        capped = nxt
        if len(capped) > budget:
            return None
    return sum(ways for (size, sums), ways in capped.items() if size >= 2 and sums == need)
