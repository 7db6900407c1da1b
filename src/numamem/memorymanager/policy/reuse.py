"""Init-container memory reuse (kubelet ``updatePodReusableMemory`` and
``updateInitContainersMemoryBlocks``).

A regular init container's memory is reused by the pod's later containers on
the same NUMA mask; sidecars (restartable init containers) are never reused.

Deliberate deviation (found by the fuzzer, issue 31): the kubelet keeps a
reuse table in memory, for the last pod it allocated for only, while
``updateInitContainersMemoryBlocks`` charges every later container against the
*stored* init blocks. The two agree only when one pod's containers are
allocated in spec order, once each, without a restart, which is all the
kubelet does; numamem's API allows any order, so a container could reserve
more (or less) than the blocks account for, and a restart then refused
(``memory-drift-tolerance=off``) or re-baselined the state. Here the reusable
memory is what :func:`update_init_container_blocks` will charge
(:func:`reusable_memory`, derived from the stored blocks), so the reservation
always equals the blocks; in the kubelet's order it equals the kubelet's table.
"""

from __future__ import annotations

from collections.abc import Sequence

from numamem.memorymanager.state.model import State, StateReader
from numamem.memtypes import Block
from numamem.pod import Container, Pod
from numamem.topologymanager import bitmask

ReuseTable = dict[int, dict[str, int]]
"""NUMA mask -> memory type -> bytes a container may take from the pod's init containers."""


def reusable_memory(state: StateReader, pod: Pod, container: Container | None) -> ReuseTable:
    """The stored memory of ``pod``'s regular init containers before ``container`` in spec
    order (all of them for ``None``, the pod scope), per exact NUMA mask and type: what
    :func:`update_init_container_blocks` charges a block of ``container`` against.

    In the kubelet's order (each init container in spec order, then the others, each
    once) it equals the kubelet's ``initContainersReusableMemory`` of the pod."""
    table: ReuseTable = {}
    if state.get_pod_memory_blocks(pod.uid) is not None:
        return table  # allocated as a whole (KEP-5526): its budget is reserved once
    for init in pod.init_containers:
        if container is not None and init.name == container.name:
            break
        if init.restartable:
            continue
        for block in state.get_memory_blocks(pod.uid, init.name) or ():
            if block.size:
                per_type = table.setdefault(bitmask.new_mask(block.numa_affinity or ()), {})
                per_type[block.type] = per_type.get(block.type, 0) + block.size
    return table


def update_init_container_blocks(
    state: State, pod: Pod, container: Container, blocks: Sequence[Block]
) -> None:
    """``updateInitContainersMemoryBlocks``: charge ``blocks`` against earlier init containers."""
    for block in blocks:
        remaining = block.size
        for init in pod.init_containers:
            if init.name == container.name or remaining == 0:
                break
            if init.restartable:
                continue
            init_blocks = state.get_memory_blocks(pod.uid, init.name)
            if not init_blocks:
                continue
            for i, ib in enumerate(init_blocks):
                if ib.size == 0 or ib.type != block.type:
                    continue
                if set(ib.numa_affinity or ()) != set(block.numa_affinity or ()):
                    continue
                if ib.size > remaining:
                    init_blocks[i] = ib.with_size(ib.size - remaining)
                    remaining = 0
                else:
                    remaining -= ib.size
                    init_blocks[i] = ib.with_size(0)
            state.set_memory_blocks(pod.uid, init.name, init_blocks)
