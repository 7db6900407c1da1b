"""Init-container memory reuse (kubelet ``updatePodReusableMemory`` and
``updateInitContainersMemoryBlocks``).

A regular init container's memory is reused by the pod's later containers on
the same NUMA mask; sidecars (restartable init containers) are never reused.
The reuse table lives in the state (:meth:`~numamem.memorymanager.state.State.set_reusable_memory`),
so transactions and readers see the table that belongs to their state.
"""

from __future__ import annotations

from collections.abc import Sequence

from numamem.memorymanager.state import ReuseTable, State
from numamem.memtypes import Block
from numamem.pod import Container, Pod
from numamem.topologymanager import bitmask


def update_reusable(state: State, pod: Pod, container: Container, blocks: Sequence[Block]) -> None:
    """``updatePodReusableMemory``: track only this pod; init containers add, others consume."""
    table: ReuseTable = {m: dict(t) for m, t in state.get_reusable_memory(pod.uid).items()}
    if pod.is_regular_init_container(container.name):
        for block in blocks:
            per_type = table.setdefault(bitmask.new_mask(block.numa_affinity or ()), {})
            if block.size > per_type.get(block.type, 0):
                per_type[block.type] = block.size
    else:
        for block in blocks:
            consumed = table.get(bitmask.new_mask(block.numa_affinity or ()))
            if consumed is None:
                continue
            reusable = consumed.get(block.type, 0)
            if reusable != 0:
                consumed[block.type] = 0 if block.size >= reusable else reusable - block.size
    state.set_reusable_memory(pod.uid, table)


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
