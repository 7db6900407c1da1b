"""Machine-state arithmetic of the Static policy: the default state, replay, reserve and release.

Pure functions on :data:`~numamem.memtypes.MachineState` values (they mutate
the state they are given, as the kubelet's do); the policy calls them on a
transaction's copy.

* :func:`default_machine_state` is ``getDefaultMachineState``;
* :func:`replay_assignments` is the replay half of ``validateState``;
* :func:`update_machine_state` reserves a block, lowest node first;
* :func:`release_memory` gives it back;
* :func:`machine_states_equal` is ``areMachineStatesEqual``;
* the group rules (``isAffinityViolatingNUMAAllocations``) and
  ``isAffinitySatisfyRequest``.

Deliberate deviations (each raises a clear error or behaves sanely where Go
would wrap around or panic): a reservation or hugepage total larger than a
node's memory is a :class:`~numamem.errors.ReservedMemoryError`; a memory type
missing on one node of a group counts as 0 there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from numamem.errors import ReservedMemoryError, StateMismatchError
from numamem.memorymanager.state.differences import container_owner
from numamem.memorymanager.state.reserved import SystemReservedMemory
from numamem.memtypes import MEMORY, Block, MachineState, MemoryTable, NUMANodeState
from numamem.quantity import format_bytes_exact
from numamem.topology import Machine
from numamem.topologymanager import bitmask


def default_machine_state(machine: Machine, system_reserved: SystemReservedMemory) -> MachineState:
    """``getDefaultMachineState``; refuses reservations larger than a node's memory."""
    state: MachineState = {}
    for node in machine.nodes:
        reserved = system_reserved.get(node.id, {})
        memory_map: dict[str, MemoryTable] = {}
        hugepages_total = 0
        for pool in node.hugepages:
            name = pool.resource_name
            sr = reserved.get(name, 0)
            total = pool.total_bytes
            if sr > total:
                raise ReservedMemoryError(
                    f"[memorymanager] NUMA node {node.id}: reserved {name} {format_bytes_exact(sr)} "
                    f"exceeds the node's {name} total {format_bytes_exact(total)}; fix "
                    "reservedMemory or the hugepage count"
                )
            memory_map[name] = MemoryTable(total, sr, total - sr, 0, total - sr)
            hugepages_total += total
        sr = reserved.get(MEMORY, 0)
        allocatable = node.memory_bytes - sr - hugepages_total
        if allocatable < 0:
            raise ReservedMemoryError(
                f"[memorymanager] NUMA node {node.id}: reserved memory {format_bytes_exact(sr)} "
                f"plus hugepages {format_bytes_exact(hugepages_total)} exceed the node's MemTotal "
                f"{format_bytes_exact(node.memory_bytes)}; fix reservedMemory or the hugepage count"
            )
        memory_map[MEMORY] = MemoryTable(node.memory_bytes, sr, allocatable, 0, allocatable)
        state[node.id] = NUMANodeState(0, memory_map, [node.id])
    return state


def replay_assignments(
    expected: MachineState, assignments: Mapping[str, Mapping[str, Sequence[Block]]]
) -> None:
    """Reserve every stored block on ``expected`` (a default state), as ``validateState`` does."""
    for pod_uid, containers in assignments.items():
        for container_name, blocks in containers.items():
            for block in blocks:
                remaining = block.size
                for node_id in block.numa_affinity or ():
                    node = expected.get(node_id)
                    if node is None:
                        raise StateMismatchError(
                            f"[memorymanager] {container_owner(pod_uid, container_name)} the memory "
                            "assignment uses the NUMA that does not exist"
                        )
                    node.number_of_assignments += 1
                    node.cells = list(block.numa_affinity or ())
                    table = (node.memory_map or {}).get(block.type)
                    if table is None:
                        raise StateMismatchError(
                            f"[memorymanager] {container_owner(pod_uid, container_name)} the memory "
                            "assignment uses memory resource that does not exist"
                        )
                    remaining = reserve_on(table, remaining)


def node_state(machine_state: Mapping[int, NUMANodeState | None], node_id: int) -> NUMANodeState:
    node = machine_state.get(node_id)
    if node is None:
        raise StateMismatchError(f"[memorymanager] NUMA node {node_id} has no state")
    return node


def copy_for_write(
    machine_state: Mapping[int, NUMANodeState | None], nodes: Iterable[int]
) -> MachineState:
    """A new machine state that shares every node state except those of ``nodes``, which are
    copied: what the caller may change. The states shared with ``machine_state`` must not be
    mutated through either mapping."""
    out = dict(machine_state)
    for n in set(nodes):
        node = out.get(n)
        if node is not None:
            out[n] = node.copy()
    return out


def reserve_on(table: MemoryTable, size: int) -> int:
    """Take up to ``size`` from one node's table; returns what is left to place."""
    if size == 0 or table.free <= 0:
        return size
    if table.free >= size:
        table.reserved += size
        table.free -= size
        return 0
    size -= table.free
    table.reserved += table.free
    table.free = 0
    return size


def update_machine_state(
    machine_state: MachineState, bits: Sequence[int], name: str, size: int
) -> None:
    """``updateMachineState``: count the block on every node, set the group, fill lowest node first."""
    for node_id in bits:
        node = node_state(machine_state, node_id)
        node.number_of_assignments += 1
        node.cells = list(bits)
        table = (node.memory_map or {}).get(name)
        if table is not None:
            size = reserve_on(table, size)


def release_memory(machine_state: MachineState, blocks: Sequence[Block]) -> None:
    """The release half of ``RemoveContainer``: lowest node first; dissolved nodes get cells=[self]."""
    for block in blocks:
        size = block.size
        for node_id in block.numa_affinity or ():
            node = node_state(machine_state, node_id)
            node.number_of_assignments -= 1
            if node.number_of_assignments == 0:
                node.cells = [node_id]
            if size == 0:
                continue
            table = (node.memory_map or {}).get(block.type)
            if table is None or table.reserved == 0:
                continue
            if table.reserved < size:
                size -= table.reserved
                table.free += table.reserved
                table.reserved = 0
                continue
            table.free += size
            table.reserved -= size
            size = 0


def group_conflict(
    machine_state: Mapping[int, NUMANodeState | None], bits: Sequence[int]
) -> int | None:
    """The first node a multi-node mask may not use, or None.

    A multi-node mask may use a node only if it is unused or already in exactly this group.
    """
    for n in bits:
        node = node_state(machine_state, n)
        if node.number_of_assignments > 0:
            cells = node.cells or []
            if len(cells) == 1 or sorted(cells) != list(bits):
                return n
    return None


def violates_numa_allocations(machine_state: Mapping[int, NUMANodeState | None], mask: int) -> bool:
    """``isAffinityViolatingNUMAAllocations``, with upstream quirk 2 fixed.

    Upstream never rejects a single-node mask, so a node already in a multi-NUMA
    group can get a single-node block too ("joint groups", #113035): groups
    overlap and their sums stop meaning anything. numamem rejects it; such masks
    come from a topology-manager affinity (pod scope with init containers, or a
    merge with other providers), never from the policy's own hints.
    """
    bits = bitmask.get_bits(mask)
    if len(bits) == 1:
        node = node_state(machine_state, bits[0])
        return node.number_of_assignments > 0 and len(node.cells or ()) > 1
    return group_conflict(machine_state, bits) is not None


def affinity_satisfies(
    machine_state: Mapping[int, NUMANodeState | None], mask: int, requested: Mapping[str, int]
) -> bool:
    """``isAffinitySatisfyRequest``: free memory only (reusable init memory is not counted)."""
    bits = bitmask.get_bits(mask)
    for name, size in requested.items():
        free = 0
        for n in bits:
            node = machine_state.get(n)
            table = None if node is None else (node.memory_map or {}).get(name)
            free += 0 if table is None else table.free
        if free < size:
            return False
    return True


def machine_states_equal(actual: MachineState, expected: MachineState) -> bool:
    """``areMachineStatesEqual``: structure and totals exactly; free/reserved as group sums."""
    if set(actual) != set(expected):
        return False
    for node_id, a in actual.items():
        e = expected[node_id]
        if a is None or e is None:
            if a is not e:
                return False
            continue
        if a.number_of_assignments != e.number_of_assignments:
            return False
        if sorted(a.cells or []) != sorted(e.cells or []):
            return False
        a_map, e_map = a.memory_map or {}, e.memory_map or {}
        if set(a_map) != set(e_map):
            return False
        for name, at in a_map.items():
            et = e_map[name]
            if (at.total, at.system_reserved, at.allocatable) != (
                et.total,
                et.system_reserved,
                et.allocatable,
            ):
                return False
            sums = [0, 0, 0, 0]
            for cell in a.cells or []:
                # A group member without this type contributes nothing (Go would
                # dereference a nil table).
                for offset, ms in ((0, actual), (2, expected)):
                    cell_node = ms.get(cell)
                    table = None if cell_node is None else (cell_node.memory_map or {}).get(name)
                    if table is not None:
                        sums[offset] += table.free
                        sums[offset + 1] += table.reserved
            if sums[0] != sums[2] or sums[1] != sums[3]:
                return False
    return True
