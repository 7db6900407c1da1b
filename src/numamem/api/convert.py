"""Conversions between the memory manager's value types and the ``numamem.v1`` messages.

Both directions live here: the servicers build messages from core values, and
clients (:mod:`numamem.client`, the CLI, tests) read messages back into core
values. Every function copies; nothing returned aliases its argument.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from numamem.memorymanager.manager.forked import AdmitOutcome
from numamem.memorymanager.requests import podlevel
from numamem.memorymanager.search.space import HintSpace
from numamem.memtypes import Block, MachineState, MemoryTable, NUMANodeState
from numamem.pod import Pod
from numamem.topologymanager import bitmask
from numamem.topologymanager.hintfamily import Hint
from numamem.topologymanager.policy import NO_AFFINITY, ProviderHints
from numamem.v1 import memorymanager_pb2

if TYPE_CHECKING:
    from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

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


def add_blocks(
    field: RepeatedCompositeFieldContainer[memorymanager_pb2.MemoryBlock], blocks: Sequence[Block]
) -> None:
    """Append ``blocks`` to a repeated ``MemoryBlock`` field, each built in place (no message
    made and then copied in, as ``extend(blocks_to_proto(...))`` does)."""
    add = field.add
    for b in blocks:
        add(numa_affinity=b.numa_affinity or (), type=b.type, size=b.size)


def hint_to_proto(hint: Hint) -> memorymanager_pb2.TopologyHint:
    return memorymanager_pb2.TopologyHint(
        numa_nodes=mask_nodes(hint.affinity), preferred=hint.preferred
    )


PREFERRED_CEILING = 65536
"""Hints a list may grow to so that it holds every preferred hint (see ``TopologyHints``)."""
LIST_OVERHEAD = 64
"""Bytes a reply spends on one resource besides its hints (the map entry, its key, the counts)."""


def _varint_bytes(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


@functools.lru_cache(maxsize=1 << 16)
def hint_bytes(mask: int | None, preferred: bool) -> int:
    """The bytes one hint takes in a ``TopologyHints`` message (the entry and its tag)."""
    body = 0
    ids = mask_nodes(mask)
    if ids:
        payload = sum(_varint_bytes(i) for i in ids)
        body += 1 + _varint_bytes(payload) + payload  # packed numa_nodes
    if preferred:
        body += 2
    return 1 + _varint_bytes(body) + body


def hints_to_proto(
    hints: ProviderHints,
    limit: int,
    preferred_ceiling: int = PREFERRED_CEILING,
    max_bytes: int | None = None,
) -> memorymanager_pb2.GetTopologyHintsResponse:
    """The response for ``hints``: per resource the first ``limit`` hints in kubelet's order and
    every further preferred one (up to ``preferred_ceiling``), with the count of the rest.

    With ``max_bytes``, the hints of all resources together also stay within that many
    bytes (each resource gets an equal share; ``omitted`` counts what did not fit).
    A list that is the same object as an earlier type's is copied in C, not rebuilt (the
    Static policy gives every requested type the same hints).
    """
    resp = memorymanager_pb2.GetTopologyHintsResponse()
    present = [(name, lst) for name, lst in (hints or {}).items() if lst is not None]
    share = None
    if max_bytes is not None and present:
        share = max(max_bytes // len(present) - LIST_OVERHEAD - max(len(n) for n, _ in present), 0)
    built: list[tuple[object, memorymanager_pb2.TopologyHints]] = []
    for name, lst in present:
        target = resp.hints[name]
        same = next((msg for prev, msg in built if prev is lst), None)
        if same is not None:
            target.CopyFrom(same)
            continue
        if isinstance(lst, HintSpace):
            listed = lst.listed(limit, preferred_ceiling, hint_bytes, share)
            target.hints.extend(hint_to_proto(h) for h in listed.hints)
            target.omitted = listed.omitted
            target.omitted_is_lower_bound = not listed.omitted_exact
        else:
            hint_list = list(lst)
            kept = hint_list[:limit]
            if share is not None:
                spent = 0
                for i, h in enumerate(kept):
                    spent += hint_bytes(h.affinity, h.preferred)
                    if spent > share:
                        kept = kept[:i]
                        break
            target.hints.extend(hint_to_proto(h) for h in kept)
            target.omitted = len(hint_list) - len(kept)
        target.SetInParent()
        built.append((lst, target))
    return resp


def answer_to_proto(hints: ProviderHints, limit: int) -> dict[str, memorymanager_pb2.TopologyHints]:
    """A provider's answer with its nil lists kept (``no_preference``), for Explain."""
    out = dict(hints_to_proto(hints, limit, limit).hints)
    for name, lst in (hints or {}).items():
        if lst is None:
            out[name] = memorymanager_pb2.TopologyHints(no_preference=True)
    return out


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


def pod_entries_from_proto(resp: memorymanager_pb2.GetStateResponse) -> dict[str, list[Block]]:
    """The pod-level entries of a GetState answer (pods allocated as a whole, KEP-5526)."""
    return {
        pod: [Block(tuple(b.numa_affinity), b.type, b.size) for b in entry.pod_blocks.blocks]
        for pod, entry in resp.entries.items()
        if entry.HasField("pod_blocks")
    }


ISOLATION = {
    podlevel.HOST: memorymanager_pb2.RESOURCE_ISOLATION_HOST,
    podlevel.POD: memorymanager_pb2.RESOURCE_ISOLATION_POD,
    podlevel.CONTAINER: memorymanager_pb2.RESOURCE_ISOLATION_CONTAINER,
}


def pod_level_to_proto(plan: podlevel.Plan) -> memorymanager_pb2.PodLevelExplanation:
    return memorymanager_pb2.PodLevelExplanation(
        budget=plan.budget,
        exclusive=[
            memorymanager_pb2.ContainerRequest(container_name=name, requested=requested)
            for name, requested in plan.exclusive.items()
        ],
        shared=plan.shared,
        pool=plan.pool,
        rejection=plan.rejection,
    )


def admit_outcome_to_proto(pod: Pod, outcome: AdmitOutcome) -> memorymanager_pb2.AdmitResponse:
    result = outcome.result
    resp = memorymanager_pb2.AdmitResponse(
        admitted=result.admitted,
        result=memorymanager_pb2.ADMITTED if result.admitted else memorymanager_pb2.REJECTED,
        reason=result.reason,
        message=result.message,
    )
    if result.admitted:
        for ctr in pod.all_containers():
            why = outcome.unpinned.get(ctr.name)
            resp.containers.add(
                container_name=ctr.name,
                affinity=hint_to_proto(result.affinities.get(ctr.name, NO_AFFINITY)),
                blocks=blocks_to_proto(outcome.blocks.get(ctr.name, [])),
                not_pinned_reason=why.reason if why else "",
                not_pinned_message=why.message if why else "",
            )
        resp.pod_blocks.extend(blocks_to_proto(outcome.pod_blocks or []))
    return resp
