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
    sums = []
    for col in columns:
        acc = list(itertools.accumulate(col[:count], initial=0))
        acc.extend(acc[-1:] * (count + 1 - len(acc)))
        sums.append(acc)
    return list(zip(*sums, strict=True))


class SortedSums:
    """Rows ``[i][c]``: per type, the largest (``largest``) or smallest sum of c values among
    ``values[i:]`` (or, with ``prefix``, among ``values[:i]``), for c = 0 .. the values there.

    A row is sorted and summed when first read (a search reads few of them); each row read
    is charged to ``work``.
    """

    def __init__(
        self,
        values: Sequence[tuple[int, ...]],
        types: int,
        *,
        largest: bool = True,
        prefix: bool = False,
        work: Work | None = None,
    ) -> None:
        self._values = values
        self._types = types
        self._largest = largest
        self._prefix = prefix
        self._work = work
        self._rows: dict[int, list[tuple[int, ...]]] = {}

    def __getitem__(self, i: int) -> list[tuple[int, ...]]:
        row = self._rows.get(i)
        if row is None:
            part = self._values[:i] if self._prefix else self._values[i:]
            if self._work is not None:
                self._work.spend(len(part) + 1)
            columns = [
                sorted((v[t] for v in part), reverse=self._largest) for t in range(self._types)
            ]
            row = prefix_sums(columns, len(part))
            self._rows[i] = row
        return row


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
    if not need or max(need) <= 0:  # every coordinate already covered
        return True
    if work is not None:
        work.spend(len(values))
    if k == 1:
        # One value alone: some value covers every coordinate (in one coordinate, the largest).
        for v in values:
            for x, n in zip(v, need, strict=True):
                if x < n:
                    break
            else:
                return True
        return False
    if len(need) == 1:
        return sum(sorted((v[0] for v in values), reverse=True)[:k]) >= need[0]
    vals = sorted(values, reverse=True)
    m = len(vals)
    best = SortedSums(vals, len(need), work=work)  # [i][c][t]: the largest c of vals[i:]

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
    values: Sequence[tuple[int, ...]], need: tuple[int, ...], budget: int, work: Work | None = None
) -> int | None:
    """How many subsets of two or more ``values`` cover ``need``; None once the program has
    visited more than ``budget`` states (summed over its steps, each charged to ``work``)."""
    capped: dict[tuple[int, tuple[int, ...]], int] = {(0, tuple(0 for _ in need)): 1}
    visited = len(capped)
    if visited > budget:
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
        visited += len(capped)
        if work is not None:
            work.spend(len(capped))
        if visited > budget:
            return None
    return sum(ways for (size, sums), ways in capped.items() if size >= 2 and sums == need)
