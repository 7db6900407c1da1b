"""The memory manager's state invariants, checked by tests, the crash harness and ``state verify``.

1. Per node and type: ``reserved + free == allocatable``; ``allocatable ==
   total - systemReserved`` (for ``memory`` also minus the node's hugepage totals).
2. Per node: ``numberOfAssignments`` equals the number of blocks whose affinity
   contains the node.
3. Groups are disjoint: a node with assignments has ``cells`` equal to the
   affinity of every block on it; a node without has ``cells == [self]``.
4. Per group and type: the reserved sum over the group equals the sizes of the
   blocks whose affinity is exactly that group.
5. Every node a block names has a table of the block's type (validateState: "the memory
   assignment uses memory resource that does not exist").

A pod allocated as a whole (pod-level resources, KEP-5526) counts by its pod-level
blocks, not its containers' (which partition them); its pod-level entry needs
container entries, and its containers' blocks lie on the pod's nodes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from numamem.memorymanager.requests.podlevel import accounted_assignments
from numamem.memtypes import MEMORY, Block, NUMANodeState


def violations(
    machine_state: Mapping[int, NUMANodeState | None],
    assignments: Mapping[str, Mapping[str, Sequence[Block]]],
    pod_entries: Mapping[str, Sequence[Block]] | None = None,
) -> list[str]:
    """Every broken invariant as one line; [] when the state is consistent."""
    problems: list[str] = []
    for pod, pod_blocks in sorted((pod_entries or {}).items()):
        if not assignments.get(pod):
            problems.append(f"pod {pod}: pod-level entry without container entries")
        nodes = {n for b in pod_blocks for n in b.numa_affinity or ()}
        for ctr, blocks in sorted(assignments.get(pod, {}).items()):
            outside = {n for b in blocks for n in b.numa_affinity or ()} - nodes
            if outside:
                problems.append(
                    f"pod {pod} container {ctr}: blocks on nodes {sorted(outside)} outside the "
                    f"pod-level allocation {sorted(nodes)}"
                )
    assignments = accounted_assignments(assignments, pod_entries or {})
    counts: dict[int, int] = defaultdict(int)
    groups: dict[int, set[tuple[int, ...]]] = defaultdict(set)
    block_sums: dict[tuple[tuple[int, ...], str], int] = defaultdict(int)
    for pod, ctrs in assignments.items():
        for ctr, blocks in ctrs.items():
            for b in blocks:
                affinity = tuple(sorted(b.numa_affinity or ()))
                for n in affinity:
                    if n not in machine_state:
                        problems.append(
                            f"pod {pod} container {ctr}: block on unknown NUMA node {n}"
                        )
                    elif _lacks(machine_state[n], b.type):
                        problems.append(
                            f"pod {pod} container {ctr}: {b.type} block on NUMA node {n}, "
                            f"which has no {b.type}"
                        )
                    counts[n] += 1
                    groups[n].add(affinity)
                block_sums[(affinity, b.type)] += b.size

    for node_id, node in sorted(machine_state.items()):
        if node is None:
            problems.append(f"node {node_id}: state is null")
            continue
        tables = node.memory_map or {}
        hugepages_total = sum(t.total for name, t in tables.items() if name != MEMORY)
        for name, t in sorted(tables.items()):
            if t.reserved + t.free != t.allocatable:
                problems.append(
                    f"node {node_id} {name}: reserved {t.reserved} + free {t.free} != allocatable {t.allocatable}"
                )
            expected = t.total - t.system_reserved - (hugepages_total if name == MEMORY else 0)
            if t.allocatable != expected:
                problems.append(f"node {node_id} {name}: allocatable {t.allocatable} != {expected}")
            if t.reserved < 0 or t.free < 0:
                problems.append(f"node {node_id} {name}: negative reserved/free")
        if node.number_of_assignments != counts.get(node_id, 0):
            problems.append(
                f"node {node_id}: numberOfAssignments {node.number_of_assignments} != "
                f"{counts.get(node_id, 0)} blocks"
            )
        cells = tuple(sorted(node.cells or ()))
        node_groups = groups.get(node_id, set())
        if not node_groups:
            if cells != (node_id,):
                problems.append(f"node {node_id}: unused but cells {list(cells)}")
        elif len(node_groups) > 1:
            problems.append(f"node {node_id}: in several groups {sorted(node_groups)}")
        elif cells != next(iter(node_groups)):
            problems.append(
                f"node {node_id}: cells {list(cells)} != block group {list(next(iter(node_groups)))}"
            )

    for (group, name), size in sorted(block_sums.items()):
        reserved = 0
        for n in group:
            node = machine_state.get(n)
            table = None if node is None else (node.memory_map or {}).get(name)
            reserved += 0 if table is None else table.reserved
        if reserved != size:
            problems.append(
                f"group {list(group)} {name}: reserved {reserved} != block sizes {size}"
            )
    for node_id in sorted(set(machine_state) - set(groups)):
        node = machine_state[node_id]
        for name, t in sorted(((node.memory_map or {}) if node else {}).items()):
            if t.reserved != 0:
                problems.append(f"node {node_id} {name}: reserved {t.reserved} without any block")
    return problems


def _lacks(node: NUMANodeState | None, name: str) -> bool:
    """The node (known, not null) has no table of memory type ``name``."""
    return node is not None and name not in (node.memory_map or {})
