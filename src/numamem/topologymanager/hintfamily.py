"""What the hint merge takes: hints, hint lists and the families given by rule, and the orders
the merge ranks them by.

A provider's hints for one resource are a list of :class:`Hint` (an affinity mask or None
for any node, and whether it is preferred), or a :class:`HintFamily`: hints given by rule
(the memory manager's 2^n - 1 masks), which answer the merge's questions by their structure
instead of being listed. Masks of one size compare by :class:`Order` (kubelet's narrowest,
or with distances its closest); non-preferred sizes by :func:`size_rank`. Read-only values
and pure functions; a family's methods charge their own :class:`~numamem.work.Work`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Protocol

from numamem.topologymanager import bitmask
from numamem.work import Work


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


def size_rank(count: int, best_count: int) -> tuple[int, int]:
    """The order of non-preferred sizes: ``best_count`` first, then smaller ones from the
    largest down, then larger ones from the smallest up."""
    return (0, -count) if count <= best_count else (1, count)
