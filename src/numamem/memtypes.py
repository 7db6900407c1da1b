"""The memory manager's data as values: tables, node states, blocks, and what is persisted.

The shapes of the kubelet's memory manager ``state`` package, shared by the
core (:mod:`numamem.memorymanager`) and the kubelet checkpoint codec
(:mod:`numamem.checkpoint`), which is why they live below both. A
:data:`MachineState` maps NUMA ids to :class:`NUMANodeState` (assignment
count, one :class:`MemoryTable` per memory type, the ``cells`` group), and
assignments map pod uid -> container name -> blocks. Go's nil and empty are
kept apart (``None`` versus ``[]``/``{}``) because the checkpoint checksum
depends on the difference. :class:`Block` is immutable; tables and node states
are mutable and copied with :func:`clone_machine_state`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

MEMORY = "memory"
HUGEPAGES_PREFIX = "hugepages-"


def is_memory_resource(name: str) -> bool:
    """``memory`` or any ``hugepages-<size>`` (the types the memory manager pins)."""
    return name == MEMORY or name.startswith(HUGEPAGES_PREFIX)


@dataclass(slots=True)
class MemoryTable:
    """One memory type on one NUMA node. All sizes are bytes."""

    total: int
    system_reserved: int
    allocatable: int
    reserved: int
    free: int

    def copy(self) -> MemoryTable:
        return MemoryTable(
            self.total, self.system_reserved, self.allocatable, self.reserved, self.free
        )


@dataclass(slots=True)
class NUMANodeState:
    """``NUMANodeState``: ``memory_map``/``cells`` are None when Go's would be nil."""

    number_of_assignments: int
    memory_map: dict[str, MemoryTable] | None
    cells: list[int] | None

    def copy(self) -> NUMANodeState:
        memory_map = (
            None
            if self.memory_map is None
            # a decoded checkpoint may hold a nil table (Go's nil pointer); it stays None
            else {k: t if t is None else t.copy() for k, t in self.memory_map.items()}
        )
        return NUMANodeState(
            self.number_of_assignments, memory_map, None if self.cells is None else list(self.cells)
        )


MachineState = dict[int, NUMANodeState | None]
"""NUMA id -> node state (None where the checkpoint holds ``null``)."""


def clone_machine_state(ms: Mapping[int, NUMANodeState | None]) -> MachineState:
    """Deep copy (kubelet ``NUMANodeMap.Clone``)."""
    return {k: (None if v is None else v.copy()) for k, v in ms.items()}


@dataclass(frozen=True, slots=True)
class Block:
    """A memory block pinned to a NUMA affinity; ``numa_affinity`` None is Go's nil slice."""

    numa_affinity: tuple[int, ...] | None
    type: str
    size: int

    def with_size(self, size: int) -> Block:
        return Block(self.numa_affinity, self.type, size)


ContainerBlocks = tuple[Block, ...]
PodAssignments = Mapping[str, ContainerBlocks]
Assignments = Mapping[str, PodAssignments]
"""pod uid -> container name -> blocks."""


ContainerRef = tuple[str, str]
"""(pod uid, container name)."""


@dataclass(frozen=True)
class Snapshot:
    """Everything the memory manager persists. Stores must not mutate it.

    ``machine_state`` and ``assignments`` are the live committed structures
    (never mutated after commit), so building a snapshot copies nothing.
    """

    policy_name: str
    machine_state: Mapping[int, NUMANodeState | None]
    assignments: Mapping[str, Mapping[str, ContainerBlocks]]
    container_map: Mapping[str, ContainerRef] = field(default_factory=dict)
    pod_names: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """Pod uid -> (namespace, name) of pods with state, as their Pod messages gave them (for
    the podresources API, which names pods; the kubelet's file has only uids)."""
    pod_entries: Mapping[str, ContainerBlocks] = field(default_factory=dict)
    """Pod uid -> pod-level blocks (the kubelet's ``podEntries``, KEP-5526)."""
    exclusive: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Pod uid -> the containers of a pod allocated as a whole that hold memory of their own
    (numamem's record, kept beside the container map; not in the kubelet's file)."""
