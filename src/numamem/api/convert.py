"""Conversions between the memory manager's value types and the ``numamem.v1`` messages.

Both directions live here: the servicers build messages from core values, and
clients (:mod:`numamem.client`, the CLI, tests) read messages back into core
values. Every function copies; nothing returned aliases its argument.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from numamem.memtypes import Block, MachineState, MemoryTable, NUMANodeState
from numamem.topologymanager import bitmask
from numamem.topologymanager.policy import ProviderHints, TopologyHint
from numamem.v1 import memorymanager_pb2

Assignments = dict[str, dict[str, list[Block]]]


@functools.lru_cache(maxsize=1 << 16)
def mask_nodes(mask: int | None) -> tuple[int, ...]:
    """The node ids of a hint's mask (cached: machines have few distinct masks)."""
    return () if mask is None else tuple(bitmask.get_bits(mask))


def blocks_to_proto(blocks: Sequence[Block]) -> list[memorymanager_pb2.MemoryBlock]:
    return [
        memorymanager_pb2.MemoryBlock(numa_affinity=b.numa_affinity or (), type=b.type, size=b.size)
        for b in blocks
    ]


def hint_to_proto(hint: TopologyHint) -> memorymanager_pb2.TopologyHint:
    return memorymanager_pb2.TopologyHint(
        numa_nodes=mask_nodes(hint.affinity), preferred=hint.preferred
    )


def hints_to_proto(hints: ProviderHints) -> memorymanager_pb2.GetTopologyHintsResponse:
    """The response for ``hints``; a list equal to an earlier type's is copied in C, not rebuilt
    (the Static policy gives every requested type the same hints)."""
    resp = memorymanager_pb2.GetTopologyHintsResponse()
    built: list[tuple[Sequence[TopologyHint], memorymanager_pb2.TopologyHints]] = []
    for name, lst in (hints or {}).items():
        if lst is None:
            continue
        target = resp.hints[name]
        same = next((msg for prev, msg in built if prev == lst), None)
        if same is not None:
            target.CopyFrom(same)
            continue
        target.hints.extend(hint_to_proto(h) for h in lst)
        target.SetInParent()
        built.append((lst, target))
    return resp


def node_state_to_proto(node: NUMANodeState) -> memorymanager_pb2.NUMANodeState:
    msg = memorymanager_pb2.NUMANodeState(
        number_of_assignments=max(node.number_of_assignments, 0), cells=node.cells or ()
    )
    for name, t in (node.memory_map or {}).items():
        msg.memory_map[name].CopyFrom(
            memorymanager_pb2.MemoryTable(
                total=t.total,
                system_reserved=t.system_reserved,
                allocatable=t.allocatable,
                reserved=t.reserved,
                free=t.free,
            )
        )
    return msg


def state_from_proto(resp: memorymanager_pb2.GetStateResponse) -> tuple[MachineState, Assignments]:
    """A GetState answer as the memory manager's own types (machine state, assignments)."""
    machine: MachineState = {
        node_id: NUMANodeState(
            node.number_of_assignments,
            {
                name: MemoryTable(t.total, t.system_reserved, t.allocatable, t.reserved, t.free)
                for name, t in node.memory_map.items()
            },
            list(node.cells),
        )
        for node_id, node in resp.machine_state.items()
    }
    assignments: Assignments = {
        pod: {
            ctr: [Block(tuple(b.numa_affinity), b.type, b.size) for b in blocks.blocks]
            for ctr, blocks in entry.containers.items()
        }
        for pod, entry in resp.entries.items()
    }
    return machine, assignments
