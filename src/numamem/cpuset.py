"""CPU sets in Linux cpulist syntax (``0-3,8,10-11``), kept as ranges: parse, format, size.

Used for NUMA node CPU lists and for the metacache's cpusets (which also hold
sets of NUMA ids). The parser is strict: every token is ``N`` or ``A-B`` with
``A <= B``; anything else is an error naming the text (the Go katalyst parser
silently skipped tokens such as ``1-2-3``; numamem refuses them so data is never
dropped quietly).

Cost: a :class:`CPUSet` holds sorted, disjoint, non-adjacent closed ranges, never
its ids, so parsing, ``len``, ``in``, ``==``, ``hash``, ``union`` and ``str`` cost
the number of tokens of the text (``O(t log t)`` at most), not the number of ids it
names: ``"0-8191"`` is one range (issue 38: every id of a range was put in a set,
and a 100-byte request naming ``0-1048576`` twenty times took seconds and GiB).
Only iteration yields ids, and every parse bounds them by a ``limit``:

* :data:`MAX_CPUS` for CPU ids (node cpulists, the metacache's assignments);
* :data:`MAX_NUMA_NODES` for NUMA ids (``cpuset.mems``, node lists, a region's
  ``binding_numas``);
* :data:`STORED_ID_LIMIT` for metacache entries read back from disk, which a daemon
  before these bounds may have written (see :mod:`numamem.metacache.types`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator

from numamem.errors import InvalidArgumentError, quote

__all__ = [
    "MAX_CPUS",
    "MAX_NUMA_NODES",
    "STORED_ID_LIMIT",
    "CPUSet",
    "format_cpulist",
    "parse_cpulist",
]

MAX_CPUS = 8192
"""CPU ids are below this: the largest ``CONFIG_NR_CPUS`` Linux allows on any architecture
(x86-64 with ``MAXSMP``, powerpc; arm64 and sparc64 stop at 4096). A cpulist naming a
larger id names no CPU of any Linux machine."""

MAX_NUMA_NODES = 1024
"""NUMA node ids are below this: Linux's ``MAX_NUMNODES`` is ``1 << CONFIG_NODES_SHIFT``,
and ``NODES_SHIFT`` is at most 10 (x86-64 with ``MAXSMP``, arm64)."""

STORED_ID_LIMIT = (1 << 20) + 1
"""The ids a daemon before :data:`MAX_CPUS` accepted (up to 2^20) and may have written to
the metacache's files; restore reads them (as ranges: cheap whatever they name)."""

_MAX_DIGITS = 32
"""Digits an id may have (leading zeros included) before it is refused unread: ``int()``
refuses more than 4300 digits with a ValueError, and no id that long fits anyway."""

Span = tuple[int, int]
"""A closed range of ids ``(first, last)``, ``first <= last``."""


class CPUSet:
    """An immutable set of non-negative integers, stored as ranges, with cpulist formatting.

    ``CPUSet(ids)`` costs the ids given; :meth:`parse` costs the text's tokens. Every other
    operation but iteration costs the ranges held (see the module docstring)."""

    __slots__ = ("_len", "_spans")

    def __init__(self, elems: Iterable[int] = ()) -> None:
        spans: list[list[int]] = []
        for i in sorted(set(elems)):
            if spans and spans[-1][1] + 1 == i:
                spans[-1][1] = i
            else:
                spans.append([i, i])
        self._spans: tuple[Span, ...] = tuple((lo, hi) for lo, hi in spans)
        self._len = sum(hi - lo + 1 for lo, hi in self._spans)

    @classmethod
    def _of(cls, spans: tuple[Span, ...]) -> CPUSet:
        """A set of ``spans`` already sorted, disjoint and non-adjacent."""
        made = cls.__new__(cls)
        made._spans = spans
        made._len = sum(hi - lo + 1 for lo, hi in spans)
        return made

    @classmethod
    def parse(cls, text: str, limit: int = MAX_CPUS, what: str = "CPU") -> CPUSet:
        """``0-3,8`` as ranges; empty or whitespace-only text is the empty set. Every id must
        be below ``limit`` (``what`` names the ids in the refusal: ``CPU``, ``NUMA node``).
        Raises InvalidArgumentError naming the text and the token; expands nothing."""
        body = text.strip()
        if not body:
            return _EMPTY
        spans: list[Span] = []
        for raw in body.split(","):
            token = raw.strip()
            first, sep, last = token.partition("-")
            if not _is_uint(first) or (sep and not _is_uint(last)):
                raise InvalidArgumentError(
                    f"invalid cpulist {quote(text)}: bad element {quote(token)}"
                )
            if max(len(first), len(last)) > _MAX_DIGITS:
                raise InvalidArgumentError(
                    f"invalid cpulist {quote(text)}: {quote(token)} is not below {_bound(limit)}"
                )
            lo = int(first)
            hi = int(last) if sep else lo
            if hi < lo:
                raise InvalidArgumentError(
                    f"invalid cpulist {quote(text)}: range {quote(token)} is reversed"
                )
            if hi >= limit:
                raise InvalidArgumentError(
                    f"invalid cpulist {quote(text)}: {what} id {hi} is not below {_bound(limit)}"
                )
            spans.append((lo, hi))
        return cls._of(_merged(spans))

    @property
    def spans(self) -> tuple[Span, ...]:
        """The ranges, sorted, disjoint and non-adjacent."""
        return self._spans

    def last(self) -> int | None:
        """The largest id, or None for the empty set (O(1))."""
        return self._spans[-1][1] if self._spans else None

    def __iter__(self) -> Iterator[int]:
        """Every id, ascending: the one operation that costs the number of ids (bounded by
        the ``limit`` of the parse that made the set)."""
        for lo, hi in self._spans:
            yield from range(lo, hi + 1)

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return bool(self._spans)

    def __contains__(self, item: object) -> bool:
        if not isinstance(item, int):
            return False
        at = bisect.bisect_right(self._spans, item, key=_first) - 1
        return at >= 0 and self._spans[at][0] <= item <= self._spans[at][1]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CPUSet) and other._spans == self._spans

    def __hash__(self) -> int:
        return hash(self._spans)

    def __str__(self) -> str:
        return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in self._spans)

    def __repr__(self) -> str:
        return f"CPUSet({str(self)!r})"

    def union(self, other: CPUSet) -> CPUSet:
        return CPUSet._of(_merged([*self._spans, *other._spans]))


def _first(span: Span) -> int:
    return span[0]


_WHY = {
    MAX_CPUS: "MAX_CPUS, Linux's largest CONFIG_NR_CPUS",
    MAX_NUMA_NODES: "MAX_NUMA_NODES, Linux's largest MAX_NUMNODES",
    STORED_ID_LIMIT: "STORED_ID_LIMIT, the most numamem ever accepted",
}


def _bound(limit: int) -> str:
    """The limit as a refusal names it: ``8192 (MAX_CPUS, Linux's largest CONFIG_NR_CPUS)``."""
    why = _WHY.get(limit)
    return f"{limit} ({why})" if why else str(limit)


def _merged(spans: list[Span]) -> tuple[Span, ...]:
    """``spans`` sorted, with overlapping and adjacent ranges joined: O(n log n)."""
    spans.sort()
    out: list[Span] = []
    for lo, hi in spans:
        if out and lo <= out[-1][1] + 1:
            if hi > out[-1][1]:
                out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return tuple(out)


_EMPTY = CPUSet._of(())


def parse_cpulist(text: str, limit: int = MAX_CPUS, what: str = "CPU") -> list[int]:
    """Parse ``0-3,8,10-11`` into sorted ids (at most ``limit`` of them, each below it; see
    :meth:`CPUSet.parse`); empty or whitespace-only text is the empty list."""
    return list(CPUSet.parse(text, limit, what))


def _is_uint(text: str) -> bool:
    return text.isascii() and text.isdigit()


def format_cpulist(ids: Iterable[int]) -> str:
    """Canonical cpulist: sorted, consecutive runs of 2+ collapsed to ``a-b``."""
    if isinstance(ids, CPUSet):
        return str(ids)
    return str(CPUSet(ids))
