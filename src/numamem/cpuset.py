"""CPU sets in Linux cpulist syntax (``0-3,8,10-11``): parse, canonical format, size.

Used for NUMA node CPU lists and for the metacache's cpusets (which also hold
sets of NUMA ids). The parser is strict: every token is ``N`` or ``A-B`` with
``A <= B``; anything else is an error naming the text (the Go katalyst parser
silently skipped tokens such as ``1-2-3``; numamem refuses them so data is never
dropped quietly).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from numamem.errors import InvalidArgumentError, quote

__all__ = ["CPUSet", "format_cpulist", "parse_cpulist"]

MAX_CPU_ID = 1 << 20  # far above any real machine; bounds memory for hostile input
_MAX_DIGITS = 32
"""Digits an id may have (leading zeros included) before it is refused unread: ``int()``
refuses more than 4300 digits with a ValueError, and no id that long fits anyway."""


class CPUSet:
    """An immutable set of non-negative integers with cpulist formatting."""

    __slots__ = ("_elems",)

    def __init__(self, elems: Iterable[int] = ()) -> None:
        self._elems = frozenset(elems)

    @classmethod
    def parse(cls, text: str) -> CPUSet:
        return cls(parse_cpulist(text))

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._elems))

    def __len__(self) -> int:
        return len(self._elems)

    def __contains__(self, item: object) -> bool:
        return item in self._elems

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CPUSet) and other._elems == self._elems

    def __hash__(self) -> int:
        return hash(self._elems)

    def __str__(self) -> str:
        return format_cpulist(self._elems)

    def __repr__(self) -> str:
        return f"CPUSet({format_cpulist(self._elems)!r})"

    def union(self, other: CPUSet) -> CPUSet:
        return CPUSet(self._elems | other._elems)


def parse_cpulist(text: str) -> list[int]:
    """Parse ``0-3,8,10-11`` into sorted ids; empty or whitespace-only text is the empty set."""
    result: set[int] = set()
    body = text.strip()
    if not body:
        return []
    for raw in body.split(","):
        token = raw.strip()
        first, sep, last = token.partition("-")
        if not _is_uint(first) or (sep and not _is_uint(last)):
            raise InvalidArgumentError(f"invalid cpulist {quote(text)}: bad element {quote(token)}")
        if max(len(first), len(last)) > _MAX_DIGITS:
            raise InvalidArgumentError(
                f"invalid cpulist {quote(text)}: {quote(token)} exceeds {MAX_CPU_ID}"
            )
        lo = int(first)
        hi = int(last) if sep else lo
        if hi < lo:
            raise InvalidArgumentError(
                f"invalid cpulist {quote(text)}: range {quote(token)} is reversed"
            )
        if hi > MAX_CPU_ID:
            raise InvalidArgumentError(f"invalid cpulist {quote(text)}: {hi} exceeds {MAX_CPU_ID}")
        result.update(range(lo, hi + 1))
    return sorted(result)


def _is_uint(text: str) -> bool:
    return text.isascii() and text.isdigit()


def format_cpulist(ids: Iterable[int]) -> str:
    """Canonical cpulist: sorted, consecutive runs of 2+ collapsed to ``a-b``."""
    ordered = sorted(set(ids))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)
