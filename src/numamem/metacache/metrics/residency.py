"""Where a pinned container's memory is, against the NUMA nodes it was given (pure).

Inputs: the nodes the memory manager assigned (the union of the container's
blocks' NUMA affinity, what ``GetMemoryNUMANodes`` returns for ``cpuset.mems``),
the container cgroup's :class:`~numamem.metacache.metrics.numastat.NumaStat`,
and the ``cpuset.mems`` the kernel enforces (None when there is no cpuset
controller for the container).

Per node and memory type, in bytes:

* v1: ``total``, ``file``, ``anon``, ``unevictable`` from the ``hierarchical_``
  lines (the container's cgroup and its descendants), the plain lines when the
  kernel writes no hierarchical ones. ``total`` is every LRU page: anon + file
  + unevictable (mlocked).
* v2: every byte-valued line (not the ``workingset_*`` event counters), and
  ``total`` = ``anon`` + ``file`` (``shmem``, ``file_mapped``, ``*_thp``, the
  active/inactive lists are parts of those two; kernel memory, ``kernel_stack``,
  ``pagetables``, ``slab_*``, is listed but not in ``total``).

Huge pages: hugetlb pages are not charged to the memory controller (unless v2
is mounted with ``memory_hugetlb_accounting``), so ``memory.numa_stat`` does
not count them. The hugetlb controller's ``hugetlb.<size>.numa_stat`` (Linux
5.17 and later) does: each size is a type of its own, ``hugetlb_2MB``,
``hugetlb_1GB`` (the kernel's size names), and is added to ``total``. Without
them, a v2 ``hugetlb`` line of ``memory.numa_stat`` (the accounting option) is
added instead, never both. On older kernels, or without the hugetlb controller,
huge pages are in no figure.

Shared memory (tmpfs, ``/dev/shm``, shared anonymous mappings) is swap-backed:
v1 counts it in ``anon``, v2 in ``file`` and again in ``shmem``. Only v1's
``file`` and v2's ``file`` - ``shmem`` are reclaimable page cache.

``total`` is the container's user memory on the node in both formats, huge
pages included. Outside bytes are the ``total`` on nodes not assigned; the
share is outside / all ``total`` (0 when the container has no memory).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from numamem.metacache.metrics.numastat import V1_FORMAT, NumaStat

TOTAL = "total"
HUGETLB_PREFIX = "hugetlb_"
_MEMCG_HUGETLB = "hugetlb"
_V1_TYPES = ("total", "file", "anon", "unevictable")
_EVENT_PREFIX = "workingset_"


@dataclass(frozen=True)
class Residency:
    """One container's memory per node, compared with its assignment."""

    assigned: frozenset[int]
    nodes: Mapping[int, Mapping[str, int]]
    """Node -> memory type -> bytes, for every node the kernel listed (``total`` in each)."""
    total_bytes: int
    outside_bytes: int
    outside_share: float
    enforced: frozenset[int] | None
    """The ``cpuset.mems`` the kernel enforces; None when it cannot be read (no controller)."""

    @property
    def cpuset_matches(self) -> bool | None:
        """Whether the enforced ``cpuset.mems`` equals the assignment (None: unknown)."""
        return None if self.enforced is None else self.enforced == self.assigned


def memory_types(
    stat: NumaStat, hugetlb: Mapping[str, Mapping[int, int]] | None = None
) -> dict[str, dict[int, int]]:
    """Memory type -> node -> bytes, ``total`` included (see the module docstring);
    ``hugetlb`` is huge page size -> node -> bytes (the hugetlb controller's files)."""
    types: dict[str, dict[int, int]] = {}
    if stat.format == V1_FORMAT:
        for name in _V1_TYPES:
            line = stat.lines.get(f"hierarchical_{name}", stat.lines.get(name))
            if line is not None:
                types[name] = dict(line)
        if TOTAL not in types:
            nodes = {n for t in types.values() for n in t}
            types[TOTAL] = {n: sum(t.get(n, 0) for t in types.values()) for n in nodes}
    else:
        for name, line in stat.lines.items():
            if not name.startswith(_EVENT_PREFIX):
                types[name] = dict(line)
        anon, file = types.get("anon", {}), types.get("file", {})
        types[TOTAL] = {n: anon.get(n, 0) + file.get(n, 0) for n in sorted({*anon, *file})}
    huge = {f"{HUGETLB_PREFIX}{size}": dict(line) for size, line in (hugetlb or {}).items()}
    types.update(huge)
    counted = list(huge.values()) if huge else [types.get(_MEMCG_HUGETLB, {})]
    total = types[TOTAL]
    for line in counted:
        for node, value in line.items():
            total[node] = total.get(node, 0) + value
    types[TOTAL] = dict(sorted(total.items()))
    return types


def residency(
    assigned: frozenset[int],
    stat: NumaStat,
    enforced: frozenset[int] | None,
    hugetlb: Mapping[str, Mapping[int, int]] | None = None,
) -> Residency:
    """The container's :class:`Residency`: bytes per node and type, outside bytes and share
    (``hugetlb``: :func:`~numamem.metacache.metrics.cgroup.read_hugetlb_numa_stats`)."""
    types = memory_types(stat, hugetlb)
    nodes: dict[int, dict[str, int]] = {}
    for name in sorted(types):
        for node, value in types[name].items():
            nodes.setdefault(node, {})[name] = value
    for per_type in nodes.values():
        per_type.setdefault(TOTAL, 0)
    totals = {node: per_type[TOTAL] for node, per_type in nodes.items()}
    total = sum(totals.values())
    outside = sum(v for node, v in totals.items() if node not in assigned)
    return Residency(
        assigned,
        {node: nodes[node] for node in sorted(nodes)},
        total,
        outside,
        outside / total if total else 0.0,
        enforced,
    )
