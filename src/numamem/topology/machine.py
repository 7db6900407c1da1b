"""A plain, immutable description of the machine's NUMA nodes.

Built once at start-up by :mod:`numamem.topology.sysfs` (or as a literal in
tests) and shared read-only by every component; it is never refreshed, like
cadvisor's MachineInfo in the kubelet.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from numamem.quantity import Format, Quantity


def hugepage_resource_name(page_size_kb: int) -> str:
    """Kubernetes resource name of a hugepage size: 2048 -> ``hugepages-2Mi``."""
    return "hugepages-" + str(Quantity.from_int(page_size_kb * 1024, Format.BINARY_SI))


@dataclass(frozen=True, slots=True)
class HugePagePool:
    """Hugepages of one size on one node, as read at start-up."""

    page_size_kb: int
    total_pages: int
    free_pages: int

    @property
    def page_size_bytes(self) -> int:
        return self.page_size_kb * 1024

    @property
    def total_bytes(self) -> int:
        return self.total_pages * self.page_size_kb * 1024

    @property
    def resource_name(self) -> str:
        return hugepage_resource_name(self.page_size_kb)


@dataclass(frozen=True, slots=True)
class NUMANode:
    """One NUMA node: MemTotal (bytes, includes hugepage memory), hugepages, CPUs, distances."""

    id: int
    memory_bytes: int
    hugepages: tuple[HugePagePool, ...] = ()
    cpus: tuple[int, ...] = ()
    distances: tuple[int, ...] = ()
    generic_initiator: bool = False
    """Listed in ``has_generic_initiator`` (an accelerator or NIC that initiates memory access)."""
    memory_tier: int | None = None
    """The kernel's memory tier id (``memory_tiering/memory_tier<T>``), when it has tiers."""

    @property
    def has_cpus(self) -> bool:
        """False for memory-only nodes (GPU memory, CXL expanders, HBM)."""
        return bool(self.cpus)


@dataclass(frozen=True)
class Machine:
    """The NUMA nodes in ascending id order (the kernel's ids, which may be sparse).

    ``memory_capacity`` is the node's memory capacity as ``/proc/meminfo`` reports
    it (the kubelet's node capacity, which percentage eviction thresholds apply
    to); it can differ from the sum over NUMA nodes (ballooned VMs). None means
    the sum.
    """

    nodes: tuple[NUMANode, ...]
    memory_capacity: int | None = None
    warnings: tuple[str, ...] = ()
    """What discovery found suspicious but usable (logged at start, shown by GetMachineInfo)."""

    def __post_init__(self) -> None:
        ids = [n.id for n in self.nodes]
        if ids != sorted(set(ids)):
            raise ValueError(f"NUMA node ids must be unique and ascending, got {ids}")

    @cached_property
    def node_ids(self) -> tuple[int, ...]:
        return tuple(n.id for n in self.nodes)

    @cached_property
    def _by_id(self) -> dict[int, NUMANode]:
        return {n.id: n for n in self.nodes}

    def node(self, node_id: int) -> NUMANode:
        return self._by_id[node_id]

    def has_node(self, node_id: int) -> bool:
        return node_id in self._by_id

    @cached_property
    def hugepage_resources(self) -> tuple[str, ...]:
        """Every hugepage resource name any node reports, sorted by page size."""
        sizes = sorted({p.page_size_kb for n in self.nodes for p in n.hugepages})
        return tuple(hugepage_resource_name(s) for s in sizes)

    @cached_property
    def total_memory_bytes(self) -> int:
        return sum(n.memory_bytes for n in self.nodes)

    @property
    def memory_capacity_bytes(self) -> int:
        return self.memory_capacity if self.memory_capacity is not None else self.total_memory_bytes

    @cached_property
    def _position(self) -> dict[int, int]:
        return {n.id: i for i, n in enumerate(self.nodes)}

    def distance(self, a: int, b: int) -> int | None:
        """Distance from node ``a`` to ``b`` (by position in the distance row), or None."""
        row = self.node(a).distances
        index = self._position[b]
        return row[index] if index < len(row) else None

    @cached_property
    def has_distances(self) -> bool:
        return all(len(n.distances) >= len(self.nodes) for n in self.nodes)
