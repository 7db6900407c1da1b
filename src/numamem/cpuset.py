"""CPU sets in Linux cpulist syntax (``0-3,8,10-11``), kept as ranges: parse, format, size.

Used for NUMA node CPU lists and for the metacache's cpusets (which also hold
sets of NUMA ids). The parser is strict: every token is ``N`` or ``A-B`` with
``A <= B``; anything else is an error naming the text (the Go katalyst parser
silently skipped tokens such as ``1-2-3``; numamem refuses them so data is never
dropped quietly).

Cost: a :class:`CPUSet` holds sorted, disjoint, non-adjacent closed ranges, never
its ids, packed two machine integers a range (16 bytes, no Python object per range),
so parsing, ``len``, ``in``, ``==``, ``hash``, ``union`` and ``str`` cost the number
of tokens of the text (``O(t log t)`` at most), not the number of ids it names:
``"0-8191"`` is one range (issue 38: every id of a range was put in a set, and a
100-byte request naming ``0-1048576`` twenty times took seconds and GiB). The parser
scans the text token by token (it never splits it into a list of strings) and merges
each range into the last as it goes; only tokens out of order are sorted at the end.
Only iteration yields ids, and every parse bounds them by a ``limit``:

* :data:`MAX_CPUS` for CPU ids (node cpulists, the metacache's assignments);
* :data:`MAX_NUMA_NODES` for NUMA ids (``cpuset.mems``, node lists, a region's
  ``binding_numas``);
* :data:`STORED_ID_LIMIT` for metacache entries read back from disk, which a daemon
  before these bounds may have written (see :mod:`numamem.metacache.types`).

and the text by :data:`MAX_CPULIST_BYTES` and :data:`MAX_CPULIST_TOKENS` (issue 38,
second review: ``"1000,1000,..."``, 4 MiB naming one id, took 1.2 s and 145 MiB to
parse, and four at once did not fit in the DaemonSet's 512Mi). Restore passes no text
bound: what a daemon wrote is canonical (one token a range) and already in memory.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable, Iterator

from numamem.errors import InvalidArgumentError, quote

__all__ = [
    "MAX_CPULIST_BYTES",
    "MAX_CPULIST_TOKENS",
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

MAX_CPULIST_TOKENS = 2 * MAX_CPUS
"""Elements (``N`` or ``A-B``) one cpulist may have: every CPU id of the largest machine
named alone takes :data:`MAX_CPUS`; twice that leaves room for overlapping ranges. A list
with more names some id more than twice."""

MAX_CPULIST_BYTES = 64 * 1024
"""Characters one cpulist may have (a valid one is ASCII: bytes): every id below
:data:`MAX_CPUS` named alone, comma-separated, takes 39,849."""

_MAX_DIGITS = 32
"""Digits an id may have (leading zeros included) before it is refused unread: ``int()``
refuses more than 4300 digits with a ValueError, and no id that long fits anyway."""

Span = tuple[int, int]
"""A closed range of ids ``(first, last)``, ``first <= last``."""


class CPUSet:
    """An immutable set of non-negative integers, stored as ranges, with cpulist formatting.

    ``CPUSet(ids)`` costs the ids given; :meth:`parse` costs the text's tokens. Every other
    operation but iteration costs the ranges held (see the module docstring). The ranges
    are packed in one array, ``first, last, first, last, ...``, never shared or changed."""

    __slots__ = ("_flat", "_len")

    def __init__(self, elems: Iterable[int] = ()) -> None:
        flat = array("q")
        for i in sorted(set(elems)):
            if flat and flat[-1] + 1 == i:
                flat[-1] = i
            else:
                flat.append(i)
                flat.append(i)
        self._flat = flat
        self._len = _count(flat)

    @classmethod
    def _of(cls, flat: array[int]) -> CPUSet:
        """A set of the packed ranges ``flat``, already sorted, disjoint and non-adjacent
        (taken, not copied)."""
        made = cls.__new__(cls)
        made._flat = flat
        made._len = _count(flat)
        return made

    @classmethod
    def parse(
        cls,
        text: str,
        limit: int = MAX_CPUS,
        what: str = "CPU",
        *,
        max_bytes: int | None = MAX_CPULIST_BYTES,
        max_tokens: int | None = MAX_CPULIST_TOKENS,
    ) -> CPUSet:
        """``0-3,8`` as ranges; empty or whitespace-only text is the empty set. Every id must
        be below ``limit`` (``what`` names the ids in the refusal: ``CPU``, ``NUMA node``);
        the text may have at most ``max_bytes`` characters and ``max_tokens`` elements
        (None: no bound, for what a daemon wrote). Raises InvalidArgumentError naming the
        text and the token or the bound; expands nothing, allocates no string but the
        current token (and a sort of the ranges when tokens come out of order)."""
        if max_bytes is not None and len(text) > max_bytes:
            raise InvalidArgumentError(
                f"cpulist of {len(text)} characters, more than {_bound(max_bytes)}"
            )
        body = text.strip()
        if not body:
            return _EMPTY
        if max_tokens is not None and body.count(",") >= max_tokens:
            raise InvalidArgumentError(
                f"invalid cpulist {quote(text)}: {body.count(',') + 1} elements, more than "
                f"{_bound(max_tokens)}"
            )
        flat: array[int] = array("q")
        ordered, pos, end = True, 0, len(body)
        while pos <= end:
            comma = body.find(",", pos)
            stop = end if comma < 0 else comma
            lo, hi = _token(text, body[pos:stop], limit, what)
            pos = stop + 1
            if not flat:
                flat.extend((lo, hi))
            elif not ordered or lo < flat[-2]:
                ordered = False
                flat.extend((lo, hi))
            elif lo <= flat[-1] + 1:  # overlaps or touches the last range
                flat[-1] = max(flat[-1], hi)
            else:
                flat.extend((lo, hi))
        return cls._of(flat if ordered else _merged(flat))

    @property
    def spans(self) -> tuple[Span, ...]:
        """The ranges, sorted, disjoint and non-adjacent."""
        flat = self._flat
        return tuple(zip(flat[0::2], flat[1::2], strict=True))

    def last(self) -> int | None:
        """The largest id, or None for the empty set (O(1))."""
        return self._flat[-1] if self._flat else None

    def __iter__(self) -> Iterator[int]:
        """Every id, ascending: the one operation that costs the number of ids (bounded by
        the ``limit`` of the parse that made the set)."""
        flat = self._flat
        for at in range(0, len(flat), 2):
            yield from range(flat[at], flat[at + 1] + 1)

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return bool(self._flat)

    def __contains__(self, item: object) -> bool:
        if not isinstance(item, int):
            return False
        at = bisect.bisect_right(self._flat, item)
        return at % 2 == 1 or (at > 0 and self._flat[at - 1] == item)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CPUSet) and other._flat == self._flat

    def __hash__(self) -> int:
        return hash(self._flat.tobytes())

    def __str__(self) -> str:
        flat = self._flat
        return ",".join(
            str(flat[at]) if flat[at] == flat[at + 1] else f"{flat[at]}-{flat[at + 1]}"
            for at in range(0, len(flat), 2)
        )

    def __repr__(self) -> str:
        return f"CPUSet({str(self)!r})"

    def union(self, other: CPUSet) -> CPUSet:
        return CPUSet._of(_merged(self._flat + other._flat))


def _token(text: str, raw: str, limit: int, what: str) -> Span:
    """One element of ``text`` as a range (refusals name ``text`` and the element)."""
    token = raw.strip()
    first, sep, last = token.partition("-")
    if not _is_uint(first) or (sep and not _is_uint(last)):
        raise InvalidArgumentError(f"invalid cpulist {quote(text)}: bad element {quote(token)}")
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
    return lo, hi


def _count(flat: array[int]) -> int:
    """The ids the packed ranges ``flat`` hold."""
    return sum(flat[1::2]) - sum(flat[0::2]) + len(flat) // 2


_WHY = {
    MAX_CPUS: "MAX_CPUS, Linux's largest CONFIG_NR_CPUS",
    MAX_NUMA_NODES: "MAX_NUMA_NODES, Linux's largest MAX_NUMNODES",
    STORED_ID_LIMIT: "STORED_ID_LIMIT, the most numamem ever accepted",
    MAX_CPULIST_TOKENS: "MAX_CPULIST_TOKENS, twice every CPU id of the largest machine",
    MAX_CPULIST_BYTES: "MAX_CPULIST_BYTES, every CPU id of the largest machine written out",
}


def _bound(limit: int) -> str:
    """The limit as a refusal names it: ``8192 (MAX_CPUS, Linux's largest CONFIG_NR_CPUS)``."""
    why = _WHY.get(limit)
    return f"{limit} ({why})" if why else str(limit)


def _merged(flat: array[int]) -> array[int]:
    """The packed ranges ``flat`` sorted, with overlapping and adjacent ranges joined:
    O(n log n), one tuple a range while sorting."""
    out: array[int] = array("q")
    for lo, hi in sorted(zip(flat[0::2], flat[1::2], strict=True)):
        if out and lo <= out[-1] + 1:
            out[-1] = max(out[-1], hi)
        else:
            out.extend((lo, hi))
    return out


_EMPTY = CPUSet._of(array("q"))


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
